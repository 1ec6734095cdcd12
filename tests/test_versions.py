"""Versioned results: a store written by a newer isobench is refused in one line, an older one is
migrated; a worker speaking another record version fails its cell with the reason."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from isobench.errors import UserError
from isobench.runner.execute import _ChannelReader
from isobench.store import sqlite as store_module
from isobench.store.sqlite import MIGRATIONS, SCHEMA_VERSION, STORE_FILE, Store
from isobench.workloads.channel import RECORD_VERSION
from tests.conftest import run_cli


def _store(directory: Path, version: str | None = None) -> Path:
    store = Store.create(directory, "name: s\n", "s", "s.yaml", {"hostname": "h"})
    if version is not None:
        store.set_meta("schema_version", version)
    store.close()
    return directory


@pytest.mark.parametrize("command", ["summary", "export", "report"])
def test_a_store_of_a_newer_isobench_is_refused(tmp_path: Path, command: str) -> None:
    directory = _store(tmp_path / "study", "999")
    out = run_cli(command, str(directory))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    line = lines[0]
    assert str(directory / STORE_FILE) in line
    assert "version 999" in line and f"version {SCHEMA_VERSION}" in line and "upgrade isobench" in line


def test_a_newer_store_is_not_touched(tmp_path: Path) -> None:
    directory = _store(tmp_path / "study", "999")
    with pytest.raises(UserError, match="newer isobench"):
        Store.open(directory)
    reopened = Store._connect(directory / STORE_FILE)
    assert reopened.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "999"
    reopened.close()


def test_a_store_of_this_version_opens(tmp_path: Path) -> None:
    store = Store.open(_store(tmp_path / "study"))
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    store.close()


def test_every_older_version_has_a_migration() -> None:
    assert set(MIGRATIONS) == set(range(1, SCHEMA_VERSION))


def test_an_older_store_is_migrated_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the next version will do it: a step from this version to the next runs once, with the
    new version number."""
    directory = _store(tmp_path / "study")
    steps: list[int] = []
    now, after = SCHEMA_VERSION, SCHEMA_VERSION + 1

    def step(conn: object) -> None:
        steps.append(now)
        conn.execute("ALTER TABLE cells ADD COLUMN note TEXT")  # type: ignore[attr-defined]

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", after)
    monkeypatch.setitem(MIGRATIONS, now, step)
    store = Store.open(directory)
    assert steps == [now] and store.meta("schema_version") == str(after)
    assert "note" in [row[1] for row in store.conn.execute("PRAGMA table_info(cells)")]
    store.close()
    Store.open(directory).close()
    assert steps == [now]


def test_a_failed_migration_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _store(tmp_path / "study")

    def broken(conn: object) -> None:
        conn.execute("ALTER TABLE cells ADD COLUMN note TEXT")  # type: ignore[attr-defined]
        raise RuntimeError("migration bug")

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(MIGRATIONS, SCHEMA_VERSION, broken)
    with pytest.raises(RuntimeError, match="migration bug"):
        Store.open(directory)
    monkeypatch.undo()
    store = Store.open(directory)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert "note" not in [row[1] for row in store.conn.execute("PRAGMA table_info(cells)")]
    store.close()


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_nonsense_store_version_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(UserError, match="schema version"):
        Store.open(_store(tmp_path / "study", value))


def _read(data: bytes) -> _ChannelReader:
    reader = _ChannelReader(io.BytesIO(data))
    reader.run()
    return reader


def test_a_worker_of_another_record_version_is_refused() -> None:
    reader = _read(b'{"type":"hello","version":999}\n{"type":"done","run_s":0.1}\n')
    assert reader.problem is not None
    assert "record version 999" in reader.problem and f"reads version {RECORD_VERSION}" in reader.problem
    assert reader.records == []


def test_a_worker_of_this_record_version_is_read() -> None:
    reader = _read(b'{"type":"hello","version":%d}\n{"type":"done","run_s":0.1}\n' % RECORD_VERSION)
    assert reader.problem is None and len(reader.records) == 2

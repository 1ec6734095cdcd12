"""The store's columnar layout (version 2): per-item times as one block per cell, an old row-layout
store migrated with identical results, commits that survive kill -9, and readers' caches that
follow writes made through another connection."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from isobench.store import Store
from isobench.store.sqlite import STORE_FILE, items_to_ipc
from tests.conftest import run_cli

#: a real store written by isobench with store schema version 1 (one row per item and phase), and
#: the comparisons that version's `summary --json` printed for it
ROW_LAYOUT = Path(__file__).parent / "data" / "store-v1"


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_row_layout_store_is_migrated_and_reads_the_same(tmp_path: Path) -> None:
    directory = tmp_path / "old"
    shutil.copytree(ROW_LAYOUT, directory)
    db = directory / STORE_FILE
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
        rows = conn.execute("SELECT cell_id, item, phase, seconds FROM phases").fetchall()
        metric_rows = sorted(conn.execute("SELECT cell_id, metric, value, unit FROM metrics"))
    assert rows and "phases" in _tables(db)

    out = run_cli("summary", "--json", str(directory), check=True)
    now = {(c["platform"], c["metric"]): c for c in json.loads(out.stdout) if "metric" in c}
    then = json.loads((ROW_LAYOUT / "comparisons-v1.json").read_text())
    for old in then:
        new = now[(old["platform"], old["metric"])]
        for key in ("n", "n_baseline", "verdict", "method"):
            assert new[key] == old[key], (old["platform"], old["metric"], key)
        for key in ("ratio", "ci_low", "ci_high"):
            assert new[key] == pytest.approx(old[key], rel=1e-12), (old["platform"], old["metric"], key)

    assert "phases" not in _tables(db) and "items" in _tables(db)
    store = Store.open(directory)
    assert store.meta("schema_version") == "2"
    migrated = {(cell_id, row["item"], phase): seconds
                for cell_id, table in store.items().items() for row in table.to_pylist()
                for phase, seconds in row.items() if phase != "item" and seconds is not None}
    assert migrated == {(cell_id, item, phase): seconds for cell_id, item, phase, seconds in rows}
    assert sorted(tuple(r) for r in store.conn.execute("SELECT cell_id, metric, value, unit FROM metrics")) \
        == metric_rows
    counts = store.item_counts()
    assert counts and all(store.items(cell_id)[cell_id].num_rows == n for cell_id, n in counts.items())
    store.close()
    report = run_cli("report", str(directory), "--format", "md", check=True)
    assert "wrote" in report.stderr


def test_a_cells_items_are_one_block_with_a_column_per_phase() -> None:
    from isobench.probes.base import ipc_to_table

    items = [{"i": 0, "e2e": 0.5, "phases": {"load": 0.1, "compute": 0.4}},
             {"i": 1, "e2e": 0.7, "phases": {"compute": 0.6, "e2e": 0.05}}]  # a script's own "e2e" phase
    table = ipc_to_table(items_to_ipc(items))
    assert table.column_names == ["item", "e2e", "load", "compute", "e2e (phase)"]
    assert table.to_pylist() == [{"item": 0, "e2e": 0.5, "load": 0.1, "compute": 0.4, "e2e (phase)": None},
                                 {"item": 1, "e2e": 0.7, "load": None, "compute": 0.6, "e2e (phase)": 0.05}]


def _outcome(cell_id: str, seq: int, items: int) -> Any:
    cell = SimpleNamespace(cell_id=cell_id, seq=seq, group="g", workload="w", workload_key="w", params={},
                           platform="baremetal", platform_key="baremetal", knobs={}, rep=seq, warmup=False)
    return SimpleNamespace(cell=cell, hello={}, status="ok", exit_code=0, error=None, stderr_tail="",
                           started_at=0.0, wall_s=1.0, startup_s=None, setup={}, done={}, probes=None,
                           platform_info={}, items=[{"i": i, "e2e": 0.001 * (i + 1), "phases": {"a": 0.001}}
                                                    for i in range(items)])


#: a child that records batches of cells for ever: 40 cells of 3,000 items per transaction, so a
#: commit takes long enough for a kill to land inside it
WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from isobench.store import Store
from test_store_layout import _outcome
store = Store.create(Path({out!r}), "name: s\\n", "s", "s.yaml", {{}}) if {create} else Store.open(Path({out!r}))
batch = {start}
while True:
    store.record_all([_outcome(f"b{{batch}}/c{{i}}", batch * 40 + i, 3000) for i in range(40)], "baremetal")
    print(batch, flush=True)
    batch += 1
"""


def test_kill_9_during_a_commit_loses_no_finished_batch_and_leaves_no_half(tmp_path: Path) -> None:
    out = tmp_path / "store"
    batches = 0
    for attempt in range(4):
        code = WRITER.format(tests=str(Path(__file__).parent), out=str(out), create=attempt == 0,
                             start=1000 * attempt)
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline(), "the writer never committed a batch"
        time.sleep(0.05 + 0.1 * attempt)  # somewhere inside a later batch's transaction
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        store = Store.open(out)
        cells = store.cells()
        by_batch: dict[str, int] = {}
        for cell in cells:
            by_batch[cell["cell_id"].split("/")[0]] = by_batch.get(cell["cell_id"].split("/")[0], 0) + 1
        assert set(by_batch.values()) == {40}, by_batch  # a batch is stored whole or not at all
        assert len(by_batch) > batches
        batches = len(by_batch)
        metrics, counts = store.metrics_by_cell(), store.item_counts()
        for cell in cells:  # every stored cell has its metrics and its whole item block
            assert "e2e" in dict((m, v) for m, v, _ in metrics[cell["cell_id"]])
            assert counts[cell["cell_id"]] == 3000
        store.close()


def test_readers_see_cells_another_connection_recorded(tmp_path: Path) -> None:
    writer = Store.create(tmp_path / "s", "name: s\n", "s", "s.yaml", {})
    reader = Store.open(tmp_path / "s")
    writer.record(_outcome("c1", 1, 5), "baremetal")
    assert [c["cell_id"] for c in reader.cells()] == ["c1"] and set(reader.metrics_by_cell()) == {"c1"}
    writer.record(_outcome("c2", 2, 5), "baremetal")  # another connection: the reader's memo must not hold
    assert [c["cell_id"] for c in reader.cells()] == ["c1", "c2"] and set(reader.metrics_by_cell()) == {"c1", "c2"}
    reader.record(_outcome("c3", 3, 5), "baremetal")  # its own write, too
    assert [c["cell_id"] for c in reader.cells()] == ["c1", "c2", "c3"]
    writer.close()
    reader.close()

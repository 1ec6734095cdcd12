"""The history database: a study's comparisons run after run, for ``isobench history``.

One small SQLite file that ``isobench run --history FILE`` appends to after each study. It holds
what the history needs and nothing of the cells: one row per run (its identity, start time and
directory) and one row per comparison point (its series key and a JSON record of its ratio,
interval and the facts it ran with). The records are plain dicts: what they mean is the
analysis' business (analysis/history.py), this module only keeps them.

meta's ``schema_version`` says which layout a file was written with; a newer one is refused in
one line (this isobench cannot know what a later layout means), as the study store does.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from isobench.errors import UserError

#: the layout below; bumped (with a migration) when it changes
HISTORY_SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    study TEXT NOT NULL,
    directory TEXT NOT NULL,
    started_at REAL NOT NULL,
    recorded_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS points (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    series TEXT NOT NULL,   -- the series key as canonical JSON
    record TEXT NOT NULL,   -- ratio, interval, verdict and facts as JSON
    PRIMARY KEY (run_id, series)
);
"""

FIX_READ = "give the file `isobench run --history FILE` wrote"


def _connect(path: Path) -> sqlite3.Connection:
    # the default rollback journal, not WAL: the history stays one file to copy or commit
    return sqlite3.connect(path, timeout=30, isolation_level=None)


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a file that is not a history database, or one a newer isobench wrote."""
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() \
            if "meta" in tables else None
    except sqlite3.DatabaseError as err:  # not an SQLite file at all
        raise UserError(f"cannot read it as an isobench history database ({err})", file=str(path),
                        fix=FIX_READ) from None
    if not tables:
        return  # an empty SQLite file: the first append lays out the tables
    if row is None or "runs" not in tables:
        raise UserError("not an isobench history database (it has no history tables)", file=str(path),
                        fix=FIX_READ + "; a result directory's isobench.sqlite goes without --history")
    try:
        version = int(row[0])
    except ValueError:
        raise UserError(f"the history's schema version {row[0]!r} is not a number", file=str(path),
                        fix=FIX_READ) from None
    if version > HISTORY_SCHEMA_VERSION:
        raise UserError(f"written by a newer isobench (history schema version {version}; this isobench "
                        f"reads up to version {HISTORY_SCHEMA_VERSION})", file=str(path),
                        fix="upgrade isobench to read it, or give another --history file")
    if version < 1:
        raise UserError(f"unknown history schema version {version}", file=str(path), fix=FIX_READ)


def _open_existing(path: Path) -> sqlite3.Connection:
    if path.is_dir():
        raise UserError("is a directory, not a history database", file=str(path),
                        fix="give a file (`--history history.sqlite`); result directories go as arguments")
    if not path.exists():
        raise UserError("no history database here", file=str(path),
                        fix="give the file `isobench run --history FILE` wrote, or result directories")
    try:
        conn = _connect(path)
    except sqlite3.Error as err:
        raise UserError(f"cannot open the history database ({err})", file=str(path), fix=FIX_READ) from None
    try:
        _check_version(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def is_history_file(path: Path) -> bool:
    """Whether ``path`` is a history database this isobench reads (for a hint on a misplaced argument)."""
    if not path.is_file():
        return False
    try:
        _open_existing(path).close()
    except UserError:
        return False
    return True


def check_appendable(path: Path) -> None:
    """Refuse, before a study runs, a history file the study could not be appended to: a newer or
    foreign file, a directory, a file in a directory that does not exist. Writes nothing."""
    if path.exists():
        _open_existing(path).close()
        return
    if not path.parent.is_dir():
        raise UserError("its directory does not exist", file=str(path), field="--history",
                        fix="give a file in a directory that exists (it is created on the first run)")


def append_run(path: Path, run: dict[str, Any], points: list[dict[str, Any]]) -> None:
    """Add one run and its points in one transaction; a run appended again (same ``run_id``, e.g.
    after ``--resume``) replaces its earlier record instead of counting twice.

    ``run``: run_id, study, directory, started_at; ``points``: {"series": [...], ...} records."""
    check_appendable(path)
    try:
        conn = _connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, SCHEMA.split(";")):  # executescript would commit first
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                         (str(HISTORY_SCHEMA_VERSION),))
            conn.execute("DELETE FROM points WHERE run_id = ?", (run["run_id"],))
            conn.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)",
                         (run["run_id"], run["study"], run["directory"], float(run["started_at"]), time.time()))
            conn.executemany("INSERT OR REPLACE INTO points VALUES (?, ?, ?)",
                             [(run["run_id"], json.dumps(point["series"], sort_keys=True),
                               json.dumps(point, sort_keys=True, default=str)) for point in points])
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise UserError(f"cannot write the history database ({err})", file=str(path), field="--history",
                        fix="give a file you may write, on a disk with room") from None


def load_runs(path: Path) -> list[dict[str, Any]]:
    """Every run of the history, each with its ``points`` (the records as appended), oldest first."""
    conn = _open_existing(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in tables:  # an empty file: no run yet
            return []
        runs: dict[str, dict[str, Any]] = {}
        for run_id, study, directory, started_at in conn.execute(
                "SELECT run_id, study, directory, started_at FROM runs ORDER BY started_at, run_id"):
            runs[run_id] = {"run_id": run_id, "study": study, "directory": directory, "started_at": started_at,
                            "points": []}
        for run_id, record in conn.execute("SELECT run_id, record FROM points ORDER BY run_id, series"):
            if run_id in runs:
                runs[run_id]["points"].append(json.loads(record))
        return list(runs.values())
    except (sqlite3.Error, ValueError) as err:
        raise UserError(f"the history database is damaged ({err})", file=str(path), fix=FIX_READ) from None
    finally:
        conn.close()

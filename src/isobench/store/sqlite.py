"""The study store.

One SQLite database (WAL) per study directory. A cell's row, its metrics and its per-item
times are written in one transaction when the cell finishes, so a ``kill -9`` at any moment
loses no finished cell; the cell id is the primary key, so no cell is ever recorded twice.

Per-item times are one columnar block per cell (``items``: an Arrow IPC stream, zstd, with a
column ``item`` and one column of seconds per phase, ``e2e`` first), not a row per item and
phase: a cell's thousands of values cost about 5 bytes each instead of about 110 with their
row and index (version 1 kept them as rows in ``phases``).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from isobench.errors import UserError

STORE_FILE = "isobench.sqlite"
#: the store's layout; meta's ``schema_version`` says which one a store was written with. A
#: store of an older version is migrated when opened (MIGRATIONS); a newer one is refused.
SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    cell_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    grp TEXT NOT NULL,
    workload TEXT NOT NULL,
    workload_key TEXT NOT NULL,
    params TEXT NOT NULL,
    platform TEXT NOT NULL,
    platform_key TEXT NOT NULL,
    display TEXT NOT NULL,
    knobs TEXT NOT NULL,
    rep INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    error TEXT,
    stderr_tail TEXT,
    started_at REAL NOT NULL,
    wall_s REAL NOT NULL,
    startup_s REAL,
    items INTEGER NOT NULL,
    inside TEXT,
    platform_info TEXT,
    recorded_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS metrics (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    PRIMARY KEY (cell_id, metric)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS items (
    cell_id TEXT PRIMARY KEY REFERENCES cells(cell_id),
    data BLOB NOT NULL  -- an Arrow IPC stream: item, e2e, one column per phase (items_to_ipc)
);
CREATE TABLE IF NOT EXISTS series (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    probe TEXT NOT NULL,
    name TEXT NOT NULL,
    data BLOB NOT NULL,  -- an Arrow IPC stream (isobench.probes.base.ipc_to_table)
    PRIMARY KEY (cell_id, probe, name)
);
"""


def items_to_ipc(items: list[dict[str, Any]]) -> bytes:
    """A cell's item records (``{"i", "e2e", "phases"}``) -> one Arrow IPC stream (zstd): column
    ``item``, then ``e2e``, then one float64 column per phase in first-seen order; a phase an item
    did not report is null; a phase called ``item`` or ``e2e`` becomes ``item (phase)``/``e2e (phase)``."""
    import pyarrow as pa

    names = list(dict.fromkeys(name for item in items for name in item["phases"]))
    columns: dict[str, Any] = {"item": pa.array([item["i"] for item in items], pa.int32()),
                               "e2e": pa.array([item["e2e"] for item in items], pa.float64())}
    for name in names:
        # a phase named like a fixed column (a script's own "e2e") is kept apart, not lost
        column = name if name not in columns else f"{name} (phase)"
        columns[column] = pa.array([item["phases"].get(name) for item in items], pa.float64())
    return _ipc(pa.table(columns))


def _ipc(table: Any) -> bytes:
    import io

    import pyarrow as pa

    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _to_2(conn: sqlite3.Connection) -> None:
    """Version 1 -> 2: each cell's rows in ``phases`` become one columnar block in ``items``;
    ``metrics`` loses its separate primary-key index (WITHOUT ROWID)."""
    import pyarrow as pa

    conn.execute("CREATE TABLE items (cell_id TEXT PRIMARY KEY REFERENCES cells(cell_id), data BLOB NOT NULL)")
    by_cell: dict[str, dict[int, dict[str, float]]] = {}
    for cell_id, item, phase, seconds in conn.execute("SELECT cell_id, item, phase, seconds FROM phases "
                                                      "ORDER BY cell_id, rowid"):
        by_cell.setdefault(cell_id, {}).setdefault(item, {})[phase] = seconds
    for cell_id, rows in by_cell.items():
        names = list(dict.fromkeys(name for phases in rows.values() for name in phases if name != "e2e"))
        columns: dict[str, Any] = {"item": pa.array(list(rows), pa.int32()),
                                   "e2e": pa.array([phases.get("e2e") for phases in rows.values()], pa.float64())}
        for name in names:
            columns[name] = pa.array([phases.get(name) for phases in rows.values()], pa.float64())
        conn.execute("INSERT INTO items VALUES (?, ?)", (cell_id, _ipc(pa.table(columns))))
    conn.execute("DROP TABLE phases")  # its index goes with it
    conn.execute("ALTER TABLE metrics RENAME TO metrics_v1")
    conn.execute("""CREATE TABLE metrics (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    PRIMARY KEY (cell_id, metric)
) WITHOUT ROWID""")
    conn.execute("INSERT INTO metrics SELECT cell_id, metric, value, unit FROM metrics_v1")
    conn.execute("DROP TABLE metrics_v1")


#: version v -> the step that turns a store of version v into one of version v + 1. The steps run
#: in one transaction with the new version number, before ``SCHEMA``: a step alters the tables
#: that exist; new tables and indexes come from ``SCHEMA``.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _to_2}


def cell_metrics(outcome: Any) -> list[tuple[str, float, str]]:
    """Summary metrics of one cell. Per-item times are means over the cell's items."""
    metrics: list[tuple[str, float, str]] = []
    items = outcome.items
    if items:
        e2e = [item["e2e"] for item in items]
        metrics.append(("e2e", statistics.fmean(e2e), "s"))
        ordered = sorted(e2e)
        metrics.append(("e2e.p50", ordered[len(ordered) // 2], "s"))
        metrics.append(("e2e.p99", ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], "s"))
        names = {name for item in items for name in item["phases"]}
        for name in sorted(names):
            values = [item["phases"].get(name, 0.0) for item in items]
            metrics.append((f"phase.{name}", statistics.fmean(values), "s"))
    for name, seconds in outcome.setup.items():
        metrics.append((f"setup.{name}", seconds, "s"))
    if outcome.done and outcome.done.get("run_s") is not None:
        metrics.append(("cell.run", outcome.done["run_s"], "s"))
    metrics.extend(workload_metrics(outcome.done))
    metrics.extend(process_fault_metrics(outcome.done))
    metrics.append(("cell.wall", outcome.wall_s, "s"))
    if outcome.startup_s is not None:
        metrics.append(("cell.startup", outcome.startup_s, "s"))
    probes = getattr(outcome, "probes", None)
    if probes is not None:
        metrics.extend(probes.metrics)
    return metrics


def workload_metrics(done: dict[str, Any] | None) -> list[tuple[str, float, str]]:
    """A workload's own summary numbers, ``done["metrics"]``: name -> number or [number, unit]."""
    rows = []
    for name, value in ((done or {}).get("metrics") or {}).items():
        number, unit = (value[0], str(value[1])) if isinstance(value, list | tuple) else (value, "")
        if isinstance(number, int | float) and not isinstance(number, bool) and number == number:
            rows.append((f"workload.{name}", float(number), unit))
    return rows


#: done-record key -> metric prefix: the worker's own page faults from its process's start, and
#: those of the measured window (workloads/channel.py, process_faults)
PROCESS_FAULTS = {"faults": "process.page_faults", "run_faults": "process.run.page_faults"}
#: the worker's own file reads over the measured window (workloads/channel.py, process_reads)
PROCESS_READS = {"bytes": ("process.run.read_bytes", "bytes"), "calls": ("process.run.read_calls", "calls")}


def process_fault_metrics(done: dict[str, Any] | None) -> list[tuple[str, float, str]]:
    """``process.page_faults_minor``/``_major`` (and ``process.run.*`` for the measured window),
    as the worker counted them itself: the same window on every platform, where a probe attaches
    to a container only after its start. None where the kernel keeps no counts (gVisor). And
    ``process.run.read_bytes``/``read_calls``: the worker's own file reads over the window."""
    rows = []
    reads = (done or {}).get("run_reads")
    if isinstance(reads, dict):
        for key, (name, unit) in PROCESS_READS.items():
            number = reads.get(key)
            if isinstance(number, int | float) and not isinstance(number, bool) and number >= 0:
                rows.append((name, float(number), unit))
    for key, prefix in PROCESS_FAULTS.items():
        counts = (done or {}).get(key)
        if not isinstance(counts, dict):
            continue
        for kind in ("minor", "major"):
            number = counts.get(kind)
            if isinstance(number, int | float) and not isinstance(number, bool) and number >= 0:
                rows.append((f"{prefix}_{kind}", float(number), "faults"))
    return rows


def stored_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version a store was written with. A store without one is of version 1: every
    isobench wrote the version since the first (only a run killed while creating its store
    left none)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as err:  # no meta table, or not an SQLite file at all
        if "no such table" in str(err):
            return 1
        raise UserError(f"not an isobench store ({err})", file=str(path),
                        fix="give the directory `isobench run --out` wrote") from None
    if row is None:
        return 1
    try:
        return int(row[0])
    except ValueError:
        raise UserError(f"the store's schema version {row[0]!r} is not a number", file=str(path),
                        fix="give the directory `isobench run --out` wrote") from None


def _upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a store of a newer isobench; migrate an older one to ``SCHEMA_VERSION``."""
    version = stored_version(conn, path)
    if version > SCHEMA_VERSION:
        raise UserError(f"written by a newer isobench (store schema version {version}; this isobench "
                        f"reads up to version {SCHEMA_VERSION})", file=str(path),
                        fix="upgrade isobench to open it")
    if version < 1:
        raise UserError(f"unknown store schema version {version}", file=str(path),
                        fix="give the directory `isobench run --out` wrote")
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](conn)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                     (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("VACUUM")  # give back the pages the old layout held (outside the transaction)


class Store:
    def __init__(self, directory: Path, conn: sqlite3.Connection) -> None:
        self.directory = directory
        self.conn = conn
        #: what readers derived from the store, and the state it was derived from (see memo)
        self._memo: dict[str, tuple[tuple[int, int], Any]] = {}

    def state(self) -> tuple[int, int]:
        """Changes whenever a cell is recorded, by this connection or any other."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes

    def memo(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per state of the store: an analysis reads the same cells,
        metrics and series from a dozen places, and at thousands of cells each read costs seconds.
        What it returns is shared between callers: treat it as read-only."""
        state = self.state()
        found = self._memo.get(name)
        if found is None or found[0] != state:
            found = self._memo[name] = (state, build())
        return found[1]

    # -- opening ----------------------------------------------------------------------
    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.row_factory = sqlite3.Row
        return conn

    @classmethod
    def create(cls, directory: Path, study_text: str, study_name: str, study_file: str,
               fingerprint: dict[str, Any]) -> Store:
        directory.mkdir(parents=True, exist_ok=True)
        conn = cls._connect(directory / STORE_FILE)
        conn.executescript(SCHEMA)
        meta = {"schema_version": str(SCHEMA_VERSION), "study_yaml": study_text, "study_name": study_name,
                "study_file": study_file, "created_at": str(time.time()),
                "host": json.dumps(fingerprint, sort_keys=True)}
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
        conn.execute("COMMIT")
        return cls(directory, conn)

    @classmethod
    def open(cls, directory: Path) -> Store:
        path = directory / STORE_FILE
        if not path.exists():
            raise UserError("no isobench results here", file=str(directory),
                            fix="give the directory `isobench run --out` wrote")
        conn = cls._connect(path)
        try:
            _upgrade(conn, path)
        except BaseException:
            conn.close()
            raise
        conn.executescript(SCHEMA)  # idempotent: adds tables newer versions introduced
        return cls(directory, conn)

    @staticmethod
    def exists(directory: Path) -> bool:
        return (directory / STORE_FILE).exists()

    # -- meta ---------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def host(self) -> dict[str, Any]:
        return json.loads(self.meta("host") or "{}")

    # -- cells --------------------------------------------------------------------------
    def finished_ids(self) -> set[str]:
        """Cells that need no more running: all but those lost with their node (a cluster run),
        which a resumed run tries again."""
        return {row[0] for row in self.conn.execute("SELECT cell_id FROM cells WHERE status != 'lost'")}

    def record(self, outcome: Any, display: str) -> bool:
        """Write a finished cell atomically. Returns False if it was already recorded."""
        return self.record_all([outcome], display) == 1

    def record_all(self, outcomes: list[Any], display: str | list[str]) -> int:
        """Write cells in ONE transaction, so a tenant group (or a duet pair) is stored whole or
        not at all. ``display``: the platform's, or one per outcome (a duet's two platforms).

        Cells already stored are skipped; returns how many were written."""
        displays = display if isinstance(display, list) else [display] * len(outcomes)
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            written = 0
            for outcome, shown in zip(outcomes, displays, strict=True):
                row = self.conn.execute("SELECT status FROM cells WHERE cell_id = ?",
                                        (outcome.cell.cell_id,)).fetchone()
                if row is not None and row[0] == "lost" and outcome.status != "lost":
                    # a cell lost with its node, now run: the run replaces the record of the loss
                    self.conn.execute("DELETE FROM cells WHERE cell_id = ?", (outcome.cell.cell_id,))
                    row = None
                if row is None:
                    self._insert(outcome, shown)
                    written += 1
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return written

    def _insert(self, outcome: Any, display: str) -> None:
        cell = outcome.cell
        inside = outcome.hello.get("inside") if outcome.hello else None
        row = (cell.cell_id, cell.seq, cell.group, cell.workload, cell.workload_key,
               json.dumps(cell.params, sort_keys=True), cell.platform, cell.platform_key, display,
               json.dumps(cell.knobs, sort_keys=True), cell.rep, int(cell.warmup), outcome.status,
               outcome.exit_code, outcome.error, outcome.stderr_tail, outcome.started_at, outcome.wall_s,
               outcome.startup_s, len(outcome.items), json.dumps(inside, sort_keys=True),
               json.dumps(outcome.platform_info, sort_keys=True, default=str), time.time())
        self.conn.execute(f"INSERT INTO cells VALUES ({','.join('?' * len(row))})", row)
        if outcome.status == "ok":
            self.conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)",
                                  [(cell.cell_id, m, v, u) for m, v, u in cell_metrics(outcome)])
            if outcome.items:
                self.conn.execute("INSERT INTO items VALUES (?, ?)", (cell.cell_id, items_to_ipc(outcome.items)))
        probes = getattr(outcome, "probes", None)
        if probes is not None:  # raw series are kept for failed cells too: they often say why
            self.conn.executemany("INSERT INTO series VALUES (?, ?, ?, ?)",
                                  [(cell.cell_id, probe, name, blob)
                                   for (probe, name), blob in probes.series.items()])

    def cells(self, include_warmup: bool = False) -> list[dict[str, Any]]:
        """The cells in run order, their JSON fields parsed. Parsed once per state of the store
        (an analysis asks a dozen times; thousands of cells carry megabytes of JSON): each call
        gets its own dicts, but the parsed fields inside are shared, so treat them as read-only."""
        return [dict(row) for row in self.memo("cells", self._parsed_cells) if include_warmup or not row["warmup"]]

    def _parsed_cells(self) -> list[dict[str, Any]]:
        rows = []
        for row in self.conn.execute("SELECT * FROM cells ORDER BY seq"):
            record = dict(row)
            for key in ("params", "knobs", "inside", "platform_info"):
                record[key] = json.loads(record[key]) if record[key] else None
            rows.append(record)
        return rows

    def metrics_by_cell(self) -> dict[str, list[tuple[str, float, str]]]:
        """cell_id -> its (metric, value, unit) rows in metric order, read in one bulk pass (shared:
        read-only)."""
        return self.memo("metrics", self._metrics_by_cell)

    def _metrics_by_cell(self) -> dict[str, list[tuple[str, float, str]]]:
        found: dict[str, list[tuple[str, float, str]]] = {}
        rows = self.conn.execute("SELECT cell_id, metric, value, unit FROM metrics ORDER BY cell_id, metric")
        for cell_id, metric, value, unit in rows:
            own = found.get(cell_id)
            if own is None:
                own = found[cell_id] = []
            own.append((metric, value, unit))
        return found

    def metric_rows(self) -> Iterator[sqlite3.Row]:
        yield from self.conn.execute(
            "SELECT c.*, m.metric, m.value, m.unit FROM metrics m JOIN cells c USING (cell_id) "
            "ORDER BY c.seq, m.metric")

    def series(self, probe: str, name: str, cell_id: str | None = None) -> dict[str, Any]:
        """cell_id -> Arrow table of one probe series (all cells, or one). All cells' are decoded
        once per state of the store and shared (read-only)."""
        from isobench.probes.base import ipc_to_table

        query = "SELECT cell_id, data FROM series WHERE probe = ? AND name = ?"
        if cell_id is not None:
            memo = self._memo.get(f"series:{probe}:{name}")
            if memo is not None and memo[0] == self.state():
                return {cell_id: memo[1][cell_id]} if cell_id in memo[1] else {}
            return {row["cell_id"]: ipc_to_table(row["data"])
                    for row in self.conn.execute(query + " AND cell_id = ?", (probe, name, cell_id))}
        return self.memo(f"series:{probe}:{name}", lambda: {
            row["cell_id"]: ipc_to_table(row["data"]) for row in self.conn.execute(query, (probe, name))})

    def series_sample(self, probe: str, name: str) -> Any | None:
        """One cell's table of a series with rows (None if no cell's has any): what its columns are."""
        from isobench.probes.base import ipc_to_table

        memo = self._memo.get(f"series:{probe}:{name}")
        if memo is not None and memo[0] == self.state():
            return next((t for t in memo[1].values() if t.num_rows), None)
        for (blob,) in self.conn.execute("SELECT data FROM series WHERE probe = ? AND name = ?", (probe, name)):
            table = ipc_to_table(blob)
            if table.num_rows:
                return table
        return None

    def items(self, cell_id: str | None = None) -> dict[str, Any]:
        """cell_id -> Arrow table of the cell's per-item times (all cells that finished, or one):
        ``item``, ``e2e`` and one column of seconds per phase."""
        from isobench.probes.base import ipc_to_table

        query, args = "SELECT cell_id, data FROM items", ()
        if cell_id is not None:
            query, args = query + " WHERE cell_id = ?", (cell_id,)
        return {row[0]: ipc_to_table(row[1]) for row in self.conn.execute(query, args)}

    def item_counts(self) -> dict[str, int]:
        """cell_id -> how many items a finished cell measured (its per-item block's rows)."""
        return dict(self.conn.execute("SELECT cell_id, items FROM cells WHERE status = 'ok' AND items > 0 "
                                      "AND cell_id IN (SELECT cell_id FROM items)"))

    def series_names(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self.conn.execute("SELECT DISTINCT probe, name FROM series ORDER BY 1, 2")]

    def close(self) -> None:
        self.conn.close()

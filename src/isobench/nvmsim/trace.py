"""Write-back traces as columnar arrays.

CSV/Parquet format (one row per page-granular event, any order; sorted by time on load):

    time_s   float  seconds since any origin
    dev      str|int  block device or bdi name (optional, default 0)
    ino      int    inode number
    index    int    page index within the inode
    op       W|R    W: a page written back (default), R: a page read from storage
    tenant   int    which tenant's trace the row came from (optional)

Pages are keyed by (dev, ino, index) and renumbered densely, so simulators index arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

WRITE, READ = 0, 1


@dataclass
class Trace:
    time_s: np.ndarray  # float64, non-decreasing
    page: np.ndarray  # int64, dense ids 0..n_pages-1
    op: np.ndarray  # uint8, WRITE or READ
    tenant: np.ndarray  # int16
    n_pages: int

    def __len__(self) -> int:
        return len(self.time_s)

    def footprint(self) -> int:
        """Distinct pages written back (a page only read is not part of it)."""
        written = self.page[self.op != READ]
        return int(np.count_nonzero(np.bincount(written, minlength=1))) if len(written) else 0

    @classmethod
    def from_columns(cls, time_s: np.ndarray, keys: np.ndarray, op: np.ndarray | None = None,
                     tenant: np.ndarray | None = None) -> Trace:
        """``keys``: one hashable page key per event (ints, or a structured/object array)."""
        order = np.argsort(np.asarray(time_s, dtype=np.float64), kind="stable")
        _, page = np.unique(np.asarray(keys)[order], return_inverse=True)
        n = len(order)
        return cls(time_s=np.asarray(time_s, dtype=np.float64)[order], page=page.astype(np.int64).ravel(),
                   op=(np.zeros(n, np.uint8) if op is None else np.asarray(op, np.uint8)[order]),
                   tenant=(np.zeros(n, np.int16) if tenant is None else np.asarray(tenant, np.int16)[order]),
                   n_pages=int(page.max()) + 1 if n else 0)


def load(paths: list[Path]) -> Trace:
    """Load one trace, or several tenants' traces replayed together in time order (a page
    is the same page in every file that names the same dev, inode and index)."""
    import pyarrow as pa

    tables = []
    for number, path in enumerate(paths):
        table = _read_one(path)
        if "tenant" not in table.column_names:
            table = table.append_column("tenant", pa.array(np.full(table.num_rows, number, np.int16)))
        tables.append(table.select(sorted(table.column_names)))
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    return _from_table(table)


def _read_one(path: Path):  # type: ignore[no-untyped-def]
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path) if path.suffix == ".parquet" else pacsv.read_csv(path)
    except Exception as err:  # pyarrow raises its own error types for unreadable files
        raise ValueError(f"{path}: cannot read it as {'Parquet' if path.suffix == '.parquet' else 'CSV'}: "
                         f"{err}") from None
    missing = {"time_s", "ino", "index"} - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}")
    return table


def _from_table(table) -> Trace:  # type: ignore[no-untyped-def]
    columns = set(table.column_names)
    n = table.num_rows
    dev = table.column("dev").to_pylist() if "dev" in columns else [0] * n
    dev_ids = np.unique(np.asarray([str(d) for d in dev]), return_inverse=True)[1].astype(np.int64).ravel()
    ino = table.column("ino").to_numpy().astype(np.int64)
    index = table.column("index").to_numpy().astype(np.int64)
    keys = np.rec.fromarrays([dev_ids, ino, index], names="dev,ino,index")
    op = None
    if "op" in columns:
        # a file without the column (null after merging with one that has it) means write-backs
        raw = np.asarray(["W" if v is None else str(v).upper() for v in table.column("op").to_pylist()])
        bad = {str(v) for v in np.unique(raw)} - {"W", "R"}
        if bad:
            raise ValueError(f"column op has {sorted(bad)}; use W or R")
        op = (raw == "R").astype(np.uint8)
    tenant = table.column("tenant").to_numpy() if "tenant" in columns else None
    return Trace.from_columns(table.column("time_s").to_numpy(), keys, op, tenant)

"""Write-back traces captured by the ftrace probe, read from a study's store.

The probe's ``writeback`` series has one row per dirtied folio that was written back
(``time_s`` of the write-back, ``ino``, ``index``, ``pages`` in the folio, ``dev``, ``reason``,
``tgid``). It becomes a page-granular trace: a folio of N pages is N page write-backs at the
same time. The tenants of a multi-tenant cell (cells ``…/t0``, ``…/t1``, … run at once) are
merged in time order and replay as one trace; each tenant (and each process within a
single cell) keeps its own ``tenant`` number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from isobench.nvmsim.trace import WRITE, Trace


@dataclass
class CellTrace:
    cell_id: str
    workload: str
    platform: str
    columns: dict[str, np.ndarray]  # page-granular: time_s, dev, ino, index, op, tenant, reason
    trace: Trace


def pages_from_series(table: Any) -> dict[str, np.ndarray]:
    """Expand the probe's folio rows into one row per page, in time order."""
    n = table.num_rows
    # a trace from elsewhere may lack the folio size (one page), device or process (one each)
    defaults = {"dev": 0, "pages": 1, "reason": -1, "tgid": 0}
    data = {name: table.column(name).to_numpy() if name in table.column_names else np.full(n, defaults[name])
            for name in ("time_s", "dev", "ino", "index", "pages", "reason", "tgid")}
    pages = np.maximum(data["pages"].astype(np.int64), 1)
    row = np.repeat(np.arange(len(pages)), pages)
    within = np.arange(len(row)) - np.repeat(np.cumsum(pages) - pages, pages)
    _, tenant = np.unique(data["tgid"], return_inverse=True)
    columns = {"time_s": data["time_s"][row], "dev": data["dev"][row], "ino": data["ino"][row],
               "index": data["index"][row] + within, "op": np.full(len(row), WRITE, np.uint8),
               "tenant": tenant.astype(np.int16).ravel()[row], "reason": data["reason"][row]}
    order = np.argsort(columns["time_s"], kind="stable")
    return {name: values[order] for name, values in columns.items()}


def _merge(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    offset = 0
    for part in parts:  # tenants stay apart: renumber each part's processes after the previous part's
        part["tenant"] = (part["tenant"].astype(np.int16) + offset).astype(np.int16)
        offset = int(part["tenant"].max()) + 1 if len(part["tenant"]) else offset
    merged = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    order = np.argsort(merged["time_s"], kind="stable")
    return {name: values[order] for name, values in merged.items()}


def cell_traces(directory: Path, cell: str | None = None) -> list[CellTrace]:
    """Every stored cell with a captured write-back series (or only ``cell``); the tenants of a
    multi-tenant cell are merged into one (named without the ``/tN`` suffix)."""
    import re

    from isobench.store import Store

    store = Store.open(directory)
    try:
        described = {row["cell_id"]: row for row in store.cells(include_warmup=True)}
        groups: dict[str, list[dict[str, np.ndarray]]] = {}
        for cell_id, table in sorted(store.series("ftrace", "writeback").items()):
            group = re.sub(r"/t\d+$", "", cell_id)
            if cell is None or cell in (cell_id, group):
                groups.setdefault(group, []).append(pages_from_series(table))
        found = []
        for cell_id, parts in groups.items():
            columns = _merge(parts) if len(parts) > 1 else parts[0]
            keys = np.rec.fromarrays([columns["dev"], columns["ino"], columns["index"]], names="dev,ino,index")
            trace = Trace.from_columns(columns["time_s"], keys, columns["op"], columns["tenant"])
            row = described.get(cell_id) or described.get(f"{cell_id}/t0", {})
            found.append(CellTrace(cell_id, str(row.get("workload_key") or row.get("workload") or ""),
                                   str(row.get("display") or row.get("platform") or ""), columns, trace))
        return found
    finally:
        store.close()


def export_csv(traces: list[CellTrace], target: Path) -> list[Path]:
    """Write each cell's page-granular trace in the documented CSV format (``target`` is a file
    for one cell, else a directory with one file per cell)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    written = []
    for item in traces:
        path = target if len(traces) == 1 and target.suffix == ".csv" else \
            target / (item.cell_id.replace("/", "_").replace("@", "_").replace("~", "_") + ".csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        columns = dict(item.columns)
        columns["op"] = np.where(columns["op"] == WRITE, "W", "R")
        pacsv.write_csv(pa.table(columns), path)
        written.append(path)
    return written

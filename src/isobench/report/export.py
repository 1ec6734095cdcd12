"""Flat records, one per cell and metric, for other tools; and the comparisons in the Bencher
Metric Format (report/bmf.py)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from isobench.analysis.groups import host_of, versions_of
from isobench.report.plaintext import csv_cell
from isobench.store import Store

#: the version of the record's layout (FIELDS and their meaning), published with its JSON Schema
#: by `isobench schema export` (isobench.schema): raise it with any change to a field
EXPORT_VERSION = 2
FIELDS = ("study", "cell_id", "workload", "platform", "knobs", "rep", "metric", "value", "unit", "status", "host",
          "versions")


def _cell_facts(study: str | None, cell: dict[str, Any]) -> dict[str, Any]:
    """The fields a cell's records share, each worked out once per cell."""
    info = cell.get("platform_info")
    return {"study": study, "cell_id": cell["cell_id"], "workload": cell["workload_key"],
            "platform": cell["display"], "knobs": cell["knobs"], "rep": cell["rep"], "status": cell["status"],
            "host": host_of(info), "versions": versions_of(info)}


def _record_cells(store: Store) -> list[tuple[dict[str, Any], list[tuple[str, float, str]]]]:
    """(a cell's shared fields, its metric rows), in run order: every measured cell, then every cell
    that did not finish (as one ``cell.wall`` record, so failures are not silently dropped)."""
    study = store.meta("study_name")
    cells, metrics = store.cells(), store.metrics_by_cell()
    out = [(_cell_facts(study, cell), metrics[cell["cell_id"]]) for cell in cells if cell["cell_id"] in metrics]
    out += [(_cell_facts(study, cell), [("cell.wall", cell["wall_s"], "s")]) for cell in cells
            if cell["status"] != "ok"]
    return out


def records(store: Store) -> list[dict[str, Any]]:
    return [{**facts, "metric": metric, "value": value, "unit": unit}
            for facts, rows in _record_cells(store) for metric, value, unit in rows]


def export(store: Store, fmt: str, target: Path) -> Path:
    """Write the records to the file ``target``."""
    with target.open("wb") as fh:
        write(store, fmt, fh)
    return target


def _text(out: BinaryIO, fill: Callable[[io.TextIOWrapper], None]) -> None:
    """Text into the binary stream ``out``, which stays open for its owner (stdout's buffer)."""
    text = io.TextIOWrapper(out, encoding="utf-8", newline="")
    fill(text)
    text.flush()
    text.detach()


def _jsonl(store: Store, out: BinaryIO) -> None:
    def fill(text: io.TextIOWrapper) -> None:
        for row in records(store):
            text.write(json.dumps(row, sort_keys=True) + "\n")

    _text(out, fill)


def _csv(store: Store, out: BinaryIO) -> None:
    def fill(text: io.TextIOWrapper) -> None:
        writer = csv.DictWriter(text, fieldnames=FIELDS)
        writer.writeheader()
        for row in records(store):
            cells = {**row, "knobs": json.dumps(row["knobs"], sort_keys=True),
                     "versions": json.dumps(row["versions"], sort_keys=True)}
            writer.writerow({k: csv_cell(v) for k, v in cells.items()})  # "=HYPERLINK(..)" stays text

    _text(out, fill)


def _parquet(store: Store, out: BinaryIO) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Columnar: a cell's shared fields once per cell, spread to its rows by index (at thousands of
    # cells a dict per record cost seconds and gigabytes)
    cells = _record_cells(store)
    index = pa.array([i for i, (_, rows) in enumerate(cells) for _ in rows], pa.int32())
    shared = {name: pa.array([json.dumps(facts[name], sort_keys=True) if name in ("knobs", "versions")
                              else facts[name] for facts, _ in cells]) for name in FIELDS
              if name not in ("metric", "value", "unit")}
    columns = {name: shared[name].take(index) if name in shared else
               pa.array([row[("metric", "value", "unit").index(name)] for _, rows in cells for row in rows])
               for name in FIELDS}
    if not cells:
        columns = {name: pa.array([], pa.string()) for name in FIELDS}
    buffer = io.BytesIO()  # parquet's writer seeks; a pipe cannot
    pq.write_table(pa.table(columns), buffer)
    out.write(buffer.getvalue())
    out.flush()


def _bmf(store: Store, out: BinaryIO) -> None:
    """Not the records: one benchmark per comparison, for Bencher (report/bmf.py)."""
    from isobench.report.bmf import bmf_document

    _text(out, lambda text: text.write(json.dumps(bmf_document(store), indent=1) + "\n"))


#: format -> its writer; `isobench export --format` offers these names
WRITERS: dict[str, Callable[[Store, BinaryIO], None]] = {
    "jsonl": _jsonl, "csv": _csv, "parquet": _parquet, "bmf": _bmf}


def write(store: Store, fmt: str, out: BinaryIO) -> None:
    """Write ``fmt`` (a name in WRITERS) to the binary stream ``out`` (a file, or stdout's
    buffer: the stream need not seek)."""
    WRITERS[fmt](store, out)

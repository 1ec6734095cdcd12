"""Flat records, one per cell and metric, for other tools; and the comparisons in the Bencher
Metric Format (report/bmf.py)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from isobench.analysis.compare import host_of, versions_of
from isobench.report.plaintext import csv_cell
from isobench.store import Store

#: the version of the record's layout (FIELDS and their meaning), published with its JSON Schema
#: by `isobench schema export` (isobench.schema): raise it with any change to a field
EXPORT_VERSION = 2
FIELDS = ("study", "cell_id", "workload", "platform", "knobs", "rep", "metric", "value", "unit", "status", "host",
          "versions")


def records(store: Store) -> list[dict[str, Any]]:
    study = store.meta("study_name")
    rows: list[dict[str, Any]] = []
    for row in store.metric_rows():
        if row["warmup"]:
            continue
        rows.append({"study": study, "cell_id": row["cell_id"], "workload": row["workload_key"],
                     "platform": row["display"], "knobs": json.loads(row["knobs"]), "rep": row["rep"],
                     "metric": row["metric"], "value": row["value"], "unit": row["unit"],
                     "status": row["status"], "host": host_of(row["platform_info"]),
                     "versions": versions_of(row["platform_info"])})
    # Cells that produced no metrics still appear, so failures are not silently dropped.
    for cell in store.cells():
        if cell["status"] != "ok":
            rows.append({"study": study, "cell_id": cell["cell_id"], "workload": cell["workload_key"],
                         "platform": cell["display"], "knobs": cell["knobs"], "rep": cell["rep"],
                         "metric": "cell.wall", "value": cell["wall_s"], "unit": "s", "status": cell["status"],
                         "host": host_of(cell.get("platform_info")),
                         "versions": versions_of(cell.get("platform_info"))})
    return rows


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

    rows = records(store)
    columns = {name: [row[name] for row in rows] for name in FIELDS}
    for name in ("knobs", "versions"):
        columns[name] = [json.dumps(v, sort_keys=True) for v in columns[name]]
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

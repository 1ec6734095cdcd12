"""The workload counts its own file reads over the measured window (/proc/self/io, read inside the
cell, so gVisor counts the workload's reads and not its gofer's), and the data-path hint uses them:
a phase that reads no file data per item is not told to blame the data path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from isobench.analysis.summary import analyse
from isobench.store import Store
from tests import report_store
from tests.conftest import run_cli

STUDY = """\
name: reads
workloads:
  - {name: resnet-infer, params: {image_size: 32, requests: 12}}
  - {name: lenet-train, params: {steps: 12, batch_size: 16}}
platforms: [{name: baremetal}]
schedule: sequential
repetitions: 1
aa: false
warmup: 0
warmup_items: 2
min_seconds: null
"""


def test_each_cell_counts_the_file_reads_of_its_measured_items(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(STUDY)
    done = run_cli("run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with sqlite3.connect(tmp_path / "out" / "isobench.sqlite") as db:
        rows = {(w, m): v for w, m, v in db.execute(
            "SELECT c.workload_key, m.metric, m.value FROM metrics m JOIN cells c USING (cell_id) "
            "WHERE m.metric LIKE 'process.run.read_%'")}
        workload_of = dict(db.execute("SELECT cell_id, workload_key FROM cells"))
    store = Store.open(tmp_path / "out")
    items: dict[str, int] = {}
    for cell_id, table in store.items().items():
        items[workload_of[cell_id]] = items.get(workload_of[cell_id], 0) + table.num_rows
    store.close()
    # resnet-infer reads one small JPEG per request; lenet-train holds its data set in memory
    assert rows[("resnet-infer", "process.run.read_calls")] / items["resnet-infer"] >= 1
    assert rows[("resnet-infer", "process.run.read_bytes")] / items["resnet-infer"] > 500
    assert rows[("lenet-train", "process.run.read_calls")] / items["lenet-train"] < 0.5


@pytest.mark.parametrize(("calls_per_cell", "blamed"), [(1, False), (40, True)])
def test_the_data_path_is_blamed_only_where_the_items_read_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls_per_cell: int, blamed: bool) -> None:
    monkeypatch.setitem(report_store.EFFECT, "docker", {"fetch_stall": 2.5})
    known = report_store.build(tmp_path / "known")  # 4 items a cell
    with sqlite3.connect(known / "isobench.sqlite") as db:
        for (cell_id,) in db.execute("SELECT cell_id FROM cells").fetchall():
            db.execute("INSERT INTO metrics VALUES (?, 'process.run.read_bytes', ?, 'bytes')",
                       (cell_id, 300.0 * calls_per_cell))
            db.execute("INSERT INTO metrics VALUES (?, 'process.run.read_calls', ?, 'calls')",
                       (cell_id, float(calls_per_cell)))
    found = [h for h in analyse(Store.open(known), with_views=False).hints if h.rule == "data-path"]
    assert len(found) == 1 and found[0].status == "suspected", [h.text for h in found]
    assert ("may be slower" in found[0].text) is blamed, found[0].text
    assert (found[0].test is not None) is blamed
    if not blamed:
        assert "not the data path" in found[0].text and "0.25 read calls per item" in found[0].text

"""The worker counts its own page faults from its process's start (issue 24, F4): a cell that
touches fresh memory before its measured window reads at least that many minor faults on every
platform, and a window count without them; where the kernel keeps no counts (gVisor) the cell
has no fault metric rather than a zero."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.store.sqlite import cell_metrics
from isobench.studyfile import load_study_text
from tests.conftest import need_docker, need_root, need_tool

#: 64 MiB of 4 KiB pages: over three times the ~5,000 minor faults of the worker's own start-up
#: measured on this VM, so a count that missed them could not reach it on start-up faults alone
PAGES = 16384

TOUCH = """
import mmap
import sys

from isobench import step

pages = int(sys.argv[1])
memory = mmap.mmap(-1, pages * 4096)           # fresh anonymous pages: one minor fault each
memory.madvise(mmap.MADV_NOHUGEPAGE)           # not a huge page per 512 of them
for offset in range(0, pages * 4096, 4096):
    memory[offset] = 1
step()                                         # the measured window opens here
for _ in range(3):
    sum(range(1000))
    step()
"""


def _cell(tmp_path: Path, entry: dict):
    directory = tmp_path / "userdir"
    directory.mkdir()
    script = directory / "touch.py"
    script.write_text(textwrap.dedent(TOUCH))
    study = {"name": "faults", "workloads": [{"name": "script", "params": {"path": str(script),
                                                                         "args": [str(PAGES)]}}],
             "platforms": [entry], "repetitions": 1, "warmup": 0, "probes": {}, "timeout_s": 120}
    cell = expand(load_study_text(json.dumps(study), "faults.yaml"))[0]
    platform = platform_for(cell)
    platform.prepare()
    outcome = run_cell(cell, platform)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    return outcome, {name: (value, unit) for name, value, unit in cell_metrics(outcome)}


@pytest.mark.parametrize("entry", [{"name": "baremetal"}, {"name": "docker"}, {"name": "oci", "runtime": "runc"}],
                         ids=lambda e: e.get("runtime", e["name"]))
def test_faults_count_from_the_process_start_on_every_platform(entry: dict, tmp_path: Path) -> None:
    {"baremetal": need_root, "docker": need_docker, "oci": lambda: need_tool("runc")}[entry["name"]]()
    outcome, metrics = _cell(tmp_path, entry)
    minor, unit = metrics["process.page_faults_minor"]
    assert unit == "faults" and minor >= PAGES, minor  # the pages touched before the window, and start-up's
    assert metrics["process.page_faults_major"][0] >= 0
    # the window's count excludes them: the touch came before the first step()
    window = metrics["process.run.page_faults_minor"][0]
    assert 0 <= window < PAGES / 4 and window <= minor, (window, minor)
    assert "process.run.page_faults_major" in metrics
    # kept as metrics only, not repeated among the workload's facts
    assert "faults" not in outcome.platform_info.get("workload", {})


def test_gvisor_cell_has_no_fault_metric_rather_than_a_zero(tmp_path: Path) -> None:
    need_docker()
    need_tool("runsc")
    outcome, metrics = _cell(tmp_path, {"name": "gvisor"})
    assert not [name for name in metrics if name.startswith("process.") and "fault" in name], metrics
    assert "gVisor" in outcome.platform_info["workload"]["faults_unavailable"]


def test_a_run_without_its_window_still_counts_from_the_start() -> None:
    from isobench.workloads.channel import CellContext

    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

    ctx = CellContext(Stream(), {"cell_id": "t"})  # type: ignore[arg-type]
    ctx.finish()
    done = json.loads(lines[-1])
    assert done["faults"]["minor"] > 0 and done["faults"]["major"] >= 0 and "run_faults" not in done
    metrics = {name for name, _, _ in cell_metrics(type("O", (), {"items": [], "setup": {}, "done": done,
                                                                  "wall_s": 1.0, "startup_s": None})())}
    assert {"process.page_faults_minor", "process.page_faults_major"} <= metrics
    assert not any(name.startswith("process.run.") for name in metrics)

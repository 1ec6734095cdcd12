"""The syscalls probe's measured window: a real bare-metal cell of syscall-loop, run through the
normal runner path (`isobench run`), counts the getppid calls of its measured items in
`probe.syscalls.window_calls`, and leaves the interpreter's start-up, imports and warm-up items
to `probe.syscalls.total` only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import need_root, run_cli, write_study

#: 50,000 calls in all: they fit the default ring buffer (8 MiB a CPU) even if the reader fell
#: behind; 10 x 20,000 in 60 ms overran it here (the window is then not counted, see syscalls.py)
ITERATIONS, CALLS, WARMUP_ITEMS = 10, 5_000, 2


def need_syscall_tracing() -> None:
    """The ftrace method needs root, tracefs instances and the raw_syscalls:sys_enter event."""
    need_root()
    from isobench.probes.tracefs import missing_events, tracefs_problem

    problem = tracefs_problem() or ", ".join(missing_events(["raw_syscalls/sys_enter"]))
    if problem:
        pytest.skip(f"host lacks tracefs instances or the sys_enter event: {problem}")


def test_window_counts_the_measured_items_calls_only(tmp_path: Path) -> None:
    need_syscall_tracing()
    from isobench.store import Store

    study = write_study(tmp_path / "study.yaml", {
        "name": "syscall-window",
        "workloads": [{"name": "syscall-loop", "params": {"iterations": ITERATIONS, "calls": CALLS}}],
        "platforms": [{"name": "baremetal"}],
        "schedule": "sequential", "repetitions": 1, "warmup": 0, "warmup_items": WARMUP_ITEMS, "aa": False,
        "timeout_s": 120,
        "probes": {"syscalls": {"method": "ftrace"}}})  # ftrace: no silent fall-back to strace
    run_cli("run", str(study), "--out", str(tmp_path / "out"), check=True, timeout=180)

    store = Store.open(tmp_path / "out")
    [cell] = store.cells()
    assert cell["status"] == "ok", cell["error"]
    # the warm-up items count among `iterations` (timed_items): the rest are measured
    measured = ITERATIONS - WARMUP_ITEMS
    assert cell["items"] == measured
    status = cell["platform_info"]["probes"]["syscalls"]
    assert status["status"] == "ok", status
    info = status["info"]
    assert info["method"] == "ftrace"
    assert info["lost"]["overrun"] == info["lost"]["dropped"] == 0, info["lost"]
    metrics = {row["metric"]: row["value"] for row in store.metric_rows()}
    assert "probe.syscalls.window_calls" in metrics, info["window"]
    window, total = metrics["probe.syscalls.window_calls"], metrics["probe.syscalls.total"]

    # every getppid of the measured items, and little else (an item flush, the done record)
    assert measured * CALLS <= window <= 1.3 * measured * CALLS, (window, info["window"])
    # start-up, imports and the warm-up items' calls (another 2 x 5,000 getppid) lie outside
    assert total - window >= WARMUP_ITEMS * CALLS, (total, window)
    bounds = info["window"]
    assert bounds["bounded_by"] == ["record write", "record write"], bounds
    assert bounds["from"] < bounds["to"] and bounds["from"] <= bounds["marks"][0] and bounds["to"] <= bounds["marks"][1]
    # bounded at the records' writes: the measured items' getppid calls exactly, no warm-up item's
    assert dict(bounds["top"])["getppid"] == measured * CALLS, bounds
    # the whole cell's histogram has the warm-up items' getppid calls too
    assert {name: calls for name, calls, _ in info["top"]}["getppid"] >= ITERATIONS * CALLS


#: a stand-in worker: getppid calls before, inside and after two records it writes on stdout
MARKED = ("import os, sys, time\n"
          "sys.stdin.readline()\n"
          "for _ in range(100): os.getppid()\n"
          "sys.stdout.write('run_start\\n'); sys.stdout.flush()\n"
          "for _ in range(300): os.getppid()\n"
          "time.sleep(0.1)\n"  # the reader has the run_start record before the done record is written
          "sys.stdout.write('done\\n'); sys.stdout.flush()\n"
          "for _ in range(50): os.getppid()\n"
          "sys.stdin.readline()\n")


def _probe_marked_child(method: str, marks: bool) -> tuple[dict[str, float], dict]:
    """Run MARKED under a syscalls probe, marking each record as it is read (as the runner does)."""
    from isobench.probes.syscalls import SyscallProbe, SyscallSettings
    from isobench.target import ProbeTarget

    child = subprocess.Popen([sys.executable, "-c", MARKED], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdin and child.stdout
    probe = SyscallProbe(SyscallSettings(method=method))
    try:
        probe.start(ProbeTarget("baremetal", child.pid))
        if method == "strace":
            time.sleep(0.5)  # strace attaches asynchronously
        child.stdin.write("\n")
        child.stdin.flush()
        for expected in ("run_start", "done"):
            assert child.stdout.readline().strip() == expected
            if marks:
                probe.mark(expected)
        child.communicate("\n", timeout=30)
        result = probe.stop()
    finally:
        probe.abort()
        if child.poll() is None:
            child.kill()
            child.wait()
    return {name: value for name, value, _ in result.metrics}, result.info


def test_window_is_bounded_by_the_records_writes() -> None:
    need_syscall_tracing()
    metrics, info = _probe_marked_child("ftrace", marks=True)
    assert isinstance(info["window"], dict), info
    assert info["window"]["bounded_by"] == ["record write", "record write"], info["window"]
    # the 300 calls between the two records, and not one of the 100 before or the 50 after
    assert dict(info["window"]["top"])["getppid"] == 300, info["window"]
    assert 301 <= metrics["window_calls"] <= 310  # and the sleep: little else happens between the writes
    assert metrics["total"] > metrics["window_calls"]


def test_no_window_without_marks_or_under_strace() -> None:
    need_syscall_tracing()
    metrics, info = _probe_marked_child("ftrace", marks=False)
    assert "window_calls" not in metrics and "total" in metrics
    assert "no run_start and done marks" in info["window"]
    if shutil.which("strace") is None:
        pytest.skip("host lacks strace (the fall-back's case)")
    metrics, info = _probe_marked_child("strace", marks=True)
    assert "window_calls" not in metrics and metrics["total"] > 0
    assert info["window"] == "strace counts the whole cell"

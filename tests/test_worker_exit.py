"""The worker ends without the interpreter's teardown once its records are out (torch's takes
~1 s of every cell), except where something needs that teardown: child processes, or a user's
script with its own atexit handlers. An atexit marker file shows which way a process ended."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import json_lines


def _with_marker(marker: Path, body: str) -> list[str]:
    code = f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n{body}"
    return [sys.executable, "-c", code]


def _worker_cell(marker: Path, cell: dict, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    body = (f"import runpy, sys\nsys.argv = ['worker', {json.dumps(cell)!r}]\n"
            "runpy.run_module('isobench.workloads.worker', run_name='__main__')\n")
    return subprocess.run(_with_marker(marker, body), capture_output=True, text=True, timeout=120,
                          input=stdin if stdin is not None else "")


SPIN = {"cell_id": "t", "workload": "cpu-spin", "params": {"iterations": 3, "work": 1000}, "knobs": {}, "seed": 0}


def test_a_built_in_cell_told_of_an_ack_skips_the_teardown_and_still_delivers_every_record(tmp_path: Path) -> None:
    marker = tmp_path / "teardown-ran"
    out = _worker_cell(marker, {**SPIN, "ack_done": True}, stdin="ack\n")
    records = json_lines(out.stdout)
    assert out.returncode == 0, out.stderr[-2000:]
    assert records[-1]["type"] == "done" and sum(r["type"] == "item" for r in records) == 3
    assert not marker.exists()


def test_a_cell_whose_platform_sends_no_ack_keeps_the_teardown(tmp_path: Path) -> None:
    """Without stdin the runner cannot say its closing snapshot is taken: the teardown's time covers it."""
    marker = tmp_path / "teardown-ran"
    out = _worker_cell(marker, SPIN)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json_lines(out.stdout)[-1]["type"] == "done" and marker.exists()


def test_the_worker_waits_for_the_ack_before_it_exits(tmp_path: Path) -> None:
    """The runner's closing snapshot reads the cell's cgroup: the worker must still be there."""
    marker = tmp_path / "teardown-ran"
    body = (f"import runpy, sys\nsys.argv = ['worker', {json.dumps({**SPIN, 'ack_done': True})!r}]\n"
            "runpy.run_module('isobench.workloads.worker', run_name='__main__')\n")
    proc = subprocess.Popen(_with_marker(marker, body), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    lines = []
    for line in proc.stdout:
        lines.append(json.loads(line))
        if lines[-1]["type"] == "done":
            break
    time.sleep(0.5)
    assert proc.poll() is None  # still alive, waiting for the ack
    proc.stdin.write("ack\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0 and not marker.exists()


def test_a_script_cell_keeps_the_teardown_for_its_atexit_handlers(tmp_path: Path) -> None:
    marker = tmp_path / "teardown-ran"
    script = tmp_path / "mine.py"
    script.write_text("x = 1\n")
    cell = {"cell_id": "t", "workload": "script", "params": {"path": str(script)}, "knobs": {}, "seed": 0,
            "ack_done": True}
    out = _worker_cell(marker, cell, stdin="ack\n")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json_lines(out.stdout)[-1]["type"] == "done" and marker.exists()


@pytest.mark.parametrize("with_child", [True, False])
def test_a_process_with_a_live_child_keeps_the_teardown_that_joins_it(tmp_path: Path, with_child: bool) -> None:
    marker = tmp_path / "teardown-ran"
    body = ("import multiprocessing, sys, time\n"
            "from isobench.workloads.worker import end_process\n"
            "if __name__ == '__main__':\n"
            f"    if {with_child}:\n"
            "        multiprocessing.Process(target=time.sleep, args=(0.3,), daemon=True).start()\n"
            "    sys.exit(end_process(5, sys.stdout, normal_exit=False, await_ack=True))\n")
    out = subprocess.run(_with_marker(marker, body), capture_output=True, text=True, timeout=60, input="ack\n")
    assert out.returncode == 5, out.stderr
    assert marker.exists() == with_child

"""A cell's CPU time from a cgroup v2 group of its own, where there is no v1 ``cpuacct`` (a host on
pure cgroup v2, like the lent GPU machines, where ``cpu.per_item`` was missing for runc cells). The
group here is a real one, in this host's cgroup2 mount (hybrid: no controllers, but every v2 group
keeps ``cpu.stat``'s ``usage_usec``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from isobench.runner.interference import account, snapshot
from tests.conftest import need_root

SPIN_S = 0.6


def _cgroup2_mount() -> Path:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    pytest.skip("host lacks a cgroup v2 hierarchy (no cgroup2 mount)")


def test_a_cells_cpu_time_comes_from_its_own_v2_group_and_never_the_root() -> None:
    need_root()
    mount = _cgroup2_mount()
    assert snapshot({"unified": mount}).cell_ns is None  # the root is the whole host's
    group = mount / f"isobench-test-cpu-{os.getpid()}"
    group.mkdir()
    spinner = (f"import sys, time\nsys.stdin.readline()\nend = time.process_time() + {SPIN_S}\n"
               "while time.process_time() < end: pass\n")
    proc = subprocess.Popen([sys.executable, "-c", spinner], stdin=subprocess.PIPE, text=True)
    try:
        (group / "cgroup.procs").write_text(str(proc.pid))
        start = snapshot({"unified": group})
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        end = snapshot({"unified": group})
    finally:
        proc.kill()
        proc.wait()
        group.rmdir()
    result = account(start, end, [0, 1], items=10, threshold=0.1)
    assert start.cell_ns is not None and start.cell_percpu_ns == []
    # its spin (and its exit) in the window: 10 items of a tenth of it each, a little more
    assert SPIN_S / 10 <= result["cpu_per_item_s"] < 1.5 * SPIN_S / 10, result
    # v2 has no per-core split: no "other" CPU time is claimed (it would be the cell's own)
    assert "other_cpu_s" not in result, result

"""Host state isobench changes (cpufreq, Jetson power modes, sysctls) is put back even after kill -9.

This VM has no cpufreq and no Jetson tools, so the runner is pointed at a fake sysfs tree
(``ISOBENCH_SYSFS_ROOT``) and at fake ``nvpmodel``/``jetson_clocks`` scripts on PATH; the
runner, the journal under /run/isobench and the sweep are the real ones.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from isobench import hoststate
from tests.conftest import ISOBENCH, need_root, wait_for, write_study

NVPMODEL = """#!/bin/sh
# fake nvpmodel: the mode lives in $FAKE_JETSON/mode
case "$1" in
  -q) echo "NV Power Mode: MODE_$(cat "$FAKE_JETSON/mode")"; cat "$FAKE_JETSON/mode" ;;
  -m) echo "$2" > "$FAKE_JETSON/mode" ;;
  *) exit 1 ;;
esac
"""
JETSON_CLOCKS = """#!/bin/sh
# fake jetson_clocks: the clocks' state lives in $FAKE_JETSON/clocks
case "$1" in
  --store) cp "$FAKE_JETSON/clocks" "$2" ;;
  --restore) cp "$2" "$FAKE_JETSON/clocks" ;;
  "") echo locked > "$FAKE_JETSON/clocks" ;;
  *) exit 1 ;;
esac
"""
CPUS = 2


@pytest.fixture
def fake_host(tmp_path: Path) -> dict[str, str]:
    """A fake cpufreq tree and fake Jetson tools; returns the environment a runner needs to use them."""
    need_root()  # the journal lives in /run/isobench, as in real use
    for cpu in range(CPUS):
        freq = tmp_path / "sys" / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
        freq.mkdir(parents=True)
        (freq / "scaling_governor").write_text("schedutil\n")
        (freq / "scaling_available_governors").write_text("performance schedutil powersave\n")
        (freq / "scaling_max_freq").write_text("2400000\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, script in (("nvpmodel", NVPMODEL), ("jetson_clocks", JETSON_CLOCKS)):
        (tools / name).write_text(script)
        (tools / name).chmod(stat.S_IRWXU)
    jetson = tmp_path / "jetson"
    jetson.mkdir()
    (jetson / "mode").write_text("0\n")
    (jetson / "clocks").write_text("dynamic\n")
    return {**os.environ, "ISOBENCH_SYSFS_ROOT": str(tmp_path / "sys"), "FAKE_JETSON": str(jetson),
            "PATH": f"{tools}:{os.environ['PATH']}"}


def _host(env: dict[str, str]) -> dict[str, str]:
    cpu = Path(env["ISOBENCH_SYSFS_ROOT"]) / "devices" / "system" / "cpu"
    jetson = Path(env["FAKE_JETSON"])
    values = {f"cpu{n}/{name}": (cpu / f"cpu{n}" / "cpufreq" / name).read_text().strip()
              for n in range(CPUS) for name in ("scaling_governor", "scaling_max_freq")}
    return {**values, "mode": (jetson / "mode").read_text().strip(), "clocks": (jetson / "clocks").read_text().strip()}


ORIGINAL = {**{f"cpu{n}/scaling_governor": "schedutil" for n in range(CPUS)},
            **{f"cpu{n}/scaling_max_freq": "2400000" for n in range(CPUS)}, "mode": "0", "clocks": "dynamic"}
CHANGED = {**{f"cpu{n}/scaling_governor": "performance" for n in range(CPUS)},
           **{f"cpu{n}/scaling_max_freq": "1800000" for n in range(CPUS)}, "mode": "2", "clocks": "locked"}


def _ours(env: dict[str, str]) -> list[dict[str, object]]:
    """Journal entries for this test's fake host (other runs on this host may have their own)."""
    mine = (env["ISOBENCH_SYSFS_ROOT"], "nvpmodel", "jetson_clocks")
    return [entry for entry in hoststate.journal() if str(entry["key"]).startswith(mine)]


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _killed_mid_cell(tmp_path: Path, env: dict[str, str]) -> None:
    """Start a study that sets every host knob, kill -9 its runner while the cell runs."""
    study = write_study(tmp_path / "knobs.yaml", {
        "name": "knobs-crash",
        "workloads": [{"name": "cpu-spin", "params": {"iterations": 2000, "work": 200_000}}],
        "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0,
        "knobs": {"governor": "performance", "max_freq": "1.8GHz", "power_mode": 2, "jetson_clocks": True}})
    runner = subprocess.Popen([*ISOBENCH, "run", str(study), "--out", str(tmp_path / "crashed")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def changed() -> bool:
            assert runner.poll() is None, f"the runner ended early: {runner.stderr.read()}"  # type: ignore[union-attr]
            return _host(env) == CHANGED and bool(_descendants(runner.pid))
        wait_for(changed, 120, "the knobs to be set and the cell to start", every=0.1)
        cell = _descendants(runner.pid)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    for pid in cell:  # the cell outlives its runner (own session); it is not what this test is about
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert _host(env) == CHANGED  # nothing ran in the killed runner to put the host back
    assert len(_ours(env)) == 2 * CPUS + 2  # every change journaled, with its original


def test_kill_9_mid_cell_leaves_the_next_run_restoring_every_knob(tmp_path: Path, fake_host: dict[str, str]
                                                                  ) -> None:
    _killed_mid_cell(tmp_path, fake_host)
    study = write_study(tmp_path / "plain.yaml", {  # the next study sets no knob at all
        "name": "after-crash", "workloads": [{"name": "cpu-spin", "params": {"iterations": 1, "work": 1000}}],
        "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0})
    after = subprocess.run([*ISOBENCH, "run", str(study), "--out", str(tmp_path / "next")], env=fake_host,
                           capture_output=True, text=True, timeout=300)
    assert after.returncode == 0, after.stderr
    assert _host(fake_host) == ORIGINAL
    assert not _ours(fake_host)
    said = after.stdout.replace("\n", "")  # a long path wraps
    assert said.count("scaling_governor restored to schedutil") == CPUS, after.stdout
    assert "nvpmodel restored to 0" in said, after.stdout


def test_doctor_repair_restores_what_a_killed_runner_left(tmp_path: Path, fake_host: dict[str, str]) -> None:
    _killed_mid_cell(tmp_path, fake_host)
    repair = subprocess.run([*ISOBENCH, "doctor", "--repair"], env=fake_host, capture_output=True, text=True,
                            timeout=300)
    assert repair.returncode == 0, repair.stderr
    assert _host(fake_host) == ORIGINAL
    assert not _ours(fake_host)
    lines = [line for line in repair.stdout.splitlines() if str(fake_host["ISOBENCH_SYSFS_ROOT"]) in line]
    assert len([line for line in lines if "restored to" in line]) == 2 * CPUS, repair.stdout
    again = subprocess.run([*ISOBENCH, "doctor", "--repair"], env=fake_host, capture_output=True, text=True,
                           timeout=300)
    assert fake_host["ISOBENCH_SYSFS_ROOT"] not in again.stdout  # restored once, then gone from the journal


def test_overlapping_holders_leave_the_host_original(tmp_path: Path, fake_host: dict[str, str]) -> None:
    """Two holders of one file: the newest wins while both hold; the original only when both left,
    even when the second saw the first's value in force (a naive save/restore would keep it)."""
    path = Path(fake_host["ISOBENCH_SYSFS_ROOT"]) / "devices/system/cpu/cpu0/cpufreq/scaling_governor"
    first = hoststate.Change("sysfs", str(path), "performance")
    second = hoststate.Change("sysfs", str(path), "powersave")
    first.apply()
    second.apply()
    assert path.read_text().strip() == "powersave"
    second.release()
    assert path.read_text().strip() == "performance"
    first.release()
    assert path.read_text().strip() == "schedutil"
    assert not _ours(fake_host)


def test_a_live_runners_change_is_not_swept(tmp_path: Path, fake_host: dict[str, str]) -> None:
    path = Path(fake_host["ISOBENCH_SYSFS_ROOT"]) / "devices/system/cpu/cpu1/cpufreq/scaling_governor"
    code = ("import sys, time\nfrom isobench.hoststate import Change\n"
            f"Change('sysfs', {str(path)!r}, 'performance').apply()\nprint('set', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "set"  # type: ignore[union-attr]
        assert not any(str(path) in line for line in hoststate.sweep_stale())
        assert path.read_text().strip() == "performance"  # its runner is alive: not ours to put back
    finally:
        holder.kill()
        holder.wait()
    assert any(f"{path} restored to schedutil" in line for line in hoststate.sweep_stale())
    assert path.read_text().strip() == "schedutil"

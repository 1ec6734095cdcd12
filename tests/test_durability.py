"""kill -9 mid-study loses nothing and duplicates nothing; Ctrl-C leaves nothing behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isobench.liveness import boot_id
from isobench.plan import expand
from isobench.studyfile import load_study
from tests.conftest import (
    default_interrupts,
    need_docker,
    need_root,
    need_tool,
    run_cli,
    wait_for,
    write_study,
)
from tests.leftovers import all_leftovers, containers, oci_state


def _finished(store: Path) -> list[str]:
    if not store.exists():
        return []
    conn = sqlite3.connect(store, timeout=30)
    try:
        return [row[0] for row in conn.execute("SELECT cell_id FROM cells")]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _start(study: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "isobench.cli", "run", str(study), "--out", str(out), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_interrupts)


def test_kill_9_then_resume_has_no_gaps_and_no_duplicates(tmp_path: Path) -> None:
    need_tool("runc")
    study = write_study(tmp_path / "crash.yaml", {
        "name": "crash",
        "workloads": [{"name": "cpu-spin", "params": {"iterations": 4, "work": 100_000}}],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"},
                      {"name": "oci", "label": "runc", "runtime": "runc"}],
        # perf too: a killed runner's perf output directories in /dev/shm must be swept by the next run
        "probes": {"perf": {"hardware": False}, "proc": {}},
        "repetitions": 5, "warmup": 1})
    out = tmp_path / "out"
    db = out / "isobench.sqlite"
    planned = [c.cell_id for c in expand(load_study(study)[0])]
    # Kill the runner twice, at different moments, before letting it finish.
    for kills, threshold in enumerate((3, 9)):
        runner = _start(study, out, *(["--resume"] if kills else []))
        wait_for(lambda t=threshold: len(_finished(db)) >= t, 120, f"{threshold} finished cells")
        time.sleep(0.07 * kills)  # land the kill at a different point of the next cell
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    assert len(_finished(db)) < len(planned)
    result = run_cli("run", "--resume", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    finished = _finished(db)
    assert sorted(finished) == sorted(planned)  # no gaps
    assert len(finished) == len(set(finished))  # no duplicates
    assert "removed a leftover" in result.stdout or not oci_state()
    assert not all_leftovers()
    # A second resume has nothing left to do and records nothing twice.
    again = run_cli("run", "--resume", "--out", str(out), timeout=300)
    assert again.returncode == 0 and "0 to run" in again.stdout
    assert len(_finished(db)) == len(planned)


def test_new_run_refuses_a_directory_with_results(tmp_path: Path) -> None:
    need_root()
    study = write_study(tmp_path / "s.yaml", {
        "name": "again", "workloads": [{"name": "cpu-spin", "params": {"iterations": 1, "work": 1000}}],
        "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0})
    out = tmp_path / "out"
    assert run_cli("run", str(study), "--out", str(out)).returncode == 0
    second = run_cli("run", str(study), "--out", str(out))
    assert second.returncode == 2 and "--resume" in second.stderr


LONG_SPIN = {"name": "cpu-spin", "params": {"iterations": 100_000, "work": 1_000_000}}


INTERRUPT_PLATFORMS = ["baremetal", "docker", "gvisor", "oci-runc", "oci-crun", "oci-runsc"]


# Ctrl-C on every platform; SIGTERM on one: the runner turns it into the same KeyboardInterrupt
# (runner/setup.py, sigterm_as_interrupt), so from there on each platform's clean-up is the path
# Ctrl-C takes, and the other five SIGTERM runs repeated it (~3.5 s each)
@pytest.mark.parametrize(("how", "platform"), [(signal.SIGINT, p) for p in INTERRUPT_PLATFORMS]
                         + [(signal.SIGTERM, "docker")])
def test_interrupt_during_a_cell_leaves_nothing(platform: str, how: int, tmp_path: Path) -> None:
    if platform in ("docker", "gvisor"):
        need_docker()
        entry = {"name": platform}
    elif platform.startswith("oci-"):
        runtime = platform.removeprefix("oci-")
        need_tool(runtime)
        entry = {"name": "oci", "runtime": runtime}
    else:
        need_root()
        entry = {"name": "baremetal"}
    study = write_study(tmp_path / "int.yaml", {
        "name": "interrupt", "workloads": [LONG_SPIN], "platforms": [{**entry, "knobs": {"cpus": 0.5}}],
        "repetitions": 1, "warmup": 0, "timeout_s": 120})
    out = tmp_path / "out"
    runner = _start(study, out)

    def cell_running() -> bool:
        if platform in ("docker", "gvisor"):
            return bool(containers())
        if platform.startswith("oci-"):
            return any(not s.startswith("bundles/") for s in oci_state())
        # The runner's own cgroup, with a cell in it: the parent `isobench` may belong to this test
        # process (it runs cells in other tests), so it says nothing about the runner.
        own = Path("/sys/fs/cgroup/cpu/isobench", f"{runner.pid}-{boot_id()[:8]}")
        return own.is_dir() and any(p.is_dir() for p in own.iterdir())

    wait_for(cell_running, 60, "the cell to start")
    time.sleep(1.0)
    runner.send_signal(how)
    code = runner.wait(timeout=60)
    assert code == 130, runner.stderr.read().decode() if runner.stderr else code
    assert not all_leftovers()


def test_sigterm_during_set_up_restores_what_set_up_changed(tmp_path: Path) -> None:
    """SIGTERM right after the harness pinned the engine daemons to its core, before any cell (fault
    injected by wrapping the step that follows): the runner unwinds as on Ctrl-C, exit 130, the
    daemons' affinity is back and nothing is left. Before, the default action killed it there."""
    need_docker()
    from isobench.runner.harness import engine_pids

    before = {pid: sorted(os.sched_getaffinity(pid)) for pid in engine_pids()}
    assert before, "no container engine daemon to pin"
    study = write_study(tmp_path / "s.yaml", {"name": "early", "workloads": [LONG_SPIN],
                                              "platforms": [{"name": "baremetal"}, {"name": "docker"}],
                                              "repetitions": 1, "warmup": 0, "probes": {}})
    code = ("import os, signal, sys\n"
            "import isobench.runner.study as study\n"
            "def pinned_then_terminated(facts):\n"
            "    print('engine:', facts['engine'], file=sys.stderr, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return 'unreachable'\n"
            "study.describe_layout = pinned_then_terminated\n"
            "from isobench.cli import main\n"
            f"sys.argv = ['isobench', 'run', {str(study)!r}, '--out', {str(tmp_path / 'out')!r}]\n"
            "main()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, result.stdout + result.stderr
    assert "engine: pinned" in result.stderr and "interrupted" in result.stdout, result.stdout + result.stderr
    assert {pid: sorted(os.sched_getaffinity(pid)) for pid in engine_pids()} == before
    assert not all_leftovers()


def test_a_live_runner_is_never_taken_for_stale(tmp_path: Path) -> None:
    """Any process that runs cells (this test process too) keeps its resources from sweeps."""
    need_root()
    from isobench.liveness import runner_tag, tag_is_stale

    mine = runner_tag()
    assert not tag_is_stale(mine)
    child = subprocess.run([sys.executable, "-c", f"from isobench.liveness import tag_is_stale as t; "
                            f"print(t({mine!r}))"], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "False"
    dead = subprocess.run([sys.executable, "-c", "from isobench.liveness import runner_tag; "
                           "print(runner_tag())"], capture_output=True, text=True, check=True).stdout.strip()
    assert tag_is_stale(dead)


def test_a_runner_that_exits_normally_removes_its_own_lock() -> None:
    """The lock names a live runner; after a normal exit it must not wait for the next run's prune.
    A forked child that exits first leaves its parent's lock in place."""
    need_root()
    from isobench.liveness import RUNNERS_DIR

    script = ("import os, sys; from isobench.liveness import RUNNERS_DIR, runner_tag\n"
              "tag = runner_tag()\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    sys.exit(0)\n"  # the child runs the inherited exit hooks
              "os.waitpid(pid, 0)\n"
              "print(tag, (RUNNERS_DIR / f'{tag}.lock').exists())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    tag, held_after_child = out
    assert held_after_child == "True"
    assert not (RUNNERS_DIR / f"{tag}.lock").exists()

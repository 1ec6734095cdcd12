"""Shared fixtures. Tests use real engines and runtimes; a test skips only when the host
truly lacks one, and says which."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ISOBENCH = [sys.executable, "-m", "isobench.cli"]

#: every `isobench run` here (and every runner a test starts in-process) watches the host for
#: 0.25 s before its set-up, not the second a user's run takes: the sample is stored and judged
#: the same way, no test reads a real run's sample, and the second came on top of ~300 runs
os.environ.setdefault("ISOBENCH_LOAD_WINDOW_S", "0.25")


def wait_perf_attached(pid: int, timeout: float = 30) -> None:
    """Until ``perf`` process ``pid`` has a counter open: on a loaded host a fixed sleep was not
    always long enough, and a counter opened late misses what the test counts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"perf {pid} opened no counter in {timeout} s")


def default_interrupts() -> None:
    """``preexec_fn`` for a runner that a test interrupts: SIGINT and SIGHUP at their defaults. A
    suite started in the background by a non-interactive shell inherits SIGINT ignored (under
    nohup, SIGHUP too), and a process that starts with SIGINT ignored never sees the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 900,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*ISOBENCH, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"isobench {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups, container runtimes)")


def need_docker() -> None:
    from isobench.platforms.docker import engine_problem

    need_root()
    problem = engine_problem()
    if problem:
        pytest.skip(f"host lacks a Docker engine: {problem}")


def need_tool(name: str) -> None:
    need_root()
    if shutil.which(name) is None:
        pytest.skip(f"host lacks {name}")


#: the design a test study asks for explicitly unless it sets its own: one cell at a time, five
#: rounds after one warm-up round, no warm-up items, cells sized by their item counts, no A/A
SMALL_DESIGN = {"schedule": "sequential", "repetitions": 5, "warmup": 1, "warmup_items": 0, "min_seconds": None,
                "aa": False}


def small_design(study: dict) -> dict:
    """``study`` with SMALL_DESIGN for every design field it does not set (see write_study)."""
    return {**SMALL_DESIGN, **study}


def write_study(path: Path, study: dict) -> Path:
    """Write a study file. Unless the test sets ``reruns``, contaminated cells are not re-run: a
    test host is busy with the tests themselves, and tests count the cells they planned. A test
    that only needs cells to run gets the small design of SMALL_DESIGN for every design field it
    does not set, not the resolving design a user's study gets (a duet, an A/A entry, rounds until
    each verdict), which would make every such test several times longer."""
    import yaml

    study = {"reruns": 0, **SMALL_DESIGN, **study}

    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def tiny_spin() -> dict:
    return {"name": "cpu-spin", "params": {"iterations": 3, "work": 20000}}

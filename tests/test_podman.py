"""Podman as another container engine: records arrive, knobs apply from inside, nothing is left."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text
from tests.conftest import need_root

LAST_CORE = max(os.sched_getaffinity(0))


def _need_podman() -> None:
    from isobench.platforms.podman import podman_problem

    need_root()
    problem = podman_problem()
    if problem:
        pytest.skip(f"host lacks a working Podman: {problem}")


def _run(knobs: dict, params: dict, timeout_s: float = 120):
    study = {"name": "pod", "workloads": [{"name": "cpu-spin", "params": params}],
             "platforms": [{"name": "podman", "knobs": knobs}], "repetitions": 1, "warmup": 0, "probes": {},
             "timeout_s": timeout_s}
    cell = expand(load_study_text(json.dumps(study), "pod.yaml"))[0]
    platform = platform_for(cell)
    platform.prepare()
    return run_cell(cell, platform)


def _leftovers(tag_part: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--filter", "label=isobench.runner", "--format", "{{.Names}}"],
                         capture_output=True, text=True)
    return [name for name in out.stdout.split() if tag_part in name]


def test_podman_cell_applies_the_knobs() -> None:
    _need_podman()
    outcome = _run({"cpus": 0.5, "cpuset": str(LAST_CORE), "memory": "300m"}, {"iterations": 3, "work": 20000})
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    inside = outcome.hello["inside"]
    assert inside["affinity"] == [LAST_CORE] and inside["cpu_limit"] == pytest.approx(0.5)
    assert inside["memory_limit_bytes"] == 300 * 2**20
    assert inside["seccomp_mode"] == 2 and inside["in_pid_namespace"]
    assert outcome.platform_info["runtime"] == "runc"
    assert not _leftovers(f"isobench-{os.getpid()}-")


def test_podman_timeout_kills_the_container() -> None:
    _need_podman()
    outcome = _run({}, {"iterations": 10_000, "work": 1_000_000}, timeout_s=3)
    assert outcome.status == "timeout"
    assert not _leftovers(f"isobench-{os.getpid()}-")

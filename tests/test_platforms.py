"""Real cells on every platform: records arrive and knobs take effect, read from inside."""

from __future__ import annotations

import os
import sys

import pytest

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text
from tests.conftest import need_docker, need_root, need_tool
from tests.leftovers import all_leftovers

LAST_CORE = max(os.sched_getaffinity(0))

VARIANTS = {
    "baremetal": ({"name": "baremetal"}, None),
    "docker": ({"name": "docker"}, "docker"),
    "oci-runc": ({"name": "oci", "runtime": "runc"}, "runc"),
    "oci-crun": ({"name": "oci", "runtime": "crun"}, "crun"),
    "oci-runsc": ({"name": "oci", "runtime": "runsc"}, "runsc"),
    "gvisor": ({"name": "gvisor"}, "gvisor"),
}


def _require(need: str | None) -> None:
    if need is None:
        need_root()
    elif need in ("docker", "gvisor"):
        need_docker()
        if need == "gvisor":
            need_tool("runsc")
    else:
        need_tool(need)


def _one_cell(entry: dict, knobs: dict, params: dict | None = None, timeout_s: float = 120):
    import json

    study = {"name": "plat", "workloads": [{"name": "cpu-spin", "params": params or {"iterations": 3,
                                                                                     "work": 20000}}],
             "platforms": [{**entry, "knobs": knobs}], "repetitions": 1, "warmup": 0, "timeout_s": timeout_s}
    cell = expand(load_study_text(json.dumps(study), "plat.yaml"))[0]
    platform = platform_for(cell)
    platform.prepare()
    return run_cell(cell, platform)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_records_arrive_and_knobs_apply(variant: str) -> None:
    entry, need = VARIANTS[variant]
    _require(need)
    knobs = {"cpus": 0.5, "cpuset": str(LAST_CORE), "memory": "300m", "seccomp": "default"}
    outcome = _one_cell(entry, knobs)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert len(outcome.items) == 3 and outcome.done and outcome.done["items"] == 3
    assert outcome.startup_s is not None and 0 < outcome.startup_s < outcome.wall_s
    inside = outcome.hello["inside"]
    # host mirror: the cell ran the host's own interpreter, at the host's path
    assert outcome.hello["python"] == sys.executable
    if variant in ("gvisor", "oci-runsc"):
        # gVisor's /proc is its own: the limits are applied to the sandbox on the host.
        assert inside["in_pid_namespace"]
        # the runsc platform the sandbox ran on (a cited syscall figure depends on it)
        assert outcome.platform_info["runsc_platform"] in ("ptrace", "systrap", "kvm")
        if variant == "gvisor":
            applied = outcome.platform_info["applied"]
            assert applied["nano_cpus"] == 500_000_000
            assert applied["cpuset_cpus"] == str(LAST_CORE)
            assert applied["memory"] == 300 * 2**20
    else:
        assert inside["affinity"] == [LAST_CORE]
        assert inside["cpu_limit"] == pytest.approx(0.5)
        assert inside["memory_limit_bytes"] == 300 * 2**20
        expected_seccomp = 0 if variant == "baremetal" else 2
        assert inside["seccomp_mode"] == expected_seccomp
        assert inside["in_pid_namespace"] == (variant != "baremetal")
    assert not all_leftovers()


@pytest.mark.parametrize("variant", ["docker", "oci-runc", "oci-crun"])
def test_seccomp_unconfined(variant: str) -> None:
    entry, need = VARIANTS[variant]
    _require(need)
    outcome = _one_cell(entry, {"seccomp": "unconfined"})
    assert outcome.status == "ok", outcome.error
    assert outcome.hello["inside"]["seccomp_mode"] == 0


@pytest.mark.parametrize("variant", ["baremetal", "docker", "oci-runc"])
def test_timeout_kills_the_whole_cell(variant: str) -> None:
    entry, need = VARIANTS[variant]
    _require(need)
    outcome = _one_cell(entry, {}, params={"iterations": 10_000, "work": 1_000_000}, timeout_s=3)
    assert outcome.status == "timeout" and "timeout" in outcome.error
    assert outcome.wall_s < 30
    assert not all_leftovers()

"""The layer ladder: each ablation applies exactly its one mechanism, as the cell itself sees it;
the waterfall adds the layers up in log space and names what is left."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from isobench.analysis.layer_ladder import waterfalls
from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.store import Store
from isobench.studyfile import load_study_text
from isobench.workloads.inspect_cell import mount_of, namespaces
from tests.conftest import need_docker, need_root, need_tool, run_cli, write_study

LAST_CORE = max(os.sched_getaffinity(0))
NEW_NAMESPACES = {"pid", "mnt", "uts", "ipc", "net"}

LADDER = {
    "baremetal": {},
    "layer-namespaces": {},
    "layer-cpu-quota": {"cpus": 0.5},
    "layer-cpuset": {"cpuset": str(LAST_CORE)},
    "layer-memory": {"memory": "300m"},
    "layer-seccomp": {},
    "layer-overlay": {},
}


def _facts(inside: dict) -> dict:
    """Everything a layer could change, as seen from inside the cell."""
    host_ns = namespaces()
    return {
        "new namespaces": {k for k, v in inside["namespaces"].items() if v != host_ns[k]},
        "seccomp": (inside["seccomp_mode"], inside["seccomp_filters"]),
        "cpu_limit": inside["cpu_limit"],
        "affinity": inside["affinity"],
        "memory_limit": inside["memory_limit_bytes"],
        "executable fs": inside["executable_mount"]["fstype"],
    }


@pytest.fixture(scope="module")
def ladder_facts() -> dict[str, dict]:
    need_root()
    need_tool("unshare")
    need_docker()  # layer-seccomp reads Docker's own filter from a container
    facts = {}
    for name, knobs in LADDER.items():
        study = {"name": "ladder", "workloads": [{"name": "cpu-spin", "params": {"iterations": 2, "work": 2000}}],
                 "platforms": [{"name": name, "knobs": knobs}], "repetitions": 1, "warmup": 0, "probes": {}}
        cell = expand(load_study_text(json.dumps(study), "ladder.yaml"))[0]
        platform = platform_for(cell)
        platform.prepare()
        outcome = run_cell(cell, platform)
        assert outcome.status == "ok", (name, outcome.error, outcome.stderr_tail)
        facts[name] = _facts(outcome.hello["inside"])
    return facts


EXPECTED_CHANGE = {
    "baremetal": {},
    "layer-namespaces": {"new namespaces": NEW_NAMESPACES},
    "layer-cpu-quota": {"cpu_limit": 0.5},
    "layer-cpuset": {"affinity": [LAST_CORE]},
    "layer-memory": {"memory_limit": 300 * 2**20},
    "layer-seccomp": {"seccomp": (2, 1)},
    "layer-overlay": {"new namespaces": {"mnt"}, "executable fs": "overlay"},
}


@pytest.mark.parametrize("layer", sorted(EXPECTED_CHANGE))
def test_each_layer_applies_exactly_its_own_mechanism(layer: str, ladder_facts: dict[str, dict]) -> None:
    base = ladder_facts["baremetal"]
    assert base["new namespaces"] == set() and base["seccomp"] == (0, 0) and base["cpu_limit"] is None
    assert base["executable fs"] == mount_of(os.path.realpath(os.sys.executable))["fstype"]  # type: ignore[attr-defined]
    expected = {**base, **EXPECTED_CHANGE[layer]}
    assert ladder_facts[layer] == expected


def test_a_layer_refuses_a_second_mechanism(tmp_path: Path) -> None:
    study = write_study(tmp_path / "two.yaml", {
        "name": "two", "workloads": [{"name": "cpu-spin"}],
        "platforms": [{"name": "layer-namespaces", "knobs": {"memory": "1g"}}]})
    result = run_cli("plan", str(study))
    assert result.returncode == 2 and "knobs.memory" in result.stderr and "only its own mechanism" in result.stderr


def _store_with(tmp_path: Path, e2e: dict[str, list[float]]) -> Store:
    platforms = [{"name": name} for name in e2e]
    study_yaml = json.dumps({"name": "wf", "workloads": [{"name": "cpu-spin"}], "platforms": platforms,
                             "repetitions": 4, "warmup": 0})
    store = Store.create(tmp_path, study_yaml, "wf", "wf.yaml", {})
    cells = expand(load_study_text(study_yaml, "wf.yaml"))
    for cell in cells:
        value = e2e[cell.platform_key][cell.rep]
        outcome = SimpleNamespace(cell=cell, hello=None, status="ok", exit_code=0, error=None, stderr_tail="",
                                  started_at=0.0, wall_s=1.0, startup_s=0.1, platform_info={}, setup={},
                                  done=None, probes=None, items=[{"i": 0, "e2e": value, "phases": {}}])
        store.record(outcome, cell.platform_key)
    return store


def test_waterfall_adds_layers_in_log_space_and_names_the_remainder(tmp_path: Path) -> None:
    noise = [1.0, 1.01, 0.99, 1.005]
    e2e = {"baremetal": noise,
           "layer-namespaces": [1.05 * v for v in reversed(noise)],
           "layer-seccomp": [1.10 * v for v in noise[1:] + noise[:1]],
           "docker": [1.05 * 1.10 * 1.02 * v for v in noise[2:] + noise[:2]]}  # 2% no layer explains
    store = _store_with(tmp_path, e2e)
    (fall,) = waterfalls(store)
    assert fall.full == "docker" and fall.baseline == "baremetal"
    shares = {step.layer: step.share for step in fall.steps}
    total = math.log(1.05 * 1.10 * 1.02)
    assert shares["layer-namespaces"] == pytest.approx(math.log(1.05) / total, abs=0.02)
    assert shares["layer-seccomp"] == pytest.approx(math.log(1.10) / total, abs=0.02)
    assert fall.remainder is not None and fall.remainder.ratio == pytest.approx(1.02, abs=0.005)
    assert fall.remainder.ci_low < 1.02 < fall.remainder.ci_high
    assert sum(shares.values()) + fall.remainder_share == pytest.approx(1.0)

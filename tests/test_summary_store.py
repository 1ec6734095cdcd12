"""Summary from a store built with known values, as if copied from another host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isobench.plan import expand
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests.conftest import run_cli

# Core 63 exists on the host that ran this, not necessarily here: summary must not care.
STUDY = """
name: copied
workloads: [{name: cpu-spin}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker, knobs: {cpuset: "63"}}
repetitions: 5
warmup: 1
"""


def _outcome(cell, per_item: float) -> CellOutcome:  # type: ignore[no-untyped-def]
    items = [{"i": i, "e2e": per_item, "phases": {"compute": per_item * 0.9}} for i in range(5)]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0,
                       wall_s=1.0, startup_s=0.1, setup={"import": 0.01}, items=items,
                       done={"type": "done", "items": 5, "run_s": per_item * 5})


def test_summary_of_known_values(tmp_path: Path) -> None:
    study = load_study_text(STUDY, "copied.yaml", check_host=False)
    store = Store.create(tmp_path, STUDY, "copied", "copied.yaml", {"governor": "performance"})
    # docker is exactly 1.5× bare metal; the A/A entry wobbles by ±1% around it.
    wobble = [1.01, 0.99, 1.0, 1.0, 1.0]
    for cell in expand(study):
        base = 0.010 * wobble[cell.rep % len(wobble)]
        per_item = base * (1.5 if cell.platform == "docker" else 1.0)
        assert store.record(_outcome(cell, per_item), cell.platform_key)
    assert not store.record(_outcome(expand(study)[0], 1.0), "x")  # recorded once, never twice
    store.close()

    result = run_cli("summary", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    records = {(r["label"], r["metric"]): r for r in json.loads(result.stdout)}
    docker = records[("docker", "e2e")]
    assert docker["ratio"] == pytest.approx(1.5, rel=1e-9)
    assert docker["significant"] and docker["n"] == 5 and docker["knobs"] == {"cpuset": "63"}
    aa = records[("aa", "e2e")]
    assert aa["ratio"] == pytest.approx(1.0, abs=1e-9) and not aa["significant"]
    assert records[("docker", "phase.compute")]["ratio"] == pytest.approx(1.5)
    text = run_cli("summary", str(tmp_path)).stdout
    assert "1.50× baremetal" in text and "mostly in compute" in text


def test_facts_a_workload_noted_are_kept_with_the_cell() -> None:
    """Timing mode, epochs and the like travel in the done record and must reach platform_info."""
    from types import SimpleNamespace

    from isobench.runner.drivers import settle

    outcome = SimpleNamespace(platform_info={}, done={
        "type": "done", "items": 3, "run_s": 1.0, "timing": "clock", "epochs": 2,
        "metrics": {"x": 1.0}, "info": {"loadgen": {"valid": True}}})
    settle(outcome, None)
    assert outcome.platform_info["workload"] == {"timing": "clock", "epochs": 2, "loadgen": {"valid": True}}


INJECTED = """
name: injected
workloads: [{name: cpu-spin}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: slow10, knobs: {slowdown: 0.1}}
repetitions: 5
warmup: 0
"""


def test_an_injected_slowdown_is_named_where_its_time_went(tmp_path: Path) -> None:
    """The slowed entry's extra time is its ``injected`` phase, which the baseline has no value for:
    the sentence names it, not a real phase that moved by a fraction of it (before: "10.0% slower,
    mostly in compute (10% of the difference)")."""
    study = load_study_text(INJECTED, "injected.yaml", check_host=False)
    store = Store.create(tmp_path, INJECTED, "injected", "injected.yaml", {})
    wobble = [1.01, 0.99, 1.0, 1.0, 1.0]
    for cell in expand(study):
        work = 0.010 * wobble[cell.rep]
        slowed = cell.platform_key == "slow10"
        compute = work * (1.01 if slowed else 1.0)  # the real work moved by 1%; the injection by 9%
        phases = {"compute": compute, **({"injected": 0.0009} if slowed else {})}
        items = [{"i": i, "e2e": sum(phases.values()), "phases": phases} for i in range(5)]
        assert store.record(CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="",
                                        started_at=0.0, wall_s=1.0, startup_s=0.1, items=items,
                                        done={"type": "done", "items": 5, "run_s": 0.05}), cell.platform_key)
    store.close()
    text = run_cli("summary", str(tmp_path)).stdout
    assert "mostly in injected (90% of the difference)" in " ".join(text.split())

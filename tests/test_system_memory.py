"""The meminfo probe: the host's used memory over a cell, less the level before its launch, on real
bare-metal cells; a cell that ran beside another (a duet member) records none; and Prashanthi's
F3 reads it from cells that ran alone."""

from __future__ import annotations

import json
from importlib import resources

import yaml

from isobench.analysis.finding_spec import load_findings
from isobench.plan import expand
from isobench.runner.execute import CellOutcome, platform_for, run_cell
from isobench.runner.tenancy import run_group
from isobench.studyfile import load_study_text
from tests.conftest import need_root

MIB = 2**20
#: what the held cell allocates and touches: well above what other work on a shared host moves its
#: memory by in a second or two, so that the difference between two cells is the allocation
HELD_MIB = 512
METRICS = ("probe.meminfo.used_delta_max_bytes", "probe.meminfo.used_delta_median_bytes",
           "probe.meminfo.used_before_bytes")


def _cells(study: dict) -> list:
    base = {"name": "sysmem", "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0,
            "warmup_items": 0, "min_seconds": None, "aa": False, "schedule": "sequential", "timeout_s": 60,
            "probes": {"meminfo": {"interval_s": 0.05, "settle_s": 0.5}}}
    return expand(load_study_text(json.dumps({**base, **study}), "sysmem.yaml", check_host=False))


def _metrics(outcome: CellOutcome) -> dict[str, float]:
    return {name: value for name, value, _ in outcome.probes.metrics}


def _idle(hold_mb: int) -> tuple[dict[str, float], dict]:
    [cell] = _cells({"workloads": [{"name": "idle", "params": {"hold_s": 1.0, "hold_mb": hold_mb}}]})
    platform = platform_for(cell)
    platform.prepare()
    outcome = run_cell(cell, platform)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    status = outcome.platform_info["probes"]["meminfo"]
    assert status["status"] == "ok", status
    return _metrics(outcome), status["info"]


def test_a_lone_bare_metal_cell_records_the_memory_it_holds() -> None:
    need_root()
    empty, _ = _idle(0)
    held, info = _idle(HELD_MIB)
    assert all(name in empty and name in held for name in METRICS), (empty, held)
    assert "mixed" not in info and info["samples"] >= 10 and info["counted_until"] == "done"
    # the held cell's peak, above the level before its launch, is its allocation more than the
    # empty cell's (a Python process either way): within a tolerance for the host's own movement
    more = held["probe.meminfo.used_delta_max_bytes"] - empty["probe.meminfo.used_delta_max_bytes"]
    assert 0.6 * HELD_MIB * MIB < more < 1.4 * HELD_MIB * MIB, more / MIB
    assert held["probe.meminfo.used_delta_max_bytes"] > 0.6 * HELD_MIB * MIB
    assert held["probe.meminfo.used_delta_median_bytes"] <= held["probe.meminfo.used_delta_max_bytes"]
    # the figure is the cell's: read once the process has exited, the host has dropped by about
    # the allocation (the drop, not the level, so that the host's drift over the cell cancels)
    dropped = held["probe.meminfo.used_delta_max_bytes"] - info["after_delta_bytes"]
    assert 0.6 * HELD_MIB * MIB < dropped < 1.4 * HELD_MIB * MIB, dropped / MIB


def test_a_duet_member_records_no_host_memory_and_says_it_was_mixed() -> None:
    need_root()
    cells = _cells({"workloads": [{"name": "cpu-spin", "params": {"iterations": 3, "work": 20000}}],
                    "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "twin"}],
                    "baseline": "baremetal", "schedule": "duet", "duet_swap_s": 0.0})
    assert len(cells) == 2 and all(c.duet is not None for c in cells)
    platforms = [platform_for(c) for c in cells]
    for platform in platforms:
        platform.prepare()
    outcomes = run_group(cells, platforms)
    assert [o.status for o in outcomes] == ["ok", "ok"], [(o.error, o.stderr_tail) for o in outcomes]
    for outcome in outcomes:
        status = outcome.platform_info["probes"]["meminfo"]
        assert status["status"] == "ok", status
        assert not any(name.startswith("probe.meminfo.") for name in _metrics(outcome)), outcome.probes.metrics
        assert "ran beside 1 other cell" in status["info"]["mixed"]


def test_f3_reads_host_memory_from_a_sequential_study_with_the_probe() -> None:
    """F3's verdict comes from the system memory, in a study whose cells run one at a time; the
    process RSS it read before is shown with no verdict."""
    paper = load_findings("prashanthi-2023")
    [f3] = [f for f in paper.findings if f.id == "F3"]
    judged = [c for c in f3.checks if c.workload and not c.no_figure]
    assert [c.metric for c in judged] == ["probe.meminfo.used_delta_max_bytes"]
    [check] = judged
    assert check.kind == "difference" and check.expectation.op == "<" and check.expectation.value == 0.35e9
    assert any(r.date.isoformat() == "2026-11-27" for r in f3.revisions)
    text = resources.files("isobench.studies").joinpath(f"{check.study}.yaml").read_text()
    study = yaml.safe_load(text)
    assert study["schedule"] == "sequential" and "meminfo" in study["probes"]
    quick = {**study, **paper.quick[check.study]}
    assert quick["schedule"] == "sequential" and "meminfo" in quick["probes"]
    assert all(c.duet is None and c.tenant is None
               for c in expand(load_study_text(text, check.study, check_host=False), repetitions=1))

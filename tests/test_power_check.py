"""`isobench replicate --power` (replicate/power.py): which checks get an injection, what the
injected study runs, how the outcome is read, and what a miss does to a "does not hold". No cell
runs here: the stores are built from known values (tests/report_store.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, FAILS, HOLDS
from isobench.analysis.finding_result import CheckResult, FindingResult
from isobench.analysis.finding_spec import Check, load_findings, parse_findings
from isobench.replicate import power
from isobench.replicate.study_text import study_text
from isobench.workloads import timing
from tests import report_store


def _plans(paper: str) -> dict[tuple[str, str], power.PowerPlan]:
    return {(p.finding, p.what): p for p in power.plan_power(load_findings(paper))}


def test_f1_and_f2_get_the_papers_effect_inside_their_phases() -> None:
    plans = _plans("prashanthi-2023")
    f1 = plans[("F1", "LeNet compute, Docker / bare metal")]
    assert f1.injected and f1.effect == 1.537 and f1.effect_from == "effect"
    assert f1.phases == ("forward", "backward", "optimizer")
    assert f1.knobs() == {"slowdown": 0.537, "slowdown_phases": "forward,backward,optimizer"}
    f2 = plans[("F2", "MobileNet optimizer step, Docker / bare metal")]
    assert f2.injected and f2.effect == 6.703 and f2.phases == ("optimizer",)
    assert f2.knobs() == {"slowdown": 5.703, "slowdown_phases": "optimizer"}
    # what cannot be injected says why
    assert "ratio of ratios" in plans[("F1", "LeNet's overhead / MobileNet's")].reason
    assert "largest" in plans[("F2", "largest added time")].reason
    # the GPU checks get the same effect, injected into the GPU study where a host has one
    on_gpu = plans[("F1", "on the GPU: LeNet compute, runc with the GPU / bare metal")]
    assert on_gpu.injected and on_gpu.effect == 1.537 and on_gpu.phases == f1.phases


def test_a_count_effect_is_not_injected_and_says_it_needs_a_process() -> None:
    # device write-backs (F6) get an extra writer: tests/test_power_f6.py
    plans = _plans("park-bahn-2023")
    f4 = [p for (finding, _), p in plans.items() if finding == "F4" and p.what.startswith(("page faults", "CPU"))]
    assert f4 and all(not p.injected and "extra process" in p.reason for p in f4)


def test_an_effect_is_derived_from_expect_and_says_so() -> None:
    check = Check(what="x", workload="w", platform="docker", metric="phase.optimizer", expect="> 1.1")
    plan = power.plan_check("T1", check, "s", "baremetal")
    assert plan.injected and plan.effect == pytest.approx(1.21) and "derived" in plan.effect_from
    parity = Check(what="x", workload="w", platform="docker", metric="e2e", expect="within 0.03")
    assert not power.plan_check("T1", parity, "s", "baremetal").injected
    faster = Check(what="x", workload="w", platform="docker", metric="e2e", expect="> 0.5", effect=0.8)
    assert "speed-up" in power.plan_check("T1", faster, "s", "baremetal").reason
    itself = Check(what="x", workload="w", platform="baremetal", metric="e2e", effect=1.5)
    assert "baseline itself" in power.plan_check("T1", itself, "s", "baremetal").reason
    whole = Check(what="x", workload="w", platform="docker", metric="e2e", effect=1.5)
    assert power.plan_check("T1", whole, "s", "baremetal").knobs() == {"slowdown": 0.5}


@pytest.mark.parametrize("quick", [True, False])
def test_the_injected_arm_is_the_baseline_plus_the_injection_and_nothing_else(quick: bool) -> None:
    paper = load_findings("prashanthi-2023")
    plan = _plans("prashanthi-2023")[("F2", "MobileNet optimizer step, Docker / bare metal")]
    check = next(c for f in paper.findings for c in f.checks if c.what == plan.what)
    data = yaml.safe_load(study_text(paper, plan.study, quick, None))
    study = power.power_study(data, plan, check, quick)
    assert [w.get("label") or w["name"] for w in study["workloads"]] == ["mobilenet-train"]
    base, injected = study["platforms"]
    assert base == next(p for p in data["platforms"] if (p.get("label") or p["name"]) == "baremetal")
    assert injected["name"] == base["name"] == "baremetal" and injected["label"] == "docker"
    assert injected["knobs"] == {**(base.get("knobs") or {}), "slowdown": 5.703, "slowdown_phases": "optimizer"}
    assert {k: v for k, v in injected.items() if k not in ("label", "knobs")} == \
        {k: v for k, v in base.items() if k not in ("label", "knobs")}
    assert study["baseline"] == "baremetal" and study["aa"] is False
    # everything but the workloads, platforms, A/A, (at toy size) repetitions and the adaptive
    # metric (the checked phase's) is the study's own
    same = {k: v for k, v in study.items()
            if k not in ("workloads", "platforms", "aa", "baseline", "repetitions", "adaptive")}
    assert same == {k: v for k, v in data.items() if k in same}
    if quick:
        assert study["repetitions"] >= power.QUICK_REPETITIONS
    else:
        assert study["repetitions"] == data["repetitions"]
    if study["repetitions"] == "auto":
        assert study["adaptive"] == {**data["adaptive"], "metric": "phase.optimizer"}
    # the study it makes is one isobench accepts
    from isobench.studyfile import load_study_text

    parsed = load_study_text(yaml.safe_dump(study), "power", check_host=False)
    assert parsed.platforms[1].knobs["slowdown_phases"] == "optimizer"


def test_slowdown_phases_lengthen_the_named_phase_and_add_no_phase_of_their_own() -> None:
    try:
        timing.inject_slowdown(1.0, "optimizer")
        clock = timing.phase_clock(timing.CLOCK)
        clock.start()
        time.sleep(0.005)
        clock.lap("forward")
        time.sleep(0.005)
        clock.lap("optimizer")
        phases, e2e = clock.stop()
    finally:
        timing.inject_slowdown(0.0)
    assert set(phases) == {"forward", "optimizer"}
    assert phases["optimizer"] >= 2 * 0.005 and phases["forward"] < phases["optimizer"]
    assert e2e == pytest.approx(sum(phases.values()))
    assert timing.phase_clock(timing.CLOCK).__class__ is timing.PhaseClock  # reset: no injection left


PAPER = """
paper: test-paper
title: a paper with known outcomes
studies: [known]
findings:
  - id: T1
    source: "test §1"
    claim: "the optimizer is slower"
    paper: "3.4x"
    checks:
      - {what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer,
         expect: "> 2.0", effect: 3.4}
      - {what: pinned optimizer slower, workload: lenet-train, platform: docker-pinned, metric: phase.optimizer,
         expect: "> 1.5", effect: 1.6}
"""


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # docker: optimizer 3.4x; docker-pinned: optimizer 1.1x (standing in for an injection the design missed)
    return report_store.build(tmp_path_factory.mktemp("known") / "out")


def test_the_outcome_is_read_by_the_checks_own_analysis(known: Path) -> None:
    paper = parse_findings(PAPER, "test.yaml")
    plans = {p.what: p for p in power.plan_power(paper, baselines={"known": "baremetal"})}
    seen = power.read_power(paper, plans["optimizer slower"], known, {})
    assert seen.status == power.SEEN and seen.verdict == HOLDS and "3.4" in seen.shown
    assert seen.ci_low is not None and seen.ci_low > 2.0
    missed = power.read_power(paper, plans["pinned optimizer slower"], known, {})
    assert missed.status == power.MISSED and missed.verdict != HOLDS
    assert "missed" in power.power_words(missed) and "1.6× in optimizer" in power.power_words(missed)
    not_run = power.read_power(paper, plans["optimizer slower"], known.parent / "absent", {})
    assert not_run.status == power.NOT_RUN
    rows = power.power_rows([seen, missed])
    assert rows[0][4] == power.SEEN and rows[1][4].startswith(power.MISSED)
    page = "\n".join(power.markdown_power([seen, missed]))
    assert "| T1 | optimizer slower | 3" in page and "in optimizer | 3" in page and "| seen |" in page


def test_a_missed_injection_turns_does_not_hold_into_not_testable() -> None:
    paper = parse_findings(PAPER, "test.yaml")
    checks = [CheckResult("optimizer slower", HOLDS, "3.4×"), CheckResult("pinned optimizer slower", FAILS, "1.1×")]
    result = FindingResult("test-paper", "T1", "test §1", "claim", "3.4x", "", FAILS, "", "pinned: fails",
                           checks=checks)
    missed = power.PowerResult("T1", "pinned optimizer slower", power.MISSED, 1.6, "effect", "1.6× in optimizer",
                               "1.1× (0.9–1.3)", verdict=FAILS)
    power.apply_power(paper, [result], [missed])
    assert checks[0].verdict == HOLDS
    assert checks[1].verdict == DESIGN_UNTESTABLE and "missed an injected effect" in checks[1].reason
    assert result.verdict == DESIGN_UNTESTABLE  # a claim is all its parts: one held, one could not be seen
    # a seen injection leaves a "does not hold" standing
    again = [CheckResult("pinned optimizer slower", FAILS, "1.1×")]
    other = FindingResult("test-paper", "T1", "", "", "", "", FAILS, "", "", checks=again)
    power.apply_power(paper, [other], [power.PowerResult("T1", "pinned optimizer slower", power.SEEN)])
    assert again[0].verdict == FAILS and other.verdict == FAILS


def test_the_page_and_the_records_carry_the_power_table(tmp_path: Path) -> None:
    import json

    from rich.console import Console

    from isobench.replicate.document import write_markdown
    from isobench.replicate.run import PaperRun, write_records

    seen = power.PowerResult("F2", "MobileNet optimizer step, Docker / bare metal", power.SEEN, 6.703, "effect",
                             "6.703× in optimizer", "6.6× (6.1–7.2)", 6.6, 6.1, 7.2, HOLDS)
    skipped = power.PowerResult("F2", "largest added time", power.NOT_INJECTED, reason="a largest check")
    run = PaperRun("prashanthi-2023", "Prashanthi", [], 1.0, power=[seen, skipped])
    page = write_markdown([run], tmp_path / "r.md", ["isobench replicate prashanthi-2023 --power"], (0, 0), "")
    text = page.read_text()
    assert "## Power: injected effects of the paper's size" in text
    assert "| F2 | MobileNet optimizer step, Docker / bare metal |" in text and "not injected: a largest check" in text
    record = json.loads(write_records([run], tmp_path).read_text())["papers"][0]["power"]
    assert record[0]["status"] == power.SEEN and record[0]["effect"] == 6.703
    console = Console(record=True, width=200)
    power.print_power(run.power, console, "power")
    shown = console.export_text()
    assert "6.703× in optimizer" in shown and "seen" in shown


def test_one_paper_run_alone_keeps_the_other_papers_records(tmp_path: Path) -> None:
    # `replicate prashanthi-2023 --out X` then `replicate siddaramanna-john --out X`: the second
    # erased the first's time and command, and the page read prashanthi's time as 0.0 min
    import json

    from isobench.replicate.run import PaperRun, appended_command, previous_records, write_records

    first = PaperRun("prashanthi-2023", "Prashanthi", [], 654.0)
    write_records([first], tmp_path, ["isobench replicate prashanthi-2023"])
    earlier = previous_records(tmp_path)
    second = PaperRun("siddaramanna-john", "Siddaramanna", [], 1200.0)
    commands = appended_command(earlier["commands"], "isobench replicate siddaramanna-john")
    payload = json.loads(write_records([second], tmp_path, commands, earlier).read_text())
    assert [(p["paper"], p["seconds"]) for p in payload["papers"]] == [("prashanthi-2023", 654.0),
                                                                       ("siddaramanna-john", 1200.0)]
    assert payload["commands"] == ["isobench replicate prashanthi-2023", "isobench replicate siddaramanna-john"]
    # the same paper again replaces its own record, it is not listed twice
    again = json.loads(write_records([PaperRun("prashanthi-2023", "Prashanthi", [], 30.0)], tmp_path, commands,
                                     previous_records(tmp_path)).read_text())
    assert sorted((p["paper"], p["seconds"]) for p in again["papers"]) == [("prashanthi-2023", 30.0),
                                                                          ("siddaramanna-john", 1200.0)]


def test_a_power_run_goes_on_until_the_checked_phase_has_its_verdict() -> None:
    # F22 reads the preprocessing phase, 6% of a request: stopping on e2e's "equivalent" left the
    # injected 4% in that phase inside six pairs' noise (read 1.002x, 2026-11-28)
    paper = load_findings("siddaramanna-john")
    plan = _plans("siddaramanna-john")[("F22", "preprocessing, Docker with the data on overlay / bare metal")]
    check = next(c for f in paper.findings for c in f.checks if c.what == plan.what)
    data = yaml.safe_load(study_text(paper, plan.study, False, None))
    assert data["repetitions"] == "auto" and (data.get("adaptive") or {}).get("metric", "e2e") == "e2e"
    study = power.power_study(data, plan, check, False)
    assert study["adaptive"] == {**data["adaptive"], "metric": "phase.preprocess"}
    from isobench.studyfile import load_study_text

    assert load_study_text(yaml.safe_dump(study), "power", check_host=False).adaptive.metric == "phase.preprocess"
    # an e2e check keeps the study's own rounds
    e2e_plan = _plans("siddaramanna-john")[("F21", "ResNet-18 inference, Docker / bare metal")]
    e2e_check = next(c for f in paper.findings for c in f.checks if c.what == e2e_plan.what)
    assert power.power_study(data, e2e_plan, e2e_check, False).get("adaptive") == data.get("adaptive")

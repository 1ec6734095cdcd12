"""Finding rules on a store with known values: one that holds, one that does not, one that is
inconclusive, and ones that cannot be tested (a capability the host lacks, a metric not recorded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, FAILS, HOLDS, INCONCLUSIVE, UNTESTABLE
from isobench.analysis.finding_spec import PAPERS, load_findings, parse_findings
from isobench.analysis.findings import evaluate
from isobench.errors import UserError
from isobench.replicate.capabilities import missing_capabilities
from tests import report_store


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # docker: optimizer 3.4x, forward 1.02x, backward unchanged; docker-pinned: optimizer 1.1x with
    # one outlier repetition (1.6x) that widens its interval
    return report_store.build(tmp_path_factory.mktemp("known") / "out")


def spec(checks: str, needs: str = "[]") -> str:
    return f"""
paper: test-paper
title: a paper with known outcomes
studies: [known]
findings:
  - id: T1
    source: "test §1"
    claim: "a claim"
    paper: "a figure"
    needs: {needs}
    checks:
{checks}
"""


def run(directory: Path, checks: str, needs: str = "[]", missing: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    paper = parse_findings(spec(checks, needs), "test.yaml")
    return evaluate(paper, {"known": directory}, missing or {})[0]


def test_a_finding_that_holds(known: Path) -> None:
    result = run(known, """
      - {what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 2.0"}
      - {what: optimizer adds most, kind: largest, workload: lenet-train, platform: docker, metric: phase.optimizer,
         metrics: [phase.forward, phase.backward, phase.optimizer], scale: 1000, unit: ms}
""")
    assert result.verdict == HOLDS, result.reason
    first = result.checks[0]
    assert first.ci_low is not None and 3.2 < first.ci_low < first.estimate < first.ci_high < 3.6  # type: ignore[operator]
    assert "3.4" in first.shown and "optimizer" in result.checks[1].shown


def test_a_finding_that_does_not_hold(known: Path) -> None:
    result = run(known, """
      - {what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 2.0"}
      - {what: backward slower, workload: lenet-train, platform: docker, metric: phase.backward, expect: "> 1.5"}
""")
    assert result.verdict == FAILS
    assert "backward slower" in result.reason and "optimizer" not in result.reason
    # and a "largest" claim the data contradict: the forward pass does not add the most
    largest = run(known, """
      - {what: forward adds most, kind: largest, workload: lenet-train, platform: docker, metric: phase.forward,
         metrics: [phase.forward, phase.optimizer]}
""")
    assert largest.verdict == FAILS and "optimizer adds more" in largest.reason.replace("phase.", "")


def test_a_finding_that_is_inconclusive_says_how_many_repetitions(known: Path) -> None:
    probe = run(known, """
      - {what: pinned optimizer, workload: lenet-train, platform: docker-pinned, metric: phase.optimizer, expect: "> 0"}
""").checks[0]
    assert probe.ci_low is not None and probe.ci_high is not None
    # a threshold inside the interval, a tenth of the way from the estimate to its upper end
    threshold = probe.estimate + (probe.ci_high - probe.estimate) / 10  # type: ignore[operator]
    result = run(known, f"""
      - {{what: pinned optimizer, workload: lenet-train, platform: docker-pinned, metric: phase.optimizer,
          expect: "> {threshold:.6f}"}}
""")
    assert result.verdict == INCONCLUSIVE
    assert result.repetitions_needed is not None and result.repetitions_needed > probe.n
    assert "repetitions would settle it" in result.verdict_words


def test_equivalence_and_value_and_difference_rules(known: Path) -> None:
    within = run(known, """
      - {what: backward on par, workload: lenet-train, platform: docker, metric: phase.backward, expect: "within 0.03"}
""")
    assert within.verdict == HOLDS
    outside = run(known, """
      - {what: optimizer on par, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "within 0.03"}
""")
    assert outside.verdict == FAILS
    # involuntary switches per period: (5000 + 7 × repetition) / 1000 in the docker cells
    share = run(known, """
      - {what: switches per period, kind: value, workload: lenet-train, platform: docker,
         metric: probe.proc.ctx_involuntary, per: probe.cgroup.nr_periods, expect: "> 4.5"}
""")
    assert share.verdict == HOLDS and share.checks[0].estimate == pytest.approx(5.0175)
    # throttled periods / periods: 0.3 in every docker cell, a fixed outcome (issue 24: no evidence)
    fixed = run(known, """
      - {what: throttled share, kind: value, workload: lenet-train, platform: docker,
         metric: probe.cgroup.nr_throttled, per: probe.cgroup.nr_periods, expect: "> 0.25"}
""")
    assert fixed.verdict == DESIGN_UNTESTABLE and fixed.checks[0].estimate == pytest.approx(0.3)
    cycles = run(known, """
      - {what: extra cycles, kind: difference, workload: lenet-train, platform: docker,
         metric: probe.perf.cell.cycles, expect: "< 1.0e8", scale: 1.0e-9, unit: G}
""")
    assert cycles.verdict == FAILS and cycles.checks[0].estimate == pytest.approx(0.5e9, rel=0.05)
    # identical counts on both sides (an interval of zero width at exactly 1) are a fixed outcome:
    # no evidence against "more than 1" (issue 24; it used to read "does not hold")
    same = run(known, """
      - {what: periods, workload: lenet-train, platform: docker, metric: probe.cgroup.nr_periods, expect: "> 1.0"}
""")
    assert same.checks[0].ci_low == same.checks[0].ci_high == pytest.approx(1.0)
    assert same.verdict == DESIGN_UNTESTABLE and "the outcome is fixed" in same.reason


def test_what_cannot_be_tested_says_why(known: Path) -> None:
    no_gpu = {"gpu": "no GPU (no NVIDIA device or driver on this host)"}
    whole = run(known, """
      - {what: on the GPU, workload: lenet-train, platform: docker, expect: "> 1.0"}
""", needs="[gpu]", missing=no_gpu)
    assert whole.verdict == UNTESTABLE and whole.verdict_words == f"cannot be tested here: {no_gpu['gpu']}"
    # one part untestable, the rest decides, and the reason names the part left out
    part = run(known, """
      - {what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 2.0"}
      - {what: on the GPU, needs: [gpu]}
""", missing=no_gpu)
    assert part.verdict == HOLDS and "not tested here: on the GPU (no GPU" in part.reason
    # the same rule on a host that has the capability is tested
    assert run(known, """
      - {what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 2.0"}
""", needs="[gpu]").verdict == HOLDS
    unrecorded = run(known, """
      - {what: instructions, workload: lenet-train, platform: docker, metric: probe.perf.cell.instructions}
""")
    assert unrecorded.verdict == UNTESTABLE and "probe.perf.cell.instructions was not recorded" in unrecorded.reason
    not_run = evaluate(parse_findings(spec("""
      - {what: x, workload: lenet-train, platform: docker}
"""), "t.yaml"), {}, {})[0]
    assert not_run.verdict == UNTESTABLE and "was not run" in not_run.reason


def test_a_check_can_compare_two_workloads_on_one_platform(tmp_path: Path) -> None:
    # F8's shape: the same model on the CPU and on the GPU, as two workloads of one platform; the
    # "gpu" workload's forward pass is 6x faster and its other phases 1.5x
    two = report_store.STUDY.replace("""workloads:
  - name: lenet-train
    params: {steps: 10, batch_size: 8}
""", """workloads:
  - {name: lenet-train, label: cpu, params: {steps: 10, batch_size: 8}}
  - {name: lenet-train, label: gpu, params: {steps: 10, batch_size: 9}}
""")
    # the "cpu" workload with its own noise, so that its ratio to "gpu" is no fixed outcome
    jitter = [6.0 * x for x in (1.0, 1.01, 0.99, 1.004, 0.996, 1.0)]
    directory = report_store.build(tmp_path / "two", study_text=two, scale={"cpu": jitter, "gpu": 1.0})
    paper = parse_findings(spec("""
      - {what: forward CPU / GPU, workload: cpu, against_workload: gpu, platform: baremetal,
         metric: phase.forward, expect: "> 5.0"}
      - {what: E2E speed-up over forward speed-up, kind: ratio_of_ratios, workload: cpu, against_workload: gpu,
         platform: baremetal, metric: e2e, other: {workload: cpu, against_workload: gpu, platform: baremetal,
         metric: phase.forward}, expect: "< 1.5"}
"""), "t.yaml")
    result = evaluate(paper, {"known": directory}, {})[0]
    forward, ratio = result.checks
    assert forward.estimate == pytest.approx(6.0, rel=0.01) and forward.verdict == HOLDS
    assert ratio.estimate == pytest.approx(1.0) and result.verdict == HOLDS
    # without against_workload the same check compares the workload with itself on the baseline
    same = evaluate(parse_findings(spec("""
      - {what: forward, workload: cpu, platform: baremetal, metric: phase.forward, expect: "> 5.0"}
"""), "t.yaml"), {"known": directory}, {})[0]
    # (one group against itself: a fixed outcome, no evidence either way)
    assert same.checks[0].estimate == pytest.approx(1.0) and same.verdict == DESIGN_UNTESTABLE


def test_a_check_can_compare_two_values_of_a_knob_sweep(tmp_path: Path) -> None:
    # F24's shape: the same entry at two values of a sweep (one core against two); the cells at
    # two threads are half as long, with their own noise so that the ratio is no fixed outcome
    swept = report_store.STUDY.replace("knobs: {threads: 1}", "knobs: {threads: [1, 2]}")
    jitter = [0.5 * x for x in (1.0, 1.01, 0.99, 1.004, 0.996, 1.0)]
    directory = report_store.build(tmp_path / "swept", study_text=swept, knob_scale={"threads": {2: jitter}})
    paper = parse_findings(spec("""
      - {what: "forward, 2 threads / 1", workload: lenet-train, platform: baremetal, against: baremetal,
         knobs: {threads: 2}, against_knobs: {threads: 1}, metric: phase.forward, expect: "< 0.6"}
"""), "t.yaml")
    result = evaluate(paper, {"known": directory}, {})[0]
    assert result.checks[0].estimate == pytest.approx(0.5, rel=0.01) and result.verdict == HOLDS
    # without against_knobs the reference is the same group: one group against itself, a fixed
    # outcome that is no evidence either way
    same = evaluate(parse_findings(spec("""
      - {what: forward, workload: lenet-train, platform: baremetal, knobs: {threads: 2}, metric: phase.forward,
         expect: "< 0.6"}
"""), "t.yaml"), {"known": directory}, {})[0]
    assert same.checks[0].estimate == pytest.approx(1.0) and same.verdict == DESIGN_UNTESTABLE


def test_a_study_this_host_cannot_run_is_skipped_and_says_why() -> None:
    from isobench.replicate.run import unrunnable

    paper = load_findings("samani-salehi")
    no_gpu = {"gpu": "no GPU (no NVIDIA device or driver on this host)"}
    assert unrunnable(paper, no_gpu) == {"samani-salehi-gpu": no_gpu["gpu"]}
    assert unrunnable(paper, {"docker": "no engine"}) == {"samani-salehi": "no engine"}
    assert unrunnable(paper, {}) == {}
    f8 = next(f for f in evaluate(paper, {}, no_gpu, unrunnable(paper, no_gpu)) if f.id == "F8")
    assert f8.verdict == UNTESTABLE and f8.reason == no_gpu["gpu"]
    # the CPU study skipped (no Docker): F7 says so instead of "was not run"
    f7 = next(f for f in evaluate(paper, {}, {}, {"samani-salehi": "no engine"}) if f.id == "F7")
    assert f7.verdict == UNTESTABLE and f7.reason == "no engine"
    with pytest.raises(UserError, match="study_needs"):
        parse_findings(spec("      - {what: x, workload: w, platform: p}\n").replace(
            "studies: [known]", "studies: [known]\nstudy_needs: {other: [gpu]}"), "t.yaml")


def test_this_hosts_missing_gpu_is_named() -> None:
    missing = missing_capabilities({"gpu", "rapl"})
    has_gpu = os.path.exists("/dev/nvidiactl")
    assert ("gpu" in missing) == (not has_gpu)
    assert ("rapl" in missing) == (not any(os.path.isdir(p) for p in ("/sys/class/powercap/intel-rapl",
                                                                        "/sys/class/powercap/intel-rapl:0")))


def test_every_builtin_paper_parses_and_names_its_studies() -> None:
    from isobench.studyfile import builtin_studies

    ids = set()
    for name in PAPERS:
        paper = load_findings(name)
        assert paper.paper == name and set(paper.studies) <= set(builtin_studies())
        assert set(paper.quick) <= set(paper.studies)
        ids |= {f.id for f in paper.findings}
    assert {f"F{i}" for i in range(1, 11)} <= ids


def test_bad_findings_file_is_one_line_naming_the_field() -> None:
    with pytest.raises(UserError) as err:
        parse_findings(spec("""
      - {what: x, workload: w, platform: p, expect: "about 2"}
"""), "bad.yaml")
    text = str(err.value)
    assert "bad.yaml" in text and "expect" in text and "\n" not in text
    with pytest.raises(UserError, match="unknown paper"):
        load_findings("nobody-2020")


def test_nvmsim_rule_judges_each_trace_shape(known: Path) -> None:
    # every cell of the known store wrote back the same 60 pages: the replay is exact, no interval
    fits = run(known, """
      - {what: flush layer, kind: nvmsim, study: known, expect: "> 0.5"}
""")
    assert fits.verdict == HOLDS and "every trace shape (lenet-train on " in fits.checks[0].reason
    assert "traces" in fits.here
    never = run(known, """
      - {what: flush layer, kind: nvmsim, study: known, expect: "< 0.5"}
""")
    assert never.verdict == FAILS and "does not on lenet-train on " in never.reason

"""The power rule (analysis/finding_power.py) on stores with known values: a fixed outcome is no
evidence, "does not hold" needs a design that could have seen the paper's effect, a design limit
or another setting says so, and every ratio check carries its A/A and its minimum detectable effect."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats as sps

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, NOT_IN_SETTING, minimum_detectable
from isobench.analysis.finding_spec import load_findings, parse_findings
from isobench.analysis.findings import FAILS, HOLDS, FindingResult, evaluate
from isobench.errors import UserError
from isobench.report.findings_table import markdown_details, row
from tests import report_store

# the known store (tests/report_store.py): docker's optimizer step is 3.4× bare metal's, its
# backward pass unchanged; every cell counts the same 1000 CFS periods
SLOWER = '{what: optimizer slower, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 2.0"}'
NOT_SLOWER = '{what: backward slower, workload: lenet-train, platform: docker, metric: phase.backward, expect: "> 1.5"'
PERIODS = "{what: periods, workload: lenet-train, platform: docker, metric: probe.cgroup.nr_periods"


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report_store.build(tmp_path_factory.mktemp("known") / "out")


def spec(checks: list[str], extra: str = "") -> str:
    lines = "\n".join(f"      - {c}" for c in checks)
    more = "".join(f"    {line}\n" for line in extra.splitlines() if line)
    return f"""
paper: test-paper
title: a paper with known outcomes
studies: [known]
findings:
  - id: T1
    source: "test §1"
    claim: "a claim"
    paper: "a figure"
{more}    checks:
{lines}
"""


def run(directory: Path, checks: list[str], extra: str = "", missing: dict[str, str] | None = None) -> FindingResult:
    return evaluate(parse_findings(spec(checks, extra), "test.yaml"), {"known": directory}, missing or {})[0]


def test_a_fixed_outcome_is_no_evidence_either_way(known: Path) -> None:
    # the same count in every cell: the interval has zero width at exactly 1
    for expect in ("> 1.0", "< 1.5"):  # would read "does not hold", then "holds"
        result = run(known, [f'{PERIODS}, expect: "{expect}"}}'])
        check = result.checks[0]
        assert check.ci_low == check.ci_high == pytest.approx(1.0)
        assert check.verdict == result.verdict == DESIGN_UNTESTABLE
        assert result.verdict_words.startswith("not testable by this design: periods: the outcome is fixed")
    # beside a part the host cannot test, the finding still says what the design could not
    both = run(known, [f'{PERIODS}, expect: "> 1.0"}}', "{what: on the GPU, needs: [gpu]}"],
               missing={"gpu": "no GPU here"})
    assert both.verdict == DESIGN_UNTESTABLE and "not tested here: on the GPU (no GPU here)" in both.reason


def test_does_not_hold_needs_a_design_that_could_see_the_papers_effect(known: Path) -> None:
    faster = '{what: optimizer faster, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "< 1.0"'
    # without the paper's effect the old rule stands: the interval (about 3.4×) contradicts "< 1"
    assert run(known, [faster + "}"]).verdict == FAILS
    # a paper that found the container 2× faster: this design sees effects far smaller, so it may say no
    strong = run(known, [faster + ", effect: 0.5}"])
    assert strong.verdict == FAILS and "could see ≥ " in strong.checks[0].shown
    assert "the paper's 0.5×" in strong.checks[0].shown
    mde = strong.checks[0].mde
    assert mde is not None and 1.0 < mde < 1.2
    # a paper whose effect (0.1% faster) is smaller than the smallest this design could see
    weak = run(known, [faster + ", effect: 0.999}"])
    assert weak.verdict == DESIGN_UNTESTABLE
    assert "could only see effects ≥ " in weak.reason and "the paper's is -0.1%" in weak.reason
    # a paper's effect inside the interval is never contradicted by it, whatever the threshold
    inside = run(known, ['{what: optimizer far slower, workload: lenet-train, platform: docker, '
                         'metric: phase.optimizer, expect: "> 4.0", effect: 3.4}'])
    assert inside.verdict == DESIGN_UNTESTABLE and "includes the paper's 3.4×" in inside.reason


def test_a_design_limit_turns_does_not_hold_into_not_testable(known: Path) -> None:
    assert run(known, [NOT_SLOWER + "}"]).verdict == FAILS
    limited = run(known, [NOT_SLOWER + ', design_limit: "the tool chose the size"}'])
    assert limited.verdict == DESIGN_UNTESTABLE and limited.reason == "backward slower: the tool chose the size"
    # on the finding it covers every check; one that holds cannot stand for the part the design
    # could not see: the finding is not testable by this design, and says what held
    finding = run(known, [SLOWER, NOT_SLOWER + "}"], extra='design_limit: "a ratio of 0.5, not the paper\'s 0.05"')
    assert [c.verdict for c in finding.checks] == [HOLDS, DESIGN_UNTESTABLE]
    assert finding.verdict == DESIGN_UNTESTABLE and finding.reason.startswith("held: ")
    assert "not testable by this design: backward slower (a ratio of 0.5, not the paper's 0.05)" in finding.reason


def test_another_setting_words_does_not_hold_as_not_reproduced_here(known: Path) -> None:
    gpu = "setting: {paper: GPU, here: CPU}"
    result = run(known, [NOT_SLOWER + "}"], extra=gpu)
    assert result.verdict == NOT_IN_SETTING
    assert result.verdict_words == "not reproduced on the CPU; the GPU setting is not tested here"
    assert result.as_record()["verdict_words"] == result.verdict_words
    assert "backward slower: expected > 1.5" in result.reason
    assert run(known, [SLOWER], extra=gpu).verdict == HOLDS


def test_a_count_per_measured_item_divides_by_the_cells_items(known: Path) -> None:
    # every cell of the known store measured 4 items
    value = '{what: optimizer, kind: value, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "> 0"'
    whole, each = run(known, [value + "}"]), run(known, [value + ", per: items}"])
    assert each.checks[0].estimate == pytest.approx(whole.checks[0].estimate / 4)
    # a ratio of counts per item is the ratio of the counts where both sides measured as many
    ratio = run(known, [SLOWER.replace("}", ", per: items}")])
    assert ratio.checks[0].estimate == pytest.approx(run(known, [SLOWER]).checks[0].estimate)


def test_checks_in_the_papers_setting_decide_where_they_ran(known: Path) -> None:
    gpu = "setting: {paper: GPU, here: CPU}"
    on_gpu = SLOWER.replace("what: optimizer slower", 'what: "on the GPU: optimizer slower"').replace(
        "}", ", in_setting: true, needs: [gpu]}")
    # the paper's setting ran and holds: it decides, though the CPU's part resolved the other way
    decided = run(known, [NOT_SLOWER + "}", on_gpu], extra=gpu)
    assert [c.verdict for c in decided.checks] == [FAILS, HOLDS]
    assert decided.verdict == HOLDS and decided.verdict_words == "holds on the GPU"
    assert decided.reason == "every tested part holds; on the CPU: backward slower: does not hold"
    # the paper's setting resolved the other way: "does not hold", no longer "not reproduced here"
    fails = run(known, [SLOWER, on_gpu.replace('"> 2.0"', '"< 1.0"')], extra=gpu)
    assert fails.verdict == FAILS and fails.verdict_words == "does not hold on the GPU"
    assert "on the CPU: optimizer slower: holds" in fails.reason
    # on a host without the paper's setting, this host's checks decide, as before
    absent = run(known, [NOT_SLOWER + "}", on_gpu], extra=gpu, missing={"gpu": "no GPU here"})
    assert absent.verdict == NOT_IN_SETTING
    assert "not tested here: on the GPU: optimizer slower (no GPU here)" in absent.reason


def test_a_ratio_check_carries_its_aa_when_the_study_has_one(known: Path, tmp_path: Path) -> None:
    result = run(known, [SLOWER, '{what: share, kind: value, workload: lenet-train, platform: docker, '
                                 'metric: probe.proc.ctx_involuntary, per: probe.cgroup.nr_periods, expect: "> 1"}'])
    ratio, value = result.checks
    assert ratio.aa.startswith("A/A ") and "×" in ratio.aa
    aa = float(ratio.aa.removeprefix("A/A ").split("×")[0])
    assert 0.97 < aa < 1.03  # the baseline against its twin: near 1, unlike docker's 3.4×
    assert value.aa == ""  # only ratios have an A/A
    assert any(ratio.aa in line for line in markdown_details(result, ""))
    assert result.as_record()["checks"][0]["aa"] == ratio.aa
    # a study without an A/A entry says so in the details, and nowhere in the table
    bare = report_store.STUDY.replace("  - {name: baremetal, label: aa}\n", "") + "aa: false\n"
    directory = report_store.build(tmp_path / "bare", study_text=bare)
    none = run(directory, [SLOWER])
    assert none.checks[0].aa == "no A/A in this study"
    assert any("no A/A in this study" in line for line in markdown_details(none, ""))
    assert not any("A/A" in cell for cell in row(none))


def test_the_minimum_detectable_effect_shrinks_with_repetitions(tmp_path: Path) -> None:
    mdes = []
    for repetitions in (3, 12):
        study = report_store.STUDY.replace("repetitions: 6", f"repetitions: {repetitions}")
        directory = report_store.build(tmp_path / str(repetitions), study_text=study)
        check = run(directory, [NOT_SLOWER + "}"]).checks[0]
        assert check.mde is not None and "could see ≥ " in check.shown
        mdes.append(check.mde)
    assert 1.0 < mdes[1] < mdes[0]
    # the formula: (t(0.975, df) + t(0.80, df)) × SE, on the interval's own scale
    assert minimum_detectable(0.01, 10) == pytest.approx((sps.t.ppf(0.975, 10) + sps.t.ppf(0.8, 10)) * 0.01)
    assert minimum_detectable(0.0, 10) is None and minimum_detectable(None, None) is None


def test_the_builtin_rules_name_the_papers_effects_and_limits() -> None:
    prashanthi = {f.id: f for f in load_findings("prashanthi-2023").findings}
    assert prashanthi["F1"].checks[0].effect == pytest.approx(6.01 / 3.91, rel=1e-3)  # LeNet, 5.1.1
    assert prashanthi["F2"].checks[0].effect == pytest.approx(17.63 / 2.63, rel=1e-3)  # optimizer, 5.1.4
    assert all(prashanthi[i].setting is not None and prashanthi[i].setting.paper == "GPU" for i in ("F1", "F2"))
    f7 = next(f for f in load_findings("samani-salehi").findings if f.id == "F7")
    assert "0.5" in f7.checks[0].design_limit and "0.05" in f7.checks[0].design_limit
    f10 = next(f for f in load_findings("park-bahn-2023").findings if f.id == "F10")
    # F10's capacity is each trace's footprint, the write-through at the end charged: no design limit left
    assert not f10.design_limit and f10.checks[0].capacity_footprint == 1.0 and f10.checks[0].drain
    assert f10.checks[0].effect == pytest.approx(0.82)
    assert math.isclose(prashanthi["F1"].checks[1].effect or 0, (6.01 / 3.91) / (95.48 / 82.12), rel_tol=1e-3)


def test_a_ratio_effect_must_be_positive() -> None:
    with pytest.raises(UserError) as err:
        parse_findings(spec(['{what: x, workload: w, platform: p, effect: -1.5}']), "bad.yaml")
    assert "bad.yaml" in str(err.value) and "effect" in str(err.value) and "\n" not in str(err.value)

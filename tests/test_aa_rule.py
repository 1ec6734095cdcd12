"""What is an A/A (the baseline again, in everything but its label), and no verdict the study cannot
back: a direction needs enough pairs, and an effect inside the study's own A/A floor is no direction."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from isobench.analysis.compare import Comparison, compare, judge, pool_spread_with_aa
from isobench.analysis.verdict import MIN_DIRECTION_DF, MIN_DIRECTION_N, verdict_and_reason
from isobench.plan import expand
from isobench.plan.cells import group_key
from isobench.report.terminal import noise_floor_lines, sentence
from isobench.runner.adaptive import decide
from isobench.store import Store
from isobench.study.aa import is_aa_entry, is_aa_group
from isobench.study.model import Study
from isobench.studyfile import load_study_text
from tests.conftest import run_cli
from tests.test_verdicts import _outcome

#: the issue's minimal study (cpu-spin for its cheap parameters; no cell runs here)
MINE = """
name: mine
workloads: [{name: cpu-spin, params: {iterations: 3, work: 1000}}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: baremetal, label: slow3, knobs: {slowdown: 0.03}}
  - {name: docker}
baseline: baremetal
repetitions: 6
warmup: 0
"""


def _study(text: str) -> Study:
    return Study.model_validate(yaml.safe_load(text))


def _entry(study: Study, key: str) -> Any:
    return next(p for p in study.platforms if p.key == key)


# -- the rule, on the study model -----------------------------------------------------------
def test_an_entry_with_knobs_is_a_comparison_and_the_same_content_is_an_aa() -> None:
    study = _study(MINE)
    assert {p.key: is_aa_entry(study, p) for p in study.platforms} == {
        "baremetal": False, "aa": True, "slow3": False, "docker": False}
    # the label is not what makes it: the baseline again under any other label is an A/A
    renamed = _study(MINE.replace("label: aa", "label: twin"))
    assert is_aa_entry(renamed, _entry(renamed, "twin"))


@pytest.mark.parametrize("other, aa", [
    ("{name: docker, label: aa}", True),
    ("{name: docker, label: same, knobs: {cpus: 1}}", True),  # the study's knob written again
    ("{name: docker, label: crun, runtime: crun}", False),
    ("{name: docker, label: mine, image: 'me/torch:1'}", False),
    ("{name: docker, label: opts, options: {shm_size: 1g}}", False),
    ("{name: docker, label: crowd, tenants: 2}", False),  # a tenant group measures interference
    ("{name: docker, label: two, knobs: {cpus: 2}}", False),
    ("{name: podman, label: podman}", False),
])
def test_an_aa_differs_from_the_baseline_in_nothing_but_its_label(other: str, aa: bool) -> None:
    study = _study(f"""
name: rule
workloads: [{{name: cpu-spin}}]
knobs: {{cpus: 1}}
platforms:
  - {{name: docker}}
  - {other}
""")
    entry = study.platforms[1]
    assert is_aa_entry(study, entry) is aa
    assert is_aa_group(study, entry, {"cpus": 1}, {"cpus": 1}) is (aa or entry.key == "two")


def test_swept_knobs_are_compared_per_combination() -> None:
    study = _study("""
name: sweep
workloads: [{name: cpu-spin}]
knobs: {threads: [1, 2]}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: baremetal, label: one, knobs: {threads: 1}}
""")
    aa, one = _entry(study, "aa"), _entry(study, "one")
    assert is_aa_entry(study, aa) and not is_aa_entry(study, one)  # one runs only half the baseline's sets
    # per group: `one`'s threads=1 group is the baseline's threads=1 group again; never across knob sets
    assert is_aa_group(study, one, {"threads": 1}, {"threads": 1})
    assert not is_aa_group(study, aa, {"threads": 1}, {"threads": 2})


# -- the rule, in the analysis of a store --------------------------------------------------
def _record_all(store: Store, study: Study, value: Any) -> None:
    for cell in expand(study):
        assert store.record(_outcome(cell, value(cell)), cell.platform_key)


def test_slow3_with_knobs_is_compared_not_called_a_false_alarm(tmp_path: Path) -> None:
    study = load_study_text(MINE, "mine.yaml", check_host=False)
    store = Store.create(tmp_path, MINE, study.name, "mine.yaml", {})
    rng = random.Random(1)
    factor = {"baremetal": 1.0, "aa": 1.0, "slow3": 1.03, "docker": 1.0}
    _record_all(store, study, lambda c: 0.01 * factor[c.platform_key] * math.exp(rng.gauss(0, 0.002)))
    e2e = {c.label: c for c in compare(store) if c.metric == "e2e"}
    store.close()
    assert {label: c.is_aa for label, c in e2e.items()} == {"aa": True, "slow3": False, "docker": False}
    assert e2e["slow3"].verdict == "slower" and e2e["slow3"].noise_floor is not None
    lines = noise_floor_lines(list(e2e.values()))
    assert len(lines) == 1 and "false alarm" not in lines[0], lines
    records = json.loads(run_cli("summary", str(tmp_path), "--json", check=True).stdout)
    assert {r["label"]: r["is_aa"] for r in records if r.get("metric") == "e2e"} == {
        "aa": True, "slow3": False, "docker": False}
    # the record carries the verdict's reason, and `isobench schema summary` describes it
    schema = json.loads(run_cli("schema", "summary", check=True).stdout)
    Draft202012Validator(schema).validate(records)
    assert all(r["verdict_reason"] == "" for r in records if r.get("metric") == "e2e")


# -- no verdict the study cannot back ---------------------------------------------------------
def _paired(ratio: float, sd: float, n: int) -> tuple[float, float, float, float]:
    """log ratio, SE, df and p of ``n`` pairs whose log differences have exactly spread ``sd``."""
    from scipy import stats as sps

    se = sd / math.sqrt(n)
    log_ratio = math.log(ratio)
    return log_ratio, se, float(n - 1), float(2 * sps.t.sf(abs(log_ratio) / se, n - 1))


def test_a_direction_needs_enough_pairs() -> None:
    log_ratio, se, df, p = _paired(1.10, 0.01, 3)  # 10% resolved many times over, from 3 pairs
    assert p < 0.01
    verdict, reason = verdict_and_reason("e2e", log_ratio, se, df, p, 0.02, n=3)
    assert verdict == "inconclusive"
    assert reason == f"a direction needs at least {MIN_DIRECTION_N} pairs (or repetitions a side); this has 3"
    log_ratio, se, df, p = _paired(1.10, 0.01, MIN_DIRECTION_N)
    assert verdict_and_reason("e2e", log_ratio, se, df, p, 0.02, n=MIN_DIRECTION_N) == ("slower", "")
    # a crossover has n-2 df: 5 pairs are 3 df, fewer than a direction needs
    verdict, reason = verdict_and_reason("e2e", log_ratio, se, 3.0, p, 0.02, n=5)
    assert verdict == "inconclusive" and f"at least {MIN_DIRECTION_DF} degrees of freedom" in reason


def _comparison(ratio: float, low: float, high: float, n: int, floor: float | None, *, aa: bool = False,
                df: float | None = None) -> Comparison:
    se = (math.log(high) - math.log(low)) / 2 / 4.303  # a 95% t interval with 2 df, as the issue's
    c = Comparison(workload="lenet-train", platform="docker/runc", label="docker", knobs={}, metric="e2e",
                   baseline="baremetal", ratio=ratio, ci_low=low, ci_high=high, n=n, significant=True,
                   n_baseline=n, p_value=0.004, mean=ratio, baseline_mean=1.0, unit="s", method="paired-log",
                   is_aa=aa, noise_floor=floor, se=se, df=float(n - 1) if df is None else df, p_holm=0.004)
    judge(c)
    return c


def test_the_issues_docker_is_no_longer_called_faster() -> None:
    """A/A ±8.7% inconclusive; docker 0.95× (0.93–0.98, n=3, paired by round) was "4.6% faster"."""
    c = _comparison(0.954, 0.93, 0.98, 3, 0.087)
    assert c.verdict == "inconclusive"
    assert "this has 3" in c.verdict_reason and "inside the A/A noise floor ±8.7%" in c.verdict_reason
    text = sentence(c, [c])
    assert "faster" not in text and f"inconclusive ({c.verdict_reason})" in text
    # enough pairs, the same effect: still inside the floor, and more pairs of docker alone cannot
    # make it a direction (only equivalence, which a 4.6% effect is not within ±2%)
    many = _comparison(0.954, 0.945, 0.963, 12, 0.087, df=11)
    assert many.verdict == "inconclusive" and many.verdict_reason.startswith("inside the A/A noise floor")
    assert many.repetitions_needed is None


def test_the_floor_is_the_reach_the_reader_sees_on_both_sides() -> None:
    for ratio, inside in ((1.05, True), (1 / 1.05, True), (0.951, True), (1.049, True), (1.06, False), (0.94, False)):
        c = _comparison(ratio, ratio * 0.995, ratio * 1.005, 10, 0.05, df=9)
        assert (c.verdict == "inconclusive") is inside, (ratio, c.verdict)
        assert c.verdict in (("inconclusive",) if inside else ("slower", "faster"))


def test_inside_the_floor_equivalence_still_holds() -> None:
    c = _comparison(1.004, 1.002, 1.006, 10, 0.05, df=9)
    assert c.verdict == "equivalent" and c.verdict_reason.startswith("inside the A/A noise floor")


def test_the_aa_is_not_judged_against_its_own_floor_but_needs_enough_pairs() -> None:
    assert _comparison(1.04, 1.03, 1.05, 10, 0.05, aa=True, df=9).verdict == "slower"
    few = _comparison(1.04, 1.03, 1.05, 3, 0.05, aa=True)
    assert few.verdict == "inconclusive" and few.verdict_reason.endswith("this has 3")
    assert few.repetitions_needed is not None and few.repetitions_needed >= MIN_DIRECTION_N
    assert "inconclusive (a direction needs" in noise_floor_lines([few])[0]


# -- adaptive stopping applies the same guards ----------------------------------------------------
ADAPTIVE = """
name: held
workloads: [{name: cpu-spin, params: {iterations: 3, work: 1000}}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker}
repetitions: auto
adaptive: {min_repetitions: 5, max_repetitions: 12}
warmup: 0
"""


def test_a_comparison_held_inside_the_floor_keeps_its_aa_running(tmp_path: Path) -> None:
    study = load_study_text(ADAPTIVE, "a.yaml", check_host=False)
    store = Store.create(tmp_path, ADAPTIVE, study.name, "a.yaml", {})
    aa_noise = [1.06, 1 / 1.06, 1.0, 1.03, 1 / 1.03]  # an A/A floor of several percent
    docker_noise = [1.001, 0.999, 1.0, 1.0005, 0.9995]  # 3% slower, resolved at any level
    factor = {"baremetal": lambda r: 1.0, "aa": lambda r: aa_noise[r], "docker": lambda r: 1.03 * docker_noise[r]}
    _record_all(store, study, lambda c: 0.01 * factor[c.platform_key](c.rep))
    # the A/A stopped at an earlier look (its verdict is kept): it would run no more rounds
    aa_state = {"workload": "cpu-spin", "params": None, "label": "aa", "knobs": {}, "host": "",
                "status": "verdict", "reached_at": 4, "verdict": "equivalent", "alpha": 0.01}
    docker = next(c for c in compare(store) if c.label == "docker" and c.metric == "e2e")
    aa_state["params"] = docker.params
    assert docker.ci_low is not None and docker.ci_low > 1 and docker.verdict == "inconclusive"
    decision = decide(store, study, 5, {"looks": [4], "comparisons": [aa_state]})
    store.close()
    states = {s.label: s for s in decision.comparisons}
    assert states["docker"].status == "running" and states["docker"].verdict == "inconclusive"
    assert states["aa"].status == "verdict"  # stays stopped, with the verdict it stopped on
    assert group_key("cpu-spin", docker.params, "aa", {}) in decision.active_groups
    assert not decision.stop


# -- a comparison's pairs spread at least as much as its A/A's ------------------------------------

def _duet(label: str, ratio: float, spread: float, n: int, *, aa: bool = False, workload: str = "resnet-infer",
          method: str = "duet-paired") -> Comparison:
    se = spread / math.sqrt(n)
    low, high = math.exp(math.log(ratio) - 2.0 * se), math.exp(math.log(ratio) + 2.0 * se)
    return Comparison(workload=workload, platform=f"baremetal/{label}", label=label, knobs={}, metric="e2e",
                      baseline="baremetal", ratio=ratio, ci_low=low, ci_high=high, n=n, significant=False,
                      n_baseline=n, p_value=0.5, mean=ratio, baseline_mean=1.0, unit="s", method=method,
                      is_aa=aa, se=se, df=float(n - 1))


def test_a_comparison_that_stopped_on_pairs_that_happened_to_agree_gets_the_aas_spread() -> None:
    """The loaded benchmark's injected 3% on resnet-infer stopped after 6 pairs, 1.006× "equivalent"
    (0.996–1.016): its pairs spread 1.3% where the A/A's 24 spread 5.3%."""
    aa = _duet("aa", 0.999, 0.053, 24, aa=True)
    slow = _duet("slow3", 1.006, 0.013, 6)
    noisy = _duet("gvisor", 1.30, 0.09, 6)  # spreads more than the A/A: its own spread stands
    other = _duet("slow3", 1.006, 0.013, 6, workload="lenet-train")  # no A/A of its workload
    rounds = _duet("docker", 1.0, 0.013, 6, method="paired-log")  # paired by round: other pairs than the A/A's
    before = {id(c): (c.se, c.ci_low, c.ci_high) for c in (aa, noisy, other, rounds)}
    pool_spread_with_aa([aa, slow, noisy, other, rounds])
    assert slow.se == pytest.approx(0.053 / math.sqrt(6)) and slow.df == 23.0
    assert slow.ci_low < 1.0 < 1.03 < slow.ci_high, (slow.ci_low, slow.ci_high)  # the 3% is inside now
    assert "A/A's 5.3% over 24 pairs" in slow.method_reason
    judge(slow)
    assert slow.verdict == "inconclusive"  # no longer "equivalent" within ±2%
    assert all(before[id(c)] == (c.se, c.ci_low, c.ci_high) for c in (aa, noisy, other, rounds))


def test_duet_pairs_read_plainly_are_bounded_by_an_aa_read_as_a_crossover() -> None:
    """The loaded benchmark (b42): the A/A's 8 duet pairs, read as a crossover, spread 1.6%; the
    injected 3%'s 8, read plainly, spread 0.8% and read 1.018 (1.011-1.024), excluding the 3%.
    Both read duet pairs, so the A/A's spread bounds it; and the other way round."""
    aa = _duet("aa", 1.000, 0.016, 8, aa=True, method="duet-crossover")
    slow = _duet("slow3", 1.018, 0.008, 8)
    pool_spread_with_aa([aa, slow])
    assert slow.se == pytest.approx(0.016 / math.sqrt(8))
    assert slow.ci_low < 1.03 < slow.ci_high and slow.ci_low > 1.0, (slow.ci_low, slow.ci_high)
    plain_aa = _duet("aa", 1.000, 0.016, 8, aa=True)
    crossed = _duet("docker", 1.0, 0.008, 6, method="duet-crossover")
    pool_spread_with_aa([plain_aa, crossed])
    assert crossed.se == pytest.approx(0.016 / math.sqrt(6))

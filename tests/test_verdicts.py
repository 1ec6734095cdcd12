"""Verdicts (TOST, difference, inconclusive), blocked and duet pairing, contaminated cells, stopping on a verdict."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from pathlib import Path

import pytest

from isobench.analysis.blocked import Point, estimate
from isobench.analysis.compare import compare
from isobench.analysis.groups import load_groups
from isobench.analysis.stats import (
    CROSSOVER_METHOD,
    DUET_METHOD,
    METHOD,
    PAIRED_METHOD,
    paired_ratio_ci,
    ratio_ci,
)
from isobench.analysis.verdict import decide_verdict, repetitions_needed, within_margin
from isobench.analysis.warnings import study_warnings
from isobench.plan import expand
from isobench.runner.adaptive import look_alpha, look_level, spent
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests.conftest import run_cli
from tests.test_fleet import STUDY as FLEET_STUDY


def lognormal(n: int, median: float, sigma: float, rng: random.Random) -> list[float]:
    return [median * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


def verdict_of(sample: list[float], base: list[float], metric: str = "e2e", margin: float = 0.02) -> str:
    est = ratio_ci(sample, base)
    return decide_verdict(metric, est.log_ratio, est.se, est.df, est.p_value, margin)


# -- TOST and difference on samples with known ratios -------------------------------------
def test_equal_samples_with_tight_noise_are_equivalent() -> None:
    rng = random.Random(1)
    base, same = lognormal(10, 1.0, 0.005, rng), lognormal(10, 1.0, 0.005, rng)
    assert verdict_of(same, base) == "equivalent"
    est = ratio_ci(same, base)
    low, high = est.interval(0.90)  # type: ignore[misc]
    assert 1 / 1.02 <= low < 1 < high <= 1.02
    # the 90% interval of the TOST is narrower than the 95% one of the difference test
    assert est.ci_low < low and high < est.ci_high  # type: ignore[operator]


def test_a_ten_percent_cost_is_slower_and_reads_by_metric_kind() -> None:
    rng = random.Random(2)
    base, slow = lognormal(8, 1.0, 0.01, rng), lognormal(8, 1.10, 0.01, rng)
    assert verdict_of(slow, base) == "slower"
    assert verdict_of(base, slow) == "faster"
    assert verdict_of(slow, base, metric="cpu.per_item") == "slower"  # CPU time is a time
    assert verdict_of(slow, base, metric="probe.proc.page_faults_minor") == "higher"
    assert verdict_of(base, slow, metric="probe.proc.page_faults_minor") == "lower"


def test_huge_noise_is_inconclusive_with_a_sensible_number_of_repetitions() -> None:
    rng = random.Random(3)
    base, other = lognormal(4, 1.0, 0.30, rng), lognormal(4, 1.0, 0.30, rng)
    est = ratio_ci(other, base)
    assert verdict_of(other, base) == "inconclusive"
    needed = repetitions_needed(est.log_ratio, est.se, est.df, 4, 0.02)
    assert needed is not None and 4 < needed < 10_000
    # At that many repetitions, the same spread settles one of the two outcomes, and one fewer does not.
    sd = est.se * math.sqrt(4)  # type: ignore[operator]
    room, effect = math.log(1.02) - abs(est.log_ratio), abs(est.log_ratio)
    from scipy import stats as sps

    def settles(k: int) -> bool:
        df = est.df / 3 * (k - 1)  # type: ignore[operator]
        return (float(sps.t.ppf(0.95, df)) * sd / math.sqrt(k) < room
                or float(sps.t.ppf(0.975, df)) * sd / math.sqrt(k) < effect)

    assert settles(needed) and not settles(needed - 1)


def test_the_margin_is_settable() -> None:
    rng = random.Random(4)
    base, other = lognormal(6, 1.0, 0.03, rng), lognormal(6, 1.0, 0.03, rng)
    assert verdict_of(other, base, margin=0.02) == "inconclusive"
    assert verdict_of(other, base, margin=0.20) == "equivalent"
    # a 3% cost is equivalent at ±5% only if its interval stays inside: not with this noise at ±2%
    slow = [v * 1.03 for v in base]
    assert verdict_of(slow, base, margin=0.02) != "equivalent"


def test_a_resolved_tiny_difference_is_a_direction_within_the_margin() -> None:
    rng = random.Random(5)
    base = lognormal(10, 1.0, 0.001, rng)
    other = [v * 1.005 * math.exp(rng.gauss(0, 0.001)) for v in base]
    est = ratio_ci(other, base)
    assert decide_verdict("e2e", est.log_ratio, est.se, est.df, est.p_value, 0.02) == "slower"
    low, high = est.interval(0.90)  # type: ignore[misc]
    fake = dataclasses.make_dataclass("C", ["ci90_low", "ci90_high", "margin"])(low, high, 0.02)
    assert within_margin(fake)


def test_holm_can_hold_back_a_difference() -> None:
    rng = random.Random(6)
    base, slow = lognormal(8, 1.0, 0.01, rng), lognormal(8, 1.10, 0.01, rng)
    est = ratio_ci(slow, base)
    assert decide_verdict("e2e", est.log_ratio, est.se, est.df, 0.2, 0.02) == "inconclusive"


# -- paired by round, or Welch ------------------------------------------------------------
def _rounds(effect: float, shared: float, own: float, n: int = 8, seed: int = 7) -> tuple[list[Point], list[Point]]:
    """Both sides move with a per-round effect (``shared``) plus their own noise."""
    rng = random.Random(seed)
    sample, base = [], []
    for r in range(n):
        block = rng.gauss(0, shared)
        base.append(Point(r, math.exp(block + rng.gauss(0, own)), f"b/r{r}"))
        sample.append(Point(r, effect * math.exp(block + rng.gauss(0, own)), f"s/r{r}"))
    return sample, base


def test_correlated_rounds_are_paired_and_the_interval_is_narrower() -> None:
    sample, base = _rounds(1.03, shared=0.05, own=0.003)
    result = estimate(sample, base, "docker")
    assert result.method == PAIRED_METHOD and "paired by round" in result.reason
    assert result.se_paired is not None and result.se_unpaired is not None
    assert result.se_paired < result.se_unpaired / 3
    welch = ratio_ci([p.value for p in sample], [p.value for p in base])
    assert result.estimate.ci_high - result.estimate.ci_low < welch.ci_high - welch.ci_low  # type: ignore[operator]
    assert result.estimate.ci_low < 1.03 < result.estimate.ci_high  # type: ignore[operator]
    assert result.estimate.ci_low > 1  # type: ignore[operator]  # resolved only because of the pairing
    assert welch.ci_low < 1  # type: ignore[operator]


def test_an_incomplete_round_falls_back_to_welch_and_says_so() -> None:
    sample, base = _rounds(1.03, shared=0.05, own=0.003)
    base = [p for p in base if p.rep != 2]  # the baseline's cell of round 2 failed
    result = estimate(sample, base, "docker")
    assert result.method == METHOD and "round(s) 2 incomplete" in result.reason
    assert result.estimate.n_baseline == 7 and result.se_paired is None


def test_uncorrelated_rounds_stay_unpaired() -> None:
    sample, base = _rounds(1.0, shared=0.0, own=0.02, seed=11)
    result = estimate(sample, base, "docker")
    if result.se_paired is not None and result.se_paired >= result.se_unpaired:  # type: ignore[operator]
        assert result.method == METHOD and "does not help" in result.reason
    else:
        assert result.method == PAIRED_METHOD
    # without a shared round effect, the choice must not make the interval much narrower than Welch's
    assert result.estimate.se >= 0.7 * result.se_unpaired  # type: ignore[operator]


def test_duet_uses_only_the_partner_matched_baseline_cells() -> None:
    rng = random.Random(8)
    sample, base = [], []
    for r in range(6):
        noise = rng.gauss(0, 0.04)  # what hit the machine during this pair
        pair = f"r{r}:docker"
        base.append(Point(r, 1.0 * math.exp(noise), f"b/r{r}/duet-docker", pair, "docker"))
        sample.append(Point(r, 1.1 * math.exp(noise + rng.gauss(0, 0.002)), f"d/r{r}", pair, "baremetal"))
        # the baseline's cells beside another entry: twice as slow there, never part of docker's ratio
        base.append(Point(r, 2.0 * math.exp(rng.gauss(0, 0.04)), f"b/r{r}/duet-gvisor", f"r{r}:gvisor", "gvisor"))
    result = estimate(sample, base, "docker")
    assert result.method == DUET_METHOD and result.estimate.n == 6
    assert result.estimate.ratio == pytest.approx(1.1, rel=0.005)
    assert result.reference == [p.value for p in base if p.partner == "docker"]
    broken = estimate(sample[:-1], base, "docker")  # one pair lost its compared cell
    assert broken.method == METHOD and "incomplete" in broken.reason and broken.estimate.n_baseline == 6


def _duet_points(sides: list[int], core_effect: float, noise: float, effect: float, seed: int):  # type: ignore[no-untyped-def]
    """Duet pairs whose compared cell ran on ``sides[r]`` in round r; core 1 is ``core_effect``
    slower than core 0 for the whole run, and each cell has its own ``noise``."""
    rng = random.Random(seed)
    sample, base = [], []
    for r, side in enumerate(sides):
        drift = rng.gauss(0, 0.03)  # what hit the machine during this pair: both sides alike
        speed = {0: 1.0, 1: 1.0 + core_effect}
        pair = f"r{r}:docker"
        base.append(Point(r, speed[1 - side] * math.exp(drift + rng.gauss(0, noise)), f"b/r{r}", pair, "docker",
                          str(1 - side)))
        sample.append(Point(r, effect * speed[side] * math.exp(drift + rng.gauss(0, noise)), f"d/r{r}", pair,
                            "baremetal", str(side)))
    return sample, base


def test_duet_pairs_as_a_crossover_remove_a_steady_core_difference() -> None:
    # one core 10% slower than the other for the whole run, as seen on a 2-core VM here
    sample, base = _duet_points([r % 2 for r in range(8)], 0.10, 0.005, 1.03, seed=3)
    result = estimate(sample, base, "docker")
    assert result.method == CROSSOVER_METHOD and "removed by the side swaps" in result.reason
    said = re.search(r"cores' speeds differed by ([0-9.]+)%", result.reason)
    assert said and float(said.group(1)) == pytest.approx(10.0, abs=1.0)
    assert result.estimate.ratio == pytest.approx(1.03, rel=0.01)
    assert result.estimate.ci_low > 1.0  # type: ignore[operator]  # the 3% is resolved
    plain = paired_ratio_ci([(a.value, b.value) for a, b in zip(sample, base, strict=True)])
    assert plain.ci_low < 1.0 < plain.ci_high  # type: ignore[operator]  # paired alone it is not
    # the sides' imbalance does not bias it: 5 rounds on one side, 3 on the other
    uneven, base_uneven = _duet_points([0, 1, 0, 1, 0, 0, 1, 0], 0.10, 0.005, 1.03, seed=4)
    assert estimate(uneven, base_uneven, "docker").estimate.ratio == pytest.approx(1.03, rel=0.01)


def test_duet_without_sides_or_with_one_pair_on_a_side_stays_plain_paired() -> None:
    sample, base = _duet_points([r % 2 for r in range(8)], 0.10, 0.002, 1.1, seed=5)
    assert estimate(sample, base, "docker").method == CROSSOVER_METHOD
    # without side information (an older store), or one pair on a side: plain pairs
    bare = [p._replace(side=None) for p in sample]
    assert estimate(bare, base, "docker").method == DUET_METHOD
    lopsided, base_lopsided = _duet_points([0, 0, 0, 0, 0, 1], 0.10, 0.002, 1.1, seed=6)
    assert estimate(lopsided, base_lopsided, "docker").method == DUET_METHOD


# -- contaminated cells and re-runs, in a real store ----------------------------------------
STUDY = FLEET_STUDY.replace("name: cluster", "name: screened")  # the same small study as the fleet tests


def _outcome(cell, per_item: float, info: dict | None = None) -> CellOutcome:  # type: ignore[no-untyped-def]
    items = [{"i": i, "e2e": per_item, "phases": {"compute": per_item}} for i in range(3)]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0, wall_s=1.0,
                       startup_s=0.1, items=items, done={"type": "done", "items": 3, "run_s": per_item * 3},
                       platform_info=info or {})


DIRTY = {"interference": {"contaminated": True, "reason": "40% of the cell's core time went elsewhere (steal 0.1 s)"}}


def test_contaminated_cells_give_way_to_their_reruns_and_are_counted(tmp_path: Path) -> None:
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    store = Store.create(tmp_path, STUDY, study.name, "s.yaml", {})
    wobble = [1.0, 1.01, 0.99, 1.0, 1.0]
    for cell in expand(study):
        value = 0.010 * wobble[cell.rep] * (1.2 if cell.platform_key == "docker" else 1.0)
        dirty = (cell.platform_key, cell.rep) in (("docker", 1), ("aa", 2))
        assert store.record(_outcome(cell, value * (5.0 if dirty else 1.0), DIRTY if dirty else None), cell.platform_key)
        if (cell.platform_key, cell.rep) == ("docker", 1):  # re-run once: clean
            rerun = dataclasses.replace(cell, cell_id=cell.cell_id + "+rerun1")
            assert store.record(_outcome(rerun, value, {"rerun_of": cell.cell_id}), cell.platform_key)
    groups = {g.platform_key: g for g in load_groups(store)}
    docker, aa = groups["docker"], groups["aa"]
    # docker's contaminated round-1 cell is out, its re-run in; round 1 still has one value
    assert sorted(r for r, _ in docker.reps["e2e"]) == [0, 1, 2, 3, 4]
    assert max(docker.metrics["e2e"]) < 0.02 and docker.contaminated == 1 and docker.rerun == 1
    # aa's contaminated cell had no re-run: it is kept, and said to be kept
    assert max(aa.metrics["e2e"]) == pytest.approx(0.05 * 0.99) and aa.contaminated == 1 and aa.kept_contaminated == 1
    text = " ".join(w.text for w in study_warnings({}, list(groups.values()), [], 0, "baremetal"))
    assert "2 cells were contaminated (e.g. 40% of the cell's core time went elsewhere); 1 re-run, 1 kept" in text
    by_label = {c.label: c for c in compare(store) if c.metric == "e2e"}
    docker = by_label["docker"]
    # docker's own interval resolves its 20%, but the kept contaminated A/A cell (5x) widens the study's
    # A/A floor beyond it: the study cannot tell 20% from its own noise, so no direction is called
    assert docker.ratio == pytest.approx(1.2) and docker.ci_low > 1.19  # type: ignore[operator]
    assert by_label["aa"].is_aa and docker.noise_floor is not None and docker.noise_floor > 0.2
    assert docker.verdict == "inconclusive" and docker.verdict_reason.startswith("inside the A/A noise floor")
    store.close()
    records = {(r["label"], r["metric"]): r for r in json.loads(run_cli("summary", str(tmp_path), "--json").stdout)}
    docker_json = records[("docker", "e2e")]
    assert docker_json["verdict"] == "inconclusive" and docker_json["margin"] == 0.02
    assert docker_json["verdict_reason"] == docker.verdict_reason
    assert docker_json["ci90_low"] > 1 and "repetitions_needed" in docker_json and docker_json["method_reason"]


def test_duet_pairs_that_did_not_measure_at_once_are_named(tmp_path: Path) -> None:
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    store = Store.create(tmp_path, STUDY, study.name, "s.yaml", {})
    for cell in expand(study):
        # docker's pairs overlapped for a tenth of their windows, the A/A entry's for all of them
        shared = {"docker": 0.1, "aa": 1.0}.get(cell.platform_key, 0.1 if cell.rep % 2 else 1.0)
        assert store.record(_outcome(cell, 0.010, {"duet": {"pair": f"r{cell.rep}", "overlap": shared}}),
                            cell.platform_key)
    groups = list(load_groups(store))
    store.close()
    warnings = [w.text for w in study_warnings({}, groups, [], 0, "baremetal") if w.kind == "overlap"]
    assert len(warnings) == 1 and "on docker" in warnings[0] and "only 10% of their windows" in warnings[0], warnings


def test_duet_store_pairs_each_entry_with_its_own_baseline_cells(tmp_path: Path) -> None:
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    store = Store.create(tmp_path, STUDY, study.name, "s.yaml", {})
    rng = random.Random(9)
    cells = expand(study)
    for rep in range(5):
        for other, effect in (("aa", 1.0), ("docker", 1.3)):
            noise = math.exp(rng.gauss(0, 0.05))
            base = next(c for c in cells if c.rep == rep and c.platform_key == "baremetal")
            mine = next(c for c in cells if c.rep == rep and c.platform_key == other)
            pair = f"r{rep}:{other}"
            base = dataclasses.replace(base, cell_id=f"{base.cell_id}/duet-{other}")
            info = {"duet": {"pair": pair, "side": rep % 2, "partner": other}}
            assert store.record(_outcome(base, 0.01 * noise * (2 if other == "aa" else 1), info), "baremetal")
            info = {"duet": {"pair": pair, "side": 1 - rep % 2, "partner": "baremetal"}}
            value = 0.01 * noise * effect * (2 if other == "aa" else 1) * math.exp(rng.gauss(0, 0.002))
            assert store.record(_outcome(mine, value, info), other)
    by_label = {c.label: c for c in compare(store) if c.metric == "e2e"}
    docker, aa = by_label["docker"], by_label["aa"]
    assert docker.method == aa.method == DUET_METHOD and docker.n == docker.n_baseline == 5
    assert docker.ratio == pytest.approx(1.3, rel=0.01) and docker.verdict == "slower"
    assert aa.ratio == pytest.approx(1.0, abs=0.01) and aa.verdict == "equivalent"
    assert docker.se_paired < docker.se_unpaired / 5  # type: ignore[operator]


# -- adaptive repetitions stop on a verdict, with alpha spending -----------------------------
def test_alpha_spending_spends_at_most_alpha_over_all_looks() -> None:
    looks = list(range(3, 21))
    increments = [look_alpha(r, 20, looks) for r in looks]
    assert sum(increments) == pytest.approx(spent(1.0)) and spent(1.0) == pytest.approx(0.05)
    assert all(0 < a < 0.05 for a in increments)
    assert look_alpha(5, 20, [3, 5]) == pytest.approx(look_alpha(5, 20, [3, 5, 7]))  # a resumed look: same level


def test_spending_keeps_false_stops_near_alpha_where_nominal_looks_do_not() -> None:
    """No effect, a look after every round: stopping on a nominal 5% difference stops wrongly far more
    often than 5%; the spending rule does not."""
    rng = random.Random(10)
    max_rounds, studies = 15, 400
    nominal = spending = bonferroni = 0
    fractions = {r: r / max_rounds for r in range(3, max_rounds + 1)}
    for _ in range(studies):
        a, b = lognormal(max_rounds, 1.0, 0.05, rng), lognormal(max_rounds, 1.0, 0.05, rng)
        looks: list[int] = []
        hit_nominal = hit_spending = hit_bonferroni = False
        for r in range(3, max_rounds + 1):
            looks.append(r)
            est = ratio_ci(a[:r], b[:r])
            args = ("e2e", est.log_ratio, est.se, est.df, est.p_value, 1e-9)  # no equivalence: differences only
            hit_nominal |= decide_verdict(*args) != "inconclusive"
            hit_spending |= decide_verdict(*args, alpha=look_level(looks, fractions)) != "inconclusive"
            hit_bonferroni |= decide_verdict(*args, alpha=look_alpha(r, max_rounds, looks)) != "inconclusive"
        nominal += hit_nominal
        spending += hit_spending
        bonferroni += hit_bonferroni
    assert nominal / studies > 0.10
    # the level that spends each increment exactly, given the nested looks: still near alpha, with
    # Welch's t at 3 rounds a side; testing at the increment itself (Bonferroni) stops far less often
    assert spending / studies <= 0.07
    assert bonferroni / studies < spending / studies


ADAPTIVE = """
name: verdicts
workloads: [{name: cpu-spin, params: {iterations: 3, work: 1000}}]
platforms:
  - {name: baremetal}
  - {name: docker, label: slow}
  - {name: docker, label: noisy}
repetitions: auto
adaptive: {min_repetitions: 3, max_repetitions: 8}
warmup: 0
"""
MEDIAN = {"baremetal": 1.0, "slow": 1.10, "noisy": 1.0}
SD = {"baremetal": 0.005, "slow": 0.005, "noisy": 0.3}


def test_adaptive_stops_a_comparison_on_its_verdict(tmp_path: Path) -> None:
    from isobench.runner.adaptive import cells_to_run

    study = load_study_text(ADAPTIVE, "a.yaml", check_host=False)
    store = Store.create(tmp_path, ADAPTIVE, study.name, "a.yaml", {})
    rng = random.Random(12)
    for cell in cells_to_run(study, expand(study), store, say=lambda _: None):
        value = 0.01 * MEDIAN[cell.platform_key] * math.exp(rng.gauss(0, SD[cell.platform_key]))
        assert store.record(_outcome(cell, value), cell.platform_key)
    meta = json.loads(store.meta("adaptive") or "{}")
    states = {c["label"]: c for c in meta["comparisons"]}
    # no target in the study: a 10% cost stops on its verdict at the first look with the 5 pairs a
    # direction needs (the looks at 3 and 4 rounds resolve it, but the report would refuse it there)
    assert states["slow"]["status"] == "verdict" and states["slow"]["verdict"] == "slower"
    assert states["slow"]["reached_at"] == 5
    assert states["slow"]["alpha"] == pytest.approx(look_level([3, 4, 5], {3: 3 / 8, 4: 4 / 8, 5: 5 / 8}))
    assert states["slow"]["alpha"] > 2 * look_alpha(5, 8, [3, 4, 5])  # the nested looks let it spend more
    assert states["noisy"]["status"] == "budget" and states["noisy"]["verdict"] == "inconclusive"
    assert meta["reason"].startswith("the budget of 8 repetitions ran out") and "alpha spending" in meta["reason"]
    assert meta["looks"] == list(range(3, 9))
    reps = dict(store.conn.execute("SELECT platform_key, COUNT(*) FROM cells GROUP BY 1").fetchall())
    assert reps["slow"] == 5 and reps["noisy"] == reps["baremetal"] == 8  # a stopped comparison runs no more rounds


def test_a_time_budget_is_the_horizon_each_look_spends_by_the_time_share(tmp_path: Path) -> None:
    """With a time budget, alpha is spent by the larger of the rounds' share and the time's share: a
    study whose rounds cost more than the round cap expects spends its alpha by the time its budget
    ends, instead of stopping there with some unspent; over all looks it still spends at most 5%."""
    from isobench.runner.adaptive import cells_to_run, information_fraction

    assert information_fraction(6, 240.0, 24, 480.0) == pytest.approx(0.5)  # time leads
    assert information_fraction(12, 60.0, 24, 480.0) == pytest.approx(0.5)  # rounds lead
    assert information_fraction(6, 240.0, 24, None) == pytest.approx(0.25)  # no time budget: rounds only
    assert information_fraction(30, 900.0, 24, 480.0) == 1.0
    text = ADAPTIVE.replace("max_repetitions: 8}", "max_repetitions: 24, max_time_s: 30}")
    study = load_study_text(text, "a.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "a.yaml", {})
    rng = random.Random(12)
    for cell in cells_to_run(study, expand(study), store, say=lambda _: None):
        value = 0.01 * MEDIAN[cell.platform_key] * math.exp(rng.gauss(0, SD[cell.platform_key]))
        assert store.record(_outcome(cell, value), cell.platform_key)  # each cell takes 1 s
    meta = json.loads(store.meta("adaptive") or "{}")
    states = {c["label"]: c for c in meta["comparisons"]}
    fractions = {int(r): t for r, t in meta["fractions"]}
    # three 1-s cells a round while every group runs: 9 s of 30 after 3 rounds, far ahead of 3/24
    assert fractions[3] == pytest.approx(9 / 30)
    assert all(t >= r / 24 for r, t in fractions.items())
    assert states["slow"]["status"] == "verdict" and states["slow"]["reached_at"] == 5
    assert states["slow"]["alpha"] == pytest.approx(look_level([3, 4, 5], fractions))
    # the noisy comparison runs on (two cells a round) until the time, not the 24 rounds, ends it
    assert meta["reason"].startswith("the time budget ran out") and meta["rounds"] < 24
    assert fractions[meta["rounds"]] > 0.9  # nearly all the alpha spent by the last look
    assert spent(max(fractions.values())) <= 0.05

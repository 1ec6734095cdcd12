"""repetitions: auto: stable cell ids, the stopping rule on known values, and a real tiny study.

Stopping on a verdict under alpha spending has its own tests in test_verdicts.py."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from isobench.analysis.compare import compare, floor_of
from isobench.plan import expand
from isobench.runner.adaptive import cells_to_run, decide
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests.conftest import need_root, run_cli, write_study

STUDY = """
name: auto
workloads: [{name: cpu-spin, params: {iterations: 3, work: 1000}}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker, label: noisy}
  - {name: docker, label: quiet}
repetitions: auto
adaptive: {target: 0.02, min_repetitions: 3, max_repetitions: 12}
warmup: 1
"""
#: relative noise per group: 'noisy' needs many more repetitions than the others to reach ±2%
SD = {"baremetal": 0.005, "aa": 0.005, "noisy": 0.02, "quiet": 0.005}


def _outcome(cell, value: float) -> CellOutcome:  # type: ignore[no-untyped-def]
    items = [{"i": 0, "e2e": value, "phases": {"compute": value}}]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0, wall_s=1.0,
                       startup_s=0.1, items=items, done={"type": "done", "run_s": value})


def _simulate(tmp_path: Path, text: str, seed: int = 0, sd: dict[str, float] = SD,
              shift: dict[str, float] | None = None) -> Store:
    study = load_study_text(text, "auto.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "auto.yaml", {})
    rng = random.Random(seed)
    for cell in cells_to_run(study, expand(study), store, say=lambda _: None):
        value = 0.01 * math.exp(rng.gauss((shift or {}).get(cell.platform_key, 0.0), sd[cell.platform_key]))
        assert store.record(_outcome(cell, value), cell.platform_key)
    return store


def test_cell_ids_stay_stable_as_rounds_are_added() -> None:
    study = load_study_text(STUDY, "auto.yaml", check_host=False)
    assert study.initial_repetitions == 3
    short, long = expand(study), expand(study, 7)
    assert [(c.cell_id, c.seq) for c in long[:len(short)]] == [(c.cell_id, c.seq) for c in short]
    assert {c.rep for c in long if not c.warmup} == set(range(7))


def test_adaptive_stops_each_comparison_when_precise_and_says_why(tmp_path: Path) -> None:
    store = _simulate(tmp_path, STUDY)
    meta = json.loads(store.meta("adaptive") or "{}")
    states = {c["label"]: c for c in meta["comparisons"]}
    assert meta["stopped"] and meta["reason"].startswith("every comparison has a verdict (1 equivalent) or "
                                                         "reached ±2.0% (look at ")
    assert "alpha spending" in meta["reason"] and meta["looks"][0] == 3
    # Every comparison stopped on a verdict or on the study's explicit width target.
    assert all(c["status"] == "verdict" or c["half_width"] <= 0.02 for c in meta["comparisons"])
    # The quiet comparisons stopped at the first check (quiet on its equivalence verdict); the noisy one
    # needed more rounds.
    assert states["quiet"]["reached_at"] == 3 and states["aa"]["reached_at"] == 3
    assert states["quiet"]["status"] == "verdict" and states["quiet"]["verdict"] == "equivalent"
    assert states["noisy"]["reached_at"] > 3
    reps = dict(store.conn.execute("SELECT platform_key, COUNT(*) FROM cells WHERE warmup = 0 GROUP BY 1").fetchall())
    assert reps["quiet"] == reps["aa"] == 3  # stopped groups run no further rounds ...
    assert reps["noisy"] == reps["baremetal"] == states["noisy"]["reached_at"]  # ... the baseline runs with the rest


def _served_study(tmp_path: Path, aa_sd: float, aa_shift: float = 0.0) -> tuple[Store, dict, dict]:
    # The A/A is noisier than the comparisons: left to itself it runs on for a verdict of its own,
    # but its floor serves 'quiet' (decided at once) and 'noisy' (later).
    text = STUDY.replace("adaptive: {target: 0.02, min_repetitions: 3, max_repetitions: 12}",
                         "adaptive: {min_repetitions: 3, max_repetitions: 40}")
    store = _simulate(tmp_path, text, sd={**SD, "aa": aa_sd, "noisy": 0.012}, shift={"aa": aa_shift})
    meta = json.loads(store.meta("adaptive") or "{}")
    states = {c["label"]: c for c in meta["comparisons"]}
    assert states["quiet"]["status"] == "verdict" and states["quiet"]["reached_at"] == 3
    assert states["noisy"]["status"] == "verdict" and states["noisy"]["reached_at"] > 3
    return store, meta, states


def test_an_aa_stops_with_the_comparisons_it_is_the_floor_for_once_its_floor_is_in_the_margin(
        tmp_path: Path) -> None:
    store, meta, states = _served_study(tmp_path, 0.01)
    # The A/A ran exactly as long as the last comparison it serves, and says why it stopped.
    assert states["aa"]["status"] == "served" and states["aa"]["verdict"] in ("inconclusive", "equivalent")
    assert states["aa"]["reached_at"] == states["noisy"]["reached_at"] < 40
    assert "1 A/A entry stopped with the comparisons it is the floor for" in meta["reason"]
    reps = dict(store.conn.execute("SELECT platform_key, COUNT(*) FROM cells WHERE warmup = 0 GROUP BY 1").fetchall())
    assert reps["aa"] == reps["noisy"] == states["noisy"]["reached_at"]
    from isobench.report.adaptive_table import stop_words
    assert stop_words(states["aa"], meta).startswith(f"stopped at round {states['aa']['reached_at']}: every "
                                                     "comparison it is the noise floor for had its verdict")


@pytest.mark.parametrize("aa_sd", [0.04, 0.018])
def test_an_aa_whose_floor_is_not_well_within_the_margin_runs_on(tmp_path: Path, aa_sd: float) -> None:
    # The floor is what the study states about itself: a wide one keeps its rounds, and so does one
    # near the margin (0.018: about ±2% when 'noisy' stops), which would leave no room for equivalence.
    store, _, states = _served_study(tmp_path, aa_sd)
    assert (states["aa"]["reached_at"] or 40) > states["noisy"]["reached_at"]  # past its comparisons
    aa = next(c for c in compare(store) if c.label == "aa" and c.metric == "e2e")
    if states["aa"]["status"] == "served":  # ... until the floor it states was within 3/4 of the margin
        assert floor_of(aa) <= 0.75 * aa.margin
    else:  # ... or to the end of the budget, stating the floor it reached
        assert states["aa"]["status"] == "budget" and aa.n == 40 and floor_of(aa) > 0.75 * aa.margin


def test_an_aa_that_reads_a_direction_runs_on_instead_of_stopping_at_it(tmp_path: Path) -> None:
    # An A/A biased by 2.5% (a false alarm the study should show, not freeze) reads "slower" early;
    # it does not stop there, it runs with the comparisons it serves, and then to the budget.
    store, meta, states = _served_study(tmp_path, 0.005, aa_shift=0.025)
    assert states["aa"]["status"] == "budget" and states["aa"]["verdict"] == "slower"
    reps = dict(store.conn.execute("SELECT platform_key, COUNT(*) FROM cells WHERE warmup = 0 GROUP BY 1").fetchall())
    assert reps["aa"] == 40 > reps["noisy"]


def test_adaptive_budget_runs_out_and_is_named(tmp_path: Path) -> None:
    tight = STUDY.replace("target: 0.02", "target: 0.0005").replace("max_repetitions: 12", "max_repetitions: 5")
    store = _simulate(tmp_path, tight)
    meta = json.loads(store.meta("adaptive") or "{}")
    assert meta["reason"].startswith("the budget of 5 repetitions ran out (look at 5 round(s): α=")
    # No width is reached; only a comparison with a verdict escapes the budget.
    assert {c["status"] for c in meta["comparisons"]} <= {"budget", "verdict"}
    # (an A/A keeps the verdict it read, but never stops on it: it runs with the budget)
    assert all(c["verdict"] == "inconclusive" for c in meta["comparisons"] if c["status"] == "budget"
               and c["label"] != "aa")
    assert any(c["status"] == "budget" for c in meta["comparisons"])
    assert store.conn.execute("SELECT MAX(rep) FROM cells").fetchone()[0] == 4
    # decide() on the finished store gives the same verdict (what --resume relies on)
    study = load_study_text(tight, "auto.yaml", check_host=False)
    assert decide(store, study, 5).stop


def test_adaptive_schema_errors() -> None:
    with pytest.raises(Exception, match="repetitions: auto"):
        load_study_text(STUDY.replace("repetitions: auto", "repetitions: 4"), "x.yaml", check_host=False)
    with pytest.raises(Exception, match="max_repetitions"):
        load_study_text(STUDY.replace("max_repetitions: 12", "max_repetitions: 2"), "x.yaml", check_host=False)


def test_real_adaptive_study_on_bare_metal(tmp_path: Path, tiny_spin: dict) -> None:
    need_root()
    study = {"name": "auto-real", "workloads": [tiny_spin],
             "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
             "repetitions": "auto", "adaptive": {"target": 0.0001, "min_repetitions": 2, "max_repetitions": 3},
             "warmup": 0, "timeout_s": 120}
    out = tmp_path / "out"
    result = run_cli("run", str(write_study(tmp_path / "s.yaml", study)), "--out", str(out))
    assert result.returncode == 0, result.stderr + result.stdout
    # The width target cannot be reached, so the study stops on a verdict (after round 2 or 3) or when
    # the budget of 3 runs out. Which verdict is the host's business: a quiet host shows the A/A entry
    # equivalent, while CI right after set-up (load 1.3) once read it 4% slower at the third look.
    stop = re.search(r"adaptive repetitions: stopped after (\d) round\(s\): (the budget of 3 repetitions ran out|"
                     r"every comparison has a verdict \(1 (?:equivalent|slower|faster)\))",
                     result.stdout.replace("\n", " "))
    assert stop, result.stdout
    rounds = int(stop.group(1))
    assert rounds == 3 if stop.group(2).startswith("the budget") else rounds in (2, 3)
    store = Store.open(out)
    # every round ran both entries once (re-runs of contaminated cells come on top)
    assert store.conn.execute("SELECT COUNT(*) FROM cells WHERE cell_id NOT LIKE '%+rerun%'").fetchone()[0] == 2 * rounds
    report = run_cli("report", str(out), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert report.returncode == 0, report.stderr
    assert "### Adaptive repetitions" in (tmp_path / "r.md").read_text()


def test_the_time_budget_prices_the_next_round_by_the_groups_it_runs(tmp_path: Path) -> None:
    from isobench.runner.adaptive import next_round_cost

    tight = STUDY.replace("target: 0.02", "target: 0.0005").replace("max_repetitions: 12", "max_repetitions: 3")
    store = _simulate(tmp_path, tight)  # every cell took 1 s: 3 rounds and a warm-up of 4 groups
    study = load_study_text(tight, "auto.yaml", check_host=False)
    groups = {c.platform_key: c.group for c in expand(study)}
    # a round of every group costs 4 cells; one of the noisy comparison costs it and its baseline only
    assert next_round_cost(store, study, 3, set(groups.values())) == pytest.approx(4.0)
    assert next_round_cost(store, study, 3, {groups["noisy"], groups["baremetal"]}) == pytest.approx(2.0)
    # a cell whose earlier rounds took longer costs what they took
    store.conn.execute("UPDATE cells SET wall_s = 5.0 WHERE platform_key = 'noisy'")
    assert next_round_cost(store, study, 3, {groups["noisy"], groups["baremetal"]}) == pytest.approx(6.0)


def test_a_duet_pair_spends_its_time_once(tmp_path: Path) -> None:
    from isobench.runner.adaptive import next_round_cost, study_seconds

    text = STUDY.replace("warmup: 1", "warmup: 0\nschedule: duet")
    study = load_study_text(text, "auto.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "auto.yaml", {})
    pairs = set()
    for cell in expand(study):  # 3 rounds of 3 pairs; in each pair the compared cell takes 2 s, its baseline 1 s
        outcome = _outcome(cell, 0.01)
        outcome.wall_s = 1.0 if cell.platform_key == "baremetal" else 2.0
        outcome.platform_info["duet"] = {"pair": cell.duet.pair}
        pairs.add(cell.duet.pair)
        assert store.record(outcome, cell.platform_key)
    assert len(pairs) == 9 and study_seconds(store) == pytest.approx(9 * 2.0)
    groups = {c.group for c in expand(study)}
    assert next_round_cost(store, study, 3, groups) == pytest.approx(3 * 2.0)


def test_a_comparison_whose_verdict_the_analysis_no_longer_gives_runs_on(tmp_path: Path) -> None:
    # 'noisy' is inconclusive on the data; a previous look that had stopped it on "equivalent" (its
    # pairs agreed then, and the A/A's spread it must take grew since) does not keep it stopped
    text = STUDY.replace("adaptive: {target: 0.02, min_repetitions: 3, max_repetitions: 12}",
                         "adaptive: {min_repetitions: 3, max_repetitions: 40}")
    study = load_study_text(text, "auto.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "auto.yaml", {})
    rng = random.Random(3)
    for cell in expand(study, 4):  # four rounds, written directly: no adaptive run of its own
        value = 0.01 * math.exp(rng.gauss(0.0, 0.08 if cell.platform_key == "noisy" else 0.002))
        assert store.record(_outcome(cell, value), cell.platform_key)
    first = decide(store, study, 4)
    states = {s.label: s for s in first.comparisons}
    assert states["noisy"].status == "running" and states["quiet"].status == "verdict"
    previous = {"looks": [3, 4], "comparisons": [
        {**s.__dict__, **({"status": "verdict", "reached_at": 3, "verdict": "equivalent"} if s.label == "noisy" else {})}
        for s in first.comparisons]}
    again = {s.label: s for s in decide(store, study, 5, previous).comparisons}
    assert again["noisy"].status == "running" and again["noisy"].verdict == "inconclusive"
    assert again["quiet"].status == "verdict" and again["quiet"].reached_at == states["quiet"].reached_at


def _six_rounds(tmp_path: Path, shift: float, sd: float) -> dict:
    text = STUDY.replace("adaptive: {target: 0.02, min_repetitions: 3, max_repetitions: 12}",
                         "adaptive: {min_repetitions: 6, max_repetitions: 40}")
    study = load_study_text(text, "auto.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "auto.yaml", {})
    rng = random.Random(5)
    for cell in expand(study, 6):
        noisy = cell.platform_key == "noisy"
        value = 0.01 * math.exp(rng.gauss(shift if noisy else 0.0, sd if noisy else 0.002))
        assert store.record(_outcome(cell, value), cell.platform_key)
    return {s.label: s for s in decide(store, study, 6).comparisons}


def test_a_direction_stops_only_once_its_size_is_stated(tmp_path: Path) -> None:
    # 6 pairs with a 3% spread show a 10% effect's direction, not its size: it runs on
    small = _six_rounds(tmp_path / "small", 0.10, 0.03)["noisy"]
    assert small.verdict == "slower" and small.status == "running"
    assert small.half_width is not None and small.half_width > max(0.02, 0.25 * 0.105)
    # the same spread around a 60% effect states the size within a quarter of it: it stops
    large = _six_rounds(tmp_path / "large", 0.47, 0.03)["noisy"]
    assert large.verdict == "slower" and large.status == "verdict" and large.reached_at == 6


def test_size_resolved_takes_the_margin_or_a_quarter_of_the_effect() -> None:
    from isobench.runner.adaptive import size_resolved
    assert size_resolved(math.log(1.03), math.log(1.019), 0.02)  # within the margin
    assert not size_resolved(math.log(1.03), math.log(1.025), 0.02)  # wider than the margin, and 3%/4
    assert size_resolved(math.log(1.6), math.log(1.14), 0.02)  # within a quarter of 60%
    assert not size_resolved(math.log(1.6), None, 0.02)

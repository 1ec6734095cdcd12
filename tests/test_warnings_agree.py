"""Warnings that agree with the verdicts beside them: spread judged by each comparison's own
method, the host judged before the runner's set-up, why each adaptive comparison stopped, and a
layer waterfall whose layers are all bounded (issue 23)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest

from isobench.analysis import hostload
from isobench.analysis.compare import compare
from isobench.analysis.groups import load_groups
from isobench.analysis.layer_ladder import describe, waterfalls
from isobench.analysis.stats import METHOD, log_sd
from isobench.analysis.warnings import PAIRED_WORDS, study_warnings
from isobench.plan import expand
from isobench.report.adaptive_table import stop_words
from isobench.runner.execute import CellOutcome
from isobench.runner.hostload_baseline import (
    WINDOW_ENV,
    WINDOW_S,
    configured_window_s,
    own_tree_jiffies,
    read_cpu_times,
    sample_host,
)
from isobench.store import Store
from isobench.studyfile import load_study_text

STUDY = """
name: spread
workloads: [{name: cpu-spin}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker}
schedule: sequential
repetitions: 8
warmup: 0
"""


def _outcome(cell, per_item: float, info: dict | None = None) -> CellOutcome:  # type: ignore[no-untyped-def]
    items = [{"i": i, "e2e": per_item, "phases": {"compute": per_item}} for i in range(3)]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0, wall_s=1.0,
                       startup_s=0.1, items=items, done={"type": "done", "items": 3, "run_s": per_item * 3},
                       platform_info=info or {})


def _duet_store(path: Path, shared_sd: float, own_sd: float, seed: int, jumps: dict[int, float] | None = None,
                own_jumps: dict[int, float] | None = None) -> Store:
    """Duet pairs (as the runner records them): each round moves both members of a pair by a
    shared factor (``shared_sd`` on logs, times ``jumps[rep]`` where given), and each member by
    its own (``own_sd``; the compared member of round ``r`` also by ``own_jumps[r]``)."""
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    store = Store.create(path, STUDY, study.name, "s.yaml", {"cores": 2})
    rng = random.Random(seed)
    cells = expand(study)
    for rep in range(8):
        for other, effect in (("aa", 1.0), ("docker", 1.05)):
            shared = math.exp(rng.gauss(0, shared_sd)) * (jumps or {}).get(rep, 1.0)
            base = next(c for c in cells if c.rep == rep and c.platform_key == "baremetal")
            mine = next(c for c in cells if c.rep == rep and c.platform_key == other)
            pair = f"r{rep}:{other}"
            base = dataclasses.replace(base, cell_id=f"{base.cell_id}/duet-{other}")
            info = {"duet": {"pair": pair, "side": rep % 2, "partner": other, "overlap": 1.0}}
            assert store.record(_outcome(base, 0.01 * shared * math.exp(rng.gauss(0, own_sd)), info), "baremetal")
            info = {"duet": {"pair": pair, "side": 1 - rep % 2, "partner": "baremetal", "overlap": 1.0}}
            value = 0.01 * shared * effect * math.exp(rng.gauss(0, own_sd)) * (own_jumps or {}).get(rep, 1.0)
            assert store.record(_outcome(mine, value, info), other)
    return store


def _warnings(store: Store) -> list[str]:
    groups, comparisons = load_groups(store), compare(store)
    return [w.text for w in study_warnings({"cores": 2}, groups, comparisons, 0, "baremetal", at_once=2)
            if w.kind == "unstable"]


# -- spread warnings judge the noise each comparison's own method sees ------------------------------
def test_rounds_that_wander_together_are_no_instability_to_a_paired_comparison(tmp_path: Path) -> None:
    store = _duet_store(tmp_path, shared_sd=0.25, own_sd=0.003, seed=1)
    groups = load_groups(store)
    # the raw spread between rounds is far above 10%: the old group-by-group check would warn
    assert all(log_sd(g.metrics["e2e"]) > 0.10 for g in groups)  # type: ignore[operator]
    e2e = [c for c in compare(store) if c.metric == "e2e"]
    assert {c.method for c in e2e} <= set(PAIRED_WORDS) and len(e2e) == 2
    assert _warnings(store) == []


def test_pairs_that_disagree_are_named_with_the_noise_their_method_saw(tmp_path: Path) -> None:
    store = _duet_store(tmp_path, shared_sd=0.0, own_sd=0.20, seed=2)
    found = _warnings(store)
    assert found, "per-pair noise of ~20% per side must warn"
    text = " ".join(found)
    assert "per-pair log ratios" in text and "per side" in text
    assert any(words in text for words in PAIRED_WORDS.values())
    assert "between repetitions" not in text  # no paired group is judged by its raw spread


def test_a_round_both_members_of_each_pair_ran_fast_in_is_no_outlier_to_the_pairs(tmp_path: Path) -> None:
    """The loaded benchmark named rounds 0 and 1 outliers ("something else ran then") in groups
    that only duet pairs read, beside an A/A of ±1.4%: both sides of each pair had moved alike."""
    store = _duet_store(tmp_path, shared_sd=0.0, own_sd=0.003, seed=4, jumps={0: 0.8, 1: 1.3})
    groups, comparisons = load_groups(store), compare(store)
    found = [w.text for w in study_warnings({"cores": 2}, groups, comparisons, 0, "baremetal", at_once=2)
             if w.kind == "outlier"]
    assert found == []
    # the same rounds, each side run alone and compared unpaired, are outliers to the comparison
    unpaired = [dataclasses.replace(c, method=METHOD, se=None) for c in comparisons]
    found = [w.text for w in study_warnings({"cores": 2}, groups, unpaired, 0, "baremetal", at_once=2)
             if w.kind == "outlier"]
    assert any("repetition 1 is an outlier" in text for text in found), found
    # one member of one duet pair ran 1.4x slow: that pair is named, by its round
    lopsided = _duet_store(tmp_path / "lopsided", shared_sd=0.0, own_sd=0.003, seed=4, own_jumps={5: 1.4})
    found = [w.text for w in study_warnings({"cores": 2}, load_groups(lopsided), compare(lopsided), 0, "baremetal",
                                            at_once=2) if w.kind == "outlier"]
    assert len(found) == 2 and all("the pair in round 5 is an outlier" in text for text in found), found


def test_an_unpaired_comparison_is_judged_by_its_groups_own_spread(tmp_path: Path) -> None:
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    store = Store.create(tmp_path, STUDY, study.name, "s.yaml", {"cores": 2})
    rng = random.Random(3)
    for cell in expand(study):
        if cell.platform_key == "docker" and cell.rep == 0:
            continue  # an incomplete round: the comparison falls back to Welch
        noisy = cell.platform_key == "docker"
        assert store.record(_outcome(cell, 0.01 * math.exp(rng.gauss(0, 0.2 if noisy else 0.003))),
                            cell.platform_key)
    docker = next(c for c in compare(store) if c.metric == "e2e" and c.label == "docker")
    assert docker.method == METHOD
    found = _warnings(store)
    assert len(found) == 1 and "cpu-spin on docker" in found[0], found
    assert "between repetitions" in found[0] and "unpaired (Welch)" in found[0]


# -- the host, judged on a busy sample from before set-up --------------------------------------------
IDLE_WITH_KDAMOND = {"window_s": 1.0, "cores": 2, "other_busy_cores": 0.03, "steal_share": 0.002,
                     "blocked_tasks": 1.2, "loadavg": [1.35, 1.2, 1.1]}


def test_an_idle_host_with_a_d_state_kernel_thread_is_not_called_busy() -> None:
    # a load average of 1.35 on 2 cores, all of it a sleeper in D state and pip's tail: no CPU used
    assert hostload.before_setup_warning(IDLE_WITH_KDAMOND, 2) is None
    # in a duet, cells starting at load 3.3 are the study's two cells and that sleeper: no neighbour
    assert hostload.cell_start_excess(3.3, IDLE_WITH_KDAMOND, at_once=2) <= 0.5 * 2


def test_a_neighbour_beyond_the_idle_baseline_warns_with_steal_and_load_beside_it() -> None:
    busy = {**IDLE_WITH_KDAMOND, "other_busy_cores": 0.55}
    text = hostload.before_setup_warning(busy, 2)
    assert text is not None and "0.55 core(s) busy on 2" in text and "steal 0.2%" in text
    assert "load average 1.35" in text and "1.2 of it task(s) in D state" in text
    # the bar grows with the host: half a core is no neighbour worth a warning on 16 cores
    assert hostload.before_setup_warning({**busy, "cores": 16}, 16) is None
    stolen = hostload.before_setup_warning({**IDLE_WITH_KDAMOND, "steal_share": 0.12}, 2)
    assert stolen is not None and "steal 12.0%" in stolen and "other guests" in stolen


def test_the_report_reads_the_sample_and_falls_back_to_a_saturated_load_average() -> None:
    def host_warnings(host: dict) -> list[str]:
        return [w.text for w in study_warnings(host, [], [], 0, "baremetal") if w.kind == "host"]

    # the case: 0.50 and 1.10 on 2 cores, with an idle sample: silent
    assert host_warnings({"cores": 2, "loadavg_at_start": [1.10, 0.8, 0.5],
                          "load_before_setup": IDLE_WITH_KDAMOND}) == []
    assert host_warnings({"cores": 2, "loadavg_at_start": [0.50, 0.4, 0.3]}) == []
    busy = host_warnings({"cores": 2, "loadavg_at_start": [0.2, 0.2, 0.2],
                          "load_before_setup": {**IDLE_WITH_KDAMOND, "other_busy_cores": 0.9}})
    assert len(busy) == 1 and "before the runner's set-up" in busy[0]
    legacy = host_warnings({"cores": 2, "loadavg_at_start": [2.4, 2.0, 1.0]})
    assert len(legacy) == 1 and "no CPU-busy sample" in legacy[0]


def test_cpu_times_and_the_own_process_tree_are_read_as_the_kernel_writes_them() -> None:
    stat = "cpu  100 5 40 900 10 2 3 7 0 0\ncpu0 50 0 20 450 5 1 1 3 0 0\n"
    times = read_cpu_times(stat)
    assert (times.busy, times.steal, times.total) == (150, 7, 1067)
    # (pid, ppid, state, jiffies): 10 is the runner, 11 its child, 12 a grandchild; 20 a neighbour
    processes = [(10, 1, "S", 5), (11, 10, "R", 30), (12, 11, "S", 2), (20, 1, "R", 400)]
    assert own_tree_jiffies(processes, 10) == 37


def test_the_window_before_set_up_is_a_second_unless_the_environment_sets_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's runs watch the host for a shorter window (conftest.py); a user's, a second."""
    monkeypatch.delenv(WINDOW_ENV, raising=False)
    assert configured_window_s() == WINDOW_S == 1.0
    for bad in ("", "soon", "0", "-1", "nan", "1e9"):
        monkeypatch.setenv(WINDOW_ENV, bad)
        assert configured_window_s() == WINDOW_S, bad
    monkeypatch.setenv(WINDOW_ENV, "0.2")
    assert configured_window_s() == 0.2
    sample = sample_host()
    assert 0.2 <= sample["window_s"] < 0.6 and sample["cores"] >= 1, sample


# -- each stopped comparison says why ---------------------------------------------------------------
META = {"target": 0.01, "metric": "e2e", "rounds": 9, "stopped": True, "alpha": 0.003,
        "reason": "the time budget ran out (600 s spent of 600 s; ...) (look at 9 round(s): α=0.0030; ...)"}


def test_every_status_of_a_finished_adaptive_study_says_why_it_stopped() -> None:
    verdict = {"status": "verdict", "reached_at": 6, "verdict": "equivalent", "alpha": 0.00412}
    assert stop_words(verdict, META) == "stopped at round 6: equivalent (at α=0.0041)"
    assert stop_words({"status": "reached", "reached_at": 4}, META) == "stopped at round 4: its interval reached ±1.0%"
    budget = {"status": "budget", "verdict": "inconclusive"}
    assert stop_words(budget, META) == "budget ran out at round 9 (time): inconclusive"
    rounds = {**META, "reason": "the budget of 9 repetitions ran out (look at 9 round(s): ...)"}
    assert stop_words(budget, rounds) == "budget ran out at round 9 (rounds): inconclusive"
    interrupted = stop_words({"status": "running"}, {**META, "stopped": False})
    assert "did not finish" in interrupted and "--resume" in interrupted
    assert "still running" not in " ".join(stop_words({"status": s, "reached_at": 3}, META)
                                          for s in ("verdict", "reached", "budget", "running"))


def test_the_report_table_says_why_each_comparison_stopped(tmp_path: Path) -> None:
    from isobench.analysis.summary import analyse
    from isobench.report.markdown import render_markdown
    from isobench.runner.adaptive import cells_to_run

    text = """
name: stops
workloads: [{name: cpu-spin}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker, label: slow}
  - {name: docker, label: noisy}
schedule: sequential
repetitions: auto
adaptive: {min_repetitions: 3, max_repetitions: 6}
warmup: 0
"""
    study = load_study_text(text, "a.yaml", check_host=False)
    store = Store.create(tmp_path, text, study.name, "a.yaml", {"cores": 2})
    rng = random.Random(4)
    median, sd = {"slow": 1.2, "noisy": 1.0}, {"noisy": 0.3}
    for cell in cells_to_run(study, expand(study), store, say=lambda _: None):
        value = 0.01 * median.get(cell.platform_key, 1.0) * math.exp(rng.gauss(0, sd.get(cell.platform_key, 0.004)))
        assert store.record(_outcome(cell, value), cell.platform_key)
    states = {c["label"]: c for c in json.loads(store.meta("adaptive") or "{}")["comparisons"]}
    assert states["slow"]["status"] == "verdict" and states["noisy"]["status"] == "budget"
    report = render_markdown(analyse(store, with_views=False))
    assert f"stopped at round {states['slow']['reached_at']}: slower (at α=" in report
    assert "budget ran out at round 6 (rounds): inconclusive" in report
    assert "still running" not in report and "why it stopped" in report


# -- a waterfall whose layers are each bounded says so ------------------------------------------------
def _ladder_store(path: Path, factors: dict[str, float], noise: float) -> Store:
    platforms = [{"name": name} for name in factors]
    text = json.dumps({"name": "wf", "workloads": [{"name": "cpu-spin"}], "platforms": platforms,
                       "schedule": "sequential", "repetitions": 12, "warmup": 0})
    study = load_study_text(text, "wf.yaml", check_host=False)
    store = Store.create(path, text, "wf", "wf.yaml", {})
    rng = random.Random(5)
    for cell in expand(study):
        # independent noise per cell: the full runtime's 95% Welch interval straddles 1
        value = 0.01 * factors[cell.platform_key] * math.exp(rng.gauss(0, noise))
        assert store.record(_outcome(cell, value), cell.platform_key)
    return store


def test_a_waterfall_of_equivalent_layers_bounds_each_instead_of_asking_for_repetitions(tmp_path: Path) -> None:
    store = _ladder_store(tmp_path, {"baremetal": 1.0, "layer-namespaces": 1.0, "layer-seccomp": 1.0,
                                     "docker": 1.0}, noise=0.004)
    (fall,) = waterfalls(store)
    assert not fall.full_estimate.significant
    assert {s.verdict for s in fall.steps} == {"equivalent"}
    head = describe(fall)[0]
    assert "every layer costs less than ±2%" in head and "add repetitions" not in head
    assert all("(equivalent: less than ±2%)" in line for line in describe(fall)[1:3])


def test_a_waterfall_names_the_bounded_layers_and_the_open_ones(tmp_path: Path) -> None:
    store = _ladder_store(tmp_path / "mixed", {"baremetal": 1.0, "layer-namespaces": 1.0, "layer-seccomp": 1.0,
                                               "docker": 1.0}, noise=0.004)
    (fall,) = waterfalls(store)
    fall.steps[1].verdict = "inconclusive"  # as if seccomp's comparison had not settled
    head = describe(fall)[0]
    assert "layer-namespaces cost(s) less than ±2% (shown equivalent)" in head
    assert "layer-seccomp not resolved either way (add repetitions)" in head
    assert describe(fall)[2].endswith("(not resolved)")


@pytest.mark.parametrize("verdict", ["inconclusive", ""])
def test_a_waterfall_without_bounds_still_asks_for_repetitions(tmp_path: Path, verdict: str) -> None:
    store = _ladder_store(tmp_path / verdict, {"baremetal": 1.0, "layer-namespaces": 1.0, "docker": 1.0},
                          noise=0.004)
    (fall,) = waterfalls(store)
    for step in fall.steps:
        step.verdict = verdict
    assert describe(fall)[0].endswith("its overhead is not resolved, so shares are not shown (add repetitions)")


def test_the_sample_from_before_set_up_is_filed_with_the_new_store_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from isobench.runner.hostload_baseline import sample_before_setup
    from isobench.runner.setup import create_store

    monkeypatch.delenv(WINDOW_ENV, raising=False)  # a user's window, not the suite's shorter one
    study = load_study_text(STUDY, "s.yaml", check_host=False)
    sample_before_setup()
    first = create_store(tmp_path / "first", study, STUDY, "s.yaml")
    sample = first.host()["load_before_setup"]
    assert sample["cores"] >= 1 and 0.5 <= sample["window_s"] < 5 and sample["other_busy_cores"] >= 0
    assert len(sample["loadavg"]) == 3 and 0 <= sample["steal_share"] <= 1
    # consumed: the next store of this process (or a resumed study) takes its own, or none
    sample_before_setup(resuming=True)
    assert "load_before_setup" not in create_store(tmp_path / "second", study, STUDY, "s.yaml").host()

"""`repetitions: auto`: keep adding interleaved rounds until every comparison has a verdict.

After the planned rounds, each check (a *look*) computes the study's comparisons on the
adaptive metric, as the report does (paired or Welch, Holm across comparisons), and stops a
comparison once it has a verdict other than inconclusive: a resolved difference or shown
equivalence within the study's margin (analysis/verdict.py). A comparison whose two sides ran
on different devices (cpu vs cuda: "not comparable") stops at once: more rounds cannot change
which device each side sees, and no alpha is spent on it. The next round runs only the
groups of comparisons still running, plus their baseline, in the seeded interleaved order;
cell ids are the plan's own (``<group>/r<rep>``), so ``--resume`` continues exactly.
Everything stops when all comparisons are done or a budget (rounds, time: re-runs count) runs out; the
store's ``adaptive`` meta records which comparison stopped why, at which look and level.

Optional stopping: looking after every round and stopping at the first nominal 5% verdict
would inflate the error rate well above 5%. Each look therefore tests at a stricter level
from an alpha-spending function, the Lan–DeMets Pocock type α(t) = α·ln(1 + (e−1)·t) with
information fraction t = max(rounds / max_repetitions, study time / max_time_s) and α = 0.05 (the
time share counts where the study has a time budget: the budget, not a round count, is then the
horizon, so a study whose rounds are cheap may use more of them, and one on a busy host spends its
alpha as its time runs out instead of ending with some unspent): a look at t may spend only the
increment Δα = α(t) − α(t_prev) since the previous look. It tests at the level a that spends
exactly Δα given the looks before it (runner/sequential.py), both for the difference (its 1−a
interval excludes 1 and Holm's p < a) and for equivalence (TOST at a: the 1−2a interval within
the margin). The looks read nested data (the look after round 8 reads round 7's pairs and one
more), so a is several times Δα: 0.006-0.011 where Δα was 0.002-0.003 after a first look at
0.02. Testing each look at Δα itself (Bonferroni) also kept the error within α, but spent a
third of it, and a study beside a busy neighbour needed 15 rounds where a quiet one needed 6.
A comparison that stopped stays stopped (its verdict at that level is recorded): looking again
would spend more alpha. The report's own verdict, on the final data at the nominal level,
agrees with a stopping verdict (the stricter level implies the nominal one) unless later
baseline rounds moved it.

A direction (slower, faster, ...) stops only once its size is stated too: its 95% interval
within the equivalence margin or within a quarter of the effect (``size_resolved``). In
simulation (pairs with a true 3% effect, spread 1.9-4%, looks from round 6 to 24) this costs
0.4-2 rounds on average and keeps the 95% interval's coverage at 0.94-0.96 (0.925-0.96 since each
look tests at the level that spends its increment: docs/statistics.md).

``target`` (95% CI half-width) is kept as an additional stop condition when the study sets it
explicitly: a comparison also stops once its interval is that narrow, verdict or not. Stopping
on width does not look at the effect, so it needs no alpha.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from isobench.plan.cells import Cell, expand, group_key
from isobench.runner.sequential import look_levels
from isobench.store import Store
from isobench.study.model import Study


@dataclass
class ComparisonState:
    workload: str
    params: dict[str, Any]
    platform: str
    label: str
    knobs: dict[str, Any]
    n: int
    half_width: float | None  # relative (exp(half-width on logs) - 1)
    status: str  # "verdict" | "reached" | "served" | "running" | "budget"
    reached_at: int | None = None
    #: the verdict at this look's level (status "verdict": the one it stopped on)
    verdict: str = "inconclusive"
    #: the level it stopped at (the level that spends the look's alpha increment)
    alpha: float | None = None
    #: a cluster study has one comparison per host (the plan's groups span hosts: a round runs everywhere)
    host: str = ""


@dataclass
class Decision:
    rounds: int
    stop: bool
    reason: str
    comparisons: list[ComparisonState] = field(default_factory=list)
    active_groups: set[str] = field(default_factory=set)
    spent_s: float = 0.0
    #: this look's level (spending its alpha increment) and the rounds of every look so far (this one included)
    alpha: float = 0.0
    looks: list[int] = field(default_factory=list)
    #: each look's information fraction, as [rounds, t] pairs (this one included)
    fractions: list[list[float]] = field(default_factory=list)

    @property
    def brief(self) -> str:
        """The reason without the spending rule's formula (the meta keeps it): one line on a terminal."""
        return self.reason.split(" (look at ")[0] + f" (alpha spending: this look at α={self.alpha:.4f})"

    def as_meta(self, target: float, metric: str) -> dict[str, Any]:
        return {"target": target, "metric": metric, "rounds": self.rounds, "stopped": self.stop,
                "reason": self.reason, "spent_s": self.spent_s, "rule": RULE, "alpha": self.alpha,
                "looks": self.looks, "fractions": self.fractions,
                "comparisons": [asdict(c) for c in self.comparisons]}


ALPHA = 0.05
#: a comparison in one of these states has stopped for good: later looks keep it as it stopped
#: ("served": an A/A whose variant's comparisons all stopped, its floor within the margin, before
#: it had a verdict of its own)
STOPPED = ("verdict", "reached", "served")
#: an A/A stops (with the comparisons it is the floor for) once its floor is within this share of the
#: equivalence margin: a floor at the margin itself leaves no room to show a platform equivalent
AA_FLOOR_SHARE = 0.75
#: a direction stops once its 95% interval is within this share of the effect (or the margin)
SIZE_SHARE = 0.25
RULE = ("alpha spending, Lan–DeMets Pocock type α(t)=0.05·ln(1+(e−1)t), "
        "t=max(rounds/max_repetitions, study time/max_time_s); each look tests at the level that spends "
        "its increment given the earlier looks")


def size_resolved(log_ratio: float, half_width: float | None, margin: float) -> bool:
    """A direction's size is stated well enough to stop on: its 95% interval reaches no further
    from the ratio than the equivalence margin, or than ``SIZE_SHARE`` of the effect itself.
    Without it a direction stops the moment its interval first clears 1, often at the first look
    (6 pairs), with its size stated to ±3% or worse; the report states the size, so the stop waits
    for it. It does not correct a bias (a spun 3% on resnet-infer read 1.075x inside ±2%, the
    spinning process's own excess, before the loops repeated their work; docs/statistics.md)."""
    if half_width is None:
        return False
    return half_width <= math.log1p(max(margin, SIZE_SHARE * abs(math.expm1(log_ratio))))


def spent(t: float) -> float:
    """Alpha spent by information fraction ``t`` (Lan–DeMets, Pocock type)."""
    return ALPHA * math.log(1 + (math.e - 1) * min(1.0, max(0.0, t)))


def look_alpha(rounds: int, max_rounds: int, looks: list[int]) -> float:
    """The level of the look after ``rounds`` rounds: what α(t) grew by since the previous look."""
    before = max((r for r in looks if r < rounds), default=0)
    return spent(rounds / max_rounds) - spent(before / max_rounds)


def look_level(looks: list[int], fractions: dict[int, float]) -> float:
    """The level the last of ``looks`` tests at: the one that spends exactly its increment of α(t)
    given the looks before it, each read at its rounds' information (runner/sequential.py)."""
    ordered = [r for r in sorted(looks) if r in fractions]
    increments, before = [], 0.0
    for r in ordered:
        increments.append(max(0.0, spent(fractions[r]) - spent(before)))
        before = max(before, fractions[r])
    return look_levels(tuple(float(r) for r in ordered), tuple(increments))[-1] if ordered else 0.0


def information_fraction(rounds: int, spent_s: float, max_repetitions: int, max_time_s: float | None) -> float:
    """How much of its budget a study has used after ``rounds`` rounds and ``spent_s`` seconds: the
    larger of its rounds' share and its time's share (a study without a time budget: rounds only)."""
    t = rounds / max_repetitions
    if max_time_s:
        t = max(t, spent_s / max_time_s)
    return min(1.0, t)


def _look_fractions(previous: dict[str, Any] | None, max_repetitions: int) -> dict[int, float]:
    """The information fraction of each earlier look (a store from before the time share: rounds only)."""
    stored = {int(r): float(t) for r, t in (previous or {}).get("fractions") or []}
    earlier = (previous or {}).get("looks") or ([previous["rounds"]] if previous and "rounds" in previous else [])
    return {int(r): stored.get(int(r), int(r) / max_repetitions) for r in earlier}


def decide(store: Store, study: Study, rounds: int, previous: dict[str, Any] | None = None) -> Decision:
    """Which comparisons still need repetitions after ``rounds`` measured rounds, and whether to stop."""
    from isobench.analysis.compare import compare, floor_of
    from isobench.analysis.verdict import DIRECTIONS, NOT_COMPARABLE, inside_floor, verdict_and_reason

    settings = study.adaptive
    assert settings is not None
    # Only a target the study sets stops on width; the default one would stop before a verdict.
    goal = math.log1p(settings.target) if "target" in settings.model_fields_set else None
    earlier = list((previous or {}).get("looks") or ([previous["rounds"]] if previous and "rounds" in previous
                                                     else []))
    looks = sorted({r for r in earlier if r < rounds} | {rounds})
    spent_s = study_seconds(store)
    fractions = {r: t for r, t in _look_fractions(previous, settings.max_repetitions).items() if r <= rounds}
    before = max((r for r in looks if r < rounds), default=0)
    t_before = fractions.get(before, before / settings.max_repetitions)
    # a resumed look keeps the fraction it had: the same level as before the interruption
    t_now = max(t_before, fractions.get(rounds) or information_fraction(rounds, spent_s, settings.max_repetitions,
                                                                       settings.max_time_s))
    fractions[rounds] = t_now
    alpha = look_level(looks, fractions)
    fraction_list = [[r, fractions[r]] for r in looks if r in fractions]
    before = {_key(c): c for c in (previous or {}).get("comparisons", [])}
    states: list[ComparisonState] = []
    active: set[str] = set()
    baseline = study.baseline or study.platforms[0].key
    comparisons = compare(store)
    held: set[str] = set()  # variants (workload, params, host) with a comparison held inside the A/A floor
    judged: list[tuple[Any, ComparisonState]] = []
    for c in comparisons:
        if c.metric != settings.metric or c.emulated:
            continue
        width = c.half_width
        state = ComparisonState(c.workload, c.params, c.platform, c.label, c.knobs, c.n,
                                None if width is None else math.expm1(width), "running", host=c.host)
        old = before.get(_key(asdict(state)))
        # A comparison that stopped on a verdict the analysis no longer gives runs on: its interval
        # can widen after it stopped, as it takes no less spread than its A/A, which runs on (a
        # crun comparison stopped at 6 pairs on "equivalent" and read inconclusive in the summary).
        lost = bool(old) and old.get("status") == "verdict" and not c.is_aa and c.verdict == "inconclusive"
        if old and old.get("status") in STOPPED and old.get("reached_at", rounds + 1) <= rounds and not lost:
            # Stopped at an earlier look: it stays stopped, with the verdict it stopped on.
            state.status, state.reached_at = old["status"], old["reached_at"]
            state.verdict, state.alpha = old.get("verdict", "inconclusive"), old.get("alpha")
        elif c.verdict == NOT_COMPARABLE:
            # Different devices on the two sides: finished, whatever the rounds; it tests nothing (no alpha).
            state.status, state.reached_at, state.verdict = "verdict", rounds, NOT_COMPARABLE
        else:
            p = c.p_holm if c.p_holm is not None else c.p_value
            # The report's guards (too few pairs, inside the A/A floor) apply at every look too.
            floor = None if c.is_aa else c.noise_floor
            state.verdict, why = verdict_and_reason(c.metric, math.log(c.ratio), c.se, c.df, p, c.margin, alpha,
                                                    n=min(c.n, c.n_baseline), floor=floor)
            sized = state.verdict not in DIRECTIONS or size_resolved(math.log(c.ratio), width, c.margin)
            if state.verdict != "inconclusive" and not c.is_aa and sized:
                # (an A/A never stops on a verdict of its own: "faster" there is a false alarm, and the
                # floor it states keeps narrowing while the comparisons it serves run; a direction whose
                # size is not yet stated to within SIZE_SHARE of itself, or the margin, runs on too)
                state.status, state.reached_at, state.alpha = "verdict", rounds, alpha
            elif goal is not None and width is not None and width <= goal:
                state.status, state.reached_at = "reached", rounds
            if state.status == "running" and why and inside_floor(math.log(c.ratio), floor):
                held.add(_variant(c))  # resolved by its own interval, held back by the A/A floor
        judged.append((c, state))
    # An A/A states the floor for its variant's comparisons: once none of them runs on (and none
    # is held inside the floor) and the floor it states is well within the equivalence margin
    # (AA_FLOOR_SHARE), more A/A rounds would narrow a floor that no verdict waits for. A wider
    # floor runs on: the study states it, and a reader judges every other result by it.
    waiting = {_variant(c) for c, state in judged if state.status == "running" and not c.is_aa} | held
    for c, state in judged:
        floor = floor_of(c)
        if c.is_aa and state.status == "running" and _variant(c) not in waiting \
                and floor is not None and floor <= AA_FLOOR_SHARE * c.margin:
            state.status, state.reached_at = "served", rounds
        states.append(state)
        if state.status == "running":
            active.add(group_key(c.workload, c.params, c.label, c.knobs))
            active.update(group_key(c.workload, c.params, baseline, k) for k in _baseline_knobs(store, c, baseline))
    # Only a narrower A/A floor can free a comparison held inside it: its A/A runs on, stopped or not.
    active.update(group_key(c.workload, c.params, c.label, c.knobs) for c in comparisons
                  if c.is_aa and c.metric == settings.metric and _variant(c) in held)
    rule = f" (look at {rounds} round(s): α={alpha:.4f} at t={t_now:.2f}; {RULE})"
    if not states:
        return Decision(rounds, True, f"no comparison of {settings.metric} to check (is there a baseline?)",
                        states, set(), spent_s, alpha, looks, fraction_list)
    if not active:
        words = ", ".join(f"{n} {v}" for v, n in Counter(s.verdict for s in states if s.status == "verdict").items())
        reached = sum(s.status == "reached" for s in states)
        parts = ([f"every comparison has a verdict ({words})"] if not reached else
                 [f"every comparison has a verdict ({words}) or reached ±{settings.target:.1%}" if words else
                  f"every comparison reached ±{settings.target:.1%}"])
        served = sum(s.status == "served" for s in states)
        if served:
            parts[0] += f"; {served} A/A entr{'ies' if served > 1 else 'y'} stopped with the comparisons it is the floor for"
        return Decision(rounds, True, parts[0] + rule, states, set(), spent_s, alpha, looks, fraction_list)
    budget = None
    if rounds >= settings.max_repetitions:
        budget = f"the budget of {settings.max_repetitions} repetitions ran out"
    elif settings.max_time_s is not None:
        # re-runs are study time (spent_s counts them): the next round is priced with them, at their rate so far
        per_round = next_round_cost(store, study, rounds, active) * (1 + rerun_rate(*time_split(store)))
        if spent_s + per_round > settings.max_time_s:
            budget = (f"the time budget ran out ({spent_s:.0f} s spent of {settings.max_time_s:.0f} s, re-runs "
                      f"included; another round of the {len(active)} group(s) still running needs about "
                      f"{per_round:.0f} s)")
    if budget:
        for state in states:
            if state.status == "running":
                state.status = "budget"
        return Decision(rounds, True, budget + rule, states, active, spent_s, alpha, looks, fraction_list)
    running = sum(s.status == "running" for s in states)
    sizing = sum(s.status == "running" and s.verdict in DIRECTIONS for s in states)
    words = f"{running} comparison(s) still running"
    if sizing:
        words += f" ({sizing} with a direction whose size is not yet stated to within a quarter of it or the margin)"
    return Decision(rounds, False, words + rule, states, active, spent_s,
                    alpha, looks, fraction_list)


def _series(cell_id: str) -> str:
    """A cell id without its round: ``g/r3/duet-x`` and ``g/r4/duet-x`` are the same series."""
    return re.sub(r"/[rw]\d+(?=/|$)", "", cell_id)


def _unit(cell_id: str, info: dict[str, Any]) -> str:
    """What ran at once with the cell: its duet pair, its tenant group, or the cell alone."""
    return str((info.get("duet") or {}).get("pair") or (info.get("tenancy") or {}).get("group") or cell_id)


def _unit_seconds(store: Store) -> dict[str, float]:
    units: dict[str, float] = {}
    for cell_id, wall, info in store.conn.execute("SELECT cell_id, wall_s, platform_info FROM cells"):
        unit = _unit(cell_id, json.loads(info or "{}"))
        units[unit] = max(units.get(unit, 0.0), wall or 0.0)
    return units


def study_seconds(store: Store) -> float:
    """The study's time so far: each cell's launch-to-exit time, where the cells that ran at
    once (a duet pair, a tenant group) count once, as long as their longest member. A re-run
    (``+rerun<n>``, its own pair or group id) is a unit of its own: it counts too."""
    return sum(_unit_seconds(store).values())


#: re-runs may take at most this share of the study's first-run time, so they never more than double a study
RERUN_SHARE = 1.0


def time_split(store: Store) -> tuple[float, float]:
    """The study's time so far (as :func:`study_seconds` counts it): first runs, and re-runs."""
    first = rerun = 0.0
    for unit, seconds in _unit_seconds(store).items():
        if "+rerun" in unit:
            rerun += seconds
        else:
            first += seconds
    return first, rerun


def rerun_fits(first_s: float, rerun_s: float, cost_s: float) -> bool:
    """Whether a re-run taking ``cost_s`` keeps all re-runs within ``RERUN_SHARE`` of the first-run
    time so far. A re-run helps against a passing disturbance; one that stays (a neighbour for the
    whole study) would otherwise have every unit run twice or more."""
    return rerun_s + cost_s <= RERUN_SHARE * first_s


def rerun_rate(first_s: float, rerun_s: float) -> float:
    """Re-run seconds per first-run second so far (capped as :func:`rerun_fits` caps them)."""
    return min(RERUN_SHARE, rerun_s / first_s) if first_s > 0 else 0.0


def next_round_cost(store: Store, study: Study, rounds: int, active: set[str]) -> float:
    """Seconds the next round takes: it runs only the active groups' cells, each as long as the
    same cell took in earlier rounds on average (a gVisor pair takes twice a bare-metal one), and
    the members of a duet pair or tenant group at once."""
    walls: dict[str, list[float]] = {}
    for cell_id, wall in store.conn.execute("SELECT cell_id, wall_s FROM cells WHERE warmup = 0"):
        walls.setdefault(_series(cell_id), []).append(wall or 0.0)
    everything = [w for series in walls.values() for w in series]
    fallback = sum(everything) / len(everything) if everything else 0.0
    units: dict[str, float] = {}
    for cell in _round(expand(study, rounds + 1), rounds, active):
        seen = walls.get(_series(cell.cell_id))
        unit = cell.duet.pair if cell.duet else cell.tenant.group if cell.tenant else cell.cell_id
        units[unit] = max(units.get(unit, 0.0), sum(seen) / len(seen) if seen else fallback)
    return sum(units.values())


def _variant(c: Any) -> str:
    return json.dumps([c.workload, c.params, c.host], sort_keys=True)


def _key(state: dict[str, Any]) -> str:
    return json.dumps([state["workload"], state["params"], state["label"], state["knobs"], state.get("host", "")],
                      sort_keys=True)


def _baseline_knobs(store: Store, c: Any, baseline: str) -> list[dict[str, Any]]:
    rows = store.conn.execute("SELECT DISTINCT knobs FROM cells WHERE workload_key = ? AND platform_key = ? "
                              "AND params = ?", (c.workload, baseline, json.dumps(c.params, sort_keys=True)))
    return [json.loads(r[0]) for r in rows]


def _round(cells: list[Cell], rep: int, active: set[str]) -> list[Cell]:
    """Round ``rep``'s cells of the active groups; a tenant group (cells started together) stays
    whole, and a duet pair runs when its compared group is active (its baseline cell with it)."""
    round_cells = [c for c in cells if c.rep == rep and not c.warmup]
    tenant_groups = {c.tenant.group for c in round_cells if c.group in active and c.tenant}

    def wanted(c: Cell) -> bool:
        if c.duet:
            return c.duet.group in active
        return c.group in active or (c.tenant is not None and c.tenant.group in tenant_groups)

    return [c for c in round_cells if wanted(c)]


def finished_rounds(store: Store) -> int:
    row = store.conn.execute("SELECT MAX(rep) FROM cells WHERE warmup = 0").fetchone()
    return 0 if row[0] is None else row[0] + 1


def cells_to_run(study: Study, plan: list[Cell], store: Store, on_more: Any = None,
                 say: Any = print) -> Iterator[Cell]:
    """The plan's unfinished cells; then, for `repetitions: auto`, further rounds while needed.

    ``on_more(n)`` is told how many cells a new round adds (for the progress bar); ``say``
    prints one line per decision.
    """
    done = store.finished_ids()
    yield from (c for c in plan if c.cell_id not in done)
    if study.repetitions != "auto" or study.adaptive is None:
        return
    settings = study.adaptive
    rounds = max(study.initial_repetitions, finished_rounds(store))
    previous = json.loads(store.meta("adaptive") or "null")
    if previous and previous.get("active") and rounds > study.initial_repetitions:
        # Resumed mid-round: finish that round's missing cells (the groups it was started for).
        active = set(previous["active"])
        pending = [c for c in _round(expand(study, rounds), rounds - 1, active) if c.cell_id not in done]
        if pending and on_more:
            on_more(len(pending))
        yield from pending
    while True:
        decision = decide(store, study, rounds, previous)
        previous = decision.as_meta(settings.target, settings.metric) | {"active": sorted(decision.active_groups)}
        store.set_meta("adaptive", json.dumps(previous))
        if decision.stop:
            say(f"adaptive repetitions: stopped after {rounds} round(s): {decision.brief}")
            return
        say(f"adaptive repetitions: round {rounds + 1}: {decision.brief}")
        rounds += 1
        new = _round(expand(study, rounds), rounds - 1, decision.active_groups)
        if on_more:
            on_more(len(new))
        yield from new

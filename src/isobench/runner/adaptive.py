"""`repetitions: auto`: keep adding interleaved rounds until every comparison is precise enough.

After the planned rounds, each check computes the study's comparisons on the adaptive
metric (Welch intervals, as the report does) and stops a comparison once its 95% interval's
half-width (on the log scale) is below log(1 + target). The next round runs only the groups
of comparisons still short of the target, plus their baseline, in the seeded interleaved
order; cell ids are the plan's own (``<group>/r<rep>``), so ``--resume`` continues exactly.
Everything stops when all comparisons are done or a budget (rounds, time) runs out; the
store's ``adaptive`` meta records which comparison stopped why.

Stopping on the interval's *width* (not on its distance from 1) keeps optional stopping from
biasing the ratio much: the rule does not look at the effect.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from isobench.plan.cells import Cell, expand, group_key
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
    status: str  # "reached" | "running" | "budget"
    reached_at: int | None = None
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

    def as_meta(self, target: float, metric: str) -> dict[str, Any]:
        return {"target": target, "metric": metric, "rounds": self.rounds, "stopped": self.stop,
                "reason": self.reason, "spent_s": self.spent_s,
                "comparisons": [asdict(c) for c in self.comparisons]}


def decide(store: Store, study: Study, rounds: int, previous: dict[str, Any] | None = None) -> Decision:
    """Which comparisons still need repetitions after ``rounds`` measured rounds, and whether to stop."""
    from isobench.analysis.compare import compare

    settings = study.adaptive
    assert settings is not None
    goal = math.log1p(settings.target)
    reached_before = {_key(c): c.get("reached_at") for c in (previous or {}).get("comparisons", [])}
    states: list[ComparisonState] = []
    active: set[str] = set()
    baseline = study.baseline or study.platforms[0].key
    for c in compare(store):
        if c.metric != settings.metric or c.emulated:
            continue
        width = c.half_width
        done = width is not None and width <= goal
        state = ComparisonState(c.workload, c.params, c.platform, c.label, c.knobs, c.n,
                                None if width is None else math.expm1(width), "reached" if done else "running",
                                host=c.host)
        state.reached_at = reached_before.get(_key(asdict(state))) or (rounds if done else None)
        states.append(state)
        if not done:
            active.add(group_key(c.workload, c.params, c.label, c.knobs))
            active.update(group_key(c.workload, c.params, baseline, k) for k in _baseline_knobs(store, c, baseline))
    spent = sum(row[0] or 0.0 for row in store.conn.execute("SELECT wall_s FROM cells"))
    if not states:
        return Decision(rounds, True, f"no comparison of {settings.metric} to check (is there a baseline?)",
                        states, set(), spent)
    if not active:
        return Decision(rounds, True, f"every comparison reached ±{settings.target:.1%}", states, set(), spent)
    budget = None
    if rounds >= settings.max_repetitions:
        budget = f"the budget of {settings.max_repetitions} repetitions ran out"
    elif settings.max_time_s is not None:
        per_round = spent / max(1, rounds + study.warmup)
        if spent + per_round > settings.max_time_s:
            budget = (f"the time budget ran out ({spent:.0f} s spent of {settings.max_time_s:.0f} s; "
                      f"another round needs about {per_round:.0f} s)")
    if budget:
        for state in states:
            if state.status == "running":
                state.status = "budget"
        return Decision(rounds, True, budget, states, active, spent)
    return Decision(rounds, False, f"{sum(s.status == 'running' for s in states)} comparison(s) still wider "
                                   f"than ±{settings.target:.1%}", states, active, spent)


def _key(state: dict[str, Any]) -> str:
    return json.dumps([state["workload"], state["params"], state["label"], state["knobs"], state.get("host", "")],
                      sort_keys=True)


def _baseline_knobs(store: Store, c: Any, baseline: str) -> list[dict[str, Any]]:
    rows = store.conn.execute("SELECT DISTINCT knobs FROM cells WHERE workload_key = ? AND platform_key = ? "
                              "AND params = ?", (c.workload, baseline, json.dumps(c.params, sort_keys=True)))
    return [json.loads(r[0]) for r in rows]


def _round(cells: list[Cell], rep: int, active: set[str]) -> list[Cell]:
    """Round ``rep``'s cells of the active groups; a tenant group (cells started together) stays whole."""
    round_cells = [c for c in cells if c.rep == rep and not c.warmup]
    tenant_groups = {c.extra.get("tenant_group") for c in round_cells if c.group in active} - {None}
    return [c for c in round_cells if c.group in active or c.extra.get("tenant_group") in tenant_groups]


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
            say(f"adaptive repetitions: stopped after {rounds} round(s): {decision.reason}")
            return
        say(f"adaptive repetitions: round {rounds + 1}: {decision.reason}")
        rounds += 1
        new = _round(expand(study, rounds), rounds - 1, decision.active_groups)
        if on_more:
            on_more(len(new))
        yield from new

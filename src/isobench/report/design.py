"""How a study's design reads to a person: which design each comparison gets, what its time
budget buys (``isobench plan``), and the design line of the summary."""

from __future__ import annotations

from typing import Any

from isobench.design import Design
from isobench.study.model import Study


def comparison_designs(study: Study) -> list[dict[str, str]]:
    """One record per compared entry: the entry, its baseline and the design it is measured by."""
    if study.schedule == "duet":
        trades = f"trading cores every {study.duet_swap_s * 1000:g} ms" if study.duet_swap_s else "on fixed sides"
        how = f"duet (each cell beside a baseline cell of its own, {trades}), compared pair by pair"
    else:
        how = "sequential (interleaved rounds), compared round by round where that narrows the interval"
    records = []
    for entry in study.platforms:
        if entry.key == study.baseline:
            continue
        records.append({"entry": entry.key, "baseline": str(study.baseline), "design": how})
    return records


def budget_lines(study: Study, design: Design, planned_s: float) -> list[str]:
    """What the study's rounds and time budget buy, from the plan's estimate of its planned rounds."""
    rounds = study.warmup + study.initial_repetitions
    if study.repetitions != "auto" or study.adaptive is None or rounds == 0:
        return []
    per_round = planned_s / rounds
    adaptive = study.adaptive
    lines = [f"repetitions: auto: {study.initial_repetitions} round(s) first (~{planned_s / 60:.1f} min), then "
             f"rounds only for the comparisons without a verdict, up to {adaptive.max_repetitions} rounds"]
    if adaptive.max_time_s is not None:
        fits = int(adaptive.max_time_s // per_round) if per_round > 0 else adaptive.max_repetitions
        lines.append(f"budget {_minutes(adaptive.max_time_s)}: about {min(fits, adaptive.max_repetitions)} "
                     f"full round(s) at ~{per_round:.0f} s a round" +
                     (" (the first rounds already exceed it: they run anyway; raise --budget)"
                      if fits < study.initial_repetitions else ""))
    return lines


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:g} s"


def design_line(meta: str | None) -> str | None:
    """The summary's line on the design, from the store's ``design`` meta (None: not recorded)."""
    design = Design.from_meta(meta)
    return None if design is None else f"design: {design.sentence()}"


def design_record(meta: str | None) -> dict[str, Any] | None:
    design = Design.from_meta(meta)
    return None if design is None else {"sentence": design.sentence(), "fallback": design.fallback,
                                        "filled": design.filled, "aa_added": design.aa_added}

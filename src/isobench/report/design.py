"""How a study's design reads to a person: which design each comparison gets, what its time
budget buys (``isobench plan``), and the design line of the summary."""

from __future__ import annotations

from typing import Any

from isobench.design import Design
from isobench.study.model import Study


def comparison_designs(study: Study, cores: list[int] | None = None) -> list[dict[str, str]]:
    """One record per compared entry: the entry, its baseline, the design it is measured by and, where
    the design shapes what the platform's result means, the caveat (``cores``: the host's, default this
    one's)."""
    if study.schedule == "duet":
        trades = f"trading cores every {study.duet_swap_s * 1000:g} ms" if study.duet_swap_s else "on fixed sides"
        how = f"duet (each cell beside a baseline cell of its own, {trades}), compared pair by pair"
    else:
        how = "sequential (interleaved rounds), compared round by round where that narrows the interval"
    from isobench.plan.cores import core_layout
    from isobench.platforms import PLATFORMS

    layout = core_layout(study, cores)
    cores_per_cell = min(len(side) for side in layout.sides) if layout.sides else 1
    records = []
    for entry in study.platforms:
        if entry.key == study.baseline:
            continue
        record = {"entry": entry.key, "baseline": str(study.baseline), "design": how}
        caveat = PLATFORMS.get(entry.name).design_caveat(entry, cores_per_cell) if entry.name in PLATFORMS else None
        if caveat:
            record["caveat"] = caveat
        records.append(record)
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


def caveat_lines(study_yaml: str | None, cores_meta: str | None) -> list[str]:
    """The design's caveats for a finished study (``comparison_designs``), from its stored study and the
    cores its cells had as the runner recorded them (a result is read on another host than it ran on)."""
    import json

    from isobench.hostinfo import parse_cpu_list
    from isobench.studyfile import load_study_text

    try:
        study = load_study_text(study_yaml or "", "store", check_host=False)
        facts = json.loads(cores_meta or "null")
    except (ValueError, OSError):
        return []
    if not isinstance(facts, dict) or not facts.get("sides"):
        return []
    # the recorded sides, one list per duet member: a pseudo host with the harness's core and those sides
    sides = [parse_cpu_list(str(side)) for side in facts["sides"]]
    harness = [] if facts.get("harness") in (None, "shared") else parse_cpu_list(str(facts["harness"]))
    cores = sorted({*harness, *(c for side in sides for c in side)})
    return [f"note: {record['entry']}: {record['caveat']}" for record in comparison_designs(study, cores)
            if record.get("caveat")]

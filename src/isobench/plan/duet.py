"""The duet schedule: the baseline and a compared entry run at the same time, as a pair.

After Bulej et al. ("Duet Benchmarking", ICPE 2020): what disturbs the machine while a pair
runs (a neighbour's load, steal time, a noisy hour) disturbs both of its cells alike, so
the pair's ratio cancels it and the analysis compares pair by pair. Each round holds, for
every compared group, one pair: that group's cell and a baseline cell of its own (cell id
``<baseline group>/<round>/duet-<entry>``). The two cells run on disjoint core sets
(plan/cores.py) and swap sides every round, so a side's own speed cancels out as well; while
they run they also trade cores every ``duet_swap_s`` (runner/duet.py: ``CoreTrade``), so a
core that slows down for a moment slows both.

Pair members carry a ``Cell.duet`` (:class:`~isobench.plan.cell.DuetInfo`: the pair's id,
the compared group, the side (0 or 1) and the other member's platform entry); they stay next
to each other in the plan and start behind one barrier
(runner/tenancy.py runs the pair; runner/duet.py lines it up).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from isobench.plan.cell import Cell, DuetInfo, closest_by_knobs

if TYPE_CHECKING:
    from isobench.study.model import Study


def _variant(cell: Cell) -> tuple[str, str]:
    return cell.workload_key, json.dumps(cell.params, sort_keys=True)


def _round_tag(cell: Cell) -> str:
    return f"w{cell.rep}" if cell.warmup else f"r{cell.rep}"


def _baseline_for(cell: Cell, baselines: list[Cell]) -> Cell | None:
    return closest_by_knobs(cell.knobs, [b for b in baselines if _variant(b) == _variant(cell)])


def pair_for_duet(study: Study, cells: list[Cell]) -> list[Cell]:
    """Replace each round's cells by baseline/compared pairs (plan order kept, seq renumbered)."""
    baseline = study.baseline
    rounds: dict[str, list[Cell]] = {}
    for cell in cells:
        rounds.setdefault(_round_tag(cell), []).append(cell)
    # A stable index per compared group, so each pair's sides alternate from round to round.
    compared = sorted({c.group for c in cells if c.platform_key != baseline})
    index = {group: i for i, group in enumerate(compared)}
    paired: list[Cell] = []
    for tag, members in rounds.items():
        baselines = [c for c in members if c.platform_key == baseline]
        used: set[str] = set()
        for cell in members:
            if cell.platform_key == baseline:
                continue
            base = _baseline_for(cell, baselines)
            if base is None:  # nothing to pair with: the cell runs alone
                paired.append(cell)
                continue
            used.add(base.cell_id)
            pair = f"{tag}:{cell.group}"
            base_side = (cell.rep + index[cell.group]) % 2
            paired.append(replace(base, cell_id=f"{base.cell_id}/duet-{cell.platform_key}",
                                  duet=DuetInfo(pair, cell.group, base_side, cell.platform_key,
                                                study.duet_swap_s)))
            paired.append(replace(cell, duet=DuetInfo(pair, cell.group, 1 - base_side, base.platform_key,
                                                      study.duet_swap_s)))
        paired.extend(c for c in baselines if c.cell_id not in used and not any(
            c2.platform_key != baseline and _variant(c2) == _variant(c) for c2 in members))
    return [replace(cell, seq=seq) for seq, cell in enumerate(paired)]


def validate_duet(study: Study) -> None:
    """Raise ValueError("problem; fix: ...") for a study a duet cannot run."""
    if study.schedule != "duet":
        return
    if all(p.key == study.baseline for p in study.platforms):
        raise ValueError("schedule: duet pairs each entry with the baseline, and this study has no other "
                         "entry; fix: add a platform entry (an A/A entry: the baseline with `label: aa`)")
    if study.tenants or any(p.tenants for p in study.platforms):
        raise ValueError("schedule: duet already runs two cells at once and cannot run tenant groups; "
                         "fix: drop `tenants`, or use schedule: sequential")

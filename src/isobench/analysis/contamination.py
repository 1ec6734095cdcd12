"""The contamination warning: what the flagged cells did to the results, judged by the A/A.

The runner flags a cell contaminated when other work took more than the study's threshold of
its cores' time (runner/interference.py). Two kinds reach the analysis:

- **shared**: both members of a duet pair that traded cores met the disturbance alike; the pair's
  ratio cancels it, so the pair is kept as it is and was not re-run;
- **one-sided**: a lone cell, a fixed-sides pair, or one member hit; re-run where the re-run budget
  allowed (the first clean attempt is used), else kept with the interference in its value.

Whether the flags mattered is what the A/A measured: an A/A interval within the equivalence
margin says the noise floor held despite them, and then the warning says so instead of asking
for a quieter host. Only an A/A wider than the margin (or none) keeps that advice.
"""

from __future__ import annotations

import re

from isobench.analysis.compare import Comparison, floor_of
from isobench.analysis.groups import Group
from isobench.analysis.stats import fmt_floor
from isobench.analysis.verdict import fmt_margin

DUET_ADVICE = ("A duet needs the other tasks off both its cores: quiet the host, or use schedule: sequential, "
               "which keeps a core for them.")
#: cells sized in seconds below this, beside a neighbour that stayed, are worth lengthening
LONGER_CELLS_S = 4.0
#: a neighbour "stayed" when at least this share of the study's cells met it
STEADY_SHARE = 0.5
LONGER_CELLS_ADVICE = (
    "Beside a neighbour that stays, longer cells pay: each item's time then depends on whether the neighbour "
    "held its core, and a cell's mean averages that out over its length. Write `min_seconds: {seconds:g}` (cells "
    "of {now:g} s here; {seconds:g} s is what a study that writes none gets): on a 2-core VM beside a busy loop "
    "at half a core, the minimal study's A/A floors tightened from ±1.0-1.5% to ±0.5-1.5% and its verdicts came "
    "at 6-9 rounds instead of 10-18, in less time (docs/studies.md).")


def _aa_floor(comparisons: list[Comparison]) -> tuple[float, float, bool] | None:
    """The widest A/A floor of e2e, its margin, and whether every A/A floor is within its margin;
    None without an A/A interval."""
    floors = [(floor, c.margin) for c in _aa(comparisons) for floor in [floor_of(c)] if floor is not None]
    if not floors:
        return None
    widest, margin = max(floors)
    return widest, margin, all(floor <= m for floor, m in floors)


def _aa(comparisons: list[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.is_aa and c.metric == "e2e" and not c.emulated]


def contamination_text(groups: list[Group], comparisons: list[Comparison], at_once: int = 1) -> str | None:
    """One warning about the study's contaminated cells, or None when there were none."""
    one_sided = sum(g.contaminated for g in groups)
    shared = sum(g.shared_contaminated for g in groups)
    if not one_sided and not shared:
        return None
    parts = []
    if one_sided:
        # Reasons carry each cell's numbers: name one, without its parenthesised details.
        reasons = [re.sub(r"\s*\([^()]*\)", "", r) for g in groups for r in g.contamination_reasons]
        why = f"e.g. {reasons[0]}" if reasons else "no reason recorded"
        rerun = sum(g.rerun for g in groups)
        parts.append(f"{one_sided} cells were contaminated ({why}); {rerun} re-run, {one_sided - rerun} kept: a "
                     "kept cell's value includes the interference; a re-run took the place of the others.")
    if shared:
        parts.append(f"{shared} cells of duet pairs that traded cores lost core time to other work, both members "
                     "of each pair alike: the pairing cancels that, so they were kept, not re-run.")
    aa = _aa_floor(comparisons)
    if aa is not None and aa[2]:
        cause = "the pairing cancelled the shared disturbance" if shared else "the interference did not widen it"
        parts.append(f"The A/A reads {fmt_floor(aa[0])}, within the {fmt_margin(aa[1])} margin: {cause}; "
                     "the host need not be quieter.")
    elif aa is not None:
        parts.append(f"The A/A reads {fmt_floor(aa[0])}, wider than the {fmt_margin(aa[1])} margin, which the "
                     "interference may explain." + (f" {DUET_ADVICE}" if at_once > 1 else " Quiet the host."))
    elif at_once > 1 and one_sided:
        parts.append(DUET_ADVICE)
    elif at_once > 1:
        parts.append("The A/A has too few pairs for an interval to show that the pairing cancelled it."
                     if _aa(comparisons) else "Without an A/A entry the study cannot show that the pairing "
                                              "cancelled it: add one (`- {name: baremetal, label: aa}`).")
    longer = _longer_cells_advice(groups, shared)
    if longer:
        parts.append(longer)
    return " ".join(parts)


def _longer_cells_advice(groups: list[Group], shared: int) -> str | None:
    """Where most cells of a study whose cells are sized in seconds met a neighbour, alike in each
    pair, how long its cells should be; None otherwise (a passing disturbance, cells sized in
    items, or cells long enough already)."""
    cells = sum(len(g.metrics.get("e2e", [])) for g in groups)
    seconds = [float(g.params.get("min_seconds") or 0.0) for g in groups]
    now = max(seconds, default=0.0)
    if not cells or shared < STEADY_SHARE * cells or not 0 < now < LONGER_CELLS_S:
        return None
    return LONGER_CELLS_ADVICE.format(seconds=LONGER_CELLS_S, now=now)

"""Blocked analysis: pair a group with the baseline by round or by duet, or fall back to Welch.

A round runs every group once, so it is a block: what the host did during the round (a
background job, thermal state) moves both sides, and a paired t interval on the log
differences removes it. Rules (``estimate``):

* **duet** (cells carry ``platform_info["duet"]``): the baseline cells whose ``partner`` is this
  group's platform key are paired with this group's cells by ``pair`` id (method
  ``duet-paired``). The duet design makes the pairs; they are used whenever every pair is
  complete and there are at least ``MIN_PAIRS``, whatever the correlation. Otherwise Welch on
  the partner-matched cells. Sides swap every round, so the pairs also form a 2x2 crossover:
  when one core runs steadily faster than the other (seen here: 10% for minutes), the mean of
  the two sides' mean log ratios cancels it (method ``duet-crossover``). It is used when each
  side has ``MIN_PER_SIDE`` pairs and its 95% interval is narrower than the plain paired one;
  like the choice between pairing and Welch below, that looks at the spread, never the ratio.
* **rounds** (sequential schedule): paired by ``rep`` (method ``paired-log``) when every round
  up to this group's last one holds exactly one value on each side (a failed or missing cell
  makes the round incomplete: Welch), there are at least ``MIN_PAIRS`` rounds, and pairing
  helps: the paired standard error of the mean log difference is below Welch's (that is, the
  within-round correlation is positive enough). Baseline rounds after the group's last one (an
  adaptive study stops a finished comparison while others go on) are not incomplete rounds;
  the paired analysis leaves them out, Welch uses them, and the smaller standard error wins.
  The choice looks at the spread only, never at the ratio, so it does not favour an effect.

``MIN_PAIRS`` is 3: two pairs give a t interval with one degree of freedom (t = 12.7), which
pairing cannot beat, and a correlation from two points means nothing.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, NamedTuple

from isobench.analysis.stats import (
    CROSSOVER_METHOD,
    DUET_METHOD,
    METHOD,
    PAIRED_METHOD,
    RatioEstimate,
    crossover_of_diffs,
    paired_of_diffs,
    paired_ratio_ci,
    ratio_ci,
    welch_of_logs,
)

MIN_PAIRS = 3


class Point(NamedTuple):
    """One cell's value of one metric, with what pairs it. A tuple, not a frozen dataclass: an
    analysis of thousands of cells makes a million of these, and a frozen dataclass costs five
    times as much to build."""

    rep: int
    value: float
    cell_id: str
    #: duet pair id and the partner's platform key (None outside a duet schedule)
    pair: str | None = None
    partner: str | None = None
    #: the duet side (core position) this cell ran on; sides swap every round
    side: str | None = None


@dataclass
class Blocked:
    estimate: RatioEstimate
    method: str
    reason: str
    se_paired: float | None
    se_unpaired: float | None
    #: the values each side contributed (a duet baseline: only the partner-matched cells)
    sample: list[float]
    reference: list[float]
    #: a paired method's round of each pair, aligned with ``sample`` and ``reference`` (empty: unpaired)
    pair_reps: tuple[int | None, ...] = ()


def _correlation(pairs: list[tuple[float, float]]) -> float | None:
    xs, ys = [math.log(a) for a, _ in pairs], [math.log(b) for _, b in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def _se(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _welch(sample: list[Point], reference: list[Point], reason: str, se_paired: float | None = None) -> Blocked:
    values, base = [p.value for p in sample], [p.value for p in reference]
    est = ratio_ci(values, base)
    return Blocked(est, METHOD, reason, se_paired, est.se, values, base)


def estimate(sample: list[Point], reference: list[Point], label: str) -> Blocked:
    """The comparison of ``sample`` (platform key ``label``) with the baseline's points."""
    if any(p.pair for p in sample):
        return _duet(sample, reference, label)
    return _rounds(sample, reference)


@dataclass(frozen=True)
class DuetPlan:
    """How a duet comparison pairs its cells, worked out from what pairs them (pair ids, partners,
    sides), not from the values: every metric of the same cells shares it, so an analysis of
    thousands of cells plans once per group and not once per metric. Indices point into the
    sample's and the reference's lists."""

    label: str
    #: the reference cells that ran beside ``label`` (empty: none did)
    partners: tuple[int, ...]
    #: why the cells cannot be paired (then Welch over ``welch_reference``), or "" when they can
    unpaired_reason: str = ""
    #: the reference side of the Welch fallback: every baseline cell, or only the partners
    welch_all_reference: bool = False
    #: the complete pairs in pair-id order: (sample index, reference index)
    pairs: tuple[tuple[int, int], ...] = ()
    #: the compared cell's side per pair (None: unknown, no crossover)
    sides: tuple[str | None, ...] = ()
    #: the round each pair ran in (None where the cells carry none)
    reps: tuple[int | None, ...] = ()


def plan_duet(sample: list[Any], reference: list[Any], label: str) -> DuetPlan:
    """The pairing of ``sample`` (anything with ``pair`` and ``side``) with the cells of
    ``reference`` (``pair``, ``partner``) that ran beside ``label``."""
    partners = tuple(i for i, p in enumerate(reference) if p.partner == label)
    if not partners:
        return DuetPlan(label, partners, f"duet cells, but no baseline cell ran beside {label}: unpaired (Welch) "
                                         "on all baseline cells", welch_all_reference=True)
    mine: dict[str, list[int]] = defaultdict(list)
    theirs: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(sample):
        mine[str(p.pair)].append(i)
    for i in partners:
        theirs[str(reference[i].pair)].append(i)
    broken = sorted(k for k in set(mine) | set(theirs) if len(mine.get(k, [])) != 1 or len(theirs.get(k, [])) != 1)
    if broken:
        return DuetPlan(label, partners, f"{len(broken)} duet pair(s) incomplete ({', '.join(broken[:3])}): "
                                         "unpaired (Welch) on the partner-matched cells")
    keys = sorted(mine)
    if len(keys) < MIN_PAIRS:
        return DuetPlan(label, partners, f"only {len(keys)} duet pair(s), fewer than {MIN_PAIRS}: unpaired (Welch)")
    return DuetPlan(label, partners, pairs=tuple((mine[k][0], theirs[k][0]) for k in keys),
                    sides=tuple(None if sample[mine[k][0]].side is None else str(sample[mine[k][0]].side)
                                for k in keys),
                    reps=tuple(getattr(sample[mine[k][0]], "rep", None) for k in keys))


def duet_estimate(plan: DuetPlan, sample: list[float], reference: list[float]) -> Blocked:
    """The comparison of a duet's values, aligned with the lists ``plan`` was made from."""
    if plan.unpaired_reason:
        base = reference if plan.welch_all_reference else [reference[i] for i in plan.partners]
        est = ratio_ci(sample, base)
        return Blocked(est, METHOD, plan.unpaired_reason, None, est.se, list(sample), base)
    pairs = [(sample[i], reference[j]) for i, j in plan.pairs]
    # each value's log once, for the paired, unpaired and crossover estimates alike
    log_a, log_b = [math.log(a) for a, _ in pairs], [math.log(b) for _, b in pairs]
    diffs = [a - b for a, b in zip(log_a, log_b, strict=True)]
    est = paired_of_diffs(diffs)
    unpaired = welch_of_logs(log_a, log_b).se
    values = [a for a, _ in pairs], [b for _, b in pairs]
    said = f"{len(pairs)} duet pairs (both sides ran at the same time): paired, SE {_se(est.se)} vs {_se(unpaired)} unpaired"
    crossover = _crossover(diffs, plan.sides)
    if crossover is not None:
        if _half_width(crossover[0]) < _half_width(est):
            return Blocked(crossover[0], CROSSOVER_METHOD,
                           f"{len(pairs)} duet pairs as a crossover: the two cores' speeds differed by "
                           f"{math.exp(abs(crossover[1])) - 1:.1%}, removed by the side swaps; "
                           f"SE {_se(crossover[0].se)} vs {_se(est.se)} paired alone", crossover[0].se, unpaired,
                           *values, plan.reps)
        said += f"; as a crossover by side SE {_se(crossover[0].se)} (no steady core difference to remove)"
    return Blocked(est, DUET_METHOD, said, est.se, unpaired, *values, plan.reps)


def _duet(sample: list[Point], reference: list[Point], label: str) -> Blocked:
    return duet_estimate(plan_duet(sample, reference, label), [p.value for p in sample],
                         [p.value for p in reference])


#: a crossover needs this many pairs on each side (two: a spread within each side)
MIN_PER_SIDE = 2


def _crossover(diffs: list[float], sides: tuple[str | None, ...]) -> tuple[RatioEstimate, float] | None:
    """The crossover estimate of complete duet pairs (their log differences) grouped by the
    compared cell's side, and half the difference between the sides' mean log ratios (the core
    effect); None when the sides are unknown or either has fewer than MIN_PER_SIDE pairs."""
    by_side: dict[str, list[float]] = defaultdict(list)
    for diff, side in zip(diffs, sides, strict=True):
        if side is None:
            return None
        by_side[side].append(diff)
    groups = [by_side[k] for k in sorted(by_side)]
    if len(groups) != 2 or min(len(g) for g in groups) < MIN_PER_SIDE:
        return None
    means = [sum(g) / len(g) for g in groups]
    return crossover_of_diffs(groups), (means[0] - means[1]) / 2


def _half_width(est: RatioEstimate) -> float:
    """The 95% interval's half-width in log units (the t quantile included: a crossover has one
    degree of freedom fewer), or infinity without an interval."""
    if est.ci_low is None or est.ci_high is None:
        return math.inf
    return (math.log(est.ci_high) - math.log(est.ci_low)) / 2


def _rounds(sample: list[Point], reference: list[Point]) -> Blocked:
    mine: dict[int, list[float]] = defaultdict(list)
    theirs: dict[int, list[float]] = defaultdict(list)
    for p in sample:
        mine[p.rep].append(p.value)
    for p in reference:
        theirs[p.rep].append(p.value)
    if not mine:
        return _welch(sample, reference, "no values")
    last = max(mine)
    span = set(mine) | {r for r in theirs if r <= last}
    incomplete = sorted(r for r in span if len(mine.get(r, [])) != 1 or len(theirs.get(r, [])) != 1)
    if incomplete:
        shown = ", ".join(str(r) for r in incomplete[:5]) + (", ..." if len(incomplete) > 5 else "")
        return _welch(sample, reference, f"round(s) {shown} incomplete: unpaired (Welch)")
    if len(span) < MIN_PAIRS:
        return _welch(sample, reference, f"only {len(span)} round(s), fewer than {MIN_PAIRS}: unpaired (Welch)")
    pairs = [(mine[r][0], theirs[r][0]) for r in sorted(span)]
    paired = paired_ratio_ci(pairs)
    welch = ratio_ci([p.value for p in sample], [p.value for p in reference])
    rho = _correlation(pairs)
    corr = "n/a" if rho is None else f"{rho:+.2f}"
    extra = len(theirs) - len(span)
    unused = f"; the baseline's {extra} later round(s) are left out of the pairs" if extra else ""
    if paired.se is not None and welch.se is not None and paired.se < welch.se:
        return Blocked(paired, PAIRED_METHOD, f"paired by round: SE {_se(paired.se)} vs {_se(welch.se)} unpaired "
                                              f"(within-round correlation {corr}){unused}",
                       paired.se, welch.se, [a for a, _ in pairs], [b for _, b in pairs], tuple(sorted(span)))
    return Blocked(welch, METHOD, f"pairing by round does not help: SE {_se(paired.se)} paired vs "
                                  f"{_se(welch.se)} unpaired (within-round correlation {corr}): unpaired (Welch)",
                   paired.se, welch.se, [p.value for p in sample], [p.value for p in reference])


# -- contaminated cells and their re-runs -----------------------------------------------
def shared_flag(info: dict) -> bool:
    """A contaminated cell whose trading duet partner met the disturbance alike: the runner marks
    it ``shared`` (runner/interference.py) and the pair's ratio cancels it, so the cell is valid."""
    interference = info.get("interference")
    return isinstance(interference, dict) and bool(interference.get("contaminated")) \
        and bool(interference.get("shared"))


def _flagged(info: dict) -> bool:
    interference = info.get("interference")
    return isinstance(interference, dict) and bool(interference.get("contaminated")) and not shared_flag(info)


def origin_of(cell_id: str, info: dict) -> str | None:
    """The cell a re-run repeats (``platform_info["rerun_of"]``, else the id before ``+rerun``)."""
    if info.get("rerun_of"):
        return str(info["rerun_of"])
    return cell_id.split("+rerun", 1)[0] if "+rerun" in cell_id else None


def _attempt(cell_id: str) -> int:
    match = re.search(r"\+rerun(\d+)$", cell_id)
    return int(match.group(1)) if match else 0


def screen(cells: list[tuple[str, str, dict]]) -> tuple[set[str], dict[str, tuple[bool, str]]]:
    """Which cells the analysis leaves out, from ``(cell_id, status, platform_info)`` rows.

    The unit of a re-run is what ran together: a cell, or a duet pair (the runner re-runs both
    members, so the pair ids stay matched). A shared flag (``shared_flag``) is no contamination
    here: such a pair is used as it is. A unit with a contaminated (or failed) member gives
    way to its first re-run attempt whose members are all clean (ok, not contaminated); a unit
    without one keeps its original cells, contaminated ones included; the attempts not used are
    left out (one value per round). Returns the left-out ids and, for each contaminated original,
    whether a re-run replaced it and its reason.
    """
    status = {cid: st for cid, st, _ in cells}
    infos = {cid: info for cid, _, info in cells}
    origin = {cid: origin_of(cid, info) or cid for cid, _, info in cells}

    def unit(cid: str) -> str:
        duet = infos[cid].get("duet")
        pair = duet.get("pair") if isinstance(duet, dict) else None
        return str(pair).split("+rerun", 1)[0] if pair else origin[cid]

    attempts: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for cid in status:
        attempts[unit(cid)][_attempt(cid)].append(cid)

    def clean(members: list[str]) -> bool:
        return all(status[m] == "ok" and not _flagged(infos[m]) for m in members)

    excluded: set[str] = set()
    fate: dict[str, tuple[bool, str]] = {}
    for tries in attempts.values():
        first = tries.get(0, [])
        use = 0
        if not first or not clean(first):
            use = next((k for k in sorted(tries) if k > 0 and len(tries[k]) >= len(first) and clean(tries[k])), 0)
        excluded.update(m for k, members in tries.items() if k != use for m in members)
        for m in first:
            if _flagged(infos[m]):
                fate[m] = (use != 0, str(infos[m]["interference"].get("reason") or "no reason given"))
    return excluded, fate

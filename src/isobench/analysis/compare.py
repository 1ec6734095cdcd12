"""Compare every platform entry with the study's baseline, metric by metric.

Each comparison is paired by round or duet where that helps, else Welch (analysis/blocked.py),
and ends in one verdict (analysis/verdict.py). Contaminated cells give way to their re-runs
(``blocked.screen``); the groups count them so the report can say so.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from isobench.analysis import verdict as vd
from isobench.analysis.blocked import duet_estimate, estimate, plan_duet
from isobench.analysis.groups import Group, load_groups
from isobench.analysis.metric_sense import time_ratio
from isobench.analysis.stats import (
    CROSSOVER_METHOD,
    DUET_METHOD,
    PAIRED_METHOD,
    bootstrap_ratio_ci,
    effect_words,
    holm,
    interval_at,
)
from isobench.analysis.tdist import t_sf
from isobench.plan.cells import closest_by_knobs
from isobench.store import Store
from isobench.study.aa import is_aa_group
from isobench.studyfile import load_study_text

if TYPE_CHECKING:
    from isobench.study.model import PlatformEntry


@dataclass
class Comparison:
    workload: str
    platform: str
    label: str
    knobs: dict[str, Any]
    metric: str
    baseline: str
    ratio: float
    ci_low: float | None
    ci_high: float | None
    n: int
    significant: bool
    n_baseline: int
    p_value: float | None
    mean: float
    baseline_mean: float
    unit: str
    method: str
    is_aa: bool
    #: percentile bootstrap interval by repetition, beside Welch's (e2e only: BOOTSTRAPPED)
    boot_low: float | None = None
    boot_high: float | None = None
    #: Holm-adjusted p-value across the study's comparisons of this metric (A/A excluded)
    p_holm: float | None = None
    #: how far from 1 the A/A interval of this workload and metric reaches (None: no A/A entry)
    noise_floor: float | None = None
    effect: str = ""
    emulated: bool = False
    #: the workload's parameters (a sweep gives one comparison per value)
    params: dict[str, Any] = field(default_factory=dict)
    #: the host both sides ran on: a platform is only ever compared with the baseline of its own host
    host: str = ""
    #: why ``method`` was chosen, and the standard error of the log ratio each method gives
    method_reason: str = ""
    se_paired: float | None = None
    se_unpaired: float | None = None
    #: the chosen estimate's standard error and degrees of freedom (log scale)
    se: float | None = None
    df: float | None = None
    #: slower/faster (higher/lower), equivalent, inconclusive or not comparable: see analysis/verdict.py
    verdict: str = "inconclusive"
    #: the 90% interval of the TOST and its equivalence margin (±m: [1/(1+m), 1+m])
    ci90_low: float | None = None
    ci90_high: float | None = None
    margin: float = vd.DEFAULT_MARGIN
    #: inconclusive: repetitions per side that would settle it at the observed standard error
    repetitions_needed: int | None = None
    #: why the verdict is not the direction its interval shows (too few pairs, inside the A/A noise
    #: floor: analysis/verdict.py), or why it is not comparable; empty when no guard held one back
    verdict_reason: str = ""
    #: the engine and runtime versions the compared platform's cells ran on ({} for the host itself)
    versions: dict[str, str] = field(default_factory=dict)
    #: the devices each side's cells ran on (sorted; empty where the workload reports none)
    devices: list[str] = field(default_factory=list)
    baseline_devices: list[str] = field(default_factory=list)
    #: why the two sides cannot be compared (they ran on different devices), with the fix; "" when they
    #: can. judge() turns it into the verdict "not comparable"; set before _adjust (Holm leaves it out).
    incomparable: str = ""

    @property
    def significant_holm(self) -> bool:
        return self.significant and (self.p_holm is None or self.p_holm < 0.05)

    @property
    def half_width(self) -> float | None:
        """The CI's relative half-width on the log scale (what adaptive repetition drives down)."""
        if self.ci_low is None or self.ci_high is None or self.ci_low <= 0:
            return None
        import math

        return (math.log(self.ci_high) - math.log(self.ci_low)) / 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _on_gpu(group: Group) -> bool:
    return any(d.startswith("cuda") for d in group.devices)


def device_mismatch(group: Group, base: Group, entries: dict[str, PlatformEntry]) -> str:
    """Why ``group`` cannot be compared with ``base``: they ran on different devices ("" when they did
    not, or one side reports none). Names both sides' devices and the fix."""
    if not vd.devices_differ(group.devices, base.devices):
        return ""
    text = (f"{group.display} ran on {vd.fmt_devices(group.devices)} and {base.display} on "
            f"{vd.fmt_devices(base.devices)}")
    if str(group.params.get("device", "auto")) == "auto":
        text += " (device: auto follows what each platform can see)"
    fixes = ["set the workload's device (device: cpu)"]
    # The side that missed the GPU the other used: an oci entry on runc or crun can be given it (platforms/oci.py).
    for blind, other in ((group, base), (base, group)):
        entry = entries.get(blind.platform_key)
        if _on_gpu(other) and not _on_gpu(blind) and entry is not None and entry.name == "oci" \
                and entry.runtime != "runsc" and "gpus" not in entry.options:
            fixes.append("pass the GPU into the container (options: {gpus: all})")
    return f"{text}; " + ", or ".join(fixes)


def hosts_of(items: list[Any]) -> list[str]:
    """The distinct hosts of groups or comparisons, in first-seen order."""
    return list(dict.fromkeys(item.host for item in items))


def _baseline_for(group: Group, candidates: list[Group]) -> Group | None:
    return closest_by_knobs(group.knobs, [c for c in candidates
                                          if c.workload == group.workload and c.params == group.params])


#: the metrics whose comparisons carry a bootstrap interval (boot_low, boot_high)
BOOTSTRAPPED = frozenset({"e2e"})


def compare(store: Store) -> list[Comparison]:
    study = load_study_text(store.meta("study_yaml") or "", store.meta("study_file") or "store", check_host=False)
    baseline_key = study.baseline
    entries = {p.key: p for p in study.platforms}
    groups = load_groups(store)
    margin = vd.margin_of(study)
    baselines: dict[str, list[Group]] = defaultdict(list)
    for g in groups:
        if g.platform_key == baseline_key:
            baselines[g.host].append(g)
    results: list[Comparison] = []
    for group in groups:
        if group.platform_key == baseline_key:
            continue
        # Hosts differ in hardware: a ratio across hosts would measure the hosts, not the platform.
        base = _baseline_for(group, baselines.get(group.host, []))
        if base is None:
            continue
        # An A/A is the baseline again in everything but its label (study/aa.py), per knob set.
        entry = entries.get(group.platform_key)
        is_aa = entry is not None and is_aa_group(study, entry, group.knobs, base.knobs)
        # A duet pairs the same cells for every metric they all report: planned once per group
        plan = plan_duet(group.cells, base.cells, group.platform_key) \
            if group.cells and base.cells and any(c.pair for c in group.cells) else None
        mismatch = device_mismatch(group, base, entries)
        for metric in sorted(group.metrics):
            sample, reference = group.metrics[metric], base.metrics.get(metric)
            if not reference or min(sample) <= 0 or min(reference) <= 0:
                continue
            if plan is not None and group.complete(metric) and base.complete(metric):
                blocked = duet_estimate(plan, sample, reference)
            else:
                blocked = estimate(group.points[metric], base.points[metric], group.platform_key)
            est, sample, reference = blocked.estimate, blocked.sample, blocked.reference
            # the distribution-free cross-check the report shows beside each e2e interval only: at
            # thousands of cells, resampling every probe metric cost most of the analysis
            boot = bootstrap_ratio_ci(sample, reference) if metric in BOOTSTRAPPED else None
            results.append(Comparison(
                workload=group.workload, platform=group.display, label=group.platform_key,
                knobs=group.knobs, metric=metric, baseline=base.display, ratio=est.ratio,
                ci_low=est.ci_low, ci_high=est.ci_high, n=est.n, significant=est.significant,
                n_baseline=est.n_baseline, p_value=est.p_value, mean=statistics.fmean(sample),
                baseline_mean=statistics.fmean(reference), unit=group.units.get(metric, ""),
                method=blocked.method, is_aa=is_aa,
                boot_low=boot[0] if boot else None, boot_high=boot[1] if boot else None,
                effect=effect_words(est.ratio, metric), emulated=group.emulated or base.emulated,
                params=group.params, host=group.host, method_reason=blocked.reason,
                se_paired=blocked.se_paired, se_unpaired=blocked.se_unpaired, se=est.se, df=est.df,
                margin=margin, versions=dict(group.versions), devices=sorted(group.devices),
                baseline_devices=sorted(base.devices), incomparable=mismatch))
    pool_spread_with_aa(results)
    _adjust(results)
    return results


#: the paired methods whose per-pair spread is se × √n (analysis/blocked.py)
_PAIRED = frozenset({PAIRED_METHOD, DUET_METHOD, CROSSOVER_METHOD})
#: which pairs a paired method reads: a duet's pairs are the same pairs whether they are read plainly
#: or as a crossover (which also removes the two cores' steady speed difference), so an A/A read one
#: way bounds a comparison read the other way
_PAIRS_OF_METHOD = {PAIRED_METHOD: "rounds", DUET_METHOD: "duet", CROSSOVER_METHOD: "duet"}


def pool_spread_with_aa(results: list[Comparison]) -> None:
    """A comparison's pairs spread at least as much as its A/A's: where a paired comparison's
    spread per pair is below that of the A/A entry of its workload, metric and host (paired the
    same way), its interval uses the A/A's spread and degrees of freedom.

    Why: a study stops a comparison at its first verdict (runner/adaptive.py), and with few pairs
    the spread is itself a guess, so a comparison stops when its pairs happen to agree. Beside a
    busy neighbour, an injected 3% on resnet-infer stopped after 6 pairs reading 1.006 (0.996-1.016)
    "equivalent": their spread was 1.3% a pair, where the A/A's 24 pairs in the same study spread
    5.3%. The A/A is the baseline against itself, so its spread is the least the pairing leaves;
    a platform can add spread, never take the pairing's away.

    The A/A and the comparison need only read the same pairs (rounds, or duets), not by the same
    method: each comparison picks plain pairs or the crossover by its own data. Beside the same
    neighbour, an injected 3% on resnet-infer read 1.018 (1.011-1.024) from 8 duet pairs read plainly
    that spread 0.8%, while the A/A's 8, read as a crossover, spread 1.6%: with the A/A's spread it
    reads 1.018 (1.004-1.032). The crossover's spread is the smaller of the two readings of one set
    of pairs, so an A/A read as a crossover is the lower bound either way."""
    aas: dict[tuple[str, str, str, str, str], list[Comparison]] = defaultdict(list)
    for c in results:
        if c.is_aa and not c.incomparable and c.method in _PAIRED and c.se and c.n >= 3:
            aas[(c.workload, json.dumps(c.params, sort_keys=True), c.metric, c.host, _PAIRS_OF_METHOD[c.method])].append(c)
    for c in results:
        if c.is_aa or c.incomparable or c.se is None or c.df is None or c.n < 2 or c.method not in _PAIRED:
            continue
        candidates = aas.get((c.workload, json.dumps(c.params, sort_keys=True), c.metric, c.host,
                              _PAIRS_OF_METHOD[c.method]))
        if not candidates:
            continue
        aa = max(candidates, key=lambda a: a.n)
        aa_spread, own_spread = aa.se * math.sqrt(aa.n), c.se * math.sqrt(c.n)  # type: ignore[operator]
        if aa_spread <= own_spread:
            continue
        log_ratio = math.log(c.ratio)
        c.se, c.df = aa_spread / math.sqrt(c.n), aa.df
        c.ci_low, c.ci_high = interval_at(log_ratio, c.se, c.df, 0.95)  # type: ignore[misc]
        c.p_value = float(2 * t_sf(abs(log_ratio) / c.se, max(c.df or 1.0, 1.0)))
        c.significant = c.ci_low is not None and c.ci_high is not None and (c.ci_low > 1.0 or c.ci_high < 1.0)
        c.method_reason = (f"{c.method_reason}; " if c.method_reason else "") + (
            f"its {c.n} pairs spread {own_spread:.1%} each, less than the A/A's {aa_spread:.1%} over "
            f"{aa.n} pairs: the interval uses the A/A's spread")


def floor_of(aa: Comparison) -> float | None:
    if aa.ci_low is None or aa.ci_high is None:
        return None
    return max(abs(aa.ci_high - 1), abs(1 - aa.ci_low))


def _adjust(results: list[Comparison]) -> None:
    """Holm across each metric's comparisons; the A/A noise floor beside each comparison."""
    by_metric: dict[str, list[Comparison]] = defaultdict(list)
    for c in results:
        # a comparison across devices tests nothing about a platform: it takes no share of alpha
        if not c.is_aa and not c.incomparable:
            by_metric[c.metric].append(c)
    for family in by_metric.values():
        for c, p in zip(family, holm([c.p_value for c in family]), strict=True):
            c.p_holm = p
    # A host's noise is its own: the floor comes from the A/A entry of the same host.
    floors: dict[tuple[str, str, str, str], list[Comparison]] = defaultdict(list)
    for c in results:
        if c.is_aa and not c.incomparable:  # an A/A across devices states the devices' gap, not noise
            floors[(c.workload, json.dumps(c.params, sort_keys=True), c.metric, c.host)].append(c)
    for c in results:
        candidates = floors.get((c.workload, json.dumps(c.params, sort_keys=True), c.metric, c.host), [])
        if not candidates:
            continue
        # The A/A entry with the same knobs if there is one, else the one sharing most knobs.
        aa = max(candidates, key=lambda a: (a.knobs == c.knobs, sum(c.knobs.get(k) == v for k, v in a.knobs.items())))
        c.noise_floor = floor_of(aa)
    for c in results:
        judge(c)


def judge(c: Comparison) -> None:
    """Set the comparison's verdict (with its guards' reason), 90% interval and repetitions_needed
    (after Holm, which sets p_holm, and after the noise floor is known)."""
    if c.se is None and c.ci_low is not None and c.ci_high is not None and c.ci_low > 0:
        # An estimate from elsewhere (another study's store) without its SE: back it out of the 95% CI.
        c.se, c.df = (math.log(c.ci_high) - math.log(c.ci_low)) / (2 * 1.959964), c.df or 1e6
    log_ratio = math.log(c.ratio)
    ci90 = interval_at(log_ratio, c.se, c.df, 1 - 2 * vd.ALPHA)
    c.ci90_low, c.ci90_high = ci90 if ci90 else (None, None)
    if c.incomparable:
        # A CPU-vs-GPU ratio is no platform's cost, and more repetitions cannot change that. Clearing
        # `significant` keeps what reads it (hints, phase attributions, views) from calling an effect.
        c.verdict, c.verdict_reason, c.repetitions_needed = vd.NOT_COMPARABLE, c.incomparable, None
        c.significant = False
        return
    p = c.p_holm if c.p_holm is not None else c.p_value
    n = min(c.n, c.n_baseline)
    floor = None if c.is_aa else c.noise_floor  # an A/A is not judged against its own floor
    c.verdict, c.verdict_reason = vd.verdict_and_reason(c.metric, log_ratio, c.se, c.df, p, c.margin, n=n,
                                                        floor=floor)
    c.repetitions_needed = None
    if c.verdict == "inconclusive":
        # Inside the A/A floor, more repetitions of this comparison can only show equivalence.
        held = vd.inside_floor(log_ratio, floor)
        needed = vd.repetitions_needed(log_ratio, c.se, c.df, n, c.margin, difference=not held)
        # Holm can hold back a difference the interval already resolves, and a direction needs
        # MIN_DIRECTION_N pairs: at least one more, and at least that many, then.
        floor_n = vd.MIN_DIRECTION_N if c.verdict_reason and not held else 0
        c.repetitions_needed = None if needed is None else max(needed, n + 1, floor_n)


def _entry_of(c: Comparison) -> tuple[str, ...]:
    return (c.workload, c.label, json.dumps(c.knobs, sort_keys=True, default=str),
            json.dumps(c.params, sort_keys=True, default=str), c.host)


#: (the comparisons list it indexes, its length, entry -> its phase comparisons): a report asks
#: for each headline; scanning every comparison each time was quadratic at fleet scale
_phase_index: tuple[list[Comparison], int, dict[tuple[str, ...], list[Comparison]]] | None = None


def _phases_of(comparisons: list[Comparison], e2e: Comparison) -> list[Comparison]:
    global _phase_index
    if _phase_index is None or _phase_index[0] is not comparisons or _phase_index[1] != len(comparisons):
        index: dict[tuple[str, ...], list[Comparison]] = defaultdict(list)
        for c in comparisons:
            if c.metric.startswith("phase."):
                index[_entry_of(c)].append(c)
        _phase_index = (comparisons, len(comparisons), index)
    return _phase_index[2].get(_entry_of(e2e), [])


#: knobs whose work goes into an ``injected`` phase at each item's end (workloads/timing.py), a phase
#: the baseline does not have, so it has no comparison of its own (``slowdown_phases`` puts the
#: slowdown inside named phases instead)
ITEM_END_KNOBS = ("slowdown", "extra_syscalls", "extra_faults")


def phase_attribution(comparisons: list[Comparison], e2e: Comparison) -> tuple[str, float] | None:
    """The phase holding most of an e2e difference, and its share of that difference. For an entry
    that injects work at each item's end, that work is a phase too: the difference the compared
    phases leave (naming a real phase's 7% beside an injected 100% would contradict the data)."""
    delta = e2e.mean - e2e.baseline_mean
    if delta == 0:
        return None
    phases = _phases_of(comparisons, e2e)
    if not phases:
        return None
    sign = 1 if delta > 0 else -1
    top = max(phases, key=lambda c: (c.mean - c.baseline_mean) * sign)
    name, share = top.metric.removeprefix("phase."), (top.mean - top.baseline_mean) / delta
    injecting = any(e2e.knobs.get(k) for k in ITEM_END_KNOBS) and not e2e.knobs.get("slowdown_phases")
    if injecting:
        injected = (delta - sum(c.mean - c.baseline_mean for c in phases)) / delta
        if injected > share:
            name, share = "injected", injected
    return (name, share) if share > 0 else None


# -- CI gating: `isobench compare A B --fail-if slower[:RATIO]` ---------------------------------

FAIL_IF_FIX = ("use slower (any resolved slowdown), slower:RATIO (resolved and B/A >= RATIO, e.g. slower:1.05), "
               "faster, or faster:RATIO (resolved and B/A <= RATIO, e.g. faster:0.95)")


@dataclass(frozen=True)
class FailIf:
    """A CI gate: trips on a comparison whose verdict is ``direction`` (a resolved difference: its
    95% interval excludes 1 after Holm) and, with a threshold, whose ratio is beyond it; and on one
    that is not comparable (B ran on another device than A): the gate cannot vouch for it."""

    direction: str  # "slower" or "faster"
    threshold: float | None = None

    def __str__(self) -> str:
        return self.direction + (f":{self.threshold:g}" if self.threshold is not None else "")

    def trips(self, c: Comparison) -> bool:
        if c.verdict == vd.NOT_COMPARABLE:  # B lost (or gained) the GPU: passing would hide it
            return True
        if c.verdict != self.direction:
            return False
        if self.threshold is None:
            return True
        ratio = time_ratio(c.metric, c.ratio)  # a rate's 0.8x is a time's 1.25x: slower:1.2 trips on both
        return ratio >= self.threshold if self.direction == "slower" else ratio <= self.threshold


def parse_fail_if(spec: str) -> FailIf:
    """``slower``, ``slower:1.05``, ``faster`` or ``faster:0.95``; anything else is a UserError."""
    from isobench.errors import UserError

    direction, colon, number = spec.strip().partition(":")
    if direction not in ("slower", "faster"):
        raise UserError(f"unknown condition {spec!r}", field="--fail-if", fix=FAIL_IF_FIX)
    if not colon:
        return FailIf(direction)
    try:
        threshold = float(number)
    except ValueError:
        threshold = math.nan
    # a slowdown's ratio is above 1 and a speed-up's below: a threshold on the other side is a typo
    if not math.isfinite(threshold) or threshold <= 0 or (threshold < 1 if direction == "slower" else threshold > 1):
        raise UserError(f"bad ratio {number!r} in {spec!r}", field="--fail-if", fix=FAIL_IF_FIX)
    return FailIf(direction, threshold)

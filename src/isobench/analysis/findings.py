"""Test a paper's findings (analysis/finding_spec.py) against the stores of its studies.

Each check yields an estimate with a 95% interval and one of four verdicts, decided on that
interval against the check's expectation:

* ``> x``: holds when the interval lies above x, does not hold when it lies below;
* ``< x``: the mirror image;
* ``within m``: holds when the interval lies inside [1/(1+m), 1+m], does not hold when it lies
  wholly outside; ``between a and b`` likewise with [a, b] (a band around a cited figure);
* anything else is inconclusive, with the repetitions per side at which the interval,
  shrinking as 1/sqrt(n), would clear the threshold;
* a check needing what the host lacks (a GPU, KVM, hardware counters, ...), or whose metric
  the store does not hold, cannot be tested here, and says why; so does a check whose
  comparison the literature gives no figure for (``no_figure``), its estimate shown beside.
* a fixed outcome, or a "does not hold" the design could not have seen (the paper's effect below
  its power, or a ``design_limit``), is not testable by this design (analysis/finding_power.py).

Ratios come from the same blocked estimate (duet pairs, rounds) as every comparison of the
report; values and differences use a t interval over cells. Either way a tenant group's members
are merged per round first (analysis/tenant_rounds.py: they share the flusher, so n counts rounds).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from isobench.analysis import finding_power as power
from isobench.analysis.blocked import Point, estimate
from isobench.analysis.finding_aa import aa_twin
from isobench.analysis.finding_format import fmt_ratio as _fmt_ratio
from isobench.analysis.finding_format import fmt_value as _fmt_value
from isobench.analysis.finding_power import FAILS, HOLDS, INCONCLUSIVE, UNTESTABLE
from isobench.analysis.finding_provenance import annotate
from isobench.analysis.finding_result import CheckResult, Estimate, FindingResult
from isobench.analysis.finding_spec import Check, Expectation, Finding, PaperFindings, Side
from isobench.analysis.groups import Group, load_groups
from isobench.analysis.stats import RatioEstimate
from isobench.analysis.tdist import t_ppf
from isobench.analysis.tenant_rounds import tenant_means, tenant_points
from isobench.store import Store
from isobench.study.model import Study
from isobench.studyfile import load_study_text

#: beyond this many repetitions, "inconclusive" says "more than" instead of a number
MAX_REPETITIONS = 10_000


class Untestable(Exception):
    """The check cannot run on what the store holds; the message says why."""


class Sources:
    """The studies' stores, opened once, with their groups and baselines."""

    def __init__(self, directories: dict[str, Path], skipped: dict[str, str] | None = None) -> None:
        self.directories = directories
        #: study -> why it was not run on this host
        self.skipped = skipped or {}
        self._cache: dict[str, tuple[list[Group], str]] = {}
        self.studies: dict[str, Study] = {}
        #: study -> cell_id -> the cell's measured items (a check's ``per: items``)
        self.items: dict[str, dict[str, int]] = {}

    def groups(self, study: str) -> tuple[list[Group], str]:
        if study in self.skipped:
            raise Untestable(self.skipped[study])
        if study not in self._cache:
            directory = self.directories.get(study)
            if directory is None or not Store.exists(directory):
                raise Untestable(f"study {study} was not run")
            store = Store.open(directory)
            try:
                parsed = load_study_text(store.meta("study_yaml") or "", study, check_host=False)
                self._cache[study] = (load_groups(store), parsed.baseline)
                self.studies[study] = parsed
                self.items[study] = store.item_counts()
            finally:
                store.close()
        return self._cache[study]


def _group(groups: list[Group], workload: str, platform: str, knobs: dict[str, object]) -> Group:
    found = [g for g in groups if g.workload == workload and g.platform_key == platform
             and all(g.knobs.get(k) == v for k, v in knobs.items())]
    if not found:
        raise Untestable(f"no cells of {workload} on {platform}" + (f" with {knobs}" if knobs else ""))
    if len(found) > 1:
        found.sort(key=lambda g: len(g.knobs))  # the sweep's plainest variant, e.g. no extra knobs
    return found[0]


#: ``per: items``: divide by the cell's measured items (a count per item, e.g. system calls)
PER_ITEM = "items"


def _points(group: Group, metric: str | list[str], per: str | None,
            items: dict[str, int] | None = None) -> list[Point]:
    names = [metric] if isinstance(metric, str) else list(metric)
    missing = [m for m in [*names, *([per] if per and per != PER_ITEM else [])] if m not in group.points]
    if missing:
        raise Untestable(f"{missing[0]} was not recorded for {group.workload} on {group.platform_key}")
    by_cell: dict[str, list[Point]] = defaultdict(list)
    for name in names:
        for p in group.points[name]:
            by_cell[p.cell_id].append(p)
    if per == PER_ITEM:
        denominators: dict[str, float] = {cell_id: float(n) for cell_id, n in (items or {}).items()}
    else:
        denominators = {p.cell_id: p.value for p in group.points[per]} if per else {}
    points = []
    for cell_id, parts in by_cell.items():
        if len(parts) != len(names):
            continue  # a cell that lacks one of the summed metrics
        value = sum(p.value for p in parts)
        if per:
            if not denominators.get(cell_id):
                continue
            value /= denominators[cell_id]
        points.append(Point(parts[0].rep, value, cell_id, parts[0].pair, parts[0].partner))
    if not points:
        raise Untestable(f"no cell of {group.workload} on {group.platform_key} has every metric it needs")
    return points


def _sides(sources: Sources, side: Side, default_study: str) -> tuple[list[Point], list[Point], str]:
    study = side.study or default_study
    groups, baseline = sources.groups(study)
    sample = _group(groups, side.workload, side.platform, side.knobs)
    reference = _group(groups, side.against_workload or side.workload, side.against or baseline,
                       side.reference_knobs)
    items = sources.items.get(study)
    # a tenant group's members share the flusher and the cores: one sample per round, not N
    return (tenant_points(_points(sample, side.metric, side.per, items)),
            tenant_points(_points(reference, side.metric, side.per, items)), side.platform)


def _blocked(sources: Sources, side: Side, default_study: str) -> RatioEstimate:
    """The side's ratio to its reference, by the report's own blocked estimate (duet pairs, rounds)."""
    sample, reference, label = _sides(sources, side, default_study)
    if min(p.value for p in sample + reference) <= 0:
        raise Untestable(f"{side.metric} has zero values: no ratio")
    return estimate(sample, reference, label).estimate


def _ratio(sources: Sources, side: Side, default_study: str) -> Estimate:
    est = _blocked(sources, side, default_study)
    return Estimate(est.ratio, est.ci_low, est.ci_high, min(est.n, est.n_baseline), "log",
                    _fmt_ratio(est.ratio, est.ci_low, est.ci_high), est.se, est.df)


def _ratio_of_ratios(sources: Sources, check: Check, default_study: str) -> Estimate:
    if check.other is None:
        raise ValueError(f"check {check.what!r}: ratio_of_ratios needs `other`")
    first = _blocked(sources, check, default_study)
    second = _blocked(sources, check.other, default_study)
    if first.se is None or second.se is None or first.df is None or second.df is None:
        ratio = first.ratio / second.ratio
        return Estimate(ratio, None, None, min(first.n, second.n), "log", _fmt_ratio(ratio, None, None))
    # Both share the baseline, so their errors correlate positively: adding variances overstates
    # the spread, which makes the verdict conservative, never bolder.
    log_r = math.log(first.ratio) - math.log(second.ratio)
    se = math.hypot(first.se, second.se)
    half = float(t_ppf(0.975, max(min(first.df, second.df), 1.0))) * se
    ratio, low, high = math.exp(log_r), math.exp(log_r - half), math.exp(log_r + half)
    return Estimate(ratio, low, high, min(first.n, second.n), "log", _fmt_ratio(ratio, low, high), se,
                    min(first.df, second.df))


def _t_interval(values: list[float]) -> tuple[float, float | None, float | None]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = float(t_ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def _value(sources: Sources, check: Check, default_study: str) -> Estimate:
    groups, _ = sources.groups(check.study or default_study)
    values = tenant_means(_points(_group(groups, check.workload, check.platform, check.knobs),
                                  check.metric, check.per, sources.items.get(check.study or default_study)))
    mean, low, high = _t_interval(values)
    return Estimate(mean, low, high, len(values), "linear", _fmt_value(mean, low, high, check),
                    *power.t_spread(values))


def _difference(sample: list[float], reference: list[float]) -> tuple[float, float | None, float | None]:
    diff = statistics.fmean(sample) - statistics.fmean(reference)
    se, df = power.welch_spread(sample, reference)
    if se is None or df is None:
        return diff, None, None
    half = float(t_ppf(0.975, max(df, 1.0))) * se
    return diff, diff - half, diff + half


def _diff_estimate(sources: Sources, check: Check, default_study: str) -> Estimate:
    points, reference_points, _ = _sides(sources, check, default_study)
    sample, reference = tenant_means(points), tenant_means(reference_points)  # n counts rounds
    diff, low, high = _difference(sample, reference)
    return Estimate(diff, low, high, min(len(sample), len(reference)), "linear",
                    _fmt_value(diff, low, high, check, signed=True), *power.welch_spread(sample, reference))


def _aa(sources: Sources, check: Check, default_study: str) -> str:
    """The check's reference against its A/A twin, the same ratio with the twin in the platform's place."""
    study = check.study or default_study
    groups, baseline = sources.groups(study)
    reference = _group(groups, check.against_workload or check.workload, check.against or baseline,
                       check.reference_knobs)
    twin = aa_twin(sources.studies[study], groups, reference)
    if twin is None:
        return "no A/A in this study"
    side = Side(study=study, workload=reference.workload, platform=twin.platform_key, against=reference.platform_key,
                metric=check.metric, per=check.per, knobs=twin.knobs)
    try:
        return f"A/A {_ratio(sources, side, default_study).shown}"
    except Untestable as exc:
        return f"A/A: {exc}"


def _largest(sources: Sources, check: Check, default_study: str) -> CheckResult:
    """``check.metric`` carries the largest added time of ``check.metrics`` (platform - reference)."""
    expected = check.metric if isinstance(check.metric, str) else check.metric[0]
    deltas = {}
    for metric in check.metrics:
        side = check.model_copy(update={"metric": metric, "per": None})
        sample, reference, _ = _sides(sources, side, default_study)
        deltas[metric] = _difference([p.value for p in sample], [p.value for p in reference])
    if expected not in deltas:
        raise ValueError(f"check {check.what!r}: {expected} is not among its metrics")
    top = max(deltas, key=lambda m: deltas[m][0])
    shown = "; ".join(f"{m.removeprefix('phase.')} {_fmt_value(*deltas[m], check, signed=True)}"
                      for m in sorted(deltas, key=lambda m: -deltas[m][0]))
    mine = deltas[expected]
    others = [d for m, d in deltas.items() if m != expected]
    if mine[1] is None or any(d[1] is None for d in others):
        return CheckResult(check.what, INCONCLUSIVE, shown, "one repetition: no interval", None, mine[0])
    if all(mine[1] > d[2] for d in others):  # type: ignore[operator]
        return CheckResult(check.what, HOLDS, shown, f"{expected} adds the most, resolved", None, mine[0],
                           mine[1], mine[2])
    if any(d[1] > mine[2] for d in others):  # type: ignore[operator]
        return CheckResult(check.what, FAILS, shown, f"{top} adds more than {expected}, resolved", None, mine[0],
                           mine[1], mine[2])
    return CheckResult(check.what, INCONCLUSIVE, shown, f"the added times overlap (largest: {top})", None,
                       mine[0], mine[1], mine[2])


def _span(values: list[float], fmt: str = ".0%") -> str:
    low, high = min(values), max(values)
    return f"{low:{fmt}}" if f"{low:{fmt}}" == f"{high:{fmt}}" else f"{low:{fmt}}–{high:{fmt}}"


def _nvmsim(sources: Sources, check: Check, default_study: str) -> CheckResult:
    """The NVM flush layer's latency improvement per trace shape (workload), at the check's
    capacity: fixed (``capacity_mib``) or a multiple of each trace's footprint; with ``drain``
    the write-through owed at the trace's end is charged. Beside each shape: its hot-page share
    (Figure 4) and, with ``effect``, the capacity its traces need to reach the paper's figure."""
    from isobench.nvmsim.characterise import hot_share
    from isobench.nvmsim.devices import device
    from isobench.nvmsim.from_store import cell_traces
    from isobench.nvmsim.model import SimConfig
    from isobench.nvmsim.run import capacity_for, capacity_sweep, compare, footprint_capacity

    study = check.study or default_study
    directory = sources.directories.get(study)
    if study in sources.skipped:
        raise Untestable(sources.skipped[study])
    if directory is None or not Store.exists(directory):
        raise Untestable(f"study {study} was not run")
    traces = [t for t in cell_traces(directory) if len(t.trace)]
    if not traces:
        raise Untestable("no write-backs were captured (the ftrace probe recorded none)")
    nvm, slow = device(check.nvm), device(check.slow)
    fixed = max(1, int(check.capacity_mib * 2**20 / 4096))
    by_shape: dict[str, list[float]] = defaultdict(list)
    beside: dict[str, list[tuple[float, float | None, float]]] = defaultdict(list)  # hot share, needed ×, MiB
    ceilings: dict[str, list[float]] = defaultdict(list)
    for item in traces:
        capacity = fixed if check.capacity_footprint is None else footprint_capacity(item.trace,
                                                                                      check.capacity_footprint)
        result = compare(item.trace, SimConfig(capacity=capacity), nvm, slow)
        # a shape: the model's write-back pattern, alone or merged with three co-tenants' traces
        shape = f"{item.workload} on {item.platform}"
        by_shape[shape].append(result["improvement_drained" if check.drain else "improvement"])
        needed = capacity_for(item.trace, check.effect, nvm, slow) if check.effect is not None else None
        footprint = max(result["footprint_pages"], 1)
        beside[shape].append((hot_share(item.trace), None if needed is None else needed / footprint,
                              (needed or 0) * 4096 / 2**20))
        if check.effect is not None and needed is None:  # what the whole footprint reaches instead
            ceilings[shape].append(capacity_sweep(item.trace, [footprint], nvm, slow)[0]["improvement_drained"])
    # A replay is deterministic: each trace's improvement is exact, so a shape holds when every one
    # of its traces clears the threshold and fails when none does (no interval to estimate).
    expect = check.expectation
    verdicts, parts = {}, []
    for shape, values in sorted(by_shape.items()):
        cleared = [_beyond(expect, v) for v in values]
        verdicts[shape] = HOLDS if all(cleared) else FAILS if not any(cleared) else INCONCLUSIVE
        notes = [f"top-10% pages {_span([b[0] for b in beside[shape]])} of write-backs"]
        if check.effect is not None:
            reached = [(b[1], b[2]) for b in beside[shape] if b[1] is not None]
            paper = f"{check.effect:.0%}"
            if not reached:
                notes.append(f"{paper} at no capacity, at most {_span(ceilings[shape])}")
            else:
                notes.append(f"{paper} at {_span([r[0] for r in reached], '.2f')}× footprint "
                             f"({_span([r[1] for r in reached], '.1f')} MiB)"
                             + ("" if len(reached) == len(beside[shape]) else
                                f", at none for {len(beside[shape]) - len(reached)} trace(s)"))
        parts.append(f"{shape} {_span(values)} ({'; '.join(notes)})")
    overall = statistics.fmean(v for vs in by_shape.values() for v in vs)
    holds = [s for s, v in verdicts.items() if v == HOLDS]
    fails = [s for s, v in verdicts.items() if v == FAILS]
    mixed = [s for s, v in verdicts.items() if v == INCONCLUSIVE]
    shown = f"mean {overall:.0%} over {sum(map(len, by_shape.values()))} traces; " + ", ".join(parts)
    size = (f"{check.capacity_mib:g} MiB" if check.capacity_footprint is None
            else f"{check.capacity_footprint:g}× each trace's footprint")
    where = (f"at {size} of {check.nvm} in front of {check.slow}"
             + (", the pages left dirty written through at the end" if check.drain else ""))
    if len(holds) == len(verdicts):
        return CheckResult(check.what, HOLDS, shown, f"holds on every trace shape ({', '.join(holds)}) {where}",
                           None, overall)
    said = [f"holds on {', '.join(holds)}" if holds else "",
            f"does not on {', '.join(fails)}" if fails else "",
            f"depends on the cell for {', '.join(mixed)}" if mixed else ""]
    return CheckResult(check.what, FAILS if fails else INCONCLUSIVE, shown,
                       "; ".join(x for x in said if x) + f" {where}", None, overall)


def _beyond(expect: Expectation, value: float) -> bool:
    if expect.op in ("within", "between"):
        low, high = _bounds(expect)
        return low <= value <= high
    return value > expect.value if expect.op == ">" else value < expect.value


def _bounds(expect: Expectation) -> tuple[float, float]:
    if expect.op == "between" and expect.upper is not None:
        return expect.value, expect.upper
    return 1 / (1 + expect.value), 1 + expect.value


def _decide(expect: Expectation, value: float, low: float | None, high: float | None, scale: str,
            n: int) -> tuple[str, int | None]:
    """The verdict of one interval against one expectation, and the repetitions that would settle it."""
    if low is None or high is None:
        return INCONCLUSIVE, None
    # a claim of "more than x" is contradicted when the whole interval lies at or below x (identical
    # counts on both sides give an interval of zero width at exactly 1)
    if expect.op == ">":
        verdict = HOLDS if low > expect.value else FAILS if high <= expect.value else INCONCLUSIVE
        targets = [expect.value]
    elif expect.op == "<":
        verdict = HOLDS if high < expect.value else FAILS if low >= expect.value else INCONCLUSIVE
        targets = [expect.value]
    else:
        lo_b, hi_b = _bounds(expect)
        verdict = HOLDS if low >= lo_b and high <= hi_b else FAILS if low > hi_b or high < lo_b else INCONCLUSIVE
        targets = [lo_b, hi_b]
    if verdict != INCONCLUSIVE:
        return verdict, None
    return verdict, _repetitions(value, low, high, scale, n, targets)


def _repetitions(value: float, low: float, high: float, scale: str, n: int, targets: list[float]) -> int | None:
    def f(x: float) -> float:
        return math.log(x) if scale == "log" else x

    if scale == "log" and min(value, low, high, *targets) <= 0:
        return None
    half = (f(high) - f(low)) / 2
    distance = min(abs(f(value) - f(t)) for t in targets)
    if half <= 0 or distance <= 0 or n < 1:
        return None
    needed = math.ceil(n * (half / distance) ** 2)
    return max(needed, n + 1) if needed <= MAX_REPETITIONS else None


def evaluate_check(sources: Sources, check: Check, default_study: str, missing: dict[str, str]) -> CheckResult:
    absent = [missing[need] for need in check.needs if need in missing]
    if absent:
        return CheckResult(check.what, UNTESTABLE, reason=absent[0])
    if check.kind != "nvmsim" and not check.workload:
        return CheckResult(check.what, UNTESTABLE, reason="this replication's studies do not measure it on this host")
    try:
        if check.kind == "largest":
            return _largest(sources, check, default_study)
        if check.kind == "nvmsim":
            return _nvmsim(sources, check, default_study)
        est = {"ratio": lambda: _ratio(sources, check, default_study),
               "ratio_of_ratios": lambda: _ratio_of_ratios(sources, check, default_study),
               "value": lambda: _value(sources, check, default_study),
               "difference": lambda: _diff_estimate(sources, check, default_study)}[check.kind]()
    except Untestable as exc:
        return CheckResult(check.what, UNTESTABLE, reason=str(exc))
    if check.no_figure:  # measured, shown, and judged against nothing
        return CheckResult(check.what, UNTESTABLE, est.shown, f"no published figure to compare with: {check.no_figure}",
                           None, est.value, est.low, est.high, est.n)
    verdict, needed = _decide(check.expectation, est.value, est.low, est.high, est.scale, est.n)
    reason = (f"expected {check.expectation.describe()}" if verdict != INCONCLUSIVE or est.low is not None
              else "one repetition: no interval")
    judged = power.judge(check, est, verdict, reason)  # fixed outcomes, and "does not hold" needs power
    shown = f"{est.shown}, {judged.words}" if judged.words else est.shown
    aa = _aa(sources, check, default_study) if check.kind in ("ratio", "ratio_of_ratios") else ""
    return CheckResult(check.what, judged.verdict, shown, judged.reason,
                       needed if judged.verdict == INCONCLUSIVE else None, est.value, est.low, est.high, est.n,
                       judged.mde, aa)


def evaluate_finding(sources: Sources, paper: PaperFindings, finding: Finding, missing: dict[str, str]) -> FindingResult:
    """Combine the checks (finding_power.combine): all tested ones hold -> holds; one resolved the
    other way -> does not hold; only untestable parts -> why; otherwise inconclusive."""
    absent = [missing[need] for need in finding.needs if need in missing]
    default_study = paper.studies[0] if paper.studies else ""
    results = ([CheckResult(c.what, UNTESTABLE, reason=absent[0]) for c in finding.checks] if absent
               else [evaluate_check(sources, c, default_study, missing) for c in finding.checks])
    combined = power.combine(finding, finding.checks, results, absent[0] if absent else None)
    here = "; ".join(f"{r.what}: {r.shown}" for r in results if r.shown) or "—"
    return FindingResult(paper.paper, finding.id, finding.source, finding.claim, finding.paper, finding.origin,
                         combined.verdict, here, combined.reason, combined.repetitions_needed, results,
                         combined.words)


def evaluate(paper: PaperFindings, directories: dict[str, Path], missing: dict[str, str],
             skipped: dict[str, str] | None = None) -> list[FindingResult]:
    """Every finding of ``paper``; ``directories`` maps study name -> its results directory,
    ``missing`` maps each capability the host lacks -> why (see replicate/capabilities.py), and
    ``skipped`` each study not run here (its ``study_needs`` unmet) -> why."""
    sources = Sources(directories, skipped)
    results = [evaluate_finding(sources, paper, f, missing) for f in paper.findings]
    return annotate(paper, results, directories, lambda old: evaluate_finding(sources, paper, old, missing))


def findings_for_study(study: str, directory: Path) -> list[FindingResult]:
    """The findings a single study's store can speak to (for its report and ``summary --json``):
    those of the paper that runs ``study`` whose checks read this study (a study the paper runs
    with ``overrides`` only when that paper's replication made the store). The host's missing
    capabilities come from ``capabilities.json`` that ``isobench replicate`` left beside the store."""
    import json

    from isobench.analysis.finding_rules import recorded_rules
    from isobench.analysis.finding_spec import PAPERS, load_findings

    for name in PAPERS:
        paper = load_findings(name)
        if study not in paper.studies:
            continue
        if study in paper.overrides and (recorded_rules(directory) or {}).get("paper") != name:
            continue  # a shared study run as shipped, not as this paper's replication runs it
        default = paper.studies[0]
        mine = [f for f in paper.findings
                if any((c.study or default) == study and (c.workload or c.kind == "nvmsim") for c in f.checks)]
        try:
            missing = json.loads((directory / "capabilities.json").read_text())
        except (OSError, ValueError):
            missing = {}
        subset = paper.model_copy(update={"findings": mine})
        return evaluate(subset, {study: directory}, missing if isinstance(missing, dict) else {})
    return []

"""The layer waterfall: how much of a full runtime's overhead each isolation layer explains.

A study with ``layer-*`` entries (see :mod:`isobench.platforms.layers`), a baseline
(bare metal) and full runtimes (docker, oci, ...) gets, per workload and full runtime:

- each layer's ratio to the baseline, with its Welch 95% CI on logs
  (:func:`isobench.analysis.stats.ratio_ci`), and its share of the full runtime's
  overhead, measured in log space, where independent multiplicative costs add up;
- the unexplained remainder ``log(full/base) - sum(log(layer/base))``, with a CI from
  the same Welch–Satterthwaite construction applied to that linear combination of group
  log-means (the baseline enters it ``k - 1`` times, which the variance accounts for).

Each step also carries the verdict of the study's own comparison of that layer (paired where
the study paired it, analysis/compare.py). When the full runtime's overhead is not resolved,
shares of it mean nothing; but layers shown equivalent are still bounded, and the waterfall
says so: "every layer costs less than ±2%" rather than asking for repetitions.

A remainder whose CI excludes 1 means the layers, taken one at a time, do not add up to
the full runtime: interactions, or mechanisms not on the ladder (capabilities, masked
paths, the runtime's own start-up work in the run phase, the engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from isobench.analysis.compare import Comparison, compare
from isobench.analysis.groups import Group, load_groups
from isobench.analysis.stats import RatioEstimate, ratio_ci
from isobench.analysis.tdist import t_ppf, t_sf
from isobench.analysis.verdict import DEFAULT_MARGIN, fmt_margin
from isobench.store import Store
from isobench.studyfile import load_study_text

LAYER_PREFIX = "layer-"
METRIC = "e2e"


@dataclass
class Step:
    layer: str
    estimate: RatioEstimate
    #: share of the full runtime's log-overhead (None when the full runtime has none)
    share: float | None
    #: the verdict of the study's comparison of this layer with the baseline ("" without one)
    verdict: str = ""


@dataclass
class Waterfall:
    workload: str
    params: dict[str, object]
    full: str
    baseline: str
    full_estimate: RatioEstimate
    steps: list[Step] = field(default_factory=list)
    remainder: RatioEstimate | None = None
    remainder_share: float | None = None
    #: the host the ladder ran on (a cluster study has one waterfall per host)
    host: str = ""
    #: the full runtime's verdict, and the study's equivalence margin (±m)
    full_verdict: str = ""
    margin: float = DEFAULT_MARGIN


def _log_stats(values: list[float]) -> tuple[float, float, int]:
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) if len(logs) > 1 else 0.0
    return mean, var, len(logs)


def combination_ci(terms: list[tuple[float, list[float]]], confidence: float = 0.95) -> RatioEstimate:
    """exp(sum c_j * mean(log x_j)) with a Welch–Satterthwaite interval (independent groups)."""
    estimate, se2, df_den = 0.0, 0.0, 0.0
    n_min = min(len(values) for _, values in terms)
    for coef, values in terms:
        mean, var, n = _log_stats(values)
        estimate += coef * mean
        part = coef * coef * var / n
        se2 += part
        if n > 1:
            df_den += part * part / (n - 1)
    ratio = math.exp(estimate)
    if n_min < 2 or se2 == 0 or df_den == 0:
        return RatioEstimate(ratio, None, None, None, n_min, n_min)
    df = se2 * se2 / df_den
    se = math.sqrt(se2)
    t_crit = float(t_ppf(0.5 + confidence / 2, df))
    p_value = float(2 * t_sf(abs(estimate) / se, df))
    return RatioEstimate(ratio, math.exp(estimate - t_crit * se), math.exp(estimate + t_crit * se), p_value,
                         n_min, n_min)


def _match(group: Group, candidates: list[Group]) -> Group | None:
    same = [c for c in candidates if c.workload == group.workload and c.params == group.params
            and c.host == group.host and METRIC in c.metrics]
    if not same:
        return None
    return max(same, key=lambda c: sum(group.knobs.get(k) == v for k, v in c.knobs.items()))


def _verdict(group: Group, comparisons: list[Comparison]) -> Comparison | None:
    return next((c for c in comparisons if c.metric == METRIC and (c.workload, c.params, c.label, c.knobs, c.host)
                 == (group.workload, group.params, group.platform_key, group.knobs, group.host)), None)


def waterfalls(store: Store) -> list[Waterfall]:
    study = load_study_text(store.meta("study_yaml") or "", store.meta("study_file") or "store", check_host=False)
    groups = [g for g in load_groups(store) if METRIC in g.metrics]
    baseline_name = study.baseline_entry().name
    baselines = [g for g in groups if g.platform_key == study.baseline]
    layers = [g for g in groups if g.platform.startswith(LAYER_PREFIX)]
    fulls = [g for g in groups if not g.platform.startswith(LAYER_PREFIX) and g.platform != baseline_name]
    if not layers:
        return []
    comparisons = compare(store)
    results = []
    for full in fulls:
        base = _match(full, baselines)
        ladder = sorted((g for g in layers if g.workload == full.workload and g.params == full.params
                         and g.host == full.host),
                        key=lambda g: g.platform_key)
        if base is None or not ladder:
            continue
        base_values, full_values = base.metrics[METRIC], full.metrics[METRIC]
        full_est = ratio_ci(full_values, base_values)
        log_full = math.log(full_est.ratio)
        waterfall = Waterfall(full.workload, full.params, full.display, base.display, full_est, host=full.host)
        judged = _verdict(full, comparisons)
        if judged is not None:
            waterfall.full_verdict, waterfall.margin = judged.verdict, judged.margin
        for layer in ladder:
            est = ratio_ci(layer.metrics[METRIC], base_values)
            share = math.log(est.ratio) / log_full if log_full else None
            step_verdict = _verdict(layer, comparisons)
            waterfall.steps.append(Step(layer.display, est, share, step_verdict.verdict if step_verdict else ""))
        terms = [(1.0, full_values), *((-1.0, g.metrics[METRIC]) for g in ladder),
                 (float(len(ladder) - 1), base_values)]
        waterfall.remainder = combination_ci(terms)
        waterfall.remainder_share = math.log(waterfall.remainder.ratio) / log_full if log_full else None
        results.append(waterfall)
    return results


def _ci(est: RatioEstimate) -> str:
    if est.ci_low is None or est.ci_high is None:
        return "no CI"
    return f"95% CI {est.ci_low:.3f}–{est.ci_high:.3f}"


def _share(share: float | None) -> str:
    return f"{share:+.0%} of the overhead" if share is not None else "-"


def unresolved_note(waterfall: Waterfall) -> str:
    """What a waterfall whose full overhead is not resolved still says: which layers the study's
    equivalence verdicts bound, and which are open ("" when the overhead is resolved)."""
    if waterfall.full_estimate.significant:
        return ""
    bound = fmt_margin(waterfall.margin)
    equivalent = [s.layer for s in waterfall.steps if s.verdict == "equivalent"]
    if waterfall.steps and len(equivalent) == len(waterfall.steps):
        whole = f", and so does {waterfall.full} as a whole" if waterfall.full_verdict == "equivalent" else ""
        return (f"every layer costs less than {bound} (each shown equivalent){whole}, so there is no resolved "
                "overhead to share out")
    if equivalent:
        open_ = [s.layer for s in waterfall.steps if s.verdict != "equivalent"]
        return (f"its overhead is not resolved, so shares are not shown; {', '.join(equivalent)} cost(s) less than "
                f"{bound} (shown equivalent); {', '.join(open_)} not resolved either way (add repetitions)")
    return "its overhead is not resolved, so shares are not shown (add repetitions)"


def _mark(step: Step, margin: float) -> str:
    if step.verdict == "equivalent":
        return f"  (equivalent: less than {fmt_margin(margin)})"
    # the study's own (perhaps paired) comparison may resolve what this Welch interval does not
    return "" if step.verdict in ("slower", "faster") or step.estimate.significant else "  (not resolved)"


def describe(waterfall: Waterfall) -> list[str]:
    """Plain-text lines: the full runtime, each layer, the remainder."""
    full = waterfall.full_estimate
    lines = [f"layer waterfall, {waterfall.workload} e2e: {waterfall.full} is {full.ratio:.3f}× "
             f"{waterfall.baseline} ({_ci(full)}, n={full.n})"]
    if not full.significant:  # shares of an overhead that may be zero mean nothing
        lines[0] += ": " + unresolved_note(waterfall)
    width = max([len(s.layer) for s in waterfall.steps] + [len("unexplained")])
    for step in waterfall.steps:
        mark = _mark(step, waterfall.margin)
        lines.append(f"  {step.layer:<{width}}  {step.estimate.ratio:.3f}×  {_ci(step.estimate)}  "
                     f"{_share(step.share if full.significant else None)}{mark}")
    if waterfall.remainder is not None:
        mark = "" if waterfall.remainder.significant else "  (not resolved)"
        share = waterfall.remainder_share if full.significant else None
        lines.append(f"  {'unexplained':<{width}}  {waterfall.remainder.ratio:.3f}×  {_ci(waterfall.remainder)}  "
                     f"{_share(share)}{mark}")
    return lines


def summary_lines(store: Store) -> list[str]:
    found = waterfalls(store)
    multi = len({w.host for w in found}) > 1  # a cluster study: say which host each line is about
    return [(f"host {w.host}: " if multi else "") + line for w in found for line in describe(w)]

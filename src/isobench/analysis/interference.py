"""Multi-tenant interference: each tenant's time beside others vs the same cell alone.

A platform entry with ``tenants`` (see :mod:`isobench.plan.tenants`) is compared with an
entry of the same platform (name, runtime, image, options, gVisor platform, runtime build) that runs alone, for the
same workload, parameters and knobs: ratio of geometric means of ``e2e`` with the Welch
95% CI of :func:`isobench.analysis.stats.ratio_ci`. Bare-metal tenants are processes
beside each other, so the comparison is the same on every platform. Write-back and
dirty-page probe metrics, where probes recorded them, are set side by side (mean per
tenant alone vs beside others): Park & Bahn's single vs multi-tenant write-back picture.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from isobench.analysis.groups import Group, load_groups
from isobench.analysis.stats import RatioEstimate, ratio_ci
from isobench.plan.tenants import tenant_spec
from isobench.store import Store
from isobench.studyfile import load_study_text

WRITEBACK_WORDS = ("writeback", "dirt", "nr_written")


@dataclass
class Interference:
    workload: str
    params: dict[str, object]
    knobs: dict[str, object]
    beside: str
    alone: str
    tenants: int
    estimate: RatioEstimate
    mean_alone: float
    mean_beside: float
    #: per-group start skew (seconds) of the tenant groups behind this comparison
    start_skews: list[float] = field(default_factory=list)
    #: probe metric -> (mean alone, mean beside)
    writeback: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the host both sides ran on (a cluster study has one result per host)
    host: str = ""


def _skews(store: Store) -> dict[str, list[float]]:
    """platform key -> start skew of each tenant group (one value per group)."""
    per_group: dict[tuple[str, str], float] = {}
    for row in store.cells():
        tenancy = (row.get("platform_info") or {}).get("tenancy") or {}
        if tenancy.get("start_skew_s") is not None:
            per_group[(row["platform_key"], tenancy["group"])] = tenancy["start_skew_s"]
    skews: dict[str, list[float]] = defaultdict(list)
    for (key, _), skew in sorted(per_group.items()):
        skews[key].append(skew)
    return skews


def interference(store: Store) -> list[Interference]:
    study = load_study_text(store.meta("study_yaml") or "", store.meta("study_file") or "store", check_host=False)
    entries = {p.key: p for p in study.platforms}
    groups = [g for g in load_groups(store) if "e2e" in g.metrics and g.platform_key in entries]
    solo = [g for g in groups if tenant_spec(study, entries[g.platform_key]) == 1]
    skews = _skews(store)
    results = []
    for group in groups:
        spec = tenant_spec(study, entries[group.platform_key])
        if spec == 1:
            continue
        engine = entries[group.platform_key].engine_key()
        alone: Group | None = next((g for g in solo if entries[g.platform_key].engine_key() == engine
                                    and g.workload == group.workload and g.params == group.params
                                    and g.knobs == group.knobs and g.host == group.host), None)
        if alone is None:
            continue
        beside_e2e, alone_e2e = group.metrics["e2e"], alone.metrics["e2e"]
        result = Interference(group.workload, group.params, group.knobs, group.display, alone.display,
                              spec if isinstance(spec, int) else len(spec), ratio_ci(beside_e2e, alone_e2e),
                              statistics.fmean(alone_e2e), statistics.fmean(beside_e2e),
                              skews.get(group.platform_key, []), host=group.host)
        for metric in sorted(group.metrics):
            if metric.startswith("probe.") and any(w in metric for w in WRITEBACK_WORDS) and metric in alone.metrics:
                result.writeback[metric] = (statistics.fmean(alone.metrics[metric]),
                                            statistics.fmean(group.metrics[metric]))
        results.append(result)
    return results


def describe(item: Interference) -> list[str]:
    est = item.estimate
    ci = f"95% CI {est.ci_low:.2f}–{est.ci_high:.2f}" if est.ci_low is not None else "no CI"
    knobs = f" [{', '.join(f'{k}={v}' for k, v in sorted(item.knobs.items()))}]" if item.knobs else ""
    text = (f"interference: {item.workload} on {item.beside}{knobs} ({item.tenants} tenants) e2e {est.ratio:.2f}× "
            f"alone on {item.alone} ({ci}, n={est.n} vs {est.n_baseline})")
    if item.start_skews:
        text += (f"; start skew median {statistics.median(item.start_skews) * 1e3:.0f} ms, "
                 f"max {max(item.start_skews) * 1e3:.0f} ms")
    lines = [text]
    for metric, (alone, beside) in item.writeback.items():
        lines.append(f"  {metric}: {alone:.4g} alone, {beside:.4g} per tenant beside others")
    return lines


def summary_lines(store: Store) -> list[str]:
    items = interference(store)
    multi = len({item.host for item in items}) > 1  # a cluster study: say which host each line is about
    return [(f"host {item.host}: " if multi else "") + line for item in items for line in describe(item)]

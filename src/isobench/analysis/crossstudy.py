"""Compare two studies (two hosts, two versions): each group of B against the same group of A.

Refuses incomparable results with the reason (different workloads, parameters, or emulated
against native cells) unless forced; then compares what the two have in common. A group whose
cells ran on another device than its counterpart's (``device: auto`` on a host with a GPU and one
without) is compared but reads "not comparable" (analysis/verdict.py).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from isobench.analysis.compare import Comparison, _adjust, compare, floor_of, judge
from isobench.analysis.groups import Group, load_groups
from isobench.analysis.stats import METHOD, bootstrap_ratio_ci, effect_words, ratio_ci
from isobench.analysis.verdict import devices_differ, fmt_devices
from isobench.errors import UserError
from isobench.store import Store


@dataclass
class CrossResult:
    comparisons: list[Comparison]
    notes: list[str]
    #: each study's own comparisons with its baseline (A's, B's): what B/A changed, side by side
    within_a: list[Comparison] = field(default_factory=list)
    within_b: list[Comparison] = field(default_factory=list)


def _variants(groups: list[Group]) -> set[tuple[str, str]]:
    return {(g.workload, json.dumps(g.params, sort_keys=True)) for g in groups}


def _describe(variant: tuple[str, str], other: set[tuple[str, str]]) -> str:
    """A workload the other study lacks by name; one it ran with other parameters by what differs."""
    params = json.loads(variant[1])
    twins = [json.loads(p) for w, p in other if w == variant[0]]
    if not twins:
        return variant[0]
    differ = sorted({k for t in twins for k in set(t) | set(params) if t.get(k) != params.get(k)})
    return f"{variant[0]} with " + ", ".join(f"{k}={params.get(k)!r}" for k in differ)


def _device_mismatch(g: Group, ref: Group, name_a: str, name_b: str) -> str:
    """Why B's group cannot be compared with A's: they ran on different devices ("" when they did not)."""
    if not devices_differ(g.devices, ref.devices):
        return ""
    auto = " (device: auto follows what each host can see)" if str(g.params.get("device", "auto")) == "auto" else ""
    return (f"{g.display} ({name_b}) ran on {fmt_devices(g.devices)} and {ref.display} ({name_a}) on "
            f"{fmt_devices(ref.devices)}{auto}; set the workload's device (device: cpu) in both studies, or run "
            "both where the same device is seen")


def cross_compare(store_a: Store, store_b: Store, name_a: str, name_b: str, force: bool = False,
                  metrics: tuple[str, ...] = ("e2e",)) -> CrossResult:
    groups_a, groups_b = load_groups(store_a), load_groups(store_b)
    notes: list[str] = []
    only_a, only_b = _variants(groups_a) - _variants(groups_b), _variants(groups_b) - _variants(groups_a)
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append(f"only in {name_a}: " + "; ".join(sorted(_describe(v, _variants(groups_b)) for v in only_a)))
        if only_b:
            parts.append(f"only in {name_b}: " + "; ".join(sorted(_describe(v, _variants(groups_a)) for v in only_b)))
        reason = "the studies ran different workloads or parameters (" + " | ".join(parts) + ")"
        if not force:
            raise UserError(reason, fix="compare studies of the same workloads and parameters, or pass --force "
                                        "to compare only what they share")
        notes.append(f"forced: {reason}; only the shared workloads are compared")
    # Two studies usually ran on two hosts: match groups without the host, unless A ran on several
    # hosts (a cluster study), where B's group meets A's group of the same host.
    by_host = len({g.host for g in groups_a}) > 1
    index_a = {(g.key if by_host else g.key[:4]): g for g in groups_a}

    def counterpart(g: Group) -> Group | None:
        return index_a.get(g.key if by_host else g.key[:4])

    results: list[Comparison] = []
    for g in groups_b:
        ref = counterpart(g)
        if ref is None:
            continue
        if (g.emulated != ref.emulated) and not force:
            raise UserError(f"{g.display} ran under emulation in one study and natively in the other",
                            fix="compare like with like, or pass --force")
        for metric in metrics:
            sample, reference = g.metrics.get(metric), ref.metrics.get(metric)
            if not sample or not reference or min(sample) <= 0 or min(reference) <= 0:
                continue
            est = ratio_ci(sample, reference)
            boot = bootstrap_ratio_ci(sample, reference)
            results.append(Comparison(
                workload=g.workload, platform=f"{g.display} ({name_b})", label=g.platform_key, knobs=g.knobs,
                metric=metric, baseline=f"{ref.display} ({name_a})", ratio=est.ratio, ci_low=est.ci_low,
                ci_high=est.ci_high, n=est.n, significant=est.significant, n_baseline=est.n_baseline,
                p_value=est.p_value, mean=statistics.fmean(sample), baseline_mean=statistics.fmean(reference),
                unit=g.units.get(metric, ""), method=METHOD, is_aa=False,
                boot_low=boot[0] if boot else None, boot_high=boot[1] if boot else None,
                effect=effect_words(est.ratio, metric), emulated=g.emulated or ref.emulated, params=g.params,
                host=g.host, devices=sorted(g.devices), baseline_devices=sorted(ref.devices),
                incomparable=_device_mismatch(g, ref, name_a, name_b)))
    if not results:
        raise UserError("the two studies share no group (workload, parameters, platform entry and knobs)",
                        fix="compare studies run from the same study file")
    _adjust(results)
    # The noise floor of a cross-study comparison: the wider of the two studies' own A/A floors.
    floors: dict[tuple[str, str, str], float] = {}
    within = [compare(store) for store in (store_a, store_b)]
    for own in within:
        for c in own:
            width = floor_of(c) if c.is_aa and not c.incomparable else None
            if width is not None:
                key = (c.workload, json.dumps(c.params, sort_keys=True), c.metric)
                floors[key] = max(floors.get(key, 0.0), width)
    for c in results:
        c.noise_floor = floors.get((c.workload, json.dumps(c.params, sort_keys=True), c.metric))
        judge(c)  # again, now that the floor is known: an effect inside it is not a direction
    missing = len(groups_b) - sum(1 for g in groups_b if counterpart(g) is not None)
    if missing:
        notes.append(f"{missing} group(s) of {name_b} have no counterpart in {name_a} (other platforms or knobs)")
    return CrossResult(results, notes, *within)

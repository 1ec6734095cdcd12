"""Samani & Salehi: scale-up, pinned vs vanilla, CPU vs GPU."""

from __future__ import annotations

import math
from collections import defaultdict

from isobench.analysis import evidence as ev
from isobench.analysis.groups import Group
from isobench.analysis.stats import fmt_seconds
from isobench.analysis.views.base import SS, Context, Skipped, Table, View, builder, stacked_figure
from isobench.analysis.views.phases import INFER_SPLIT, phase_sorted


@builder(40)
def scale_up_views(ctx: Context) -> list[View]:
    views: list[View] = []
    by_workload: dict[str, list[Group]] = defaultdict(list)
    for g in ctx.groups:
        if ev.core_count(g.knobs) is not None and "e2e" in g.metrics:
            by_workload[g.workload].append(g)
    for workload, groups in sorted(by_workload.items()):
        cores = {ev.core_count(g.knobs) for g in groups}
        pinned_kinds = {ev.is_pinned(g.knobs) for g in groups}
        if len(cores) < 2 and len(pinned_kinds) < 2:
            continue
        order = {key: i for i, key in enumerate(ctx.platform_order)}
        groups = sorted(groups, key=lambda g: (order.get(g.platform_key, 99), ev.core_count(g.knobs),
                                               ev.is_pinned(g.knobs)))
        phases = [p for p in INFER_SPLIT if any(f"phase.{p}" in g.metrics for g in groups)]
        if not phases:
            phases = phase_sorted({m.removeprefix("phase.") for g in groups for m in g.metrics
                                   if m.startswith("phase.")})
        labels = [ev.entry_label(g.display, g.platform, g.platform_key, {}, g.emulated) +
                  f" · {ev.core_count(g.knobs):g} core(s) {'pinned' if ev.is_pinned(g.knobs) else 'vanilla'}"
                  + ctx.on_host(g) for g in groups]
        stacks = {p: [ev.mean_of(g, f"phase.{p}") or 0.0 for g in groups] for p in phases} if phases else \
            {"e2e": [ev.mean_of(g, "e2e") or 0.0 for g in groups]}
        views.append(stacked_figure(f"fig-scaleup-{workload}", f"{workload}: E2E time by platform and scale-up level",
                                    f"{SS}, Figs. 4, 6–8", labels, [g.platform_key for g in groups], stacks,
                                    "time per item"))
        rows = []
        for g in groups:
            if ev.is_pinned(g.knobs):
                continue
            # the same platform plugin pinned to as many cores (its entry may carry its own label)
            twins = [p for p in groups if p.platform == g.platform and ev.is_pinned(p.knobs)
                     and ev.core_count(p.knobs) == ev.core_count(g.knobs) and p.host == g.host]
            twin = next((p for p in twins if p.display == g.display), twins[0] if twins else None)
            if twin is None:
                continue
            from isobench.analysis.stats import ratio_ci

            est = ratio_ci(twin.metrics["e2e"], g.metrics["e2e"])
            ci = f"{est.ci_low:.3f}–{est.ci_high:.3f}" if est.ci_low is not None else "n/a"
            rows.append([ev.entry_label(g.display, g.platform, g.platform_key, {}) + " vs " +
                         ev.entry_label(twin.display, twin.platform, twin.platform_key, {}) + ctx.on_host(g),
                         f"{ev.core_count(g.knobs):g}", fmt_seconds(ev.mean_of(g, "e2e") or 0),
                         fmt_seconds(ev.mean_of(twin, "e2e") or 0), f"{est.ratio:.3f}", ci])
        if rows:
            views.append(Table(f"tab-pinning-{workload}", f"{workload}: pinned vs vanilla (same core count)",
                               f"{SS}, Section V-C", ["vanilla vs pinned", "cores", "vanilla", "pinned", "pinned/vanilla",
                                                       "95% CI"], rows))
    return views


@builder(50)
def gpu_speedup_views(ctx: Context) -> list[View]:
    """CPU vs GPU speed-up for inference only vs E2E, where a workload ran on both devices."""
    rows = []
    for g in ctx.groups:
        device = str(g.params.get("device", ""))
        if device != "cpu":
            continue
        twin = next((o for o in ctx.groups if o.workload == g.workload and o.platform_key == g.platform_key
                     and o.knobs == g.knobs and o.host == g.host and str(o.params.get("device", "")).startswith("cuda")
                     and {k: v for k, v in o.params.items() if k != "device"} ==
                     {k: v for k, v in g.params.items() if k != "device"}), None)
        if twin is None:
            continue
        e2e = (ev.mean_of(g, "e2e") or 0) / (ev.mean_of(twin, "e2e") or math.inf)
        infer_cpu, infer_gpu = ev.mean_of(g, "phase.inference"), ev.mean_of(twin, "phase.inference")
        only = infer_cpu / infer_gpu if infer_cpu and infer_gpu else None
        rows.append([g.workload, g.display + ctx.on_host(g), f"{only:.2f}×" if only else "n/a", f"{e2e:.2f}×"])
    if not rows:
        return [Skipped("tab-gpu-speedup", "GPU vs CPU speed-up, inference only vs E2E", f"{SS}, Fig. 5",
                        "no workload ran with both device=cpu and device=cuda (needs a GPU host)")]
    return [Table("tab-gpu-speedup", "GPU vs CPU speed-up, inference only vs E2E", f"{SS}, Fig. 5",
                  ["workload", "platform", "inference-only speed-up", "E2E speed-up"], rows)]

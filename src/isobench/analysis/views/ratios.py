"""Time relative to the baseline with CIs: every comparison, Siddaramanna & John per kernel
and shape, and the probes' metrics."""

from __future__ import annotations

import json
import re
from typing import Any

from isobench.analysis.stats import fmt_seconds
from isobench.analysis.views.base import (
    SJ,
    Context,
    Figure,
    Skipped,
    Table,
    View,
    builder,
    fmt_num,
    knobs_text,
)

KERNEL_RE = re.compile(r"gemm|conv|rnn|gru|lstm-cell|kernel|allreduce|all-reduce|bandwidth|launch")


def variant_text(ctx: Context, workload: str, params: dict[str, Any]) -> str:
    """The parameters that set this variant apart from the workload's other variants (a sweep)."""
    variants = [g.params for g in ctx.groups if g.workload == workload]
    varying = sorted({k for v in variants for k in v if any(o.get(k) != v.get(k) for o in variants)})
    return ", ".join(f"{k}={params.get(k)}" for k in varying)


@builder(10)
def ratio_views(ctx: Context) -> list[View]:
    order = {key: i for i, key in enumerate(ctx.platform_order)}
    e2e = sorted((c for c in ctx.comparisons if c.metric == "e2e" and c.ci_low is not None and not c.emulated),
                 key=lambda c: (c.workload, json.dumps(c.params, sort_keys=True), order.get(c.label, 99),
                                json.dumps(c.knobs, sort_keys=True), c.host))
    if not e2e:
        return [Skipped("fig-ratios", "E2E time relative to the baseline", "all studies",
                        "no comparison has two or more repetitions on both sides")]
    labels = []
    multi = len({c.host for c in e2e}) > 1  # a cluster study: one bar per host, named
    for c in e2e:
        variant = variant_text(ctx, c.workload, c.params)
        labels.append(f"{c.workload}" + (f" ({variant})" if variant else "") + f": {c.platform}" +
                      (f" on {c.host}" if multi else "") +
                      (f" [{knobs_text(c.knobs)}]" if knobs_text(c.knobs) else "") + (" (A/A)" if c.is_aa else ""))
    fig = Figure("fig-ratios", "E2E time per item relative to the baseline, 95% CIs (grey band: A/A noise floor)",
                 "all studies", "forest",
                 {"labels": labels, "keys": [c.label for c in e2e], "ratio": [c.ratio for c in e2e],
                  "low": [c.ci_low for c in e2e], "high": [c.ci_high for c in e2e],
                  "floor": [c.noise_floor for c in e2e], "xlabel": "time relative to the baseline (×)"})
    return [fig, *kernel_views(ctx)]


def kernel_views(ctx: Context) -> list[View]:
    """Siddaramanna & John: each kernel and shape (a kernel workload's phases) on the host vs a platform."""
    kernels = [c for c in ctx.comparisons if KERNEL_RE.search(c.workload) and c.metric.startswith("phase.")
               and not c.is_aa and not c.emulated and c.ci_low is not None]
    if not kernels:
        return [Skipped("tab-kernels", "Kernel time, host vs container, per kernel and shape", f"{SJ}, Figs. 5–9",
                        "no kernel workload (kernel-gemm, kernel-conv, kernel-rnn, ...) in the study")]
    kernels.sort(key=lambda c: (c.workload, c.metric, c.platform))
    rows = [[c.workload, c.metric.removeprefix("phase."),
             c.platform + (f" [{knobs_text(c.knobs)}]" if knobs_text(c.knobs) else ""),
             fmt_seconds(c.baseline_mean), fmt_seconds(c.mean), f"{c.ratio:.3f}", f"{c.ci_low:.3f}–{c.ci_high:.3f}",
             c.effect if c.significant_holm else "not resolved"] for c in kernels]
    table = Table("tab-kernels", "Kernel time, host vs platform, per kernel and shape", f"{SJ}, Figs. 5–9",
                  ["workload", "kernel and shape", "platform", "host", "platform", "×", "95% CI", "effect"], rows,
                  note="host and platform: arithmetic means; ×: ratio of geometric means over repetitions; Holm's "
                       "correction runs across every kernel and shape of the study")
    fig = Figure("fig-kernels", "Kernel time relative to the host, per kernel and shape (95% CIs)", f"{SJ}, Figs. 5–9",
                 "forest", {"labels": [f"{c.metric.removeprefix('phase.')} · {c.platform}" for c in kernels],
                            "keys": [c.label for c in kernels], "ratio": [c.ratio for c in kernels],
                            "low": [c.ci_low for c in kernels], "high": [c.ci_high for c in kernels],
                            "floor": [c.noise_floor for c in kernels],
                            "xlabel": "kernel time relative to the host (×)"})
    return [fig, table]


@builder(30)
def probe_metric_table(ctx: Context) -> list[View]:
    rows = [[c.workload, c.platform + (f" [{knobs_text(c.knobs)}]" if knobs_text(c.knobs) else ""),
             c.metric.removeprefix("probe."), fmt_num(c.baseline_mean), fmt_num(c.mean), f"{c.ratio:.3f}",
             f"{c.ci_low:.3f}–{c.ci_high:.3f}" if c.ci_low is not None else "n/a", c.unit]
            for c in ctx.comparisons if c.metric.startswith("probe.") and not c.is_aa and not c.emulated]
    if not rows:
        return [Skipped("tab-probe-metrics", "Probe metrics relative to the baseline", "all studies",
                        "no probe metrics in the store (the study ran without probes)")]
    return [Table("tab-probe-metrics", "Probe metrics relative to the baseline (mean per cell)", "all studies",
                  ["workload", "platform", "metric", "baseline", "platform", "×", "95% CI", "unit"], rows)]

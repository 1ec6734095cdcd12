"""Time by phase: Prashanthi Figs. 1, 3 and 7; Samani & Salehi's pre/infer/post split."""

from __future__ import annotations

from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.views.base import PR, SS, Context, View, builder, groups_by_workload, stacked_figure
from isobench.analysis.views.ratios import KERNEL_RE

TRAIN_COMPUTE = ("forward", "backward", "optimizer")
#: phases in the order they happen, so every figure stacks (and colours) them alike
PHASE_ORDER = ("connect", "queue", "fetch_stall", "preprocess", "tokenize", "prefill", "forward", "inference",
               "decode", "backward", "optimizer", "detokenize", "postprocess", "server_other", "transport",
               "logging")


def phase_sorted(phases: Any) -> list[str]:
    return sorted(phases, key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else len(PHASE_ORDER), p))
INFER_SPLIT = ("preprocess", "inference", "postprocess")


@builder(20)
def phase_views(ctx: Context) -> list[View]:
    views: list[View] = []
    for workload, groups in groups_by_workload(ctx):
        phases = sorted({m.removeprefix("phase.") for g in groups for m in g.metrics if m.startswith("phase.")})
        if not phases or KERNEL_RE.search(workload):  # a kernel workload's phases are its shapes (kernel_views)
            continue
        labels = [ev.group_label(g) + ctx.on_host(g) for g in groups]
        keys = [g.platform_key for g in groups]
        if set(TRAIN_COMPUTE) <= set(phases):
            stacks = {"fetch stall": [ev.mean_of(g, "phase.fetch_stall") or 0.0 for g in groups],
                      "compute (forward+backward+optimizer)":
                          [sum(ev.mean_of(g, f"phase.{p}") or 0.0 for p in TRAIN_COMPUTE) for g in groups],
                      "logging": [ev.mean_of(g, "phase.logging") or 0.0 for g in groups]}
            views.append(stacked_figure(f"fig-minibatch-{workload}", f"{workload}: minibatch time by phase",
                                        f"{PR}, Fig. 1a", labels, keys, stacks, "time per minibatch"))
            split = {p: [ev.mean_of(g, f"phase.{p}") or 0.0 for g in groups] for p in TRAIN_COMPUTE}
            views.append(stacked_figure(f"fig-compute-{workload}", f"{workload}: compute split into forward, "
                                        "backward, optimizer step", f"{PR}, Fig. 7", labels, keys, split,
                                        "time per minibatch"))
        else:
            title = f"{workload}: time per item by phase"
            paper = f"{PR}, Fig. 3a; {SS}, Fig. 4 (pre/infer/post split)" if set(INFER_SPLIT) <= set(phases) \
                else "phase split (all studies)"
            ordered_phases = phase_sorted(phases)
            stacks = {p: [ev.mean_of(g, f"phase.{p}") or 0.0 for g in groups] for p in ordered_phases}
            views.append(stacked_figure(f"fig-phases-{workload}", title, paper, labels, keys, stacks,
                                        "time per item"))
    return views

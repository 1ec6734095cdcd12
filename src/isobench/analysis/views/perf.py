"""Park & Bahn's perf events per container process, container daemon and host process."""

from __future__ import annotations

from isobench.analysis import evidence as ev
from isobench.analysis.views.base import (
    PB,
    Context,
    Skipped,
    Table,
    View,
    builder,
    fmt_num,
    groups_by_workload,
)


@builder(60)
def perf_table(ctx: Context) -> list[View]:
    """Events of the cell's processes, the container engine's, per platform (Park & Bahn's columns:
    container process, container daemon, host process = the bare-metal cell)."""
    metrics = sorted({m for g in ctx.groups for m in g.metrics if m.startswith("probe.perf.")})
    if not metrics:
        return [Skipped("tab-events", "Events per container process, container daemon and host process",
                        f"{PB}, Table 5", "no perf counters in the store: add `probes: {perf: {}}` to the study")]
    scoped = any(m.startswith("probe.perf.cell.") for m in metrics)
    prefix = "probe.perf.cell." if scoped else "probe.perf."
    events = sorted({m.removeprefix(prefix) for m in metrics if m.startswith(prefix)})
    views: list[View] = []
    for workload, groups in groups_by_workload(ctx):
        engine_groups = [g for g in groups if any(m.startswith("probe.perf.engine.") and (ev.mean_of(g, m) or 0) > 0
                                                  for m in g.metrics)]
        columns = ["event"] + [f"{ev.group_label(g)}{ctx.on_host(g)}: cell" for g in groups]
        columns += [f"{ev.group_label(g)}{ctx.on_host(g)}: engine (daemon)" for g in engine_groups]
        rows = []
        for event in events:
            values = [ev.mean_of(g, prefix + event) for g in groups]
            daemon = [ev.mean_of(g, f"probe.perf.engine.{event}") for g in engine_groups]
            if all(v is None for v in values):
                continue
            rows.append([event.replace("_", "-"), *("" if v is None else fmt_num(v) for v in values + daemon)])
        if rows and len(columns) > 7:  # many platform entries: one row each, the events across
            rows = [[columns[j], *(row[j] for row in rows)] for j in range(1, len(columns))]
            columns = ["platform: scope", *[e.replace("_", "-") for e in events
                                            if any(ev.mean_of(g, prefix + e) is not None for g in groups)]]
        if rows:
            views.append(Table(f"tab-events-{workload}", f"{workload}: events per cell (mean over repetitions)",
                               f"{PB}, Table 5", columns, rows,
                               note="cell: the workload's processes (on bare metal: Park & Bahn's host process); "
                                    "engine: dockerd, containerd and shims during the cell"))
    return views

"""Prashanthi: utilisation and power violins, memory footprint, energy."""

from __future__ import annotations

from collections import defaultdict

from isobench.analysis import evidence as ev
from isobench.analysis.views.base import PR, Context, Figure, Skipped, Table, View, builder, ordered_groups


@builder(100)
def sample_views(ctx: Context) -> list[View]:
    views: list[View] = []
    specs = [("fig-util-cpu", "CPU utilisation during the cell", "CPU utilisation (%)", ev.CPU_UTIL, 1.0,
              f"{PR}, Figs. 2a, 4a"),
             ("fig-util-gpu", "GPU utilisation during the cell", "GPU utilisation (%)", ev.GPU_UTIL, 1.0,
              f"{PR}, Figs. 2b, 4b"),
             ("fig-power", "Power during the cell", "power (W)", ev.POWER, 1.0, f"{PR}, Figs. 2c, 4c"),
             ("fig-memory", "Memory footprint (resident set)", "resident memory (MiB)", ev.RSS, 1 / 2**20,
              f"{PR}, Fig. 5")]
    for fig_id, title, ylabel, patterns, scale, paper in specs:
        panels = []
        for probe, name, tables, roles in ev.all_series_with(ctx.store, {"value": patterns}):
            if fig_id == "fig-util-cpu" and probe == "gpu":
                continue
            if fig_id == "fig-util-gpu" and probe not in ("gpu", "nvml"):
                continue
            samples: dict[str, list[float]] = defaultdict(list)
            keys: dict[str, str] = {}
            for cell_id, table in tables.items():
                info = ctx.cells.get(cell_id)
                if info is None:
                    continue
                label = f"{info.workload}: " + ev.entry_label(info.display, info.platform, info.platform_key,
                                                              info.knobs)
                values = [float(v) * scale for v in table.column(roles["value"]).to_pylist() if v is not None]
                samples[label].extend(values)
                keys[label] = info.platform_key
            labels = sorted(samples, key=lambda s: (s.split(":")[0], ctx.platform_order.index(keys[s])
                                                    if keys[s] in ctx.platform_order else 99))
            if labels:
                panels.append({"title": f"{probe}.{name}: {roles['value']}", "labels": labels,
                               "keys": [keys[s] for s in labels], "samples": [samples[s] for s in labels],
                               "ylabel": ylabel})
            break
        if panels:
            views.append(Figure(fig_id, title, paper, "violins", {"panels": panels}))
        else:
            probe_hint = "gpu" if "gpu" in fig_id else ("energy or gpu" if fig_id == "fig-power" else "proc")
            views.append(Skipped(fig_id, title, paper, f"no sampled series for it: add the {probe_hint} probe "
                                                     "(a GPU host for GPU utilisation)"))
    views.append(_energy_view(ctx))
    return views


def _energy_view(ctx: Context) -> View:
    title, paper = "Energy per cell: baseload and incremental", f"{PR}, Figs. 1b, 3b"
    names = {m for g in ctx.groups for m in g.metrics}
    base = ev.find_metric(names, r"^probe\.energy\..*baseload")
    incr = ev.find_metric(names, r"^probe\.energy\..*incremental")
    total = ev.find_metric(names, r"^probe\.energy\..*(energy|total).*_?j$", r"^probe\.(energy|gpu)\..*energy")
    if not (base and incr) and not total:
        return Skipped("fig-energy", title, paper, "no energy metrics: add the energy probe (RAPL/NVML), "
                                                   "with its baseload mode for the split")
    groups = ordered_groups(ctx, [g for g in ctx.groups
                                  if (base and base in g.metrics) or (total and total in g.metrics)])
    if base and incr:
        stacks = {"baseload": [ev.mean_of(g, base) or 0.0 for g in groups],
                  "incremental": [ev.mean_of(g, incr) or 0.0 for g in groups]}
    else:
        stacks = {"total": [ev.mean_of(g, total) or 0.0 for g in groups]}
    labels = [ev.group_label(g, with_workload=True) + ctx.on_host(g) for g in groups]
    rows = [[lbl, *(f"{stacks[s][i]:.1f}" for s in stacks)] for i, lbl in enumerate(labels)]
    return Figure("fig-energy", title, paper, "stacked",
                  {"labels": labels, "keys": [g.platform_key for g in groups], "stacks": stacks,
                   "xlabel": "energy per cell (J)", "scale": 1.0},
                  note="" if base else "no baseload measurement: total energy only",
                  table=Table("fig-energy-data", title, paper, ["platform", *(f"{s} (J)" for s in stacks)], rows))

"""The studies' tables and figures, as data, from whatever the store holds.

Each builder returns a :class:`Table` or :class:`Figure` (rendered by the report) or a
:class:`Skipped` saying what was not measured and how to measure it. The ``paper`` field
names the table or figure of the study in ``../shared/papers/`` that the view regenerates.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.compare import Comparison, Group
from isobench.store import Store

PB = "Park & Bahn 2023"
PR = "Prashanthi et al. 2023"
SS = "Samani & Salehi"
SJ = "Siddaramanna & John"


@dataclass
class Table:
    id: str
    title: str
    paper: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    id: str
    title: str
    paper: str
    kind: str
    data: dict[str, Any]
    note: str = ""
    #: the numbers behind the figure, for Markdown and for readers of the HTML
    table: Table | None = None


@dataclass
class Skipped:
    id: str
    title: str
    paper: str
    reason: str


View = Table | Figure | Skipped


@dataclass
class Context:
    store: Store
    groups: list[Group]
    comparisons: list[Comparison]
    baseline_key: str
    platform_order: list[str]
    cells: dict[str, ev.CellInfo] = field(default_factory=dict)

    def on_host(self, g: Group | Comparison) -> str:
        """A suffix naming the group's host where the study ran on several hosts (a bar or column each)."""
        return f" on {g.host}" if len({o.host for o in self.groups}) > 1 else ""

    def group_of(self, cell_id: str) -> Group | None:
        info = self.cells.get(cell_id)
        if info is None:
            return None
        return next((g for g in self.groups if g.key == info.group_key), None)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _ordered(ctx: Context, groups: list[Group]) -> list[Group]:
    order = {key: i for i, key in enumerate(ctx.platform_order)}
    return sorted(groups, key=lambda g: (g.workload, order.get(g.platform_key, 99), json.dumps(g.knobs, sort_keys=True),
                                         g.host))


# -- phases: Prashanthi Fig 1, 3, 7; Samani & Salehi pre/infer/post -------------------------
TRAIN_COMPUTE = ("forward", "backward", "optimizer")
#: phases in the order they happen, so every figure stacks (and colours) them alike
PHASE_ORDER = ("fetch_stall", "preprocess", "tokenize", "forward", "inference", "backward", "optimizer",
               "postprocess", "logging")


def phase_sorted(phases: Any) -> list[str]:
    return sorted(phases, key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else len(PHASE_ORDER), p))
INFER_SPLIT = ("preprocess", "inference", "postprocess")


def phase_views(ctx: Context) -> list[View]:
    views: list[View] = []
    by_workload: dict[str, list[Group]] = defaultdict(list)
    for g in ctx.groups:
        by_workload[g.workload].append(g)
    for workload, groups in sorted(by_workload.items()):
        groups = _ordered(ctx, groups)
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
            views.append(_stacked(f"fig-minibatch-{workload}", f"{workload}: minibatch time by phase", f"{PR}, Fig. 1a",
                                  labels, keys, stacks, "time per minibatch"))
            split = {p: [ev.mean_of(g, f"phase.{p}") or 0.0 for g in groups] for p in TRAIN_COMPUTE}
            views.append(_stacked(f"fig-compute-{workload}", f"{workload}: compute split into forward, backward, "
                                  "optimizer step", f"{PR}, Fig. 7", labels, keys, split, "time per minibatch"))
        else:
            title = f"{workload}: time per item by phase"
            paper = f"{PR}, Fig. 3a; {SS}, Fig. 4 (pre/infer/post split)" if set(INFER_SPLIT) <= set(phases) \
                else "phase split (all studies)"
            ordered_phases = phase_sorted(phases)
            stacks = {p: [ev.mean_of(g, f"phase.{p}") or 0.0 for g in groups] for p in ordered_phases}
            views.append(_stacked(f"fig-phases-{workload}", title, paper, labels, keys, stacks, "time per item"))
    return views


def _stacked(fig_id: str, title: str, paper: str, labels: list[str], keys: list[str],
             stacks: dict[str, list[float]], quantity: str) -> Figure:
    rows = [[label, *(_ms(stacks[s][i]) for s in stacks), _ms(sum(stacks[s][i] for s in stacks))]
            for i, label in enumerate(labels)]
    table = Table(fig_id + "-data", title, paper, ["platform", *(f"{s} (ms)" for s in stacks), "total (ms)"], rows)
    return Figure(fig_id, title, paper, "stacked",
                  {"labels": labels, "keys": keys, "stacks": stacks, "xlabel": f"{quantity} (ms)", "scale": 1e3},
                  table=table)


# -- ratios with CIs: every comparison; Siddaramanna & John per kernel and shape --------------
KERNEL_RE = re.compile(r"gemm|conv|rnn|gru|lstm-cell|kernel|allreduce|all-reduce|bandwidth|launch")


def variant_text(ctx: Context, workload: str, params: dict[str, Any]) -> str:
    """The parameters that set this variant apart from the workload's other variants (a sweep)."""
    variants = [g.params for g in ctx.groups if g.workload == workload]
    varying = sorted({k for v in variants for k in v if any(o.get(k) != v.get(k) for o in variants)})
    return ", ".join(f"{k}={params.get(k)}" for k in varying)


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
                      (f" [{_knobs(c.knobs)}]" if _knobs(c.knobs) else "") + (" (A/A)" if c.is_aa else ""))
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
    rows = [[c.workload, c.metric.removeprefix("phase."), c.platform + (f" [{_knobs(c.knobs)}]" if _knobs(c.knobs)
                                                                         else ""),
             _secs(c.baseline_mean), _secs(c.mean), f"{c.ratio:.3f}", f"{c.ci_low:.3f}–{c.ci_high:.3f}",
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


def _knobs(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()) if k != "threads")


def _secs(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"


# -- Samani & Salehi: scale-up, pinned vs vanilla, CPU vs GPU --------------------------------
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
        views.append(_stacked(f"fig-scaleup-{workload}", f"{workload}: E2E time by platform and scale-up level",
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
                         f"{ev.core_count(g.knobs):g}", _secs(ev.mean_of(g, "e2e") or 0),
                         _secs(ev.mean_of(twin, "e2e") or 0), f"{est.ratio:.3f}", ci])
        if rows:
            views.append(Table(f"tab-pinning-{workload}", f"{workload}: pinned vs vanilla (same core count)",
                               f"{SS}, Section V-C", ["vanilla vs pinned", "cores", "vanilla", "pinned", "pinned/vanilla",
                                                       "95% CI"], rows))
    return views


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


# -- Park & Bahn: perf events, write-backs, page-fault sources --------------------------------
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
    by_workload: dict[str, list[Group]] = defaultdict(list)
    for g in ctx.groups:
        by_workload[g.workload].append(g)
    for workload, groups in sorted(by_workload.items()):
        groups = _ordered(ctx, groups)
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
            rows.append([event.replace("_", "-"), *("" if v is None else _num(v) for v in values + daemon)])
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


WRITEBACK_ROLES = {"time": ev.TIME, "reason": ev.REASON}


def writeback_series(ctx: Context) -> tuple[dict[str, Any], dict[str, str]] | None:
    """Write-back *calls* (one row per kernel write-back, e.g. ftrace's ``writeback_calls``) if stored,
    else any series with a time and a reason column."""
    found = ev.all_series_with(ctx.store, WRITEBACK_ROLES)
    if not found:
        return None
    best = next((f for f in found if "call" in f[1]), found[0])
    return best[2], best[3]


def page_series(ctx: Context) -> dict[str, Any] | None:
    """Per-page write-backs (time, inode, page index), e.g. ftrace's ``writeback``."""
    found = ev.all_series_with(ctx.store, {"time": ev.TIME, "ino": ev.INO, "index": ev.PAGE_INDEX})
    return found[0][2] if found else None


def writeback_views(ctx: Context) -> list[View]:
    found = writeback_series(ctx)
    title9 = "Write-backs by reason, single vs multi-tenant"
    if found is None:
        hint = "no write-back series in the store: add `probes: {ftrace: {}}` to the study"
        return [Skipped("tab-writeback-reasons", title9, f"{PB}, Tables 9–10", hint),
                Skipped("fig-writeback-intervals", "Write-back call intervals", f"{PB}, Fig. 3", hint),
                Skipped("fig-writeback-heat", "Write-backs per page over time", f"{PB}, Fig. 4", hint)]
    tables, roles = found
    counts: dict[tuple[str, str, int], Counter[str]] = defaultdict(Counter)
    intervals: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    keys: dict[tuple[str, str, int], str] = {}
    for cell_id, table in tables.items():
        info = ctx.cells.get(cell_id)
        if info is None:
            continue
        label = ev.entry_label(info.display, info.platform, info.platform_key, info.knobs)
        key = (info.workload, label, info.tenants)
        keys[key] = info.platform_key
        counts[key].update(ev.reason_names(table.column(roles["reason"]).to_pylist()))
        times = sorted(set(table.column(roles["time"]).to_pylist()))
        intervals[key].extend(b - a for a, b in zip(times, times[1:], strict=False))
    reasons = sorted({r for c in counts.values() for r in c})
    main = [r for r in ("background", "periodic", "sync") if r in reasons] + \
        [r for r in reasons if r not in ("background", "periodic", "sync")]
    rows = []
    for (workload, label, tenants), counter in sorted(counts.items()):
        total = sum(counter.values())
        rows.append([workload, label, "single" if tenants == 1 else f"{tenants} tenants",
                     *(f"{counter[r]:,} ({counter[r] / total:.1%})" if total else "0" for r in main), f"{total:,}"])
    views: list[View] = [Table("tab-writeback-reasons", title9, f"{PB}, Tables 9–10",
                               ["workload", "platform", "tenancy", *main, "total"], rows,
                               note="write-back calls attributed to the cells, summed over repetitions")]
    bars = [(f"{w}: {lbl}" + ("" if t == 1 else f" ×{t}"), statistics.fmean(v), statistics.pstdev(v), keys[(w, lbl, t)])
            for (w, lbl, t), v in sorted(intervals.items()) if v]
    if bars:
        views.append(Figure("fig-writeback-intervals", "Write-back call intervals: mean and standard deviation",
                            f"{PB}, Fig. 3", "bars",
                            {"labels": [b[0] for b in bars], "values": [b[1] for b in bars],
                             "errors": [b[2] for b in bars], "keys": [b[3] for b in bars],
                             "ylabel": "interval between write-backs (s)"},
                            table=Table("fig-writeback-intervals-data", "", "", ["platform", "mean (s)", "sd (s)"],
                                        [[b[0], f"{b[1]:.3f}", f"{b[2]:.3f}"] for b in bars])))
    else:
        views.append(Skipped("fig-writeback-intervals", "Write-back call intervals", f"{PB}, Fig. 3",
                             "fewer than two write-backs per cell"))
    pages = page_series(ctx)
    per_group: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for cell_id, table in (pages or {}).items():
        info = ctx.cells.get(cell_id)
        if info is not None and table.num_rows:
            per_group[(info.workload, ev.entry_label(info.display, info.platform, info.platform_key,
                                                     info.knobs))].append(table)
    heat = _heat_panels(ctx, per_group)
    if heat:
        views.append(Figure("fig-writeback-heat", "Write-backs per page over time (pages ranked by first write-back)",
                            f"{PB}, Fig. 4", "heatmap", {"panels": heat}))
    else:
        views.append(Skipped("fig-writeback-heat", "Write-backs per page over time", f"{PB}, Fig. 4",
                             "no per-page write-back series (time, inode, page index) in the store"))
    return views


def _heat_panels(ctx: Context, per_group: dict[tuple[str, str], list[Any]], bins: int = 40,
                 max_pages: int = 200) -> list[dict[str, Any]]:
    import numpy as np

    panels = []
    for (workload, label), tables in sorted(per_group.items()):
        table = max(tables, key=lambda t: t.num_rows)  # one repetition: times of different cells don't align
        t_col, ino_col, idx_col = ev.column(table, *ev.TIME), ev.column(table, *ev.INO), ev.column(table, *ev.PAGE_INDEX)
        if not (t_col and ino_col and idx_col):
            continue
        times = np.asarray(table.column(t_col).to_pylist(), dtype=float)
        pages = list(zip(table.column(ino_col).to_pylist(), table.column(idx_col).to_pylist(), strict=True))
        first: dict[Any, float] = {}
        for t, page in sorted(zip(times, pages, strict=True), key=lambda x: x[0]):
            first.setdefault(page, t)
        ranked = {page: i for i, page in enumerate(sorted(first, key=first.__getitem__))}
        rows = min(max_pages, len(ranked))
        t0, t1 = float(times.min()), float(times.max()) or 1.0
        span = max(t1 - t0, 1e-9)
        matrix = np.zeros((rows, bins))
        scale = len(ranked) / rows
        for t, page in zip(times, pages, strict=True):
            matrix[min(rows - 1, int(ranked[page] / scale)), min(bins - 1, int((t - t0) / span * bins))] += 1
        panels.append({"title": f"{workload}: {label}", "matrix": matrix.tolist(), "t0": 0.0, "t1": span,
                       "pages": len(ranked)})
    return panels


FAULT_ROLES = {"file": ev.FILE, "symbol": ev.SYMBOL}


def fault_source_views(ctx: Context) -> list[View]:
    found = ev.series_with(ctx.store, FAULT_ROLES)
    if found is None:
        return [Skipped("tab-fault-sources", "Page-fault sources (task, file, function)", f"{PB}, Table 8",
                        "no page-fault source series in the store: add the page-fault source probe to the study")]
    _, _, tables, roles = found
    views: list[View] = []
    per_platform: dict[tuple[str, str], Counter[tuple[str, str, str]]] = defaultdict(Counter)
    for cell_id, table in tables.items():
        info = ctx.cells.get(cell_id)
        if info is None:
            continue
        task_col = ev.column(table, r"task", r"comm", r"process")
        count_col = ev.column(table, r"count", r"faults", r"n")
        files = table.column(roles["file"]).to_pylist()
        symbols = table.column(roles["symbol"]).to_pylist()
        tasks = table.column(task_col).to_pylist() if task_col else [""] * len(files)
        weights = table.column(count_col).to_pylist() if count_col else [1] * len(files)
        for task, file, symbol, weight in zip(tasks, files, symbols, weights, strict=True):
            key = (info.workload, info.platform_key, ev.entry_label(info.display, info.platform, info.platform_key, {}))
            per_platform[key][(str(task), str(file), str(symbol))] += int(weight)
    order = {key: i for i, key in enumerate(ctx.platform_order)}
    for (workload, platform_key, label), counter in sorted(per_platform.items(),
                                                           key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        total = sum(counter.values()) or 1
        rows = [[str(rank), task, file, symbol, f"{n:,}", f"{n / total:.1%}"]
                for rank, ((task, file, symbol), n) in enumerate(counter.most_common(10), 1)]
        views.append(Table(fault_table_id(workload, platform_key), f"{workload} on {label}: top page-fault sources",
                           f"{PB}, Table 8", ["rank", "task", "file", "function", "faults", "share"], rows,
                           note="summed over the entry's cells (all knob values and repetitions)"))
    return views


def fault_table_id(workload: str, platform_key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"tab-fault-sources-{workload}-{platform_key}")


def shared_library_share(ctx: Context, workload: str, platform_key: str) -> tuple[float, int] | None:
    """Share of page faults in shared libraries for a workload on a platform (from the fault-source table)."""
    found = ev.series_with(ctx.store, FAULT_ROLES)
    if found is None:
        return None
    _, _, tables, roles = found
    so, total = 0, 0
    for cell_id, table in tables.items():
        info = ctx.cells.get(cell_id)
        if info is None or info.workload != workload or info.platform_key != platform_key:
            continue
        count_col = ev.column(table, r"count", r"faults", r"n")
        files = table.column(roles["file"]).to_pylist()
        weights = table.column(count_col).to_pylist() if count_col else [1] * len(files)
        for file, weight in zip(files, weights, strict=True):
            total += int(weight)
            if re.search(r"\.so(\.|$)", str(file)):
                so += int(weight)
    return (so / total, total) if total else None


# -- Prashanthi: utilisation/power violins, memory footprint, energy --------------------------
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
    groups = _ordered(ctx, [g for g in ctx.groups if (base and base in g.metrics) or (total and total in g.metrics)])
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


# -- other helpers' views (isolation layers, interference), when they exist ------------------
def plugin_views(ctx: Context) -> list[View]:
    import importlib

    views: list[View] = []
    for module_name in ("isobench.analysis.layers", "isobench.analysis.interference"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            if hasattr(module, "report_views"):
                views.extend(module.report_views(ctx))
            elif hasattr(module, "waterfalls"):
                views.extend(_waterfall_views(ctx, module.waterfalls(ctx.store)))
            elif hasattr(module, "summary_lines"):
                lines = module.summary_lines(ctx.store)
                if lines:
                    views.append(Table("tab-interference", "Multi-tenant interference", f"{PB}, Tables 9–10 (tenancy)",
                                       ["finding"], [[line] for line in lines]))
        except Exception as exc:  # another module's bug must not lose the report
            views.append(Skipped(module_name, module_name, "", f"could not build: {type(exc).__name__}: {exc}"))
    return views


def _waterfall_views(ctx: Context, waterfalls: list[Any]) -> list[View]:
    views: list[View] = []
    multi = len({getattr(w, "host", "") for w in waterfalls}) > 1
    for w in waterfalls:
        on = f" on {w.host}" if multi else ""  # a cluster study: one waterfall per host
        full_key = next((g.platform_key for g in ctx.groups if w.full in (g.display, g.platform_key)), w.full)
        entries = [(f"full: {w.full}", full_key, w.full_estimate)]
        entries += [(step.layer, step.layer, step.estimate) for step in w.steps]
        if w.remainder is not None:
            entries.append(("unexplained", "", w.remainder))
        entries = [e for e in entries if e[2].ci_low is not None]
        if not entries:
            continue
        fig_id = f"fig-layers-{w.workload}-{w.full}{on.replace(' on ', '-')}".replace("/", "-")
        rows = [[label, f"{est.ratio:.3f}", f"{est.ci_low:.3f}–{est.ci_high:.3f}"] for label, _, est in entries]
        views.append(Figure(fig_id, f"{w.workload}: {w.full}'s overhead, layer by layer (vs {w.baseline}){on}",
                            "isolation-layer ladder (no study did this)", "forest",
                            {"labels": [e[0] for e in entries], "keys": [e[1] for e in entries],
                             "ratio": [e[2].ratio for e in entries], "low": [e[2].ci_low for e in entries],
                             "high": [e[2].ci_high for e in entries], "floor": [None] * len(entries),
                             "xlabel": f"e2e time relative to {w.baseline} (×)"},
                            table=Table(fig_id + "-data", "", "", ["layer", "×", "95% CI"], rows)))
    return views


def probe_metric_table(ctx: Context) -> list[View]:
    rows = [[c.workload, c.platform + (f" [{_knobs(c.knobs)}]" if _knobs(c.knobs) else ""),
             c.metric.removeprefix("probe."), _num(c.baseline_mean), _num(c.mean), f"{c.ratio:.3f}",
             f"{c.ci_low:.3f}–{c.ci_high:.3f}" if c.ci_low is not None else "n/a", c.unit]
            for c in ctx.comparisons if c.metric.startswith("probe.") and not c.is_aa and not c.emulated]
    if not rows:
        return [Skipped("tab-probe-metrics", "Probe metrics relative to the baseline", "all studies",
                        "no probe metrics in the store (the study ran without probes)")]
    return [Table("tab-probe-metrics", "Probe metrics relative to the baseline (mean per cell)", "all studies",
                  ["workload", "platform", "metric", "baseline", "platform", "×", "95% CI", "unit"], rows)]


#: nvmsim's defaults for the report: the paper's devices, LRU, and a buffer size the paper leaves open
NVM_CAPACITY_PAGES = 4096  # 16 MiB
NVM_SWEEP_POINTS = 32
PAPER_NVM = "SqueezeNet 83/78%, MobileBERT 90/77%, AlexNet 84/86%, LSTM 77/83% (single/multi-tenant Docker)"


def nvm_views(ctx: Context) -> list[View]:
    """Park & Bahn's Fig. 6 from the study's own write-back traces: each cell replayed through
    nvmsim (PCM in front of an HDD, LRU), at one buffer size and as a capacity sweep."""
    title = "NVM flush layer: I/O latency improvement on this study's write-back traces"
    paper = f"{PB}, Fig. 6 and Section 5"
    if writeback_series(ctx) is None:
        return [Skipped("fig-nvm", title, paper, "no write-back series in the store: add `probes: {ftrace: {}}` "
                                                 "to the study, on workloads that write files (checkpoint_every)")]
    import numpy as np

    from isobench.nvmsim.devices import device
    from isobench.nvmsim.from_store import cell_traces
    from isobench.nvmsim.model import SimConfig
    from isobench.nvmsim.run import capacity_sweep, compare

    nvm, slow = device("pcm"), device("hdd")
    traces = [t for t in cell_traces(ctx.store.directory) if len(t.trace)]
    if not traces:
        return [Skipped("fig-nvm", title, paper, "the write-back series hold no page write-backs")]
    top = max(max(t.trace.n_pages for t in traces), 2)
    capacities = sorted({int(c) for c in np.unique(np.geomspace(1, top, NVM_SWEEP_POINTS).round())})
    rows, series = [], []
    for item in traces:
        one = compare(item.trace, SimConfig(NVM_CAPACITY_PAGES, "lru"), nvm, slow)
        sweep = capacity_sweep(item.trace, capacities, nvm, slow)
        reach = next((r["capacity"] for r in sweep if r["improvement"] >= 0.82), None)
        info = ctx.cells.get(item.cell_id) or ctx.cells.get(f"{item.cell_id}/t0")
        tenants = info.tenants if info is not None else 1
        label = f"{item.workload}: {item.platform}" + ("" if tenants == 1 else f" ×{tenants}")
        rows.append([item.workload, item.platform, "single" if tenants == 1 else f"{tenants} tenants",
                     f"{one['write_backs']:,}", f"{one['pages']:,}", f"{one['hit_ratio']:.1%}",
                     f"{one['improvement']:.1%}", "-" if reach is None else f"{reach * 4096 / 2**20:,.1f} MiB"])
        series.append({"label": label, "values": [100 * r["improvement"] for r in sweep],
                       "key": info.platform_key if info is not None else ""})
    size = f"{NVM_CAPACITY_PAGES * 4096 / 2**20:g} MiB"
    table = Table("tab-nvm", f"{title}, {size} of PCM (350 ns) in front of an HDD (8 ms), LRU", paper,
                  ["workload", "platform", "tenancy", "page write-backs", "pages", "NVM hit ratio",
                   f"improvement at {size}", "≥ 82% from"], rows,
                  note=f"the paper (capacity not stated): {PAPER_NVM}; `isobench nvmsim {ctx.store.directory} "
                       "--sweep 16` gives the same and more (other devices, policies, sizes)")
    figure = Figure("fig-nvm-sweep", "NVM flush layer: improvement as the buffer grows (LRU, one pass)", paper,
                    "lines", {"x": [c * 4096 / 2**20 for c in capacities], "series": series,
                              "xlabel": "NVM buffer (MiB, log scale)", "ylabel": "I/O latency improvement (%)",
                              "logx": True})
    return [table, figure]


def build_views(ctx: Context) -> list[View]:
    return [*ratio_views(ctx), *phase_views(ctx), *probe_metric_table(ctx), *scale_up_views(ctx), *gpu_speedup_views(ctx),
            *perf_table(ctx), *writeback_views(ctx), *nvm_views(ctx), *fault_source_views(ctx), *sample_views(ctx),
            *plugin_views(ctx)]

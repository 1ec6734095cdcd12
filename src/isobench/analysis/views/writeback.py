"""Park & Bahn's write-backs: reasons, call intervals, per-page heat map, and the NVM flush
layer replayed on the study's own traces."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.views.base import PB, Context, Figure, Skipped, Table, View, builder

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


@builder(70)
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


#: nvmsim's defaults for the report: the paper's devices, LRU, and a buffer size the paper leaves open
NVM_CAPACITY_PAGES = 4096  # 16 MiB
NVM_SWEEP_POINTS = 32
PAPER_NVM = "SqueezeNet 83/78%, MobileBERT 90/77%, AlexNet 84/86%, LSTM 77/83% (single/multi-tenant Docker)"


@builder(80)
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

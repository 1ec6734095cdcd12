"""Park & Bahn's page-fault sources: which task, file and function fault."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from isobench.analysis import evidence as ev
from isobench.analysis.views.base import PB, Context, Skipped, Table, View, builder

FAULT_ROLES = {"file": ev.FILE, "symbol": ev.SYMBOL}


@builder(90)
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

"""One nvmsim experiment: baseline vs NVM-added system on a trace, and a capacity sweep.

Two figures of improvement: ``improvement``, from the per-event latencies alone (the NVM system
never pays for the pages it still holds dirty when the trace ends), and ``improvement_drained``,
which charges that write-through (the drain: one slow write per page still dirty) to the NVM
system, so a buffer that only postpones writes gains nothing from it.

Capacities relative to the trace: its footprint is the number of distinct pages written back.
With the drain counted, a buffer of the whole footprint is the best any capacity or policy can
do (every written page reaches the slow device at least once), so the improvement there is the
trace's ceiling, 1 - footprint / write-backs (less the NVM's own time).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from isobench.nvmsim.devices import Device
from isobench.nvmsim.model import SimConfig, baseline_latency, summarize
from isobench.nvmsim.trace import READ, Trace


def compare(trace: Trace, config: SimConfig, nvm: Device, slow: Device) -> dict[str, Any]:
    """Baseline and NVM system side by side, with the paper's headline: I/O latency improvement."""
    from isobench.nvmsim.fast import simulate_fast

    result = simulate_fast(trace, config, nvm, slow)
    base = summarize(baseline_latency(trace, slow))
    with_nvm = summarize(result.latency_s)
    writes = int((trace.op != READ).sum())
    drain_s = result.dirty_at_end * slow.page_write_s
    base_total = float(baseline_latency(trace, slow).sum())
    drained_total = float(result.latency_s.sum()) + drain_s
    return {
        "events": len(trace), "write_backs": writes, "pages": trace.n_pages,
        "capacity_pages": config.capacity, "policy": config.policy, "nvm": nvm.name, "slow": slow.name,
        "baseline": base, "nvm_system": with_nvm,
        "improvement": 1 - with_nvm["mean_s"] / base["mean_s"] if base["mean_s"] else 0.0,
        "hit_ratio": result.hits / writes if writes else 0.0,
        "slow_writes_baseline": writes, "slow_writes_nvm": result.slow_writes,
        "flushes_avoided": writes - result.slow_writes,
        "sync_destages": result.sync_destages, "background_destages": result.background_destages,
        "destage_bytes": result.slow_writes * 4096,
        "footprint_pages": trace.footprint(),
        # the write-through at the end: the dirty pages still in NVM, written to the slow device
        "drain_pages": result.dirty_at_end, "drain_s": drain_s,
        "slow_writes_with_drain": result.slow_writes + result.dirty_at_end,
        "improvement_drained": 1 - drained_total / base_total if base_total else 0.0,
    }


def capacity_sweep(trace: Trace, capacities: list[int], nvm: Device, slow: Device) -> list[dict[str, Any]]:
    from isobench.nvmsim.fast import sweep_lru

    base_mean = float(baseline_latency(trace, slow).mean()) if len(trace) else 0.0
    rows = sweep_lru(trace, capacities, nvm, slow)
    for row in rows:
        row["improvement"] = 1 - row["mean_s"] / base_mean if base_mean else 0.0
        row["improvement_drained"] = 1 - row["mean_drained_s"] / base_mean if base_mean else 0.0
    return rows


#: the capacities, as multiples of a trace's footprint, that every footprint report shows
FOOTPRINT_FRACTIONS = (0.25, 0.5, 1.0, 2.0)


def footprint_capacity(trace: Trace, fraction: float) -> int:
    """``fraction`` of the trace's footprint, in pages (rounded up, at least one)."""
    return max(1, math.ceil(fraction * trace.footprint() - 1e-9))


def capacity_for(trace: Trace, target: float, nvm: Device, slow: Device) -> int | None:
    """The smallest LRU capacity (pages) whose improvement, the drain counted, reaches ``target``;
    None where even the whole footprint does not (the trace's ceiling is below it). Under LRU
    without background destage, every page that enters the buffer leaves it once, evicted or
    drained, so the slow writes are the misses, which never grow with the capacity: the
    improvement is monotone and a search over capacities finds the exact smallest one."""
    top = trace.footprint()
    if top == 0:
        return None

    def gains(capacities: list[int]) -> list[float]:
        return [row["improvement_drained"] for row in capacity_sweep(trace, capacities, nvm, slow)]

    if gains([top])[0] < target:
        return None
    low, high = 0, top  # low: known short of the target (0: no buffer), high: known to reach it
    while high - low > 1:
        points = sorted({int(c) for c in np.linspace(low, high, 18).round()} - {low, high}) or [(low + high) // 2]
        for capacity, gain in zip(points, gains(points), strict=True):
            if gain >= target:
                high = capacity
                break
            low = capacity
    return high


def footprint_report(trace: Trace, nvm: Device, slow: Device, target: float | None = 0.82,
                     fractions: tuple[float, ...] = FOOTPRINT_FRACTIONS) -> dict[str, Any]:
    """The trace against capacities relative to its footprint (LRU, the drain counted and not),
    its hot-page concentration (Figure 4), and the capacity that reaches ``target`` (the
    paper's 82% by default) as pages, MiB and a multiple of the footprint."""
    from isobench.nvmsim.characterise import hot_share

    top = trace.footprint()
    writes = int((trace.op != READ).sum())
    capacities = [footprint_capacity(trace, f) for f in fractions]
    rows = capacity_sweep(trace, capacities, nvm, slow) if top else []
    table = [{"fraction": f, "capacity_pages": row["capacity"], "capacity_mib": row["capacity"] * 4096 / 2**20,
              "improvement": row["improvement"], "improvement_drained": row["improvement_drained"],
              "drain_pages": row["drain_pages"], "drain_s": row["drain_pages"] * slow.page_write_s}
             for f, row in zip(fractions, rows, strict=True)]
    needed = capacity_for(trace, target, nvm, slow) if target is not None else None
    ceiling = capacity_sweep(trace, [top], nvm, slow)[0]["improvement_drained"] if top else 0.0
    return {"footprint_pages": top, "footprint_mib": top * 4096 / 2**20, "write_backs": writes,
            "write_backs_per_page": writes / top if top else 0.0, "hot_share_top10": hot_share(trace, 0.10),
            "ceiling": ceiling, "capacities": table, "target": target,
            "capacity_for_target": None if needed is None else
            {"pages": needed, "mib": needed * 4096 / 2**20, "fraction": needed / top}}


def default_capacities(trace: Trace, count: int = 64) -> list[int]:
    """Log-spaced from one page to every page the trace touches."""
    top = max(trace.n_pages, 2)
    return sorted({int(c) for c in np.unique(np.geomspace(1, top, count).round())})

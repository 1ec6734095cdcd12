"""One nvmsim experiment: baseline vs NVM-added system on a trace, and a capacity sweep."""

from __future__ import annotations

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
    }


def capacity_sweep(trace: Trace, capacities: list[int], nvm: Device, slow: Device) -> list[dict[str, Any]]:
    from isobench.nvmsim.fast import sweep_lru

    base_mean = float(baseline_latency(trace, slow).mean()) if len(trace) else 0.0
    rows = sweep_lru(trace, capacities, nvm, slow)
    for row in rows:
        row["improvement"] = 1 - row["mean_s"] / base_mean if base_mean else 0.0
    return rows


def default_capacities(trace: Trace, count: int = 64) -> list[int]:
    """Log-spaced from one page to every page the trace touches."""
    top = max(trace.n_pages, 2)
    return sorted({int(c) for c in np.unique(np.geomspace(1, top, count).round())})

"""The write-back behaviour that motivates the NVM layer (Park & Bahn, Figure 4): how often
each page is written back as time goes on, and how concentrated write-backs become."""

from __future__ import annotations

from typing import Any

import numpy as np

from isobench.nvmsim.trace import READ, Trace


def writebacks_per_page_over_time(trace: Trace, time_bins: int = 40, page_bins: int = 64) -> dict[str, Any]:
    """Counts of write-backs in a (time bin × page group) grid: Figure 4's heat map.
    Pages are grouped in the order they were first written back."""
    writes = trace.op != READ
    times, pages = trace.time_s[writes], trace.page[writes]
    if len(times) == 0:
        return {"time_edges_s": [], "page_groups": 0, "counts": []}
    first_seen = np.full(trace.n_pages, -1, np.int64)
    order = np.unique(pages, return_index=True)
    first_seen[order[0]] = np.argsort(np.argsort(order[1]))  # rank by first write-back
    ranks = first_seen[pages]
    n_ranked = int(ranks.max()) + 1
    t0, t1 = float(times[0]), float(times[-1])
    time_edges = np.linspace(t0, t1 if t1 > t0 else t0 + 1e-9, time_bins + 1)
    page_edges = np.linspace(0, n_ranked, min(page_bins, n_ranked) + 1)
    counts, _, _ = np.histogram2d(times, ranks, bins=[time_edges, page_edges])
    return {"time_edges_s": (time_edges - t0).tolist(), "page_groups": len(page_edges) - 1,
            "pages_per_group": n_ranked / (len(page_edges) - 1), "counts": counts.astype(int).tolist()}


def hot_share_over_time(trace: Trace, windows: int = 10, top_fraction: float = 0.01) -> list[dict[str, float]]:
    """Per time window: the share of its write-backs that come from its hottest pages."""
    writes = trace.op != READ
    times, pages = trace.time_s[writes], trace.page[writes]
    if len(times) == 0:
        return []
    edges = np.linspace(times[0], times[-1], windows + 1)
    rows = []
    for k in range(windows):
        upper = times <= edges[k + 1] if k == windows - 1 else times < edges[k + 1]
        in_window = pages[(times >= edges[k]) & upper]
        if len(in_window) == 0:
            rows.append({"window": k, "start_s": float(edges[k] - edges[0]), "write_backs": 0, "pages": 0,
                         "hot_share": 0.0})
            continue
        counts = np.bincount(in_window)
        counts = np.sort(counts[counts > 0])[::-1]
        top = max(1, int(np.ceil(top_fraction * len(counts))))
        rows.append({"window": k, "start_s": float(edges[k] - edges[0]), "write_backs": int(len(in_window)),
                     "pages": int(len(counts)), "hot_share": float(counts[:top].sum() / len(in_window))})
    return rows


def hot_share(trace: Trace, top_fraction: float = 0.10) -> float:
    """The share of all write-backs that go to the most written ``top_fraction`` of the pages
    written back (at least one page): Figure 4's concentration in one number. A trace that
    rewrites every page equally reads ``top_fraction``; the paper's hot pages read far more."""
    pages = trace.page[trace.op != READ]
    if len(pages) == 0:
        return 0.0
    counts = np.bincount(pages)
    counts = np.sort(counts[counts > 0])[::-1]
    top = max(1, int(np.ceil(top_fraction * len(counts) - 1e-9)))
    return float(counts[:top].sum() / len(pages))

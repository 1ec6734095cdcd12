"""nvmsim speed, measured in one run: events per second of the reference loop (a plain
OrderedDict LRU), of the compiled LRU fast path, and the cost of a 64-size capacity sweep
relative to one configuration.

    .venv/bin/python benchmarks/bench_nvmsim.py [EVENTS] [PAIRS]

One configuration and the sweep are timed in PAIRS (default 3) back-to-back pairs; the ratio
reported is the median of the pairs' ratios, with their range: on a shared machine one pair
can be off by a third either way.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict

import numpy as np

from isobench.nvmsim.devices import device
from isobench.nvmsim.fast import simulate_fast, sweep_lru
from isobench.nvmsim.model import SimConfig
from isobench.nvmsim.trace import Trace


def plain_ordereddict_lru(pages: list[int], capacity: int) -> int:
    """The simplest LRU hit count, for scale: what plain Python manages."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for page in pages:
        if page in cache:
            hits += 1
            cache.move_to_end(page)
        else:
            if len(cache) >= capacity:
                cache.popitem(last=False)
            cache[page] = None
    return hits


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000_000
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rng = np.random.default_rng(0)
    n_pages = 200_000
    pages = (rng.zipf(1.3, n) % n_pages).astype(np.int64)
    trace = Trace(time_s=np.arange(n, dtype=np.float64), page=pages, op=np.zeros(n, np.uint8),
                  tenant=np.zeros(n, np.int16), n_pages=n_pages)
    nvm, slow = device("pcm"), device("hdd")
    config = SimConfig(4096, "lru")
    simulate_fast(Trace(trace.time_s[:1000], pages[:1000], trace.op[:1000], trace.tenant[:1000], n_pages),
                  config, nvm, slow)  # compile outside the timing
    sweep_lru(Trace(trace.time_s[:1000], pages[:1000], trace.op[:1000], trace.tenant[:1000], n_pages),
              [1, 2], nvm, slow)

    sample = pages[:2_000_000].tolist()
    start = time.perf_counter()
    plain_ordereddict_lru(sample, config.capacity)
    plain_rate = len(sample) / (time.perf_counter() - start)

    capacities = sorted({int(c) for c in np.geomspace(1, n_pages, 64).round()})
    walls: list[tuple[float, float]] = []  # (one configuration, sweep) per pair
    cpus: list[tuple[float, float]] = []
    for _ in range(pairs):
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate_fast(trace, config, nvm, slow)
        one, one_cpu = time.perf_counter() - start, time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        sweep_lru(trace, capacities, nvm, slow)
        walls.append((one, time.perf_counter() - start))
        cpus.append((one_cpu, time.process_time() - cpu))

    def median(values: list[float]) -> float:
        return float(np.median(values))

    def ratios(times: list[tuple[float, float]]) -> str:
        r = [sweep / one for one, sweep in times]
        return f"{median(r):.2f}x one configuration (pairs {min(r):.2f}..{max(r):.2f}x)"

    one = median([o for o, _ in walls])
    fast_rate = n / one
    print(f"trace: {n:,} write-backs over {n_pages:,} pages (Zipf 1.3); LRU capacity {config.capacity} pages, "
          f"hit ratio {result.hits / n:.1%}")
    print(f"plain OrderedDict LRU loop : {plain_rate / 1e6:6.1f} M events/s")
    print(f"compiled LRU fast path     : {fast_rate / 1e6:6.1f} M events/s  "
          f"({fast_rate / plain_rate:.1f}x the plain loop; target >= 20 M/s)")
    print(f"capacity sweep, {len(capacities)} sizes : {median([s for _, s in walls]):.2f} s = {ratios(walls)} "
          f"({one:.2f} s; target <= 3x; medians of {pairs} pairs)")
    # on a shared machine wall time depends on who else runs; CPU time much less
    print(f"  in CPU time            : {median([s for _, s in cpus]):.2f} s = {ratios(cpus)} "
          f"({median([o for o, _ in cpus]):.2f} s)")


if __name__ == "__main__":
    main()

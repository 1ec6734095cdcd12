"""The cost of the script API (isobench.phase / isobench.step), measured in one run.

Outside isobench both are no-ops: a global test and a shared do-nothing context manager.
This prints ns per call for an empty loop, a no-op ``with phase()``, a no-op ``step()``,
and, for scale, the active mode (inside a cell: two clock reads per phase, one JSON line
per step, written here to /dev/null). Each figure is the best of many short repeats (on a
shared machine a long run is always interrupted), minus the empty loop, so it is the
API's own cost; the median is printed beside it.

    .venv/bin/python benchmarks/bench_phase_api.py [CALLS_PER_REPEAT] [REPEATS]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from isobench import api, phase, step
from isobench.workloads.channel import CellContext


def timed_ns(body: Callable[[int], None], calls: int, repeats: int) -> tuple[float, float]:
    """(best, median) ns per call over ``repeats`` runs of ``calls`` calls."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        body(calls)
        samples.append((time.perf_counter_ns() - start) / calls)
    return min(samples), statistics.median(samples)


def empty_loop(calls: int) -> None:
    for _ in range(calls):
        pass


def with_phase(calls: int) -> None:
    for _ in range(calls):
        with phase("forward"):
            pass


def step_only(calls: int) -> None:
    for _ in range(calls):
        step()


def phase_and_step(calls: int) -> None:
    for _ in range(calls):
        with phase("forward"):
            pass
        step()


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    loop, loop_median = timed_ns(empty_loop, calls, repeats)
    rows = [("no-op  `with phase()`", "per call, outside isobench", timed_ns(with_phase, calls, repeats)),
            ("no-op  `step()`", "per call, outside isobench", timed_ns(step_only, calls, repeats))]
    with open("/dev/null", "w") as sink:
        api.activate(CellContext(sink, {"cell_id": "bench"}))
        try:
            rows += [("active `with phase()`", "per call, inside a cell", timed_ns(with_phase, calls, repeats)),
                     ("active phase + `step()`", "per item, one JSON line each",
                      timed_ns(phase_and_step, calls // 10, repeats))]
        finally:
            api.deactivate()
    print(f"{'empty loop':28} {loop:8.1f} ns per iteration (median {loop_median:.1f})")
    for name, what, (best, median) in rows:
        print(f"{name:28} {best - loop:8.1f} ns {what} (median {median - loop_median:.1f})")
    noop = rows[0][2][0] + rows[1][2][0] - 2 * loop
    print(f"no-op `with phase()` + `step()` together: {noop:.0f} ns = {noop / 1000:.2f} µs")


if __name__ == "__main__":
    main()

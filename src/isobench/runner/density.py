"""Density: what N idle sandboxes cost the host in memory, and how long each takes to come up.

A density unit is a tenant group (or a lone cell) of a workload with ``Workload.density`` (the
``idle`` workload). Its members launch at once and wait at a start line until every one is up;
then they hold. The runner reads the host's used memory, ``MemTotal - MemAvailable`` from
/proc/meminfo, just before the launch and every SAMPLE_S while the unit runs: the median over
the time every member held (the latest member's measured start to the earliest one's end), less
the reading before, over N, is the memory per sandbox. Host memory, not the members' RSS:
gVisor's Sentry, the shims, the engine's per-container state and the kernel's are what a host
operator pays for, and no process's RSS shows them. The reading is shared with the meminfo
probe (probes/meminfo.py), which measures a lone cell's memory: both count the free pages in the
kernel's per-CPU lists as free (since Linux 6.7 they hold hundreds of MiB, which MemAvailable
leaves out, and they moved one 512 MiB reading by up to 340 MiB).

The figures go to the unit's first member (one value per unit and round: the members' values
would be the same number N times, not N samples) as metrics, and to every member's
``platform_info["density"]``.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

from isobench.plan.cell import Cell
from isobench.probes.meminfo import (
    BEFORE_READINGS,
    MEMINFO,
    SETTLE_STEP_S,
    SETTLED_BYTES,
    ZONEINFO,
    host_in_use_bytes,
    level_before,
    wait_until_settled,
)
from isobench.runner.execute import CellOutcome

#: how often the host's memory is read while a unit runs (one read costs ~50 µs)
SAMPLE_S = 0.1
#: before the level is read (BEFORE_READINGS, averaged), the host's memory is given this long to
#: stop moving by less than SETTLED_BYTES per SETTLE_STEP_S (the previous unit's containers are
#: removed as it ends, and an engine frees their state a moment later)
SETTLE_S = 2.0


def is_density(cells: list[Cell]) -> bool:
    from isobench.workloads import WORKLOADS

    return bool(cells) and WORKLOADS.get(cells[0].workload).density


class HostMemory:
    """The host's used memory before a unit launches and while it runs (a thread of its own)."""

    def __init__(self, meminfo: Path = MEMINFO, interval_s: float = SAMPLE_S, zoneinfo: Path = ZONEINFO) -> None:
        self._meminfo = meminfo
        self._zoneinfo = zoneinfo
        self._interval = interval_s
        self.samples: list[tuple[float, int]] = []  # (runner's monotonic clock, bytes used)
        self.before: float | None = None
        self.after: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="density-memory", daemon=True)

    def _read(self) -> int | None:
        return host_in_use_bytes(self._meminfo, self._zoneinfo)

    def start(self) -> None:
        self._settle()
        self.before = level_before(self._read, BEFORE_READINGS)
        self._thread.start()

    def _settle(self) -> None:
        wait_until_settled(SETTLE_S, self._read, SETTLE_STEP_S, SETTLED_BYTES)

    def stop(self) -> None:
        """Stop sampling; the reading after every member is gone (their clean-up included) tells
        how far the host drifted meanwhile."""
        self._stop.set()
        self._thread.join(timeout=5)
        used = self._read()
        self.after = float(used) if used is not None else None

    def _sample(self) -> None:
        while not self._stop.is_set():
            used = self._read()
            if used is not None:
                self.samples.append((time.monotonic(), used))
            self._stop.wait(self._interval)


def _all_up(outcomes: list[CellOutcome]) -> tuple[float, float] | str:
    """The span in which every member was up and holding (runner's monotonic clock), or why
    there is none."""
    down = [o.cell.cell_id for o in outcomes if o.status != "ok" or o.measured is None]
    if down:
        return f"{len(down)} of {len(outcomes)} member(s) did not hold to the end ({down[0]}: " \
               f"{next(o.error for o in outcomes if o.cell.cell_id == down[0]) or 'no measured window'})"
    start = max(o.measured[0] for o in outcomes)  # type: ignore[index]
    end = min(o.measured[1] for o in outcomes)  # type: ignore[index]
    if end <= start:
        return (f"no moment had all {len(outcomes)} members up: the first ended {start - end:.1f} s before the "
                "last came up; fix: raise the workload's hold_s above the start-up spread")
    return start, end


def measure(outcomes: list[CellOutcome], memory: HostMemory) -> None:
    """Add the unit's density figures to its outcomes (see the module's doc)."""
    n = len(outcomes)
    startups = [o.startup_s for o in outcomes if o.startup_s is not None]
    info: dict[str, Any] = {"n": n, "before_bytes": memory.before, "after_bytes": memory.after}
    metrics: list[tuple[str, float, str]] = []
    if startups:
        info.update(startup_median_s=statistics.median(startups), startup_max_s=max(startups))
        metrics += [("group.startup_median_s", info["startup_median_s"], "s"),
                    ("group.startup_max_s", info["startup_max_s"], "s")]
    launched = [o.launched_at for o in outcomes if o.launched_at is not None]
    span = _all_up(outcomes)
    if isinstance(span, str):
        info["unavailable"] = span
    else:
        held = [used for at, used in memory.samples if span[0] <= at <= span[1]]
        info.update(held_s=span[1] - span[0], samples=len(held))
        if launched:  # from the first launch to the moment the last member was up
            info["all_up_s"] = span[0] - min(launched)
            metrics.append(("group.all_up_s", info["all_up_s"], "s"))
        if not held or memory.before is None:
            info["unavailable"] = (f"no reading of /proc/meminfo in the {span[1] - span[0]:.2f} s all members held; "
                                   "fix: raise the workload's hold_s")
        else:
            used = statistics.median(held) - memory.before
            info.update(steady_bytes=statistics.median(held), per_sandbox_bytes=used / n)
            metrics += [("host.mem_used_bytes", used, "bytes"), ("host.mem_used_per_sandbox_bytes", used / n, "bytes")]
            if memory.after is not None:  # how far the host moved by itself: the figure's noise
                info["drift_bytes"] = memory.after - memory.before
                metrics.append(("host.mem_drift_bytes", info["drift_bytes"], "bytes"))
    for outcome in outcomes:
        outcome.platform_info["density"] = info
    outcomes[0].probes.metrics.extend(metrics)

"""meminfo: the host's used memory over the cell, less the level just before its launch.

Used memory is ``MemTotal - MemAvailable`` from /proc/meminfo, what ``free`` and tegrastats
report as used (page cache the kernel could drop left out), less the free pages the kernel
keeps in its per-CPU lists (/proc/zoneinfo's pagesets). MemFree, and so MemAvailable, leaves
those out, and since Linux 6.7 the lists grow to hundreds of MiB: on a 2-CPU host with 6.18
they held about 290 MiB, and a touched 512 MiB allocation moved ``MemTotal - MemAvailable`` by
between 0 and 340 MiB (served from the lists, or refilling them), against about 500-650 MiB
with the lists counted as free.
The figure is the whole host's, so it counts what a platform adds beside the cell's own
processes: the container engine's client, shim and runtime, the daemons' growth, gVisor's
Sentry, the kernel's per-container state. That is the memory Prashanthi et al. (5.1.7)
compare; no process's RSS shows it.

The level before is read when the probe is set up: the runner builds a cell's probes just
before it launches the cell (runner/execute.py), after letting the host's memory settle for
up to ``settle_s`` (the previous cell's container is removed as it ends, and the engine frees
its state a moment later). From ``start`` the level is sampled every ``interval_s`` until the
workload's ``done`` record (its last phase), and the metrics are the peak and the median of
those samples less the level before: ``used_delta_max_bytes``, ``used_delta_median_bytes``.

A host-wide level mixes every cell that runs at the same time: a duet pair's two members, a
tenant group's N. A cell whose probe was alive while another cell's was (in the same runner:
duet members and tenants run in threads of one runner) records no delta; its info says it was
mixed and with how many cells. Other work on the host (another runner, a build) is not seen
here: an A/A entry of the study shows how much it moves the figure.
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.sampling import Sampler

MEMINFO = Path("/proc/meminfo")
ZONEINFO = Path("/proc/zoneinfo")
#: readings averaged for the level before the launch
BEFORE_READINGS = 5
BEFORE_STEP_S = 0.02
#: the host's memory has settled when two readings SETTLE_STEP_S apart differ by less than this
SETTLED_BYTES = 2 * 2**20
SETTLE_STEP_S = 0.2


def host_used_bytes(meminfo: Path = MEMINFO) -> int | None:
    """``MemTotal - MemAvailable`` in bytes: what the host has in use, page cache it could drop
    left out; None where /proc/meminfo does not say."""
    fields: dict[str, int] = {}
    try:
        for line in meminfo.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) < 2:
        return None
    return fields["MemTotal"] - fields["MemAvailable"]


def per_cpu_free_bytes(zoneinfo: Path = ZONEINFO) -> int | None:
    """Free pages held in the kernel's per-CPU lists, every zone and CPU (``count`` under each
    zone's ``pagesets``): free memory that MemFree does not count; None where zoneinfo does not say."""
    try:
        text = zoneinfo.read_text()
    except OSError:
        return None
    pages = [int(line.split()[1]) for line in text.splitlines() if line.lstrip().startswith("count:")]
    return sum(pages) * os.sysconf("SC_PAGE_SIZE") if pages else None


def host_in_use_bytes(meminfo: Path = MEMINFO, zoneinfo: Path = ZONEINFO) -> int | None:
    """:func:`host_used_bytes` less :func:`per_cpu_free_bytes` (none where zoneinfo does not say)."""
    used = host_used_bytes(meminfo)
    if used is None:
        return None
    return used - (per_cpu_free_bytes(zoneinfo) or 0)


Reading = Callable[[], "int | None"]


def wait_until_settled(within_s: float, read: Reading = host_in_use_bytes, step_s: float = SETTLE_STEP_S,
                       settled_bytes: int = SETTLED_BYTES) -> bool:
    """Wait, at most ``within_s``, until two readings (``read``) ``step_s`` apart differ by less
    than ``settled_bytes``; True when they did."""
    deadline = time.monotonic() + within_s
    last = read()
    while last is not None and time.monotonic() < deadline:
        time.sleep(step_s)
        now = read()
        if now is None or abs(now - last) < settled_bytes:
            return True
        last = now
    return False


def level_before(read: Reading = host_in_use_bytes, readings: int = BEFORE_READINGS) -> float | None:
    """The mean of a few readings (``read``) ``BEFORE_STEP_S`` apart: one moves by a page or two."""
    values = []
    for index in range(readings):
        if index:
            time.sleep(BEFORE_STEP_S)
        used = read()
        if used is not None:
            values.append(used)
    return statistics.fmean(values) if values else None


class MeminfoSettings(ProbeSettings):
    interval_s: float = Field(0.1, ge=0.01, le=60, description="seconds between readings of /proc/meminfo and "
                                                               "/proc/zoneinfo (~0.2 ms together)")
    settle_s: float = Field(1.0, ge=0.0, le=30, description="before the launch, wait at most this long for the "
                                                            "host's memory to stop moving")


#: the meminfo probes alive in this process (set up and not yet stopped): cells running at once
_LIVE: weakref.WeakSet[MeminfoProbe] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_SERIAL = itertools.count()


@PROBES.register("meminfo")
class MeminfoProbe(Probe):
    description = ("host used memory (MemTotal - MemAvailable, as `free` reports it, less the free pages in the "
                   "per-CPU lists) over the cell, less the level just before its launch: the engine's shim, "
                   "runtime and daemons included; not recorded for a cell that ran beside another (a duet "
                   "pair, tenants)")
    Settings = MeminfoSettings

    def __init__(self, settings: ProbeSettings) -> None:
        super().__init__(settings)
        self.settings: MeminfoSettings = settings  # type: ignore[assignment]
        self.serial = next(_SERIAL)
        #: serials of the other meminfo probes alive at some moment of this one's life
        self.beside: set[int] = set()
        self.settled: bool | None = None
        self.before: float | None = None
        self.t0 = time.monotonic()
        #: used_bytes: in use (MemTotal - MemAvailable - per_cpu_free_bytes), the figure's readings
        self.samples: dict[str, list[float]] = {"t": [], "used_bytes": [], "per_cpu_free_bytes": []}
        self.per_cpu_read = True
        self.done_at: int | None = None
        self.sampler: Sampler | None = None
        self._join()
        if not self.beside:  # a mixed cell's level is not used: no time spent on it before the launch
            self.settled = wait_until_settled(self.settings.settle_s) if self.settings.settle_s > 0 else None
            self.before = level_before()

    @classmethod
    def check(cls) -> ProbeCheck:
        return ProbeCheck(host_used_bytes() is not None, f"{MEMINFO} gives no MemTotal and MemAvailable")

    def _join(self) -> None:
        with _LIVE_LOCK:
            for other in _LIVE:
                other.beside.add(self.serial)
                self.beside.add(other.serial)
            _LIVE.add(self)

    def _leave(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def start(self, target: ProbeTarget) -> None:
        self.t0 = time.monotonic()
        self.sampler = Sampler(self._sample, self.settings.interval_s, target.root_pid, "isobench-meminfo")
        self.sampler.start()

    def _sample(self) -> None:
        used, per_cpu = host_used_bytes(), per_cpu_free_bytes()
        if used is not None:
            self.per_cpu_read = self.per_cpu_read and per_cpu is not None
            self.samples["t"].append(time.monotonic() - self.t0)
            self.samples["used_bytes"].append(float(used - (per_cpu or 0)))
            self.samples["per_cpu_free_bytes"].append(float(per_cpu or 0))

    def mark(self, event: str) -> None:
        if event == "done" and self.sampler is not None:  # the last phase has ended: the cell's level ends here
            self.sampler.sample_now()
            self.done_at = len(self.samples["t"])

    def stop(self) -> ProbeResult:
        if self.sampler is not None:
            self.sampler.stop(final_sample=False)
        after = host_in_use_bytes()
        self._leave()
        used = self.samples["used_bytes"][:self.done_at] if self.done_at else self.samples["used_bytes"]
        info: dict[str, Any] = {"interval_s": self.settings.interval_s, "samples": len(used),
                                "counted_until": "done" if self.done_at else "last sample"}
        if not self.per_cpu_read or per_cpu_free_bytes() is None:
            info["per_cpu_lists"] = f"{ZONEINFO} gives no per-CPU page counts: MemTotal - MemAvailable alone"
        series = {"samples": self.samples}
        if self.beside:
            info["mixed"] = (f"ran beside {len(self.beside)} other cell(s) (a duet pair or tenant group): the "
                             "host's memory holds theirs too, so no delta is recorded")
            return ProbeResult(series=series, info=info)
        if self.settled is False:
            info["unsettled"] = f"the host's memory still moved by {SETTLED_BYTES // 2**20} MiB or more " \
                                f"per {SETTLE_STEP_S:g} s after {self.settings.settle_s:g} s"
        if self.before is None or not used:
            info["unavailable"] = f"no reading of {MEMINFO} before the launch or during the cell"
            return ProbeResult(series=series, info=info)
        info["before_bytes"] = self.before
        if after is not None:  # the cell's process has exited (a container is not yet removed)
            info["after_delta_bytes"] = after - self.before
        metrics: list[tuple[str, float, str]] = [
            ("used_delta_max_bytes", max(used) - self.before, "B"),
            ("used_delta_median_bytes", statistics.median(used) - self.before, "B"),
            ("used_before_bytes", self.before, "B"),
        ]
        return ProbeResult(metrics=metrics, series=series, info=info)

    def abort(self) -> None:
        if self.sampler is not None:
            self.sampler.stop(final_sample=False)
        self._leave()

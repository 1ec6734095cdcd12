"""vmstat: the host's /proc/vmstat over the cell (deltas), and the dirty_* sysctls in force.

/proc/vmstat is host-wide: the deltas include whatever else ran meanwhile (the A/A entry
of a study shows how much that is). Write-back levels (nr_dirty, nr_writeback) are
sampled, since they rise and fall within a cell.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import Field

from isobench.fingerprint import DIRTY_SYSCTLS
from isobench.hostinfo import read_text
from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.sampling import Sampler

VMSTAT = Path("/proc/vmstat")
#: the deltas kept as summary metrics (all of them are in the ``deltas`` series)
SUMMARY = ("pgfault", "pgmajfault", "nr_dirtied", "nr_written", "pgpgin", "pgpgout", "pswpin", "pswpout",
           "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "pgfree",
           "workingset_refault_file", "thp_fault_alloc")
#: summed families (per zone or per kind in the kernel)
FAMILIES = ("allocstall_", "pgalloc_")
#: levels sampled during the cell
LEVELS = ("nr_dirty", "nr_writeback", "nr_dirty_threshold", "nr_dirty_background_threshold", "nr_free_pages")
#: nr_* entries that are event counters, not levels
NR_COUNTERS = ("nr_dirtied", "nr_written", "nr_foll_pin_acquired", "nr_foll_pin_released")


class VmstatSettings(ProbeSettings):
    interval_s: float = Field(1.0, ge=0.0, le=60,
                              description="seconds between samples of the write-back levels (0: start/end only)")
    all_counters: bool = Field(False, description="keep every counter's delta as a metric, not only the usual ones")


def read_vmstat() -> dict[str, int]:
    values = {}
    for line in VMSTAT.read_text().splitlines():
        name, _, value = line.partition(" ")
        values[name] = int(value)
    return values


def is_counter(name: str) -> bool:
    return not name.startswith("nr_") or name in NR_COUNTERS


def dirty_sysctls() -> dict[str, int | None]:
    values: dict[str, int | None] = {}
    for name in DIRTY_SYSCTLS:
        text = read_text(f"/proc/sys/vm/{name}")
        values[name] = int(text) if text is not None else None
    return values


@PROBES.register("vmstat")
class VmstatProbe(Probe):
    description = ("host /proc/vmstat deltas over the cell (pgfault, pgmajfault, nr_dirtied, nr_written, "
                   "pgpgout, ...), sampled dirty/write-back levels, and the dirty_* sysctls in force")
    Settings = VmstatSettings
    default = True

    @classmethod
    def check(cls) -> ProbeCheck:
        return ProbeCheck(VMSTAT.exists(), f"{VMSTAT} is missing")

    def start(self, target: ProbeTarget) -> None:
        settings: VmstatSettings = self.settings  # type: ignore[assignment]
        self.sysctls = dirty_sysctls()
        self.t0 = time.monotonic()
        self.levels: dict[str, list[float]] = {"t": [], **{k: [] for k in LEVELS}}
        self.begin = read_vmstat()
        self._record_levels(self.begin)
        self.sampler: Sampler | None = None
        if settings.interval_s > 0:
            self.sampler = Sampler(self._sample, settings.interval_s, None, "isobench-vmstat")
            self.sampler.start(sample_first=False)

    def _sample(self) -> None:
        self._record_levels(read_vmstat())

    def stop(self) -> ProbeResult:
        if self.sampler is not None:
            self.sampler.stop(final_sample=False)
        end = read_vmstat()
        self._record_levels(end)
        names = sorted(k for k in end if k in self.begin and is_counter(k))
        deltas = {k: end[k] - self.begin[k] for k in names}
        settings: VmstatSettings = self.settings  # type: ignore[assignment]
        keep = names if settings.all_counters else [k for k in SUMMARY if k in deltas]
        metrics: list[tuple[str, float, str]] = [(k, float(deltas[k]), "count") for k in keep]
        for family in FAMILIES:
            members = [k for k in names if k.startswith(family)]
            if members:
                metrics.append((family.rstrip("_"), float(sum(deltas[k] for k in members)), "count"))
        for name in ("nr_dirty", "nr_writeback"):
            if self.levels[name]:
                metrics.append((f"{name}_max", max(self.levels[name]), "pages"))
        now = dirty_sysctls()
        info: dict[str, Any] = {"dirty_sysctls": self.sysctls}
        if now != self.sysctls:
            info["dirty_sysctls_at_end"] = now
        series = {"deltas": {"name": names, "start": [self.begin[k] for k in names],
                             "end": [end[k] for k in names], "delta": [deltas[k] for k in names]},
                  "levels": self.levels}
        return ProbeResult(metrics=metrics, series=series, info=info)

    def _record_levels(self, values: dict[str, int]) -> None:
        self.levels["t"].append(time.monotonic() - self.t0)
        for name in LEVELS:
            self.levels[name].append(float(values.get(name, 0)))

    def abort(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None:
            sampler.stop(final_sample=False)

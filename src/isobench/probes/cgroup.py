"""cgroup: the cell's own cgroup counters (v1 controllers, cgroup2, or both on a hybrid host).

Every platform gives a cell a cgroup of its own (bare metal: ``isobench/<runner>/<cell>``;
Docker: ``docker/<id>``; OCI runtimes: ``isobench/<runner>/<id>``), created with the cell,
so counters are reported as they stand at the end: the cell's whole life up to its
last phase: the counters are read when the worker's ``done`` record arrives (the engine
removes a container's group as soon as its init exits, so a later read may find nothing).
Levels are sampled; the sampler also wakes when the cell's root process exits (pidfd).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.sampling import Sampler

#: cumulative since the group was made: reported as end values
COUNTERS = ("cpu_usage_s", "cpu_user_s", "cpu_system_s", "nr_periods", "nr_throttled", "throttled_s",
            "pgfault", "pgmajfault", "io_read_bytes", "io_write_bytes", "oom_kill",
            "psi_cpu_some_s", "psi_cpu_full_s", "psi_memory_some_s", "psi_memory_full_s",
            "psi_io_some_s", "psi_io_full_s")
#: levels: reported as max (and mean) over the samples
GAUGES = ("mem_usage_bytes", "mem_anon_bytes", "mem_file_bytes", "mem_dirty_bytes", "mem_writeback_bytes",
          "pids")
V1_MEMORY_STAT = {"rss": "mem_anon_bytes", "cache": "mem_file_bytes", "dirty": "mem_dirty_bytes",
                  "writeback": "mem_writeback_bytes", "pgfault": "pgfault", "pgmajfault": "pgmajfault"}
V2_MEMORY_STAT = {"anon": "mem_anon_bytes", "file": "mem_file_bytes", "file_dirty": "mem_dirty_bytes",
                  "file_writeback": "mem_writeback_bytes", "pgfault": "pgfault", "pgmajfault": "pgmajfault"}
USER_HZ = os.sysconf("SC_CLK_TCK")


class CgroupSettings(ProbeSettings):
    interval_s: float = Field(0.5, ge=0.01, le=60, description="seconds between samples")


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file ("name value" per line) as a dict."""
    result = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                result[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return result


def _one(path: Path) -> int:
    return int(path.read_text().split()[0])


def _pressure(path: Path) -> dict[str, float]:
    """PSI file -> {"some": seconds stalled, "full": seconds} (``total=`` is in microseconds)."""
    result = {}
    for line in path.read_text().splitlines():
        kind, *fields = line.split()
        for field in fields:
            if field.startswith("total="):
                result[kind] = int(field[6:]) / 1e6
    return result


def _try(values: dict[str, float], read: Any) -> None:
    try:
        values.update(read())
    except (OSError, ValueError, IndexError):
        pass  # this kernel or controller lacks the file; the key just stays absent


def read_counters(dirs: dict[str, Path]) -> dict[str, float]:
    """What the cell's groups say now, under controller-independent names."""
    values: dict[str, float] = {}
    unified = dirs.get("unified")
    if "cpuacct" in dirs:
        cpuacct = dirs["cpuacct"]
        _try(values, lambda: {"cpu_usage_s": _one(cpuacct / "cpuacct.usage") / 1e9})
        _try(values, lambda: {f"cpu_{k}_s": v / USER_HZ for k, v in _keyed(cpuacct / "cpuacct.stat").items()
                              if k in ("user", "system")})
    if "cpu" in dirs:
        _try(values, lambda: _throttling(_keyed(dirs["cpu"] / "cpu.stat"), ns=True))
    if unified is not None:
        if "cpu_usage_s" not in values:
            def v2_cpu() -> dict[str, float]:
                stat = _keyed(unified / "cpu.stat")
                out = {"cpu_usage_s": stat["usage_usec"] / 1e6, "cpu_user_s": stat["user_usec"] / 1e6,
                       "cpu_system_s": stat["system_usec"] / 1e6}
                if "nr_throttled" not in values:
                    out.update(_throttling(stat, ns=False))
                return out
            _try(values, v2_cpu)
        for resource in ("cpu", "memory", "io"):
            _try(values, lambda r=resource: {f"psi_{r}_{kind}_s": v
                                             for kind, v in _pressure(unified / f"{r}.pressure").items()})
    if "memory" in dirs:
        memory = dirs["memory"]
        _try(values, lambda: {"mem_usage_bytes": _one(memory / "memory.usage_in_bytes")})
        _try(values, lambda: {"mem_peak_bytes": _one(memory / "memory.max_usage_in_bytes")})
        _try(values, lambda: {V1_MEMORY_STAT[k]: v for k, v in _keyed(memory / "memory.stat").items()
                              if k in V1_MEMORY_STAT})
        _try(values, lambda: {"oom_kill": _keyed(memory / "memory.oom_control").get("oom_kill", 0)})
    elif unified is not None and (unified / "memory.current").exists():
        _try(values, lambda: {"mem_usage_bytes": _one(unified / "memory.current")})
        _try(values, lambda: {"mem_peak_bytes": _one(unified / "memory.peak")})
        _try(values, lambda: {V2_MEMORY_STAT[k]: v for k, v in _keyed(unified / "memory.stat").items()
                              if k in V2_MEMORY_STAT})
        _try(values, lambda: {"oom_kill": _keyed(unified / "memory.events").get("oom_kill", 0)})
    if "pids" in dirs:
        _try(values, lambda: {"pids": _one(dirs["pids"] / "pids.current")})
    elif unified is not None:
        _try(values, lambda: {"pids": _one(unified / "pids.current")})
    if "blkio" in dirs:
        _try(values, lambda: _blkio(dirs["blkio"] / "blkio.throttle.io_service_bytes"))
    elif unified is not None:
        _try(values, lambda: _io_stat(unified / "io.stat"))
    return values


def _throttling(stat: dict[str, int], ns: bool) -> dict[str, float]:
    throttled = stat["throttled_time"] / 1e9 if ns else stat["throttled_usec"] / 1e6
    return {"nr_periods": stat["nr_periods"], "nr_throttled": stat["nr_throttled"], "throttled_s": throttled}


def _blkio(path: Path) -> dict[str, float]:
    read = write = 0
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("Read", "Write"):
            if parts[1] == "Read":
                read += int(parts[2])
            else:
                write += int(parts[2])
    return {"io_read_bytes": read, "io_write_bytes": write}


def _io_stat(path: Path) -> dict[str, float]:
    read = write = 0
    for line in path.read_text().splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key == "rbytes":
                read += int(value)
            elif key == "wbytes":
                write += int(value)
    return {"io_read_bytes": read, "io_write_bytes": write}


@PROBES.register("cgroup")
class CgroupProbe(Probe):
    description = ("the cell's cgroup: CPU usage, CFS periods/throttled periods/throttled time, memory usage "
                   "and memory.stat (dirty, writeback), PSI stall time where the kernel has it")
    Settings = CgroupSettings
    default = True

    @classmethod
    def check(cls) -> ProbeCheck:
        if not Path("/sys/fs/cgroup").is_dir():
            return ProbeCheck(False, "no cgroup filesystem at /sys/fs/cgroup")
        return ProbeCheck(True)

    def start(self, target: ProbeTarget) -> None:
        settings: CgroupSettings = self.settings  # type: ignore[assignment]
        self.dirs = dict(target.cgroups)
        self.t0 = time.monotonic()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.done_sample: dict[str, float] | None = None
        self.sampler = Sampler(self._sample, settings.interval_s, target.root_pid, "isobench-cgroup")
        if self.dirs:
            self.sampler.start()

    def _sample(self) -> None:
        values = read_counters({k: d for k, d in self.dirs.items() if d.is_dir()})
        if values:  # an empty read means the group is gone: keep the last one that saw it
            self.samples.append((time.monotonic() - self.t0, values))

    def mark(self, event: str) -> None:
        if event == "done" and self.dirs:
            self.sampler.sample_now()
            if self.samples:
                self.done_sample = self.samples[-1][1]

    def stop(self) -> ProbeResult:
        self.sampler.stop()
        info: dict[str, Any] = {"groups": {k: str(d) for k, d in sorted(self.dirs.items())}}
        if not self.samples:
            info["missing"] = "no cgroup could be read (the cell ended before its group was seen)" \
                if self.dirs else "the platform named no cgroup for this cell"
            return ProbeResult(info=info)
        t_end = self.samples[-1][0]
        last: dict[str, float] = {}
        for _, values in self.samples:  # a group removed controller by controller: each key's last read
            last.update(values)
        # Counters as they stood when the last phase ended: every platform's group still exists
        # then (an engine removes a container's group on exit), so platforms compare alike.
        end = self.done_sample or last
        info["counted_until"] = "done" if self.done_sample else "last sample"
        info["at_exit"] = {k: last[k] for k in COUNTERS if k in last}
        info["start"] = {k: self.samples[0][1][k] for k in COUNTERS if k in self.samples[0][1]}
        info["end_sample_t"] = round(t_end, 3)
        info["end_read_after_exit"] = self.sampler.exit_seen_at is not None and \
            self.t0 + t_end >= self.sampler.exit_seen_at
        units = {"_s": "s", "_bytes": "B"}
        metrics: list[tuple[str, float, str]] = []
        for name in COUNTERS:
            if name in end:
                metrics.append((name, end[name], next((u for s, u in units.items() if name.endswith(s)), "count")))
        if end.get("nr_periods"):
            metrics.append(("throttled_ratio", end["nr_throttled"] / end["nr_periods"], "ratio"))
        for name in GAUGES:
            levels = [values[name] for _, values in self.samples if name in values]
            if levels:
                stem = name.removesuffix("_bytes")
                unit = "B" if name.endswith("_bytes") else "count"
                suffix = "_bytes" if unit == "B" else ""
                metrics += [(f"{stem}_max{suffix}", max(levels), unit),
                            (f"{stem}_mean{suffix}", sum(levels) / len(levels), unit)]
        peak = max((v["mem_peak_bytes"] for _, v in self.samples if "mem_peak_bytes" in v), default=None)
        if peak is not None:
            metrics.append(("mem_peak_bytes", peak, "B"))
        keys = sorted({k for _, values in self.samples for k in values})
        series = {"t": [t for t, _ in self.samples],
                  **{k: [values.get(k, math.nan) for _, values in self.samples] for k in keys}}
        info["interval_s"] = self.sampler.interval_s
        if self.sampler.errors:
            info["sample_errors"] = self.sampler.errors
            info["first_error"] = self.sampler.first_error
        return ProbeResult(metrics=metrics, series={"samples": series}, info=info)

    def abort(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None:
            sampler.stop(final_sample=False)

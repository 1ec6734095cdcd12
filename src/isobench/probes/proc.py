"""proc: the cell's process tree sampled through /proc (psutil), plus the host's CPU and memory.

Counters (CPU time, context switches, I/O bytes, page faults) are cumulative per process;
the tree's total is the sum of each process's last sample, so a process that ends between
samples keeps what it had when last seen. The totals reported are those sampled when the
worker's ``done`` record arrives (its last phase has ended, its process still exists);
children that ended earlier lose at most one interval (the cgroup probe's counters are exact).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.sampling import Sampler

COUNTERS = ("cpu_s", "ctx_voluntary", "ctx_involuntary", "io_read_bytes", "io_write_bytes", "minflt", "majflt")


class ProcSettings(ProbeSettings):
    interval_s: float = Field(0.5, ge=0.01, le=60, description="seconds between samples")


def _faults(pid: int) -> tuple[int, int]:
    """minor and major page faults of ``pid`` (fields 10 and 12 of /proc/PID/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[7]), int(fields[9])


@PROBES.register("proc")
class ProcProbe(Probe):
    description = ("the cell's process tree (psutil): CPU %, RSS, threads, voluntary/involuntary context "
                   "switches, I/O bytes, page faults; host CPU % and memory used/free/cached")
    Settings = ProcSettings
    default = True

    @classmethod
    def check(cls) -> ProbeCheck:
        return ProbeCheck(Path("/proc/self/stat").exists(), "no /proc")

    def start(self, target: ProbeTarget) -> None:
        settings: ProcSettings = self.settings  # type: ignore[assignment]
        self.target = target
        self.t0 = time.monotonic()
        self._procs: dict[int, psutil.Process] = {}
        #: (pid, create time) -> last cumulative counters of that process
        self._last: dict[tuple[int, float], dict[str, float]] = {}
        self._prev_total: tuple[float, float] | None = None
        self._prev_host: Any = None
        self.done_row: int | None = None
        self.rows: dict[str, list[float]] = {k: [] for k in (
            "t", "procs", "threads", "rss_bytes", "cpu_pct", *COUNTERS,
            "host_cpu_pct", "host_mem_used_bytes", "host_mem_free_bytes", "host_mem_cached_bytes",
            "host_mem_available_bytes")}
        self.sampler = Sampler(self._sample, settings.interval_s, target.root_pid, "isobench-proc")
        self.sampler.start()

    def _process(self, pid: int) -> psutil.Process | None:
        proc = self._procs.get(pid)
        try:
            if proc is None or not proc.is_running():
                proc = self._procs[pid] = psutil.Process(pid)
        except psutil.Error:
            return None
        return proc

    def _sample(self) -> None:
        now = time.monotonic()
        threads = rss = procs = 0
        for pid in self.target.pids():
            proc = self._process(pid)
            if proc is None:
                continue
            try:
                with proc.oneshot():
                    key = (pid, proc.create_time())
                    times = proc.cpu_times()
                    ctx = proc.num_ctx_switches()
                    counters = {"cpu_s": times.user + times.system, "ctx_voluntary": ctx.voluntary,
                                "ctx_involuntary": ctx.involuntary}
                    counters["minflt"], counters["majflt"] = _faults(pid)
                    try:  # gone for a process that has just exited (a zombie): keep what was read
                        io = proc.io_counters()
                        counters.update(io_read_bytes=io.read_bytes, io_write_bytes=io.write_bytes)
                        threads += proc.num_threads()
                        rss += proc.memory_info().rss
                    except (psutil.Error, AttributeError):
                        pass
            except (psutil.Error, OSError, ValueError):
                continue
            procs += 1
            self._last[key] = {**self._last.get(key, {}), **counters}
        totals = {name: sum(c.get(name, 0) for c in self._last.values()) for name in COUNTERS}
        cpu_pct = 0.0
        if self._prev_total is not None and now > self._prev_total[0]:
            cpu_pct = 100 * (totals["cpu_s"] - self._prev_total[1]) / (now - self._prev_total[0])
        self._prev_total = (now, totals["cpu_s"])
        host = psutil.cpu_times()
        host_pct = 0.0
        if self._prev_host is not None:
            busy = sum(host) - host.idle - getattr(host, "iowait", 0)
            prev_busy = sum(self._prev_host) - self._prev_host.idle - getattr(self._prev_host, "iowait", 0)
            span = sum(host) - sum(self._prev_host)
            host_pct = 100 * (busy - prev_busy) / span if span > 0 else 0.0
        self._prev_host = host
        memory = psutil.virtual_memory()
        row = {"t": now - self.t0, "procs": procs, "threads": threads, "rss_bytes": rss, "cpu_pct": cpu_pct,
               **totals, "host_cpu_pct": host_pct, "host_mem_used_bytes": memory.used,
               "host_mem_free_bytes": memory.free,
               "host_mem_cached_bytes": getattr(memory, "cached", 0) + getattr(memory, "buffers", 0),
               "host_mem_available_bytes": memory.available}
        for name, value in row.items():
            self.rows[name].append(float(value))

    def mark(self, event: str) -> None:
        if event == "done":  # the process still exists: its counters are complete up to its last phase
            self.sampler.sample_now()
            self.done_row = len(self.rows["t"]) - 1

    def stop(self) -> ProbeResult:
        self.sampler.stop()
        rows = self.rows
        end = self.done_row if self.done_row is not None and self.done_row >= 0 else len(rows["t"]) - 1
        duration = rows["t"][end] if rows["t"] else 0.0
        seen = [i for i, n in enumerate(rows["procs"]) if n > 0]
        last = {name: rows[name][end] for name in COUNTERS} if rows["t"] else dict.fromkeys(COUNTERS, 0.0)
        metrics: list[tuple[str, float, str]] = [
            ("cpu_s", last["cpu_s"], "s"),
            ("ctx_voluntary", last["ctx_voluntary"], "count"),
            ("ctx_involuntary", last["ctx_involuntary"], "count"),
            ("io_read_bytes", last["io_read_bytes"], "B"),
            ("io_write_bytes", last["io_write_bytes"], "B"),
            ("page_faults_minor", last["minflt"], "count"),
            ("page_faults_major", last["majflt"], "count"),
            ("samples", float(self.sampler.samples), "count"),
        ]
        if seen:
            rss = [rows["rss_bytes"][i] for i in seen]
            metrics += [("cpu_pct_mean", 100 * last["cpu_s"] / duration if duration > 0 else 0.0, "%"),
                        ("rss_max_bytes", max(rss), "B"), ("rss_mean_bytes", sum(rss) / len(rss), "B"),
                        ("threads_max", max(rows["threads"][i] for i in seen), "count"),
                        ("procs_max", max(rows["procs"][i] for i in seen), "count")]
        host_pct = rows["host_cpu_pct"][1:]
        if host_pct:
            metrics.append(("host_cpu_pct_mean", sum(host_pct) / len(host_pct), "%"))
        if rows["t"]:
            metrics += [("host_mem_used_max_bytes", max(rows["host_mem_used_bytes"]), "B"),
                        ("host_mem_available_min_bytes", min(rows["host_mem_available_bytes"]), "B")]
        info: dict[str, Any] = {"interval_s": self.sampler.interval_s, "sampler_cpu_s": round(self.sampler.cpu_s, 4),
                                "counted_until": "done" if self.done_row is not None else "last sample"}
        if self.sampler.errors:
            info["sample_errors"] = self.sampler.errors
            info["first_error"] = self.sampler.first_error
        return ProbeResult(metrics=metrics, series={"samples": rows}, info=info)

    def abort(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None:
            sampler.stop(final_sample=False)

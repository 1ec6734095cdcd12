"""environment: the host conditions a cell ran under (the studies' power modes and layouts).

CPU frequency governor and current frequency, turbo, isolated CPUs, NUMA nodes, cgroup
version, the CPUs the cell may use and the load when it started: read at start and end
(frequencies change under load), stored as info and as numeric metrics.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from isobench.fingerprint import cpufreq
from isobench.hostinfo import cgroup_layout, parse_cpu_list, read_text
from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeTarget

CPU_SYS = Path("/sys/devices/system/cpu")


def cpu_mhz() -> list[float]:
    """Current frequency of each CPU: cpufreq's scaling_cur_freq, else /proc/cpuinfo's estimate."""
    found = []
    for path in sorted(CPU_SYS.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        text = read_text(path)
        if text:
            found.append(int(text) / 1000)
    if found:
        return found
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        if line.startswith("cpu MHz"):
            found.append(float(line.split(":", 1)[1]))
    return found


def cpu_list(path: Path) -> list[int]:
    text = read_text(path) or ""
    try:
        return parse_cpu_list(text) if text else []
    except ValueError:
        return []


def snapshot(root_pid: int | None) -> dict[str, Any]:
    freq = cpufreq()
    layout = cgroup_layout()
    affinity: list[int] | None = None
    if root_pid:
        try:
            affinity = sorted(os.sched_getaffinity(root_pid))
        except OSError:
            affinity = None
    return {
        "governor": freq["governor"] or "not exposed",
        "turbo": freq["turbo"],
        "cpu_mhz": cpu_mhz(),
        "online_cpus": cpu_list(CPU_SYS / "online"),
        "isolated_cpus": cpu_list(CPU_SYS / "isolated"),
        "nohz_full_cpus": cpu_list(CPU_SYS / "nohz_full"),
        "numa_nodes": len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))),
        "cgroup": layout["mode"],
        "cell_cpus": affinity,
        "loadavg_1m": os.getloadavg()[0],
    }


@PROBES.register("environment")
class EnvironmentProbe(Probe):
    description = ("host conditions per cell: CPU governor and current frequency, turbo, isolated CPUs, "
                   "NUMA nodes, cgroup version, the cell's CPUs, load average")
    default = True

    @classmethod
    def check(cls) -> ProbeCheck:
        return ProbeCheck(CPU_SYS.is_dir(), f"{CPU_SYS} is missing")

    def start(self, target: ProbeTarget) -> None:
        self.root_pid = target.root_pid
        self.begin = snapshot(target.root_pid)

    def stop(self) -> ProbeResult:
        end = snapshot(None)
        begin = self.begin
        mhz = begin["cpu_mhz"] + end["cpu_mhz"]
        metrics: list[tuple[str, float, str]] = [
            ("online_cpus", len(begin["online_cpus"]), "count"),
            ("isolated_cpus", len(begin["isolated_cpus"]), "count"),
            ("numa_nodes", begin["numa_nodes"], "count"),
            ("cgroup_version", 2 if begin["cgroup"] == "v2" else 1, "version"),
            ("loadavg_1m_start", begin["loadavg_1m"], "load"),
            ("loadavg_1m_end", end["loadavg_1m"], "load"),
        ]
        if mhz:
            metrics += [("cpu_mhz_mean", sum(mhz) / len(mhz), "MHz"), ("cpu_mhz_min", min(mhz), "MHz")]
        if begin["turbo"] is not None:
            metrics.append(("turbo", float(begin["turbo"]), "bool"))
        if begin["cell_cpus"] is not None:
            metrics.append(("cell_cpus", len(begin["cell_cpus"]), "count"))
        info = {**{k: v for k, v in begin.items() if k != "cpu_mhz"},
                "cpu_mhz_start": begin["cpu_mhz"], "cpu_mhz_end": end["cpu_mhz"]}
        if end["governor"] != begin["governor"] or end["turbo"] != begin["turbo"]:
            info["changed_during_cell"] = {"governor": end["governor"], "turbo": end["turbo"]}
        return ProbeResult(metrics=metrics, info=info)

"""The host fingerprint stored with every study: what a result depends on besides the platform."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import isobench
from isobench.hostinfo import cgroup_layout, cpu_model, host_cpus, read_text, tool_version
from isobench.runtime_versions import host_versions

DIRTY_SYSCTLS = ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes",
                 "dirty_expire_centisecs", "dirty_writeback_centisecs")


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpufreq() -> dict[str, Any]:
    base = Path("/sys/devices/system/cpu")
    governors = {read_text(p) for p in base.glob("cpu[0-9]*/cpufreq/scaling_governor")}
    governors.discard(None)
    no_turbo = read_text(base / "intel_pstate/no_turbo")
    boost = read_text(base / "cpufreq/boost")
    turbo = None
    if no_turbo is not None:
        turbo = no_turbo == "0"
    elif boost is not None:
        turbo = boost == "1"
    return {"governor": ",".join(sorted(governors)) if governors else None,  # type: ignore[arg-type]
            "turbo": turbo, "cpufreq_exposed": bool(governors)}


def numa() -> dict[str, Any]:
    """NUMA nodes and their CPUs (one node: placement by node changes nothing here)."""
    from isobench.hostinfo import numa_nodes

    nodes = numa_nodes()
    return {"nodes": len(nodes) or 1, "cpus": {str(node): cpus for node, cpus in nodes.items()}}


def host_fingerprint() -> dict[str, Any]:
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "kernel": uname.release,
        "machine": uname.machine,
        "os": read_text("/etc/debian_version") and f"Debian {read_text('/etc/debian_version')}",
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cpus": host_cpus(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        **cpufreq(),
        "cgroup": cgroup_layout(),
        "numa": numa(),
        "dirty_sysctls": {k: read_text(f"/proc/sys/vm/{k}") for k in DIRTY_SYSCTLS},
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "isobench": isobench.__version__,
        "torch": _package_version("torch"),
        "torchvision": _package_version("torchvision"),
        # the first GPU's name, driver and memory as nvidia-smi gives them; None without one
        "gpu": tool_version(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
        # every engine and runtime installed here, short form (what a cell of each platform records)
        "versions": host_versions(),
        "boot_id": read_text("/proc/sys/kernel/random/boot_id"),
        "loadavg_at_start": os.getloadavg(),
    }

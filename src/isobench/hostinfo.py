"""Facts about the host that validation, platforms and the fingerprint share."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from pathlib import Path


@functools.cache
def host_cpus() -> list[int]:
    """The CPUs this process may run on (what a cpuset may name)."""
    return sorted(os.sched_getaffinity(0))


def read_text(path: str | Path, default: str | None = None) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def tool_version(argv: list[str]) -> str | None:
    """First line of ``argv``'s version output, or None when the tool is missing."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def cpu_model() -> str:
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cgroup_layout() -> dict[str, object]:
    """Which cgroup hierarchies are mounted: v1 controllers, and a cgroup2 mount if any."""
    v1: list[str] = []
    unified: str | None = None
    for line in (read_text("/proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup":
            v1.append(parts[1].rsplit("/", 1)[-1])
        elif parts[2] == "cgroup2":
            unified = parts[1]
    mode = "v2" if unified and not v1 else ("hybrid" if unified else "v1")
    return {"mode": mode, "v1_controllers": sorted(v1), "cgroup2_mount": unified}


def parse_cpu_list(text: str) -> list[int]:
    """Parse a kernel-style CPU list such as ``0-2,5``."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            if int(low) > int(high):
                raise ValueError(f"range {part!r} runs backwards")
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError("empty CPU list")
    return sorted(cpus)

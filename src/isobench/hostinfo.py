"""Facts about the host that validation, platforms and the fingerprint share."""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

NODE_SYS = Path("/sys/devices/system/node")


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


#: above Linux's largest NR_CPUS (8192) with room to spare; a bigger id is a typo, and a range
#: up to it would be built in memory
MAX_CPU_ID = 1 << 17


def parse_cpu_list(text: str) -> list[int]:
    """Parse a kernel-style CPU list such as ``0-2,5``."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        first, last = int(low), int(high) if dash else int(low)
        if first < 0 or last > MAX_CPU_ID:
            raise ValueError(f"core {last if last > MAX_CPU_ID else first} is outside 0-{MAX_CPU_ID}")
        if first > last:
            raise ValueError(f"range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise ValueError("empty CPU list")
    return sorted(cpus)


def cpu_ranges(cpus: list[int] | set[int]) -> list[str]:
    """Cores as kernel-style ranges: ``[0, 1, 2, 5]`` -> ``["0-2", "5"]``."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            low, high = ordered[start], ordered[index - 1]
            ranges.append(str(low) if low == high else f"{low}-{high}")
            start = index
    return ranges


def cpu_list(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: a cpuset as the kernel and Docker read it (never capped)."""
    return ",".join(cpu_ranges(cores))


def format_cpu_list(cpus: list[int] | set[int], limit: int = 8) -> str:
    """Cores as kernel-style ranges (``0-3,8,10-100000``), at most ``limit`` ranges then how many more."""
    from isobench.text import capped_list

    return capped_list(cpu_ranges(cpus), limit, sep=",")


_FREQ_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(khz|mhz|ghz)?\s*$", re.IGNORECASE)
_FREQ_UNITS = {"khz": 1, "mhz": 1_000, "ghz": 1_000_000}


def parse_frequency_khz(value: str | int) -> int:
    """``1.8GHz``, ``1800MHz``, ``1800000`` (kHz, as cpufreq writes it) -> kHz."""
    match = _FREQ_RE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a frequency; fix: write e.g. 1.8GHz, 1800MHz or 1800000 (kHz)")
    return int(float(match.group(1)) * _FREQ_UNITS[(match.group(2) or "khz").lower()])


def numa_nodes() -> dict[int, list[int]]:
    nodes: dict[int, list[int]] = {}
    for node in sorted(NODE_SYS.glob("node[0-9]*")):
        try:
            nodes[int(node.name[4:])] = parse_cpu_list((node / "cpulist").read_text().strip())
        except (OSError, ValueError):
            continue
    return nodes


def cache_root() -> Path:
    """Where isobench keeps what outlives a run on this host (images, guest kernels, baseload)."""
    default = "/var/cache/isobench" if os.geteuid() == 0 else str(Path.home() / ".cache" / "isobench")
    path = Path(os.environ.get("ISOBENCH_CACHE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path

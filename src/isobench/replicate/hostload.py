"""How busy the host was around a replication: the load average and the steal time."""

from __future__ import annotations

from pathlib import Path


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies so far, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def steal_since(start: tuple[int, int]) -> float:
    steal, total = cpu_times()
    return (steal - start[0]) / max(1, total - start[1])


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"

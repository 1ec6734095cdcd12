"""How busy the host was around a replication: the load average and the steal time."""

from __future__ import annotations

import os
from collections.abc import Iterable


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies so far, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def steal_since(start: tuple[int, int]) -> float:
    steal, total = cpu_times()
    return (steal - start[0]) / max(1, total - start[1])


def fmt_loadavg(values: Iterable[float]) -> str:
    """The 1/5/15-minute load averages as /proc/loadavg writes them."""
    return " ".join(f"{v:.2f}" for v in values)


def loadavg() -> str:
    """Now, read as the host fingerprint reads it (os.getloadavg)."""
    try:
        return fmt_loadavg(os.getloadavg())
    except OSError:
        return "unknown"

"""Read what the store holds beyond timings: probe metrics and raw series, found by shape.

Probes name their metrics ``probe.<probe>.<metric>`` and keep raw series as Arrow tables.
The readers here look metrics and columns up by pattern, so a figure renders from whatever
probe measured it and is skipped (with a note) when nothing did.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from isobench.analysis.groups import Group, host_of
from isobench.store import Store


def find_metric(names: Iterable[str], *patterns: str) -> str | None:
    """The first metric (sorted) whose name matches any pattern (regex, searched)."""
    ordered = sorted(names)
    for pattern in patterns:
        regex = re.compile(pattern)
        for name in ordered:
            if regex.search(name):
                return name
    return None


def mean_of(group: Group, metric: str | None) -> float | None:
    if metric is None or not group.metrics.get(metric):
        return None
    return statistics.fmean(group.metrics[metric])


def entry_label(display: str, platform: str, key: str, knobs: dict[str, Any], emulated: bool = False) -> str:
    """A platform entry as figures name it: the display name, the entry's label when it has its own
    (``baremetal (aa)``), the knobs that set it apart (threads are usually study-wide)."""
    text = display + (f" ({key})" if key != platform and key not in display else "")
    knob_text = ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()) if k != "threads")
    return text + (f" [{knob_text}]" if knob_text else "") + (" [emulated]" if emulated else "")


def group_label(group: Group, with_workload: bool = False) -> str:
    label = entry_label(group.display, group.platform, group.platform_key, group.knobs, group.emulated)
    return f"{group.workload}: {label}" if with_workload else label


def is_pinned(knobs: dict[str, Any]) -> bool:
    """Pinned: ``placement: pinned``, or a cpuset given directly."""
    if knobs.get("placement") is not None:
        return knobs["placement"] == "pinned"
    return knobs.get("cpuset") is not None


def core_count(knobs: dict[str, Any]) -> float | None:
    """Cores a cell was given: a pinned cell's cpuset size, else its quota, else its cpuset size."""
    if is_pinned(knobs) and knobs.get("cpuset") is not None:
        from isobench.hostinfo import parse_cpu_list

        return float(len(parse_cpu_list(str(knobs["cpuset"]))))
    if knobs.get("cpus") is not None:
        return float(knobs["cpus"])
    if knobs.get("cpuset") is not None:
        from isobench.hostinfo import parse_cpu_list

        return float(len(parse_cpu_list(str(knobs["cpuset"]))))
    return None


@dataclass
class CellInfo:
    cell_id: str
    group_key: tuple[str, str, str, str, str]  # Group.key: host last
    display: str
    platform: str
    platform_key: str
    workload: str
    knobs: dict[str, Any]
    rep: int
    tenants: int


def cell_index(store: Store) -> dict[str, CellInfo]:
    """cell id -> where it belongs (non-warm-up, finished or not)."""
    index = {}
    for row in store.cells():
        info = row.get("platform_info") or {}
        tenancy = info.get("tenancy") if isinstance(info, dict) else None  # set by runner/tenancy.py
        tenants = int((tenancy or {}).get("tenants") or (info or {}).get("tenants") or 1)
        index[row["cell_id"]] = CellInfo(
            row["cell_id"], (row["workload_key"], json.dumps(row["params"], sort_keys=True), row["platform_key"],
                             json.dumps(row["knobs"], sort_keys=True), host_of(info)),
            row["display"], row["platform"], row["platform_key"], row["workload_key"], row["knobs"], row["rep"],
            tenants)
    return index


def column(table: Any, *patterns: str) -> str | None:
    """The first column of an Arrow table whose name fully matches one of the patterns."""
    for pattern in patterns:
        regex = re.compile(pattern)
        for name in table.column_names:
            if regex.fullmatch(name):
                return name
    return None


def _roles_in(store: Store, required: dict[str, tuple[str, ...]]) -> list[tuple[str, str, dict[str, str]]]:
    """(probe, name, {role: column}) of every stored series with a column for every role, judged on
    one non-empty table: decoding every cell's tables of every series only to read the columns
    cost seconds at thousands of cells."""
    found = []
    for probe, name in store.series_names():
        sample = store.series_sample(probe, name)
        if sample is None:
            continue
        roles = {role: column(sample, *patterns) for role, patterns in required.items()}
        if all(roles.values()):
            found.append((probe, name, roles))
    return found


def series_with(store: Store, required: dict[str, tuple[str, ...]]) -> tuple[str, str, dict[str, Any],
                                                                                 dict[str, str]] | None:
    """The first stored series whose tables have a column for every role in ``required``.

    Returns (probe, name, {cell_id: table}, {role: column}).
    """
    for probe, name, roles in _roles_in(store, required):
        return probe, name, store.series(probe, name), roles
    return None


def all_series_with(store: Store, required: dict[str, tuple[str, ...]]) -> list[tuple[str, str, dict[str, Any],
                                                                                      dict[str, str]]]:
    return [(probe, name, store.series(probe, name), roles) for probe, name, roles in _roles_in(store, required)]


# Column patterns the readers accept (probes may name them either way).
TIME = (r"time_s", r"time", r"t", r"ts", r"timestamp")
REASON = (r"reason",)
INO = (r"ino", r"inode")
PAGE_INDEX = (r"index", r"page_index", r"pgoff")
FILE = (r"file", r"path", r"mapping")
SYMBOL = (r"symbol", r"function", r"location", r"sym")
CPU_UTIL = (r"cpu_pct", r"cpu_percent", r"cpu_util.*", r"cpu")
GPU_UTIL = (r"util_pct", r"gpu_util.*", r"util(ization)?_gpu", r"gpu_percent", r"utilization", r"util")
POWER = (r"power_w", r"power_watts", r"power", r"watts")
RSS = (r"rss_bytes", r"rss")


def reason_names(values: list[Any]) -> list[str]:
    """Write-back reasons as names; the ftrace probe stores the kernel's enum as small integers."""
    try:
        from isobench.probes.ftrace_parse import REASONS
    except ImportError:  # the probe is optional: the kernel's order (include/trace/events/writeback.h)
        REASONS = ("background", "vmscan", "sync", "periodic", "laptop_timer", "fs_free_space",  # noqa: N806
                   "forker_thread", "foreign_flush")
    names = []
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            names.append(REASONS[value] if 0 <= value < len(REASONS) else "unknown")
        else:
            names.append(str(value))
    return names

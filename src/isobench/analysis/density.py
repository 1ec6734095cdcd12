"""The density table: per platform and N, host memory per idle sandbox and its start-up time.

Reads what runner/density.py stored: each unit's (tenant group's, or lone cell's)
``platform_info["density"]`` and its members' ``cell.startup`` and ``workload.rss_bytes``. One
unit is one sample of the memory figure, whatever its N; start-up times pool every member of
every round (each member's launch to its hello, runner's clock).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from isobench.store import Store

#: a tenant member's id is its group's plus ``/t<index>``
_MEMBER = re.compile(r"/t\d+$")
MIB = 2**20


@dataclass
class DensityRow:
    platform: str
    platform_key: str
    #: the workload entry's key (its label): a study may hold sandboxes of several sizes
    workload: str
    n: int
    #: per unit: host memory per sandbox (bytes)
    per_sandbox: list[float] = field(default_factory=list)
    #: per unit: how far the host's used memory moved between before and after (bytes)
    drift: list[float] = field(default_factory=list)
    #: per member: its own resident set (bytes) and start-up (s)
    rss: list[float] = field(default_factory=list)
    startup: list[float] = field(default_factory=list)
    #: per unit: first launch to the last member up (s)
    all_up: list[float] = field(default_factory=list)
    #: why a unit gave no memory figure
    unavailable: list[str] = field(default_factory=list)


def _names(store: Store) -> tuple[dict[str, str], list[str]]:
    """platform key -> what the table calls it (``oci/runc``, not the tenant entry's label), and
    the study's entry order."""
    from isobench.studyfile import load_study_text

    try:
        study = load_study_text(store.meta("study_yaml") or "", "store", check_host=False)
    except Exception:  # noqa: BLE001 - a study this code no longer reads: fall back to the display
        return {}, []
    names = {p.key: p.engine_name for p in study.platforms}
    return names, [p.key for p in study.platforms]


def density_rows(store: Store) -> list[DensityRow]:
    """One row per density platform entry (and workload variant), in the study's order."""
    names, order = _names(store)
    metrics: dict[str, dict[str, float]] = defaultdict(dict)
    for cell_id, metric, value in store.conn.execute(
            "SELECT cell_id, metric, value FROM metrics WHERE metric IN ('cell.startup', 'workload.rss_bytes')"):
        metrics[cell_id][metric] = value
    rows: dict[tuple[str, str], DensityRow] = {}
    units: set[str] = set()
    for cell in store.cells():
        info: dict[str, Any] = (cell.get("platform_info") or {}).get("density") or {}
        if not info:
            continue
        key = (cell["platform_key"], cell["workload_key"], str(cell["params"]))
        row = rows.get(key)
        if row is None:
            row = rows[key] = DensityRow(names.get(cell["platform_key"], cell["display"]), cell["platform_key"],
                                         cell["workload_key"], int(info.get("n") or 1))
        if cell["status"] == "ok":
            own = metrics.get(cell["cell_id"], {})
            if "cell.startup" in own:
                row.startup.append(own["cell.startup"])
            if "workload.rss_bytes" in own:
                row.rss.append(own["workload.rss_bytes"])
        unit = _MEMBER.sub("", cell["cell_id"])
        if unit in units:
            continue
        units.add(unit)
        if info.get("per_sandbox_bytes") is not None:
            row.per_sandbox.append(float(info["per_sandbox_bytes"]))
        if info.get("drift_bytes") is not None:
            row.drift.append(float(info["drift_bytes"]))
        if info.get("all_up_s") is not None:
            row.all_up.append(float(info["all_up_s"]))
        if info.get("unavailable"):
            row.unavailable.append(str(info["unavailable"]))
    rank = {key: i for i, key in enumerate(order)}
    return sorted(rows.values(), key=lambda r: (r.workload, rank.get(r.platform_key, len(rank)), r.n))


def fmt_mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


def fmt_spread(values: list[float], fmt: Any) -> str:
    """The median, and the range over rounds when there are several."""
    if not values:
        return "-"
    middle = fmt(statistics.median(values))
    return middle if len(values) < 2 else f"{middle} ({fmt(min(values))}–{fmt(max(values))})"


COLUMNS = ["platform", "N", "host memory / sandbox", "RSS / sandbox", "start-up median", "start-up max",
           "all N up", "rounds"]


def memory_cell(row: DensityRow) -> str:
    """The per-sandbox figure, marked where it is within the host's own drift over N (not resolved)."""
    if not row.per_sandbox:
        return "n/a"
    text = fmt_spread(row.per_sandbox, fmt_mib)
    noise = max((abs(d) for d in row.drift), default=0.0) / max(row.n, 1)
    if abs(statistics.median(row.per_sandbox)) < noise:
        text += f" [not resolved: noise ±{noise / MIB:.0f} MiB]"
    return text


def table_rows(rows: list[DensityRow]) -> list[list[str]]:
    several = len({r.workload for r in rows}) > 1  # then each row names its workload entry
    return [[row.platform + (f" ({row.workload})" if several else ""), str(row.n),
             memory_cell(row),
             fmt_mib(statistics.median(row.rss)) if row.rss else "-",
             f"{statistics.median(row.startup):.2f} s" if row.startup else "-",
             f"{max(row.startup):.2f} s" if row.startup else "-",
             f"{statistics.median(row.all_up):.2f} s" if row.all_up else "-",
             str(len(row.per_sandbox))] for row in rows]


TITLE = "Density: host memory per idle sandbox (MemTotal − MemAvailable − per-CPU free lists, all N up, over N) and start-up"


def notes(rows: list[DensityRow]) -> list[str]:
    """What qualifies the table: the host's own drift, and the units without a figure."""
    lines = []
    drift = [abs(d) for r in rows for d in r.drift]
    if drift:
        lines.append(f"host memory moved by up to {max(drift) / MIB:.1f} MiB between before and after a unit "
                     "(its own noise: a figure per sandbox below that over N is not resolved)")
    for row in rows:
        for reason in dict.fromkeys(row.unavailable):
            lines.append(f"{row.platform} N={row.n}: no memory figure: {reason}")
    return lines


def report_views(ctx: Any) -> list[Any]:
    """The table for the report (analysis/views/plugins.py)."""
    from isobench.analysis.views.base import Table

    rows = density_rows(ctx.store)
    if not rows:
        return []
    return [Table("tab-density", TITLE, "gVisor's and Kata's density figures; Prashanthi et al. 5.1.7",
                  COLUMNS, table_rows(rows), note="; ".join(notes(rows)))]

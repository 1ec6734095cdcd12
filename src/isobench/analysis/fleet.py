"""A study run across several hosts: each platform's ratio per host, and how it spreads over the fleet.

Every ratio here is a same-host ratio (compare() never pairs a platform with another host's
baseline); this module only sets those ratios side by side. With one host there is no fleet and
every function returns nothing, so single-host reports are unchanged.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from isobench.analysis.compare import Comparison, hosts_of
from isobench.analysis.verdict import DIRECTIONS, NOT_COMPARABLE
from isobench.analysis.views import Table, View

#: metrics the fleet table spreads over hosts (probe metrics stay in their own table)
FLEET_METRICS = ("e2e", "cell.startup")


def resolved(c: Comparison) -> bool:
    """This host tells the platform from its baseline: its verdict is a direction. An interval that
    excludes 1 but does not survive Holm across the study's comparisons is not resolved."""
    return c.verdict in DIRECTIONS


@dataclass
class FleetRow:
    """One comparison (workload, parameters, platform entry, knobs, metric) across the hosts it ran on."""

    workload: str
    params: dict[str, Any]
    platform: str
    label: str
    knobs: dict[str, Any]
    metric: str
    baseline: str
    #: host -> that host's comparison, in the fleet's host order
    per_host: dict[str, Comparison] = field(default_factory=dict)
    #: hosts in the whole study (a row may lack some of them)
    fleet_size: int = 0

    @property
    def ratios(self) -> list[float]:
        return [c.ratio for c in self.per_host.values()]

    @property
    def hosts(self) -> int:
        return len(self.per_host)

    @property
    def low(self) -> float:
        return min(self.ratios)

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)

    @property
    def geomean(self) -> float:
        return math.exp(statistics.fmean(math.log(r) for r in self.ratios))

    @property
    def resolved(self) -> int:
        return sum(resolved(c) for c in self.per_host.values())

    @property
    def worst_host(self) -> str:
        return max(self.per_host, key=lambda h: self.per_host[h].ratio)

    def headline(self, variant: str = "") -> str:
        """E.g. "docker/runc: lenet-train e2e 1.05–1.20× baremetal across 3 hosts (median 1.10×, ...)"."""
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(self.knobs.items()) if k != "threads")
        who = self.platform + (f" [{knobs}]" if knobs else "")
        what = self.workload + (f" ({variant})" if variant else "")
        spread = f"{self.low:.2f}×" if f"{self.low:.2f}" == f"{self.high:.2f}" else f"{self.low:.2f}–{self.high:.2f}×"
        hosts = f"{self.hosts} hosts" if self.hosts == self.fleet_size else f"{self.hosts} of {self.fleet_size} hosts"
        text = (f"{who}: {what} {self.metric} {spread} {self.baseline} across {hosts} "
                f"(median {self.median:.2f}×, geometric mean {self.geomean:.2f}×; "
                f"resolved on {self.resolved} of {self.hosts}")
        if self.high / self.low > 1.05:  # the hosts disagree: say where it costs most
            text += f"; highest on {self.worst_host}"
        return text + ")"

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "params": self.params, "platform": self.platform, "label": self.label,
                "knobs": self.knobs, "metric": self.metric, "baseline": self.baseline, "hosts": self.hosts,
                "min": self.low, "median": self.median, "max": self.high, "geomean": self.geomean,
                "resolved": self.resolved,
                "per_host": {h: {"ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high, "n": c.n}
                             for h, c in self.per_host.items()}}


def is_fleet(comparisons: list[Comparison]) -> bool:
    return len(hosts_of(comparisons)) >= 2


def fleet_rows(comparisons: list[Comparison], metrics: tuple[str, ...] | None = FLEET_METRICS) -> list[FleetRow]:
    """One row per comparison across hosts (A/A entries and emulated cells left out); [] with one host.

    ``metrics=None`` takes every metric.
    """
    if not is_fleet(comparisons):
        return []
    fleet = hosts_of(comparisons)
    rows: dict[tuple[str, ...], FleetRow] = {}
    for c in comparisons:
        # a host whose sides ran on different devices has no platform ratio to spread (its sentence says why)
        if c.is_aa or c.emulated or c.verdict == NOT_COMPARABLE or (metrics is not None and c.metric not in metrics):
            continue
        key = (c.workload, json.dumps(c.params, sort_keys=True), c.label, json.dumps(c.knobs, sort_keys=True),
               c.metric)
        row = rows.get(key)
        if row is None:
            row = rows[key] = FleetRow(c.workload, c.params, c.platform, c.label, c.knobs, c.metric, c.baseline,
                                       fleet_size=len(fleet))
        row.per_host[c.host] = c
    for row in rows.values():
        row.per_host = {h: row.per_host[h] for h in fleet if h in row.per_host}
    # e2e first (what the headline reads), then the other metrics; comparisons' order within each
    return sorted(rows.values(), key=lambda r: r.metric != "e2e")


def _variants(comparisons: list[Comparison]) -> dict[str, set[str]]:
    """workload -> the parameters that vary between its variants (a sweep), to tell rows apart."""
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    variants: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for c in comparisons:  # each distinct parameter set once: a study has many comparisons per variant
        variants[c.workload].setdefault(json.dumps(c.params, sort_keys=True, default=str), c.params)
    for workload, distinct in variants.items():
        names = {k for p in distinct.values() for k in p}
        for p in distinct.values():
            for k in names:  # a key absent from one variant varies as well (None against a value)
                values[workload][k].add(json.dumps(p.get(k), sort_keys=True, default=str))
    return {w: {k for k, seen in vs.items() if len(seen) > 1} for w, vs in values.items()}


def variant_of(row: FleetRow | Comparison, varying: dict[str, set[str]]) -> str:
    return ", ".join(f"{k}={row.params.get(k)}" for k in sorted(varying.get(row.workload, set())))


def headlines(comparisons: list[Comparison]) -> list[str]:
    """One sentence per platform entry's e2e across the fleet; [] with one host."""
    varying = _variants(comparisons)
    return [row.headline(variant_of(row, varying)) for row in fleet_rows(comparisons, ("e2e",))]


def _ci(c: Comparison) -> str:
    return "n/a" if c.ci_low is None or c.ci_high is None else f"{c.ci_low:.3f}–{c.ci_high:.3f}"


def _cell(c: Comparison | None) -> str:
    if c is None:
        return "-"
    return f"{c.ratio:.3f} [{_ci(c)}]" + ("" if c.ci_low is None else "" if resolved(c) else " ≈")


def _platform(c: Comparison | FleetRow) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(c.knobs.items()) if k != "threads")
    return c.platform + (f" [{knobs}]" if knobs else "") + (" (A/A)" if getattr(c, "is_aa", False) else "")


def _entry(c: Comparison, varying: dict[str, set[str]]) -> str:
    variant = variant_of(c, varying)
    return f"{c.workload}" + (f" ({variant})" if variant else "") + f": {_platform(c)}"


def host_labels(hosts_meta: dict[str, Any] | None, host: str) -> str:
    """The runner's labels of a host (store meta ``hosts``), as k=v."""
    labels = ((hosts_meta or {}).get(host) or {}).get("labels") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) if isinstance(labels, dict) else str(labels)


def fleet_views(comparisons: list[Comparison], hosts_meta: dict[str, Any] | None = None) -> list[View]:
    """The fleet table (each comparison spread over hosts) and the host × comparison table; [] with one host."""
    rows = fleet_rows(comparisons)
    if not rows:
        return []
    varying = _variants(comparisons)
    fleet = hosts_of(comparisons)
    fleet_table = Table(
        "tab-fleet", f"Across the fleet: each platform's ratio to the baseline of its own host ({len(fleet)} hosts)",
        "", ["workload", "platform", "metric", "hosts", "min ×", "median ×", "max ×", "geometric mean ×",
             "resolved", "per host (×, n)"],
        [[row.workload + (f" ({variant_of(row, varying)})" if variant_of(row, varying) else ""),
          _platform(row), row.metric, f"{row.hosts}/{row.fleet_size}", f"{row.low:.3f}",
          f"{row.median:.3f}", f"{row.high:.3f}", f"{row.geomean:.3f}", f"{row.resolved}/{row.hosts}",
          "; ".join(f"{h} {c.ratio:.3f} (n={c.n})" for h, c in row.per_host.items())] for row in rows],
        note="every ratio pairs a platform with the baseline of the same host, never another host's; resolved: "
             "hosts whose 95% CI (Welch, logs) excludes 1")
    e2e = [c for c in comparisons if c.metric == "e2e" and not c.emulated]
    columns: dict[tuple[str, ...], str] = {}
    for c in e2e:
        columns.setdefault((c.workload, json.dumps(c.params, sort_keys=True), c.label,
                            json.dumps(c.knobs, sort_keys=True)), _entry(c, varying))
    index = {(c.host, c.workload, json.dumps(c.params, sort_keys=True), c.label,
              json.dumps(c.knobs, sort_keys=True)): c for c in e2e}
    with_labels = any(host_labels(hosts_meta, h) for h in fleet)
    host_rows = []
    for host in fleet:
        row = [host] + ([host_labels(hosts_meta, host)] if with_labels else [])
        row += [_cell(index.get((host, *key))) for key in columns]
        host_rows.append(row)
    per_host = Table("tab-hosts", "E2E ratio to the baseline, host by host (95% CI; ≈: not resolved; -: no "
                                  "comparison on that host)", "",
                     ["host", *(["labels"] if with_labels else []), *columns.values()], host_rows,
                     note="a host without a baseline run has no comparison: its cells are not set against "
                          "another host's baseline")
    return [fleet_table, per_host]

"""What every view builder shares: the view types, the context, formatting, and the
registry the families add their builders to."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.attribution import Attribution, attribute
from isobench.analysis.compare import Comparison
from isobench.analysis.groups import Group
from isobench.store import Store

PB = "Park & Bahn 2023"
PR = "Prashanthi et al. 2023"
SS = "Samani & Salehi"
SJ = "Siddaramanna & John"


@dataclass
class Table:
    id: str
    title: str
    paper: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    id: str
    title: str
    paper: str
    kind: str
    data: dict[str, Any]
    note: str = ""
    #: the numbers behind the figure, for Markdown and for readers of the HTML
    table: Table | None = None


@dataclass
class Skipped:
    id: str
    title: str
    paper: str
    reason: str


View = Table | Figure | Skipped


@dataclass
class Context:
    store: Store
    groups: list[Group]
    comparisons: list[Comparison]
    baseline_key: str
    platform_order: list[str]
    cells: dict[str, ev.CellInfo] = field(default_factory=dict)
    #: platform key -> its engine as a comparable value (PlatformEntry.engine_key: plugin, runtime,
    #: runsc platform, image, options); empty where the stored study could not be read
    engines: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _attributions: list[Attribution] | None = None

    def attributions(self) -> list[Attribution]:
        """Each resolved overhead's mechanisms (analysis/attribution.py), computed once for the
        "why" tables and the hints that read them."""
        if self._attributions is None:
            self._attributions = attribute(self.store, self.comparisons, self.baseline_key)
        return self._attributions

    def on_host(self, g: Group | Comparison) -> str:
        """A suffix naming the group's host where the study ran on several hosts (a bar or column each)."""
        return f" on {g.host}" if len({o.host for o in self.groups}) > 1 else ""

    def same_engine(self, key: str, other: str) -> bool:
        """The two entries run the same engine (an intervention's entry differs in its knobs only):
        gVisor on ptrace is not gVisor on systrap with its data copied in."""
        if key in self.engines and other in self.engines:
            return self.engines[key] == self.engines[other]
        plugin = {g.platform_key: g.platform for g in self.groups}
        return plugin.get(key) == plugin.get(other)

    def group_of(self, cell_id: str) -> Group | None:
        info = self.cells.get(cell_id)
        if info is None:
            return None
        return next((g for g in self.groups if g.key == info.group_key), None)


Builder = Callable[[Context], list[View]]
#: builder name -> (rank, builder); the report shows the families' views by rank, lowest first
_BUILDERS: dict[str, tuple[int, Builder]] = {}


def builder(rank: int) -> Callable[[Builder], Builder]:
    """Register a family's builder; ``rank`` fixes where its views come in the report."""

    def register(build: Builder) -> Builder:
        _BUILDERS[f"{build.__module__}.{build.__qualname__}"] = (rank, build)
        return build

    return register


def builders() -> list[Builder]:
    """The registered builders in report order."""
    return [build for _, (_, build) in sorted(_BUILDERS.items(), key=lambda item: (item[1][0], item[0]))]


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def fmt_num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def groups_by_workload(ctx: Context) -> list[tuple[str, list[Group]]]:
    """The study's groups per workload, workloads by name and each one's groups in report order."""
    by_workload: dict[str, list[Group]] = {}
    for g in ctx.groups:
        by_workload.setdefault(g.workload, []).append(g)
    return [(w, ordered_groups(ctx, groups)) for w, groups in sorted(by_workload.items())]


def ordered_groups(ctx: Context, groups: list[Group]) -> list[Group]:
    order = {key: i for i, key in enumerate(ctx.platform_order)}
    return sorted(groups, key=lambda g: (g.workload, order.get(g.platform_key, 99), json.dumps(g.knobs, sort_keys=True),
                                         g.host))


def stacked_figure(fig_id: str, title: str, paper: str, labels: list[str], keys: list[str],
                   stacks: dict[str, list[float]], quantity: str) -> Figure:
    rows = [[label, *(fmt_ms(stacks[s][i]) for s in stacks), fmt_ms(sum(stacks[s][i] for s in stacks))]
            for i, label in enumerate(labels)]
    table = Table(fig_id + "-data", title, paper, ["platform", *(f"{s} (ms)" for s in stacks), "total (ms)"], rows)
    return Figure(fig_id, title, paper, "stacked",
                  {"labels": labels, "keys": keys, "stacks": stacks, "xlabel": f"{quantity} (ms)", "scale": 1e3},
                  table=table)


def knobs_text(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()) if k != "threads")

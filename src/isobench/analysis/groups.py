"""The groups of a study's measured cells: one per workload x platform entry x knob set x host,
each with its cells in run order and every metric's values, read from the store in bulk and
built once per state of the store (analysis/compare.py compares them with the baseline)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from isobench.analysis.blocked import Point, screen, shared_flag
from isobench.store import Store


@dataclass
class Group:
    """The finished, non-warm-up cells of one workload × platform entry × knob set."""

    workload: str
    params: dict[str, Any]
    platform: str
    platform_key: str
    display: str
    knobs: dict[str, Any]
    metrics: dict[str, list[float]]
    units: dict[str, str]
    failed: int = 0
    #: metric -> [(repetition, value)] in run order, to name outlier repetitions
    reps: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    #: a cell of this group ran under emulation (e.g. a VM under TCG): its times measure the emulator
    emulated: bool = False
    #: the host the cells ran on (see host_of); a study spread over a cluster has one group per host
    host: str = ""
    #: metric -> the values with what pairs them (round, duet pair), for the blocked analysis
    points: dict[str, list[Point]] = field(default_factory=lambda: defaultdict(list))
    #: contaminated cells (interference flag): how many, how many gave way to a re-run, why
    contaminated: int = 0
    rerun: int = 0
    contamination_reasons: list[str] = field(default_factory=list)
    #: flagged cells of trading duet pairs whose members met the disturbance alike: kept, valid
    shared_contaminated: int = 0
    #: a duet's cells: the share of each pair's measured window in which both members measured
    duet_overlaps: list[float] = field(default_factory=list)
    #: the engine and runtime versions its cells ran on (runtime_versions.py)
    versions: dict[str, str] = field(default_factory=dict)
    #: the devices its cells report running on (platform_info.workload.device: cpu, cuda); empty when the
    #: workload reports none. ``device: auto`` follows what the platform can see, so two groups may differ.
    devices: set[str] = field(default_factory=set)
    #: the measured cells, in run order, as a duet pairs them (Point less its value)
    cells: list[Point] = field(default_factory=list)
    #: metric -> the position in ``cells`` of each value in ``metrics[metric]``
    positions: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    def complete(self, metric: str) -> bool:
        """Every cell has a value of ``metric``: its values line up with ``cells``."""
        return len(self.positions.get(metric, ())) == len(self.cells)

    @property
    def kept_contaminated(self) -> int:
        return self.contaminated - self.rerun

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.workload, json.dumps(self.params, sort_keys=True), self.platform_key,
                json.dumps(self.knobs, sort_keys=True), self.host)


def host_of(platform_info: dict[str, Any] | str | None) -> str:
    """The host a cell ran on: the runner's ``host_key``; stores written before it, the hostname."""
    if isinstance(platform_info, str):
        platform_info = json.loads(platform_info) if platform_info else None
    if not isinstance(platform_info, dict):
        return ""
    return str(platform_info.get("host_key") or platform_info.get("host") or "")


def versions_of(platform_info: dict[str, Any] | str | None) -> dict[str, str]:
    """The engine and runtime versions a cell recorded ({} for the host itself, or an older store)."""
    if isinstance(platform_info, str):
        platform_info = json.loads(platform_info) if platform_info else {}
    found = platform_info.get("versions") if isinstance(platform_info, dict) else None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def device_of(platform_info: dict[str, Any]) -> str:
    """The device a cell's workload says it ran on ("cpu", "cuda"); "" when it reports none."""
    facts = platform_info.get("workload")
    device = facts.get("device") if isinstance(facts, dict) else None
    return str(device) if device else ""


def _merge_versions(into: dict[str, str], found: dict[str, str]) -> None:
    """A group whose cells ran on different versions (an upgrade mid-study) names each: "1.1.5 | 1.1.12"."""
    for name, version in found.items():
        seen = into.get(name)
        if seen is None:
            into[name] = version
        elif version not in seen.split(" | "):
            into[name] = f"{seen} | {version}"


def load_groups(store: Store) -> list[Group]:
    """The groups of the store's finished cells; built once per state of the store and shared
    between the analysis' readers (read-only)."""
    return store.memo("groups", lambda: _load_groups(store))


def _load_groups(store: Store) -> list[Group]:
    """One pass over the cells (each cell's JSON parsed once) and one over the metrics, in bulk:
    a store of thousands of cells holds hundreds of thousands of metric rows."""
    cells = store.cells()
    excluded, fate = screen([(c["cell_id"], c["status"], c["platform_info"] or {}) for c in cells])
    metrics = store.metrics_by_cell()
    groups: dict[tuple[str, ...], Group] = {}
    keyed = [(_group_key(cell), cell) for cell in cells]
    for key, cell in keyed:  # in run order (seq), so every list of a group is too
        own = metrics.get(cell["cell_id"]) if cell["cell_id"] not in excluded else None
        if not own:
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(cell["workload_key"], cell["params"], cell["platform"],
                                        cell["platform_key"], cell["display"], cell["knobs"],
                                        defaultdict(list), {}, host=key[-1])
            group.points = PerMetric(group, lambda c, v: c._replace(value=v))  # type: ignore[assignment]
            group.reps = PerMetric(group, lambda c, v: (c.rep, v))  # type: ignore[assignment]
        _add_cell(group, cell, cell["platform_info"] or {}, own)
    for key, cell in keyed:
        group = groups.get(key)
        if group is None:
            continue
        if cell["cell_id"] in fate:  # excluded, yet its group counts it and why
            rerun, reason = fate[cell["cell_id"]]
            group.contaminated += 1
            group.rerun += rerun
            group.contamination_reasons.append(reason)
        if cell["cell_id"] in excluded:
            continue
        info = cell["platform_info"] or {}
        shared = (info.get("duet") or {}).get("overlap") if isinstance(info.get("duet"), dict) else None
        if isinstance(shared, int | float):
            group.duet_overlaps.append(float(shared))
        if shared_flag(info):
            group.shared_contaminated += 1
        if cell["status"] != "ok":  # a failed try that a re-run replaced is excluded: no loss
            group.failed += 1
    return list(groups.values())


def _group_key(cell: dict[str, Any]) -> tuple[str, ...]:
    return (cell["workload_key"], json.dumps(cell["params"], sort_keys=True), cell["platform_key"],
            json.dumps(cell["knobs"], sort_keys=True), host_of(cell["platform_info"] or {}))


def _add_cell(group: Group, cell: dict[str, Any], info: dict[str, Any],
              metrics: list[tuple[str, float, str]]) -> None:
    _merge_versions(group.versions, versions_of(info))
    device = device_of(info)
    if device:
        group.devices.add(device)
    if info.get("emulated"):
        group.emulated = True
    duet = info.get("duet") if isinstance(info.get("duet"), dict) else {}
    pair = None if duet.get("pair") is None else str(duet["pair"])
    side = None if duet.get("side") is None else str(duet["side"])
    position = len(group.cells)
    group.cells.append(Point(cell["rep"], math.nan, cell["cell_id"], pair, duet.get("partner"), side))
    values, positions, units = group.metrics, group.positions, group.units
    for metric, value, unit in metrics:  # a million values at fleet scale: two appends each, no more
        values[metric].append(value)
        positions[metric].append(position)
        units[metric] = unit


class PerMetric(Mapping[str, list[Any]]):
    """metric -> a list built from a group's ``cells`` and values on first use (a group's points
    and repetitions): most metrics' are never asked for. A metric the group lacks reads as []."""

    def __init__(self, group: Group, make: Callable[[Point, float], Any]) -> None:
        self._group, self._make = group, make
        self._built: dict[str, list[Any]] = {}

    def __getitem__(self, metric: str) -> list[Any]:
        built = self._built.get(metric)
        if built is None:
            cells = self._group.cells
            built = self._built[metric] = [self._make(cells[i], v) for i, v in zip(
                self._group.positions.get(metric, ()), self._group.metrics.get(metric, ()), strict=True)]
        return built

    def __contains__(self, metric: object) -> bool:
        return metric in self._group.positions

    def __iter__(self) -> Iterator[str]:
        return iter(self._group.positions)

    def __len__(self) -> int:
        return len(self._group.positions)



"""The core layout: which cores a cell gets, and which the harness keeps.

A cell that takes every core competes with the runner, the probes' samplers, the record
channel and the container engine; on a 2-core host that contention, not the platform, is
what gets measured (gVisor read 1.64× with 2 torch threads on 2 cores and 1.07× with one).
So by default (``cell_cores: disjoint``) the harness keeps the lowest-numbered core and
the cell gets the others, its torch threads following them. A duet splits the cell cores
into two sides, one per cell of a pair; on a 2-core host the two sides take one core each
and the harness shares them (it only waits on pipes while the pair runs).

``cell_cores: all`` gives each cell every core, as before; the cells' knobs (a cpuset, a
CPU quota, a placement) always win over the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from isobench.hostinfo import cpu_list, host_cpus

if TYPE_CHECKING:
    from isobench.plan.cell import Cell
    from isobench.study.model import Study

#: knobs that choose the cell's cores themselves: the layout leaves such a cell alone (a CPU quota,
#: ``cpus``, keeps the layout's cores when it fits on them, else it may spread over every core)
CORE_KNOBS = ("cpuset", "placement", "chr", "reserve_idle_cores", "numa_node")


@dataclass(frozen=True)
class CoreLayout:
    mode: str  # "disjoint" | "all"
    #: the harness's cores (empty: it is not pinned)
    harness: list[int] = field(default_factory=list)
    #: one list of cores per side: one side for a sequential study, two for a duet
    sides: list[list[int]] = field(default_factory=list)

    def describe(self) -> dict[str, object]:
        return {"layout": self.mode, "harness": cpu_list(self.harness) if self.harness else "shared",
                "sides": [cpu_list(side) for side in self.sides]}


def core_layout(study: Study, cores: list[int] | None = None) -> CoreLayout:
    """The layout for ``study`` on a host with ``cores`` (default: this process's CPUs)."""
    cores = sorted(cores if cores is not None else host_cpus())
    duet = study.schedule == "duet"
    if study.cell_cores == "all" or len(cores) < 2:
        if duet and len(cores) >= 2:
            half = len(cores) // 2
            return CoreLayout("all", [], [cores[:half], cores[half:2 * half]])
        return CoreLayout("all", [], [cores])
    if duet:
        # Two sides of equal size; the harness keeps a core of its own only when one is left over.
        spare = cores[1:] if len(cores) >= 3 else cores
        half = len(spare) // 2
        harness = cores[:1] if len(cores) >= 3 else []
        return CoreLayout("disjoint", harness, [spare[:half], spare[half:2 * half]])
    return CoreLayout("disjoint", cores[:1], [cores[1:]])


def assign_cores(study: Study, cells: list[Cell], cores: list[int] | None = None) -> list[Cell]:
    """Give each cell whose knobs choose no cores its side's cores (``Cell.cores``) on a host with
    ``cores`` (default: this process's CPUs; a cluster node passes its own)."""
    layout = core_layout(study, cores)
    if layout.mode == "all" and study.schedule != "duet":
        return cells
    placed = []
    for cell in cells:
        side = (cell.duet.side if cell.duet else 0) % len(layout.sides)
        quota = cell.knobs.get("cpus")
        if any(cell.knobs.get(k) is not None for k in CORE_KNOBS) or (quota is not None
                                                                       and quota > len(layout.sides[side])):
            placed.append(cell)
            continue
        placed.append(replace(cell, cores=cpu_list(layout.sides[side])))
    return placed

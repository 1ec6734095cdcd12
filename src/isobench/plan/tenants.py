"""Tenant groups: N cells that run at once on one platform entry.

``tenants: N`` on a platform entry (or the study) turns each of the entry's cells into a
group of N cells with the same workload; ``tenants: [a, b, b]`` (workload keys) makes one
group per round of one cell per listed workload (mixed tenants). Members get the id of
the cell they replace plus ``/t<i>`` and carry a ``Cell.tenant``
(:class:`~isobench.plan.cell.TenantInfo`: index, count, group); they stay next to each other
in the plan, so the runner can start them together and store them in one transaction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import TYPE_CHECKING

from isobench.plan.cell import Cell, TenantInfo

if TYPE_CHECKING:
    from isobench.study.model import PlatformEntry, Study

MAX_TENANTS = 64


def tenant_spec(study: Study, entry: PlatformEntry) -> int | list[str]:
    spec = entry.tenants if entry.tenants is not None else study.tenants
    return spec if spec else 1


def validate_tenants(study: Study) -> None:
    """Raise ValueError("field: problem; fix: ...") for impossible tenant settings."""
    workloads = {w.key: w for w in study.workloads}
    for index, entry in enumerate(study.platforms):
        spec = entry.tenants
        where = f"platforms[{index}].tenants"
        if isinstance(spec, int) and not 1 <= spec <= MAX_TENANTS:
            raise ValueError(f"{where}: {spec} tenants; fix: use 1 to {MAX_TENANTS}")
        if isinstance(spec, list):
            if not spec or len(spec) > MAX_TENANTS:
                raise ValueError(f"{where}: a mixed group needs 1 to {MAX_TENANTS} workloads; fix: list workload keys")
            for key in spec:
                if key not in workloads:
                    raise ValueError(f"{where}: {key!r} is no workload of this study; fix: use one of "
                                     f"{', '.join(workloads)}")
                if workloads[key].sweep:
                    raise ValueError(f"{where}: {key!r} sweeps parameters, so a mixed group would be ambiguous; "
                                     "fix: give each variant its own workload entry with a label")


def _knob_digest(cell: Cell) -> str:
    return hashlib.sha1(json.dumps(cell.knobs, sort_keys=True).encode()).hexdigest()[:8]


def _member(cell: Cell, index: int, count: int, group: str) -> Cell:
    from isobench.workloads import WORKLOADS

    # a density group's members come up one by one: they wait for each other before they hold
    waits = WORKLOADS.get(cell.workload).density
    return replace(cell, cell_id=f"{cell.cell_id}/t{index}",
                   tenant=TenantInfo(index, count, group, start_line=waits))


def assign_tenants(study: Study, cells: list[Cell]) -> list[Cell]:
    """Replace the cells of tenant entries by their groups (plan order kept, seq renumbered)."""
    entries = {p.key: p for p in study.platforms}
    slots: list[list[Cell]] = []
    mixed: dict[str, tuple[int, dict[str, Cell]]] = {}
    for cell in cells:
        spec = tenant_spec(study, entries[cell.platform_key])
        if isinstance(spec, int):
            slots.append([cell] if spec == 1 else [_member(cell, i, spec, cell.cell_id) for i in range(spec)])
            continue
        if cell.workload_key not in spec:
            continue
        tag = cell.cell_id.rsplit("/", 1)[-1]
        group = f"tenants@{cell.platform_key}~{_knob_digest(cell)}/{tag}"
        if group not in mixed:
            mixed[group] = (len(slots), {})
            slots.append([])
        mixed[group][1][cell.workload_key] = cell
    for group, (slot, by_key) in mixed.items():
        spec = tenant_spec(study, entries[next(iter(by_key.values())).platform_key])
        assert isinstance(spec, list)
        slots[slot] = [_member(by_key[key], i, len(spec), group) for i, key in enumerate(spec)]
    return [replace(cell, seq=seq) for seq, cell in enumerate(c for slot in slots for c in slot)]

"""The cell groups a study's plan has, as the findings' analysis sees them: one per workload,
entry and resolved knobs (measured cells only). Shared by the tests that check a finding's
checks name cells the study actually runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def planned_groups(study: Any) -> list[SimpleNamespace]:
    from isobench.plan import expand

    seen: dict[str, SimpleNamespace] = {}
    for cell in expand(study, repetitions=1):
        if not cell.warmup:
            key = f"{cell.workload_key}|{cell.platform_key}|{sorted(cell.knobs.items())}"
            seen[key] = SimpleNamespace(workload=cell.workload_key, platform_key=cell.platform_key,
                                        knobs=dict(cell.knobs))
    return list(seen.values())

"""A cell: one workload variant on one platform entry with one set of knob values, in one round.

A cell carries everything needed to run it (plan/cells.py builds them from a study); its
place in a duet pair or tenant group rides along as :class:`DuetInfo` / :class:`TenantInfo`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from isobench.hostinfo import parse_cpu_list

T = TypeVar("T")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class DuetInfo:
    """A cell's place in a duet pair (plan/duet.py): its two cells start behind one barrier."""

    #: the pair's id: its round and compared group
    pair: str
    #: the compared group the pair measures (the adaptive schedule follows it)
    group: str
    #: which side of the core layout the cell takes (0 or 1; swapped every round)
    side: int
    #: the other member's platform entry
    partner: str
    #: the pair trades cores every this many seconds while it runs (0: each keeps its side's)
    swap_s: float = 0.0


@dataclass(frozen=True)
class TenantInfo:
    """A cell's place in a tenant group (plan/tenants.py): N cells started together."""

    index: int
    count: int
    group: str
    #: the members wait at a start line until every one is up (a density group: Workload.density)
    start_line: bool = False


@dataclass(frozen=True)
class Cell:
    """Everything needed to run one cell: running it depends on nothing else."""

    study: str
    cell_id: str
    seq: int
    workload: str
    workload_key: str
    params: dict[str, Any]
    platform: str
    platform_key: str
    platform_entry: dict[str, Any]
    knobs: dict[str, Any]
    rep: int
    warmup: bool
    seed: int
    timeout_s: float
    data_key: str | None = None
    data_dir: str | None = None
    #: set on the two cells of a duet pair
    duet: DuetInfo | None = None
    #: set on the members of a tenant group
    tenant: TenantInfo | None = None
    #: times the cluster re-ran this cell's unit after losing its node, and the last node lost
    reruns: int = 0
    lost_on: str | None = None
    #: probe name -> settings, attached around this cell on the host (not part of the cell id)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the host reaches a port in the cell (serving): the platform gives it a network
    network: bool = False
    #: host directory mounted read-write at the same path (trained models); set by the runner
    artifacts_dir: str | None = None
    #: more host directories the cell sees read-only at the same path (a user's script)
    mounts: list[str] = field(default_factory=list)
    #: the cores the plan's core layout gives the cell (plan/cores.py) when its knobs choose none;
    #: not a knob, so it never splits a group (a duet swaps sides every round)
    cores: str | None = None
    #: the share of its cores' time lost to steal or other tasks above which the cell is contaminated
    contamination_threshold: float = 0.10
    #: untimed items at the start of the cell (the workload's lazy set-up), see CellContext
    warmup_items: int = 0

    @property
    def group(self) -> str:
        return group_key(self.workload_key, self.params, self.platform_key, self.knobs)

    def effective_knobs(self) -> dict[str, Any]:
        """The knobs the platform and the worker apply: the study's, plus the layout's cores as a
        cpuset, and torch threads following those cores when the study sets none."""
        knobs = dict(self.knobs)
        if self.cores is not None and knobs.get("cpuset") is None:
            knobs["cpuset"] = self.cores
            if knobs.get("threads") is None:
                knobs["threads"] = len(parse_cpu_list(self.cores))
        return knobs

    def to_json(self) -> str:
        return canonical_json(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Cell:
        fields = json.loads(text)
        duet, tenant = fields.pop("duet", None), fields.pop("tenant", None)
        return cls(**fields, duet=DuetInfo(**duet) if duet else None, tenant=TenantInfo(**tenant) if tenant else None)

    def worker_payload(self) -> dict[str, Any]:
        """What the worker inside the platform needs (no host-only details)."""
        return {"cell_id": self.cell_id, "workload": self.workload, "params": self.params,
                "knobs": self.effective_knobs(), "seed": self.seed, "data_dir": self.data_dir,
                "artifacts_dir": self.artifacts_dir, "platform_key": self.platform_key, "cores": self.cores,
                "warmup_items": self.warmup_items}


def closest_by_knobs(knobs: dict[str, Any], same_variant: list[T]) -> T | None:
    """The candidate (of the same workload variant) whose knobs are ``knobs``, else the one sharing
    most of them: a baseline that sweeps fewer knobs matches on those it has. Used to pick a
    comparison's baseline (analysis) and a duet pair's baseline cell (plan)."""
    if not same_variant:
        return None
    exact = [c for c in same_variant if c.knobs == knobs]  # type: ignore[attr-defined]
    if exact:
        return exact[0]
    return max(same_variant, key=lambda c: sum(knobs.get(k) == v for k, v in c.knobs.items()))  # type: ignore[attr-defined]


def group_key(workload_key: str, params: dict[str, Any], platform_key: str, knobs: dict[str, Any]) -> str:
    digest = hashlib.sha1(canonical_json([params, knobs]).encode()).hexdigest()[:8]
    return f"{workload_key}@{platform_key}~{digest}"

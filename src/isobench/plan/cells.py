"""Expand a study into cells: workload × platform × knob values × repetition.

Every repetition round holds one cell of every group, in an order shuffled by the
study's seed, so drift (thermal, page cache, a neighbour's load) hits all platforms
alike. Warm-up rounds come first and are stored but never analysed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from isobench.hostinfo import parse_cpu_list
from isobench.study.model import Study, knob_combinations

T = TypeVar("T")


def _canonical(value: Any) -> str:
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
        return _canonical(asdict(self))

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
    digest = hashlib.sha1(_canonical([params, knobs]).encode()).hexdigest()[:8]
    return f"{workload_key}@{platform_key}~{digest}"


def _workload_variants(study: Study) -> list[tuple[str, str, dict[str, Any]]]:
    variants = []
    for entry in study.workloads:
        keys = sorted(entry.sweep)
        for values in itertools.product(*(entry.sweep[k] for k in keys)):
            params = {**entry.params, **dict(zip(keys, values, strict=True))}
            variants.append((entry.name, entry.key, params))
    return variants


def expand(study: Study, repetitions: int | None = None) -> list[Cell]:
    """All cells of the study in the order they run; ``repetitions`` overrides the measured
    rounds (adaptive studies grow it; earlier cells keep their ids and order)."""
    from isobench.workloads import WORKLOADS

    groups: list[dict[str, Any]] = []
    for (workload, workload_key, params), platform in itertools.product(
            _workload_variants(study), study.platforms):
        params_cls = WORKLOADS.get(workload).Params
        if study.min_seconds is not None and "min_seconds" in params_cls.model_fields and "min_seconds" not in params:
            params = {**params, "min_seconds": study.min_seconds}  # cells sized in seconds, not items
        params_model = params_cls(**params)
        full_params = params_model.model_dump()
        data_key = WORKLOADS.get(workload).data_key(params_model)
        consumes = WORKLOADS.get(workload).artifact_flow(params_model)[1] is not None
        for knobs in knob_combinations({**study.knobs, **platform.knobs}):
            knobs = {k: v for k, v in knobs.items() if v is not None}
            groups.append({"workload": workload, "workload_key": workload_key, "params": full_params,
                           "platform": platform.name, "platform_key": platform.key,
                           "platform_entry": platform.model_dump(exclude={"knobs"}),
                           "knobs": knobs, "data_key": data_key,
                           "network": WORKLOADS.get(workload).needs_network, "_consumes": consumes,
                           "mounts": list(WORKLOADS.get(workload).host_paths(params_model))})

    from isobench.probes.session import default_probe_config

    probes = default_probe_config() if study.probes is None else study.probes
    cells: list[Cell] = []
    rounds = [(True, r) for r in range(study.warmup)] + [(False, r) for r in range(
        study.initial_repetitions if repetitions is None else repetitions)]
    for round_index, (warmup, rep) in enumerate(rounds):
        order = list(range(len(groups)))
        shuffle = random.Random(f"{study.seed}:{round_index}")
        shuffle.shuffle(order)
        # Within a round, each workload variant's cells run back to back (the variants' order
        # shuffled too): the host's speed drifts over tens of seconds, and a comparison pairs
        # cells of one variant, so the shorter the stretch they share, the less drift is left.
        variants = list(dict.fromkeys((groups[i]["workload_key"], _canonical(groups[i]["params"])) for i in order))
        rank = {variant: n for n, variant in enumerate(variants)}
        # A cell that loads an artifact (a trained model) runs after the round's producers.
        order.sort(key=lambda i: (groups[i]["_consumes"],
                                  rank[(groups[i]["workload_key"], _canonical(groups[i]["params"]))]))
        for index in order:
            group = groups[index]
            gkey = group_key(group["workload_key"], group["params"], group["platform_key"], group["knobs"])
            tag = f"w{rep}" if warmup else f"r{rep}"
            cells.append(Cell(study=study.name, cell_id=f"{gkey}/{tag}", seq=len(cells),
                              rep=rep, warmup=warmup, seed=study.seed + rep, timeout_s=study.timeout_s,
                              contamination_threshold=study.contamination_threshold,
                              warmup_items=study.warmup_items,
                              probes=probes, **{k: v for k, v in group.items() if k != "_consumes"}))
    from isobench.plan.cores import assign_cores
    from isobench.plan.duet import pair_for_duet
    from isobench.plan.placement import resolve_cells
    from isobench.plan.tenants import assign_tenants

    cells = resolve_cells(assign_tenants(study, cells))
    if study.schedule == "duet":
        cells = pair_for_duet(study, cells)
    return assign_cores(study, cells)

"""Expand a study into cells: workload × platform × knob values × repetition.

Every repetition round holds one cell of every group, in an order shuffled by the
study's seed, so drift (thermal, page cache, a neighbour's load) hits all platforms
alike. Warm-up rounds come first and are stored but never analysed.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from isobench.plan.cell import Cell, DuetInfo, TenantInfo, canonical_json, closest_by_knobs, group_key
from isobench.plan.cores import assign_cores
from isobench.plan.duet import pair_for_duet
from isobench.plan.placement import resolve_cells
from isobench.plan.tenants import assign_tenants
from isobench.study.model import Study, knob_combinations

__all__ = ["Cell", "DuetInfo", "TenantInfo", "closest_by_knobs", "expand", "group_key"]


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
        variants = list(dict.fromkeys((groups[i]["workload_key"], canonical_json(groups[i]["params"])) for i in order))
        rank = {variant: n for n, variant in enumerate(variants)}
        # A cell that loads an artifact (a trained model) runs after the round's producers.
        order.sort(key=lambda i: (groups[i]["_consumes"],
                                  rank[(groups[i]["workload_key"], canonical_json(groups[i]["params"]))]))
        for index in order:
            group = groups[index]
            gkey = group_key(group["workload_key"], group["params"], group["platform_key"], group["knobs"])
            tag = f"w{rep}" if warmup else f"r{rep}"
            cells.append(Cell(study=study.name, cell_id=f"{gkey}/{tag}", seq=len(cells),
                              rep=rep, warmup=warmup, seed=study.seed + rep, timeout_s=study.timeout_s,
                              contamination_threshold=study.contamination_threshold,
                              warmup_items=study.warmup_items,
                              probes=probes, **{k: v for k, v in group.items() if k != "_consumes"}))
    cells = resolve_cells(assign_tenants(study, cells))
    if study.schedule == "duet":
        cells = pair_for_duet(study, cells)
    return assign_cores(study, cells)

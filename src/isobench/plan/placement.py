"""Placement and host knobs: what a study asks for, resolved to concrete knobs at plan time.

- ``placement: pinned | vanilla`` with a core count N gives either a cpuset of N cores
  (pinned: only those cores run the cell, the others stay idle) or a CFS quota of N
  cores (vanilla: the scheduler spreads the cell over every core), as in Samani & Salehi.
- N comes from ``chr`` (container-to-host core ratio: N = round(chr × host cores)), else
  from ``cpus`` (whole cores for pinned), else every core not reserved.
- ``reserve_idle_cores: R`` keeps R host cores free of the cell. Pinned cells take their
  cores after the R lowest-numbered ones (core 0 usually takes the most interrupts and
  housekeeping); a vanilla cell can only be held to the capacity of the other cores.
- ``numa_node: K`` binds the cell to node K's cores (and its memory, applied by the
  platform): available only on hosts with more than one node.

The knobs as written stay in the cell next to the resolved ``cpus``/``cpuset``, so every
stored cell says both what was asked and what was applied.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isobench.errors import UserError
from isobench.hostinfo import host_cpus, numa_nodes

if TYPE_CHECKING:
    from isobench.plan.cell import Cell
    from isobench.study.model import Knobs

# ISOBENCH_SYSFS_ROOT (test/advanced hook): read and write cpufreq under another root, e.g. a
# fake tree where the host has none; it reaches the runner process, which applies the knobs
CPU_SYS = Path(os.environ.get("ISOBENCH_SYSFS_ROOT", "/sys")) / "devices/system/cpu"
PLACEMENT_KNOBS = ("placement", "chr", "reserve_idle_cores", "numa_node")
CPUFREQ_KNOBS = ("governor", "max_freq")
JETSON_KNOBS = {"power_mode": "nvpmodel", "jetson_clocks": "jetson_clocks"}
def check_knob_combination(knobs: Knobs) -> None:
    """Host-independent contradictions (raised as ValueError "problem; fix: ...")."""
    asks_placement = knobs.placement or knobs.chr is not None or knobs.reserve_idle_cores or \
        knobs.numa_node is not None
    if asks_placement and knobs.cpuset is not None:
        raise ValueError("cpuset is given together with placement/chr/reserve_idle_cores/numa_node, which "
                         "choose the cores themselves; fix: drop cpuset, or drop the placement knobs")
    if knobs.chr is not None and knobs.cpus is not None:
        raise ValueError("chr and cpus both set the core count; fix: keep one of them")
    if knobs.placement == "pinned" and knobs.cpus is not None and knobs.cpus != int(knobs.cpus):
        raise ValueError(f"pinned placement needs whole cores, got cpus {knobs.cpus}; fix: use a whole number "
                         "of cores, or placement: vanilla")


def cpufreq_files(name: str) -> list[Path]:
    return sorted(CPU_SYS.glob(f"cpu[0-9]*/cpufreq/{name}"))


def host_knob_problems() -> dict[str, str]:
    """Knob -> why this host cannot apply it (absent: it can). Cheap; reads the host only."""
    problems: dict[str, str] = {}
    governors = cpufreq_files("scaling_governor")
    if not governors:
        why = (f"cpufreq is not exposed here ({CPU_SYS}/cpu*/cpufreq is absent; virtual machines usually "
               "hide it)")
        problems.update({k: why for k in CPUFREQ_KNOBS})
    elif not all(path.exists() and _writable(path) for path in governors):
        problems.update({k: "cpufreq files are not writable (run as root)" for k in CPUFREQ_KNOBS})
    for knob, tool in JETSON_KNOBS.items():
        if shutil.which(tool) is None:
            problems[knob] = f"`{tool}` is not installed (NVIDIA Jetson hosts only)"
    nodes = numa_nodes()
    if len(nodes) <= 1:
        problems["numa_node"] = f"this host has {len(nodes) or 1} NUMA node; binding to a node changes nothing"
    return problems


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def resolve_knobs(knobs: dict[str, Any], field: str = "knobs", file: str | None = None) -> dict[str, Any]:
    """Concrete cpus/cpuset for the placement knobs; raise UserError for what this host lacks."""
    from isobench.study.model import Knobs

    try:
        check_knob_combination(Knobs(**knobs))
    except ValueError as err:
        message, _, fix = str(err).partition("; fix: ")
        raise UserError(message, file=file, field=field, fix=fix or None) from None
    problems = host_knob_problems()
    for knob in sorted(set(knobs) & set(problems)):
        if knobs[knob] is not None:
            raise UserError(file=file, message=f"knob {knob!r} is unavailable on this host: {problems[knob]}",
                            field=f"{field}.{knob}", fix="see `isobench doctor`, or drop the knob")
    if "governor" in knobs:
        available = (cpufreq_files("scaling_available_governors") or [None])[0]
        names = available.read_text().split() if available else []
        if names and knobs["governor"] not in names:
            raise UserError(file=file, message=f"governor {knobs['governor']!r} is not offered here", field=f"{field}.governor",
                            fix=f"use one of {', '.join(names)}")
    if not any(knobs.get(k) is not None for k in PLACEMENT_KNOBS):
        return knobs
    cores = host_cpus()
    if knobs.get("numa_node") is not None:
        nodes = numa_nodes()
        if knobs["numa_node"] not in nodes:
            raise UserError(file=file, message=f"NUMA node {knobs['numa_node']} does not exist", field=f"{field}.numa_node",
                            fix=f"use one of {', '.join(map(str, nodes))}")
        cores = [c for c in cores if c in nodes[knobs["numa_node"]]]
    reserve = int(knobs.get("reserve_idle_cores") or 0)
    if reserve >= len(cores):
        raise UserError(file=file, message=f"reserve_idle_cores {reserve} leaves no core for the cell (it may use {len(cores)})",
                        field=f"{field}.reserve_idle_cores", fix=f"use at most {len(cores) - 1}")
    usable = cores[reserve:]
    if knobs.get("chr") is not None:
        count = max(1, round(knobs["chr"] * len(host_cpus())))
    elif knobs.get("cpus") is not None:
        count = knobs["cpus"]
    else:
        count = len(usable)
    if count > len(usable):
        raise UserError(file=file, message=f"{count} cores asked for, {len(usable)} are left for the cell", field=field,
                        fix="lower chr/cpus or reserve_idle_cores")
    resolved = {k: v for k, v in knobs.items() if k not in ("cpus", "cpuset")}
    pinned = knobs.get("placement") == "pinned" or (knobs.get("placement") is None
                                                    and knobs.get("numa_node") is not None)
    if pinned:
        resolved["cpuset"] = ",".join(str(c) for c in usable[:int(count)])
    else:
        resolved["cpus"] = float(count)
    return resolved


def resolve_cells(cells: list[Cell]) -> list[Cell]:
    """Apply :func:`resolve_knobs` to every cell (cached per distinct knob set)."""
    import json

    cache: dict[str, dict[str, Any]] = {}
    resolved = []
    for cell in cells:
        key = json.dumps(cell.knobs, sort_keys=True)
        if key not in cache:
            cache[key] = resolve_knobs(cell.knobs, f"platforms[{cell.platform_key}].knobs")
        resolved.append(cell if cache[key] == cell.knobs else replace(cell, knobs=cache[key]))
    return resolved

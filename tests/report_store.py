"""A study store with known values, for the analysis and report tests (no cells are run)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from isobench.plan import expand
from isobench.probes.base import series_to_ipc
from isobench.probes.session import ProbeOutcome
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text

STUDY = """
name: known
description: a store built from known values
workloads:
  - name: lenet-train
    params: {steps: 10, batch_size: 8}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: docker, knobs: {cpus: 1.0}}
  - {name: docker, label: docker-pinned, knobs: {cpuset: "0"}}
  - {name: docker, label: vm}
baseline: baremetal
knobs: {threads: 1}
repetitions: 6
warmup: 0
"""

#: per-repetition multiplicative noise, rotated per group so groups do not move in lockstep
NOISE = [1.000, 1.012, 0.991, 1.006, 0.995, 1.003]
BASE = {"fetch_stall": 0.002, "forward": 0.003, "backward": 0.004, "optimizer": 0.001, "logging": 0.0002}
#: platform key -> phase multipliers: docker's extra time is in the optimizer step
EFFECT = {"baremetal": {}, "aa": {}, "docker": {"optimizer": 3.4, "forward": 1.02},
          "docker-pinned": {"optimizer": 1.1}, "vm": {"forward": 5.0}}
OUTLIER = ("docker-pinned", 3, 1.6)
#: what the runner would record as each entry's display name
DISPLAY = {"aa": "baremetal", "docker": "docker/runc", "docker-pinned": "docker/runc", "vm": "vm/tcg"}  # (group, repetition, factor)


def phases_for(key: str, rep: int, offset: int) -> dict[str, float]:
    noise = NOISE[(rep + offset) % len(NOISE)]
    if OUTLIER[0] == key and OUTLIER[1] == rep:
        noise *= OUTLIER[2]
    return {p: v * EFFECT[key].get(p, 1.0) * noise for p, v in BASE.items()}


def expected_e2e(key: str) -> float:
    return sum(v * EFFECT[key].get(p, 1.0) for p, v in BASE.items())


#: the ftrace probe stores the kernel's reason enum: background 0, sync 2, periodic 3
BACKGROUND, SYNC, PERIODIC = 0, 2, 3


def writeback_calls(key: str) -> dict[str, list[Any]]:
    """One row per write-back call, as the ftrace probe's ``writeback_calls`` series."""
    times = [i / 6 for i in range(60)]  # spread over 10 s
    reasons = [PERIODIC if i % 4 else BACKGROUND for i in range(60)]
    if key == "docker":  # a burst of sync write-backs at start and stop
        for t in (0.01, 0.02, 0.03, 9.97, 9.98, 9.99, 10.0):
            times.append(t)
            reasons.append(SYNC)
    return {"time_s": times, "reason": reasons}


def page_writebacks() -> dict[str, list[Any]]:
    """One row per written-back page, as ftrace's ``writeback``: all pages early, three hot ones later."""
    rows = [(i / 6, 7, i if i < 30 else i % 3) for i in range(60)]
    return {"time_s": [r[0] for r in rows], "ino": [r[1] for r in rows], "index": [r[2] for r in rows],
            "reason": [PERIODIC] * len(rows)}


def probe_outcome(key: str, rep: int) -> ProbeOutcome:
    pinned = key == "docker-pinned"
    docker = key in ("docker", "docker-pinned", "vm")
    metrics = [
        ("probe.cgroup.nr_periods", 1000.0, "count"),
        ("probe.cgroup.nr_throttled", 300.0 if key == "docker" else 0.0, "count"),
        ("probe.proc.ctx_involuntary", (5000.0 if docker and not pinned else 520.0) + rep * 7, "count"),
        ("probe.proc.page_faults_minor", (2.2e5 if docker else 1.0e5) * (1 + rep * 0.01), "count"),
        ("probe.proc.cpu_pct_mean", 95.0, "%"),
        ("probe.perf.cell.cycles", (1.5e9 if docker else 1.0e9) * (1 + rep * 0.01), "count"),
        ("probe.perf.cell.context_switches", 800.0 + rep, "count"),
    ]
    if docker:
        metrics.append(("probe.perf.engine.cycles", 2.0e7 + rep, "count"))
    series = {
        ("ftrace", "writeback_calls"): series_to_ipc(writeback_calls(key)),
        ("ftrace", "writeback"): series_to_ipc(page_writebacks()),
        ("pagefaults", "ranking"): series_to_ipc({
            "task": ["python", "python", "python", "dockerd"],
            "file": ["/usr/lib/x86_64-linux-gnu/libtorch_cpu.so", "[anon]", "/usr/lib/libc.so.6", "/usr/bin/dockerd"],
            "function": ["_dl_relocate_object", "malloc", "memcpy", "runtime.memmove"],
            "faults": [600 if docker else 100, 300, 200 if docker else 50, 50]}),
        ("proc", "samples"): series_to_ipc({"t": [0.0, 0.5, 1.0, 1.5], "cpu_pct": [90.0, 97.0, 99.0, 95.0 + rep],
                                            "rss_bytes": [2.0e8, 2.1e8, 2.2e8 + (3e7 if docker else 0), 2.2e8]}),
    }
    return ProbeOutcome(metrics=metrics, series=series)


def build(directory: Path, host: dict[str, Any] | None = None, study_text: str = STUDY,
          scale: float | dict[str, float | list[float]] = 1.0,
          knob_scale: dict[str, dict[Any, list[float]]] | None = None) -> Path:
    """``scale``: every phase times this; a dict scales each workload (by key) on its own, a list
    by repetition (a workload's own noise). ``knob_scale``: a knob's value -> factors by
    repetition, for the cells at that value of a sweep."""
    study = load_study_text(study_text, "known.yaml", check_host=False)
    host = host or {"governor": "powersave", "turbo": True, "cores": 2, "loadavg_at_start": [0.1, 0.1, 0.1],
                    "cpu_model": "test CPU", "kernel": "6.1.0-test"}
    store = Store.create(directory, study_text, study.name, "known.yaml", host)
    keys = [p.key for p in study.platforms]
    for cell in expand(study):
        offset = keys.index(cell.platform_key)
        factor = scale.get(cell.workload_key, 1.0) if isinstance(scale, dict) else scale
        if isinstance(factor, list):
            factor = factor[cell.rep % len(factor)]
        for knob, by_value in (knob_scale or {}).items():
            if cell.knobs.get(knob) in by_value:
                factors = by_value[cell.knobs[knob]]
                factor *= factors[cell.rep % len(factors)]
        phases = {k: v * factor for k, v in phases_for(cell.platform_key, cell.rep, offset).items()}
        items = [{"i": i, "e2e": sum(phases.values()), "phases": phases} for i in range(4)]
        outcome = CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0,
                              wall_s=1.0, startup_s=0.2 if cell.platform == "baremetal" else 0.6,
                              setup={"import": 0.5}, items=items, done={"type": "done", "run_s": 0.5},
                              platform_info={"emulated": True} if cell.platform_key == "vm" else
                              {"tenancy": {"tenant": 0, "tenants": 4, "group": "g"}} if cell.platform_key == "docker-pinned"
                              else {},
                              probes=probe_outcome(cell.platform_key, cell.rep))
        assert store.record(outcome, DISPLAY.get(cell.platform_key, cell.platform_key))
    store.close()
    return directory


def log_noise_sd() -> float:
    logs = [math.log(v) for v in NOISE]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))

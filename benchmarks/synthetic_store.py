"""A synthetic study store of N cells with the content a real fleet study records.

Used by bench_store_scale.py, which runs it under two isobench versions (this checkout, and an
older one's ``src`` on PYTHONPATH) so that each writes its own layout through its own
``Store.record_all``. Only the store API both versions share is used.

Shape: a duet study of 2 workloads x 5 platform entries (baremetal as the baseline, an A/A,
docker, crun, gVisor) on many hosts of a cluster; per repetition, each candidate runs beside a
baseline cell (a duet pair), so 8 cells per workload, host and repetition. Each cell carries
600 items x 4 values (e2e and three phases: 2,400 item-phase values), about 100 metrics, the
default probes' four series at their usual lengths, and a platform_info like the runner's.

    python benchmarks/synthetic_store.py OUT_DIR --cells 10000
prints one JSON line: {"cells": N, "record_s": seconds spent in record_all}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKLOADS = ("resnet-infer", "lenet-train")
PHASES = {"resnet-infer": ("load", "preprocess", "inference"), "lenet-train": ("forward", "backward", "optimizer")}
#: label -> (YAML of the entry, true slowdown on e2e)
ENTRIES = {"baremetal": ("{name: baremetal}", 1.0), "aa": ("{name: baremetal, label: aa}", 1.0),
           "docker": ("{name: docker}", 1.01), "crun": ("{name: oci, runtime: crun, label: crun}", 1.005),
           "gvisor": ("{name: gvisor}", 1.6)}
#: label -> (the platform's name, how results show the entry)
NAMES = {"baremetal": ("baremetal", "baremetal"), "aa": ("baremetal", "baremetal/aa"),
         "docker": ("docker", "docker/runc"), "crun": ("oci", "oci/crun"), "gvisor": ("gvisor", "gvisor/systrap")}
CELLS_PER_ROUND = 2 * (len(ENTRIES) - 1)  # a pair per candidate: its cell and a baseline cell
ITEMS = 600
#: metric names as the probes and the runner name them (about 100 per cell)
METRIC_NAMES = ([f"probe.cgroup.{n}" for n in ("cpu_system_s", "cpu_usage_s", "cpu_user_s", "mem_anon_max_bytes",
                 "mem_anon_mean_bytes", "mem_dirty_max_bytes", "mem_file_max_bytes", "mem_peak_bytes",
                 "mem_usage_max_bytes", "nr_periods", "nr_throttled", "pgfault", "pgmajfault", "pids_max",
                 "psi_cpu_some_s", "psi_io_some_s", "psi_memory_some_s", "throttled_s")]
                + [f"probe.proc.{n}" for n in ("cpu_pct_mean", "cpu_s", "ctx_involuntary", "ctx_voluntary",
                   "host_cpu_pct_mean", "io_read_bytes", "io_write_bytes", "page_faults_major",
                   "page_faults_minor", "procs_max", "rss_max_bytes", "rss_mean_bytes", "samples", "threads_max")]
                + [f"probe.vmstat.{n}" for n in ("allocstall", "nr_dirtied", "nr_dirty_max", "nr_writeback_max",
                   "nr_written", "pgalloc", "pgfault", "pgfree", "pgmajfault", "pgpgin", "pgpgout",
                   "pgscan_direct", "pgscan_kswapd", "pswpin", "pswpout", "thp_fault_alloc")]
                + [f"probe.environment.{n}" for n in ("cell_cpus", "cgroup_version", "cpu_mhz_mean",
                   "isolated_cpus", "loadavg_1m_end", "loadavg_1m_start", "numa_nodes", "online_cpus")]
                + [f"interference.{n}" for n in ("lost_share", "other_cpu", "runq", "steal")]
                + ["cpu.per_item", "cpu.switches_per_item", "cpu.throttled_per_item", "process.page_faults_minor",
                   "process.page_faults_major", "process.run.page_faults_minor", "process.run.page_faults_major",
                   "process.run.read_bytes", "process.run.read_calls", "workload.items_per_s"]
                + [f"extra.m{i:02d}" for i in range(20)])
#: (probe, series) -> {column: kind}, at the lengths a 4-s cell records
SERIES = {("cgroup", "samples"): (40, ("t", "cpu_usage_s", "mem_usage_bytes", "mem_anon_bytes", "pids")),
          ("proc", "samples"): (40, ("t", "cpu_s", "rss_bytes", "threads")),
          ("vmstat", "deltas"): (40, ("t", "pgfault", "pgmajfault", "nr_dirtied", "nr_written", "pgalloc", "pgfree")),
          ("vmstat", "levels"): (40, ("t", "nr_dirty", "nr_writeback"))}


@dataclass
class Cell:
    cell_id: str
    seq: int
    group: str
    workload: str
    workload_key: str
    params: dict[str, Any]
    platform: str
    platform_key: str
    knobs: dict[str, Any]
    rep: int
    warmup: bool = False


@dataclass
class Probes:
    metrics: list[tuple[str, float, str]]
    series: dict[tuple[str, str], bytes]


@dataclass
class Outcome:
    cell: Cell
    items: list[dict[str, Any]]
    platform_info: dict[str, Any]
    probes: Probes
    status: str = "ok"
    exit_code: int = 0
    error: str | None = None
    stderr_tail: str = ""
    started_at: float = 0.0
    wall_s: float = 4.0
    startup_s: float = 0.2
    hello: dict[str, Any] = field(default_factory=lambda: {"inside": {"affinity": [1], "cfs_quota_us": -1}})
    setup: dict[str, float] = field(default_factory=lambda: {"import": 0.9, "model_load": 0.1, "data_load": 0.2})
    done: dict[str, Any] = field(default_factory=dict)


def study_text(hosts: int, rounds: int) -> str:
    lines = ["name: synthetic-fleet", "workloads:", *[f"  - {{name: {w}}}" for w in WORKLOADS], "platforms:",
             *[f"  - {entry}" for entry, _ in ENTRIES.values()], "baseline: baremetal", "schedule: duet",
             f"repetitions: {rounds}", f"# {hosts} hosts of a cluster"]
    return "\n".join(lines) + "\n"


def _ipc(columns: dict[str, list[float]]) -> bytes:
    from isobench.probes.base import series_to_ipc  # the writer of the version under test

    return series_to_ipc(columns)


def _cell(rng: random.Random, seq: int, workload: str, label: str, host: int, rep: int, partner: str,
          pair: str, side: str, slowdown: float, noise: float) -> Outcome:
    key = f"{workload}@{label}"
    cell_id = f"{key}/h{host}/r{rep}/duet-{partner}"
    base = 0.006 if workload == "resnet-infer" else 0.005
    items = []
    for i in range(ITEMS):
        parts = [base * share * slowdown * noise * rng.lognormvariate(0, 0.03) for share in (0.2, 0.5, 0.3)]
        items.append({"i": i, "e2e": sum(parts) * 1.01, "phases": dict(zip(PHASES[workload], parts, strict=True))})
    metrics = [(name, abs(rng.gauss(1000, 100)), "") for name in METRIC_NAMES]
    e2e = sum(item["e2e"] for item in items) / len(items)  # e2e, phases and cell.*: Store.record derives them
    plausible = {"cpu.per_item": e2e, "cpu.throttled_per_item": 0.0, "cpu.switches_per_item": 15.0 * slowdown}
    metrics = [(name, plausible.get(name, value), unit) for name, value, unit in metrics]
    series = {}
    for (probe, name), (length, columns) in SERIES.items():
        series[(probe, name)] = _ipc({c: [t * 0.1 if c == "t" else float(rng.randrange(10**6))
                                          for t in range(length)] for c in columns})
    info = {"host_key": f"node-{host:03d}", "host": f"node-{host:03d}", "cores": "1",
            "cgroup": f"isobench/synthetic/{cell_id}",
            "versions": {"docker": "28.2.2", "containerd": "1.7.27", "runc": "1.2.5"} if label != "baremetal" else {},
            "duet": {"pair": pair, "partner": partner, "side": side, "overlap": 0.96, "cores": "1",
                     "lead_s": 1.5, "delay_s": 4.2, "group": key}}
    cell = Cell(cell_id, seq, key, workload, workload, {}, NAMES[label][0], label, {}, rep)
    return Outcome(cell, items, info, Probes(metrics, series), started_at=1.8e9 + seq * 4.0,
                   done={"run_s": 3.9, "metrics": {"items": ITEMS}})


def build(directory: Path, cells: int, seed: int = 1) -> dict[str, float]:
    from isobench.store import Store

    rounds_total = max(1, cells // CELLS_PER_ROUND)
    hosts = max(1, min(25, rounds_total // 50))
    rounds = max(1, rounds_total // (hosts * len(WORKLOADS)))
    store = Store.create(directory, study_text(hosts, rounds), "synthetic-fleet", "synthetic.yaml",
                         {"hostname": "synthetic"})
    rng = random.Random(seed)
    seq, recording, written = 0, 0.0, 0
    for host in range(hosts):
        node_noise = rng.lognormvariate(0, 0.05)
        for rep in range(rounds):
            for workload in WORKLOADS:
                for label, (_, slowdown) in ENTRIES.items():
                    if label == "baremetal":
                        continue
                    pair = f"h{host}/r{rep}:{workload}@{label}"
                    round_noise = node_noise * rng.lognormvariate(0, 0.01)
                    side = str(rep % 2)
                    pair_cells = [_cell(rng, seq, workload, label, host, rep, "baremetal", pair, side, slowdown,
                                        round_noise),
                                  _cell(rng, seq + 1, workload, "baremetal", host, rep, label, pair,
                                        str(1 - int(side)), 1.0, round_noise)]
                    seq += 2
                    start = time.perf_counter()
                    written += store.record_all(pair_cells, [NAMES[c.cell.platform_key][1] for c in pair_cells])
                    recording += time.perf_counter() - start
    store.close()
    return {"cells": written, "record_s": recording, "hosts": hosts, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="result directory to create (must not exist)")
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.out.exists():
        sys.exit(f"{args.out} exists: give a new directory")
    print(json.dumps(build(args.out, args.cells, args.seed)))


if __name__ == "__main__":
    main()

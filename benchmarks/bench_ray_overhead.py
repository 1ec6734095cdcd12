"""What running a study on a Ray cluster costs per cell, next to a local run, measured in one run.

The same small study (a short cpu-spin on bare metal, no probes) runs locally and then on a
one-node local Ray cluster (ray.cluster_utils.Cluster), so parallelism is the same and only
the dispatch differs. Printed: the gap between one cell's end and the next cell's start in
each run, the head <-> agent round trip beyond the agent's own time (stored with every cell
as platform_info.ray.overhead_s), and the one-off cost of joining the cluster.

    .venv/bin/python benchmarks/bench_ray_overhead.py [REPETITIONS]
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ISOBENCH = [sys.executable, "-m", "isobench.cli"]


def cells(out: Path) -> list[tuple[float, float, dict]]:
    conn = sqlite3.connect(out / "isobench.sqlite")
    rows = [(r[0], r[1], json.loads(r[2] or "{}")) for r in
            conn.execute("SELECT started_at, wall_s, platform_info FROM cells ORDER BY started_at")]
    conn.close()
    return rows


def gaps(rows: list[tuple[float, float, dict]]) -> list[float]:
    """Seconds from one cell's exit to the next cell's launch (the runner's own time between cells)."""
    return [b[0] - (a[0] + a[1]) for a, b in zip(rows, rows[1:], strict=False)]


def timed_run(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([*ISOBENCH, *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def main() -> None:
    from ray.cluster_utils import Cluster

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "overhead.yaml"
        study.write_text(yaml.safe_dump({
            "name": "overhead", "workloads": [{"name": "cpu-spin", "params": {"iterations": 3, "work": 2000}}],
            "platforms": [{"name": "baremetal"}], "repetitions": reps, "warmup": 0, "probes": {}}))
        local_total = timed_run(["run", str(study), "--out", f"{tmp}/local"])
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            ray_total = timed_run(["run", str(study), "--ray", cluster.address, "--out", f"{tmp}/ray"])
        finally:
            cluster.shutdown()
        local, remote = cells(Path(f"{tmp}/local")), cells(Path(f"{tmp}/ray"))
        local_gap, ray_gap = statistics.median(gaps(local)), statistics.median(gaps(remote))
        overhead = [info["ray"]["overhead_s"] for _, _, info in remote]
        cell_s = statistics.median(w for _, w, _ in local)
        print(f"{reps} cells of cpu-spin on bare metal, median cell {cell_s * 1e3:.0f} ms (launch to exit)")
        print(f"between cells, local run         : {local_gap * 1e3:7.1f} ms (median)")
        print(f"between cells, Ray (1 node)      : {ray_gap * 1e3:7.1f} ms (median) -> "
              f"{(ray_gap - local_gap) * 1e3:+.1f} ms a cell")
        print(f"head <-> agent beyond the agent  : {statistics.median(overhead) * 1e3:7.1f} ms median, "
              f"{max(overhead) * 1e3:.1f} ms max (first unit: {overhead[0] * 1e3:.1f} ms)")
        print(f"whole command, local / Ray       : {local_total:.1f} s / {ray_total:.1f} s "
              f"(Ray adds {ray_total - local_total:.1f} s: joining the cluster, starting and preparing the agent)")


if __name__ == "__main__":
    main()

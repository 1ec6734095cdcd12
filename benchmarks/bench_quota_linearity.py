"""Quota sweep linearity: a single-threaded CPU-bound cell under CFS quotas.

Prints, per quota, the mean time per item and time × quota (the CPU time the work needs,
which should not depend on the quota) relative to the lowest quota, plus the load average:
on a shared host a quota above one process's fair share is capped by the neighbours, not
by the quota. Usage: python benchmarks/bench_quota_linearity.py [--platform baremetal|docker]
"""

from __future__ import annotations

import argparse
import json
import os

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--platform", default="baremetal")
    parser.add_argument("--quotas", default="0.05,0.1,0.2,0.5,1.0")
    parser.add_argument("--work", type=int, default=450_000, help="loop steps per item (~0.06 s of CPU)")
    args = parser.parse_args()
    quotas = [float(q) for q in args.quotas.split(",")]
    study = {"name": "quota", "workloads": [{"name": "cpu-spin", "params": {"iterations": 5, "work": args.work}}],
             "platforms": [{"name": args.platform, "knobs": {"cpus": quotas}}], "repetitions": 1, "warmup": 0,
             "probes": {}}
    results = {}
    for cell in expand(load_study_text(json.dumps(study), "quota.yaml")):
        platform = platform_for(cell)
        platform.prepare()
        outcome = run_cell(cell, platform)
        if outcome.status != "ok":
            raise SystemExit(f"{cell.cell_id}: {outcome.error}")
        results[cell.knobs["cpus"]] = sum(i["e2e"] for i in outcome.items) / len(outcome.items)
    reference = min(results) * results[min(results)]
    print(f"platform {args.platform}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("quota  s/item   time×quota relative to the lowest quota")
    for quota in sorted(results):
        print(f"{quota:5.2f}  {results[quota]:7.3f}  {quota * results[quota] / reference:6.3f}")


if __name__ == "__main__":
    main()

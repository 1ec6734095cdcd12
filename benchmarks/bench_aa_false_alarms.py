"""A/A false alarms: how often a study of bare metal against itself claims a difference.

Runs N small studies (bare metal and its A/A entry, the default study's layout and analysis,
a seed of their own each) one after another and counts, per study, the A/A comparison's
verdict. The target: the verdict is `equivalent`, or the 95% CI contains 1, in at least 90%
of them (a 95% interval should miss 1 about 5% of the time by chance alone).

    .venv/bin/python benchmarks/bench_aa_false_alarms.py [--studies 20] [--workload cpu-spin] [--schedule duet]

Run it on an otherwise idle host; it prints the load average and steal time beside the count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PARAMS = {"cpu-spin": {"iterations": 5, "work": 50_000, "min_seconds": 0.6},
          "resnet-infer": {"image_size": 64, "requests": 5, "min_seconds": 2.0},
          "lenet-train": {"steps": 20, "batch_size": 32, "min_seconds": 2.0}}


def steal_jiffies() -> int:
    return int(Path("/proc/stat").read_text().splitlines()[0].split()[8])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--studies", type=int, default=20)
    parser.add_argument("--repetitions", type=int, default=6)
    parser.add_argument("--workload", default="cpu-spin", choices=sorted(PARAMS))
    parser.add_argument("--schedule", default="duet", choices=("duet", "sequential"),
                        help="duet (the default study's, trading cores) or sequential")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-aa-"))
    load, steal0, started = os.getloadavg()[0], steal_jiffies(), time.monotonic()
    verdicts: list[tuple[str, float, float, float, str]] = []
    for index in range(args.studies):
        study = {"name": f"aa-{index}", "workloads": [{"name": args.workload, "params": PARAMS[args.workload]}],
                 "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
                 "repetitions": args.repetitions, "warmup": 0, "warmup_items": 3, "seed": 1000 + index,
                 "schedule": args.schedule, "probes": {}}
        path, out = work / f"aa-{index}.yaml", work / f"aa-{index}"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        run = subprocess.run([sys.executable, "-m", "isobench.cli", "run", str(path), "--out", str(out)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"study {index} failed: {run.stderr[-500:]}", file=sys.stderr)
            continue
        summary = subprocess.run([sys.executable, "-m", "isobench.cli", "summary", str(out), "--json"],
                                 capture_output=True, text=True, check=True)
        aa = next(c for c in json.loads(summary.stdout) if c["is_aa"] and c["metric"] == "e2e")
        verdicts.append((aa["verdict"], aa["ratio"], aa["ci_low"], aa["ci_high"], aa["method"]))
        print(f"  study {index:2d}: {aa['verdict']:12s} {aa['ratio']:.4f} (95% CI {aa['ci_low']:.4f}-"
              f"{aa['ci_high']:.4f}, {aa['method']})", file=sys.stderr)
    spent = time.monotonic() - started
    steal = (steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK") / spent / (os.cpu_count() or 1)
    fine = [v for v in verdicts if v[0] == "equivalent" or v[2] <= 1 <= v[3]]
    alarms = [v for v in verdicts if v[0] in ("slower", "faster")]
    print(f"{len(verdicts)} A/A studies of {args.workload} ({args.schedule}, {args.repetitions} rounds each, "
          f"{spent:.0f} s): "
          f"{sum(v[0] == 'equivalent' for v in verdicts)} equivalent, {len(fine)} equivalent or CI containing 1 "
          f"({len(fine) / max(1, len(verdicts)):.0%}; target >= 90%), {len(alarms)} false alarms "
          f"(slower/faster); load {load:.2f} at the start, steal {steal:.1%}")


if __name__ == "__main__":
    main()

"""Is a known effect seen? The default study's configuration, bare metal against bare metal
with the `slowdown` knob injecting 3% (or --slowdown) of extra CPU work into every timed item.

The target: for every workload the ratio's 95% CI excludes 1 and contains 1 + slowdown.

    .venv/bin/python benchmarks/bench_slowdown.py [--slowdown 0.03] [--out DIR]

It runs `isobench run` on the built-in default study with its platforms replaced by the two
bare-metal entries (everything else, workloads, cell length, layout, repetitions, as the demo
has them), then reads `summary --json`. Run it on an otherwise idle host.
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

from isobench.studyfile import default_study_text


def steal_jiffies() -> int:
    return int(Path("/proc/stat").read_text().splitlines()[0].split()[8])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--slowdown", type=float, default=0.03)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    study = yaml.safe_load(default_study_text())
    study["name"] = "slowdown-check"
    study["platforms"] = [{"name": "baremetal"},
                          {"name": "baremetal", "label": "slowed", "knobs": {"slowdown": args.slowdown}}]
    work = Path(tempfile.mkdtemp(prefix="bench-slowdown-"))
    path, out = work / "slowdown.yaml", args.out or work / "out"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    load, steal0, started = os.getloadavg()[0], steal_jiffies(), time.monotonic()
    subprocess.run([sys.executable, "-m", "isobench.cli", "run", str(path), "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    spent = time.monotonic() - started
    steal = (steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK") / spent / (os.cpu_count() or 1)
    summary = subprocess.run([sys.executable, "-m", "isobench.cli", "summary", str(out), "--json"],
                             capture_output=True, text=True, check=True)
    want = 1 + args.slowdown
    for c in json.loads(summary.stdout):
        if c["metric"] != "e2e" or c["label"] != "slowed":
            continue
        seen = c["ci_low"] > 1 or c["ci_high"] < 1
        holds = c["ci_low"] <= want <= c["ci_high"]
        print(f"{c['workload']:14s} slowdown {args.slowdown:.0%}: {c['ratio']:.4f}x (95% CI {c['ci_low']:.4f}-"
              f"{c['ci_high']:.4f}, n={c['n']}, {c['method']}), verdict {c['verdict']}; CI excludes 1: "
              f"{'yes' if seen else 'NO'}; contains {want:.2f}: {'yes' if holds else 'NO'}")
    print(f"({spent:.0f} s; load {load:.2f} at the start, steal {steal:.1%}; results in {out})")


if __name__ == "__main__":
    main()

"""Is a known effect seen, quiet or beside a neighbour? The default study's configuration, bare
metal against bare metal with the `slowdown` knob making every timed item 3% (or --slowdown)
longer (the inference and training loops repeat about 3% of their own items; other loops spin on
their thread for 3% of each item's own wall time).

The target: for every workload the ratio's 95% CI excludes 1 and contains 1 + slowdown, with
or without a neighbour.

    .venv/bin/python benchmarks/bench_slowdown.py [--slowdown 0.03] [--neighbour 0.5] [--out DIR]
        [--workloads resnet-infer,lenet-train] [--repetitions N] [--max-time-s S]

It runs `isobench run` on the built-in default study with its platforms replaced by the two
bare-metal entries (everything else, workloads, cell length, layout, repetitions, as the demo
has them), then reads `summary --json`. `--neighbour 0.5` starts a busy loop that runs half of
every 20 ms (about half a core) on the cores the cells use, for the length of the run, and
stops it after; its measured CPU use is printed. `--workloads`, `--repetitions` and
`--max-time-s` shrink the run for a quick check. The load average and the steal time are
printed beside the numbers: run it quiet on an otherwise idle host.
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

#: the neighbour: busy for `duty` of every `period`, until `limit_s` or its parent is gone
NEIGHBOUR = """
import os, sys, time
duty, period, end, parent = float(sys.argv[1]), 0.02, time.monotonic() + float(sys.argv[2]), os.getppid()
while time.monotonic() < end and os.getppid() == parent:
    started = time.monotonic()
    while time.monotonic() - started < duty * period:
        pass
    time.sleep(period * (1 - duty))
"""
NEIGHBOUR_LIMIT_S = 3 * 3600


def steal_jiffies() -> int:
    return int(Path("/proc/stat").read_text().splitlines()[0].split()[8])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def start_neighbour(duty: float, cores: set[int]) -> subprocess.Popen[bytes]:
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(duty), str(NEIGHBOUR_LIMIT_S)])
    os.sched_setaffinity(neighbour.pid, cores)
    return neighbour


def study_for(args: argparse.Namespace) -> dict:
    study = yaml.safe_load(default_study_text())
    study["name"] = "slowdown-check"
    study["platforms"] = [{"name": "baremetal"},
                          {"name": "baremetal", "label": "slowed", "knobs": {"slowdown": args.slowdown}}]
    if args.workloads:
        wanted = args.workloads.split(",")
        study["workloads"] = [w for w in study["workloads"] if w["name"] in wanted]
    if args.repetitions:
        study["repetitions"] = args.repetitions
        study.pop("adaptive", None)
    if args.max_time_s:
        study.setdefault("adaptive", {})["max_time_s"] = args.max_time_s
    return study


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--slowdown", type=float, default=0.03)
    parser.add_argument("--neighbour", type=float, default=0.0,
                        help="a busy loop beside the run, this fraction of a core (0: none)")
    parser.add_argument("--workloads", default="", help="comma-separated subset of the default study's")
    parser.add_argument("--repetitions", type=int, default=0, help="fixed repetitions instead of auto")
    parser.add_argument("--max-time-s", type=float, default=0.0, help="the adaptive rounds' time budget")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slowdown-"))
    path, out = work / "slowdown.yaml", args.out or work / "out"
    path.write_text(yaml.safe_dump(study_for(args), sort_keys=False))
    load_before, steal0, started = os.getloadavg()[0], steal_jiffies(), time.monotonic()
    neighbour = start_neighbour(args.neighbour, os.sched_getaffinity(0)) if args.neighbour else None
    try:
        subprocess.run([sys.executable, "-m", "isobench.cli", "run", str(path), "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        neighbour_cores = cpu_seconds(neighbour.pid) / (time.monotonic() - started) if neighbour else 0.0
    finally:
        if neighbour:
            neighbour.kill()
            neighbour.wait()
    spent = time.monotonic() - started
    load_after = os.getloadavg()[0]
    steal = (steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK") / spent / (os.cpu_count() or 1)
    summary = subprocess.run([sys.executable, "-m", "isobench.cli", "summary", str(out), "--json"],
                             capture_output=True, text=True, check=True)
    want = 1 + args.slowdown
    condition = f"beside a neighbour using {neighbour_cores:.2f} cores" if neighbour else "quiet"
    for c in json.loads(summary.stdout):
        if c["metric"] != "e2e" or c["label"] != "slowed":
            continue
        seen = c["ci_low"] > 1 or c["ci_high"] < 1
        holds = c["ci_low"] <= want <= c["ci_high"]
        print(f"{c['workload']:14s} slowdown {args.slowdown:.0%}, {condition}: {c['ratio']:.4f}x (95% CI "
              f"{c['ci_low']:.4f}-{c['ci_high']:.4f}, n={c['n']}, {c['method']}), verdict {c['verdict']}; "
              f"CI excludes 1: {'yes' if seen else 'NO'}; contains {want:.2f}: {'yes' if holds else 'NO'}")
    print(f"({spent:.0f} s; 1-min load {load_before:.2f} at the start, {load_after:.2f} at the end; steal "
          f"{steal:.1%}; {os.cpu_count()} cores; results in {out})")


if __name__ == "__main__":
    main()

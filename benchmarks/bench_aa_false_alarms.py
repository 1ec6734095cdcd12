"""A/A false alarms: how often a study with no real difference claims one, at the sizes users run.

For each size (``--repetitions 3,5``: fixed rounds, not adaptive), runs ``--studies`` small studies
one after another, each with a seed of its own and three entries: bare metal (the baseline), its
A/A entry, and a *null* comparison, bare metal with ``slowdown: 0`` (a knob, so not an A/A, that
injects nothing). Nothing differs, so every direction (slower/faster) is a false alarm. Per size it
prints:

* the share of studies whose A/A reads a direction (the verdict), and whose A/A interval excludes 1;
* the share whose null comparison reads a direction with the verdict's guards (analysis/verdict.py:
  a direction needs 5 pairs, and none inside the study's own A/A floor), beside the share whose
  interval alone (after Holm) excludes 1, which is what a direction was before the guards;
* the load average at the start and the steal time over the size's studies.

    .venv/bin/python benchmarks/bench_aa_false_alarms.py [--repetitions 3,5] [--studies 10]
        [--workload cpu-spin] [--schedule duet]

The default (cpu-spin cells of 0.6 s, 10 studies per size, a duet) takes under 10 minutes on a
2-core VM: a 3-round study took 32 s on one busy with other tests (load 3.2). Ten studies resolve a
rate only to about ±15%: pass ``--studies 40`` (about 30 minutes) for a rate near the 5% target.
Run it on an otherwise idle host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PARAMS = {"cpu-spin": {"iterations": 5, "work": 50_000, "min_seconds": 0.6},
          "resnet-infer": {"image_size": 64, "requests": 5, "min_seconds": 2.0},
          "lenet-train": {"steps": 20, "batch_size": 32, "min_seconds": 2.0}}
DIRECTIONS = ("slower", "faster")
NULL = "noop"


def steal_jiffies() -> int:
    return int(Path("/proc/stat").read_text().splitlines()[0].split()[8])


@dataclass
class Size:
    """The studies run at one size: per study, the A/A and the null comparison (summary records)."""

    repetitions: int
    aa: list[dict[str, Any]] = field(default_factory=list)
    null: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0
    load: float = 0.0
    steal: float = 0.0
    seconds: float = 0.0


def excludes_one(record: dict[str, Any]) -> bool:
    return record["ci_low"] is not None and (record["ci_low"] > 1 or record["ci_high"] < 1)


def share(records: list[dict[str, Any]], test: Any) -> str:
    hits = sum(1 for r in records if test(r))
    return f"{hits}/{len(records)} ({hits / max(1, len(records)):.0%})"


def run_study(work: Path, name: str, args: argparse.Namespace, repetitions: int,
              seed: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    study = {"name": name, "workloads": [{"name": args.workload, "params": PARAMS[args.workload]}],
             "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"},
                           {"name": "baremetal", "label": NULL, "knobs": {"slowdown": 0}}],
             "repetitions": repetitions, "warmup": 0, "warmup_items": 3, "seed": seed,
             "schedule": args.schedule, "probes": {}}
    path, out = work / f"{name}.yaml", work / name
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "isobench.cli", "run", str(path), "--out", str(out)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"  {name} failed: {run.stderr[-500:]}", file=sys.stderr)
        return None
    summary = subprocess.run([sys.executable, "-m", "isobench.cli", "summary", str(out), "--json"],
                             capture_output=True, text=True, check=True)
    e2e = {r["label"]: r for r in json.loads(summary.stdout) if r.get("metric") == "e2e"}
    return e2e["aa"], e2e[NULL]


def run_size(work: Path, args: argparse.Namespace, repetitions: int) -> Size:
    size = Size(repetitions, load=os.getloadavg()[0])
    steal0, started = steal_jiffies(), time.monotonic()
    for index in range(args.studies):
        pair = run_study(work, f"aa-r{repetitions}-{index}", args, repetitions, 1000 * repetitions + index)
        if pair is None:
            size.failed += 1
            continue
        aa, null = pair
        size.aa.append(aa)
        size.null.append(null)
        print(f"  {repetitions} rounds, study {index:2d}: A/A {aa['verdict']:12s} {aa['ratio']:.4f} "
              f"(95% CI {aa['ci_low']:.4f}-{aa['ci_high']:.4f}); null {null['verdict']:12s} {null['ratio']:.4f} "
              f"(95% CI {null['ci_low']:.4f}-{null['ci_high']:.4f}) {null['verdict_reason']}", file=sys.stderr)
    size.seconds = time.monotonic() - started
    size.steal = ((steal_jiffies() - steal0) / os.sysconf("SC_CLK_TCK") / max(size.seconds, 1e-9)
                  / (os.cpu_count() or 1))
    return size


def report(size: Size, args: argparse.Namespace) -> str:
    def unguarded(r: dict[str, Any]) -> bool:
        return excludes_one(r) and (r["p_holm"] if r["p_holm"] is not None else r["p_value"]) < 0.05

    return (f"{size.repetitions} rounds ({args.workload}, {args.schedule}): {len(size.aa)} studies ({size.failed} failed), "
            f"{size.seconds:.0f} s, load {size.load:.2f} at the start, steal {size.steal:.1%}\n"
            f"  A/A direction {share(size.aa, lambda r: r['verdict'] in DIRECTIONS)}, "
            f"A/A CI excludes 1 {share(size.aa, excludes_one)}\n"
            f"  null comparison: direction {share(size.null, lambda r: r['verdict'] in DIRECTIONS)} "
            f"(false-alarm rate, with the guards); without the guards "
            f"{share(size.null, unguarded)}; equivalent {share(size.null, lambda r: r['verdict'] == 'equivalent')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--studies", type=int, default=10, help="studies per size")
    parser.add_argument("--repetitions", default="3,5", help="the sizes: fixed rounds, comma-separated")
    parser.add_argument("--workload", default="cpu-spin", choices=sorted(PARAMS))
    parser.add_argument("--schedule", default="duet", choices=("duet", "sequential"),
                        help="duet (the default design's, trading cores) or sequential")
    args = parser.parse_args()
    sizes = [int(value) for value in args.repetitions.split(",") if value.strip()]
    work = Path(tempfile.mkdtemp(prefix="bench-aa-"))
    results = [run_size(work, args, repetitions) for repetitions in sizes]
    print("A/A false alarms: nothing differs, so every direction is a false alarm")
    for size in results:
        print(report(size, args))


if __name__ == "__main__":
    main()

"""Does every study answer, not only the demo? The resolving design's targets, in one run.

Runs, as a new user would (the CLI, no design field written):

* ``quiet``: the minimal study (resnet-infer and lenet-train; bare metal, bare metal with a 3%
  injected slowdown, Docker; the A/A entry is the tool's) on a quiet host;
* ``loaded``: the same study with a bounded busy loop at about half a core beside it, started and
  stopped here;
* ``script``: ``isobench run --script examples/train_mlp.py`` (bare metal vs Docker);
* ``demo``: the default study (``isobench run``);
* ``script-slowdown`` and ``script-slowdown-loaded`` (not run by default): a study of the same
  script (bare metal, bare metal with ``slowdown: 0.03``, Docker), quiet and beside the busy loop:
  a script's steps cannot be run again, so its injection spins, and this checks that it reads 1.03.

and prints one table: each A/A floor, the slowdown's ratio and 95% CI, Docker's verdict, the
study's time, with the load average and steal time of each run, against the issue's targets.

    .venv/bin/python benchmarks/bench_defaults.py                  # quiet, loaded, script
    .venv/bin/python benchmarks/bench_defaults.py --parts demo
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ISOBENCH = [sys.executable, "-m", "isobench.cli"]
MINIMAL = {"name": "mine", "workloads": [{"name": "resnet-infer"}, {"name": "lenet-train"}],
           "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "slow3", "knobs": {"slowdown": 0.03}},
                         {"name": "docker"}],
           "baseline": "baremetal"}
SCRIPT_SLOWDOWN = {"name": "script-slowdown",
                   "workloads": [{"name": "script", "params": {"path": str(ROOT / "examples" / "train_mlp.py")}}],
                   "platforms": MINIMAL["platforms"], "baseline": "baremetal"}
#: the study file each study part runs (the others run the CLI's own: --script, the default study)
STUDY_OF_PART = {"quiet": MINIMAL, "loaded": MINIMAL,
                 "script-slowdown": SCRIPT_SLOWDOWN, "script-slowdown-loaded": SCRIPT_SLOWDOWN}
#: the issue's targets: (A/A floor, study minutes) per part
TARGETS = {"quiet": (0.02, 10.0), "loaded": (0.03, None), "script": (0.02, 5.0), "demo": (0.015, 8.0),
           "script-slowdown": (0.02, None), "script-slowdown-loaded": (0.03, None)}


def _steal_and_total() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[7], sum(fields)


def _busy_half_core(stop_after_s: float) -> None:
    """A neighbour: busy 10 ms, idle 10 ms, until killed or ``stop_after_s`` have passed."""
    end = time.monotonic() + stop_after_s
    while time.monotonic() < end:
        busy_until = time.monotonic() + 0.010
        while time.monotonic() < busy_until:
            pass
        time.sleep(0.010)


def run_part(name: str, args: argparse.Namespace, work: Path) -> dict:
    out = work / f"{name}-out"
    if name == "script":
        command = [*ISOBENCH, "run", "--script", str(ROOT / "examples" / "train_mlp.py"), "--out", str(out), "--json"]
    elif name == "demo":
        command = [*ISOBENCH, "run", "--out", str(out), "--json"]
    else:
        study = work / f"{STUDY_OF_PART[name]['name']}.yaml"
        study.write_text(yaml.safe_dump(STUDY_OF_PART[name], sort_keys=False))
        command = [*ISOBENCH, "run", str(study), "--out", str(out), "--json"]
    neighbour = None
    if name.endswith("loaded"):
        neighbour = multiprocessing.Process(target=_busy_half_core, args=(args.max_minutes * 60,), daemon=True)
        neighbour.start()
    load = os.getloadavg()[0]
    steal0, total0 = _steal_and_total()
    started = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=args.max_minutes * 60)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.join()
    minutes = (time.monotonic() - started) / 60
    steal1, total1 = _steal_and_total()
    if result.returncode != 0:
        return {"part": name, "error": result.stderr[-600:], "minutes": minutes, "load": load}
    records = [r for r in json.loads(result.stdout) if r.get("metric") == "e2e"]
    return {"part": name, "records": records, "minutes": minutes, "load": load,
            "steal": (steal1 - steal0) / max(1, total1 - total0)}


def _ci(record: dict) -> str:
    return f"{record['ratio']:.3f}× ({record['ci_low']:.3f}–{record['ci_high']:.3f})"


def report(part: dict) -> list[str]:
    name = part["part"]
    head = f"{name}: study {part['minutes']:.1f} min, load {part['load']:.2f} at the start"
    if "error" in part:
        return [head + f"; FAILED: {part['error']}"]
    head += f", steal {part['steal']:.2%}"
    floor_target, minutes_target = TARGETS[name]
    lines = [head + (f" (target ≤ {minutes_target:g} min: {'met' if part['minutes'] <= minutes_target else 'MISSED'})"
                     if minutes_target else "")]
    for record in part["records"]:
        label, workload = record["label"], record["workload"]
        if record["is_aa"]:
            floor = max(record["ci_high"] - 1, 1 - record["ci_low"])
            lines.append(f"  {workload} A/A ±{floor:.1%} {_ci(record)} (target ≤ ±{floor_target:.1%}: "
                         f"{'met' if floor <= floor_target else 'MISSED'})")
        elif label == "slow3":
            contains = record["ci_low"] <= 1.03 <= record["ci_high"]
            excludes = record["ci_low"] > 1.0
            lines.append(f"  {workload} slowdown 0.03 reads {_ci(record)} after {record.get('n')} pairs: "
                         f"contains 1.03 {contains}, excludes 1 {excludes}")
        else:
            lines.append(f"  {workload} {label}: {record['verdict']} {_ci(record)}"
                         + (f" — {record['verdict_reason']}" if record.get("verdict_reason") else ""))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="quiet,loaded,script", help="comma-separated: " + ", ".join(TARGETS))
    parser.add_argument("--max-minutes", type=float, default=25, help="a part that runs longer is stopped")
    parser.add_argument("--keep", type=Path, default=None, help="keep each part's results under this directory")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(TARGETS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; use {', '.join(TARGETS)}")
    with tempfile.TemporaryDirectory(prefix="bench-defaults-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = []
        for name in parts:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(run_part(name, args, work))
            print("\n".join(report(results[-1])), flush=True)
    quiet = next((r for r in results if r["part"] == "quiet" and "error" not in r), None)
    loaded = next((r for r in results if r["part"] == "loaded" and "error" not in r), None)
    if quiet and loaded:
        ratio = loaded["minutes"] / quiet["minutes"]
        print(f"loaded/quiet study time: {ratio:.2f}× (target ≤ 1.5×: {'met' if ratio <= 1.5 else 'MISSED'})")


if __name__ == "__main__":
    main()

"""Resolving power: the A/A noise floor under each design, at equal wall-clock budget, in one run.

For each condition (a quiet host; then a bounded busy loop at about half a core that this
script starts and stops) and each design, a study of bare metal against its own A/A entry
runs for the same wall-clock budget (it asks for more rounds than fit and is stopped with
SIGTERM when the budget is spent: finished cells stay in the store). The floor is how far the
A/A 95% interval reaches from 1 (its half-width), per workload:

1. today: sequential, every core to the cell (2 torch threads), unpaired (Welch);
2. disjoint: the cell on its own core(s), the harness on the other; unpaired (Welch);
3. disjoint + blocked: the same cells, paired by round where that helps (analysis/blocked.py);
4. duet-fixed-sides: baseline and A/A entry at the same time, each on its own core (sides
   swapped every round), paired by pair;
5. duet: the same, the pair trading cores every 20 ms while it runs (the default).

    .venv/bin/python benchmarks/bench_resolution.py [--budget-s 150] [--min-seconds 2] [--quick]

Run it on an otherwise idle host: it prints the load average and steal time beside the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from isobench.analysis.blocked import Point, estimate
from isobench.analysis.stats import ratio_ci
from isobench.store import Store

# the default study's workloads and sizes
WORKLOADS = {"resnet-infer": {"image_size": 64, "requests": 20},
             "lenet-train": {"steps": 50, "batch_size": 16}}
DESIGNS = {
    "today": {"cell_cores": "all", "knobs": {"threads": 2}},
    "disjoint": {"cell_cores": "disjoint"},
    "duet-fixed-sides": {"cell_cores": "disjoint", "schedule": "duet", "duet_swap_s": 0},
    "duet": {"cell_cores": "disjoint", "schedule": "duet"},
}


def study_for(design: str, min_seconds: float, rounds: int) -> dict:
    return {"name": f"res-{design}", "workloads": [{"name": w, "params": p} for w, p in WORKLOADS.items()],
            "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
            "baseline": "baremetal", "repetitions": rounds, "warmup": 0, "warmup_items": 10, "seed": 7, "reruns": 0,
            "min_seconds": min_seconds, "probes": {}, **DESIGNS[design]}


def run_for(study: dict, out: Path, budget_s: float) -> float:
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "isobench.cli", "run", str(path), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the runner stops cleanly; finished cells are stored
        proc.wait(timeout=120)
    return time.monotonic() - started


def points(store: Store, workload: str, platform_key: str) -> list[Point]:
    found = []
    for row in store.conn.execute(
            "SELECT c.cell_id, c.rep, c.platform_info, m.value FROM metrics m JOIN cells c USING (cell_id) "
            "WHERE m.metric = 'e2e' AND c.workload_key = ? AND c.platform_key = ? AND c.status = 'ok' "
            "AND c.warmup = 0", (workload, platform_key)):
        duet = (json.loads(row["platform_info"] or "{}")).get("duet") or {}
        found.append(Point(row["rep"], row["value"], row["cell_id"], duet.get("pair"), duet.get("partner")))
    return found


def half_width(low: float | None, high: float | None) -> float:
    return math.nan if low is None or high is None else max(high - 1, 1 - low)


def floors(out: Path, workload: str) -> dict[str, tuple[float, int]]:
    """Design view -> (A/A floor, n) from one store."""
    store = Store.open(out)
    try:
        aa, base = points(store, workload, "aa"), points(store, workload, "baremetal")
    finally:
        store.close()
    if len(aa) < 2 or len(base) < 2:
        return {}
    blocked = estimate(aa, base, "aa")
    if any(p.pair for p in aa):
        return {"duet": (half_width(blocked.estimate.ci_low, blocked.estimate.ci_high), blocked.estimate.n)}
    welch = ratio_ci([p.value for p in aa], [p.value for p in base])
    return {"welch": (half_width(welch.ci_low, welch.ci_high), welch.n),
            "blocked": (half_width(blocked.estimate.ci_low, blocked.estimate.ci_high), blocked.estimate.n),
            "blocked_method": blocked.method}  # type: ignore[dict-item]


def busy_loop(share: float = 0.5, period_s: float = 0.02) -> subprocess.Popen:
    """About ``share`` of one core, unpinned: busy for share x period, asleep for the rest."""
    code = (f"import time\nbusy, idle = {share * period_s}, {(1 - share) * period_s}\nend = time.time() + 3600\n"
            "while time.time() < end:\n    t = time.perf_counter()\n    while time.perf_counter() - t < busy: pass\n"
            "    time.sleep(idle)\n")
    return subprocess.Popen([sys.executable, "-c", code])


def steal_jiffies() -> int:
    return int(Path("/proc/stat").read_text().splitlines()[0].split()[8])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--budget-s", type=float, default=150.0, help="wall-clock seconds per design and condition")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="cell length (min_seconds)")
    parser.add_argument("--quick", action="store_true", help="a toy run: 40 s budgets, 1 s cells")
    parser.add_argument("--conditions", default="quiet,loaded")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="a comma-separated subset of: "
                        + ", ".join(DESIGNS) + " (the ratio column needs today)")
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    if args.quick:
        args.budget_s, args.min_seconds = 40.0, 1.0
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-resolution-"))
    for condition in args.conditions.split(","):
        load = busy_loop() if condition == "loaded" else None
        try:
            for design in DESIGNS:
                if design not in designs:
                    continue
                out = work / f"{condition}-{design}"
                load_before, steal_before = os.getloadavg()[0], steal_jiffies()
                spent = run_for(study_for(design, args.min_seconds, 200), out, args.budget_s)
                steal = (steal_jiffies() - steal_before) / os.sysconf("SC_CLK_TCK") / spent / (os.cpu_count() or 1)
                per = {w: floors(out, w) for w in WORKLOADS}
                views = [("today", "welch")] if design == "today" else \
                    [("disjoint", "welch"), ("disjoint + blocked", "blocked")] if design == "disjoint" else \
                    [(design, "duet")]
                for name, key in views:
                    rows.append({"condition": condition, "design": name, "spent_s": spent, "load": load_before,
                                 "steal": steal, **{w: per[w].get(key, (math.nan, 0)) for w in WORKLOADS},
                                 "method": {w: per[w].get("blocked_method", "") for w in WORKLOADS}
                                 if key == "blocked" else {}})
                print(f"  {condition:6s} {design:9s} done in {spent:.0f} s", file=sys.stderr)
        finally:
            if load is not None:
                load.kill()
                load.wait()
    print(f"\nA/A noise floor (95% CI half-width) at equal wall-clock budget ({args.budget_s:.0f} s a design, "
          f"cells of {args.min_seconds:g} s), {os.cpu_count()} cores; results under {work}")
    header = f"{'condition':9s} {'design':20s} " + " ".join(f"{w:>22s}" for w in WORKLOADS) + \
        "  ratio to today  load  steal"
    print(header)
    nothing = {w: (math.nan, 0) for w in WORKLOADS}
    today = {r["condition"]: r for r in rows if r["design"] == "today"}
    for row in rows:
        cells = " ".join(f"{'±' + format(row[w][0], '.1%') if row[w][0] == row[w][0] else 'n/a':>14s} (n={row[w][1]:2d})"
                         for w in WORKLOADS)
        base = today.get(row["condition"], nothing)
        ratios = "/".join(f"{row[w][0] / base[w][0]:.2f}" if base[w][0] == base[w][0] and base[w][0] else "n/a"
                          for w in WORKLOADS)
        print(f"{row['condition']:9s} {row['design']:20s} {cells}  {ratios:>14s}  {row['load']:.2f}  {row['steal']:.1%}")
    print("\nratio to today: each workload's floor divided by today's design under the same condition "
          "(below 1 is better); load: 1-minute load average at the start; steal: share of CPU time stolen")


if __name__ == "__main__":
    main()

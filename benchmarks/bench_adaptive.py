"""How many repetitions `repetitions: auto` saves against a fixed N reaching the same CI width.

A simulated study (no cells run: outcomes are drawn from a noise model) goes through the real
adaptive loop (isobench.runner.adaptive.cells_to_run, the store, the Welch intervals). The
noise model is log-normal per group, shaped like a default study on a busy 2-core host:
quiet platforms (1% between repetitions), a noisy one (gVisor-like, 3%), and an A/A entry.

For each simulated study the script reports the measured cells adaptive repetition used, and
two fixed designs on draws from the same noise model:

* fixed N (oracle): the smallest N at which every comparison was within the target when
  all groups run every round -- the best a fixed N could have done for that draw;
* fixed N (planned): the N the sample-size advisor gives from the true noise for the noisiest
  comparison (what a careful user would pick up front).

Usage: python benchmarks/bench_adaptive.py [--studies 20] [--target 0.01]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from isobench.analysis.advisor import repetitions_for_halfwidth  # noqa: E402
from isobench.analysis.stats import ratio_ci  # noqa: E402
from isobench.plan import expand  # noqa: E402
from isobench.runner.adaptive import cells_to_run  # noqa: E402
from isobench.runner.execute import CellOutcome  # noqa: E402
from isobench.store import Store  # noqa: E402
from isobench.studyfile import load_study_text  # noqa: E402

SD = {"baremetal": 0.01, "aa": 0.01, "docker": 0.01, "crun": 0.01, "gvisor": 0.03}
RATIO = {"baremetal": 1.0, "aa": 1.0, "docker": 1.03, "crun": 1.02, "gvisor": 1.25}
STUDY = """
name: bench-adaptive
workloads: [{{name: cpu-spin}}]
platforms:
  - {{name: baremetal}}
  - {{name: baremetal, label: aa}}
  - {{name: docker}}
  - {{name: oci, label: crun, runtime: crun}}
  - {{name: gvisor}}
repetitions: auto
adaptive: {{target: {target}, min_repetitions: 3, max_repetitions: {max_reps}}}
warmup: 0
"""


def draw(rng: random.Random, key: str) -> float:
    return 0.01 * RATIO[key] * math.exp(rng.gauss(0, SD[key]))


def outcome(cell, value: float) -> CellOutcome:  # type: ignore[no-untyped-def]
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0, wall_s=1.0,
                       startup_s=0.1, items=[{"i": 0, "e2e": value, "phases": {}}], done={"run_s": value})


def adaptive_cells(seed: int, target: float, max_reps: int) -> tuple[int, bool]:
    text = STUDY.format(target=target, max_reps=max_reps)
    study = load_study_text(text, "bench.yaml", check_host=False)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.create(Path(tmp), text, study.name, "bench.yaml", {})
        used = 0
        for cell in cells_to_run(study, expand(study), store, say=lambda _: None):
            store.record(outcome(cell, draw(rng, cell.platform_key)), cell.platform_key)
            used += 1
        import json

        reached = json.loads(store.meta("adaptive") or "{}").get("reason", "").startswith("every")
        store.close()
    return used, reached


def fixed_oracle_cells(seed: int, target: float, max_reps: int) -> int:
    """All groups every round, stopping at the first N where every comparison is within target."""
    rng = random.Random(seed + 10_000)
    values: dict[str, list[float]] = {key: [] for key in SD}
    goal = math.log1p(target)
    for n in range(1, max_reps + 1):
        for key in SD:
            values[key].append(draw(rng, key))
        if n < 2:
            continue
        widths = []
        for key in SD:
            if key == "baremetal":
                continue
            est = ratio_ci(values[key], values["baremetal"])
            widths.append((math.log(est.ci_high) - math.log(est.ci_low)) / 2)  # type: ignore[arg-type]
        if max(widths) <= goal:
            return n * len(SD)
    return max_reps * len(SD)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=20)
    parser.add_argument("--target", type=float, default=0.02)
    parser.add_argument("--max-repetitions", type=int, default=60)
    args = parser.parse_args()
    planned_n = max(repetitions_for_halfwidth(SD[k], SD["baremetal"], args.target) for k in SD if k != "baremetal")
    planned = planned_n * len(SD)
    adaptive, oracle, reached = [], [], 0
    for seed in range(args.studies):
        used, ok = adaptive_cells(seed, args.target, args.max_repetitions)
        adaptive.append(used)
        reached += ok
        oracle.append(fixed_oracle_cells(seed, args.target, args.max_repetitions))
    mean_a, mean_o = statistics.fmean(adaptive), statistics.fmean(oracle)
    print(f"noise model: sd {SD}; target ±{args.target:.1%}; {args.studies} simulated studies, "
          f"{len(SD)} groups")
    print(f"adaptive (repetitions: auto): {mean_a:.1f} measured cells per study "
          f"(min {min(adaptive)}, max {max(adaptive)}); reached the target in {reached}/{args.studies}")
    print(f"fixed N, oracle (first N where all comparisons are within target): {mean_o:.1f} cells per study")
    print(f"fixed N, planned by the advisor from the true noise: N={planned_n}, {planned} cells per study")
    print(f"saved vs the oracle fixed N: {1 - mean_a / mean_o:.0%}; vs the planned fixed N: {1 - mean_a / planned:.0%}")


if __name__ == "__main__":
    main()

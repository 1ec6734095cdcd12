"""What probes cost a cell, measured in one run, cells interleaved so drift hits both sides.

1. The default probe set on vs off: the E2E time ratio (target <= 1.01, with a 95% CI half-width
   <= 1%) on resnet-infer and lenet-train, paired by round (the two sides of a round run back to
   back, order flipped every round), and the runner's extra CPU per cell. Cells run as a study
   runs them: on their own core, the runner on the harness's (plan/cores.py), 5 s long.
2. Each optional probe alone vs none on lenet-train: E2E ratio, extra CPU, start+stop time.

    .venv/bin/python benchmarks/bench_probes.py [--reps 5] [--cost-reps 3] [--platform baremetal]

On a shared 2-core host the E2E CI is often wider than 1%: the extra CPU per cell on the
probes' side (the runner's threads, and the perf children's own CPU) is the steadier measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import time

from isobench.analysis.stats import paired_ratio_ci, ratio_ci
from isobench.plan import expand
from isobench.plan.cells import Cell
from isobench.probes import PROBES
from isobench.probes.session import default_probe_config
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.study import prepare_data
from isobench.store.sqlite import cell_metrics
from isobench.studyfile import load_study_text

WORKLOADS = {"resnet-infer": {"image_size": 64, "requests": 10, "min_seconds": 5.0},
             "lenet-train": {"steps": 20, "batch_size": 16, "min_seconds": 5.0}}  # the default study's sizes


def make_cell(workload: str, params: dict, platform: str) -> Cell:
    study = {"name": "bench-probes", "workloads": [{"name": workload, "params": params}],
             "platforms": [{"name": platform}], "repetitions": 1, "warmup": 0, "warmup_items": 5,
             "probes": {}}
    cell = expand(load_study_text(json.dumps(study), "bench.yaml"))[0]
    return dataclasses.replace(cell, data_dir=prepare_data([cell]).get(cell.data_key or ""))


def runner_cpu_s() -> float:
    """The runner's own CPU (all its threads: probe samplers included). Not its children: on bare
    metal the worker is one of them."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def run_once(cell: Cell, probes: dict, platform) -> tuple[float, float, dict, float]:  # type: ignore[no-untyped-def]
    """(e2e seconds per item, probe-side CPU seconds, probe status, wall seconds) of one cell: the
    runner's own CPU plus what the probes' child processes (perf) report they used."""
    before = runner_cpu_s()
    outcome = run_cell(dataclasses.replace(cell, probes=probes), platform)
    used = runner_cpu_s() - before
    used += sum(s.get("info", {}).get("child_cpu_s", 0.0) for s in outcome.probes.status.values())
    if outcome.status != "ok":
        raise RuntimeError(f"{cell.workload}: {outcome.error}")
    e2e = next(v for m, v, _ in cell_metrics(outcome) if m == "e2e")
    return e2e, used, outcome.probes.status, outcome.wall_s


def interleaved(cell: Cell, platform, a: dict, b: dict, reps: int) -> dict:  # type: ignore[no-untyped-def]
    """Run ``a`` and ``b`` alternately (order flipped every round); per side: e2e values and CPU."""
    sides: dict[str, dict] = {s: {"e2e": [], "cpu": [], "status": [], "wall": []} for s in "ab"}
    for rep in range(reps):
        order = [("a", a), ("b", b)] if rep % 2 == 0 else [("b", b), ("a", a)]
        for side, probes in order:
            e2e, cpu, status, wall = run_once(cell, probes, platform)
            sides[side]["wall"].append(wall)
            sides[side]["e2e"].append(e2e)
            sides[side]["cpu"].append(cpu)
            sides[side]["status"].append(status)
    return sides


def fmt_ratio(sample: list[float], reference: list[float]) -> str:
    """Paired by round (the sides of a round ran back to back), Welch where pairing does not help."""
    paired = paired_ratio_ci(list(zip(sample, reference, strict=True))) if len(sample) >= 3 else None
    welch = ratio_ci(sample, reference)
    est, how = (paired, "paired") if paired and paired.se is not None and welch.se is not None \
        and paired.se < welch.se else (welch, "Welch")
    if est.ci_low is None or est.ci_high is None:
        return f"{est.ratio:.3f} (no CI)"
    half = max(est.ci_high - 1, 1 - est.ci_low)
    return f"{est.ratio:.3f} (95% CI {est.ci_low:.3f}-{est.ci_high:.3f}, ±{half:.1%} from 1, {how})"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sampler_costs(seconds: float = 2.0) -> None:
    """CPU per sample of each default probe, watching a sleeping process in a cgroup of its own."""
    import os
    import subprocess

    from isobench.platforms.cgroups import CellCgroup
    from isobench.target import ProbeTarget

    group = CellCgroup.create(f"isobench/bench-probes-{os.getpid()}", cpus=None, cpuset=None, memory=None)
    child = subprocess.Popen(["sleep", str(int(seconds * 4) + 5)], preexec_fn=group.join)
    try:
        target = ProbeTarget(platform="bench", root_pid=child.pid, cgroups=dict(group.dirs))
        total = 0.0
        for name, settings in sorted(default_probe_config().items()):
            cls = PROBES.get(name)
            defaults = cls.Settings(**settings)
            probe = cls(cls.Settings(**{**settings, "interval_s": 0.01}) if "interval_s" in cls.Settings.model_fields
                        else defaults)
            probe.start(target)
            time.sleep(seconds)
            probe.stop()
            probe.abort()
            sampler = getattr(probe, "sampler", None)
            if sampler is None or not sampler.samples:
                print(f"  {name:12s} reads at start and end only")
                continue
            per_sample = sampler.cpu_s / sampler.samples
            share = per_sample / defaults.interval_s  # type: ignore[attr-defined]
            total += share
            print(f"  {name:12s} {1000 * per_sample:.2f} ms CPU per sample; every {defaults.interval_s:g} s "  # type: ignore[attr-defined]
                  f"= {100 * share:.2f}% of one core")
        print(f"  {'all':12s} {100 * total:.2f}% of one core while a cell runs")
    finally:
        child.kill()
        child.wait()
        group.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=12, help="rounds of the default-set comparison")
    parser.add_argument("--cost-reps", type=int, default=3, help="rounds per optional probe")
    parser.add_argument("--platform", default="baremetal")
    parser.add_argument("--skip-default", action="store_true")
    parser.add_argument("--skip-optional", action="store_true")
    args = parser.parse_args()

    started = time.monotonic()
    # The runner on the harness's core(s), the cells on theirs, as `isobench run` places them.
    from isobench.plan.cores import core_layout
    from isobench.runner.harness import harness_on_its_cores

    layout = core_layout(load_study_text(json.dumps({"name": "layout", "workloads": [{"name": "cpu-spin"}],
                                                     "platforms": [{"name": args.platform}]}), "bench.yaml"))
    harness = harness_on_its_cores(layout, pin_engine=False)
    print(f"cores: {harness.__enter__()}")
    print("sampling cost of the default probes (their own thread's CPU time)")
    sampler_costs()
    platform = None
    defaults = default_probe_config()
    if not args.skip_default:
        print(f"default probe set {sorted(defaults)} on vs off, {args.platform}, {args.reps} interleaved rounds")
        for workload, params in WORKLOADS.items():
            cell = make_cell(workload, params, args.platform)
            platform = platform or platform_for(cell)
            platform.prepare()
            run_once(cell, {}, platform)  # warm-up: page cache, imports
            sides = interleaved(cell, platform, defaults, {}, args.reps)
            extra_ms = 1000 * (mean(sides["a"]["cpu"]) - mean(sides["b"]["cpu"]))
            geo = [math.exp(mean([math.log(v) for v in sides[s]["e2e"]])) for s in "ab"]
            print(f"  {workload:13s} e2e on/off {fmt_ratio(sides['a']['e2e'], sides['b']['e2e'])}  "
                  f"[{geo[0] * 1000:.2f} vs {geo[1] * 1000:.2f} ms/item]  runner CPU +{extra_ms:.0f} ms/cell "
                  f"= {extra_ms / 10 / mean(sides['a']['wall']):.2f}% of one core over the cell")

    if args.skip_optional:
        print(f"\n(took {time.monotonic() - started:.0f} s)")
        return
    print(f"\noptional probes alone vs none, lenet-train, {args.platform}, {args.cost_reps} interleaved rounds")
    cell = make_cell("lenet-train", WORKLOADS["lenet-train"], args.platform)
    platform = platform or platform_for(cell)
    platform.prepare()
    print(f"  {'probe':12s} {'e2e ratio':32s} {'runner CPU':>14s} {'start+stop':>11s}")
    for name, cls in PROBES:
        if cls.default:
            continue
        check = cls.check()
        if not check.ok:
            print(f"  {name:12s} unavailable: {check.reason}")
            continue
        sides = interleaved(cell, platform, {name: {}}, {}, args.cost_reps)
        statuses = [s[name] for s in sides["a"]["status"]]
        failed = [s for s in statuses if s.get("status") != "ok"]
        if failed:
            print(f"  {name:12s} failed: {failed[0].get('reason')}")
            continue
        overhead = mean([s.get("start_s", 0) + s.get("stop_s", 0) for s in statuses])
        extra_ms = 1000 * (mean(sides["a"]["cpu"]) - mean(sides["b"]["cpu"]))
        print(f"  {name:12s} {fmt_ratio(sides['a']['e2e'], sides['b']['e2e']):32s} "
              f"{extra_ms:+10.0f} ms/cell {overhead:10.2f} s")
    print(f"\n(took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

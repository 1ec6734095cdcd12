"""What probes cost a cell, measured in one run, cells interleaved so drift hits both sides.

1. The default probe set on vs off: the E2E time ratio (target <= 1.01, with a 95% CI half-width
   <= 1%) on resnet-infer and lenet-train, paired by round (the two sides of a round run back to
   back, order flipped every round), and the runner's extra CPU per cell. Cells run as a study
   runs them: on their own core, the runner on the harness's (plan/cores.py), 5 s long.
2. Each optional probe alone vs none on lenet-train, after one untimed cell with the probe:
   start+stop seconds (target <= 1 s) and the harness's extra CPU per cell as a share of one core
   over the cell (target <= 10%: the runner's threads, and what the probe's child processes
   report), the E2E ratio, and a first cell in a fresh interpreter (what a run's first cell pays
   once: imports, compiled parsers, symbol tables), beside the load average and steal time.

    .venv/bin/python benchmarks/bench_probes.py [--reps 12] [--cost-reps 3] [--platform baremetal]
        [--probes ftrace,pagefaults] [--skip-default] [--write-costs]

--write-costs stores part 2 per probe in src/isobench/probes/costs.json (merged: probes not
measured keep their entry), which `isobench probes` shows in its cost column.

On a shared 2-core host the E2E CI is often wider than 1%: the extra CPU per cell on the
probes' side is the steadier measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform as pyplatform
import resource
import subprocess
import sys
import time
from pathlib import Path

from isobench.analysis.stats import paired_ratio_ci, ratio_ci
from isobench.plan import expand
from isobench.plan.cells import Cell
from isobench.probes import PROBES
from isobench.probes.session import default_probe_config
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.study import prepare_data
from isobench.store.sqlite import cell_metrics
from isobench.studyfile import load_study_text

COSTS = Path(__file__).resolve().parents[1] / "src" / "isobench" / "probes" / "costs.json"
TARGET_START_STOP_S = 1.0
TARGET_CPU_PCT = 10.0
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


class Conditions:
    """The host's load average and steal time over a measurement (other jobs share this host)."""

    def __init__(self) -> None:
        self.load = [os.getloadavg()[0]]
        self._stat = self._cpu()

    @staticmethod
    def _cpu() -> list[int]:
        with open("/proc/stat") as stat:  # cpu user nice system idle iowait irq softirq steal ...
            return [int(v) for v in stat.readline().split()[1:9]]

    def end(self) -> Conditions:
        self.load.append(os.getloadavg()[0])
        delta = [b - a for a, b in zip(self._stat, self._cpu(), strict=True)]
        self.steal_pct = 100 * delta[7] / max(1, sum(delta))
        return self

    def __str__(self) -> str:
        return f"load {self.load[0]:.2f}->{self.load[-1]:.2f}, steal {self.steal_pct:.2f}%"


def host_line() -> str:
    from isobench.hostinfo import cpu_model

    virtual = "hypervisor" in Path("/proc/cpuinfo").read_text()
    return f"{os.cpu_count()}-CPU {'VM' if virtual else 'machine'} ({cpu_model()}), Linux {pyplatform.release()}"


def first_cell(name: str, platform_name: str) -> float | None:
    """start+stop seconds of the probe on one cell in a fresh interpreter: what a run's first cell pays."""
    out = subprocess.run([sys.executable, __file__, "--one-cell", name, "--platform", platform_name],
                         capture_output=True, text=True, timeout=600)
    try:
        return float(json.loads(out.stdout.strip().splitlines()[-1])["start_stop_s"])
    except (IndexError, ValueError, KeyError):
        print(f"  {name}: the first-cell run failed: {out.stderr.strip()[-300:]}")
        return None


def one_cell(name: str, platform_name: str) -> None:
    cell = make_cell("lenet-train", WORKLOADS["lenet-train"], platform_name)
    platform = platform_for(cell)
    platform.prepare()
    _, _, status, _ = run_once(cell, {name: {}}, platform)
    print(json.dumps({"start_stop_s": status[name].get("start_s", 0) + status[name].get("stop_s", 0)}))


def optional_costs(names: list[str], platform_name: str, reps: int) -> dict[str, dict]:
    """Each optional probe alone vs none on lenet-train: printed, and returned per probe."""
    cell = make_cell("lenet-train", WORKLOADS["lenet-train"], platform_name)
    platform = platform_for(cell)
    platform.prepare()
    run_once(cell, {}, platform)  # warm-up: page cache, imports
    print(f"  targets: start+stop <= {TARGET_START_STOP_S:g} s, harness CPU <= {TARGET_CPU_PCT:g}% of one core "
          "over the cell")
    print(f"  {'probe':11s} {'start+stop':>20s} {'harness CPU per cell':>24s} {'first cell':>10s}  "
          f"{'e2e ratio':34s} conditions")
    found: dict[str, dict] = {}
    params = ", ".join(f"{key} {value:g}" for key, value in WORKLOADS["lenet-train"].items())
    for name in names:
        cls = PROBES.get(name)
        check = cls.check()
        if not check.ok:
            print(f"  {name:11s} unavailable: {check.reason}")
            continue
        conditions = Conditions()
        first = first_cell(name, platform_name)
        run_once(cell, {name: {}}, platform)  # untimed: what only a run's first cell pays, paid here
        sides = interleaved(cell, platform, {name: {}}, {}, reps)
        conditions.end()
        statuses = [s[name] for s in sides["a"]["status"]]
        failed = [s for s in statuses if s.get("status") != "ok"]
        if failed:
            print(f"  {name:11s} failed: {failed[0].get('reason')}")
            continue
        start_stop = [s.get("start_s", 0) + s.get("stop_s", 0) for s in statuses]
        extra = [a - b for a, b in zip(sides["a"]["cpu"], sides["b"]["cpu"], strict=True)]
        share = 100 * mean(extra) / mean(sides["a"]["wall"])
        verdict = ("ok" if mean(start_stop) <= TARGET_START_STOP_S else "OVER",
                   "ok" if share <= TARGET_CPU_PCT else "OVER")
        first_text = f"{first:.2f} s" if first is not None else "-"
        print(f"  {name:11s} {mean(start_stop):6.2f} s (max {max(start_stop):.2f}) {verdict[0]:4s} "
              f"{mean(extra):+6.2f} s = {share:5.1f}% {verdict[1]:4s} {first_text:>10s}  "
              f"{fmt_ratio(sides['a']['e2e'], sides['b']['e2e']):34s} {conditions}")
        found[name] = {
            "start_stop_s": round(mean(start_stop), 3), "start_stop_max_s": round(max(start_stop), 3),
            "harness_cpu_s": round(mean(extra), 3), "harness_cpu_pct": round(share, 2),
            "cell_wall_s": round(mean(sides["a"]["wall"]), 2),
            "first_cell_start_stop_s": round(first, 3) if first is not None else None,
            "e2e_ratio": round(math.exp(mean([math.log(a / b) for a, b in
                                              zip(sides["a"]["e2e"], sides["b"]["e2e"], strict=True)])), 4),
            "measured": {"date": time.strftime("%Y-%m-%d", time.gmtime()), "host": host_line(),
                         "cell": f"lenet-train ({params}), {platform_name}", "rounds": reps,
                         "load_avg": [round(v, 2) for v in conditions.load],
                         "steal_pct": round(conditions.steal_pct, 2)}}
    return found


def write_costs(found: dict[str, dict]) -> None:
    stored = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    stored["about"] = ("what each probe cost a cell: start+stop seconds and the harness's extra CPU as a share "
                       "of one core over the cell, measured by benchmarks/bench_probes.py --write-costs "
                       "(each probe alone vs none, cells interleaved); `isobench probes` shows them")
    stored["targets"] = {"start_stop_s": TARGET_START_STOP_S, "harness_cpu_pct": TARGET_CPU_PCT}
    stored["probes"] = {**stored.get("probes", {}), **found}
    COSTS.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(f"  wrote {COSTS}")


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
    parser.add_argument("--probes", default="", help="optional probes to measure, comma-separated (default: all)")
    parser.add_argument("--write-costs", action="store_true", help=f"store the optional probes' costs in {COSTS}")
    parser.add_argument("--one-cell", metavar="PROBE", help=argparse.SUPPRESS)  # first_cell's child
    args = parser.parse_args()
    if args.one_cell:
        one_cell(args.one_cell, args.platform)
        return

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
    names = args.probes.split(",") if args.probes else [name for name, cls in PROBES if not cls.default]
    print(f"\noptional probes alone vs none, lenet-train, {args.platform}, {args.cost_reps} interleaved rounds; "
          f"{host_line()}")
    found = optional_costs(names, args.platform, args.cost_reps)
    if args.write_costs and found:
        write_costs(found)
    print(f"\n(took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()

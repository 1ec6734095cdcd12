"""Probes proc, cgroup, vmstat, environment, perf, gpu, energy against real processes, cgroups,
containers and perf. Cells use cpu-spin at tiny sizes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from isobench.plan import expand
from isobench.platforms.cgroups import CellCgroup
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text
from isobench.target import ProbeTarget
from tests.conftest import need_docker, need_root, need_tool, run_cli, wait_perf_attached, write_study

TINY = {"iterations": 3, "work": 20000}


def _cell(entry: dict, probes: dict | None, params: dict | None = None, knobs: dict | None = None,
          workload: str = "cpu-spin"):
    study = {"name": "probes", "workloads": [{"name": workload, "params": params or TINY}],
             "platforms": [{**entry, "knobs": knobs or {}}], "repetitions": 1, "warmup": 0, "timeout_s": 120}
    if probes is not None:
        study["probes"] = probes
    cell = expand(load_study_text(json.dumps(study), "probes.yaml"))[0]
    platform = platform_for(cell)
    platform.prepare()
    outcome = run_cell(cell, platform)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    return outcome, {m: v for m, v, _ in outcome.probes.metrics}


def _need(platform: str) -> None:
    if platform == "docker":
        need_docker()
    else:
        need_root()


def _our_perf_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "perf"]


# -- study input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("probes, field", [({"nosuch": {}}, "probes.nosuch"),
                                           ({"proc": {"rate": 5}}, "probes.proc.rate")])
def test_unknown_probe_or_setting_is_a_one_line_error(tmp_path: Path, tiny_spin: dict, probes: dict,
                                                      field: str) -> None:
    study = write_study(tmp_path / "s.yaml", {"name": "bad", "workloads": [tiny_spin],
                                              "platforms": [{"name": "baremetal"}], "probes": probes})
    out = run_cli("plan", str(study))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "s.yaml" in lines[0], out.stderr


def test_default_set_is_the_cheap_probes_and_none_means_none() -> None:
    from isobench.probes.session import default_probe_config

    assert set(default_probe_config()) == {"proc", "cgroup", "vmstat", "environment"}
    study = {"name": "p", "workloads": [{"name": "cpu-spin", "params": TINY}],
             "platforms": [{"name": "baremetal"}], "probes": {}}
    assert expand(load_study_text(json.dumps(study), "p.yaml"))[0].probes == {}


# -- cgroup, proc, environment on real cells ---------------------------------------------------------

@pytest.mark.parametrize("platform", ["baremetal", "docker"])
def test_cgroup_throttling_visible_with_half_a_cpu(platform: str) -> None:
    _need(platform)
    probes = {"cgroup": {"interval_s": 0.2}, "proc": {"interval_s": 0.1}, "environment": {}}
    params = {"iterations": 6, "work": 2_000_000}  # ~1 s of CPU wanted: over the quota in most periods
    outcome, metrics = _cell({"name": platform}, probes, params=params, knobs={"cpus": 0.5})
    assert metrics["probe.cgroup.nr_periods"] > 5
    if metrics["probe.cgroup.nr_throttled"] == 0:
        # Only a cell that gets more than its quota can be throttled: on a host so busy that it got
        # less than half a core anyway (other jobs), show the throttling under a quota it does reach.
        got = metrics["probe.cgroup.cpu_usage_s"] / outcome.wall_s
        assert got < 0.45, f"the cell used {got:.2f} cores under a 0.5 quota and was never throttled"
        outcome, metrics = _cell({"name": platform}, probes, params=params, knobs={"cpus": 0.05})
    assert metrics["probe.cgroup.nr_throttled"] > 0 and metrics["probe.cgroup.throttled_s"] > 0
    assert 0 < metrics["probe.cgroup.throttled_ratio"] <= 1
    assert metrics["probe.cgroup.mem_usage_max_bytes"] > 1 << 20
    cgroup = outcome.probes.status["cgroup"]["info"]
    assert cgroup["counted_until"] == "done"  # read before the engine removed the container's group
    if Path("/proc/pressure/cpu").exists():
        assert metrics["probe.cgroup.psi_cpu_some_s"] > 0  # waiting on the quota is a CPU stall
    # proc sampled the same process tree: its CPU time agrees with the cgroup's
    cpu_cgroup, cpu_proc = metrics["probe.cgroup.cpu_usage_s"], metrics["probe.proc.cpu_s"]
    assert cpu_proc == pytest.approx(cpu_cgroup, rel=0.25, abs=0.1)
    assert metrics["probe.proc.samples"] >= 3 and metrics["probe.proc.rss_max_bytes"] > 5 << 20
    assert metrics["probe.environment.online_cpus"] == len(os.sched_getaffinity(0))
    assert outcome.probes.status["environment"]["info"]["cgroup"] in ("v1", "v2", "hybrid")
    # the sampled series are Arrow-ready columns of equal length
    series = outcome.probes.series
    assert ("cgroup", "samples") in series and ("proc", "samples") in series


def test_vmstat_sees_what_a_writer_dirties_and_writes(tmp_path: Path) -> None:
    from isobench.probes.vmstat import VmstatProbe, VmstatSettings

    probe = VmstatProbe(VmstatSettings(interval_s=0.05))
    probe.start(ProbeTarget(platform="test", root_pid=os.getpid()))
    try:
        target = Path("/var/tmp") / f"isobench-vmstat-{os.getpid()}"
        with target.open("wb") as handle:  # a disk-backed file: 8 MiB dirtied, then fsync'ed
            handle.write(os.urandom(8 << 20))
            handle.flush()
            os.fsync(handle.fileno())
        target.unlink()
        result = probe.stop()
    finally:
        probe.abort()
    metrics = {m: v for m, v, _ in result.metrics}
    pages = (8 << 20) // 4096
    assert metrics["nr_dirtied"] >= pages * 0.9  # host-wide counters: at least what we did
    assert metrics["nr_written"] >= pages * 0.9
    assert metrics["pgpgout"] >= (8 << 20) // 1024 * 0.9  # pgpgout counts KiB
    assert set(result.info["dirty_sysctls"]) >= {"dirty_ratio", "dirty_background_bytes"}
    assert "pgfault" in result.series["deltas"]["name"]


# -- perf --------------------------------------------------------------------------------------------

TOUCHER = """
import sys, resource
sys.stdin.readline()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(32 << 20)
for offset in range(0, len(block), 4096):
    block[offset] = 1
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("scope", ["cgroup", "pids"])
def test_perf_page_faults_agree_with_an_independent_perf_stat(scope: str) -> None:
    need_tool("perf")
    from isobench.probes.perf import PerfProbe, PerfSettings

    if not PerfProbe.check().ok:
        pytest.skip(f"host's perf cannot count: {PerfProbe.check().reason}")
    group = CellCgroup.create(f"isobench/test-perf-{os.getpid()}", cpus=None, cpuset=None, memory=None) \
        if scope == "cgroup" else None
    child = subprocess.Popen([sys.executable, "-c", TOUCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, preexec_fn=group.join if group else None)
    probe = PerfProbe(PerfSettings(engine=False, host=False))
    independent = None
    try:
        target = ProbeTarget(platform="test", root_pid=child.pid, cgroups=dict(group.dirs) if group else {})
        probe.start(target)
        assert probe.how["cell"].startswith(scope)
        independent = subprocess.Popen(["perf", "stat", "-x,", "-e", "page-faults", "-p", str(child.pid)],
                                       stderr=subprocess.PIPE, text=True)
        for perf in (probe.runs["cell"], independent):  # both perf processes have their counters open
            wait_perf_attached(perf.pid)
        time.sleep(0.2)  # and enabled
        child.stdin.write("go\n")
        child.stdin.flush()
        touched = int(child.stdout.readline())
        result = probe.stop()
        independent.send_signal(signal.SIGINT)
        reference = float(independent.communicate(timeout=10)[1].strip().splitlines()[-1].split(",")[0])
    finally:
        probe.abort()
        if independent is not None and independent.poll() is None:
            independent.kill()
            independent.wait()
        child.kill()
        child.wait()
        if group:
            group.destroy()
    counted = {m: v for m, v, _ in result.metrics}["cell.page_faults"]
    assert touched >= (32 << 20) // 4096 * 0.9  # the process's own count (getrusage)
    assert counted == pytest.approx(reference, rel=0.05, abs=100)
    assert counted >= touched
    assert not _our_perf_children()


def test_perf_separates_container_engine_and_host(tmp_path: Path) -> None:
    need_docker()
    need_tool("perf")
    # The container allocates 16 MiB after a pause: perf counts the container's cgroup only from
    # when `docker inspect` names it, and a worker that allocated at once could finish first.
    script = tmp_path / "allocate.py"
    script.write_text("import time\ntime.sleep(1.5)\nblock = bytearray(16 << 20)\n"
                      "for offset in range(0, len(block), 4096):\n    block[offset] = 1\n")
    outcome, metrics = _cell({"name": "docker"}, {"perf": {}}, params={"path": str(script)}, workload="script")
    info = outcome.probes.status["perf"]["info"]
    assert info["scopes"]["cell"].startswith("cgroup docker/")
    dockerd = {int(p) for p in subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()}
    engine = set(json.loads(info["scopes"]["engine"].removeprefix("pids ")))
    assert dockerd and dockerd <= engine
    # three separate columns, each with its own counts
    for scope in ("cell", "engine", "host", "total"):
        assert f"probe.perf.{scope}.page_faults" in metrics and f"probe.perf.{scope}.task_clock_s" in metrics
    assert metrics["probe.perf.cell.page_faults"] >= (16 << 20) // 4096 * 0.9  # the container's allocation
    assert metrics["probe.perf.engine.context_switches"] > 0  # the daemon relayed the records
    assert metrics["probe.perf.cell.page_faults"] != metrics["probe.perf.engine.page_faults"]
    # the whole host contains each column; what is left is the host's, never negative, and a
    # task counted in both the cell and the engine column is reported, not hidden in the clamp
    cell, engine = metrics["probe.perf.cell.page_faults"], metrics["probe.perf.engine.page_faults"]
    total = metrics["probe.perf.total.page_faults"]
    assert total >= cell and total >= engine
    assert metrics["probe.perf.host.page_faults"] == max(0.0, total - cell - engine)
    assert (cell + engine > total) == ("page-faults" in info.get("overlap", {}))
    if info.get("unsupported"):  # a VM without PMU: hardware events are named, not silently absent
        assert "probe.perf.cell.cycles" not in metrics
    assert not _our_perf_children()


def test_perf_on_bare_metal_has_no_engine_column() -> None:
    need_tool("perf")
    outcome, metrics = _cell({"name": "baremetal"}, {"perf": {"host": False}})
    assert metrics["probe.perf.cell.task_clock_s"] > 0
    assert not any(".engine." in m or ".total." in m for m in metrics)
    assert not _our_perf_children()


def test_perf_children_die_with_a_killed_runner(tmp_path: Path) -> None:
    need_tool("perf")
    script = tmp_path / "runner.py"
    script.write_text(
        "import os, time\n"
        "from isobench.target import ProbeTarget\n"
        "from isobench.probes.perf import PerfProbe, PerfSettings\n"
        "probe = PerfProbe(PerfSettings())\n"
        "probe.start(ProbeTarget(platform='test', root_pid=os.getpid()))\n"
        "print(' '.join(str(p.pid) for p in probe.runs.values()), flush=True)\n"
        "time.sleep(60)\n")
    runner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in runner.stdout.readline().split()]
        assert pids and all(psutil.pid_exists(p) for p in pids)
    finally:
        runner.kill()  # no stop, no abort, no atexit: only the kernel's parent-death signal is left
        runner.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- store and analysis ------------------------------------------------------------------------------

def test_probe_metrics_land_in_the_store_and_compare_to_the_baseline(tmp_path: Path) -> None:
    need_docker()
    from isobench.analysis.compare import compare
    from isobench.store import Store

    study = write_study(tmp_path / "s.yaml", {
        "name": "probes-store", "workloads": [{"name": "cpu-spin", "params": TINY}],
        "platforms": [{"name": "baremetal"}, {"name": "docker"}], "baseline": "baremetal",
        "repetitions": 2, "warmup": 0})
    run_cli("run", str(study), "--out", str(tmp_path / "out"), check=True)
    store = Store.open(tmp_path / "out")
    metrics = {row["metric"] for row in store.metric_rows()}
    assert {"probe.vmstat.pgfault", "probe.cgroup.cpu_usage_s", "probe.proc.rss_max_bytes",
            "probe.environment.online_cpus"} <= metrics
    tables = store.series("cgroup", "samples")
    assert len(tables) == 4 and all(t.num_rows >= 1 and "cpu_usage_s" in t.column_names for t in tables.values())
    comparisons = {c.metric: c for c in compare(store) if c.platform.startswith("docker")}
    for metric in ("probe.vmstat.pgfault", "probe.cgroup.cpu_usage_s", "probe.cgroup.pgfault"):
        c = comparisons[metric]
        assert c.ratio > 0 and c.ci_low is not None and c.ci_low <= c.ratio <= c.ci_high and c.n == 2
    store.close()


# -- gpu and energy ----------------------------------------------------------------------------------

def test_gpu_probe_says_why_it_is_unavailable() -> None:
    from isobench.probes.gpu import GpuProbe

    check = GpuProbe.check()
    if check.ok:
        pytest.skip("this host has an NVIDIA GPU: the unavailable path cannot be shown")
    assert "NVML" in check.reason
    need_root()
    outcome, metrics = _cell({"name": "baremetal"}, {"gpu": {}, "proc": {}})
    assert outcome.probes.status["gpu"] == {"status": "unavailable", "reason": check.reason}
    assert not any(m.startswith("probe.gpu.") for m in metrics) and "probe.proc.cpu_s" in metrics


def test_energy_is_unavailable_without_a_meter_and_baseload_says_so() -> None:
    from isobench.probes.energy import EnergyProbe

    check = EnergyProbe.check()
    if check.ok:
        pytest.skip("this host has an energy meter: the unavailable path cannot be shown")
    assert "RAPL" in check.reason and "GPU" in check.reason
    out = run_cli("baseload", "--seconds", "0.2", "--no-container")
    assert out.returncode == 1 and "unavailable" in out.stderr and "RAPL" in out.stderr


def test_energy_accounting_across_wraps_and_baseload_split(tmp_path: Path) -> None:
    """This VM has no RAPL: a powercap tree written here stands in for one (the reader is real)."""
    from isobench.probes.energy import EnergyReader, _rapl_meters

    for name, index in (("package-0", "intel-rapl:0"), ("core", "intel-rapl:0:0"), ("dram", "intel-rapl:0:1")):
        domain = tmp_path / index
        domain.mkdir()
        (domain / "name").write_text(name + "\n")
        (domain / "energy_uj").write_text("900000000\n")  # 900 J, near the 1000 J wrap
        (domain / "max_energy_range_uj").write_text("1000000000\n")
    meters = {m.name: m for m in _rapl_meters(tmp_path)}
    assert set(meters) == {"rapl:package-0", "rapl:core", "rapl:dram"}
    assert meters["rapl:package-0"].in_total and meters["rapl:dram"].in_total and not meters["rapl:core"].in_total
    reader = EnergyReader(list(meters.values()))
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("50000000\n")  # wrapped: 900 -> 1000 -> 50 J
    (tmp_path / "intel-rapl:0:1" / "energy_uj").write_text("910000000\n")
    values = reader.sample()
    assert values["rapl:package-0"] == pytest.approx(150.0)
    assert values["rapl:dram"] == pytest.approx(10.0) and values["rapl:core"] == 0
    assert reader.sum_total(values) == pytest.approx(160.0)


# -- the CLI -----------------------------------------------------------------------------------------

def test_probes_command_lists_every_probe_with_its_availability() -> None:
    out = run_cli("probes", check=True)
    for name in ("proc", "cgroup", "vmstat", "environment", "perf", "gpu", "energy"):
        assert f"│ {name}" in out.stdout
    assert "interval_s" in out.stdout
    from isobench.probes.gpu import GpuProbe

    if not GpuProbe.check().ok:
        assert "NVML" in out.stdout  # the reason is shown, not just "no"

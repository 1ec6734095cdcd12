"""Density: N idle sandboxes per platform, host memory per sandbox and start-up, on real processes
and containers; the arithmetic and the plan's start line without them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from isobench.analysis.density import density_rows
from isobench.plan import expand
from isobench.platforms import PLATFORMS
from isobench.probes.meminfo import host_used_bytes
from isobench.runner.density import HostMemory, measure
from isobench.store import Store
from isobench.study.model import PlatformEntry
from isobench.studyfile import load_study_text
from tests.conftest import need_docker, run_cli, small_design, write_study
from tests.leftovers import all_leftovers

MIB = 2**20
IDLE = {"name": "idle", "params": {"hold_s": 2}}
#: the same sandbox holding 1 GiB more: the figure must see it (the signal is sized well above
#: what other work on a shared host moves its memory by in a few seconds: up to ~500 MiB here
#: while other test suites ran beside this one)
HELD = {"name": "idle", "label": "held", "params": {"hold_s": 2, "hold_mb": 1024}}


def _meminfo(tmp_path: Path, total_kb: int, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {total_kb} kB\nMemFree:        1 kB\nMemAvailable:   {available_kb} kB\n")
    return path


def test_host_used_is_total_minus_available(tmp_path: Path) -> None:
    assert host_used_bytes(_meminfo(tmp_path, 1000, 400)) == 600 * 1024
    (tmp_path / "meminfo").write_text("MemTotal: 1000 kB\n")
    assert host_used_bytes(tmp_path / "meminfo") is None


def _outcome(index: int, window: tuple[float, float] | None, startup: float, status: str = "ok") -> SimpleNamespace:
    return SimpleNamespace(cell=SimpleNamespace(cell_id=f"u/t{index}"), status=status, error=None, measured=window,
                           startup_s=startup, launched_at=0.0, platform_info={},
                           probes=SimpleNamespace(metrics=[]))


def test_memory_per_sandbox_is_the_held_level_less_the_level_before_over_n() -> None:
    memory = HostMemory()
    memory.before, memory.after = 1000 * MIB, 1002 * MIB
    # 10 MiB used before the last member is up, 130 MiB while all three hold, back after
    memory.samples = [(0.5, 1010 * MIB), (1.5, 1090 * MIB), (2.0, 1090 * MIB), (2.5, 1091 * MIB), (3.5, 1001 * MIB)]
    outcomes = [_outcome(0, (1.0, 3.0), 0.2), _outcome(1, (1.2, 3.2), 0.4), _outcome(2, (1.4, 3.1), 0.9)]
    measure(outcomes, memory)  # type: ignore[arg-type]
    info = outcomes[0].platform_info["density"]
    assert info["samples"] == 3 and info["per_sandbox_bytes"] == pytest.approx(30 * MIB)
    assert info["startup_median_s"] == pytest.approx(0.4) and info["startup_max_s"] == pytest.approx(0.9)
    metrics = dict((name, value) for name, value, _ in outcomes[0].probes.metrics)
    assert metrics["host.mem_used_per_sandbox_bytes"] == pytest.approx(30 * MIB)
    assert metrics["host.mem_drift_bytes"] == pytest.approx(2 * MIB)
    assert outcomes[1].probes.metrics == []  # one value per unit, not N copies of it
    assert all(o.platform_info["density"] is info for o in outcomes)


def test_no_moment_with_all_up_gives_no_figure_and_names_the_fix() -> None:
    memory = HostMemory()
    memory.before = 1000 * MIB
    memory.samples = [(1.0, 1100 * MIB)]
    outcomes = [_outcome(0, (0.0, 1.0), 0.1), _outcome(1, (2.0, 3.0), 2.0)]
    measure(outcomes, memory)  # type: ignore[arg-type]
    info = outcomes[0].platform_info["density"]
    assert "per_sandbox_bytes" not in info and "raise the workload's hold_s" in info["unavailable"]
    failed = [_outcome(0, (0.0, 1.0), 0.1), _outcome(1, None, 0.1, status="failed")]
    measure(failed, memory)  # type: ignore[arg-type]
    assert "1 of 2 member(s)" in failed[0].platform_info["density"]["unavailable"]


def test_density_groups_wait_at_a_start_line_and_other_groups_do_not() -> None:
    study = load_study_text(__import__("yaml").safe_dump(small_design({
        "name": "d", "workloads": [IDLE, {"name": "cpu-spin"}],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "x3", "tenants": 3}],
        "repetitions": 1, "warmup": 0})), "d", check_host=False)
    cells = expand(study)
    members = [c for c in cells if c.tenant is not None]
    assert {c.workload: c.tenant.start_line for c in members} == {"idle": True, "cpu-spin": False}
    platform = PLATFORMS.get("baremetal")(PlatformEntry(name="baremetal"))
    assert all(platform.holds_at_start_line(c) == (c.workload == "idle") for c in members)
    assert not any(platform.holds_at_start_line(c) for c in cells if c.tenant is None)


def test_bad_hold_is_one_line_naming_the_field(tmp_path: Path) -> None:
    path = write_study(tmp_path / "bad.yaml", {"name": "bad", "workloads": [{"name": "idle", "params": {"hold_s": 0}}],
                                               "platforms": [{"name": "baremetal"}]})
    result = run_cli("plan", str(path), timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(path) in lines[0] and "workloads[0].params.hold_s" in lines[0] and "(fix: " in lines[0]


def test_the_builtin_density_study_covers_four_platforms_at_1_8_32() -> None:
    from importlib import resources

    text = resources.files("isobench.studies").joinpath("density.yaml").read_text()
    study = load_study_text(text, "density", check_host=False)
    sizes: dict[str, set[int]] = {}
    for entry in study.platforms:
        sizes.setdefault(f"{entry.name}/{entry.runtime}", set()).add(int(entry.tenants or 1))
    assert sizes == {"baremetal/None": {1, 8, 32}, "docker/None": {1, 8, 32}, "gvisor/None": {1, 8, 32},
                     "oci/runc": {1, 8, 32}}
    assert study.probes == {}  # probe threads in the runner would count as sandbox memory


@pytest.fixture(scope="module")
def density_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_docker()
    tmp = tmp_path_factory.mktemp("density")
    study = write_study(tmp / "density.yaml", {
        "name": "density-small", "workloads": [IDLE, HELD],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "x3", "tenants": 3},
                      {"name": "docker"}, {"name": "docker", "label": "docker-x3", "tenants": 3}],
        "repetitions": 1, "warmup": 0, "seed": 3, "probes": {}, "timeout_s": 120})
    out = tmp / "out"
    result = run_cli("run", str(study), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _rows(out: Path) -> dict[tuple[str, str, int], object]:
    store = Store.open(out)
    try:
        return {(r.workload, r.platform, r.n): r for r in density_rows(store)}
    finally:
        store.close()


def test_every_platform_and_n_has_plausible_figures(density_run: Path) -> None:
    rows = _rows(density_run)
    assert set(rows) == {(w, p, n) for w in ("idle", "held") for p in ("baremetal", "docker") for n in (1, 3)}
    for (workload, platform, n), row in rows.items():
        assert not row.unavailable, (workload, platform, n, row.unavailable)  # type: ignore[attr-defined]
        [per_sandbox] = row.per_sandbox  # type: ignore[attr-defined]
        assert abs(per_sandbox) < 2048 * MIB, (workload, platform, n, per_sandbox / MIB)
        assert len(row.startup) == n and all(0 < s < 60 for s in row.startup)  # type: ignore[attr-defined]
        assert len(row.rss) == n and all(r > MIB for r in row.rss)  # type: ignore[attr-defined]
    # three containers hold a Python process, a shim and runc's state each: a few MiB at least
    docker = rows[("idle", "docker", 3)].per_sandbox[0]  # type: ignore[attr-defined]
    assert 1 * MIB < docker < 2048 * MIB, docker / MIB
    # The figure sees what a sandbox holds: 1 GiB more per member reads as about 1 GiB more per
    # sandbox, on bare metal and in containers alike.
    for platform in ("baremetal", "docker"):
        more = rows[("held", platform, 3)].per_sandbox[0] - rows[("idle", platform, 3)].per_sandbox[0]  # type: ignore[attr-defined]
        assert 512 * MIB < more < 1536 * MIB, (platform, more / MIB)
    held_rss = rows[("held", "baremetal", 3)].rss  # type: ignore[attr-defined]
    assert all(r > 1024 * MIB for r in held_rss)  # the workload's own RSS sees it too


def test_members_held_together_and_nothing_is_left(density_run: Path) -> None:
    store = Store.open(density_run)
    try:
        cells = store.cells()
    finally:
        store.close()
    group = [c for c in cells if c["platform_key"] == "docker-x3" and c["workload_key"] == "idle"]
    assert len(group) == 3 and all(c["status"] == "ok" for c in group)
    info = group[0]["platform_info"]["density"]
    # the start line: every member was up before any began its hold, so all three held ~hold_s together
    assert info["n"] == 3 and info["held_s"] > 1.5 and info["samples"] >= 10
    assert all(c["platform_info"].get("start_line_wait_s") is not None for c in group)
    runner = cells[0]["platform_info"]["runner"]
    assert not [item for found in all_leftovers().values() for item in found if runner in item]


def test_summary_shows_the_density_table(density_run: Path) -> None:
    result = run_cli("summary", str(density_run))
    assert result.returncode == 0, result.stderr
    assert "Density: host memory per idle sandbox" in result.stdout
    lines = [line for line in result.stdout.splitlines() if re.search(r"docker \(idle\)\s*│\s*3\s*│", line)]
    assert lines and re.search(r"\d+\.\d MiB", lines[0]) and re.search(r"\d\.\d\d s", lines[0]), result.stdout


def test_plan_estimates_a_tenant_group_as_its_members_running_at_once() -> None:
    """N members launch one after another, then hold together: the plan's estimate is their start-ups
    plus one hold, not N holds (the built-in density study read 64.5 min when members were summed)."""
    import json

    records = json.loads(run_cli("plan", "density", "--json", check=True, timeout=60).stdout)
    summed = sum(cell["estimate_s"] for cell in records["cells"])
    assert records["estimated_s"] < summed / 3, (records["estimated_s"], summed)


def test_rows_name_the_gvisor_platform_and_mark_a_figure_inside_the_hosts_drift() -> None:
    from isobench.analysis.density import DensityRow, memory_cell

    assert PlatformEntry(name="gvisor", platform="ptrace", label="p-x8", tenants=8).engine_name == "gvisor/ptrace"
    assert PlatformEntry(name="oci", runtime="runc", label="r").engine_name == "oci/runc"
    # one sandbox reading -40 MiB while the host drifted 80 MiB: not a figure
    lone = DensityRow("docker", "docker", "idle", 1, per_sandbox=[-40 * MIB], drift=[80 * MIB])
    assert "not resolved: noise ±80 MiB" in memory_cell(lone)
    # eight reading 38 MiB each beside the same drift (10 MiB each): a figure
    eight = DensityRow("docker", "docker-x8", "idle", 8, per_sandbox=[38 * MIB], drift=[80 * MIB])
    assert memory_cell(eight) == "38.0 MiB"

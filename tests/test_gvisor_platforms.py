"""gVisor as it ships and an upgrade compared in one study: a gvisor entry's runsc platform
(`platform:` systrap, ptrace or kvm) and another runtime build (`runtime_path:`), on the real
dockerd and runsc of this host; the study errors for both fields."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from isobench.errors import UserError
from isobench.plan import expand
from isobench.platforms.runsc import (
    KEPT_BOOKWORM_RUNSC,
    build_platforms,
    docker_runtime_name,
    doctor_lines,
    kvm_problem,
)
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.study import check_platforms
from isobench.study.aa import is_aa_entry
from isobench.studyfile import load_study_text
from tests.conftest import need_docker, need_tool, run_cli, write_study

#: a few hundred getppid() calls: ~0.2 ms on systrap, ~15 ms on ptrace; the sandbox's start dominates
TINY_LOOP = {"name": "syscall-loop", "params": {"iterations": 3, "calls": 300}}


def _study(platforms: list[dict], **extra: object) -> str:
    return json.dumps({"name": "gv", "workloads": [TINY_LOOP], "platforms": platforms, "repetitions": 1,
                       "warmup": 0, "aa": False, "schedule": "sequential", "min_seconds": None,
                       "timeout_s": 60, **extra})


def _error(platforms: list[dict]) -> str:
    with pytest.raises(UserError) as caught:
        load_study_text(_study(platforms), "gv.yaml")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("error: gv.yaml: ")
    return text


# -- validation: one line naming the file, the field and the fix ------------------------------------

def test_a_runsc_platform_on_another_platform_is_refused() -> None:
    for entry in ({"name": "docker", "platform": "ptrace"}, {"name": "oci", "runtime": "runsc", "platform": "ptrace"}):
        text = _error([{"name": "baremetal"}, entry])
        assert "platforms[1].platform:" in text and "only gvisor entries" in text and "(fix: " in text
    assert "platforms[0].platform:" in _error([{"name": "gvisor", "platform": "systemtrap"}])
    assert load_study_text(_study([{"name": "gvisor", "platform": "ptrace"}]), "gv.yaml").platforms[0].platform \
        == "ptrace"


def test_a_runtime_path_must_be_an_executable_here(tmp_path: Path) -> None:
    missing = str(tmp_path / "runsc-nowhere")
    text = _error([{"name": "gvisor", "runtime_path": missing}])
    assert "platforms[0].runtime_path:" in text and "does not exist" in text and "(fix: " in text
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    assert "is not executable" in _error([{"name": "oci", "runtime": "runsc", "runtime_path": str(plain)}])
    assert "is not an absolute path" in _error([{"name": "gvisor", "runtime_path": "runsc"}])
    assert "only oci and gvisor" in _error([{"name": "docker", "runtime_path": "/usr/bin/runc"}])
    # a stored study read on another host is not checked against this one
    stored = load_study_text(_study([{"name": "gvisor", "runtime_path": missing}]), "gv.yaml", check_host=False)
    assert stored.platforms[0].runtime_path == missing


def test_a_bad_runtime_path_stops_the_cli_with_exit_code_2(tmp_path: Path) -> None:
    study = tmp_path / "gv.yaml"
    study.write_text(yaml.safe_dump(json.loads(_study([{"name": "gvisor", "runtime_path": "/nonexistent/runsc"}]))))
    out = run_cli("plan", str(study))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "platforms[0].runtime_path" in lines[0] and "does not exist" in lines[0], out.stderr


def test_entries_on_other_platforms_or_builds_are_no_aa_and_get_their_own_runtime() -> None:
    study = load_study_text(_study([
        {"name": "gvisor", "label": "systrap"}, {"name": "gvisor", "label": "ptrace", "platform": "ptrace"},
        {"name": "gvisor", "label": "again"}, {"name": "gvisor", "label": "old", "runtime_path": "/bin/true"}],
        baseline="systrap"), "gv.yaml", check_host=False)
    first, ptrace, again, old = study.platforms
    assert not is_aa_entry(study, ptrace) and not is_aa_entry(study, old) and is_aa_entry(study, again)
    names = {platform_for_entry(e).runtime() for e in (first, ptrace, old)}
    assert len(names) == 3 and "runsc-systrap" in names and "runsc-ptrace" in names
    assert docker_runtime_name("ptrace", "/opt/a/runsc") != docker_runtime_name("ptrace", "/opt/b/runsc")


def platform_for_entry(entry: object) -> object:
    from isobench.platforms import PLATFORMS

    return PLATFORMS.get("gvisor")(entry)


# -- real sandboxes --------------------------------------------------------------------------------

@pytest.mark.parametrize("platform", ["systrap", "ptrace", "kvm"])
def test_each_runsc_platform_runs_a_cell_or_is_refused_with_its_reason(platform: str) -> None:
    need_docker()
    need_tool("runsc")
    study = load_study_text(_study([{"name": "gvisor", "platform": platform}]), "gv.yaml")
    listed = build_platforms(shutil.which("runsc") or "runsc")
    refusal = (f"has no {platform} platform" if listed is not None and platform not in listed
               else kvm_problem() if platform == "kvm" else None)
    if refusal:  # the study stops before anything runs (exit 2), with the reason on one line
        with pytest.raises(UserError) as caught:
            check_platforms(study, "gv.yaml")
        assert refusal in str(caught.value) and "platforms[0]" in str(caught.value)
        return
    cell = expand(study)[0]
    runner = platform_for(cell)
    runner.prepare()
    outcome = run_cell(cell, runner)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert outcome.platform_info["runsc_platform"] == platform
    assert outcome.platform_info["runtime"] == f"runsc-{platform}"
    # the recorded build names the platform the sandbox ran on: "2024-07-29 systrap"
    assert outcome.platform_info["versions"]["runsc"].endswith(f" {platform}")
    # host-side counts of the sandbox are its own kernel's work ("why" then counts on the baseline),
    # while the workload's own file reads are counted inside (gVisor's /proc/self/io says "char:")
    assert outcome.platform_info["own_kernel"] is True
    assert outcome.done is not None and set(outcome.done["run_reads"]) == {"bytes", "calls"}, outcome.done


def test_two_runsc_builds_in_one_study_are_two_entries_with_their_versions(tmp_path: Path) -> None:
    need_docker()
    need_tool("runsc")
    if not KEPT_BOOKWORM_RUNSC.exists():
        pytest.skip(f"host lacks Debian 12's runsc at {KEPT_BOOKWORM_RUNSC} (./isobench.sh setup keeps it)")
    if "systrap" not in (build_platforms(shutil.which("runsc") or "runsc") or ()):
        pytest.skip("the host's runsc has no systrap (./isobench.sh setup installs it from bookworm-backports)")
    old = str(KEPT_BOOKWORM_RUNSC)
    study = write_study(tmp_path / "upgrade.yaml", {
        "name": "upgrade", "workloads": [TINY_LOOP],
        "platforms": [{"name": "baremetal"},
                      {"name": "gvisor", "label": "runsc-2022", "runtime_path": old, "platform": "ptrace"},
                      {"name": "gvisor", "label": "runsc-2024"},
                      {"name": "oci", "label": "oci-runsc-2022", "runtime": "runsc", "runtime_path": old}],
        "repetitions": 2, "warmup": 0, "timeout_s": 60})
    out = tmp_path / "out"
    run_cli("run", str(study), "--out", str(out), timeout=300, check=True)
    records = json.loads(run_cli("summary", str(out), "--json", check=True).stdout)
    versions = {r["label"]: r["versions"] for r in records if r.get("metric") == "e2e"}
    assert versions["runsc-2022"]["runsc"] == "2022-12-19 ptrace", versions
    assert versions["runsc-2024"]["runsc"].endswith(" systrap") and not versions["runsc-2024"]["runsc"].startswith(
        "2022"), versions
    assert versions["oci-runsc-2022"] == {"runsc": "2022-12-19 ptrace"}, versions


def test_doctor_says_which_runsc_platforms_work() -> None:
    need_tool("runsc")
    lines = doctor_lines()
    host = next(line for line in lines if shutil.which("runsc") in line)
    listed = build_platforms(shutil.which("runsc") or "runsc") or ()
    for platform in ("systrap", "ptrace"):
        if platform in listed:
            assert f"{platform} [green]works[/]" in host, host
    if kvm_problem():
        assert "kvm [red]no[/] (KVM cannot run a guest here" in host, host  # the reason, not a hang


def test_the_docs_upgrade_example_is_a_valid_study() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "gvisor-upgrade.yaml"
    study = load_study_text(example.read_text(), str(example), check_host=False)
    old, new, runc = study.platforms
    assert (old.platform, old.runtime_path) == ("ptrace", str(KEPT_BOOKWORM_RUNSC))
    assert (new.platform, new.runtime_path, runc.runtime) == (None, None, "runc")
    assert study.baseline == old.key and not is_aa_entry(study, new)


def test_a_tenant_group_is_matched_with_the_lone_entry_of_its_own_gvisor_platform_and_build() -> None:
    """Interference compares a tenant group with the same engine alone: a systrap group is not the
    ptrace entry alone, nor an old runsc build the new one."""
    from isobench.study.model import PlatformEntry

    systrap, ptrace = PlatformEntry(name="gvisor"), PlatformEntry(name="gvisor", platform="ptrace")
    assert systrap.engine_key() != ptrace.engine_key()
    assert ptrace.engine_key() == PlatformEntry(name="gvisor", platform="ptrace", label="again",
                                                tenants=4, knobs={"cpus": 1}).engine_key()
    old = PlatformEntry(name="gvisor", platform="ptrace", runtime_path="/bin/true")
    assert old.engine_key() != ptrace.engine_key()
    assert (PlatformEntry(name="docker", options={"a": 1, "b": 2}).engine_key()
            == PlatformEntry(name="docker", options={"b": 2, "a": 1}).engine_key())


def test_a_systrap_entry_on_one_core_cells_carries_the_designs_caveat() -> None:
    """systrap's stub and Sentry spin for each other on separate cores: a one-core cell changes what
    its result means (27.8x per system call here, against 3.6x on two cores), and plan and summary say
    so; ptrace, or cells of two cores, carry no caveat."""
    import json

    from isobench.report.design import caveat_lines, comparison_designs
    from isobench.studyfile import load_study_text

    text = ("name: c\nworkloads: [{name: syscall-loop}]\nplatforms: [{name: baremetal}, {name: gvisor},\n"
            "  {name: gvisor, label: ptrace, platform: ptrace}]\nbaseline: baremetal\nschedule: duet\n")
    study = load_study_text(text, "c.yaml", check_host=False)
    two_cores = {r["entry"]: r.get("caveat") for r in comparison_designs(study, [0, 1])}
    assert two_cores["ptrace"] is None and "1 core" in str(two_cores["gvisor"])
    assert not any(r.get("caveat") for r in comparison_designs(study, list(range(5))))  # two cores a side
    recorded = json.dumps({"layout": "disjoint", "harness": "shared", "sides": ["0", "1"]})
    assert [line.split(":")[1].strip() for line in caveat_lines(text, recorded)] == ["gvisor"]
    wide = json.dumps({"layout": "disjoint", "harness": "0", "sides": ["1-2", "3-4"]})
    assert caveat_lines(text, wide) == []

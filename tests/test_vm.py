"""VM platforms booting a real guest (TCG emulation is fine here): records arrive, the guest
has the vCPUs and memory asked for, pinned vCPU threads stay on their cores, a hung guest
is killed at the timeout, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from isobench.hostinfo import host_cpus, parse_cpu_list
from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text
from tests.conftest import need_root, need_tool, run_cli, write_study

SPIN = {"name": "cpu-spin", "params": {"iterations": 3, "work": 20000}}


@pytest.fixture(scope="module")
def guest():
    """One kernel + initramfs for every test here (downloaded once into the cache)."""
    need_root()
    need_tool("qemu-system-x86_64")
    for tool in ("busybox", "cpio", "modprobe"):
        need_tool(tool)
    from isobench.platforms.guest import guest_image
    from isobench.platforms.kvm import kvm_verdict

    image = guest_image()
    return image, kvm_verdict()


def _cell(entry: dict, knobs: dict | None = None, workload: dict | None = None, timeout_s: float = 400,
          allow_emulation: bool = True):
    study = {"name": "vmtest", "workloads": [workload or SPIN], "platforms": [{**entry, "knobs": knobs or {}}],
             "repetitions": 1, "warmup": 0, "timeout_s": timeout_s, "probes": {},
             "allow_emulation": allow_emulation}
    return expand(load_study_text(json.dumps(study), "vmtest.yaml"))[0]


def _run(cell):
    platform = platform_for(cell)
    platform.prepare()
    return platform, run_cell(cell, platform)


def qemu_processes() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"qemu-system-x86_64") and any(a.startswith(b"isobench-") for a in argv):
                found.append(f"{proc.name}: {b' '.join(argv)[:120]!r}")
    return found


def my_leftovers() -> list[str]:
    """QEMU processes, VM state and cgroups of this test process (other agents share the host)."""
    from isobench.liveness import runner_tag
    from isobench.platforms.cgroups import PARENT, _hierarchy_roots

    found = qemu_processes() + [str(p) for p in Path("/run/isobench/vm").glob(f"isobench-{runner_tag()}-*")]
    for root in _hierarchy_roots():
        mine = root / PARENT / runner_tag()
        if mine.exists():
            found += [str(d) for d in mine.rglob("isobench-*") if d.is_dir()]
    return found


def _assert_ran(outcome, platform, verdict) -> dict:
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert len(outcome.items) == 3 and outcome.done and outcome.done["items"] == 3
    assert outcome.setup.get("import") is not None
    info = outcome.platform_info
    emulated = not verdict.works
    assert info["emulated"] is emulated and info["accel"] == ("tcg" if emulated else "kvm")
    assert platform.display().endswith("[emulated]") is emulated
    # Boot is measured on its own and lies inside the start-up (launch -> first record), never in e2e.
    assert 0 < info["kernel_boot_s"] < info["boot_s"] < outcome.startup_s < outcome.wall_s
    assert outcome.hello["python"].endswith("python") or "python" in outcome.hello["python"]
    assert outcome.hello["inside"]["kernel"] == info["kernel_version"]
    assert not my_leftovers()
    return info


def test_vm_pinned_vcpu_and_memory(guest) -> None:
    _, verdict = guest
    # One vCPU pinned to the cell's first core; QEMU's other threads (9p, serial) stay free to float, so
    # the emulated guest is not squeezed onto one core with them.
    cell = _cell({"name": "vm", "options": {"pin_vcpus": True, "vcpus": 1}}, {"memory": "384m"})
    platform, outcome = _run(cell)
    info = _assert_ran(outcome, platform, verdict)
    # memory -> the guest's RAM (less what the kernel keeps)
    assert info["vcpus"] == 1 and info["guest"]["nproc"] == 1
    assert outcome.hello["inside"]["affinity"] == [0]
    assert 300 * 1024 < info["guest"]["memtotal_kb"] <= 384 * 1024
    first = min(parse_cpu_list(cell.cores)) if cell.cores else min(host_cpus())  # the cell's core (plan/cores.py)
    assert info["pinned"] == {"0": first}
    assert info["vcpu_host_cpus"]["0"] == [first]  # sampled all along: it never ran elsewhere
    assert outcome.platform_info["guest_exit"] == 0


def test_microvm_two_vcpus(guest) -> None:
    _, verdict = guest
    cell = _cell({"name": "microvm", "options": {"vcpus": 2, "memory": "320m"}})
    platform, outcome = _run(cell)
    info = _assert_ran(outcome, platform, verdict)
    assert info["machine"] == "microvm"
    assert info["vcpus"] == 2 and info["guest"]["nproc"] == 2
    assert sorted(outcome.hello["inside"]["affinity"]) == [0, 1]
    assert 250 * 1024 < info["guest"]["memtotal_kb"] <= 320 * 1024
    assert info["pinned"] is None  # vanilla: the vCPU threads float


def test_vm_container_runs_a_container_in_the_guest(guest) -> None:
    _, verdict = guest
    cell = _cell({"name": "vm-container", "options": {"vcpus": 1, "memory": "384m"}}, {"seccomp": "default"})
    platform, outcome = _run(cell)
    info = _assert_ran(outcome, platform, verdict)
    inside = outcome.hello["inside"]
    assert inside["in_pid_namespace"] and inside["seccomp_mode"] == 2  # a container, with its filter
    assert info["guest"]["nproc"] == 1 and info["runtime"] in ("crun", "runc")


def test_hung_guest_is_killed_at_the_timeout(guest) -> None:
    workload = {"name": "cpu-spin", "params": {"iterations": 100_000, "work": 10**9}}
    cell = _cell({"name": "vm", "options": {"vcpus": 1, "memory": "256m"}}, workload=workload, timeout_s=8)
    started = time.monotonic()
    _, outcome = _run(cell)
    assert outcome.status == "timeout" and "timeout" in outcome.error
    assert time.monotonic() - started < 60
    assert not my_leftovers()


def test_sweep_kills_the_qemu_of_a_dead_runner(guest) -> None:
    from isobench.liveness import boot_id
    from isobench.platforms.qemu import STATE_ROOT, GuestRun, QemuMachine
    from isobench.platforms.vm import Vm

    image, _ = guest
    # A runner tag nobody holds the lock of: what a kill -9'd runner leaves.
    name = f"isobench-999999-{boot_id()[:8]}-0-deadbeef"
    run = GuestRun.start(QemuMachine("tcg", "pc", 1, 128, None), image, name, ["sleep", "600"],
                         subprocess.DEVNULL, None)
    try:
        run.qmp.close()  # the dead runner's side of the sockets is gone too
        for listener in run.listeners:
            listener.close()
        assert any(name in p for p in qemu_processes()) or run.proc.poll() is None
        removed = Vm.sweep_stale()
        assert any(name in r for r in removed)
        run.proc.wait(timeout=10)
        assert not (STATE_ROOT / name).exists()
    finally:
        run.kill()


def test_emulation_needs_consent(guest, tmp_path: Path) -> None:
    _, verdict = guest
    if verdict.works:
        pytest.skip("KVM runs guests on this host: no emulation to refuse")
    study = write_study(tmp_path / "vm.yaml", {"name": "vm", "workloads": [SPIN], "platforms": [{"name": "vm"}],
                                                "repetitions": 1, "warmup": 0})
    out = run_cli("run", str(study), "--out", str(tmp_path / "out"), timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "KVM does not run guests here" in lines[0] and "allow_emulation" in lines[0]
    assert not (tmp_path / "out").exists()


def test_options_are_checked(tmp_path: Path) -> None:
    study = write_study(tmp_path / "bad.yaml", {"name": "bad", "workloads": [SPIN],
                                                 "platforms": [{"name": "vm", "options": {"cpus_per_vm": 2}}]})
    out = run_cli("plan", str(study), timeout=120)
    assert out.returncode == 2 and "options" in out.stderr and "unknown option" in out.stderr


def test_initramfs_is_cached_by_content(guest, monkeypatch: pytest.MonkeyPatch) -> None:
    from isobench.platforms import guest as guest_mod

    image, _ = guest
    tree = guest_mod.cached_debian_kernel()
    if tree is None or image.source == "user":
        pytest.skip("the Debian guest kernel is not in the cache")
    again = guest_mod.build_initramfs(tree, image.kernel_version)
    assert again == image.initrd  # same inputs: the cached file
    mtime = again.stat().st_mtime
    monkeypatch.setattr(guest_mod, "INIT_SCRIPT", guest_mod.INIT_SCRIPT + "\n# changed\n")
    changed = guest_mod.build_initramfs(tree, image.kernel_version)
    try:
        assert changed != image.initrd and changed.exists()
        assert again.stat().st_mtime == mtime
    finally:
        changed.unlink()
    assert os.path.getsize(image.initrd) > 1 << 20  # busybox and the modules are inside


def test_knobs_size_the_vm() -> None:
    from isobench.platforms.vm import Vm
    from isobench.study.model import Knobs, PlatformEntry

    cores = host_cpus()
    vanilla = Vm(PlatformEntry(name="vm"))
    assert vanilla.sizing(Knobs()) == (len(cores), 2048, None)  # like bare metal: every core, 2g
    assert vanilla.sizing(Knobs(cpus=1.5, memory="1g")) == (2, 1024, None)  # vCPUs = ceil(cpus)
    assert vanilla.sizing(Knobs(cpuset=str(cores[-1])))[0] == 1  # one vCPU per cpuset core
    pinned = Vm(PlatformEntry(name="vm", options={"pin_vcpus": True, "vcpus": 3}))
    assert pinned.sizing(Knobs(cpuset=str(cores[-1])))[2] == [cores[-1]] * 3  # vcpupin within the cpuset


GUEST_VIEW = '''
import os
from isobench.api import metric, step

step()
try:
    open("/etc/shadow").read()
    metric("shadow_readable", 1)
except OSError:
    metric("shadow_readable", 0)
metric("root_entries", len([n for n in os.listdir("/root") if n != ".pyenv"]))
metric("ssh_visible", int(os.path.exists("/etc/ssh")))
metric("home_visible", int(os.path.exists("/home") and bool(os.listdir("/home"))))
try:
    open("/usr/isobench-guest-write-test", "w").close()
    metric("usr_writable", 1)
except OSError:
    metric("usr_writable", 0)
'''


def test_guest_sees_the_host_mirror_not_the_host(guest, tmp_path: Path) -> None:
    """The guest's root holds the host mirror (the interpreter, the project, the data sets, the
    script) and nothing else of the host: no /etc/shadow, nothing of /root but the way to the
    interpreter; and it is read-only."""
    script = tmp_path / "probe" / "guest_view.py"
    script.parent.mkdir()
    script.write_text(GUEST_VIEW)
    host_root = [n for n in os.listdir("/root") if n != ".pyenv"]
    assert Path("/etc/shadow").exists() and host_root  # else the test could not fail
    cell = _cell({"name": "microvm", "options": {"vcpus": 1, "memory": "384m"}},
                 workload={"name": "script", "params": {"path": str(script)}})
    platform, outcome = _run(cell)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    seen = {name: value[0] for name, value in outcome.done["metrics"].items()}
    assert seen == {"shadow_readable": 0, "root_entries": 0, "ssh_visible": 0, "home_visible": 0,
                    "usr_writable": 0}
    assert not Path("/usr/isobench-guest-write-test").exists()
    assert not my_leftovers()

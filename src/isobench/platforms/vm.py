"""vm, microvm and vm-container: the cell runs in a QEMU guest that mounts the host mirror.

The guest itself (QEMU's command line, QMP, the control channel) is :mod:`isobench.platforms.qemu`;
whether KVM or TCG emulation runs it is :mod:`isobench.platforms.kvm`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shlex
import shutil
from pathlib import Path
from typing import Any, ClassVar

from isobench.hostinfo import host_cpus, tool_version
from isobench.liveness import runner_tag, tag_is_stale
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import Availability, Launched, Platform
from isobench.platforms.cgroups import PARENT, CellCgroup, prune_empty, remove_tree, stale_groups
from isobench.platforms.guest import GuestImage, guest_image
from isobench.platforms.guestroot import Export, guest_exports
from isobench.platforms.hostmirror import build_skeleton, data_root
from isobench.platforms.kvm import EMULATION_HINT, kvm_verdict
from isobench.platforms.qemu import STATE_ROOT, GuestRun, QemuMachine, kill_stale_guests, qemu_binary
from isobench.runtime_versions import tool_short_version
from isobench.study.model import Knobs, PlatformEntry, parse_memory

DEFAULT_MEMORY = "2g"
OPTIONS = {"vcpus", "memory", "pin_vcpus", "kernel", "modules", "accel", "allow_emulation", "vmm"}


def doctor_lines() -> list[str]:
    """What `isobench doctor` says about virtual machines here."""
    verdict = kvm_verdict()
    if verdict.works:
        kvm = f"KVM: [green]works[/] ({verdict.reason})"
    elif verdict.works is None:
        kvm = f"KVM: [yellow]not tested[/] ({verdict.reason})"
    else:
        kvm = (f"KVM: [red]does not run guests[/] ({verdict.reason}); vm, microvm and vm-container run only "
               "under TCG emulation, with `allow_emulation: true`, and are labelled emulated")
    firecracker = shutil.which("firecracker")
    return [kvm, f"Firecracker: {firecracker + ' (not driven by isobench yet)' if firecracker else 'not on this host'}; "
                 f"virtiofsd: {'present' if shutil.which('virtiofsd') else 'absent'} (the guest mounts the host over 9p)"]


# -- the platforms ---------------------------------------------------------------------------

@dataclasses.dataclass
class GuestLaunched(Launched):
    """A guest: QEMU's run, the machine and image it booted, where its console tail goes."""

    run: GuestRun
    machine: QemuMachine
    image: GuestImage
    stderr: Any = None
    #: QEMU's exit status has been turned into the guest job's (see ``_settle``)
    settled: bool = False


class QemuPlatform(Platform):
    """What vm, microvm and vm-container share: sizing, acceleration, launch and cleanup."""

    machine: ClassVar[str] = "pc"
    host_cores_inside = False  # the guest has vCPUs; QEMU's cgroup keeps them on the cell's cores
    #: boot plus the worker's start in the guest: a few seconds under KVM, ~10 s or more under TCG
    startup_estimate_s = 8.0

    def runs_own_kernel(self) -> bool:
        return True
    #: the study's `allow_emulation: true` is copied into this platform's options
    takes_allow_emulation: ClassVar[bool] = True

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        if entry.image is not None:
            raise ValueError(f"image: {cls.name} runs the host mirror only (fix: remove `image`)")
        if entry.runtime is not None:
            raise ValueError(f"runtime: {cls.name} takes no runtime (fix: remove `runtime`)")
        cls._validate_options(entry.options)

    @classmethod
    def _validate_options(cls, options: dict[str, Any]) -> None:
        unknown = set(options) - OPTIONS
        if unknown:
            raise ValueError(f"options: unknown option(s) {sorted(unknown)} (fix: use {', '.join(sorted(OPTIONS))})")
        if "vcpus" in options and (not isinstance(options["vcpus"], int) or not 1 <= options["vcpus"] <= 255):
            raise ValueError("options.vcpus: must be a whole number from 1 to 255 (fix: e.g. vcpus: 2)")
        if "memory" in options:
            parse_memory(options["memory"])
        if options.get("accel", "auto") not in ("auto", "kvm", "tcg"):
            raise ValueError("options.accel: must be auto, kvm or tcg (fix: leave it out for auto)")
        if options.get("vmm", "qemu") != "qemu" and cls.machine != "microvm":
            raise ValueError(f"options.vmm: only microvm takes a vmm (fix: remove it from {cls.name})")

    # -- acceleration -------------------------------------------------------------------
    def accel(self) -> str:
        wanted = self.entry.options.get("accel", "auto")
        if wanted != "auto":
            return str(wanted)
        return "kvm" if kvm_verdict().works else "tcg"

    def emulated(self) -> bool:
        return self.accel() == "tcg"

    def default_display(self) -> str:
        return self.name

    def display(self) -> str:
        base = super().display()
        return f"{base}[emulated]" if self.emulated() else base

    @classmethod
    def check(cls) -> Availability:
        if qemu_binary() is None:
            return Availability(False, "QEMU is not installed (apt-get install qemu-system-x86)")
        for tool in ("busybox", "cpio", "modprobe"):
            if shutil.which(tool) is None and not Path(f"/bin/{tool}").exists():
                return Availability(False, f"{tool} is missing (apt-get install busybox-static cpio kmod)")
        return Availability(True, "")

    def availability(self) -> Availability:
        base = self.check()
        if not base.ok:
            return base
        notes = ["memory = the guest's RAM; cpus = vCPUs (rounded up) plus a CFS quota on QEMU; "
                 "cpuset = the cores QEMU runs on; seccomp: no filter inside a plain guest"]
        wanted = self.entry.options.get("accel", "auto")
        allowed = bool(self.entry.options.get("allow_emulation"))
        if wanted == "tcg":
            notes.append("TCG emulation asked for: results are labelled emulated")
            return Availability(True, "", notes=notes)
        verdict = kvm_verdict()
        if verdict.works:
            return Availability(True, "", notes=[f"KVM: {verdict.reason}", *notes])
        if wanted == "kvm":
            return Availability(False, f"options.accel is kvm, but KVM does not run guests here: {verdict.reason}")
        if not allowed:
            return Availability(False, f"KVM does not run guests here: {verdict.reason}; {EMULATION_HINT}")
        notes.append(f"KVM does not run guests here ({verdict.reason}): cells run under TCG emulation, "
                     "labelled emulated")
        return Availability(True, "", notes=notes)

    def fingerprint(self) -> dict[str, Any]:
        image = getattr(self, "image", None)
        return {"qemu": tool_version([qemu_binary() or "qemu-system-x86_64", "--version"]),
                "machine": self.machine, "accel": self.accel(), "emulated": self.emulated(),
                "kernel": image.source if image else None,
                "kernel_version": image.kernel_version if image else None}

    def find_versions(self) -> dict[str, str]:
        version = tool_short_version("qemu", qemu_binary() or "qemu-system-x86_64")
        return {"qemu": version} if version else {}

    def prepare(self) -> None:
        options = self.entry.options
        self.image = guest_image(options.get("kernel"), options.get("modules"))
        STATE_ROOT.mkdir(parents=True, exist_ok=True)

    # -- sizing ---------------------------------------------------------------------------
    def sizing(self, knobs: Knobs) -> tuple[int, int, list[int] | None]:
        """(vCPUs, guest MiB, host core per vCPU or None)."""
        cores = knobs.cpuset_list() or host_cpus()
        if "vcpus" in self.entry.options:
            vcpus = int(self.entry.options["vcpus"])
        elif knobs.cpus is not None:
            vcpus = math.ceil(knobs.cpus)
        else:
            vcpus = len(cores)
        memory = knobs.memory_bytes() or parse_memory(self.entry.options.get("memory", DEFAULT_MEMORY))
        # The placement knob's "pinned" (a cpuset of N cores) means vcpupin for a VM, as in Samani & Salehi.
        pinned = self.entry.options.get("pin_vcpus") or getattr(knobs, "placement", None) == "pinned"
        pin = [cores[i % len(cores)] for i in range(vcpus)] if pinned else None
        return vcpus, max(64, memory >> 20), pin

    def guest_job(self, cell: Cell, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """The command the guest runs (in the host's root) and extra files for the job share."""
        return argv, {}

    def guest_exports(self, cell: Cell) -> list[Export]:
        """What of the host the guest sees: the host mirror, the cell's mounts, its artifacts."""
        from isobench.platforms.artifact_dirs import artifacts_writable

        read_only = list(cell.mounts)
        writable = cell.artifacts_dir if cell.artifacts_dir and artifacts_writable(cell) else None
        if cell.artifacts_dir and not writable:
            read_only.append(cell.artifacts_dir)
        return guest_exports(read_only, writable)

    # -- lifecycle -----------------------------------------------------------------------
    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        image: GuestImage = getattr(self, "image", None) or guest_image(
            self.entry.options.get("kernel"), self.entry.options.get("modules"))
        knobs = Knobs(**cell.effective_knobs())
        vcpus, memory_mb, pin = self.sizing(knobs)
        accel = self.accel()
        digest = hashlib.sha1(cell.cell_id.encode()).hexdigest()[:8]
        name = f"isobench-{runner_tag()}-{cell.seq}-{digest}"
        # QEMU runs in a cgroup of its own, as a bare-metal cell does (the guest's RAM is `memory`,
        # so no host memory limit: QEMU's own overhead would trip it).
        group = CellCgroup.create(f"{PARENT}/{runner_tag()}/{name}", cpus=knobs.cpus,
                                  cpuset=knobs.cpuset_list(), memory=None)
        job, files = self.guest_job(cell, argv)
        machine = QemuMachine(accel=accel, machine=self.machine, vcpus=vcpus, memory_mb=memory_mb, pin=pin)
        try:
            run = GuestRun.start(machine, image, name, job, stderr, group, files, self.guest_exports(cell))
        except BaseException:
            group.destroy()
            shutil.rmtree(STATE_ROOT / name, ignore_errors=True)
            raise
        return GuestLaunched(proc=run.proc, name=name, started=run.started, run=run, machine=machine,
                             image=image, stderr=stderr)

    def probe_target(self, launched: GuestLaunched) -> Any:  # type: ignore[override]
        from isobench.target import ProbeTarget

        run = launched.run
        return ProbeTarget(platform=self.name, root_pid=run.proc.pid,
                           cgroups=dict(run.cgroup.dirs) if run.cgroup else {})

    def collect(self, launched: GuestLaunched) -> dict[str, Any]:  # type: ignore[override]
        run, machine, image = launched.run, launched.machine, launched.image
        self._settle(launched)
        monitor = run.monitor
        info: dict[str, Any] = {
            "vm": launched.name, "machine": machine.machine, "accel": machine.accel,
            "emulated": machine.accel == "tcg", "vcpus": machine.vcpus, "memory_mb": machine.memory_mb,
            "pinned": {str(i): core for i, core in enumerate(machine.pin)} if machine.pin else None,
            "kernel": image.source, "kernel_version": image.kernel_version,
            # launch -> the guest's /init started (kernel boot), and -> ready to run the worker
            "kernel_boot_s": monitor.boot_at - run.started if monitor.boot_at else None,
            "boot_s": monitor.ready_at - run.started if monitor.ready_at else None,
            "guest": {"nproc": int(monitor.guest["nproc"]) if "nproc" in monitor.guest else None,
                      "memtotal_kb": int(monitor.guest["memtotal_kb"]) if "memtotal_kb" in monitor.guest else None,
                      "kernel": monitor.guest.get("kernel"), "uptime_s": monitor.guest_uptime},
            "vcpu_host_cpus": {str(i): sorted(cpus) for i, cpus in monitor.seen_cpus.items()},
            "guest_exit": monitor.exit_status,
        }
        return info

    def _settle(self, launched: GuestLaunched) -> None:
        """Once QEMU has ended: its status becomes the guest job's exit status."""
        run = launched.run
        if run.proc.poll() is None or launched.settled:
            return
        launched.settled = True
        run.monitor.stop()
        if run.proc.returncode == 0:
            # QEMU exits 0 whenever the guest powers off; what counts is the worker's status.
            run.proc.returncode = run.monitor.exit_status if run.monitor.exit_status is not None else 255

    def cleanup_cell(self, launched: GuestLaunched) -> None:  # type: ignore[override]
        run = launched.run
        console = run.state / "console.log"
        run_was_alive = run.proc.poll() is None
        run.end_process()  # a guest still running here hit the timeout or an interrupt
        self._settle(launched)
        tail = ""
        with contextlib.suppress(OSError):
            tail = console.read_bytes()[-3000:].decode(errors="replace")
        run.kill()
        stderr = launched.stderr
        if run.monitor.exit_status not in (None, 0) or run_was_alive or run.proc.returncode not in (0, None):
            status = run.monitor.exit_status
            message = run.monitor.exit_message or (
                "the guest reported no exit status (killed, or it crashed: see the console above)"
                if status is None else f"the job in the guest exited with status {status}")
            self._write_stderr(stderr, f"\n[isobench vm] guest console (tail):\n{tail}\n[isobench vm] {message}\n")
        prune_empty(runner_tag())

    @staticmethod
    def _write_stderr(stderr: Any, text: str) -> None:
        if stderr is None or not hasattr(stderr, "write"):
            return
        with contextlib.suppress(OSError, ValueError):
            stderr.write(text.encode())
            stderr.flush()

    @classmethod
    def sweep_stale(cls) -> list[str]:
        removed = kill_stale_guests()
        for tag_dir in stale_groups(tag_is_stale):
            remove_tree(tag_dir)
        return removed


@PLATFORMS.register("vm")
class Vm(QemuPlatform):
    description = "a QEMU PC guest (KVM where it works) booting a distribution kernel, host root over 9p"
    machine = "pc"


@PLATFORMS.register("microvm")
class MicroVm(QemuPlatform):
    description = "QEMU's microvm machine (virtio-mmio, no PCI), the Firecracker-class design"
    machine = "microvm"
    startup_estimate_s = 7.0

    def availability(self) -> Availability:
        if self.entry.options.get("vmm", "qemu") == "firecracker":
            found = shutil.which("firecracker")
            if found is None:
                return Availability(False, "firecracker is not on this host (isobench does not download it)")
            return Availability(False, f"{found} is here, but isobench's Firecracker guest is not built: "
                                       "Firecracker has no 9p, and a block image of the host mirror is not made yet")
        return super().availability()

    def default_display(self) -> str:
        return "microvm" if self.entry.options.get("vmm", "qemu") == "qemu" else "microvm/firecracker"


@PLATFORMS.register("vm-container")
class VmContainer(QemuPlatform):
    description = "an OCI container (crun or runc) started inside the vm guest"
    machine = "pc"
    startup_estimate_s = 10.0

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        if entry.image is not None:
            raise ValueError("image: vm-container runs the host mirror only (fix: remove `image`)")
        if entry.runtime not in (None, "crun", "runc"):
            raise ValueError(f"runtime: {entry.runtime!r} cannot run inside the guest (fix: use crun or runc)")
        cls._validate_options(entry.options)

    def runtime(self) -> str:
        if self.entry.runtime:
            return self.entry.runtime
        return "crun" if shutil.which("crun") else "runc"

    def default_display(self) -> str:
        return f"vm-container/{self.runtime()}"

    def availability(self) -> Availability:
        if shutil.which(self.runtime()) is None:
            return Availability(False, f"{self.runtime()} is not installed (apt-get install {self.runtime()})")
        avail = super().availability()
        if avail.ok:
            avail.notes.append("knobs size the VM; the container inside gets the seccomp knob only")
        return avail

    def prepare(self) -> None:
        super().prepare()
        self.rootfs = build_skeleton((str(data_root()),))

    def _rootfs(self, cell: Cell) -> Path:
        rootfs = getattr(self, "rootfs", None) or build_skeleton((str(data_root()),))
        if cell.mounts or cell.artifacts_dir:  # the container's root is read-only: mount points must exist
            more = (*cell.mounts, cell.artifacts_dir) if cell.artifacts_dir else tuple(cell.mounts)
            rootfs = build_skeleton((str(data_root()), *more))
        return rootfs

    def guest_exports(self, cell: Cell) -> list[Export]:
        base = super().guest_exports(cell)
        return guest_exports([e.path for e in base if not e.writable] + [str(self._rootfs(cell))],
                             next((e.path for e in base if e.writable), None))

    def guest_job(self, cell: Cell, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        from isobench.platforms.oci import bundle_config

        runtime = self.runtime()
        rootfs = self._rootfs(cell)
        # The VM carries cpus/cpuset/memory; the container keeps the rest (seccomp, threads).
        inner = dataclasses.replace(cell, cores=None, knobs={k: v for k, v in cell.effective_knobs().items()
                                                             if k not in ("cpus", "cpuset", "memory")})
        config = bundle_config(inner, argv, rootfs, "/isobench/cell", runtime)
        binary = shutil.which(runtime) or runtime
        # Inside the guest: the bundle on the guest's /run tmpfs, state under /run too.
        script = ["/bin/sh", "-c",
                  "mkdir -p /run/isobench-bundle && cp /run/isobench-job/config.json /run/isobench-bundle/ && "
                  f"exec {shlex.quote(binary)} --root /run/isobench-{runtime} run "
                  "--bundle /run/isobench-bundle isobench-cell"]
        return script, {"config.json": json.dumps(config, indent=1)}

    def collect(self, launched: GuestLaunched) -> dict[str, Any]:  # type: ignore[override]
        return {**super().collect(launched), "runtime": self.runtime()}

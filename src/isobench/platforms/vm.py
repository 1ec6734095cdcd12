"""vm, microvm and vm-container: the cell runs in a QEMU guest that mounts the host mirror.

The guest (kernel + isobench's initramfs, see :mod:`isobench.platforms.guest`) mounts, over
9p, a root that holds only what a container cell sees (the host mirror, the data sets, the
cell's own mounts: :mod:`isobench.platforms.guestroot`) and runs the worker with the host's
own interpreter, so only the platform differs from a bare-metal cell. Channels, all virtio-serial ports:

- ``isobench.records``: the worker's stdout, written by QEMU straight to its own stdout,
  which is the pipe the runner reads (nothing else is ever written there);
- ``isobench.control``: lines from the guest's /init (``boot``, ``ready``, ``exit N``) to
  a socket isobench listens on; each is stamped with the host's clock on arrival, which
  gives the boot time without mixing it into the workload's time, and the worker's
  exit status (QEMU's own status only says that the guest powered off).

QEMU starts paused (``-S``) with QMP on a second socket: isobench reads the vCPU thread
ids (``query-cpus-fast``), pins them if asked, then resumes the guest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from isobench.hostinfo import host_cpus, tool_version
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import (
    Availability,
    Launched,
    Platform,
    boot_id,
    kill_process_group,
    runner_tag,
    tag_is_stale,
)
from isobench.platforms.cgroups import PARENT, CellCgroup, prune_empty, remove_tree, stale_groups
from isobench.platforms.guest import CONTROL_PORT, RECORDS_PORT, GuestImage, cached_debian_kernel, guest_image
from isobench.platforms.guestroot import Export, guest_exports, namespace_script, wrap
from isobench.platforms.hostmirror import build_skeleton, container_env, data_root
from isobench.study.model import Knobs, PlatformEntry, parse_memory

STATE_ROOT = Path("/run/isobench/vm")
VERDICT_FILE = STATE_ROOT / "kvm-verdict.json"
VERDICT_TTL_S = 600.0
KVM_PROBE_TIMEOUT_S = 20.0
DEFAULT_MEMORY = "2g"
#: after the guest reported its job's exit, how long it may take to power off before `quit`
POWEROFF_GRACE_S = 5.0
OPTIONS = {"vcpus", "memory", "pin_vcpus", "kernel", "modules", "accel", "allow_emulation", "vmm"}
EMULATION_HINT = ("set `allow_emulation: true` in the study to run under TCG emulation "
                  "(results are labelled emulated and say nothing about virtualization overhead)")


def qemu_binary() -> str | None:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(os.uname().machine, os.uname().machine)
    return shutil.which(f"qemu-system-{machine}")


def host_tsc_khz() -> int | None:
    """The host's TSC rate, which a TCG guest's ``rdtsc`` counts at (from /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":", 1)[1]) * 1000)
    except (OSError, ValueError):
        pass
    return None


# -- is KVM real here? -------------------------------------------------------------------

@dataclasses.dataclass
class KvmVerdict:
    works: bool | None  # None: could not be tested (no guest kernel yet)
    reason: str
    checked_at: float = 0.0


def kvm_verdict(refresh: bool = False) -> KvmVerdict:
    """Does KVM actually run a guest here? Boots the real guest under KVM and waits for /init.

    ``/dev/kvm`` opening proves nothing: on nested hosts the device works and a VM is
    created, but the guest never gets past its boot loader. The verdict is cached for
    ten minutes (per boot) in /run/isobench/vm.
    """
    if not refresh:
        try:
            cached = json.loads(VERDICT_FILE.read_text())
            if cached["boot"] == boot_id() and time.time() - cached["checked_at"] < VERDICT_TTL_S:
                return KvmVerdict(cached["works"], cached["reason"], cached["checked_at"])
        except (OSError, ValueError, KeyError):
            pass
    verdict = _test_kvm()
    if verdict.works is not None:
        with contextlib.suppress(OSError):  # not root: the verdict is just not cached
            STATE_ROOT.mkdir(parents=True, exist_ok=True)
            tmp = VERDICT_FILE.with_suffix(f".{os.getpid()}")
            tmp.write_text(json.dumps({"boot": boot_id(), **dataclasses.asdict(verdict)}))
            tmp.rename(VERDICT_FILE)
    return verdict


def _test_kvm() -> KvmVerdict:
    now = time.time()
    if qemu_binary() is None:
        return KvmVerdict(False, "QEMU is not installed (apt-get install qemu-system-x86)", now)
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as err:
        return KvmVerdict(False, f"/dev/kvm cannot be opened: {err.strerror}", now)
    try:
        image = guest_image(download=cached_debian_kernel() is None)
    except Exception as exc:  # no kernel to boot: the question stays open
        return KvmVerdict(None, f"/dev/kvm opens, but no guest kernel to test it with ({exc})", now)
    machine = QemuMachine(accel="kvm", machine="pc", vcpus=1, memory_mb=256, pin=None)
    with tempfile.TemporaryFile() as stderr:
        try:
            run = GuestRun.start(machine, image, name=f"isobench-kvmcheck-{os.getpid()}",
                                 job=["true"], stderr=stderr, cgroup=None)
        except Exception as exc:  # QEMU refused to start under KVM at all
            stderr.seek(0)
            lines = [ln for ln in stderr.read().decode(errors="replace").splitlines() if "warning" not in ln]
            return KvmVerdict(False, f"/dev/kvm opens, but QEMU cannot run a KVM guest: "
                                     f"{lines[0].strip() if lines else exc}", now)
        try:
            booted = run.monitor.booted.wait(KVM_PROBE_TIMEOUT_S)
        finally:
            run.kill()
    if booted:
        return KvmVerdict(True, f"a KVM guest booted to userspace in {run.monitor.boot_at - run.started:.1f} s",
                          now)
    status = run.proc.returncode
    detail = f"QEMU exited with status {status}" if status not in (None, -signal.SIGKILL) else \
        f"it made no progress in {KVM_PROBE_TIMEOUT_S:g} s"
    return KvmVerdict(False, f"/dev/kvm opens, but a KVM guest does not boot ({detail}; nested "
                             "virtualization?)", now)


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


# -- QMP and the control channel -------------------------------------------------------------

class Qmp:
    """A minimal QMP client over the socket QEMU connected to."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.reader = conn.makefile("r", encoding="utf-8")
        json.loads(self.reader.readline())  # greeting
        self.command("qmp_capabilities")

    def command(self, name: str, **arguments: Any) -> Any:
        message: dict[str, Any] = {"execute": name}
        if arguments:
            message["arguments"] = arguments
        self.conn.sendall((json.dumps(message) + "\n").encode())
        while True:
            line = self.reader.readline()
            if not line:
                raise RuntimeError(f"QMP closed during {name}")
            reply = json.loads(line)
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise RuntimeError(f"QMP {name}: {reply['error'].get('desc')}")
            # asynchronous events: skip

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


class GuestMonitor(threading.Thread):
    """Reads the guest's control lines (host-timestamped) and samples where vCPU threads run."""

    def __init__(self, listener: socket.socket, qemu_pid: int, vcpu_threads: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.listener = listener
        self.qemu_pid = qemu_pid
        self.vcpu_threads = vcpu_threads
        self.booted = threading.Event()
        self.exited = threading.Event()
        self.boot_at: float | None = None
        self.ready_at: float | None = None
        self.exit_status: int | None = None
        self.exit_message = ""
        self.guest: dict[str, str] = {}
        self.guest_uptime: dict[str, float] = {}
        #: vCPU index -> host CPUs its thread was seen on
        self.seen_cpus: dict[int, set[int]] = {i: set() for i in vcpu_threads}
        self._first_ticks: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        self.listener.settimeout(0.1)
        conn = None
        buffer = b""
        while not self._halt.is_set():
            self._sample()
            if conn is None:
                try:
                    conn, _ = self.listener.accept()
                    conn.settimeout(0.1)
                except (TimeoutError, OSError):
                    continue
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                self._line(line.decode(errors="replace").strip(), time.monotonic())
        if conn is not None:
            conn.close()

    def _line(self, line: str, at: float) -> None:
        kind, _, rest = line.partition(" ")
        words = rest.split()
        if kind == "boot":
            self.boot_at = at
            self.guest_uptime["boot"] = float(words[0]) if words else math.nan
            self.booted.set()
        elif kind == "ready":
            self.ready_at = at
            self.guest_uptime["ready"] = float(words[0]) if words else math.nan
            self.guest = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        elif kind == "exit":
            self.exit_status = int(words[0]) if words and words[0].lstrip("-").isdigit() else 255
            self.exit_message = " ".join(words[1:])
            self.exited.set()

    def _sample(self) -> None:
        for index, tid in self.vcpu_threads.items():
            try:
                fields = Path(f"/proc/{self.qemu_pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu_ticks = int(fields[11]) + int(fields[12])  # fields 14-15: utime + stime
            except (OSError, IndexError, ValueError):
                continue
            # "CPU last run on" (field 39) says where the thread is only once it has run since the
            # monitor started: a paused vCPU keeps showing the core it slept on before it was pinned.
            baseline = self._first_ticks.setdefault(index, cpu_ticks)
            if cpu_ticks > baseline:
                self.seen_cpus[index].add(int(fields[36]))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


# -- one guest ---------------------------------------------------------------------------

@dataclasses.dataclass
class QemuMachine:
    accel: str  # kvm | tcg
    machine: str  # pc | microvm
    vcpus: int
    memory_mb: int
    pin: list[int] | None  # host core per vCPU, or None (vanilla)

    def argv(self, image: GuestImage, state: Path, job_dir: Path, name: str, root_writable: bool = False
             ) -> list[str]:
        mmio = self.machine == "microvm"
        dev = (lambda kind: f"virtio-{kind}-device") if mmio else (lambda kind: f"virtio-{kind}-pci")
        machine = "microvm,rtc=on" if mmio else "pc"
        cmdline = "console=ttyS0 panic=-1 quiet tsc=reliable"
        if self.accel == "tcg" and host_tsc_khz():
            # Under TCG on a busy host the guest's PIT calibration of the TSC fails and the
            # microvm (no HPET/PM timer to fall back on) stalls: tell it the rate it reads.
            cmdline += f" tsc_early_khz={host_tsc_khz()}"
        return [
            qemu_binary() or "qemu-system-x86_64", "-name", f"{name},debug-threads=on",
            "-machine", machine, "-accel", self.accel, "-cpu", "host" if self.accel == "kvm" else "max",
            "-smp", str(self.vcpus), "-m", f"{self.memory_mb}M",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
            "-pidfile", str(state / "qemu.pid"),
            "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", cmdline,
            "-serial", f"file:{state / 'console.log'}",
            "-chardev", f"socket,id=qmp,path={state / 'qmp.sock'}", "-mon", "chardev=qmp,mode=control",
            "-device", dev("serial"),
            # QEMU's stdout is the runner's pipe: records only.
            "-chardev", "file,id=records,path=/dev/stdout",
            "-device", f"virtserialport,chardev=records,name={RECORDS_PORT}",
            "-chardev", f"socket,id=control,path={state / 'control.sock'}",
            "-device", f"virtserialport,chardev=control,name={CONTROL_PORT}",
            # The guest's root (see guestroot): read-only unless a producer's artifacts are in it.
            "-fsdev", f"local,id=hostroot,path={state / 'root'},security_model=none,"
                      f"{'' if root_writable else 'readonly=on,'}multidevs=remap",
            "-device", f"{dev('9p')},fsdev=hostroot,mount_tag=host",
            "-fsdev", f"local,id=job,path={job_dir},security_model=none,readonly=on",
            "-device", f"{dev('9p')},fsdev=job,mount_tag=job",
            "-object", "rng-random,id=rng,filename=/dev/urandom", "-device", f"{dev('rng')},rng=rng",
        ]


@dataclasses.dataclass
class GuestRun:
    """A started QEMU process with its channels; ``kill`` leaves nothing behind."""

    proc: subprocess.Popen[bytes]
    state: Path
    started: float
    monitor: GuestMonitor
    qmp: Qmp | None
    listeners: list[socket.socket]
    cgroup: CellCgroup | None
    vcpu_threads: dict[int, int]

    @classmethod
    def start(cls, machine: QemuMachine, image: GuestImage, name: str, job: list[str], stderr: Any,
              cgroup: CellCgroup | None, extra_files: dict[str, str] | None = None,
              exports: list[Export] | None = None) -> GuestRun:
        state = STATE_ROOT / name
        shutil.rmtree(state, ignore_errors=True)
        job_dir = state / "job"
        job_dir.mkdir(parents=True)
        exports = guest_exports() if exports is None else exports
        writable = any(e.writable for e in exports)
        (state / "root").mkdir()
        (state / "guestroot.sh").write_text(namespace_script(state / "root", exports))
        # The guest mounts fresh tmpfs on /tmp and /run: name the exported paths beneath them to keep.
        keep = " ".join(shlex.quote(e.path) for e in exports if e.path.startswith(("/tmp/", "/run/")))
        (job_dir / "guest.env").write_text(
            f"ISOBENCH_ROOTFS=9p\nISOBENCH_ROOTFS_OPTS=trans=virtio,version=9p2000.L,{'rw' if writable else 'ro'},"
            f"msize=524288,cache={'mmap' if writable else 'loose'}\nISOBENCH_KEEP={shlex.quote(keep)}\n")
        (job_dir / "run.sh").write_text(job_script(job))
        for filename, text in (extra_files or {}).items():
            (job_dir / filename).write_text(text)
        listeners = []
        for sock_name in ("qmp.sock", "control.sock"):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(state / sock_name))
            listener.listen(1)
            listeners.append(listener)
        qmp_listener, control_listener = listeners
        started = time.monotonic()
        try:
            argv = wrap(machine.argv(image, state, job_dir, name, writable), state / "guestroot.sh")
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                                    preexec_fn=cgroup.join if cgroup else None)
        except BaseException:
            for listener in listeners:
                listener.close()
            shutil.rmtree(state, ignore_errors=True)
            raise
        run = cls(proc, state, started, GuestMonitor(control_listener, proc.pid, {}), None, listeners, cgroup, {})
        try:
            run.qmp = Qmp(_accept(qmp_listener, proc, timeout=60))
            threads = {c["cpu-index"]: c["thread-id"] for c in run.qmp.command("query-cpus-fast")}
            if machine.pin:
                for index, tid in threads.items():
                    os.sched_setaffinity(tid, {machine.pin[index]})
            run.vcpu_threads = threads
            run.monitor = GuestMonitor(control_listener, proc.pid, threads)
            run.monitor.start()
            run.qmp.command("cont")
            threading.Thread(target=run._power_off_watch, daemon=True).start()
        except BaseException:
            run.kill()
            raise
        return run

    def end_process(self) -> None:
        """Kill QEMU if it still runs; keep the state directory (the console log) for now."""
        if self.proc.poll() is None:
            kill_process_group(self.proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.monitor.is_alive():
            self.monitor.stop()

    def _power_off_watch(self) -> None:
        # A guest whose power-off does not end QEMU (a halted CPU) is ended once the job is over.
        self.monitor.exited.wait()
        try:
            self.proc.wait(timeout=POWEROFF_GRACE_S)
        except subprocess.TimeoutExpired:
            if self.qmp is not None:
                with contextlib.suppress(Exception):
                    self.qmp.command("quit")

    def kill(self) -> None:
        """Kill QEMU (if it still runs) and remove everything the guest run made."""
        self.end_process()
        if self.qmp is not None:
            self.qmp.close()
        for listener in self.listeners:
            listener.close()
        if self.cgroup is not None:
            self.cgroup.destroy()
        shutil.rmtree(self.state, ignore_errors=True)


def _accept(listener: socket.socket, proc: subprocess.Popen[bytes], timeout: float) -> socket.socket:
    listener.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn, _ = listener.accept()
            conn.settimeout(timeout)  # a QEMU that stops answering must not hang the runner
            return conn
        except TimeoutError:
            if proc.poll() is not None:
                raise RuntimeError(f"QEMU exited with status {proc.returncode} before it started") from None
    raise RuntimeError("QEMU did not connect its monitor in time")


def job_script(argv: list[str]) -> str:
    """The shell script the guest runs in the host's root (chroot), with the host's /bin/sh."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in container_env().items())
    return f"cd /tmp\nexport {env}\nexec {' '.join(shlex.quote(a) for a in argv)}\n"


# -- the platforms ---------------------------------------------------------------------------

class QemuPlatform(Platform):
    """What vm, microvm and vm-container share: sizing, acceleration, launch and cleanup."""

    machine: ClassVar[str] = "pc"
    host_cores_inside = False  # the guest has vCPUs; QEMU's cgroup keeps them on the cell's cores
    #: boot plus the worker's start in the guest: a few seconds under KVM, ~10 s or more under TCG
    startup_estimate_s = 8.0
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
        from isobench.runner.artifacts import artifacts_writable

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
        return Launched(proc=run.proc, name=name, started=run.started,
                        resources={"run": run, "machine": machine, "stderr": stderr, "image": image})

    def probe_target(self, launched: Launched) -> Any:
        from isobench.probes.base import ProbeTarget

        run: GuestRun = launched.resources["run"]
        return ProbeTarget(platform=self.name, root_pid=run.proc.pid,
                           cgroups=dict(run.cgroup.dirs) if run.cgroup else {})

    def collect(self, launched: Launched) -> dict[str, Any]:
        run: GuestRun = launched.resources["run"]
        machine: QemuMachine = launched.resources["machine"]
        image: GuestImage = launched.resources["image"]
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

    def _settle(self, launched: Launched) -> None:
        """Once QEMU has ended: its status becomes the guest job's exit status."""
        run: GuestRun = launched.resources["run"]
        if run.proc.poll() is None or launched.resources.get("settled"):
            return
        launched.resources["settled"] = True
        run.monitor.stop()
        if run.proc.returncode == 0:
            # QEMU exits 0 whenever the guest powers off; what counts is the worker's status.
            run.proc.returncode = run.monitor.exit_status if run.monitor.exit_status is not None else 255

    def cleanup_cell(self, launched: Launched) -> None:
        run: GuestRun = launched.resources["run"]
        console = run.state / "console.log"
        run_was_alive = run.proc.poll() is None
        run.end_process()  # a guest still running here hit the timeout or an interrupt
        self._settle(launched)
        tail = ""
        with contextlib.suppress(OSError):
            tail = console.read_bytes()[-3000:].decode(errors="replace")
        run.kill()
        stderr = launched.resources.get("stderr")
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
        removed = []
        if STATE_ROOT.is_dir():
            for state in STATE_ROOT.iterdir():
                tag = _tag_of(state.name)
                if tag is None or not tag_is_stale(tag):
                    continue
                pid = _int_or_none((state / "qemu.pid").read_text() if (state / "qemu.pid").exists() else "")
                if pid and state.name in _cmdline(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    removed.append(f"QEMU process {pid} ({state.name})")
                shutil.rmtree(state, ignore_errors=True)
        # A QEMU whose state directory is gone is still found by its -name.
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            argv = _cmdline(int(proc_dir.name)).split("\0")
            if "-name" in argv[:-1] and argv[0].rsplit("/", 1)[-1].startswith("qemu-system"):
                name = argv[argv.index("-name") + 1].split(",", 1)[0]
                tag = _tag_of(name)
                if tag and tag_is_stale(tag):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(proc_dir.name), signal.SIGKILL)
                    removed.append(f"QEMU process {proc_dir.name} ({name})")
        for tag_dir in stale_groups(tag_is_stale):
            remove_tree(tag_dir)
        return removed


def _tag_of(name: str) -> str | None:
    parts = name.split("-")
    return f"{parts[1]}-{parts[2]}" if len(parts) >= 5 and parts[0] == "isobench" and parts[1].isdigit() else None


def _int_or_none(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


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

    def collect(self, launched: Launched) -> dict[str, Any]:
        return {**super().collect(launched), "runtime": self.runtime()}

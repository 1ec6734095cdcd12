"""One QEMU guest: its command line, its QMP client, its control channel, and its end.

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
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from isobench.liveness import tag_is_stale
from isobench.platforms.base import kill_process_group
from isobench.platforms.cgroups import CellCgroup
from isobench.platforms.guest import CONTROL_PORT, RECORDS_PORT, GuestImage
from isobench.platforms.guestroot import Export, guest_exports, namespace_script, wrap
from isobench.platforms.hostmirror import container_env

STATE_ROOT = Path("/run/isobench/vm")
#: after the guest reported its job's exit, how long it may take to power off before `quit`
POWEROFF_GRACE_S = 5.0


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


# -- leftovers of dead runners ------------------------------------------------------------

def kill_stale_guests() -> list[str]:
    """Kill the QEMU processes of runners that are gone and remove their state directories."""
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

"""Is KVM real here? Boots a tiny guest under KVM, since /dev/kvm opening proves nothing.

Where KVM does not run guests, the VM platforms fall back to TCG emulation only when the
study allows it, and label those results emulated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import tempfile
import time

from isobench.liveness import boot_id
from isobench.platforms.guest import cached_debian_kernel, guest_image
from isobench.platforms.qemu import STATE_ROOT, GuestRun, QemuMachine, qemu_binary

VERDICT_FILE = STATE_ROOT / "kvm-verdict.json"
KVM_PROBE_TIMEOUT_S = 20.0
EMULATION_HINT = ("set `allow_emulation: true` in the study to run under TCG emulation "
                  "(results are labelled emulated and say nothing about virtualization overhead)")


@dataclasses.dataclass
class KvmVerdict:
    works: bool | None  # None: could not be tested (no guest kernel yet)
    reason: str
    checked_at: float = 0.0
    #: a guest was started and booted, or did not: an answer worth keeping (see kvm_verdict)
    booted_or_not: bool = dataclasses.field(default=False, repr=False)


def kvm_verdict(refresh: bool = False) -> KvmVerdict:
    """Does KVM actually run a guest here? Boots the real guest under KVM and waits for /init.

    ``/dev/kvm`` opening proves nothing: on nested hosts the device works and a VM is
    created, but the guest never gets past its boot loader. A guest that booted, or did not,
    is cached in /run/isobench/vm until the host reboots or QEMU is replaced (the boot test
    takes up to 20 s where guests do not boot, and nothing else changes its answer); a missing
    QEMU or an unopenable /dev/kvm is checked anew each time, as it costs nothing.
    """
    qemu = _qemu_identity()
    if not refresh:
        try:
            cached = json.loads(VERDICT_FILE.read_text())
            if cached["boot"] == boot_id() and cached.get("qemu") == qemu and qemu is not None:
                return KvmVerdict(cached["works"], cached["reason"], cached["checked_at"])
        except (OSError, ValueError, KeyError):
            pass
    verdict = _test_kvm()
    if verdict.booted_or_not:
        with contextlib.suppress(OSError):  # not root: the verdict is just not cached
            STATE_ROOT.mkdir(parents=True, exist_ok=True)
            tmp = VERDICT_FILE.with_suffix(f".{os.getpid()}")
            tmp.write_text(json.dumps({"boot": boot_id(), "qemu": qemu, **dataclasses.asdict(verdict)}))
            tmp.rename(VERDICT_FILE)
    return verdict


def _qemu_identity() -> str | None:
    """The QEMU binary as a cache key: its path, size and modification time."""
    path = qemu_binary()
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


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
                          now, booted_or_not=True)
    status = run.proc.returncode
    detail = f"QEMU exited with status {status}" if status not in (None, -signal.SIGKILL) else \
        f"it made no progress in {KVM_PROBE_TIMEOUT_S:g} s"
    return KvmVerdict(False, f"/dev/kvm opens, but a KVM guest does not boot ({detail}; nested "
                             "virtualization?)", now, booted_or_not=True)

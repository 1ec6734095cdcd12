"""What this host can test: each capability a finding may need, and why it is missing.

Cheap reads of the host, except KVM: /dev/kvm opening proves nothing on a nested host, so the
VM platform's own verdict (a guest booted under KVM, cached per boot) decides.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable


def _gpu() -> str | None:
    if os.path.exists("/dev/nvidiactl") and shutil.which("nvidia-smi"):
        return None
    return "no GPU (no NVIDIA device or driver on this host)"


def _kvm() -> str | None:
    if not os.path.exists("/dev/kvm"):
        return "no KVM (/dev/kvm is absent)"
    from isobench.platforms.kvm import kvm_verdict

    verdict = kvm_verdict()
    if verdict.works:
        return None
    return f"no working KVM: VMs run under TCG emulation here ({verdict.reason})"


def _perf_hardware() -> str | None:
    if not shutil.which("perf"):
        return "no perf tool"
    from isobench.probes.perf import supported_events

    hardware, unsupported = supported_events()
    if hardware:
        return None
    return "hardware perf counters are not supported here" + (
        f" ({next(iter(unsupported.values()))})" if unsupported else "")


def _rapl() -> str | None:
    if os.path.isdir("/sys/class/powercap/intel-rapl") or os.path.isdir("/sys/class/powercap/intel-rapl:0"):
        return None
    return "no RAPL energy counters"


def _ftrace() -> str | None:
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(f"{root}/events/writeback"):
            return None
    return "no tracefs write-back events"


def _platform(name: str) -> Callable[[], str | None]:
    """The platform's own availability check: one answer for `isobench platforms`, a study and here."""

    def probe() -> str | None:
        from isobench.platforms import PLATFORMS

        found = PLATFORMS.get(name).check()
        return None if found.ok else found.reason

    return probe


PROBES: dict[str, Callable[[], str | None]] = {
    "gpu": _gpu, "kvm": _kvm, "perf-hardware": _perf_hardware, "rapl": _rapl, "ftrace": _ftrace,
    "docker": _platform("docker"), "gvisor": _platform("gvisor"),
}


def missing_capabilities(needed: set[str]) -> dict[str, str]:
    """capability -> why this host lacks it, for the ``needed`` ones it lacks."""
    missing = {}
    for name in sorted(needed):
        try:
            reason = PROBES[name]()
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"{name} could not be checked ({exc.__class__.__name__})"
        if reason:
            missing[name] = reason
    return missing

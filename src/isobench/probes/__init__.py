"""Probes: system metrics and kernel traces attached around every cell (plugins)."""

from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.registry import Registry

PROBES: Registry[Probe] = Registry(
    "probe",
    [
        # each probe module registers itself; add new modules here
        "isobench.probes.ftrace",
        "isobench.probes.pagefaults",
        "isobench.probes.syscalls",
        "isobench.probes.proc",
        "isobench.probes.cgroup",
        "isobench.probes.vmstat",
        "isobench.probes.environment",
        "isobench.probes.perf",
        "isobench.probes.gpu",
        "isobench.probes.energy",
    ],
)

__all__ = ["PROBES", "Probe", "ProbeCheck", "ProbeResult", "ProbeSettings", "ProbeTarget"]

"""Probes: system metrics and kernel traces attached around every cell (plugins)."""

from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.registry import Registry

# each module registers its classes; the modules are pyproject.toml's entry points (isobench.registry)
PROBES: Registry[Probe] = Registry("probe", "isobench.probes")

__all__ = ["PROBES", "Probe", "ProbeCheck", "ProbeResult", "ProbeSettings", "ProbeTarget"]

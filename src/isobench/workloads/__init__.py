"""Workloads: the same Python entry point on every platform, reporting its own phases."""

from isobench.registry import Registry
from isobench.workloads.base import Workload

# each module registers its classes; the modules are pyproject.toml's entry points (isobench.registry)
WORKLOADS: Registry[Workload] = Registry("workload", "isobench.workloads")

__all__ = ["WORKLOADS", "Workload"]

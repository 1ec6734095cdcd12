"""Workloads: the same Python entry point on every platform, reporting its own phases."""

from isobench.registry import Registry
from isobench.workloads.base import Workload

WORKLOADS: Registry[Workload] = Registry(
    "workload",
    [
        "isobench.workloads.cpu_spin",
        "isobench.workloads.file_writer",
        "isobench.workloads.lenet_train",
        "isobench.workloads.resnet_infer",
    ],
)

__all__ = ["WORKLOADS", "Workload"]

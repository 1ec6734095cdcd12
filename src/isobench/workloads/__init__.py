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
        "isobench.workloads.train_image",
        "isobench.workloads.train_text",
        "isobench.workloads.infer_image",
        "isobench.workloads.infer_text",
        "isobench.workloads.infer_speech",
        "isobench.workloads.infer_recsys",
        "isobench.workloads.kernels.gemm",
        "isobench.workloads.kernels.conv",
        "isobench.workloads.kernels.rnn",
        "isobench.workloads.kernels.allreduce",
        "isobench.workloads.kernels.cuda",
        "isobench.workloads.script",
        "isobench.workloads.loadgen",
        "isobench.workloads.pipeline",
        "isobench.workloads.serving",
    ],
)

__all__ = ["WORKLOADS", "Workload"]

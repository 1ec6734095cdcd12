"""CUDA-only kernels: host<->device copy bandwidth and kernel-launch latency.

Siddaramanna & John found container copies slower when the container sat on the other
NUMA socket than the GPU, and GRU layers slower in containers because of frequent short
kernel launches. On a cell without a CUDA device both workloads finish with ``unavailable``
and the reason, and report no number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import WorkloadParams
from isobench.workloads.kernels.common import (
    AUTO_BYTES,
    Bench,
    KernelParams,
    KernelWorkload,
    Step,
    auto_calls,
    cuda_problem,
    device_sync,
    run_benches,
)

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

MIB = 2**20
SMALL = (1 * MIB, 16 * MIB)
FULL = (1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)


def parse_bytes(text: str) -> int:
    value = text.strip().lower().removesuffix("b")
    scale = {"k": 2**10, "m": MIB, "g": 2**30}.get(value[-1:], 1)
    number = value[:-1] if scale > 1 else value
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"copy size {text!r} must be bytes, e.g. 16m or 1048576")
    return int(number) * scale


def _size_label(size: int) -> str:
    return f"{size // MIB}MiB" if size % MIB == 0 else f"{size}B"


class MemcpyParams(KernelParams):
    shape_syntax: ClassVar[str] = "'16m' (bytes per copy, k/m/g suffixes)"
    device: Literal["cuda"] = Field("cuda", description="always cuda: host<->device copies need a GPU")

    def shape_specs(self) -> list[int]:
        if self.shapes == "list":
            return [parse_bytes(text) for text in self.shape_list]
        return list(FULL if self.shapes == "deepbench" else SMALL)


@WORKLOADS.register("kernel-memcpy")
class KernelMemcpy(KernelWorkload):
    description = "CUDA host<->device copy bandwidth, pageable and pinned host memory (CUDA hosts only)"
    phases = ("memcpy:<h2d|d2h>:<pageable|pinned>:<size> (one per direction, memory kind and size)",)
    setup_phases = ("allocate", "warmup")
    Params = MemcpyParams

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        return [f"memcpy:{direction}:{kind}:{_size_label(size)}" for size in params.shape_specs()
                for kind in ("pageable", "pinned") for direction in ("h2d", "d2h")]

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        return 5.0

    def benches(self, params: KernelParams, device: str) -> list[Bench]:
        import torch

        benches = []
        for size in params.shape_specs():
            gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
            for kind in ("pageable", "pinned"):
                host = torch.empty(size, dtype=torch.uint8, pin_memory=kind == "pinned")
                calls = auto_calls(params.calls, size, AUTO_BYTES)

                def h2d(_: object, gpu: torch.Tensor = gpu, host: torch.Tensor = host) -> None:
                    gpu.copy_(host, non_blocking=True)

                def d2h(_: object, gpu: torch.Tensor = gpu, host: torch.Tensor = host) -> None:
                    host.copy_(gpu, non_blocking=True)

                for direction, fn in (("h2d", h2d), ("d2h", d2h)):
                    label = f"memcpy:{direction}:{kind}:{_size_label(size)}"
                    benches.append(Bench(label, [Step("", fn, {"bandwidth": (float(size), "B/s")})], calls))
        return benches

    def run(self, params: KernelParams, ctx: CellContext) -> None:  # type: ignore[override]
        problem = cuda_problem()
        if problem:
            ctx.unavailable(problem)
            return
        ctx.note(device="cuda")
        run_benches(ctx, lambda: self.benches(params, "cuda"), params.iterations, params.warmup_calls,
                    device_sync("cuda"))


class LaunchParams(WorkloadParams):
    iterations: int = Field(5, ge=1, le=100_000, description="timed items")
    calls: int = Field(2000, ge=1, le=10_000_000, description="tiny kernels per phase per item")
    warmup_calls: int = Field(100, ge=0, le=100_000, description="untimed launches first")


@WORKLOADS.register("kernel-launch")
class KernelLaunch(KernelWorkload):
    description = ("CUDA kernel-launch cost of a one-element kernel: queued back to back (async) and "
                   "waited for one by one (sync) (CUDA hosts only)")
    phases = ("launch:async", "launch:sync")
    setup_phases = ("allocate", "warmup")
    Params = LaunchParams  # type: ignore[assignment]

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        return list(cls.phases)

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        return 5.0

    def run(self, params: KernelParams, ctx: CellContext) -> None:  # type: ignore[override]
        problem = cuda_problem()
        if problem:
            ctx.unavailable(problem)
            return
        import torch

        assert isinstance(params, LaunchParams)

        def build() -> list[Bench]:
            tiny = torch.zeros(1, device="cuda")

            def launch(_: object) -> None:
                tiny.add_(1.0)

            def launch_and_wait(_: object) -> None:
                tiny.add_(1.0)
                torch.cuda.synchronize()

            return [Bench("launch:async", [Step("", launch)], params.calls),
                    Bench("launch:sync", [Step("", launch_and_wait)], params.calls)]

        ctx.note(device="cuda")
        run_benches(ctx, build, params.iterations, params.warmup_calls, torch.cuda.synchronize)

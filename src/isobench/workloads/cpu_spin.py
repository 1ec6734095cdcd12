"""cpu-spin: a single-threaded loop of fixed work, to calibrate platforms and knobs.

Without torch it starts in milliseconds, so it also shows each platform's start-up
cost and CFS-quota throttling (time per iteration scales with 1/quota below one core).
"""

from __future__ import annotations

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload, WorkloadParams
from isobench.workloads.channel import CellContext
from isobench.workloads.timing import timed_items


class CpuSpinParams(WorkloadParams):
    iterations: int = Field(20, ge=1, le=100_000, description="timed items per cell")
    work: int = Field(200_000, ge=1, le=10**9, description="loop steps per item")
    min_seconds: float = Field(0.0, ge=0, le=7 * 86400,
                               description="go on until at least this long (whichever is longer)")
    allocate_mb: int = Field(0, ge=0, le=1 << 20,
                             description="MiB to allocate and touch first (checks a memory limit bites)")


def spin(work: int) -> int:
    acc = 0
    for i in range(work):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


@WORKLOADS.register("cpu-spin")
class CpuSpin(Workload):
    description = "single-threaded integer loop of fixed work (calibration)"
    item = "iteration"
    phases = ("compute",)
    Params = CpuSpinParams

    @classmethod
    def estimate_s(cls, params: CpuSpinParams) -> float:  # type: ignore[override]
        return max(params.iterations * params.work * 6e-8, params.min_seconds)

    def run(self, params: CpuSpinParams, ctx: CellContext) -> None:  # type: ignore[override]
        if params.allocate_mb:
            with ctx.setup("allocate"):
                block = bytearray(params.allocate_mb << 20)
                for offset in range(0, len(block), 4096):  # touch every page so it is resident
                    block[offset] = 1
        timed_items(ctx, "compute", lambda: spin(params.work), params.iterations, params.min_seconds)

"""syscall-loop: raw system calls in a tight loop, the cost a sandbox adds to each kernel entry.

``os.getppid()`` is a real system call every time (the C library caches no parent pid), cheap
in the kernel, so the item's time is almost all the trip in and out: what gVisor's ptrace
platform is known to multiply (literature row L2 of the replication tables). The calls are
workloads/mechanisms.py's, the same the ``extra_syscalls`` knob injects.
"""

from __future__ import annotations

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import LoopParams, Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.mechanisms import make_syscalls
from isobench.workloads.timing import timed_items


class SyscallLoopParams(LoopParams):
    calls: int = Field(2000, ge=1, le=10**8, description="getppid() system calls per item")


@WORKLOADS.register("syscall-loop")
class SyscallLoop(Workload):
    description = "getppid() system calls in a tight loop (the cost of a kernel entry on each platform)"
    item = "batch of calls"
    phases = ("syscalls",)
    Params = SyscallLoopParams
    unit_cost_of = "syscalls"

    @classmethod
    def estimate_s(cls, params: SyscallLoopParams) -> float:  # type: ignore[override]
        return max(params.iterations * params.calls * 5e-7, params.min_seconds)

    def run(self, params: SyscallLoopParams, ctx: CellContext) -> None:  # type: ignore[override]
        calls = params.calls
        ctx.metric("events_per_item", calls, "calls")
        timed_items(ctx, "syscalls", lambda: make_syscalls(calls), params.iterations, params.min_seconds)

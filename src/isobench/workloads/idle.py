"""idle: a sandbox that comes up, says so, and holds: what the density study counts.

It imports nothing heavy unless asked (``torch: true`` holds a DL process's footprint), so the
host memory it costs is the platform's: the runtime, the shim, gVisor's Sentry. In a tenant group
its members wait at a start line until every one is up (``Workload.density``), then hold for
``hold_s``: the runner reads the host's memory over that hold (runner/density.py). It reports its
own resident set too, to set beside the host's figure.
"""

from __future__ import annotations

import time

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload, WorkloadParams
from isobench.workloads.channel import CellContext


class IdleParams(WorkloadParams):
    hold_s: float = Field(5.0, ge=0.2, le=3600,
                          description="seconds to hold once every member of the group is up (the memory is read then)")
    torch: bool = Field(False, description="import torch first, to hold a DL process's footprint")
    hold_mb: int = Field(0, ge=0, le=1 << 20,
                         description="MiB to allocate and touch before saying it is ready (checks the figure sees it)")


def resident_bytes() -> int | None:
    """This process's resident set (VmRSS), as the kernel it runs on counts it (gVisor's Sentry
    counts its own)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@WORKLOADS.register("idle")
class Idle(Workload):
    description = "comes up, waits for its tenant group, holds idle (sandbox density: host memory, start-up)"
    item = "hold"
    Params = IdleParams
    density = True

    @classmethod
    def import_modules(cls, params: IdleParams) -> tuple[str, ...]:  # type: ignore[override]
        return ("torch",) if params.torch else ()

    @classmethod
    def estimate_s(cls, params: IdleParams) -> float:  # type: ignore[override]
        return params.hold_s + (2.0 if params.torch else 0.2)

    def run(self, params: IdleParams, ctx: CellContext) -> None:  # type: ignore[override]
        held = bytearray(params.hold_mb << 20)
        for offset in range(0, len(held), 4096):  # touched, so it is resident, not just reserved
            held[offset] = 1
        ctx.start_run()  # in a group: the start line, until every member is up
        ctx.skip_warmup()  # nothing to warm up: the hold is the measured window
        time.sleep(params.hold_s)
        rss = resident_bytes()
        if rss is not None:
            ctx.metric("rss_bytes", rss, "bytes")
        del held

"""fault-loop: fresh anonymous pages touched once each, the cost a sandbox adds to a page fault.

Each item maps a fresh anonymous private region of ``pages`` pages, writes one byte in every
page (the first write to a page is exactly one minor fault: the kernel allocates and zeroes it)
and unmaps it again (workloads/mechanisms.py, the same helper the ``extra_faults`` knob injects
with). The item's time / ``pages`` is the cost of one fault, the map and unmap amortised over
them: the unit cost that gVisor's sentry (which handles every fault of its sandbox) and a VM's
nested page tables are known to raise. The done record's ``run_faults.minor`` counts them.
"""

from __future__ import annotations

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import LoopParams, Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.mechanisms import page_writer, touch_fresh_pages
from isobench.workloads.timing import timed_items


class FaultLoopParams(LoopParams):
    pages: int = Field(2000, ge=1, le=10**7, description="fresh pages touched per item: one minor fault each")


@WORKLOADS.register("fault-loop")
class FaultLoop(Workload):
    description = "fresh anonymous pages touched once each (the cost of a minor page fault on each platform)"
    item = "batch of page faults"
    phases = ("faults",)
    Params = FaultLoopParams
    imports = ("numpy",)  # the strided store that touches each page
    unit_cost_of = "page_faults"

    @classmethod
    def estimate_s(cls, params: FaultLoopParams) -> float:  # type: ignore[override]
        return max(params.iterations * params.pages * 2e-6, params.min_seconds)

    def run(self, params: FaultLoopParams, ctx: CellContext) -> None:  # type: ignore[override]
        page_writer()  # picked (numpy imported) before the first timed item
        pages = params.pages
        ctx.metric("events_per_item", pages, "faults")
        timed_items(ctx, "faults", lambda: touch_fresh_pages(pages), params.iterations, params.min_seconds)

"""The workload lifecycle: ``prepare_data`` on the host, ``run`` inside the cell.

A workload never prints its results: it hands each timed item to the
:class:`~isobench.workloads.channel.CellContext`, which writes JSON lines on the
platform's record channel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext


class WorkloadParams(BaseModel):
    """Base for each workload's parameters: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LoopParams(WorkloadParams):
    """A one-phase microbenchmark's size: so many items a cell, or so many seconds, whichever is longer."""

    iterations: int = Field(20, ge=1, le=100_000, description="timed items per cell")
    min_seconds: float = Field(0.0, ge=0, le=7 * 86400,
                               description="go on until at least this long (whichever is longer)")


#: knobs that only the workloads naming them in ``own_knobs`` carry out (the rest apply everywhere)
WORKLOAD_KNOBS = frozenset({"extra_writebacks"})


class Workload(ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: what one timed item is: "request", "minibatch", "iteration"
    item: ClassVar[str] = "item"
    #: per-item phases, in order; their sum is at most the item's e2e time
    phases: ClassVar[tuple[str, ...]] = ()
    #: one-off phases recorded once per cell (model load, data load, ...)
    setup_phases: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[WorkloadParams]] = WorkloadParams
    #: modules imported inside the timed "import" setup phase, before ``run``
    imports: ClassVar[tuple[str, ...]] = ()
    #: the cell listens on a port the host reaches (docker: a bridge network, see the README)
    needs_network: ClassVar[bool] = False
    #: a host-side driver (isobench.runner.drivers) started when the cell reports ``ready``
    host_driver: ClassVar[str | None] = None
    #: the cell gets the study's artifacts directory, mounted read-write at the same path
    uses_artifacts: ClassVar[bool] = False
    #: the workload's own metrics (``ctx.metric`` names) that get a sentence and a verdict of their own in
    #: the summary, each with what it is: "time" (lower is better: reads slower/faster) or "rate"
    #: (higher is better: tokens/s below the baseline's reads slower)
    headline_metrics: ClassVar[dict[str, str]] = {}
    #: the worker skips the interpreter's teardown after the last record (torch's costs ~1 s of
    #: every cell's wall time); a user's script keeps it, for its own atexit handlers
    needs_interpreter_exit: ClassVar[bool] = False
    #: a density measurement (the ``idle`` workload): a tenant group of it waits at a start line
    #: until every member is up, and the runner reads the host's memory per member and the
    #: members' start-up spread around it (runner/density.py)
    density: ClassVar[bool] = False
    #: a unit-cost microbenchmark: what each item makes ``events_per_item`` of ("syscalls", "page_faults")
    unit_cost_of: ClassVar[str | None] = None
    #: knobs of WORKLOAD_KNOBS this workload honours (the others would run as if unset: refused at load)
    own_knobs: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def artifact_flow(cls, params: WorkloadParams) -> tuple[str | None, str | None]:
        """(artifact these params produce, artifact they consume): producers run first in a round."""
        return None, None

    @classmethod
    def import_modules(cls, params: WorkloadParams) -> tuple[str, ...]:
        """What the timed "import" phase imports for ``params`` (transformers only when used)."""
        return cls.imports

    @classmethod
    def data_key(cls, params: WorkloadParams) -> str | None:
        """A stable name for the data set ``params`` need, or None when no data is needed."""
        return None

    @classmethod
    def prepare_data(cls, params: WorkloadParams, target: Path) -> None:
        """Generate the data set into ``target`` (host side, before any cell runs)."""

    @classmethod
    def item_phases(cls, params: WorkloadParams) -> tuple[str, ...]:
        """The phases each item reports for ``params`` (kernels name one per shape)."""
        return cls.phases

    @classmethod
    def host_paths(cls, params: WorkloadParams) -> tuple[str, ...]:
        """Host directories the cell must see read-only at the same path (a user's script)."""
        return ()

    @classmethod
    def check_host(cls, params: WorkloadParams) -> None:
        """Raise ValueError("field: problem; fix: ...") when ``params`` cannot run on this host."""

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        """Rough seconds one cell spends inside the workload on a 2-core machine."""
        return 5.0

    @abstractmethod
    def run(self, params: WorkloadParams, ctx: CellContext) -> None:
        """Run inside the cell; report setup phases and items through ``ctx``."""

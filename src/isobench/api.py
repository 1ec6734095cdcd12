"""The tiny public API a user's own script calls to mark where its time goes.

    from isobench import phase, step

    step()                          # optional: the timed part starts here
    for batch in loader:
        with phase("forward"):
            loss = model(batch)
        with phase("backward"):
            loss.backward()
        step()                      # one item (minibatch, request) ends here

    for batch in loader:            # or: the block is the item
        with step():
            loss = model(batch)

Inside an isobench cell (the ``script`` workload) each ``step()`` closes an item: the
phases entered since the previous boundary and the item's end-to-end time go on the
cell's record channel. Outside isobench every call is a no-op: ``phase()`` and ``step()``
both return one shared do-nothing context manager, with no system call and no allocation
(``benchmarks/bench_phase_api.py`` measures the cost).

``with step():`` makes the block one item: the call opens it (closing an item still open,
as a plain ``step()`` does) and leaving the block closes it, whether the block ends
normally or by an exception. Time between blocks (the loader's fetch in the loop above)
is in no item, and phases entered there are not recorded: what the block holds is what
is compared. The first block's start ends ``startup``; the time after the last block is
``teardown``. Both forms can be mixed: a plain ``step()`` between blocks opens an item.
With a ``slowdown`` knob, each item spends that fraction of its thread's CPU time again
before it closes, in its phase ``injected`` (workloads/timing.py).

Item boundaries: every ``step()``; the first item starts at the first ``step()`` or the
first ``phase()`` entered, whichever comes first, so the script's own start-up (imports,
model build) is not part of any item but is stored as setup ``startup``. An item with
phases still open when the script ends is closed then; otherwise the time after the
last ``step()`` is setup ``teardown``. A script that marks nothing is one item.

Nested phases are recorded under their path (``"train/forward"``), so they count twice
in a sum of phases. The API is per process: in a forked child (DataLoader workers) it
is a no-op again, so children never write on the parent's channel.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # not typing's: importing typing would cost a user's script ~30 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    class CellContext(Protocol):
        """What the API writes to: the cell's record channel (workloads/channel.py's CellContext,
        which the script workload passes in; named here so this module depends on nothing below)."""

        def setup_value(self, name: str, seconds: float) -> None: ...
        def metric(self, name: str, value: float, unit: str = "") -> None: ...
        def start_run(self) -> None: ...
        def skip_warmup(self) -> None: ...
        def item(self, phases: dict[str, float], e2e: float) -> None: ...

__all__ = ["metric", "phase", "step"]

#: the phase that holds a ``slowdown`` knob's injected work (workloads/timing.py's INJECTED)
INJECTED = "injected"


class _NoPhase:
    """The shared no-op context manager: nothing to allocate, nothing to time."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


_NO_PHASE = _NoPhase()


class _Recorder:
    """Per-cell state of the active API: the open item's phases and its start time."""

    def __init__(self, ctx: CellContext, slowdown: float = 0.0,
                 spend_wall: Callable[[float, float], float] | None = None) -> None:
        self.ctx = ctx
        self.script_start = time.perf_counter()
        self.started = False  # the first item has opened (``startup`` is recorded once)
        self.item_start: float | None = None  # the open item's start; None between items
        self.between_blocks = False  # after a ``with step():`` block: phases here are in no item
        self.last_boundary = self.script_start
        self.phases: dict[str, float] = {}
        self.stack: list[str] = []
        self.items = 0
        self.block = _StepBlock(self)  # what step() returns: one per cell, nothing allocated per step
        #: the ``slowdown`` knob: each item ends by spinning for this fraction of its wall time
        #: (``spend_wall`` is workloads/timing.py's, passed in: the API imports nothing of isobench)
        self.slowdown = slowdown if spend_wall is not None else 0.0
        self.spend_wall = spend_wall

    def open(self, now: float) -> None:
        if not self.started:
            self.started = True
            self.ctx.setup_value("startup", now - self.script_start)
            self.ctx.start_run()
            now = time.perf_counter()  # start_run's collection (and a duet's start line) is in no item
        self.item_start = now
        self.between_blocks = False

    def end_item(self) -> float:
        """Close the open item (its slowdown injected first) and return the time it ended."""
        assert self.item_start is not None
        if self.slowdown and self.spend_wall is not None:
            began = time.perf_counter()
            self.phases[INJECTED] = self.spend_wall(self.slowdown * (began - self.item_start), began) - began
        now = time.perf_counter()
        self.ctx.item(self.phases, now - self.item_start)
        self.items += 1
        self.phases = {}
        self.item_start = None
        self.last_boundary = now
        return now

    def step(self) -> None:
        """A boundary: the open item (if any) closes and the next one opens."""
        self.open(self.end_item() if self.item_start is not None else time.perf_counter())

    def end_block(self) -> None:
        """The end of a ``with step():`` block: its item closes and none is open until the next step()."""
        if self.item_start is not None:
            self.end_item()
        self.between_blocks = True

    def close(self) -> None:
        """At the script's end: close a pending item, or record the teardown."""
        now = time.perf_counter()
        if not self.started:  # nothing marked: the whole script is one item, measured whole
            self.ctx.start_run()
            self.ctx.skip_warmup()
            self.ctx.item({}, now - self.script_start)
        elif self.item_start is not None and self.phases:
            self.end_item()
        else:
            self.ctx.setup_value("teardown", now - (self.item_start if self.item_start is not None
                                                    else self.last_boundary))
        self.phases = {}


class _StepBlock:
    """``with step():`` — the call already opened the block's item; leaving the block closes it."""

    __slots__ = ("recorder",)

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.recorder.end_block()


class _Phase:
    __slots__ = ("name", "recorder", "start")

    def __init__(self, recorder: _Recorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        self.start = 0.0

    def __enter__(self) -> None:
        recorder = self.recorder
        if recorder.item_start is None and not recorder.between_blocks:  # the first item opens here
            recorder.open(time.perf_counter())
        stack = recorder.stack
        stack.append(f"{stack[-1]}/{self.name}" if stack else self.name)
        self.start = time.perf_counter()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        elapsed = time.perf_counter() - self.start
        recorder = self.recorder
        path = recorder.stack.pop()
        if recorder.item_start is not None:  # a phase between ``with step():`` blocks is in no item
            recorder.phases[path] = recorder.phases.get(path, 0.0) + elapsed


_recorder: _Recorder | None = None


def phase(name: str) -> Any:
    """Time the ``with`` block as phase ``name`` of the current item (no-op outside isobench)."""
    if _recorder is None:
        return _NO_PHASE
    return _Phase(_recorder, name)


def step() -> Any:
    """Mark an item boundary (minibatch, request): closes the open item and opens the next.
    As ``with step():`` the block is one item: the call opens it (closing any item still open)
    and leaving the block closes it. Outside isobench a no-op that returns a shared object."""
    if _recorder is None:
        return _NO_PHASE
    _recorder.step()
    return _recorder.block


def metric(name: str, value: float, unit: str = "") -> None:
    """Report a summary number of the run (accuracy, samples/s); stored as ``workload.<name>``."""
    if _recorder is not None:
        _recorder.ctx.metric(name, value, unit)


def activate(ctx: CellContext, slowdown: float = 0.0,
             spend_wall: Callable[[float, float], float] | None = None) -> _Recorder:
    """Route the API to ``ctx`` (the script workload does this in the worker process); with a
    ``slowdown``, each item ends by ``spend_wall(slowdown × the item's wall time, now)``."""
    global _recorder
    _recorder = _Recorder(ctx, slowdown, spend_wall)
    return _recorder


def deactivate() -> None:
    global _recorder
    _recorder = None


# A forked child (DataLoader worker) must never write on its parent's record channel.
os.register_at_fork(after_in_child=deactivate)

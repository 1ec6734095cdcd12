"""The tiny public API a user's own script calls to mark where its time goes.

    from isobench import phase, step

    step()                          # optional: the timed part starts here
    for batch in loader:
        with phase("forward"):
            loss = model(batch)
        with phase("backward"):
            loss.backward()
        step()                      # one item (minibatch, request) ends here

Inside an isobench cell (the ``script`` workload) each ``step()`` closes an item: the
phases entered since the previous boundary and the item's end-to-end time go on the
cell's record channel. Outside isobench every call is a no-op: ``phase()`` returns one
shared do-nothing context manager and ``step()`` returns at once, with no system call
and no allocation (``benchmarks/bench_phase_api.py`` measures the cost).

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
    from typing import Any

    from isobench.workloads.channel import CellContext

__all__ = ["metric", "phase", "step"]


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

    def __init__(self, ctx: CellContext) -> None:
        self.ctx = ctx
        self.script_start = time.perf_counter()
        self.item_start: float | None = None
        self.phases: dict[str, float] = {}
        self.stack: list[str] = []
        self.items = 0

    def open_first(self, now: float) -> None:
        self.item_start = now
        self.ctx.setup_value("startup", now - self.script_start)
        self.ctx.start_run()

    def step(self) -> None:
        now = time.perf_counter()
        if self.item_start is None:
            self.open_first(now)
            return
        self.ctx.item(self.phases, now - self.item_start)
        self.items += 1
        self.phases = {}
        self.item_start = now

    def close(self) -> None:
        """At the script's end: close a pending item, or record the teardown."""
        now = time.perf_counter()
        if self.item_start is None:  # nothing marked: the whole script is one item
            self.ctx.start_run()
            self.ctx.item({}, now - self.script_start)
        elif self.phases:
            self.ctx.item(self.phases, now - self.item_start)
        else:
            self.ctx.setup_value("teardown", now - self.item_start)
        self.phases = {}


class _Phase:
    __slots__ = ("name", "recorder", "start")

    def __init__(self, recorder: _Recorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        self.start = 0.0

    def __enter__(self) -> None:
        recorder = self.recorder
        if recorder.item_start is None:
            recorder.open_first(time.perf_counter())
        stack = recorder.stack
        stack.append(f"{stack[-1]}/{self.name}" if stack else self.name)
        self.start = time.perf_counter()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        elapsed = time.perf_counter() - self.start
        recorder = self.recorder
        path = recorder.stack.pop()
        recorder.phases[path] = recorder.phases.get(path, 0.0) + elapsed


_recorder: _Recorder | None = None


def phase(name: str) -> Any:
    """Time the ``with`` block as phase ``name`` of the current item (no-op outside isobench)."""
    if _recorder is None:
        return _NO_PHASE
    return _Phase(_recorder, name)


def step() -> None:
    """Mark an item boundary (minibatch, request): closes the current item (no-op outside isobench)."""
    if _recorder is not None:
        _recorder.step()


def metric(name: str, value: float, unit: str = "") -> None:
    """Report a summary number of the run (accuracy, samples/s); stored as ``workload.<name>``."""
    if _recorder is not None:
        _recorder.ctx.metric(name, value, unit)


def activate(ctx: CellContext) -> _Recorder:
    """Route the API to ``ctx`` (the script workload does this in the worker process)."""
    global _recorder
    _recorder = _Recorder(ctx)
    return _recorder


def deactivate() -> None:
    global _recorder
    _recorder = None


# A forked child (DataLoader worker) must never write on its parent's record channel.
os.register_at_fork(after_in_child=deactivate)

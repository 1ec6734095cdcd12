"""Phase timers for the training and inference loops.

By default a boundary is one ``time.perf_counter()`` read appended to a list: no
synchronisation is added, so on CUDA a phase measures what the host spent issuing its
work, and the GPU time lands wherever the workload itself waits (``loss.item()`` in the
logging step, ``.tolist()`` in post-processing). ``sync_timing: true`` asks for the
CUDA-event style of Prashanthi et al.: an event is recorded at every boundary and the
item's last event is synchronised, so each phase measures device time. On the CPU every op
is synchronous already, so the request is a no-op there; the mode in force is reported
(``timing`` in the cell's ``done`` record) either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: no synchronisation added: host clock only
CLOCK = "clock"
#: sync_timing on a CUDA device: events at each boundary, synchronised per item
CUDA_EVENTS = "cuda-events"
#: sync_timing asked for on the CPU, where ops are synchronous: same as clock
CPU_SYNC_NOOP = "cpu-sync-noop"


#: phase that holds the injected extra work (the ``slowdown`` knob)
INJECTED = "injected"
_slowdown = {"fraction": 0.0, "rate": 0.0}


def _spin(iterations: int) -> float:
    value = 1.0
    for _ in range(iterations):
        value = value * 1.0000001 + 1e-9
    return value


def inject_slowdown(fraction: float) -> float:
    """From now on every item timed by a :class:`PhaseClock` does ``fraction`` of its own time
    again as extra CPU work, so a known effect can be checked for on any host. The work is
    calibrated here (iterations per second, best of five, raised when an injection runs faster)
    and then counted in iterations, not seconds: on a busy core it takes longer, as real work
    does. Returns the rate."""
    best = 0.0
    for _ in range(5):
        started = time.perf_counter()
        _spin(20_000)
        best = max(best, 20_000 / max(time.perf_counter() - started, 1e-9))
    _slowdown.update(fraction=fraction, rate=best)
    return best


def _faster_rate(iterations: int, seconds: float) -> None:
    """Keep the fastest rate seen: a calibration that fell in a slow spell of its core (one
    core here ran 1.5x slower for a second at a time) would inject too little from then on."""
    if iterations >= 2_000 and seconds > 0:
        _slowdown["rate"] = max(_slowdown["rate"], iterations / seconds)


def timing_mode(sync_timing: bool, device_type: str) -> str:
    if not sync_timing:
        return CLOCK
    return CUDA_EVENTS if device_type == "cuda" else CPU_SYNC_NOOP


class PhaseClock:
    """Marks phase boundaries of one item: ``start()``, ``lap(name)`` per phase, ``stop()``."""

    __slots__ = ("_clock", "_marks", "_start", "mode")

    def __init__(self, mode: str = CLOCK) -> None:
        self.mode = mode
        self._clock = time.perf_counter
        self._marks: list[tuple[str, float]] = []
        self._start = 0.0

    def start(self) -> None:
        self._marks.clear()
        self._start = self._clock()

    def lap(self, name: str) -> None:
        """End the phase called ``name`` now (the next phase starts here)."""
        self._marks.append((name, self._clock()))

    def stop(self) -> tuple[dict[str, float], float]:
        """The item's phases (seconds) and its end-to-end time, measured from ``start()``."""
        if _slowdown["fraction"] and self._marks:
            iterations = int(_slowdown["fraction"] * (self._marks[-1][1] - self._start) * _slowdown["rate"])
            began = self._clock()
            _spin(iterations)
            self.lap(INJECTED)
            _faster_rate(iterations, self._marks[-1][1] - began)
        phases = {}
        previous = self._start
        for name, stamp in self._marks:
            phases[name] = stamp - previous
            previous = stamp
        return phases, previous - self._start


class CudaEventClock(PhaseClock):
    """The same marks as CUDA events: device time between boundaries, synchronised per item."""

    __slots__ = ("_events", "_torch")

    def __init__(self) -> None:
        import torch

        super().__init__(CUDA_EVENTS)
        self._torch = torch
        self._events: list[Any] = []

    def start(self) -> None:
        self._marks.clear()
        self._events = [self._record()]

    def lap(self, name: str) -> None:
        self._marks.append((name, 0.0))
        self._events.append(self._record())

    def stop(self) -> tuple[dict[str, float], float]:
        events = self._events
        events[-1].synchronize()
        phases = {name: events[i].elapsed_time(events[i + 1]) / 1000.0 for i, (name, _) in enumerate(self._marks)}
        return phases, events[0].elapsed_time(events[-1]) / 1000.0

    def _record(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event


def phase_clock(mode: str) -> PhaseClock:
    return CudaEventClock() if mode == CUDA_EVENTS else PhaseClock(mode)


def resolve_device(requested: str) -> Any:
    """``auto`` picks CUDA when torch sees a device; asking for a missing CUDA is an error."""
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for, but torch sees no CUDA device here")
    return torch.device(requested)


def timed_items(ctx: Any, phase: str, work: Callable[[], object], iterations: int, min_seconds: float) -> None:
    """The timed loop of a one-phase microbenchmark: ``work()`` is one item, run ``iterations``
    times or until ``min_seconds`` have passed, whichever is longer, each item timed by PhaseClock
    (so a ``slowdown`` knob is injected here too)."""
    clock = PhaseClock()
    ctx.start_run()
    done = 0
    while done < iterations or ctx.measured_s() < min_seconds:
        clock.start()
        work()
        clock.lap(phase)
        phases, e2e = clock.stop()
        ctx.item(phases, e2e)
        done += 1

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
from typing import Any

#: no synchronisation added: host clock only
CLOCK = "clock"
#: sync_timing on a CUDA device: events at each boundary, synchronised per item
CUDA_EVENTS = "cuda-events"
#: sync_timing asked for on the CPU, where ops are synchronous: same as clock
CPU_SYNC_NOOP = "cpu-sync-noop"


def timing_mode(sync_timing: bool, device_type: str) -> str:
    if not sync_timing:
        return CLOCK
    return CUDA_EVENTS if device_type == "cuda" else CPU_SYNC_NOOP


class PhaseClock:
    """Marks phase boundaries of one item: ``start()``, ``lap(name)`` per phase, ``stop()``."""

    __slots__ = ("_clock", "_events", "_names", "_stamps", "_torch", "mode")

    def __init__(self, mode: str = CLOCK) -> None:
        self.mode = mode
        self._clock = time.perf_counter
        self._names: list[str] = []
        self._stamps: list[float] = []
        self._events: list[Any] = []
        self._torch: Any = None
        if mode == CUDA_EVENTS:
            import torch

            self._torch = torch

    def start(self) -> None:
        self._names.clear()
        self._stamps.clear()
        self._stamps.append(self._clock())
        if self._torch is not None:
            self._events = [self._record()]

    def lap(self, name: str) -> None:
        """End the phase called ``name`` now (the next phase starts here)."""
        self._names.append(name)
        self._stamps.append(self._clock())
        if self._torch is not None:
            self._events.append(self._record())

    def stop(self) -> tuple[dict[str, float], float]:
        """The item's phases (seconds) and its end-to-end time, measured from ``start()``."""
        stamps = self._stamps
        if self._torch is None:
            phases = {name: stamps[i + 1] - stamps[i] for i, name in enumerate(self._names)}
            return phases, stamps[-1] - stamps[0]
        events = self._events
        events[-1].synchronize()
        phases = {name: events[i].elapsed_time(events[i + 1]) / 1000.0 for i, name in enumerate(self._names)}
        return phases, events[0].elapsed_time(events[-1]) / 1000.0

    def _record(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event


def resolve_device(requested: str) -> Any:
    """``auto`` picks CUDA when torch sees a device; asking for a missing CUDA is an error."""
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for, but torch sees no CUDA device here")
    return torch.device(requested)

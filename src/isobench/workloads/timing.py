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

import random
import time
from collections.abc import Callable
from typing import Any

from isobench.workloads.mechanisms import make_syscalls, page_writer, touch_fresh_pages

#: no synchronisation added: host clock only
CLOCK = "clock"
#: sync_timing on a CUDA device: events at each boundary, synchronised per item
CUDA_EVENTS = "cuda-events"
#: sync_timing asked for on the CPU, where ops are synchronous: same as clock
CPU_SYNC_NOOP = "cpu-sync-noop"


#: phase that holds the injected extra work (the ``slowdown``, ``extra_syscalls`` and ``extra_faults`` knobs)
INJECTED = "injected"
#: fraction: the knob; owed: wall seconds the injections so far fell short of their targets
#: (negative: they overshot); phases: the ``slowdown_phases`` knob's phase names (empty: the
#: injection is an item-end phase of its own)
_slowdown: dict[str, Any] = {"fraction": 0.0, "owed": 0.0, "phases": frozenset()}
#: the ``extra_syscalls`` and ``extra_faults`` knobs: counted kernel events (workloads/mechanisms.py)
#: each item ends with, in its ``injected`` phase before any slowdown spin (0: none)
_mechanisms: dict[str, int] = {"syscalls": 0, "faults": 0}
#: spin iterations between two reads of the wall clock (a few microseconds here)
_SPIN_CHUNK = 50


def _spin(iterations: int) -> float:
    value = 1.0
    for _ in range(iterations):
        value = value * 1.0000001 + 1e-9
    return value


def inject_slowdown(fraction: float, phases: str | None = None) -> None:
    """From now on every item timed by a clock from :func:`phase_clock` (and every item of a script)
    lasts ``fraction`` longer: it ends by spinning on its thread for ``fraction`` of its own wall
    time, in its own ``injected`` phase, so a known effect can be checked for on any host. What
    is scaled (the item's wall time) and what is spent (wall time, up to a deadline) are the same
    quantity, so the item's end-to-end time reads 1 + fraction whether or not a neighbour shares
    the core. An injection sized in CPU time did not: beside busy loops a short spin stretched
    by a different factor than the long item it copied (2-3 ms of CPU took 3.4x its CPU time in
    wall time where the item took 3.0x), and a 20% injection read 1.30-1.33 against items
    without it.

    With ``phases`` (the ``slowdown_phases`` knob: phase names, comma-separated) the spin goes
    inside each named phase instead, for ``fraction`` of that phase's own wall time, and there is
    no ``injected`` phase: a check of those phases (or of their sum) then reads 1 + fraction, as a
    platform that made exactly those phases slower would (``isobench replicate --power`` injects
    "the optimizer step slower" this way). The host clock only: the CUDA-event clock refuses it, and
    a script's steps (api.py) keep the item-end injection.

    A loop that can run one of its items again (the inference and training loops,
    ``phase_clock(mode, repeat)``) is slowed by repeating its own work instead of spinning: see :class:`InjectingPhaseClock`."""
    names = frozenset(p.strip() for p in (phases or "").split(",") if p.strip())
    _slowdown.update(fraction=fraction, owed=0.0, phases=names)


def inject_mechanisms(syscalls: int, faults: int) -> None:
    """From now on every item timed by a clock from :func:`phase_clock` (and every item of a script)
    ends with ``syscalls`` extra ``getppid()`` system calls and ``faults`` extra minor page faults
    (fresh pages mapped, touched once each, unmapped: workloads/mechanisms.py, exactly as the
    ``syscall-loop`` and ``fault-loop`` workloads make them), in its ``injected`` phase: a cause of
    a known mechanism and a known count, for checking that an explanation names it. They go first in
    that phase; a ``slowdown`` spin, if one is in force too, follows them and is sized on the item's
    own time, without them. On the CUDA-event clock the host makes them while the device idles."""
    for name, count in (("extra_syscalls", syscalls), ("extra_faults", faults)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{name}: {count!r} is not a non-negative whole number; fix: give a count, e.g. 1000")
    if faults:
        page_writer()  # its import (numpy) now, not inside the first item
    _mechanisms.update(syscalls=syscalls, faults=faults)


def active_mechanisms() -> tuple[int, int]:
    """The (extra_syscalls, extra_faults) in force in this process ((0, 0): none)."""
    return _mechanisms["syscalls"], _mechanisms["faults"]


def make_mechanisms(syscalls: int, faults: int) -> None:
    """The injected events of one item: the system calls first, then the page faults."""
    if syscalls:
        make_syscalls(syscalls)
    if faults:
        touch_fresh_pages(faults)


def item_end_injection() -> tuple[float, Callable[[float, float], float]]:
    """What a script's steps inject at their end (isobench.api's ``activate(ctx, slowdown,
    spend_wall)``): that API calls ``spend_wall(slowdown × the item's wall time, began)`` when
    ``slowdown`` is non-zero and records what it returns minus ``began`` as the ``injected``
    phase. With ``extra_syscalls`` or ``extra_faults`` in force the pair returned makes those
    first, then spins for the slowdown (if any) from where they ended; without them it is the
    plain (fraction, :func:`spend_wall`) as before."""
    fraction = _slowdown["fraction"]
    syscalls, faults = _mechanisms["syscalls"], _mechanisms["faults"]
    if not (syscalls or faults):
        return fraction, spend_wall

    def inject(seconds: float, began: float) -> float:
        make_mechanisms(syscalls, faults)
        return spend_wall(seconds, time.perf_counter()) if fraction else time.perf_counter()

    # the API injects only with a non-zero factor: without a slowdown, 1.0 (the spin ignores it)
    return (fraction or 1.0), inject


def active_slowdown() -> float:
    """The injected fraction in force in this process (0: none)."""
    return _slowdown["fraction"]


def spend_wall(seconds: float, began: float | None = None) -> float:
    """Spin on this thread until ``seconds`` of wall time, plus what earlier injections owe, have
    passed since ``began`` (a ``perf_counter`` reading; default now); return the time it ended.
    Counting from the caller's own mark keeps a preemption between that mark and the spin inside
    the injection's account. A spin that loses the core at its deadline ends late, by as long as
    the scheduler keeps it off: that overshoot is owed back by the next injection, so a cell's
    injections add up to their targets."""
    began = now = time.perf_counter() if began is None else began
    target = seconds + _slowdown["owed"]
    deadline = began + target
    while now < deadline:
        _spin(_SPIN_CHUNK)
        now = time.perf_counter()
    _slowdown["owed"] = target - (now - began)
    return now


def wait_wall(seconds: float) -> None:
    """Spin on the host until ``seconds`` of wall time have passed (the CUDA-event clock's
    injection: the device idles meanwhile, so its elapsed time grows by this much)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        _spin(200)


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
        phases = {}
        previous = self._start
        for name, stamp in self._marks:
            phases[name] = stamp - previous
            previous = stamp
        return phases, previous - self._start


class InjectingPhaseClock(PhaseClock):
    """A PhaseClock whose ``stop()`` first spins for the slowdown's fraction of the item's wall
    time (from ``start()`` to the last lap), as the ``injected`` phase; with ``slowdown_phases``,
    each named phase's ``lap()`` spins for the fraction of that phase instead, inside it. With
    ``extra_syscalls`` or ``extra_faults``, ``stop()`` makes those events first, in the same
    ``injected`` phase, and the item-end spin (if any) follows them. A class of its own, picked
    by :func:`phase_clock`, so a clock without the knobs carries no branch for them.

    Given ``repeat`` (a call that runs one more item's worth of the loop's own work), the item-end
    slowdown repeats that work instead of spinning: each measured item owes ``fraction`` of its
    own wall time, and once the debt reaches half an item the loop's work runs again, its wall
    time paid off the debt, so a cell's injected time is ``fraction`` of its items' time to within
    an item, in whole items of the same work, and exactly that on average (the debt starts at a
    uniform draw within half an item either side). The loops give ``repeat`` only to cells sized
    in seconds (``min_seconds``), which have hundreds of items; a cell of a fixed few items spins,
    as whole repeats cannot make 3% of 20 items. A spin was not a neutral stand-in on
    resnet-infer: the forward passes of a process that spun 3% after each item ran 1-2% slower
    themselves (the injected phase exactly 3.00%, the entry 1.045-1.075x), where a process that
    repeated its items did not (inference phase 0.98-1.00x of its pair; two 14- and 20-pair duet
    runs). Why a spin slows the next forward pass is not known. The debt starts when
    ``measuring()`` first says yes (the measured window: no warm-up or start-line item carries a
    debt into it) and nothing is injected before, since those items are never read."""

    __slots__ = ("_faults", "_fraction", "_measuring", "_owed", "_phases", "_repeat", "_started", "_syscalls")

    def __init__(self, mode: str = CLOCK, repeat: Callable[[], object] | None = None,
                 measuring: Callable[[], bool] | None = None) -> None:
        super().__init__(mode)
        self._fraction = _slowdown["fraction"]
        self._phases: frozenset[str] = _slowdown["phases"] if self._fraction else frozenset()
        self._syscalls, self._faults = _mechanisms["syscalls"], _mechanisms["faults"]
        self._repeat = repeat if self._fraction and not self._phases else None
        self._measuring = measuring
        self._owed = 0.0
        self._started = False

    def lap(self, name: str) -> None:
        if name not in self._phases:
            super().lap(name)
            return
        now = self._clock()
        began = self._marks[-1][1] if self._marks else self._start
        self._marks.append((name, spend_wall(self._fraction * (now - began), now)))

    def stop(self) -> tuple[dict[str, float], float]:
        marks = self._marks
        spin = self._fraction and not self._phases
        if marks and (spin or self._syscalls or self._faults):
            # the injected phase is exactly the span the events and the spin accounted for
            last = began = marks[-1][1]
            if self._syscalls or self._faults:
                make_mechanisms(self._syscalls, self._faults)
                began = self._clock()
            if self._repeat is not None:
                ended = self._repeat_owed(last - self._start, began)
            else:
                ended = spend_wall(self._fraction * (last - self._start), began) if spin else began
            marks.append((INJECTED, ended))
        return super().stop()

    def _repeat_owed(self, item: float, began: float) -> float:
        """Run the loop's work again while half an item or more is owed; return when it ended."""
        if not self._started:
            if self._measuring is not None and not self._measuring():
                return began
            # a uniform start within half an item either side: the cell's whole repeats are then
            # its items' fraction on average, however few items it has (from 0 they round)
            self._started = True
            self._owed = (random.random() - 0.5) * item
        self._owed += self._fraction * item
        while self._owed >= 0.5 * item:
            self._repeat()  # type: ignore[misc]  # set whenever this is called
            ended = self._clock()
            self._owed -= ended - began
            began = ended
        return began


class CudaEventClock(PhaseClock):
    """The same marks as CUDA events: device time between boundaries, synchronised per item."""

    __slots__ = ("_events", "_fraction", "_mechanisms", "_torch")

    def __init__(self) -> None:
        import torch

        super().__init__(CUDA_EVENTS)
        self._torch = torch
        self._events: list[Any] = []
        self._fraction = _slowdown["fraction"]
        self._mechanisms = (_mechanisms["syscalls"], _mechanisms["faults"])
        if self._fraction and _slowdown["phases"]:
            raise RuntimeError("slowdown_phases needs the host clock: the CUDA-event clock (sync_timing on "
                               "a GPU) injects a slowdown only at the item's end")

    def start(self) -> None:
        self._marks.clear()
        self._events = [self._record()]

    def lap(self, name: str) -> None:
        self._marks.append((name, 0.0))
        self._events.append(self._record())

    def stop(self) -> tuple[dict[str, float], float]:
        events = self._events
        events[-1].synchronize()
        if (self._fraction or any(self._mechanisms)) and self._marks:
            # What this clock measures is device time, an elapsed time: the injection waits on the
            # host for the fraction of it while the device idles, then marks its end with an event.
            # (A CPU-time injection would not show in device time; a device spin kernel would need
            # a cycles-per-second calibration that a busy or throttled GPU breaks.) Injected
            # events (system calls, page faults) are made on the host first, the device idle too.
            if any(self._mechanisms):
                make_mechanisms(*self._mechanisms)
            if self._fraction:
                wait_wall(self._fraction * events[0].elapsed_time(events[-1]) / 1000.0)
            self.lap(INJECTED)
            events[-1].synchronize()
        phases = {name: events[i].elapsed_time(events[i + 1]) / 1000.0 for i, (name, _) in enumerate(self._marks)}
        return phases, events[0].elapsed_time(events[-1]) / 1000.0

    def _record(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event


def phase_clock(mode: str, repeat: Callable[[], object] | None = None,
                measuring: Callable[[], bool] | None = None) -> PhaseClock:
    """The item clock for ``mode``; with a ``slowdown``, ``extra_syscalls`` or ``extra_faults`` in
    force, one that injects them (a slowdown by running ``repeat`` again, where a loop gives one:
    :class:`InjectingPhaseClock`)."""
    if mode == CUDA_EVENTS:
        return CudaEventClock()
    injecting = _slowdown["fraction"] or _mechanisms["syscalls"] or _mechanisms["faults"]
    return InjectingPhaseClock(mode, repeat, measuring) if injecting else PhaseClock(mode)


def loop_clock(mode: str, ctx: Any, min_seconds: float, repeat: Callable[[], object]) -> PhaseClock:
    """The item clock of a model loop (inference, training) that can run ``repeat``, one more
    item's worth of its own work, for a slowdown. Only a cell sized in seconds repeats: a fixed
    few items cannot hold 3% of themselves in whole repeats, and spin (InjectingPhaseClock)."""
    return phase_clock(mode, repeat if min_seconds > 0 else None, lambda: ctx.measured_s() > 0)


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
    times or until ``min_seconds`` have passed, whichever is longer, each item timed by
    :func:`phase_clock` (so the ``slowdown``, ``extra_syscalls`` and ``extra_faults`` knobs are
    injected here too)."""
    clock = phase_clock(CLOCK)
    ctx.start_run(rolling=min_seconds > 0)
    done = 0
    while done < iterations or ctx.measured_s() < min_seconds:
        clock.start()
        work()
        clock.lap(phase)
        phases, e2e = clock.stop()
        ctx.item(phases, e2e)
        done += 1

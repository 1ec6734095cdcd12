"""The in-cell side of the record channel.

The worker owns the process's original stdout as its record channel: before any
workload code runs it moves fd 1 aside and points fd 1 at stderr, so a stray print
from a library can never corrupt the JSON lines the runner reads. Every platform
carries stdout back (a pipe for host processes and OCI runtimes, the attached
stream for Docker, a serial port for VMs), so no shared filesystem is assumed.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

RECORD_VERSION = 1
#: item records are flushed every ITEM_BATCH items or ITEM_FLUSH_S seconds, whichever comes first
ITEM_BATCH = 512
ITEM_FLUSH_S = 1.0


#: a duet member waits at most this long at the start line for its partner (then measures alone)
START_LINE_TIMEOUT_S = 300.0


#: a member that says ``ready`` at a rolling start line first waits this long for the go, which
#: comes at once when it was the last of the pair to get ready; otherwise it keeps working
ROLLING_FIRST_POLL_S = 0.005


def go_has_come(timeout_s: float) -> bool:
    """Whether the runner wrote the go (a line on stdin) within ``timeout_s`` (0: a poll), consuming
    it; a cell without stdin has nothing to wait for (True)."""
    import select

    try:
        ready, _, _ = select.select([0], [], [], timeout_s)
        if ready:
            os.read(0, 64)
        return bool(ready)
    except (OSError, ValueError):
        return True


def wait_for_go(timeout_s: float) -> float | None:
    """Block until the runner writes a line on stdin (the go of a duet's start line) or closes
    it; return the seconds waited, or None when nothing came within ``timeout_s``."""
    started = time.perf_counter()
    return time.perf_counter() - started if go_has_come(timeout_s) else None


#: why a cell carries no fault counts: a kernel that keeps none reports 0, as gVisor's does
NO_FAULT_COUNTS = "getrusage reports no page faults here (gVisor's kernel does not count them)"


def process_faults() -> dict[str, int] | None:
    """This process's page faults since it started, and those of its children that have ended (a
    DataLoader's workers): ``getrusage``, read by the worker itself, so every platform counts
    from the same instant by the same method (a probe attaches to a container only once the
    engine names its pid, after the interpreter's start-up). None where the kernel counts none:
    every Linux process faults while it starts, so a zero minor count means gVisor's sentry,
    whose getrusage leaves the fault fields at 0."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    minor, major = own.ru_minflt + children.ru_minflt, own.ru_majflt + children.ru_majflt
    return {"minor": minor, "major": major} if minor > 0 else None


def process_reads() -> dict[str, int] | None:
    """This process's file reads so far (``/proc/self/io``): ``bytes`` read by read-like system calls
    (page cache hits included) and ``calls``. Read inside the cell, so gVisor's kernel (which keeps
    these) counts the workload's own reads, not its gofer's. None where the file is missing."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/self/io").read_text().splitlines() if ":" in line)
        # gVisor's kernel (2024-07-29) names the byte count "char:" where Linux writes "rchar:"
        return {"bytes": int(fields.get("rchar", fields.get("char"))), "calls": int(fields["syscr"])}
    except (OSError, KeyError, ValueError, TypeError):
        return None


def claim_stdout_for_records() -> IO[str]:
    """Return a text stream on the original stdout and send fd 1 to stderr."""
    record_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(record_fd, "w", buffering=1, encoding="utf-8")


class CellContext:
    """What a workload sees of isobench while it runs inside a cell."""

    def __init__(self, stream: IO[str], cell: dict[str, Any]) -> None:
        self._stream = stream
        self.cell = cell
        self.data_dir = Path(cell["data_dir"]) if cell.get("data_dir") else None
        self.threads: int | None = cell.get("knobs", {}).get("threads")
        self.seed: int = int(cell.get("seed", 0))
        self._items = 0
        #: untimed items first (pyperf's warm-ups): a process's first items pay for lazy set-up
        #: (allocator pools, kernel primitives chosen on first use), which is start-up, not speed
        self._warmup_items = int(cell.get("warmup_items") or 0)
        self._warmed = 0
        self._run_started: float | None = None
        self._measuring_since: float | None = None
        self._start_line_wait: float | None = None
        #: a rolling start line (``start_run(rolling=True)``): when the member said ``ready`` (None:
        #: not yet), and the unmeasured items it ran since, while its partner got ready
        self._rolling = False
        self._ready_at: float | None = None
        self._line_items = 0
        #: item records written in batches: encoding and writing one per item between timed items
        #: polluted the caches the next item ran in (measured: +6% per item and twice the spread
        #: between cells for a 2.5 ms LeNet step)
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._flushed_at = time.perf_counter()
        self._notes: dict[str, Any] = {}
        #: the process's page faults and file reads when the measured window opened
        self._faults_at_window: dict[str, int] | None = None
        self._reads_at_window: dict[str, int] | None = None

    def emit(self, record: dict[str, Any]) -> None:
        self._flush_items()  # records keep their order: items first
        self._stream.write(json.dumps(record, separators=(",", ":")) + "\n")

    def _flush_items(self) -> None:
        with self._lock:  # loadgen reports items from its own threads
            pending, self._pending = self._pending, []
            self._flushed_at = time.perf_counter()
            if pending:
                self._stream.write("".join(json.dumps(item, separators=(",", ":")) + "\n" for item in pending))

    @contextmanager
    def setup(self, name: str) -> Iterator[None]:
        """Time a one-off phase (model load, data load, ...)."""
        start = time.perf_counter()
        yield
        self.emit({"type": "setup", "name": name, "dur": time.perf_counter() - start})

    def setup_value(self, name: str, seconds: float) -> None:
        """Report a one-off phase timed elsewhere."""
        self.emit({"type": "setup", "name": name, "dur": seconds})

    def metric(self, name: str, value: float, unit: str = "") -> None:
        """A summary number the workload computed (FLOP/s, bandwidth): stored as ``workload.<name>``."""
        self._notes.setdefault("metrics", {})[name] = [float(value), unit]

    def unavailable(self, reason: str) -> None:
        """What this cell is for cannot be measured here (no CUDA device): a record, never a number."""
        self._notes["unavailable"] = reason

    def start_run(self, rolling: bool = False) -> None:
        """Mark the start of the timed items (after setup): the runner reads the cell's CPU time
        and its cores' interference counters here (runner/interference.py), or after the
        warm-up items when the cell has any.

        A duet member meets its partner at the start line. By default it waits there idle, before
        its warm-up items: when members waited 1-3 s after their warm-up, the waiting member of the
        default study's resnet-infer A/A pair measured 8-30% slower in each of the four rounds it
        waited over a second. Waiting before the warm-up items was not enough beside a busy
        neighbour: there the member that had waited still measured slower in proportion to its
        wait (pair ratio against wait difference r = 0.85 over 23 A/A pairs, about 10% per second
        waited), and as learnt launch delays made the A/A member wait more often than its
        partner, its pairs read +2% in two loaded runs. With ``rolling=True`` (a loop of items
        sized by ``min_seconds``) the member never idles: it says ``ready`` after its warm-up
        items and goes on running unmeasured items until the go, and its window opens at the
        first item boundary after it, at most one item late."""
        # Set-up (torch's import alone) leaves hundreds of thousands of long-lived objects that every
        # full collection would walk again: frozen, the collector's pauses no longer depend on how
        # much was imported, which made the mean of a cell swing by several percent between processes.
        gc.collect()
        gc.freeze()
        if self.cell.get("start_line") and rolling:
            self._rolling = True
            self._run_started = time.perf_counter()
            if not self._warmup_items:
                self._at_rolling_line()
            return
        if self.cell.get("start_line"):
            self.emit({"type": "ready"})
            self._stream.flush()
            self._start_line_wait = wait_for_go(START_LINE_TIMEOUT_S)
        self._run_started = time.perf_counter()
        if not self._warmup_items:
            self._open_window({"type": "run_start"})

    def _at_rolling_line(self) -> None:
        """Between two unmeasured items at a rolling start line: say ``ready`` the first time, and
        open the measured window once the go has come (or the line has waited too long)."""
        if self._ready_at is None:
            self.emit({"type": "ready"})
            self._stream.flush()
            self._ready_at = time.perf_counter()
            came = go_has_come(ROLLING_FIRST_POLL_S)
        else:
            came = go_has_come(0.0)
        waited = time.perf_counter() - self._ready_at
        if not came and waited < START_LINE_TIMEOUT_S:
            return
        self._start_line_wait = waited if came else None
        self._open_window({"type": "run_start", "warmup_items": self._warmed, "start_line_items": self._line_items})

    def _open_window(self, record: dict[str, Any]) -> None:
        """Start the measured window (after the start line's go and the warm-up items)."""
        if self.cell.get("start_line"):
            record = {**record, "start_line_wait_s": self._start_line_wait}
        self._faults_at_window = process_faults()
        self._reads_at_window = process_reads()
        if self._faults_at_window is not None:
            record = {**record, "faults": self._faults_at_window}
        self.emit(record)
        self._run_started = self._measuring_since = time.perf_counter()

    def skip_warmup(self) -> None:
        """No warm-up items for this run: the next item is measured (a script that marks no steps is
        one item, the whole script, and there is nothing to warm up before it)."""
        if self._warmed < self._warmup_items:
            self._warmup_items = self._warmed
            self._open_window({"type": "run_start", "warmup_items": self._warmed})

    @property
    def counts(self) -> tuple[int, int]:
        """(warm-up items taken, items measured) so far."""
        return self._warmed, self._items

    def measured_s(self) -> float:
        """Seconds since the measured window opened (0 during set-up and warm-up items): what a
        workload's ``min_seconds`` counts."""
        return 0.0 if self._measuring_since is None else time.perf_counter() - self._measuring_since

    def item(self, phases: dict[str, float], e2e: float) -> None:
        """Report one timed item: its phase durations and its end-to-end time (seconds)."""
        if self._warmed < self._warmup_items:
            self._warmed += 1
            if self._warmed == self._warmup_items:  # the measured window starts with the next item
                if self._rolling:
                    self._at_rolling_line()
                else:
                    self._open_window({"type": "run_start", "warmup_items": self._warmed})
            return
        if self._rolling and self._measuring_since is None:  # an item run while the partner got ready
            self._line_items += 1
            self._at_rolling_line()
            return
        with self._lock:
            self._pending.append({"type": "item", "i": self._items, "e2e": e2e, "phases": phases})
            self._items += 1
        if len(self._pending) >= ITEM_BATCH or time.perf_counter() - self._flushed_at >= ITEM_FLUSH_S:
            self._flush_items()

    def note(self, **facts: Any) -> None:
        """Facts about the run (timing mode, epochs done) carried in the ``done`` record."""
        self._notes.update(facts)

    def finish(self, **extra: Any) -> None:
        run_s = time.perf_counter() - self._run_started if self._run_started else None
        reads = process_reads()
        window_reads = ({"run_reads": {k: reads[k] - self._reads_at_window[k] for k in reads}}
                        if reads is not None and self._reads_at_window is not None else {})
        self.emit({"type": "done", "items": self._items, "run_s": run_s, **self._notes, **extra,
                   **self._fault_counts(), **window_reads})

    def _fault_counts(self) -> dict[str, Any]:
        """The done record's ``faults`` (from the process's start) and ``run_faults`` (since the
        measured window opened), or why there are none."""
        faults = process_faults()
        if faults is None:
            return {"faults_unavailable": NO_FAULT_COUNTS}
        counts: dict[str, Any] = {"faults": faults}
        if self._faults_at_window is not None:
            counts["run_faults"] = {k: faults[k] - self._faults_at_window[k] for k in faults}
        return counts

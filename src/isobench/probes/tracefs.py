"""Private tracefs instances around a cell, and everything needed to leave the host as it was.

Each instance is named ``isobench-<runner tag>-<n>-<role>`` so a later run can tell whose
it is: ``sweep_stale`` removes the instances (and their trace files) of runners that are
gone, and restores a ``dirty_background_bytes`` they lowered (journaled, like all host state
isobench changes, by :mod:`isobench.hoststate`). Global tracing state (the top-level
instance) is never written; tracefs itself is mounted if it is not.

A reader thread in the runner drains each instance every ``READ_EVERY_S`` without blocking, and
once more after tracing stops (no helper process, no fixed wait), into a file in ``/dev/shm``,
so reading the trace never writes to the traced filesystem; an unfiltered instance skips the
thread (``set_event_notrace_pid``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from isobench.probes.base import ProbeTarget
from isobench.probes.ftrace_parse import Events, RawLayout, parse_file, parse_raw, raw_layout

TRACEFS = Path("/sys/kernel/tracing")
STATE_DIR = Path("/run/isobench/ftrace")
#: each trace file in /dev/shm (memory) stops growing here; probes.ftrace.max_trace_mb overrides it
DEFAULT_TRACE_BYTES = 512 << 20
SHM = Path("/dev/shm")
PREFIX = "isobench-"
VM = Path("/proc/sys/vm")
#: how often the reader thread drains an instance: a drain with nothing to read costs ~2 us of
#: CPU, and 20 ms of the fastest events measured (a loop of getppid: 250 MB/s of raw sys_enter)
#: fit in the default 8 MiB per CPU; busier than that, it drains again at once
READ_EVERY_S = 0.02
#: raw ring-buffer pages this large where the kernel allows it: one read then copies 64 KiB, not 4
RAW_PAGE_KB = 64
READ_BYTES = 1 << 17  # one read returns one ring-buffer page (raw) or one page of text at most
#: before each raw page in the trace file: the CPU it came from and its length
PAGE_HEADER = struct.Struct("<II")
_sequence = itertools.count()
_mount_lock = threading.Lock()


def tracefs_problem() -> str | None:
    """Why private tracefs instances cannot be used here (None when they can); mounts tracefs if needed."""
    if os.geteuid() != 0:
        return "needs root to create tracefs instances"
    if not (TRACEFS / "instances").is_dir():
        if not (TRACEFS.is_dir() and "tracefs" in Path("/proc/filesystems").read_text()):
            return "the kernel has no tracefs"
        # tenants starting together (threads, or other runners) must not race to mount it
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with _mount_lock, (STATE_DIR / "mount.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (TRACEFS / "instances").is_dir():
                mounted = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                                         capture_output=True, text=True)
                if mounted.returncode != 0 or not (TRACEFS / "instances").is_dir():
                    return f"cannot mount tracefs at {TRACEFS}: {mounted.stderr.strip()}"
    return None


def missing_events(events: Iterable[str]) -> list[str]:
    return [event for event in events if not (TRACEFS / "events" / event / "enable").exists()]


def _write(path: Path, value: str, append: bool = False) -> None:
    # tracefs refuses the lseek that Python's append mode does: plain os.open/os.write
    fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class TraceInstance:
    """One private instance with a set of events, drained without blocking into a file in /dev/shm.

    ``raw``: read the kernel's binary pages (``per_cpu/cpuN/trace_pipe_raw``) instead of the text
    stream, for events ``ftrace_parse.RAW_FIELDS`` knows: the kernel formats nothing (its text
    formatting was most of the reader's CPU: ``%ps`` looks every user address up in kallsyms),
    and the file is a third of the size. Elsewhere, or when a format cannot be read, text."""

    def __init__(self, role: str, events: list[str], buffer_kb: int, pid_filter: bool = False,
                 max_bytes: int = DEFAULT_TRACE_BYTES, raw: bool = False) -> None:
        from isobench.liveness import runner_tag

        self.name = f"{PREFIX}{runner_tag()}-{next(_sequence)}-{role}"
        self.path = TRACEFS / "instances" / self.name
        self.events = events
        self.buffer_kb = buffer_kb
        self.max_bytes = max_bytes
        self.pid_filter = pid_filter
        self.raw = raw and sys.byteorder == "little"  # the raw decoder reads little-endian pages
        self.layout: RawLayout | None = None
        self.trace_file = SHM / f"{self.name}.trace"
        self.state_file = STATE_DIR / f"{self.name}.json"
        self.filtered_pids: set[int] = set()
        self.stats: dict[str, int] = {}
        self.started_mono = 0.0
        self.truncated = False
        self.read_cpu_s = 0.0
        self._out: int | None = None  # the trace file, open for writing
        self._sources: list[tuple[int, int]] = []  # (fd, cpu): per-CPU raw pages, or the text pipe (cpu -1)
        self._written = 0
        self._lock = threading.Lock()  # drain and close never overlap
        self._halt = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def reader_tid(self) -> int | None:
        """The reader thread's task id (for another instance's ``set_event_notrace_pid``)."""
        return self._reader.native_id if self._reader is not None else None

    def start(self, pids: Iterable[int] = (), notrace: Iterable[int | None] = ()) -> None:
        """Create the instance and start tracing; ``notrace``: more tasks an unfiltered instance skips."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        # /dev/shm is world-writable: an unpredictable name, created 0600 with O_EXCL, so a link
        # planted at a guessable name can never make this root process write through it.
        self._out, trace_name = tempfile.mkstemp(prefix=f"{self.name}.", suffix=".trace", dir=SHM)
        self.trace_file = Path(trace_name)
        self.state_file.write_text(json.dumps({"instance": self.name, "trace_file": str(self.trace_file)}))
        self.path.mkdir()
        _write(self.path / "tracing_on", "0")
        self.layout = raw_layout(self.path / "events", self.events) if self.raw else None
        if self.layout is not None and (self.path / "buffer_subbuf_size_kb").exists():  # Linux 6.8+
            _write(self.path / "buffer_subbuf_size_kb", str(RAW_PAGE_KB))
        _write(self.path / "buffer_size_kb", str(self.buffer_kb))
        _write(self.path / "trace_clock", "mono")  # same clock as time.monotonic()
        if self.pid_filter:
            _write(self.path / "options" / "event-fork", "1")  # children of traced tasks are traced too
            self.add_pids(pids)
        self._open_sources()
        self._reader = threading.Thread(target=self._read_loop, name=f"isobench-{self.name}", daemon=True)
        self._reader.start()  # returns once the thread runs: its native_id is known
        if not self.pid_filter:  # the reader's own writes to /dev/shm add page-cache pages
            skip = {self._reader.native_id, os.getpid(), *notrace} - {None}
            _write(self.path / "set_event_notrace_pid", " ".join(str(tid) for tid in sorted(skip)))
        for event in self.events:
            _write(self.path / "events" / event / "enable", "1")
        self.started_mono = time.monotonic()
        _write(self.path / "tracing_on", "1")

    def _open_sources(self) -> None:
        flags = os.O_RDONLY | os.O_NONBLOCK
        if self.layout is None:
            self._sources = [(os.open(self.path / "trace_pipe", flags), -1)]
            return
        for cpu_dir in sorted(self.path.glob("per_cpu/cpu*"), key=lambda p: int(p.name[3:])):
            with contextlib.suppress(OSError):  # a CPU that cannot be read here records nothing either
                self._sources.append((os.open(cpu_dir / "trace_pipe_raw", flags), int(cpu_dir.name[3:])))

    def add_pids(self, pids: Iterable[int]) -> None:
        """Trace these tasks too (pid-filtered instances); tasks that already ended are skipped."""
        if not self.path.exists():
            return  # not started yet: start() passes the pids
        for pid in set(pids) - self.filtered_pids:
            with contextlib.suppress(OSError):  # ESRCH: the task already ended
                _write(self.path / "set_event_pid", str(pid), append=True)
                self.filtered_pids.add(pid)

    def _read_loop(self) -> None:
        """Drain every READ_EVERY_S, or at once again after a drain that found a quarter of a buffer
        (a burst). Never a blocking read or poll: a reader waiting on the buffer is woken through
        an IPI from the traced CPU, which here tripled what tracing a system call cost the cell
        (+270 ns a call against +90; a poll for a fill level still cost +170)."""
        burst = self.buffer_kb << 8  # a quarter of one CPU's buffer, in bytes
        while not self._halt.is_set():
            try:
                drained = self.drain()
            except OSError:  # the instance vanished (abort): nothing left to read
                drained = 0
            if drained < burst:
                self._halt.wait(READ_EVERY_S)
        self.read_cpu_s = time.thread_time()  # the thread's whole life: what reading cost the harness

    def drain(self) -> int:
        """Copy what the buffers hold now into the trace file, without waiting; return how many bytes.
        At ``max_bytes`` the reads stop: what the kernel still holds then is counted as lost."""
        with self._lock:
            if self._out is None or self.truncated:
                return 0
            chunks: list[bytes] = []
            room = self.max_bytes - self._written
            for fd, cpu in self._sources:
                while room > 0:
                    try:
                        data = os.read(fd, READ_BYTES)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    if cpu >= 0:  # a page read before it filled comes back whole: keep its events only
                        commit = int.from_bytes(data[8:16], "little")
                        data = data[:16 + (commit & 0x3FFFFFFF) + (8 if commit & 1 << 30 else 0)]
                    chunk = PAGE_HEADER.pack(cpu, len(data)) + data if cpu >= 0 else data
                    chunks.append(chunk[:room])
                    room -= len(chunk)
            self.truncated = room <= 0
            blob = memoryview(b"".join(chunks))
            read = len(blob)
            while blob:
                blob = blob[os.write(self._out, blob):]
            self._written = self.max_bytes - max(room, 0)
            return read

    def stop(self) -> None:
        """Stop recording, drain what the buffers still hold, read the loss counters."""
        if self._out is None or not self.path.exists():
            return
        _write(self.path / "tracing_on", "0")
        self._stop_reader()
        totals: dict[str, int] = {}
        for _ in range(3):  # an event still being committed as tracing stopped lands within microseconds
            self.drain()
            totals = self._per_cpu_totals()
            if not totals.get("entries") or self.truncated:
                break
        self.stats = {"overrun": totals.get("overrun", 0) + totals.get("commit overrun", 0),
                      "dropped": totals.get("dropped events", 0), "unread": totals.get("entries", 0),
                      "truncated": int(self.truncated)}
        self.close()

    def _per_cpu_totals(self) -> dict[str, int]:
        """``per_cpu/cpu*/stats`` summed over the CPUs, in one pass."""
        totals: dict[str, int] = {}
        for stats in (self.path / "per_cpu").glob("cpu*/stats"):
            with contextlib.suppress(OSError, ValueError):
                for line in stats.read_text().splitlines():
                    name, _, value = line.partition(":")
                    if name.strip() in ("entries", "overrun", "commit overrun", "dropped events"):
                        totals[name.strip()] = totals.get(name.strip(), 0) + int(value.split()[0])
        return totals

    def read_events(self) -> Events:
        """What the trace file holds, parsed into columns in time order."""
        if self.layout is not None:
            return parse_raw(np.fromfile(self.trace_file, dtype=np.uint8), self.layout)
        return parse_file(str(self.trace_file))

    def _stop_reader(self) -> None:
        self._halt.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=10)

    def close(self) -> None:
        """Stop the reader and remove the instance (keeps the trace file). Idempotent."""
        self._stop_reader()
        with self._lock:
            for fd in [fd for fd, _ in self._sources] + ([self._out] if self._out is not None else []):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._sources, self._out = [], None
        remove_instance(self.path)  # after the fds closed: an open trace_pipe makes rmdir EBUSY
        self.state_file.unlink(missing_ok=True)

    def discard(self) -> None:
        self.close()
        self.trace_file.unlink(missing_ok=True)


def remove_instance(path: Path) -> bool:
    if not path.exists():
        return False
    with contextlib.suppress(OSError):
        _write(path / "tracing_on", "0")
    for attempt in range(50):  # rmdir fails with EBUSY while a reader still has trace_pipe open
        try:
            path.rmdir()  # the kernel disables the instance's events itself
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.02 * (attempt + 1))
    return False


class TaskSampler:
    """Samples the cell's tasks (processes and their threads) while it runs: tids appear and go.

    ``on_new`` hears of each new tid (to extend a pid filter); ``on_process`` is called for
    each live process at most every ``process_every_s`` (to snapshot its memory maps).
    """

    def __init__(self, target: ProbeTarget, interval_s: float,
                 on_new: Callable[[list[int]], None] | None = None,
                 on_process: Callable[[int], None] | None = None, process_every_s: float = 1.0) -> None:
        self.target = target
        self.interval_s = interval_s
        self.on_new = on_new
        self.on_process = on_process
        self.process_every_s = process_every_s
        self.tgid: dict[int, int] = {}  # tid -> tgid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="isobench-tasks", daemon=True)
        self._last_process: dict[int, float] = {}
        self.cpu_s = 0.0  # the sampling thread's CPU time, once it ended

    def sample(self) -> None:
        new = []
        for pid in self.target.pids():
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                if tid not in self.tgid:
                    self.tgid[tid] = pid
                    new.append(tid)
            if self.on_process and time.monotonic() - self._last_process.get(pid, -1e9) >= self.process_every_s:
                self._last_process[pid] = time.monotonic()
                self.on_process(pid)
        if new and self.on_new:
            self.on_new(new)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a vanished process must not end the sampling
                self.sample()
        self.cpu_s = time.thread_time()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class DirtyBackgroundKnob:
    """Lower ``vm.dirty_background_bytes`` while a cell runs.

    Cells can overlap (tenants, concurrent runners): the host state journal
    (:mod:`isobench.hoststate`) keeps the host's original setting, saved by the first
    holder, and one entry per holder; while any holder remains the smallest value asked for is
    in force, and the last holder to leave restores the original. After a crash, the next run's
    sweep drops dead holders and restores the same way."""

    def __init__(self, value: int) -> None:
        from isobench.hoststate import Change

        self.value = value
        self.change = Change("dirty_background", str(VM), value)

    @property
    def held(self) -> bool:
        return self.change.held

    def apply(self) -> None:
        self.change.apply()

    def restore(self) -> None:
        self.change.release()


class _FlusherTimerKnob(DirtyBackgroundKnob):
    """Lower one of the flusher's timers (a ``vm.*_centisecs`` sysctl) while a cell runs.
    Overlapping holders and crashes are handled as for :class:`DirtyBackgroundKnob` (the
    shortest asked for is in force)."""

    kind = ""
    sysctl = ""

    def __init__(self, seconds: float) -> None:
        from isobench.hoststate import Change

        self.value = max(1, round(seconds * 100))
        self.change = Change(self.kind, str(VM / self.sysctl), self.value)


class DirtyExpireKnob(_FlusherTimerKnob):
    """``vm.dirty_expire_centisecs``: dirty pages older than this go out as periodic write-backs
    at the flusher's next wake-up (every dirty_writeback_centisecs, 5 s by default), so a cell sees
    them within seconds instead of the default 30."""

    kind, sysctl = "dirty_expire", "dirty_expire_centisecs"


class DirtyWritebackKnob(_FlusherTimerKnob):
    """``vm.dirty_writeback_centisecs``: how often the flusher wakes to write what has passed
    dirty_expire (5 s by default). The kernel wakes every flusher when the value changes."""

    kind, sysctl = "dirty_writeback", "dirty_writeback_centisecs"


def _holders() -> list[dict[str, object]]:
    """Who holds ``vm.dirty_background_bytes`` lowered right now (dead runners included)."""
    from isobench.hoststate import holders

    return holders("dirty_background")


def _tag_of(name: str) -> str | None:
    parts = name[len(PREFIX):].split("-") if name.startswith(PREFIX) else []
    return f"{parts[0]}-{parts[1]}" if len(parts) >= 3 else None


def sweep_stale() -> list[str]:
    """Remove instances, trace files and sysctl changes left by runners that died. (Their readers
    died with them: threads, or, before them, helper processes with a parent-death signal.)"""
    from isobench.liveness import tag_is_stale

    removed: list[str] = []
    if STATE_DIR.is_dir():
        for state in sorted(STATE_DIR.glob(f"{PREFIX}*.json")):
            tag = _tag_of(state.stem)
            if tag is None or not tag_is_stale(tag):
                continue
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(state.read_text())
                Path(data.get("trace_file", "/nonexistent")).unlink(missing_ok=True)
            state.unlink(missing_ok=True)
    from isobench.hoststate import sweep_stale as sweep_host_state

    removed += sweep_host_state({"dirty_background", "dirty_expire", "dirty_writeback"})
    instances = TRACEFS / "instances"
    if instances.is_dir():
        for path in sorted(instances.glob(f"{PREFIX}*")):
            tag = _tag_of(path.name)
            if tag is not None and tag_is_stale(tag):
                if remove_instance(path):
                    removed.append(f"tracefs instance {path.name}")
                for trace in SHM.glob(f"{path.name}.*.trace"):
                    trace.unlink(missing_ok=True)
    return removed


class CellTrace:
    """The common life of a trace probe: an optional unfiltered instance (write-back, block: the
    flusher threads must be seen too), an optional instance filtered to the cell's tasks
    (page faults, syscalls: only the cell's, and far fewer events; ``raw_cell``: read as binary
    pages), and a task sampler that keeps the filter and the pid set up to date as children and
    threads appear."""

    def __init__(self, role: str, all_tasks: list[str], cell_tasks: list[str], buffer_kb: int,
                 interval_s: float, on_process: Callable[[int], None] | None = None,
                 max_bytes: int = DEFAULT_TRACE_BYTES, raw_cell: bool = False) -> None:
        self.host = TraceInstance(f"{role}h", all_tasks, buffer_kb, max_bytes=max_bytes) if all_tasks else None
        self.cell = TraceInstance(f"{role}c", cell_tasks, buffer_kb, pid_filter=True, max_bytes=max_bytes,
                                  raw=raw_cell) if cell_tasks else None
        self.interval_s = interval_s
        self.on_process = on_process
        self.sampler: TaskSampler | None = None
        self.stopped_mono = 0.0

    def instances(self) -> list[TraceInstance]:
        return [instance for instance in (self.host, self.cell) if instance is not None]

    def start(self, target: ProbeTarget) -> None:
        self.sampler = TaskSampler(target, self.interval_s,
                                   on_new=self.cell.add_pids if self.cell else None, on_process=self.on_process)
        try:
            self.sampler.sample()
            if self.cell:
                self.cell.start(self.sampler.tgid)
            if self.host:  # started second: it skips the cell instance's reader too
                self.host.start(notrace=[self.cell.reader_tid] if self.cell else [])
            self.sampler.sample()  # tasks born while the instances were being set up
            self.sampler.start()
        except BaseException:
            self.abort()
            raise

    def stop(self) -> None:
        if self.sampler:
            self.sampler.stop()
        self.stopped_mono = time.monotonic()
        for instance in self.instances():
            instance.stop()

    def thread_cpu_s(self) -> float:
        """CPU time of the probe's threads (the readers' and the sampler's), once stopped."""
        return sum(i.read_cpu_s for i in self.instances()) + (self.sampler.cpu_s if self.sampler else 0.0)

    def lost(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for instance in self.instances():
            for key, value in instance.stats.items():
                total[key] = total.get(key, 0) + value
        return total

    def abort(self) -> None:
        if self.sampler:
            self.sampler.stop()
        for instance in self.instances():
            instance.discard()

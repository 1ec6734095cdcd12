"""Private tracefs instances around a cell, and everything needed to leave the host as it was.

Each instance is named ``isobench-<runner tag>-<n>-<role>`` so a later run can tell whose
it is: ``sweep_stale`` removes the instances (and their readers and trace files) of runners
that are gone, and restores a ``dirty_background_bytes`` they lowered (journaled, like all
host state isobench changes, by :mod:`isobench.hoststate`). Global tracing state
(the top-level instance) is never written; tracefs itself is mounted if it is not.

A reader (``cat trace_pipe``, dying with its parent through ``setpriv --pdeathsig``) copies
the text stream to ``/dev/shm``, so reading the trace never writes to the traced filesystem;
its pid is in ``set_event_notrace_pid``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from isobench.probes.base import ProbeTarget

TRACEFS = Path("/sys/kernel/tracing")
STATE_DIR = Path("/run/isobench/ftrace")
#: each trace file in /dev/shm (memory) stops growing here; probes.ftrace.max_trace_mb overrides it
DEFAULT_TRACE_BYTES = 512 << 20
SHM = Path("/dev/shm")
PREFIX = "isobench-"
VM = Path("/proc/sys/vm")
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
    if any(shutil.which(tool) is None for tool in ("setpriv", "stdbuf", "head")):
        return "needs setpriv, stdbuf and head (util-linux, coreutils) for the trace reader"
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
    """One private instance with a set of events, streamed to a file in /dev/shm."""

    def __init__(self, role: str, events: list[str], buffer_kb: int, pid_filter: bool = False,
                 max_bytes: int = DEFAULT_TRACE_BYTES) -> None:
        from isobench.liveness import runner_tag

        self.name = f"{PREFIX}{runner_tag()}-{next(_sequence)}-{role}"
        self.path = TRACEFS / "instances" / self.name
        self.events = events
        self.buffer_kb = buffer_kb
        self.max_bytes = max_bytes
        self.pid_filter = pid_filter
        self.trace_file = SHM / f"{self.name}.trace"
        self.state_file = STATE_DIR / f"{self.name}.json"
        self.reader: subprocess.Popen[bytes] | None = None
        self.filtered_pids: set[int] = set()
        self.stats: dict[str, int] = {}
        self.started_mono = 0.0

    def start(self, pids: Iterable[int] = ()) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        # /dev/shm is world-writable: an unpredictable name, created 0600 with O_EXCL, so a link
        # planted at a guessable name can never make this root process write through it.
        fd, trace_name = tempfile.mkstemp(prefix=f"{self.name}.", suffix=".trace", dir=SHM)
        self.trace_file = Path(trace_name)
        try:
            self.state_file.write_text(json.dumps({"instance": self.name, "trace_file": str(self.trace_file)}))
            self.path.mkdir()
        except BaseException:
            os.close(fd)
            raise
        _write(self.path / "tracing_on", "0")
        _write(self.path / "buffer_size_kb", str(self.buffer_kb))
        _write(self.path / "trace_clock", "mono")  # same clock as time.monotonic()
        if self.pid_filter:
            _write(self.path / "options" / "event-fork", "1")  # children of traced tasks are traced too
            self.add_pids(pids)
        with os.fdopen(fd, "wb") as out:
            # /dev/shm is memory: the reader stops at max_bytes, and the probe says the trace was cut.
            # Unbuffered (stdbuf -o0): the reader is killed at stop, and a stdio buffer would lose the tail.
            self.reader = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "stdbuf", "-o0", "head", "-c",
                                            str(self.max_bytes), str(self.path / "trace_pipe")],
                                           stdout=out, stdin=subprocess.DEVNULL)
        self.state_file.write_text(json.dumps({"instance": self.name, "trace_file": str(self.trace_file),
                                               "reader_pid": self.reader.pid}))
        if not self.pid_filter:
            _write(self.path / "set_event_notrace_pid", f"{self.reader.pid} {os.getpid()}")
        for event in self.events:
            _write(self.path / "events" / event / "enable", "1")
        self.started_mono = time.monotonic()
        _write(self.path / "tracing_on", "1")

    def add_pids(self, pids: Iterable[int]) -> None:
        """Trace these tasks too (pid-filtered instances); tasks that already ended are skipped."""
        if not self.path.exists():
            return  # not started yet: start() passes the pids
        for pid in set(pids) - self.filtered_pids:
            with contextlib.suppress(OSError):  # ESRCH: the task already ended
                _write(self.path / "set_event_pid", str(pid), append=True)
                self.filtered_pids.add(pid)

    def stop(self, drain_timeout_s: float = 5.0) -> None:
        """Stop recording, let the reader drain the buffers, read the loss counters."""
        if not self.path.exists():
            return
        _write(self.path / "tracing_on", "0")
        deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < deadline and self.reader and self.reader.poll() is None:
            if all(value == 0 for value in self._per_cpu("entries").values()):
                break
            time.sleep(0.02)
        time.sleep(0.05)  # the reader's last read() may still be in flight
        self.stats = {"overrun": sum(self._per_cpu("overrun").values()),
                      "dropped": sum(self._per_cpu("dropped events").values()),
                      "unread": sum(self._per_cpu("entries").values()),
                      "truncated": int(self.trace_file.exists() and self.trace_file.stat().st_size >= self.max_bytes)}
        self.close()

    def _per_cpu(self, key: str) -> dict[str, int]:
        values = {}
        for stats in (self.path / "per_cpu").glob("cpu*/stats"):
            with contextlib.suppress(OSError, ValueError):
                for line in stats.read_text().splitlines():
                    name, _, value = line.partition(":")
                    if name.strip() == key:
                        values[stats.parent.name] = int(value.split()[0])
        return values

    def close(self) -> None:
        """Kill the reader and remove the instance (keeps the trace file). Idempotent."""
        if self.reader is not None and self.reader.poll() is None:
            self.reader.kill()
            self.reader.wait()
        remove_instance(self.path)
        self.state_file.unlink(missing_ok=True)

    def discard(self) -> None:
        self.close()
        self.trace_file.unlink(missing_ok=True)


def remove_instance(path: Path) -> bool:
    if not path.exists():
        return False
    with contextlib.suppress(OSError):
        _write(path / "tracing_on", "0")
    for enable in path.glob("events/*/*/enable"):
        with contextlib.suppress(OSError):
            if enable.read_text().strip() != "0":
                _write(enable, "0")
    for attempt in range(50):  # rmdir fails with EBUSY while a reader still has trace_pipe open
        try:
            path.rmdir()
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


class DirtyExpireKnob(DirtyBackgroundKnob):
    """Lower ``vm.dirty_expire_centisecs`` while a cell runs: dirty pages older than this go out
    as periodic write-backs at the flusher's next wake-up (every dirty_writeback_centisecs, 5 s by
    default), so a cell sees them within seconds instead of the default 30. Overlapping holders and
    crashes are handled as for :class:`DirtyBackgroundKnob` (the shortest asked for is in force)."""

    def __init__(self, seconds: float) -> None:
        from isobench.hoststate import Change

        self.value = max(1, round(seconds * 100))
        self.change = Change("dirty_expire", str(VM / "dirty_expire_centisecs"), self.value)


def _holders() -> list[dict[str, object]]:
    """Who holds ``vm.dirty_background_bytes`` lowered right now (dead runners included)."""
    from isobench.hoststate import holders

    return holders("dirty_background")


def _tag_of(name: str) -> str | None:
    parts = name[len(PREFIX):].split("-") if name.startswith(PREFIX) else []
    return f"{parts[0]}-{parts[1]}" if len(parts) >= 3 else None


def sweep_stale() -> list[str]:
    """Remove instances, readers, trace files and sysctl changes left by runners that died."""
    from isobench.liveness import tag_is_stale

    removed: list[str] = []
    if STATE_DIR.is_dir():
        for state in sorted(STATE_DIR.glob(f"{PREFIX}*.json")):
            tag = _tag_of(state.stem)
            if tag is None or not tag_is_stale(tag):
                continue
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(state.read_text())
                _kill_reader(data.get("reader_pid"), data.get("instance", ""))
                Path(data.get("trace_file", "/nonexistent")).unlink(missing_ok=True)
            state.unlink(missing_ok=True)
    from isobench.hoststate import sweep_stale as sweep_host_state

    removed += sweep_host_state({"dirty_background", "dirty_expire"})
    instances = TRACEFS / "instances"
    if instances.is_dir():
        for path in sorted(instances.glob(f"{PREFIX}*")):
            tag = _tag_of(path.name)
            if tag is not None and tag_is_stale(tag):
                _kill_readers_of(path.name)
                if remove_instance(path):
                    removed.append(f"tracefs instance {path.name}")
                for trace in SHM.glob(f"{path.name}.*.trace"):
                    trace.unlink(missing_ok=True)
    return removed


def _kill_reader(pid: int | None, instance: str) -> None:
    if not pid or not instance:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if instance.encode() in cmdline:  # only the reader we started, never a recycled pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_readers_of(instance: str) -> None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if f"instances/{instance}/trace_pipe".encode() in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)


class CellTrace:
    """The common life of a trace probe: an optional unfiltered instance (write-back, block: the
    flusher threads must be seen too), an optional instance filtered to the cell's tasks
    (page faults, syscalls: only the cell's, and far fewer events), and a task sampler that
    keeps the filter and the pid set up to date as children and threads appear."""

    def __init__(self, role: str, all_tasks: list[str], cell_tasks: list[str], buffer_kb: int,
                 interval_s: float, on_process: Callable[[int], None] | None = None,
                 max_bytes: int = DEFAULT_TRACE_BYTES) -> None:
        self.host = TraceInstance(f"{role}h", all_tasks, buffer_kb, max_bytes=max_bytes) if all_tasks else None
        self.cell = TraceInstance(f"{role}c", cell_tasks, buffer_kb, pid_filter=True,
                                  max_bytes=max_bytes) if cell_tasks else None
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
            for instance in self.instances():
                instance.start(self.sampler.tgid)
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

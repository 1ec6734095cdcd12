"""Run one cell: a function of the cell description alone.

The platform starts the worker; this module reads the record channel (the process's
stdout, JSON lines), enforces the cell timeout, and always calls the platform's
cleanup, whatever happens (timeout, crash, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS, Launched, Platform
from isobench.platforms.hostmirror import python_inside
from isobench.probes.session import ProbeOutcome, ProbeSession
from isobench.runner.drivers import has_host_driver, settle, start_host_driver
from isobench.runner.interference import Window
from isobench.runner.interference import metrics as interference_metrics
from isobench.study.model import PlatformEntry
from isobench.workloads.channel import RECORD_VERSION

STDERR_TAIL = 2000


@dataclass
class CellOutcome:
    cell: Cell
    status: str  # ok | failed | timeout | unavailable (the workload cannot measure here)
    exit_code: int | None
    error: str | None
    stderr_tail: str
    started_at: float  # wall clock (epoch seconds)
    wall_s: float  # launch to exit, runner's clock
    startup_s: float | None  # launch to the worker's first record, runner's clock
    hello: dict[str, Any] | None = None
    setup: dict[str, float] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    platform_info: dict[str, Any] = field(default_factory=dict)
    #: what the probes saw (metrics, raw series, per-probe status); empty when none ran
    probes: ProbeOutcome = field(default_factory=ProbeOutcome)
    #: what else ran on the cell's cores over its measured window (runner/interference.py)
    interference: dict[str, Any] = field(default_factory=dict)
    #: runner's monotonic clock: the launch, and the measured window (the worker's run_start and
    #: done records); a duet's members are aligned and checked on it (runner/duet.py)
    launched_at: float | None = None
    measured: tuple[float, float] | None = None


#: the record channel is the cell's output, so it is bounded: a longer line, more records or
#: more bytes fail that cell (the rest of the stream is read and dropped so the worker never blocks)
MAX_RECORD_BYTES = 64 * 1024
MAX_RECORDS = 2_000_000
MAX_CHANNEL_BYTES = 512 * 2**20


@dataclass
class Beside:
    """A cell run beside another by design (a duet member whose pair trades cores): the cores it
    may move over, and the cgroups of the cells it shares them with (their CPU time there is the
    design, not interference)."""

    cores: list[int]
    peers: Callable[[], list[dict[str, Path]]]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < float("inf")


#: how long the runner waits, after the cell exits, for its reader to handle the done record
DONE_MARK_WAIT_S = 5.0


class _ChannelReader(threading.Thread):
    def __init__(self, stream: Any, on_mark: Any = None, on_end: Any = None) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.on_mark = on_mark  # called with the kind of each landmark record: ready, run_start, done
        self.on_end = on_end  # called once the stream has ended
        self.records: list[dict[str, Any]] = []
        self.first_record_at: float | None = None
        self.garbage = 0
        #: why the channel cannot be trusted (the first reason): the cell fails with it
        self.problem: str | None = None

    def run(self) -> None:
        try:
            self._read()
        finally:
            if self.on_end is not None:
                self.on_end()

    def _read(self) -> None:
        total = 0
        while True:
            raw = self.stream.readline(MAX_RECORD_BYTES + 1)  # bounded: a line without end is cut
            if not raw:
                return
            total += len(raw)
            if self.problem is not None:
                continue  # drain, so that the worker never blocks on a full pipe
            if len(raw) > MAX_RECORD_BYTES:
                self.problem = f"a record longer than {MAX_RECORD_BYTES // 1024} KiB"
            elif len(self.records) >= MAX_RECORDS:
                self.problem = f"more than {MAX_RECORDS:,} records"
            elif total > MAX_CHANNEL_BYTES:
                self.problem = f"more than {MAX_CHANNEL_BYTES // 2**20} MiB of records"
            if self.problem is not None:
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                self.garbage += 1
                continue
            if self.first_record_at is None:
                self.first_record_at = time.monotonic()
            problem = self.malformed(record)
            if problem:
                self.problem = f"record {len(self.records) + 1} {problem}"
                continue
            self.records.append(record)
            if self.on_mark is not None and record.get("type") in ("done", "run_start", "ready"):
                self.on_mark(record["type"])

    @staticmethod
    def malformed(record: Any) -> str | None:
        """Why ``record`` is not one the runner can use, or None: checked once, here, so that the
        runner, the host drivers and the store only ever see well-typed records."""
        if not isinstance(record, dict):
            return f"is a JSON {type(record).__name__}, not an object"
        kind = record.get("type")
        if not isinstance(kind, str):
            return "has no string `type`"
        if kind == "hello" and record.get("version", RECORD_VERSION) != RECORD_VERSION:
            return (f"(hello) is of record version {record['version']!r}, this runner reads version "
                    f"{RECORD_VERSION}: the platform runs another isobench than the host (fix: install "
                    "the same isobench on both)")
        if kind == "setup" and not (isinstance(record.get("name"), str) and _number(record.get("dur"))):
            return "(setup) needs a string `name` and a number `dur`"
        if kind == "item":
            phases = record.get("phases")
            if not _number(record.get("e2e")) or not isinstance(phases, dict) \
                    or not all(isinstance(k, str) and _number(v) for k, v in phases.items()):
                return "(item) needs a number `e2e` and `phases` of names to numbers"
        if kind == "done":
            if record.get("run_s") is not None and not _number(record["run_s"]):
                return "(done) has a `run_s` that is not a number"
            for key in ("metrics", "info"):
                if record.get(key) is not None and not isinstance(record[key], dict):
                    return f"(done) has a `{key}` that is not an object"
        if kind == "run_start" and record.get("start_line_wait_s") is not None \
                and not _number(record["start_line_wait_s"]):
            return "(run_start) has a `start_line_wait_s` that is not a number"
        if kind == "error" and not isinstance(record.get("message"), str | None):
            return "(error) has a `message` that is not a string"
        return None


def _at_start_line(cell: Cell, platform: Platform | None) -> bool:
    """Whether the worker waits for the runner's go on stdin before measuring, and for its
    acknowledgement of the done record before it exits without teardown (a duet member)."""
    return platform is not None and platform.holds_at_start_line(cell)


def worker_argv(cell: Cell, platform: Platform | None = None) -> list[str]:
    payload = cell.worker_payload()
    if _at_start_line(cell, platform):
        payload["start_line"] = payload["ack_done"] = True
    if platform is not None and not platform.host_cores_inside:
        payload["cores"] = None  # a guest numbers its vCPUs itself: the platform places the cell
    if cell.network and platform is not None:
        # A cell on the host's network serves on loopback only; one with a network namespace of
        # its own (a bridge) on all of it, as the host reaches it at its bridge address.
        payload["listen"] = "127.0.0.1" if platform.network_mode(cell) == "host" else "0.0.0.0"
    return [python_inside(), "-m", "isobench.workloads.worker", json.dumps(payload)]


def cell_cores(cell: Cell) -> list[int]:
    """The host cores the cell runs on: its cpuset, else every core."""
    from isobench.hostinfo import host_cpus, parse_cpu_list

    cpuset = cell.effective_knobs().get("cpuset")
    return parse_cpu_list(str(cpuset)) if cpuset else host_cpus()


def platform_for(cell: Cell) -> Platform:
    entry = PlatformEntry(**cell.platform_entry)
    return PLATFORMS.get(cell.platform)(entry)


def run_cell(cell: Cell, platform: Platform | None = None,
             on_ready: Callable[[Launched, dict[str, Path]], None] | None = None,
             beside: Beside | None = None,
             on_targeted: Callable[[dict[str, Path]], None] | None = None) -> CellOutcome:
    """Launch ``cell`` on its platform, collect its records, clean up, return the outcome.
    ``on_ready`` is called when a cell at the start line (a duet member) is ready to measure,
    with its host cgroups: the caller writes its go to ``launched.proc.stdin``. ``beside`` says
    which cores the cell may move over and whose CPU time there is not interference.
    ``on_targeted`` is called once the cell's host cgroups are known, soon after its launch
    (empty where they cannot be found)."""
    platform = platform or platform_for(cell)
    started_at = time.time()
    probes = ProbeSession(cell.probes)
    probe_outcome = ProbeOutcome(status=probes.outcome.status)
    with tempfile.TemporaryFile() as stderr:
        try:
            launched = platform.launch(cell, worker_argv(cell, platform), stderr)
        except Exception as exc:  # the platform could not start the cell: record it, go on
            probes.abort()
            return CellOutcome(cell=cell, status="failed", exit_code=None,
                               error=f"the platform could not start the cell: {type(exc).__name__}: {exc}",
                               stderr_tail="", started_at=started_at, wall_s=0.0, startup_s=None)
        co_tenants = cell.tenant.count - 1 if cell.tenant is not None else 0
        cores = cell_cores(cell)
        if beside is not None:
            cores, co_tenants = sorted(set(cores) | set(beside.cores)), max(co_tenants, 1)
        window = Window(cores, cell.contamination_threshold, co_tenants)
        if beside is not None:
            window.peers = beside.peers
        targeted = threading.Event()  # the cell's cgroups are known (or will never be)
        # the end-of-run snapshots are taken, or the channel ended without a done record
        settled = threading.Event()
        acks_done = _at_start_line(cell, platform)
        driven = has_host_driver(cell)

        def on_mark(kind: str) -> None:
            if kind == "ready":
                if on_ready is not None:
                    targeted.wait(timeout=60)
                    on_ready(launched, dict(window.cgroups or {}))
                return
            if not driven:  # a served cell's window is its driver's measured requests (below)
                window.mark(kind)
            if kind == "run_start":  # the measured window opens (after any warm-up items)
                probes.mark("run_start")
            if kind == "done":  # probes read the cell's counters when its last phase ends, while its cgroup exists
                probes.mark("done")
                settled.set()
                if acks_done and launched.proc.stdin is not None:  # the worker may exit now
                    with contextlib.suppress(OSError, ValueError):
                        launched.proc.stdin.write(b"ack\n")
                        launched.proc.stdin.flush()

        reader = _ChannelReader(launched.proc.stdout, on_mark=on_mark, on_end=settled.set)
        reader.start()
        # serving: load from the host
        driver = start_host_driver(cell, platform, launched, reader.records, window.mark)
        status = "ok"
        info: dict[str, Any] = {}
        try:
            target = None
            try:  # the cell's cgroups: the probes' target, and where its CPU time is read
                target = platform.probe_target(launched)
                window.cgroups = target.cgroups
            except Exception as exc:  # no target, no probes: the cell itself still counts
                for entry in probes.outcome.status.values():
                    if entry["status"] == "ok":
                        entry.update(status="failed", reason=f"no probe target: {exc}")
            finally:
                targeted.set()
                if on_targeted is not None:
                    on_targeted(dict(window.cgroups or {}))
            if probes.probes and target is not None:
                probes.start(target)
            try:
                launched.proc.wait(timeout=cell.timeout_s)
            except subprocess.TimeoutExpired:
                status = "timeout"
            ended = time.monotonic()
            # The worker exits right after its done record (no interpreter teardown): the closing
            # snapshots read the cell's cgroup, so they must be taken before it is removed.
            # (a grandchild that keeps the pipe open must not hold the cell: DONE_MARK_WAIT_S at most)
            if status == "ok":
                settled.wait(DONE_MARK_WAIT_S)
            probe_outcome = probes.stop()
            if status == "ok":
                info = platform.collect(launched)
                versions = platform.versions()  # asked before the first cell: cached, no tool runs here
                if versions:
                    info["versions"] = versions
        finally:
            window.close()
            if driver is not None:
                driver.stop()
            probes.abort()
            platform.cleanup_cell(launched)
            reader.join(timeout=10)
            if launched.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    launched.proc.stdin.close()
        exit_code = launched.proc.returncode if status != "timeout" else None
        stderr.seek(0, 2)
        size = stderr.tell()
        stderr.seek(max(0, size - STDERR_TAIL))
        tail = stderr.read().decode(errors="replace")

    outcome = CellOutcome(cell=cell, status=status, exit_code=exit_code, error=None, stderr_tail=tail,
                          started_at=started_at, wall_s=ended - launched.started,
                          startup_s=(reader.first_record_at - launched.started)
                          if reader.first_record_at else None, platform_info=info, probes=probe_outcome,
                          launched_at=launched.started)
    if window.opened_at is not None and window.closed_at is not None:
        outcome.measured = (window.opened_at, window.closed_at)
    if probe_outcome.status:
        outcome.platform_info["probes"] = probe_outcome.status
    outcome.interference = window.result(len(driver.items) if driver is not None else
                                         sum(1 for r in reader.records if isinstance(r, dict)
                                             and r.get("type") == "item"))
    if outcome.interference:
        outcome.platform_info["interference"] = dict(outcome.interference)
        # stored with the cell's other metrics (cpu.per_item, interference.*)
        outcome.probes.metrics.extend(interference_metrics(outcome.interference))
    if cell.cores is not None:
        outcome.platform_info["cores"] = cell.cores
    if platform.runs_own_kernel():  # host-side counts of its tasks are that kernel's, not the workload's
        outcome.platform_info["own_kernel"] = True
    for record in reader.records:
        kind = record.get("type")
        if kind == "hello":
            outcome.hello = record
        elif kind == "setup":
            outcome.setup[record["name"]] = record["dur"]
        elif kind == "item":
            outcome.items.append(record)
        elif kind == "done":
            outcome.done = record
        elif kind == "run_start" and "start_line_wait_s" in record:  # a duet member's wait for its partner
            outcome.platform_info["start_line_wait_s"] = record["start_line_wait_s"]
        elif kind == "error":
            outcome.error = record.get("message")
    if reader.problem is not None:  # a malformed or oversized channel fails this cell, nothing else
        outcome.error = f"the cell's record channel is not usable: {reader.problem}"
    settle(outcome, driver)  # done.info -> platform_info; a host driver's items and metrics
    if status == "timeout":
        outcome.error = f"cell exceeded its timeout of {cell.timeout_s:g} s and was killed"
    elif exit_code != 0 or outcome.done is None or outcome.error:
        outcome.status = "failed"
        if outcome.error is None:
            oom = info.get("oom_killed") or info.get("oom_kills")
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            outcome.error = ("killed by the memory limit (OOM)" if oom else
                             f"exited with status {exit_code} before finishing" + (f": {last}" if last else ""))
    if outcome.status == "ok" and outcome.done and outcome.done.get("unavailable"):
        # e.g. a CUDA kernel on a host without a GPU: recorded with its reason, never with numbers
        outcome.status, outcome.error = "unavailable", str(outcome.done["unavailable"])
    if reader.garbage:
        outcome.platform_info["channel_garbage_lines"] = reader.garbage
    return outcome

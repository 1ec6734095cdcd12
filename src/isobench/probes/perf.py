"""perf: `perf stat` counters for the cell, the container engine and the rest of the host.

Park & Bahn report page faults and other events in three columns: the container's
processes, the container daemon, and host processes. This probe counts the same three:

- ``cell``: the cell's cgroup (``perf stat -a --for-each-cgroup``, which also counts tasks
  the cell starts later), or its pids (``-p``, children inherit) where no cgroup is named;
- ``engine``: the platform's own machinery (dockerd, containerd, the cell's shim; an OCI
  runtime's foreground process), by pid;
- ``total``: the whole host (``-a``); ``host`` = total - cell - engine: everything else.

Software events are always counted; hardware events (cycles, instructions, cache misses,
memory loads/stores) where the PMU exposes them, detected once per process and reported
unsupported otherwise. perf runs as child processes of the runner, in their own process
group (a Ctrl-C meant for the runner does not stop them early), killed by the kernel if the
runner dies (PR_SET_PDEATHSIG) and always reaped by ``stop``/``abort``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.target import cgroup_mounts

SOFTWARE_EVENTS = ("page-faults", "minor-faults", "major-faults", "context-switches", "cpu-migrations",
                   "task-clock")
HARDWARE_EVENTS = ("cycles", "instructions", "cache-references", "cache-misses", "branch-misses",
                   "mem-loads", "mem-stores")
STOP_WAIT_S = 5.0
ENABLE_WAIT_S = 10.0
PR_SET_PDEATHSIG = 1
_LIVE: set[subprocess.Popen[bytes]] = set()
#: each cell's perf output directory: ``isobench-perf-<runner tag>-<random>``
WORKDIR_PREFIX = "isobench-perf-"


def _workdir_parent() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def sweep_stale_workdirs(parent: Path) -> list[str]:
    """Remove the perf output directories of runners that died (kill -9): those whose runner tag is
    stale, and untagged ones (written before directories carried a tag) that hold nothing."""
    from isobench.liveness import tag_is_stale

    removed = []
    for path in sorted(parent.glob(f"{WORKDIR_PREFIX}*")):
        parts = path.name[len(WORKDIR_PREFIX):].split("-")
        tagged = len(parts) >= 3 and parts[0].isdigit()
        if tagged and not tag_is_stale(f"{parts[0]}-{parts[1]}"):
            continue
        if tagged:
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.rmdir()  # an untagged one that still holds files may be another tool's: left alone
        if not path.exists():
            removed.append(f"perf output {path}")
    return removed


class PerfSettings(ProbeSettings):
    events: list[str] = Field(default_factory=lambda: list(SOFTWARE_EVENTS),
                              description="software events, always counted")
    hardware: bool = Field(True, description="add the hardware events this host's PMU supports")
    engine: bool = Field(True, description="count the container engine's processes separately")
    host: bool = Field(True, description="count the whole host too (host = total - cell - engine)")


def _perf_stat(events: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["perf", "stat", "-x,", "-e", events, "true"], capture_output=True, text=True,
                          timeout=30)


@functools.cache
def supported_events() -> tuple[tuple[str, ...], dict[str, str]]:
    """(hardware events that count here, event -> why not) — asked of perf once per process."""
    ok: list[str] = []
    unsupported: dict[str, str] = {}
    for event in HARDWARE_EVENTS:
        out = _perf_stat(event)
        if out.returncode != 0:
            unsupported[event] = "unknown to perf on this CPU"
        elif "<not supported>" in out.stderr:
            unsupported[event] = "not supported (no PMU access, e.g. a virtual machine)"
        else:
            ok.append(event)
    return tuple(ok), unsupported


@functools.cache
def _check() -> ProbeCheck:
    if shutil.which("perf") is None:
        return ProbeCheck(False, "perf is not installed (apt-get install linux-perf)")
    out = _perf_stat("task-clock")
    if out.returncode != 0 or "<not supported>" in out.stderr:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeCheck(False, f"perf stat cannot count here: {last}")
    _, unsupported = supported_events()
    by_reason: dict[str, list[str]] = {}
    for event, why in unsupported.items():
        by_reason.setdefault(why, []).append(event)
    return ProbeCheck(True, partial={f"hardware events {', '.join(events)}": why
                                     for why, events in by_reason.items()})


def parse_perf_csv(text: str) -> dict[str, float | None]:
    """`perf stat -x,` output -> event -> count (None: not counted / not supported).

    Lines are ``value,unit,event,[cgroup,]run_time,pct,...``; task-clock is in msec and is
    returned in seconds."""
    counts: dict[str, float | None] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, unit, event = fields[0], fields[1], fields[2]
        try:
            number: float | None = float(value)
        except ValueError:
            number = None  # <not counted>, <not supported>
        if number is not None and unit == "msec":
            number /= 1000
        counts[event] = number
    return counts


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _kill_all_live() -> None:
    for proc in list(_LIVE):
        _finish(proc, signal.SIGKILL)


atexit.register(_kill_all_live)


def _finish(proc: subprocess.Popen[bytes], sig: int) -> float:
    """Signal a perf process, wait for it, SIGKILL it if it will not go; always reaped.
    Returns the CPU seconds it used (0 when it had already been reaped)."""
    used = 0.0
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        used = _reap(proc, STOP_WAIT_S)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            used = _reap(proc, STOP_WAIT_S)
    _LIVE.discard(proc)
    return used


def _reap(proc: subprocess.Popen[bytes], timeout: float) -> float:
    """Wait for ``proc`` with wait4, which also says how much CPU it used."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            proc.returncode = proc.returncode if proc.returncode is not None else -1
            return 0.0
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            return 0.0
        time.sleep(0.01)


def cgroup_argument(target: ProbeTarget) -> str | None:
    """The cell's group as perf names it (relative to the hierarchy perf uses), if it has one."""
    mounts = cgroup_mounts()
    hierarchy = "perf_event" if "perf_event" in mounts else "unified"
    directory = target.cgroups.get(hierarchy)
    if directory is None or hierarchy not in mounts:
        return None
    try:
        return str(directory.relative_to(mounts[hierarchy]))
    except ValueError:
        return None


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p)]


@PROBES.register("perf")
class PerfProbe(Probe):
    description = ("perf stat per cell: software events (page faults, context switches, migrations, task "
                   "clock) and hardware events where the PMU exists, for the cell, the container engine and "
                   "the rest of the host separately")
    Settings = PerfSettings

    @classmethod
    def check(cls) -> ProbeCheck:
        return _check()

    def start(self, target: ProbeTarget) -> None:
        settings: PerfSettings = self.settings  # type: ignore[assignment]
        hardware, self.unsupported = supported_events() if settings.hardware else ((), {})
        self.events = [*settings.events, *hardware]
        from isobench.liveness import runner_tag

        # named by the runner, so that the next run can remove what a killed one left (sweep_stale)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{runner_tag()}-", dir=_workdir_parent()))
        self.runs: dict[str, subprocess.Popen[bytes]] = {}
        self.control: dict[str, tuple[int, int]] = {}
        self.not_acked: list[str] = []
        self.how: dict[str, str] = {}
        events = ",".join(self.events)
        group = cgroup_argument(target)
        if group is not None:
            self._launch("cell", ["-a", "--for-each-cgroup", group], events)
            self.how["cell"] = f"cgroup {group}"
        else:
            pids = _alive(target.pids())
            if pids:
                self._launch("cell", ["-p", ",".join(map(str, pids))], events)
                self.how["cell"] = f"pids {pids}"
        engine = _alive(target.engine_pids) if settings.engine else []
        if engine:
            self._launch("engine", ["-p", ",".join(map(str, engine))], events)
            self.how["engine"] = f"pids {engine}"
        if settings.host:
            self._launch("total", ["-a"], events)
            self.how["total"] = "all CPUs"
        self._enable_all()

    def _launch(self, scope: str, where: list[str], events: str) -> None:
        """Start perf with its counters disabled (-D -1); ``_enable_all`` turns them on together."""
        output = self.workdir / f"{scope}.csv"
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        argv = ["perf", "stat", "-x,", "-o", str(output), "-e", events, "-D", "-1",
                f"--control=fd:{ctl_r},{ack_w}", *where]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True, pass_fds=(ctl_r, ack_w),
                                    preexec_fn=_die_with_parent)
        finally:
            os.close(ctl_r)
            os.close(ack_w)
        _LIVE.add(proc)
        self.runs[scope] = proc
        self.control[scope] = (ctl_w, ack_r)

    def _enable_all(self) -> None:
        """Enable every perf's counters and wait for each to acknowledge: counting has begun
        when ``start`` returns."""
        for ctl_w, _ in self.control.values():
            with contextlib.suppress(OSError):
                os.write(ctl_w, b"enable\n")
        deadline = time.monotonic() + ENABLE_WAIT_S
        for scope, (_, ack_r) in self.control.items():
            ready, _, _ = select.select([ack_r], [], [], max(0.0, deadline - time.monotonic()))
            acked = bool(ready) and os.read(ack_r, 16).startswith(b"ack")
            if not acked:
                self.not_acked.append(scope)
        self._close_control()

    def _close_control(self) -> None:
        for ctl_w, ack_r in getattr(self, "control", {}).values():
            for fd in (ctl_w, ack_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.control = {}

    def stop(self) -> ProbeResult:
        counts: dict[str, dict[str, float | None]] = {}
        problems: dict[str, str] = {}
        child_cpu = 0.0
        for scope, proc in self.runs.items():
            child_cpu += _finish(proc, signal.SIGINT)  # perf prints its counts on SIGINT
            output = self.workdir / f"{scope}.csv"
            text = output.read_text() if output.exists() else ""
            parsed = parse_perf_csv(text)
            if not parsed:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                problems[scope] = (stderr.strip().splitlines() or [f"perf exited {proc.returncode}"])[-1]
            counts[scope] = parsed
        self._cleanup()
        metrics: list[tuple[str, float, str]] = []
        if "total" in counts and counts["total"]:
            counts["host"] = {e: _remainder(e, counts) for e in counts["total"]}
        for scope in ("cell", "engine", "host", "total"):
            for event, value in sorted(counts.get(scope, {}).items()):
                if value is not None:
                    name = event.replace("-", "_") + ("_s" if event == "task-clock" else "")
                    metrics.append((f"{scope}.{name}", value, "s" if event == "task-clock" else "count"))
        info: dict[str, Any] = {"scopes": self.how, "events": self.events, "child_cpu_s": round(child_cpu, 4)}
        if self.unsupported:
            info["unsupported"] = self.unsupported
        if self.not_acked:
            problems.update({scope: f"perf did not confirm its counters were enabled within {ENABLE_WAIT_S:g} s"
                             for scope in self.not_acked if scope not in problems})
        overlap = _overlap(counts)
        if overlap:  # a task both in the cell's cgroup and forked by the engine after counting began
            info["overlap"] = overlap
        if problems:
            info["problems"] = problems
        scopes = [s for s in ("cell", "engine", "host", "total") if s in counts]
        events = sorted({e for s in scopes for e in counts[s]})
        series = {"counts": {"scope": [s for s in scopes for _ in events], "event": events * len(scopes),
                             "value": [counts[s].get(e) for s in scopes for e in events]}}
        return ProbeResult(metrics=metrics, series=series, info=info)

    def _cleanup(self) -> None:
        self._close_control()
        for proc in getattr(self, "runs", {}).values():
            _finish(proc, signal.SIGKILL)
            if proc.stderr:
                proc.stderr.close()
        workdir = getattr(self, "workdir", None)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def abort(self) -> None:
        self._cleanup()

    @classmethod
    def sweep_stale(cls) -> list[str]:
        parent = _workdir_parent()
        return sweep_stale_workdirs(Path(parent if parent else tempfile.gettempdir()))


def _overlap(counts: dict[str, dict[str, float | None]]) -> dict[str, float]:
    """Events counted in both the cell and the engine column (cell + engine > total): the engine
    column counts its children by inheritance, and one of them may join the cell's cgroup. The
    host column is clamped at zero for those events, so the report says by how much."""
    total = counts.get("total") or {}
    excess = {}
    for event, value in total.items():
        parts = sum(counts.get(scope, {}).get(event) or 0.0 for scope in ("cell", "engine"))
        if value is not None and parts > value:
            excess[event] = parts - value
    return excess


def _remainder(event: str, counts: dict[str, dict[str, float | None]]) -> float | None:
    total = counts["total"].get(event)
    if total is None:
        return None
    parts = [counts.get(scope, {}).get(event) or 0.0 for scope in ("cell", "engine")]
    return max(0.0, total - sum(parts))

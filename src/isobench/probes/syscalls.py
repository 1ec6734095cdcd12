"""syscalls probe: a histogram of the cell's system calls by name.

From a tracefs instance filtered to the cell's tasks (``raw_syscalls:sys_enter``), or, where
tracefs cannot be used (or ``method: strace``), from ``strace -c -f`` attached to the cell's
processes, which slows the cell down far more than tracing does.

Besides the whole cell's ``total``, the ftrace method counts ``window_calls``: the calls of the
cell's measured window, from the worker's ``run_start`` record to its ``done`` record. The runner
marks both when it reads them (``mark``, on ``time.monotonic()``, the trace's ``mono`` clock); the
worker wrote each a little earlier, so each bound is moved back to the cell's last ``write`` call
at or before the mark, the one that carried the record (line-buffered: one write per record), and
the window is the calls strictly between those two writes, in the trace's own order (its printed
timestamps are microseconds: several calls share one). Without such a write (a trace without it)
the mark's own time bounds the window. Where the runner read both records only after the done
record was written (a window shorter than its delay in reading them), the writes cannot be told
apart, and there is no window count. A trace that lost events (the ring buffer overran: a cell
making millions of calls a second outruns the reader) gives no window count: the writes that
bound it may be among the lost.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.ftrace_parse import CODE, parse_file
from isobench.probes.tracefs import CellTrace, missing_events, tracefs_problem

UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")


@cache
def syscall_names() -> dict[int, str]:
    """Number -> name for this architecture: ``ausyscall --dump`` where installed, else the kernel header."""
    names: dict[int, str] = {}
    if shutil.which("ausyscall"):
        out = subprocess.run(["ausyscall", "--dump"], capture_output=True, text=True).stdout
        names = {int(n): name for n, name in re.findall(r"^(\d+)\s+(\w+)$", out, re.M)}
    if not names and UNISTD.exists():
        names = {int(n): name for name, n in re.findall(r"#define __NR_(\w+)\s+(\d+)", UNISTD.read_text())}
    return names


def _write_nr() -> int | None:
    """This architecture's number of write(2), the call that carries each channel record."""
    return next((n for n, name in syscall_names().items() if name == "write"), None)


class SyscallSettings(ProbeSettings):
    method: Literal["auto", "ftrace", "strace"] = Field("auto", description="auto: ftrace where possible, else strace")
    buffer_kb: int = Field(8192, ge=64, le=1 << 20, description="ring buffer per CPU, KiB (ftrace)")
    top: int = Field(10, ge=1, le=500, description="how many syscalls to name in the info")


@PROBES.register("syscalls")
class SyscallProbe(Probe):
    description = "histogram of the cell's syscalls by name (ftrace; strace -c -f as a fallback)"
    Settings = SyscallSettings

    def __init__(self, settings: ProbeSettings) -> None:
        super().__init__(settings)
        self.settings: SyscallSettings = settings  # type: ignore[assignment]
        self.trace: CellTrace | None = None
        self.strace: subprocess.Popen[bytes] | None = None
        self.strace_out: Path | None = None
        #: time.monotonic() when the runner read the worker's run_start and done records
        self.marks: dict[str, float] = {}
        #: the measured window's counts (ftrace), or why there are none
        self.window: dict[int | str, int] | None = None
        self.window_info: dict[str, Any] | str = "no run_start and done marks (the cell did not finish)"

    @classmethod
    def check(cls) -> ProbeCheck:
        problem = tracefs_problem() or (", ".join(missing_events(["raw_syscalls/sys_enter"])) or None)
        if problem and shutil.which("strace") is None:
            return ProbeCheck(False, f"{problem}; and strace is not installed")
        return ProbeCheck(True, partial={"ftrace": f"{problem}; strace is used instead"} if problem else {})

    def _method(self) -> str:
        if self.settings.method != "auto":
            return self.settings.method
        return "strace" if tracefs_problem() or missing_events(["raw_syscalls/sys_enter"]) else "ftrace"

    def start(self, target: ProbeTarget) -> None:
        if self._method() == "ftrace":
            self.trace = CellTrace("sc", [], ["raw_syscalls/sys_enter", "task/task_newtask"],
                                   self.settings.buffer_kb, 0.2)
            self.trace.start(target)
            return
        pids = target.pids()
        if not pids:
            raise RuntimeError("the cell has no live process to attach strace to")
        handle, name = tempfile.mkstemp(prefix="isobench-strace-", suffix=".txt", dir="/dev/shm")
        os.close(handle)
        self.strace_out = Path(name)
        argv = ["setpriv", "--pdeathsig", "KILL", "strace", "-c", "-f", "-q", "-o", name]
        for pid in pids:
            argv += ["-p", str(pid)]
        self.strace = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)

    def mark(self, event: str) -> None:
        if event in ("run_start", "done"):
            self.marks.setdefault(event, time.monotonic())  # the first: one window per cell

    def stop(self) -> ProbeResult:
        try:
            counts = self._stop_ftrace() if self.trace else self._stop_strace()
        finally:
            self.abort()
        names = syscall_names()
        result = ProbeResult()
        total = sum(counts.values())
        result.metrics.append(("total", total, "calls"))
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        result.series["histogram"] = {"syscall": [names.get(n, str(n)) if isinstance(n, int) else n
                                                  for n, _ in ranked],
                                      "calls": np.array([c for _, c in ranked], dtype=np.int64)}
        result.info["method"] = "ftrace" if self.trace else "strace"
        result.info["top"] = [[names.get(n, str(n)) if isinstance(n, int) else n, c, c / total if total else 0.0]
                              for n, c in ranked[:self.settings.top]]
        if self.trace:
            result.info["lost"] = self.trace.lost()
        else:
            self.window_info = "strace counts the whole cell"
        if self.window is not None:
            window_total = sum(self.window.values())
            result.metrics.append(("window_calls", window_total, "calls"))
            assert isinstance(self.window_info, dict)
            self.window_info["top"] = [[names.get(n, str(n)) if isinstance(n, int) else n, c]
                                       for n, c in sorted(self.window.items(), key=lambda kv: -kv[1])
                                       [:self.settings.top]]
        result.info["window"] = self.window_info
        return result

    def _stop_ftrace(self) -> dict[int | str, int]:
        assert self.trace and self.trace.cell
        self.trace.stop()
        events = parse_file(str(self.trace.cell.trace_file))
        entered = events.event == CODE["sys_enter"]
        times, ids = events.time_s[entered], events.syscall_nr[entered]
        if "run_start" in self.marks and "done" in self.marks:
            self._count_window(times, ids)
        numbers, counts = np.unique(ids, return_counts=True)
        return dict(zip(numbers.tolist(), counts.tolist(), strict=True))

    def _count_window(self, times: np.ndarray, ids: np.ndarray) -> None:
        """The calls of the measured window (see the module's docstring), in ``self.window``."""
        assert self.trace and self.trace.cell
        opened, closed = self.marks["run_start"], self.marks["done"]
        stats = self.trace.cell.stats
        lost = stats.get("overrun", 0) + stats.get("dropped", 0)
        if lost:  # lost events: the window's count, and the records' writes that bound it, are not sure
            self.window_info = (f"{lost} events were lost (the ring buffer overran): no window count; "
                                "fix: a larger buffer_kb")
            return
        if (stats.get("truncated") or stats.get("unread")) and (not len(times) or times[-1] < closed):
            self.window_info = "the trace ends before the window closed (cut, or not drained)"
            return
        write_nr = _write_nr()
        writes = np.flatnonzero(ids == write_nr) if write_nr is not None else np.array([], dtype=np.int64)
        # index of the write that carried each record (the last one at or before its mark), or None
        carried = []
        for mark in (opened, closed):
            before = writes[times[writes] <= mark]
            carried.append(int(before[-1]) if len(before) else None)
        if carried[0] is not None and carried[0] == carried[1]:  # both marks came after the same write
            self.window_info = ("the run_start and done records were read together (a window shorter than "
                                "the runner's delay in reading them): their writes cannot be told apart")
            return
        first = carried[0] + 1 if carried[0] is not None else int(np.searchsorted(times, opened, side="right"))
        end = carried[1] if carried[1] is not None else int(np.searchsorted(times, closed, side="right"))
        numbers, counts = np.unique(ids[first:max(first, end)], return_counts=True)
        self.window = dict(zip(numbers.tolist(), counts.tolist(), strict=True))
        self.window_info = {
            "from": float(times[carried[0]]) if carried[0] is not None else opened,
            "to": float(times[carried[1]]) if carried[1] is not None else closed,
            "marks": [opened, closed],
            "bounded_by": ["record write" if c is not None else "mark" for c in carried]}

    def _stop_strace(self) -> dict[int | str, int]:
        assert self.strace and self.strace_out
        if self.strace.poll() is None:
            self.strace.send_signal(signal.SIGINT)  # detach and write the -c summary
            try:
                self.strace.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.strace.kill()
        return parse_strace_summary(self.strace_out.read_text())

    def abort(self) -> None:
        if self.trace:
            self.trace.abort()
        if self.strace and self.strace.poll() is None:
            self.strace.kill()
            self.strace.wait()
        if self.strace_out:
            self.strace_out.unlink(missing_ok=True)


def parse_strace_summary(text: str) -> dict[int | str, int]:
    """``strace -c`` table -> name -> calls."""
    counts: dict[int | str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3])
    return counts

"""syscalls probe: a histogram of the cell's system calls by name.

From a tracefs instance filtered to the cell's tasks (``raw_syscalls:sys_enter``), or, where
tracefs cannot be used (or ``method: strace``), from ``strace -c -f`` attached to the cell's
processes, which slows the cell down far more than tracing does.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Literal

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
        return result

    def _stop_ftrace(self) -> dict[int | str, int]:
        assert self.trace and self.trace.cell
        self.trace.stop()
        events = parse_file(str(self.trace.cell.trace_file))
        ids = events.syscall_nr[events.event == CODE["sys_enter"]]
        numbers, counts = np.unique(ids, return_counts=True)
        return dict(zip(numbers.tolist(), counts.tolist(), strict=True))

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

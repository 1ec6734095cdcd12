"""How busy the host was just before this runner's own set-up (data sets, images, pinning).

The report judges it (analysis/hostload.py), so a warning about other load speaks only of
load that was there before the harness did anything itself.

Why a CPU-busy sample and not the load average: the 1-minute load average decays slowly, so
a ``pip install`` or ``apt-get`` that ended seconds before reads as load for minutes; and it
counts tasks in uninterruptible sleep (D state), such as a kernel thread that idles there
(``kdamond`` on some VMs holds the load average at 1.1–1.5 on an idle host) without using
any CPU. ``/proc/stat`` over a short window says what the cores actually did. The D-state
tasks are counted too, so the in-study load checks can leave them out.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: how long the host is watched before set-up: long enough to see a steady neighbour,
#: short enough not to delay the study
WINDOW_S = 1.0
#: an environment variable that sets another window, in seconds (the test suite's ~300 runs take
#: 0.25 s: none of them judges the host's load, and the full second came on top of each run)
WINDOW_ENV = "ISOBENCH_LOAD_WINDOW_S"
#: D-state tasks are counted this many times over the window (kdamond is in D only mostly)
TICKS = 10


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies since boot, summed over every core (``/proc/stat``'s ``cpu`` line)."""

    busy: int  # user + nice + system + irq + softirq (guest time is inside user)
    steal: int
    total: int


def read_cpu_times(stat: str | None = None) -> CpuTimes:
    text = stat if stat is not None else Path("/proc/stat").read_text()
    fields = [int(v) for v in text.splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    # guest and guest_nice (fields 9 and 10) are already counted in user and nice
    return CpuTimes(user + nice + system + irq + softirq, steal, sum(fields[:8]))


def _processes() -> list[tuple[int, int, str, int]]:
    """(pid, ppid, state, utime + stime jiffies) of every process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            after = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while we looked
        found.append((int(entry.name), int(after[1]), after[0], int(after[11]) + int(after[12])))
    return found


def own_tree_jiffies(processes: list[tuple[int, int, str, int]], root: int) -> int:
    """CPU jiffies of ``root`` and its descendants: the runner's own work is no neighbour."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in processes:
        children.setdefault(ppid, []).append(pid)
    used = {pid: cpu for pid, _, _, cpu in processes}
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def configured_window_s() -> float:
    """WINDOW_S, or the positive number of seconds in ``$ISOBENCH_LOAD_WINDOW_S``."""
    try:
        value = float(os.environ.get(WINDOW_ENV, ""))
    except ValueError:
        return WINDOW_S
    return value if 0 < value <= 60 else WINDOW_S


def sample_host(window_s: float | None = None, ticks: int = TICKS) -> dict[str, Any]:
    """Watch the host for ``window_s`` (default: :func:`configured_window_s`): what other
    processes kept busy (in cores), the steal share, the mean number of D-state tasks, the load
    average, the core count."""
    if window_s is None:
        window_s = configured_window_s()
    me = os.getpid()
    start_cpu, start_own = read_cpu_times(), own_tree_jiffies(_processes(), me)
    started = time.monotonic()
    blocked: list[int] = []
    for _ in range(ticks):
        time.sleep(window_s / ticks)
        blocked.append(sum(state == "D" for _, _, state, _ in _processes()))
    end_cpu, end_own = read_cpu_times(), own_tree_jiffies(_processes(), me)
    elapsed = time.monotonic() - started
    jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
    other = max(0, (end_cpu.busy - start_cpu.busy) - (end_own - start_own)) * jiffy
    total = max(1, end_cpu.total - start_cpu.total)
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"window_s": round(elapsed, 3), "cores": os.cpu_count() or 1,
            "other_busy_cores": round(other / elapsed, 3) if elapsed > 0 else 0.0,
            "steal_share": round((end_cpu.steal - start_cpu.steal) / total, 4),
            "blocked_tasks": round(sum(blocked) / len(blocked), 2) if blocked else 0.0,
            "loadavg": load, "taken_at": time.time()}


_before_setup: dict[str, Any] | None = None


class BeforeSetup:
    """The sample before set-up, taken in a thread while the runner reads the study and plans.

    That work is the runner's own (its CPU time is subtracted from the host's), so it can share
    the window instead of following it: the second a run spent watching an idle host came on top
    of every run, ~300 of them in the test suite alone. :meth:`finish` must come before anything
    that makes other processes work for the runner (an engine's daemon), which would read as load.
    """

    def __init__(self) -> None:
        self._sample: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._take, name="isobench-load-before-setup", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        try:
            self._sample = sample_host()
        except (OSError, ValueError):  # no /proc (another OS): the report falls back to the load average
            self._sample = None

    def finish(self, resuming: bool = False) -> None:
        """Wait for the sample, and file it for create_store (runner/setup.py), which puts it in the
        new store's host fingerprint as ``load_before_setup``. A resumed study keeps the sample of its
        first start (its fingerprint is that start's): this one is dropped unread."""
        global _before_setup
        _before_setup = None
        if resuming:
            return
        self._thread.join()
        _before_setup = self._sample


def sample_before_setup(resuming: bool = False) -> None:
    """The same sample, taken here and now (a runner with nothing to overlap it with)."""
    BeforeSetup().finish(resuming)


def take_before_setup() -> dict[str, Any]:
    """The pending sample as fingerprint facts (empty without one), consumed: a second study
    in the same process takes its own."""
    global _before_setup
    sample, _before_setup = _before_setup, None
    return {"load_before_setup": sample} if sample else {}

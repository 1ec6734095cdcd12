"""A duet pair's timing: its members measure at the same time, on cores they trade.

A duet compares what its two members measure *at the same time*, but its members do not
get ready at the same time: a gVisor cell imports torch for 7-9 s where bare metal takes
2.5 s, so launched together, bare metal's measured window had ended before gVisor's began
(measured on the default study). Three things line them up and keep them fair:

* :class:`Leads`: each member's lead (launch to its first measured item) is learnt from the
  pairs already run, and the member that gets ready sooner is launched that much later;
* the :class:`StartLine`: a member ready to measure says ``ready`` and waits for a go on its
  stdin, which the runner writes to all members once all are ready (or have ended). Bare
  metal, Docker's engines and the OCI runtimes carry stdin to the cell (``start_line``);
* :class:`CoreTrade`: the members swap cores every ``duet_swap_s``, from the moment both
  are launched (their cgroups known) until one ends: through their start-up, not only while
  they measure. Beside a neighbour (a busy loop at half a core), trading only from the go left
  the start-ups unequal: the member whose start-up the neighbour slowed less got ready first
  and then measured slower, by about 10% for each second it was ahead (r = 0.85 over 23
  resnet-infer A/A pairs; the cause inside the process is not known). Trading from launch made
  both start-ups alike (import times 0.35 s apart on average, then 0.02 s) and halved the spread
  of the pairs' ratios (per pair 6.0-7.2%, then 3.0-4.4%, three 20-pair blocks each, alternated).

The pair itself is planned in plan/duet.py and run, like a tenant group, by
runner/tenancy.py's ``run_group``; :func:`overlap` is the share of the longer measured window
in which both measured, recorded with each outcome.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path
from typing import Any

from isobench.plan.cells import Cell
from isobench.platforms.base import Launched, Platform
from isobench.runner.execute import CellOutcome

#: a member is never held back longer than this (a lead that long is a stall, not start-up)
MAX_DELAY_S = 30.0
#: differences in lead below this are not held back for. A lead is a median of the latest few, so
#: a steady difference shows through torch's import jitter (±0.3 s here); left alone, it makes one
#: member the first at the start line in nearly every pair, and the member that gets there first
#: measures slower (docker beside bare metal, trading from launch: bare metal 0.15 s ahead in 21
#: of 24 pairs at a threshold of 0.25 s, and Docker read 1.1% and 2.1% faster, quiet and loaded)
MIN_DELAY_S = 0.05
#: a lead is the median of the latest few: one slow import must not shift the next pair
LEAD_MEMORY = 5


def _lead(memory: list[float]) -> float:
    """The latest lead until there are three (a process's first start is a cold one: a mean of it
    and the next overshot), then the median of the latest LEAD_MEMORY."""
    return memory[-1] if len(memory) < 3 else statistics.median(memory)


class Leads:
    """How long each (workload, platform) takes from launch to its first measured item, as
    the latest duet pairs showed; from it, how much later each member of the next pair starts."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str], list[float]] = {}
        self._platform: dict[str, list[float]] = {}

    def learn(self, outcomes: list[CellOutcome]) -> None:
        for outcome in outcomes:
            if outcome.measured is None or outcome.launched_at is None:
                continue
            # time spent at the start line is the partner's lateness, not this member's start-up:
            # counted in, it delayed the partner next time, which then waited longer (runaway)
            waited = outcome.platform_info.get("start_line_wait_s")
            lead = outcome.measured[0] - outcome.launched_at - (waited if isinstance(waited, int | float) else 0.0)
            cell = outcome.cell
            for memory in (self._exact.setdefault((cell.workload_key, cell.platform_key), []),
                           self._platform.setdefault(cell.platform_key, [])):
                memory.append(lead)
                del memory[:-LEAD_MEMORY]

    def delays(self, cells: list[Cell]) -> list[float]:
        """Seconds to hold each member back after the barrier: the members' leads, per
        (workload, platform) when all are known, else per platform (the first pairs of a
        workload learn from another workload's), else none."""
        leads: list[float] | None = None
        exact = [self._exact.get((c.workload_key, c.platform_key)) for c in cells]
        by_platform = [self._platform.get(c.platform_key) for c in cells]
        for known in (exact, by_platform):
            if all(known):
                leads = [_lead(memory) for memory in known]  # type: ignore[arg-type]
                break
        if leads is None:
            return [0.0] * len(cells)
        latest = max(leads)
        return [0.0 if latest - lead < MIN_DELAY_S else min(MAX_DELAY_S, latest - lead) for lead in leads]


class CoreTrade(threading.Thread):
    """A duet's members trade cores every ``period_s`` from their go until one ends.

    The cores of this VM slow down one at a time, by up to 1.8x for a second or so, invisibly
    to steal or CPU-time accounting; on fixed sides such a spell slows one member of a pair
    and its ratio with it. Trading cores gives both members the same share of each core's
    spells. lenet-train A/A pairs, same host and hour: ratio SD 5.0% on fixed sides, 1.0%
    trading every 0.1 s (12 pairs each, alternated); in 14-round A/A studies 2.2% at 0.1 s and
    0.8% at 0.02 s, the default. A trade rewrites each member's ``cpuset.cpus`` (cgroup v1
    moves every task of the group at once; 0.17 ms a write here), so it works for any platform
    whose cell has a cpuset cgroup on the host, gVisor's sandbox included."""

    def __init__(self, period_s: float, cores: list[str]) -> None:
        super().__init__(daemon=True, name="core-trade")
        self.period_s = period_s
        self.cores = cores
        self.dirs: list[Path | None] = [None] * len(cores)
        self.cgroups: list[dict[str, Path]] = [{} for _ in cores]
        self.trades = 0
        self.problem: str | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._enlisted: set[int] = set()
        self._began = False
        #: trades made before the go (the start-ups), None until the go
        self.before_go: int | None = None

    def enlist(self, index: int, cgroups: dict[str, Path]) -> None:
        with self._lock:
            if index in self._enlisted:
                return
            self._enlisted.add(index)
            self.cgroups[index] = cgroups
            unified = cgroups.get("unified")
            # cgroup v1's cpuset controller, else a cgroup2 group with the cpuset controller enabled
            self.dirs[index] = cgroups.get("cpuset") or (unified if unified and (unified / "cpuset.cpus").exists()
                                                         else None)

    def enlist_at_launch(self, index: int, cgroups: dict[str, Path]) -> None:
        """A member's cgroups, known soon after its launch: once every member's are, the trading
        begins, before the go, so that the members also share the cores alike while they start up."""
        self.enlist(index, cgroups)
        with self._lock:
            every = len(self._enlisted) == len(self.cores)
        if every and all(d is not None for d in self.dirs):
            self.begin()

    def peers_of(self, index: int) -> list[dict[str, Path]]:
        return [groups for other, groups in enumerate(self.cgroups) if other != index and groups]

    def begin(self) -> None:
        """Trade from now on (at the latest at the go) if every member has a cpuset cgroup to
        trade through; once."""
        with self._lock:
            if self._began or self._stopping.is_set():
                return
            self._began = True
        if any(d is None for d in self.dirs):
            self.problem = "a member has no cpuset cgroup on the host: the pair kept its sides"
            return
        self.start()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        turn = 0
        while not self._stopping.wait(self.period_s):
            turn += 1
            # The member moved first lands, for a moment, on a core the other still runs on; the
            # order alternates so that neither is always the one displaced.
            order = list(enumerate(self.dirs))
            if turn % 2:
                order.reverse()
            try:
                for index, directory in order:
                    core = self.cores[(index + turn) % len(self.cores)]
                    (directory / "cpuset.cpus").write_text(core)  # type: ignore[operator]
            except OSError as exc:
                # a member that ended takes its cgroup with it: that ends the trading, it is no fault
                if not self._stopping.is_set() and all(d is not None and d.is_dir() for d in self.dirs):
                    self.problem = f"a trade failed, the pair kept its cores from then on: {exc}"
                return
            self.trades += 1

    def mark_go(self) -> None:
        self.before_go = self.trades

    def describe(self) -> dict[str, Any]:
        return {"period_s": self.period_s, "trades": self.trades, "before_go": self.before_go,
                "problem": self.problem}


def trades_cores(cells: list[Cell], platforms: list[Platform]) -> bool:
    """Whether a duet pair trades cores: it asks to, and each member has host cores of its own."""
    duet = cells[0].duet
    return (duet is not None and duet.swap_s > 0 and len(cells) == 2
            and all(c.cores for c in cells) and len({c.cores for c in cells}) == 2
            and all(p.host_cores_inside for p in platforms))


class StartLine:
    """A duet's members, each ready to measure, wait here until all are (or have ended): then
    every waiting member gets its go on stdin at once. Launch delays (:class:`Leads`) bring
    them close; the start line takes out the start-up jitter that remains (gVisor's torch
    import varies by ±1 s here, which left 2-s windows overlapping about half)."""

    def __init__(self, size: int, trade: CoreTrade | None = None) -> None:
        self._size = size
        self._trade = trade
        self._lock = threading.Lock()
        self._waiting: dict[int, Launched] = {}
        self._ended: set[int] = set()
        self.went = False

    def arrive(self, index: int, launched: Launched, cgroups: dict[str, Path] | None = None) -> None:
        with self._lock:
            self._waiting[index] = launched
            if self._trade is not None:
                self._trade.enlist(index, cgroups or {})
            self._go_if_all_there()

    def leave(self, index: int) -> None:
        """A member ended (finished, failed or never got ready): the others need not wait for it,
        and the pair trades cores no more."""
        with self._lock:
            self._ended.add(index)
            if self._trade is not None:
                self._trade.stop()
            self._go_if_all_there()

    def _go_if_all_there(self) -> None:
        if self.went or len(self._waiting.keys() | self._ended) < self._size:
            return
        self.went = True
        if self._trade is not None and not self._ended:
            self._trade.mark_go()
            self._trade.begin()  # at the latest now: a member without a cgroup at launch
        for launched in self._waiting.values():
            stdin = launched.proc.stdin
            if stdin is None:
                continue
            try:
                stdin.write(b"go\n")
                stdin.flush()
            except OSError:  # the member died while waiting: its outcome says so
                pass


def overlap(outcomes: list[CellOutcome]) -> float | None:
    """The share of the longest measured window in which every member was measuring."""
    windows = [o.measured for o in outcomes]
    if not windows or any(w is None for w in windows):
        return None
    start = max(w[0] for w in windows)  # type: ignore[index]
    end = min(w[1] for w in windows)  # type: ignore[index]
    longest = max(w[1] - w[0] for w in windows)  # type: ignore[index]
    return max(0.0, end - start) / longest if longest > 0 else None

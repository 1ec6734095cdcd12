"""Run a tenant group: its cells start together behind a barrier, each with its own probes.

Every member runs through :func:`isobench.runner.execute.run_cell` in a thread of its own;
the threads wait at a :class:`threading.Barrier` and launch at once. Each outcome gets
``platform_info["tenancy"]``: its index, the group, and the group's start skew (spread
of the workers' first instants, as the workers' own clocks report them in ``hello``)
and release skew (spread of the launch calls after the barrier, runner clock).

A duet compares what its two members measure *at the same time*, but its members do not
get ready at the same time: a gVisor cell imports torch for 7-9 s where bare metal takes
2.5 s, so launched together, bare metal's measured window had ended before gVisor's began
(measured on the default study). Two things line them up:

* the :class:`StartLine`: a member ready to measure says ``ready`` and waits for a go on its
  stdin, which the runner writes to all members once all are ready (or have ended). Bare
  metal, Docker's engines and the OCI runtimes carry stdin to the cell (``start_line``);
* :class:`Leads`, for platforms that cannot: each member's lead (launch to its first
  measured item) is learnt from the pairs already run, and the member that gets ready
  sooner is launched that much later.

Each duet outcome records its lead, delay and the ``overlap`` of the two measured windows
(the share of the longer window in which both measured).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from isobench.hostinfo import parse_cpu_list
from isobench.plan.cells import Cell
from isobench.platforms.base import Launched, Platform
from isobench.runner.execute import Beside, CellOutcome, run_cell


def _unit_of(cell: Cell) -> str | None:
    """The tenant group or duet pair the cell starts with, if any."""
    return cell.tenant.group if cell.tenant else cell.duet.pair if cell.duet else None


def tenant_batches(cells: Iterable[Cell]) -> Iterator[list[Cell]]:
    """One list per unit of work: a lone cell, a whole tenant group or a duet pair (each
    consecutive in the plan)."""
    iterator = iter(cells)
    for cell in iterator:
        group = _unit_of(cell)
        if not group:
            yield [cell]
            continue
        members = [cell]
        size = cell.tenant.count if cell.tenant else 2
        for _ in range(size - 1):
            member = next(iterator)
            if _unit_of(member) != group:
                raise RuntimeError(f"tenant group {group} is not contiguous in the plan at {member.cell_id}")
            members.append(member)
        yield members


class _Tracked:
    """The platform, remembering what it launched so an interrupt can stop every tenant."""

    def __init__(self, platform: Platform) -> None:
        self._platform = platform
        self.launched: list[Launched] = []
        self._lock = threading.Lock()

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        launched = self._platform.launch(cell, argv, stderr)
        with self._lock:
            self.launched.append(launched)
        return launched

    def __getattr__(self, name: str) -> Any:
        return getattr(self._platform, name)


#: a member is never held back longer than this (a lead that long is a stall, not start-up)
MAX_DELAY_S = 30.0
#: differences in lead below this are start-up jitter (torch's import varies by ±0.3 s here):
#: holding a member back for them would only move the jitter
MIN_DELAY_S = 0.25
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

    def enlist(self, index: int, cgroups: dict[str, Path]) -> None:
        self.cgroups[index] = cgroups
        unified = cgroups.get("unified")
        # cgroup v1's cpuset controller, else a cgroup2 group with the cpuset controller enabled
        self.dirs[index] = cgroups.get("cpuset") or (unified if unified and (unified / "cpuset.cpus").exists()
                                                     else None)

    def peers_of(self, index: int) -> list[dict[str, Path]]:
        return [groups for other, groups in enumerate(self.cgroups) if other != index and groups]

    def begin(self) -> None:
        """At the go: trade if every member has a cpuset cgroup to trade through."""
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

    def describe(self) -> dict[str, Any]:
        return {"period_s": self.period_s, "trades": self.trades, "problem": self.problem}


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
            self._trade.begin()
        for launched in self._waiting.values():
            stdin = launched.proc.stdin
            if stdin is None:
                continue
            try:
                stdin.write(b"go\n")
                stdin.flush()
            except OSError:  # the member died while waiting: its outcome says so
                pass


def run_group(cells: list[Cell], platform: Platform | list[Platform],
              leads: Leads | None = None) -> list[CellOutcome]:
    """Run the members of a tenant group (one platform) or a duet pair (a platform per member)
    at once; return their outcomes in member order. A duet's members start ``leads``' delays
    apart, so that their measured windows coincide; a tenant group's start together."""
    platforms = platform if isinstance(platform, list) else [platform] * len(cells)
    if len(cells) == 1 and not cells[0].tenant:
        return [run_cell(cells[0], platforms[0])]
    delays = leads.delays(cells) if leads is not None and cells[0].duet else [0.0] * len(cells)
    tracked = [_Tracked(p) for p in platforms]
    barrier = threading.Barrier(len(cells))
    outcomes: list[CellOutcome | None] = [None] * len(cells)
    released = [0.0] * len(cells)
    errors: list[BaseException] = []

    trade = None
    if trades_cores(cells, platforms):
        trade = CoreTrade(cells[0].duet.swap_s, [str(c.cores) for c in cells])  # type: ignore[union-attr]
    line = StartLine(len(cells), trade) if cells[0].duet else None
    every_core = sorted({core for c in cells for core in parse_cpu_list(c.cores or "")})

    def tenant(index: int) -> None:
        try:
            barrier.wait()
            released[index] = time.monotonic()  # release skew: the barrier's, not the delay
            if delays[index] > 0:
                time.sleep(delays[index])
            ready = (lambda launched, cgroups: line.arrive(index, launched, cgroups)) if line is not None else None
            beside = Beside(every_core, lambda: trade.peers_of(index)) if trade is not None else None
            outcomes[index] = run_cell(cells[index], tracked[index], ready, beside)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - re-raised in the runner's thread
            errors.append(exc)
        finally:
            if line is not None:
                line.leave(index)

    threads = [threading.Thread(target=tenant, args=(i,), name=f"tenant-{i}", daemon=True)
               for i in range(len(cells))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)
    except BaseException:
        # Ctrl-C or SIGTERM reaches the runner's thread only: stop every member, then wait.
        barrier.abort()
        for member in tracked:
            for launched in list(member.launched):
                member._platform.cleanup_cell(launched)
        for thread in threads:
            thread.join(timeout=60)
        raise
    if trade is not None:
        trade.stop()
    if errors:
        raise errors[0]
    done = [o for o in outcomes if o is not None]
    annotate(done, released, delays, trade)
    if leads is not None:
        leads.learn(done)
    return done


def overlap(outcomes: list[CellOutcome]) -> float | None:
    """The share of the longest measured window in which every member was measuring."""
    windows = [o.measured for o in outcomes]
    if not windows or any(w is None for w in windows):
        return None
    start = max(w[0] for w in windows)  # type: ignore[index]
    end = min(w[1] for w in windows)  # type: ignore[index]
    longest = max(w[1] - w[0] for w in windows)  # type: ignore[index]
    return max(0.0, end - start) / longest if longest > 0 else None


def annotate(outcomes: list[CellOutcome], released: list[float], delays: list[float] | None = None,
             trade: CoreTrade | None = None) -> None:
    """Record each tenant's index and the group's start and release skew in its platform_info;
    a duet member also its delay and the members' window overlap."""
    starts = [o.hello.get("wall_time") for o in outcomes if o.hello and o.hello.get("wall_time")]
    start_skew = (max(starts) - min(starts)) if len(starts) == len(outcomes) else None
    release_skew = max(released) - min(released) if released else None
    first = min(starts) if starts else None
    shared = overlap(outcomes)
    for index, outcome in enumerate(outcomes):
        duet, tenant = outcome.cell.duet, outcome.cell.tenant
        started = outcome.hello.get("wall_time") if outcome.hello else None
        if duet:
            outcome.platform_info["duet"] = {
                "pair": duet.pair, "side": duet.side, "partner": duet.partner,
                "group": duet.group, "cores": outcome.cell.cores, "start_skew_s": start_skew,
                "release_skew_s": release_skew, "delay_s": delays[index] if delays else 0.0,
                "lead_s": (outcome.measured[0] - outcome.launched_at)
                if outcome.measured and outcome.launched_at is not None else None,
                "overlap": shared, "trade": trade.describe() if trade is not None else None}
            continue
        outcome.platform_info["tenancy"] = {
            "tenant": tenant.index if tenant else None, "tenants": tenant.count if tenant else None,
            "group": tenant.group if tenant else None,
            "start_skew_s": start_skew, "release_skew_s": release_skew,
            "start_offset_s": (started - first) if started is not None and first is not None else None}

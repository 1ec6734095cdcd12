"""Run a tenant group: its cells start together behind a barrier, each with its own probes.

Every member runs through :func:`isobench.runner.execute.run_cell` in a thread of its own;
the threads wait at a :class:`threading.Barrier` and launch at once. Each outcome gets
``platform_info["tenancy"]``: its index, the group, and the group's start skew (spread
of the workers' first instants, as the workers' own clocks report them in ``hello``)
and release skew (spread of the launch calls after the barrier, runner clock).

A duet pair runs the same way, two members at once; what lines its members up in time and
trades their cores (leads, the start line, core trades) lives in runner/duet.py. Each duet
outcome records its lead, delay and the ``overlap`` of the two measured windows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from isobench.hostinfo import parse_cpu_list
from isobench.plan.cells import Cell
from isobench.platforms.base import Launched, Platform
from isobench.runner.density import HostMemory, is_density
from isobench.runner.density import measure as measure_density
from isobench.runner.duet import CoreTrade, Leads, StartLine, overlap, trades_cores
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


def run_group(cells: list[Cell], platform: Platform | list[Platform],
              leads: Leads | None = None) -> list[CellOutcome]:
    """Run the members of a tenant group (one platform) or a duet pair (a platform per member)
    at once; return their outcomes in member order. A duet's members start ``leads``' delays
    apart, so that their measured windows coincide; a tenant group's start together. A density
    unit (runner/density.py) has the host's memory read around it."""
    if not is_density(cells):
        return _run_together(cells, platform, leads)
    memory = HostMemory()
    memory.start()
    try:
        outcomes = _run_together(cells, platform, leads)
    finally:
        memory.stop()
    measure_density(outcomes, memory)
    return outcomes


def _waits_at_start_line(cell: Cell) -> bool:
    """A duet member, or a member of a tenant group that waits until all are up (density)."""
    return cell.duet is not None or (cell.tenant is not None and cell.tenant.start_line)


def _run_together(cells: list[Cell], platform: Platform | list[Platform],
                  leads: Leads | None = None) -> list[CellOutcome]:
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
    line = StartLine(len(cells), trade) if _waits_at_start_line(cells[0]) else None
    every_core = sorted({core for c in cells for core in parse_cpu_list(c.cores or "")})

    def tenant(index: int) -> None:
        try:
            barrier.wait()
            released[index] = time.monotonic()  # release skew: the barrier's, not the delay
            if delays[index] > 0:
                time.sleep(delays[index])
            ready = (lambda launched, cgroups: line.arrive(index, launched, cgroups)) if line is not None else None
            beside = Beside(every_core, lambda: trade.peers_of(index)) if trade is not None else None
            # trading begins once both members' cgroups are known, not at the go: a member whose
            # start-up a neighbour slowed then measured faster than its partner (runner/duet.py)
            at_launch = (lambda cgroups: trade.enlist_at_launch(index, cgroups)) if trade is not None else None
            outcomes[index] = run_cell(cells[index], tracked[index], ready, beside,  # type: ignore[arg-type]
                                       at_launch)
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

"""Which unit of cells each cluster node runs next: pure bookkeeping over :class:`Node` queues,
testable without Ray (the policy is described in :mod:`isobench.runner.cluster`).

A unit is what must run at once on one host (``tenant_batches``): a lone cell, a tenant group
or a duet pair. It is handed out, re-run after a loss and recorded whole, never split."""

from __future__ import annotations

import dataclasses
from collections import deque

from isobench.plan.cells import Cell
from isobench.runner.nodes import Node

#: how often a unit is tried again after its node was lost, before it is recorded lost
MAX_RERUNS = 2


def _suffixed(unit: list[Cell], host: str) -> list[Cell]:
    """The unit as ``host`` runs it: its cells', duet pair's and tenant group's ids end in
    ``@host``, so what ran together on one host is never taken for one unit with another's."""
    return [dataclasses.replace(
        c, cell_id=f"{c.cell_id}@{host}",
        duet=dataclasses.replace(c.duet, pair=f"{c.duet.pair}@{host}") if c.duet else None,
        tenant=dataclasses.replace(c.tenant, group=f"{c.tenant.group}@{host}") if c.tenant else None)
        for c in unit]


class Scheduler:
    """Which unit each node runs next (see the module's docstring for the policy)."""

    def __init__(self, nodes: list[Node], plan: list[Cell], done: set[str], mode: str) -> None:
        from isobench.runner.tenancy import tenant_batches

        self.nodes, self.mode, self.done = nodes, mode, done
        units = list(tenant_batches(plan))
        self.warmup = [u for u in units if u[0].warmup]
        self.rounds: deque[list[list[Cell]]] = deque()
        by_round: dict[int, list[list[Cell]]] = {}
        for unit in units:
            if not unit[0].warmup:
                by_round.setdefault(unit[0].rep, []).append(unit)
        #: units a host cannot run in `each` mode: recorded unavailable, with the node's reason
        self.unrunnable: list[tuple[list[Cell], str]] = []
        if mode == "each":
            for node in nodes:
                for unit in units:
                    mine = _suffixed(unit, node.host)
                    if node.can_run(unit):
                        node.queue.append(mine)
                    elif self._pending(mine):
                        self.unrunnable.append((mine, node.why_not(unit)))
        else:
            self.rounds.extend(by_round[r] for r in sorted(by_round))

    def _pending(self, unit: list[Cell]) -> bool:
        return any(c.cell_id not in self.done for c in unit)

    def next_unit(self, node: Node) -> list[Cell] | None:
        if self.mode == "spread" and not node.warmed:
            node.warmed = True  # each host warms up itself before its first measured round
            node.queue.extendleft(reversed([_suffixed(u, node.host) for u in self.warmup if node.can_run(u)]))
        while True:
            while node.queue:
                unit = node.queue.popleft()
                if self._pending(unit):
                    return unit
            if not self.rounds:
                return None
            self._claim_round(node)
            if not node.queue:
                return None  # nothing here for this node (now): others take the rounds left

    def _claim_round(self, node: Node) -> None:
        """Take the next round this node can run whole. Only a round that no live node can run
        whole is split: then the node takes its part and the rest goes back for others."""
        pending = [[u for u in r if self._pending(u)] for r in self.rounds]
        for index, units in enumerate(pending):
            if units and all(node.can_run(u) for u in units):
                del self.rounds[index]
                node.queue.extend(units)
                return
        whole_elsewhere = any(n.alive and n is not node and all(n.can_run(u) for u in units)
                              for units in pending if units for n in self.nodes)
        if whole_elsewhere:
            return  # leave whole rounds to nodes that keep a round on one host
        for index, units in enumerate(pending):
            mine = [u for u in units if node.can_run(u)]
            if mine:
                del self.rounds[index]
                rest = [u for u in units if not node.can_run(u)]
                if rest:
                    self.rounds.insert(index, rest)
                node.queue.extend(mine)
                return

    def reassign(self, lost: Node, units: list[list[Cell]], why: str) -> list[tuple[list[Cell], str]]:
        """A lost node's units go to live nodes alike; returns the units no such node can run."""
        stranded = []
        for unit in units:
            if not self._pending(unit):
                continue
            reruns = unit[0].reruns
            alike = [n for n in self.nodes if n.alive and n.kind == lost.kind and n.can_run(unit)]
            if not alike or reruns >= MAX_RERUNS:
                reason = (f"{why}; tried {reruns + 1} times" if alike else
                          f"{why}, and no live node has its labels {lost.kind}")
                stranded.append((unit, reason))
                continue
            target = min(alike, key=lambda n: (len(n.queue) + len(n.running)))
            again = [dataclasses.replace(c, reruns=reruns + 1, lost_on=lost.host)
                     for c in unit]
            target.queue.appendleft(again)
        return stranded

    def stranded_rounds(self) -> list[list[Cell]]:
        """Measured rounds' units no live node can run (after losses): recorded lost at the end."""
        left = [u for r in self.rounds for u in r if self._pending(u)]
        self.rounds.clear()
        return left

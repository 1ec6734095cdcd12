"""The members of one tenant group are one sample, not N.

A tenant group (plan/tenants.py) runs N cells at once on one platform entry; its members share
the kernel's flusher calls, the page cache and the cores, so their values move together. Taken
as N independent samples they make a t interval about sqrt(N) times too narrow. A value or
difference check therefore averages each group's members first: every round contributes one
value, and n counts rounds, not tenants.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict

from isobench.analysis.blocked import Point

#: a member's cell id is the id of the cell its group replaced plus ``/t<index>``
_MEMBER = re.compile(r"/t\d+$")


def group_of(point: Point) -> str:
    """The cell a tenant group replaced (a cell outside any group is its own group)."""
    return _MEMBER.sub("", point.cell_id)


def tenant_points(points: list[Point]) -> list[Point]:
    """The points with each tenant group's members merged into one (their mean, under the id of
    the cell the group replaced), in round order: what a ratio pairs by round. Cells outside a
    group pass unchanged."""
    members: dict[tuple[int, str], list[Point]] = defaultdict(list)
    for point in points:
        members[(point.rep, group_of(point))].append(point)
    return [group[0] if len(group) == 1 else
            Point(rep, statistics.fmean(p.value for p in group), cell_id, group[0].pair, group[0].partner)
            for (rep, cell_id), group in sorted(members.items())]


def tenant_means(points: list[Point]) -> list[float]:
    """One value per tenant group (the mean of its members), in round order; cells outside a
    group keep their own value."""
    return [point.value for point in tenant_points(points)]

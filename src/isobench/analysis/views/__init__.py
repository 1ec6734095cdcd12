"""The studies' tables and figures, as data, from whatever the store holds.

Each builder returns a :class:`Table` or :class:`Figure` (rendered by the report) or a
:class:`Skipped` saying what was not measured and how to measure it. The ``paper`` field
names the table or figure of the study in ``../shared/papers/`` that the view regenerates.
One module per figure family; each registers its builder with a rank (its place in the report).
"""

from __future__ import annotations

# imported for their registrations
from isobench.analysis.views import faults, perf, phases, plugins, ratios, samples, scaling, why, writeback  # noqa: F401, I001
from isobench.analysis.views.base import Context, Figure, Skipped, Table, View, builders


def build_views(ctx: Context) -> list[View]:
    return [view for build in builders() for view in build(ctx)]


__all__ = ["Context", "Figure", "Skipped", "Table", "View", "build_views"]

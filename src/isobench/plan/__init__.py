"""Plans: a study expanded into cells, interleaved and randomized."""

from isobench.plan.cells import Cell, expand, group_key

__all__ = ["Cell", "expand", "group_key"]

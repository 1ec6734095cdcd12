"""The nominal level of each look of a group-sequential design, from the alpha each look may spend.

`repetitions: auto` looks at its comparisons after every round and may stop on a verdict at each
look. Each look may spend the increment of an alpha-spending function (runner/adaptive.py). The
simplest way to stay within that increment is to test each look at the increment itself (Bonferroni
over the looks), but the looks are far from independent: the look after round 8 reads the same 7
pairs as the look after round 7, and one more. Testing each look at its increment then spends a
third of what it may: after the first look a loaded study tested at levels near 0.002, needed
15 rounds where a quiet one needed 6, and still made a wrong stop far less often than 5%.

This module finds the level that spends exactly the increment, given the looks before it
(Armitage, McPherson & Rowe's recursive integration, as in Jennison & Turnbull, *Group Sequential
Methods*, ch. 19). Under no effect, a comparison's standardised estimate after n pairs behaves
like a Brownian motion S read at information n, divided by √n. The sub-density of S on the
region where no earlier look stopped is carried from look to look on a grid, convolved with the
Gaussian step between looks; each look's boundary is found by bisection so that the chance of
first crossing it there equals the look's increment.

A verdict stops on either of two tests: a difference (two-sided) and equivalence (two one-sided
tests at the margins). The level returned is the smaller of the two-sided and the one-sided
nominal levels, so each kind of wrong stop stays within the spending function's total. The levels
come from the normal distribution and are used with the t intervals of each look, as is usual for
group-sequential t tests.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()
#: grid points for the sub-density between looks (the levels move by under 1% of themselves beyond it)
GRID = 401
#: how far below the one-sided boundary the grid reaches, in standard deviations of S
TAIL_SD = 8.0


def _cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.array([math.erf(v) for v in (x / math.sqrt(2.0)).ravel()]).reshape(x.shape))


def _weights(grid: np.ndarray) -> np.ndarray:
    step = grid[1] - grid[0]
    weights = np.full(grid.size, step)
    weights[0] = weights[-1] = step / 2
    return weights


def _first_crossing(bound: float, grid: np.ndarray, mass: np.ndarray, step: float, two_sided: bool) -> float:
    """The chance that S, carried on ``grid`` with probability ``mass`` (nothing stopped yet), lands
    beyond ``bound`` after a Gaussian step of standard deviation ``step``."""
    beyond = 1.0 - _cdf((bound - grid) / step)
    if two_sided:
        beyond = beyond + _cdf((-bound - grid) / step)
    return float((mass * beyond).sum())


def _levels(informations: tuple[float, ...], increments: tuple[float, ...], two_sided: bool) -> list[float]:
    levels: list[float] = []
    grid = mass = None
    previous = 0.0
    for info, increment in zip(informations, increments, strict=True):
        if increment <= 0.0 or info <= previous:
            levels.append(0.0)  # nothing to spend (or no new pairs): the look cannot stop anything
            continue
        sd = math.sqrt(info)
        if grid is None:  # the first look: S ~ N(0, info), nothing stopped before it
            z = _NORMAL.inv_cdf(1 - increment / 2) if two_sided else _NORMAL.inv_cdf(1 - increment)
            bound = z * sd
            grid = np.linspace(-bound if two_sided else -TAIL_SD * sd, bound, GRID)
            mass = np.exp(-grid ** 2 / (2 * info)) / math.sqrt(2 * math.pi * info) * _weights(grid)
        else:
            assert mass is not None
            step = math.sqrt(info - previous)
            from_grid, carried = grid, mass
            low, high = 0.0, 40.0 * sd
            for _ in range(60):  # bisection: the first-crossing chance falls as the bound rises
                middle = (low + high) / 2
                if _first_crossing(middle, from_grid, carried, step, two_sided) > increment:
                    low = middle
                else:
                    high = middle
            bound = high
            z = bound / sd
            grid = np.linspace(-bound if two_sided else -TAIL_SD * sd, bound, GRID)
            kernel = np.exp(-(grid[:, None] - from_grid[None, :]) ** 2 / (2 * step * step)) / (step * math.sqrt(2 * math.pi))
            mass = (kernel @ carried) * _weights(grid)
        previous = info
        levels.append(2 * (1 - _NORMAL.cdf(z)) if two_sided else 1 - _NORMAL.cdf(z))
    return levels


@lru_cache(maxsize=256)
def look_levels(informations: tuple[float, ...], increments: tuple[float, ...]) -> tuple[float, ...]:
    """Each look's nominal level, given every look's information (pairs, or rounds) and the alpha
    it may spend: the smaller of the two-sided and the one-sided level that spends exactly that."""
    two = _levels(informations, increments, two_sided=True)
    one = _levels(informations, increments, two_sided=False)
    return tuple(min(a, b) for a, b in zip(two, one, strict=True))

"""The level each look of `repetitions: auto` tests at (runner/sequential.py): it spends exactly the
look's alpha increment, given the nested looks before it."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest

from isobench.runner.adaptive import look_level, spent
from isobench.runner.sequential import look_levels

NORMAL = NormalDist()


def _increments(fractions: list[float]) -> tuple[float, ...]:
    return tuple(spent(t) - spent(before) for before, t in zip([0.0, *fractions], fractions, strict=False))


def _wrong_stops(rounds: list[int], levels: tuple[float, ...], two_sided: bool, paths: int, seed: int) -> float:
    """Simulated share of studies with no effect that some look stops: a standardised sum of
    independent pairs read after each look's rounds, against its level."""
    rng = random.Random(seed)
    stopped = 0
    for _ in range(paths):
        total, done = 0.0, 0
        for r, level in zip(rounds, levels, strict=True):
            while done < r:
                total += rng.gauss(0.0, 1.0)
                done += 1
            z = total / math.sqrt(r)
            if level > 0 and ((abs(z) if two_sided else z) >= NORMAL.inv_cdf(1 - (level / 2 if two_sided else level))):
                stopped += 1
                break
    return stopped / paths


def test_the_first_look_tests_at_its_increment_and_later_ones_at_more() -> None:
    rounds = list(range(6, 16))
    fractions = [r / 24 for r in rounds]
    increments = _increments(fractions)
    levels = look_levels(tuple(float(r) for r in rounds), increments)
    assert levels[0] == pytest.approx(increments[0], rel=1e-6)
    # nested looks: each later one may test at several times its increment and still spend only it
    assert all(level > 2.5 * inc for level, inc in zip(levels[1:], increments[1:], strict=True))


def test_the_levels_spend_what_the_spending_function_allows() -> None:
    rounds = list(range(6, 25))
    fractions = [r / 24 for r in rounds]
    levels = look_levels(tuple(float(r) for r in rounds), _increments(fractions))
    rate = _wrong_stops(rounds, levels, two_sided=True, paths=20000, seed=3)
    assert rate == pytest.approx(spent(1.0), abs=0.007), rate  # 0.05, where each look at its increment spends 1-2%
    bonferroni = _wrong_stops(rounds, _increments(fractions), two_sided=True, paths=20000, seed=3)
    assert bonferroni < 0.03


def test_a_look_with_nothing_to_spend_cannot_stop_and_a_resumed_look_keeps_its_level() -> None:
    assert look_levels((6.0, 7.0), (0.02, 0.0))[1] == 0.0
    fractions = {6: 0.25, 7: 0.30, 8: 0.35}
    assert look_level([6, 7, 8], fractions) == look_level([6, 7, 8], dict(fractions))
    assert look_level([6], {6: 0.25}) == pytest.approx(spent(0.25))
    assert look_level([], {}) == 0.0

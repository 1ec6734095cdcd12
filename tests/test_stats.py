"""Statistics on synthetic samples with known ratios."""

from __future__ import annotations

import math
import random

import pytest

from isobench.analysis.stats import paired_ratio_ci, ratio_ci


def lognormal(n: int, median: float, sigma: float, rng: random.Random) -> list[float]:
    return [median * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


def test_known_ratio_is_covered_at_about_95_percent() -> None:
    rng = random.Random(1)
    trials, covered = 2000, 0
    for _ in range(trials):
        base = lognormal(5, 1.0, 0.05, rng)
        other = lognormal(5, 1.2, 0.08, rng)
        est = ratio_ci(other, base)
        covered += est.ci_low <= 1.2 <= est.ci_high
    assert 0.93 <= covered / trials <= 0.97


def test_clear_effect_is_significant_and_null_effect_mostly_not() -> None:
    rng = random.Random(2)
    est = ratio_ci(lognormal(10, 1.10, 0.01, rng), lognormal(10, 1.0, 0.01, rng))
    assert est.significant and 1.08 < est.ratio < 1.12 and est.p_value < 1e-6
    false_positives = sum(ratio_ci(lognormal(5, 1, 0.05, rng), lognormal(5, 1, 0.05, rng)).significant
                          for _ in range(1000))
    assert false_positives < 80  # about 5% expected


def test_exact_values() -> None:
    est = ratio_ci([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert est.ratio == pytest.approx(2.0) and est.ci_low == est.ci_high == pytest.approx(2.0)
    assert est.significant
    single = ratio_ci([2.0], [1.0, 1.1])
    assert single.ci_low is None and not single.significant


def test_rejects_nonpositive() -> None:
    with pytest.raises(ValueError):
        ratio_ci([0.0, 1.0], [1.0, 1.0])


def test_paired_interval_uses_the_log_differences() -> None:
    # Every pair differs by exactly 10%: the rounds' own levels (1, 2, 3) cancel out.
    exact = paired_ratio_ci([(1.1, 1.0), (2.2, 2.0), (3.3, 3.0)])
    assert exact.ratio == pytest.approx(1.1) and exact.ci_low == pytest.approx(1.1) and exact.se < 1e-12
    rng = random.Random(3)
    pairs = [(1.05 * math.exp(b + rng.gauss(0, 0.01)), math.exp(b + rng.gauss(0, 0.01)))
             for b in (rng.gauss(0, 0.2) for _ in range(6))]
    est = paired_ratio_ci(pairs)
    assert est.df == 5 and est.ci_low < 1.05 < est.ci_high and est.ci_low > 1
    # the same estimate at another level, from its SE and df
    assert est.interval(0.95) == pytest.approx((est.ci_low, est.ci_high))
    assert ratio_ci([a for a, _ in pairs], [b for _, b in pairs]).ci_low < 1  # unpaired: lost in the rounds' spread

"""Sample-size advisor: how many repetitions resolve a given overhead at the observed noise.

The noise is the spread of log values between repetitions of the same group (≈ the coefficient
of variation). Two questions, both per group (baseline and platform alike):

* ``repetitions_for_halfwidth``: how many make the 95% interval of the ratio narrower than
  ±target (what ``repetitions: auto`` aims for);
* ``repetitions_for_power``: how many detect a true overhead of ``overhead`` with the given
  power (80% by default) in Welch's two-sided test at 5%, computed from the noncentral t.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from isobench.analysis.tdist import nct_cdf, nct_sf, t_ppf

MAX_ADVISED = 10_000


def _welch_df(sd_a: float, sd_b: float, n: int) -> float:
    va, vb = sd_a**2 / n, sd_b**2 / n
    if va + vb == 0:
        return max(1, n - 1)
    return (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))


def _smallest(ok: Callable[[int], bool]) -> int:
    """Smallest n in [2, MAX_ADVISED] with ok(n), for ok monotone in n (binary search)."""
    if not ok(MAX_ADVISED):
        return MAX_ADVISED
    low, high = 2, MAX_ADVISED
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low


def repetitions_for_halfwidth(sd_a: float, sd_b: float, target: float, confidence: float = 0.95) -> int:
    """Smallest n per group whose Welch interval of the ratio has half-width ≤ log(1+target)."""
    goal = math.log1p(target)

    def ok(n: int) -> bool:
        t_crit = float(t_ppf(0.5 + confidence / 2, _welch_df(sd_a, sd_b, n)))
        return t_crit * math.sqrt((sd_a**2 + sd_b**2) / n) <= goal

    return _smallest(ok)


def repetitions_for_power(sd_a: float, sd_b: float, overhead: float, power: float = 0.8,
                          alpha: float = 0.05) -> int:
    """Smallest n per group for which Welch's test detects a ratio of 1+overhead with ``power``."""
    effect = abs(math.log1p(overhead))
    if effect == 0:
        return MAX_ADVISED

    def ok(n: int) -> bool:
        se = math.sqrt((sd_a**2 + sd_b**2) / n)
        if se == 0:
            return True
        df = _welch_df(sd_a, sd_b, n)
        t_crit = float(t_ppf(1 - alpha / 2, df))
        nc = effect / se
        upper, lower = float(nct_sf(t_crit, df, nc)), float(nct_cdf(-t_crit, df, nc))
        # far in the tail scipy may answer nan: the probability there is 1 (upper) or 0 (lower)
        upper = 1.0 if math.isnan(upper) else upper
        lower = 0.0 if math.isnan(lower) else lower
        return upper + lower >= power

    return _smallest(ok)

"""One verdict per comparison: a resolved difference, equivalence within a margin, or inconclusive.

Rules (``decide_verdict``), on the log scale of the ratio r with its standard error and
degrees of freedom (Welch or paired, whichever the comparison used):

* **difference** (``slower``/``faster``; ``higher``/``lower`` for metrics that are not times):
  the 1-α interval (95%) excludes 1 *and* the Holm-adjusted p-value is below α. A/A entries
  are outside the Holm family and use their own p-value.
* **equivalent**: two one-sided tests at level α against the margin m: the 1-2α interval (90%)
  lies inside [1/(1+m), 1+m]. The margin is symmetric on the log scale, so "1.02× slower" and
  "1.02× faster" are the same distance from 1.
* **both at once** (a tiny difference that the data resolve): the verdict is the direction
  (``slower``/``faster``), and the sentence adds that it lies within the equivalence margin
  (``within_margin``). A resolved direction is the more informative fact, and the margin clause
  keeps the reader from reading a 0.5% cost as a problem.
* otherwise **inconclusive**, with ``repetitions_needed``: the repetitions per side at which the
  interval, at the observed standard error shrinking as 1/sqrt(n), would be narrow enough for
  one of the two outcomes: its 95% half-width below |log r| (difference), or its 90% half-width
  below log(1+m) - |log r| (equivalence); the smaller of the two. None when neither is defined
  (no standard error, or no spread to project from).
"""

from __future__ import annotations

import math

from scipy import stats as sps

from isobench.analysis.stats import interval_at, timelike

#: equivalence margin when the study sets none: ±2%
DEFAULT_MARGIN = 0.02
ALPHA = 0.05
#: the most repetitions ``repetitions_needed`` ever advises (beyond it, the answer is "more than this")
MAX_NEEDED = 10_000

VERDICTS = ("slower", "faster", "higher", "lower", "equivalent", "inconclusive")
#: the verdicts that resolve a difference (a direction: slower/faster for times, higher/lower otherwise)
DIRECTIONS = frozenset(VERDICTS[:4])


def margin_of(study: object) -> float:
    """The study's equivalence margin (field ``equivalence_margin``), ±2% where it has none."""
    value = getattr(study, "equivalence_margin", None)
    return DEFAULT_MARGIN if value is None else float(value)


def direction(metric: str, log_ratio: float) -> str:
    if timelike(metric):
        return "slower" if log_ratio > 0 else "faster"
    return "higher" if log_ratio > 0 else "lower"


def excludes_one(interval: tuple[float, float] | None) -> bool:
    return interval is not None and (interval[0] > 1.0 or interval[1] < 1.0)


def inside_margin(interval: tuple[float, float] | None, margin: float) -> bool:
    """True when the interval lies inside [1/(1+m), 1+m] (the TOST condition at its level)."""
    if interval is None:
        return False
    return interval[0] >= 1 / (1 + margin) and interval[1] <= 1 + margin


def decide_verdict(metric: str, log_ratio: float, se: float | None, df: float | None, p_value: float | None,
                   margin: float, alpha: float = ALPHA) -> str:
    """The verdict at level ``alpha``: ``p_value`` is the one the difference must beat (Holm-adjusted
    in a family of comparisons)."""
    wide = interval_at(log_ratio, se, df, 1 - alpha)
    if excludes_one(wide) and p_value is not None and p_value < alpha:
        return direction(metric, log_ratio)
    if inside_margin(interval_at(log_ratio, se, df, 1 - 2 * alpha), margin):
        return "equivalent"
    return "inconclusive"


def repetitions_needed(log_ratio: float, se: float | None, df: float | None, n: int, margin: float,
                       alpha: float = ALPHA) -> int | None:
    """Repetitions per side at which the observed standard error would settle the comparison (see module)."""
    if se is None or df is None or se <= 0 or n < 2:
        return None
    effect = abs(log_ratio)
    room = math.log1p(margin) - effect  # how far the 90% interval may reach for equivalence
    sd = se * math.sqrt(n)  # the spread of one repetition (pair), from which se shrinks as 1/sqrt(n)
    # Welch's df grow with n like the pooled df; keep their proportion to n-1 when projecting.
    df_per = df / max(1, n - 1)

    def ok(k: int, goal: float, confidence: float) -> bool:
        t_crit = float(sps.t.ppf(0.5 + confidence / 2, max(1.0, df_per * (k - 1))))
        return t_crit * sd / math.sqrt(k) < goal

    candidates = []
    for goal, confidence in ((effect, 1 - alpha), (room, 1 - 2 * alpha)):
        if goal <= 0:
            continue
        if not ok(MAX_NEEDED, goal, confidence):
            candidates.append(MAX_NEEDED)
            continue
        low, high = 2, MAX_NEEDED
        while low < high:  # the smallest k that is enough: ok() is monotone in k
            mid = (low + high) // 2
            if ok(mid, goal, confidence):
                high = mid
            else:
                low = mid + 1
        candidates.append(low)
    return min(candidates) if candidates else None


def within_margin(c: object) -> bool:
    """A comparison's 90% interval lies within its equivalence margin (whatever its verdict)."""
    low, high, margin = getattr(c, "ci90_low", None), getattr(c, "ci90_high", None), getattr(c, "margin", None)
    if low is None or high is None or margin is None:
        return False
    return inside_margin((low, high), margin)


def fmt_margin(margin: float) -> str:
    return f"±{margin * 100:.3g}%"

"""One verdict per comparison: a resolved difference, equivalence within a margin, inconclusive, or not comparable.

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

Guards: a direction the study cannot back is not called (``verdict_and_reason`` says why, and the
verdict falls to equivalent where the TOST holds, else inconclusive):

* **too few pairs.** A direction needs at least ``MIN_DIRECTION_N`` = 5 pairs (or repetitions a
  side, unpaired) and ``MIN_DIRECTION_DF`` = 4 degrees of freedom. The t interval is exact only for
  independent normal errors; its width rests on the SD estimate s, and (df)·s²/σ² is chi-square
  with df degrees of freedom. At df = 2 (3 pairs) the 95% range of σ/s is 0.52–6.3, a factor of 12,
  and s is below half the true σ in 22% of studies: one drifting or outlying repetition decides the
  width, and the interval is a guess. At df = 4 the range is 0.60–2.9 and s < σ/2 in 9%: df = 4 is
  the fewest at which s is within a factor of two of σ in at least 90% of studies. Welch's df is an
  approximation that reaches 4 from 3 values a side when the spreads agree, each spread itself a
  2-df guess, hence also n ≥ 5 a side. A duet crossover has n − 2 df, so it needs 6 pairs.
* **inside the A/A floor.** Where the study has an A/A entry, an effect with |r − 1| no larger
  than the A/A interval's reach from 1 (``noise_floor``, what the report prints as "±x%") is not a
  direction: the study's own A/A says it cannot resolve an effect that small, whatever this
  comparison's interval says. It is measured in the same currency the reader sees (|r − 1| beside
  ±x%). An A/A comparison is not judged against its own floor.

Adaptive stopping (runner/adaptive.py) applies the same guards at each look, so a comparison never
stops on a direction the final report would refuse.

**not comparable** (``NOT_COMPARABLE``): the two sides' cells report different devices (a workload's
``device: auto`` runs on cuda where the process sees a GPU, else on cpu, so bare metal on a GPU host
and a container without the GPU passed in run different hardware). Their ratio measures the devices,
not the platform: no direction, no equivalence, no repetitions advice (more rounds cannot change
it), and no place in the Holm family. It is neither a direction nor ``equivalent``.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from isobench.analysis.metric_sense import direction_word
from isobench.analysis.stats import fmt_floor, interval_at
from isobench.analysis.tdist import t_ppf

#: equivalence margin when the study sets none: ±2%
DEFAULT_MARGIN = 0.02
ALPHA = 0.05
#: the most repetitions ``repetitions_needed`` ever advises (beyond it, the answer is "more than this")
MAX_NEEDED = 10_000

#: the two sides ran on different devices (cpu vs cuda): their ratio is no platform's cost (see module)
NOT_COMPARABLE = "not comparable"
VERDICTS = ("slower", "faster", "higher", "lower", "equivalent", "inconclusive", NOT_COMPARABLE)
#: the verdicts that resolve a difference (a direction: slower/faster for times, higher/lower otherwise)
DIRECTIONS = frozenset(VERDICTS[:4])
#: the fewest pairs (repetitions a side, unpaired) and degrees of freedom behind a direction (see module)
MIN_DIRECTION_N = 5
MIN_DIRECTION_DF = 4


def margin_of(study: object) -> float:
    """The study's equivalence margin (field ``equivalence_margin``), ±2% where it has none."""
    value = getattr(study, "equivalence_margin", None)
    return DEFAULT_MARGIN if value is None else float(value)


def direction(metric: str, log_ratio: float) -> str:
    """slower/faster for times and rates (metric_sense), higher/lower for other amounts."""
    return direction_word(metric, log_ratio > 0)


def excludes_one(interval: tuple[float, float] | None) -> bool:
    return interval is not None and (interval[0] > 1.0 or interval[1] < 1.0)


def inside_margin(interval: tuple[float, float] | None, margin: float) -> bool:
    """True when the interval lies inside [1/(1+m), 1+m] (the TOST condition at its level)."""
    if interval is None:
        return False
    return interval[0] >= 1 / (1 + margin) and interval[1] <= 1 + margin


def too_few(n: int | None, df: float | None) -> str:
    """Why an interval from ``n`` pairs with ``df`` degrees of freedom cannot back a direction ("": it can)."""
    if n is not None and n < MIN_DIRECTION_N:
        return f"a direction needs at least {MIN_DIRECTION_N} pairs (or repetitions a side); this has {n}"
    if df is not None and df < MIN_DIRECTION_DF:
        return (f"a direction needs at least {MIN_DIRECTION_DF} degrees of freedom for its interval's width to "
                f"be trusted; this has {df:.3g}")
    return ""


def inside_floor(log_ratio: float, floor: float | None) -> bool:
    """The ratio is within the A/A noise floor: |r − 1| ≤ floor (the A/A interval's reach from 1)."""
    # the tolerance: a ratio exactly at the floor (1.05 against ±5%) must not fall out by rounding
    return floor is not None and abs(math.exp(log_ratio) - 1) <= floor + 1e-12


def verdict_and_reason(metric: str, log_ratio: float, se: float | None, df: float | None, p_value: float | None,
                       margin: float, alpha: float = ALPHA, *, n: int | None = None,
                       floor: float | None = None) -> tuple[str, str]:
    """The verdict at level ``alpha`` and, where a guard held back the direction the interval shows,
    why ("" otherwise). ``p_value`` is the one the difference must beat (Holm-adjusted in a family);
    ``n``: the fewer pairs or repetitions of the two sides (None: not checked); ``floor``: the A/A
    noise floor (None: no A/A, or this is the A/A)."""
    wide = interval_at(log_ratio, se, df, 1 - alpha)
    reasons: list[str] = []
    if excludes_one(wide) and p_value is not None and p_value < alpha:
        reasons.append(too_few(n, df))
        if inside_floor(log_ratio, floor):
            assert floor is not None
            reasons.append(f"inside the A/A noise floor {fmt_floor(floor)}: this study cannot tell it from noise")
        reasons = [r for r in reasons if r]
        if not reasons:
            return direction(metric, log_ratio), ""
    reason = "; ".join(reasons)
    if inside_margin(interval_at(log_ratio, se, df, 1 - 2 * alpha), margin):
        return "equivalent", reason
    return "inconclusive", reason


def decide_verdict(metric: str, log_ratio: float, se: float | None, df: float | None, p_value: float | None,
                   margin: float, alpha: float = ALPHA, *, n: int | None = None, floor: float | None = None) -> str:
    """The verdict alone (see ``verdict_and_reason``)."""
    return verdict_and_reason(metric, log_ratio, se, df, p_value, margin, alpha, n=n, floor=floor)[0]


def repetitions_needed(log_ratio: float, se: float | None, df: float | None, n: int, margin: float,
                       alpha: float = ALPHA, difference: bool = True) -> int | None:
    """Repetitions per side at which the observed standard error would settle the comparison (see module);
    ``difference=False``: only by equivalence (an effect inside the A/A floor is never a direction)."""
    if se is None or df is None or se <= 0 or n < 2:
        return None
    effect = abs(log_ratio)
    room = math.log1p(margin) - effect  # how far the 90% interval may reach for equivalence
    sd = se * math.sqrt(n)  # the spread of one repetition (pair), from which se shrinks as 1/sqrt(n)
    # Welch's df grow with n like the pooled df; keep their proportion to n-1 when projecting.
    df_per = df / max(1, n - 1)

    def ok(k: int, goal: float, confidence: float) -> bool:
        t_crit = float(t_ppf(0.5 + confidence / 2, max(1.0, df_per * (k - 1))))
        return t_crit * sd / math.sqrt(k) < goal

    candidates = []
    for goal, confidence in ((effect if difference else 0.0, 1 - alpha), (room, 1 - 2 * alpha)):
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


def devices_differ(devices: Collection[str], baseline_devices: Collection[str]) -> bool:
    """Both sides report the devices their cells ran on, and the two differ (not comparable).
    A side that reports none (a workload without a device) is not judged."""
    return bool(devices) and bool(baseline_devices) and set(devices) != set(baseline_devices)


def fmt_devices(devices: Collection[str]) -> str:
    """"cuda", or "cpu+cuda" for a side whose cells ran on both."""
    return "+".join(sorted(devices))


def within_margin(c: object) -> bool:
    """A comparison's 90% interval lies within its equivalence margin (whatever its verdict)."""
    low, high, margin = getattr(c, "ci90_low", None), getattr(c, "ci90_high", None), getattr(c, "margin", None)
    if low is None or high is None or margin is None:
        return False
    return inside_margin((low, high), margin)


def fmt_margin(margin: float) -> str:
    return f"±{margin * 100:.3g}%"

"""Ratio of two samples with a 95% confidence interval.

Method: Welch's t interval on log values, exponentiated. Times are positive and
right-skewed, and platform effects are multiplicative, so logs make the two groups
near-normal with comparable spread; the interval is then one for the ratio of
geometric means. We prefer it to a bootstrap at the repetition counts studies use
(3-10): a bootstrap over 5 repetitions has only 126 distinct resamples per group and
its percentile interval is systematically too narrow, while Welch's interval keeps its
coverage and does not assume equal variances.

Blocked designs (rounds, duets) use a paired t interval on the log differences instead
(``paired_ratio_ci``); analysis/blocked.py decides which of the two a comparison gets.
Every estimate keeps its standard error and degrees of freedom on the log scale, so that
intervals at other levels (the 90% interval of TOST, the stricter ones of alpha spending)
come from the same estimate (``RatioEstimate.interval``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from isobench.analysis.metric_sense import direction_word
from isobench.analysis.tdist import t_ppf, t_sf

METHOD = "welch-log"
PAIRED_METHOD = "paired-log"
DUET_METHOD = "duet-paired"
CROSSOVER_METHOD = "duet-crossover"


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n: int
    n_baseline: int
    #: standard error and degrees of freedom of the log ratio (None: fewer than 2 values a side)
    se: float | None = None
    df: float | None = None

    @property
    def log_ratio(self) -> float:
        return math.log(self.ratio)

    def interval(self, confidence: float) -> tuple[float, float] | None:
        """The two-sided interval of the ratio at ``confidence`` from the same estimate."""
        return interval_at(self.log_ratio, self.se, self.df, confidence)

    @property
    def significant(self) -> bool:
        """True when the 95% interval excludes 1."""
        if self.ci_low is None or self.ci_high is None:
            return False
        return self.ci_low > 1.0 or self.ci_high < 1.0


def _mean_var(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, var


def ratio_ci(sample: list[float], baseline: list[float], confidence: float = 0.95) -> RatioEstimate:
    """Ratio of geometric means ``sample / baseline`` with a Welch interval on logs."""
    if not sample or not baseline:
        raise ValueError("both samples need at least one value")
    if min(sample) <= 0 or min(baseline) <= 0:
        raise ValueError("ratios need positive values")
    return welch_of_logs([math.log(v) for v in sample], [math.log(v) for v in baseline], confidence)


def welch_of_logs(log_s: list[float], log_b: list[float], confidence: float = 0.95) -> RatioEstimate:
    """``ratio_ci`` on values already in logs (a caller that needs them for several estimates)."""
    mean_s, var_s = _mean_var(log_s)
    mean_b, var_b = _mean_var(log_b)
    diff = mean_s - mean_b
    ratio = math.exp(diff)
    n_s, n_b = len(log_s), len(log_b)
    if n_s < 2 or n_b < 2:
        return RatioEstimate(ratio, None, None, None, n_s, n_b)
    se2 = var_s / n_s + var_b / n_b
    if se2 == 0.0:
        exact = 0.0 if diff != 0 else 1.0
        return RatioEstimate(ratio, ratio, ratio, exact, n_s, n_b, 0.0, float(n_s + n_b - 2))
    se = math.sqrt(se2)
    df = se2**2 / ((var_s / n_s) ** 2 / (n_s - 1) + (var_b / n_b) ** 2 / (n_b - 1)) \
        if var_s > 0 and var_b > 0 else (n_s - 1 if var_s > 0 else n_b - 1)
    t_crit = float(t_ppf(0.5 + confidence / 2, df))
    p_value = float(2 * t_sf(abs(diff) / se, df))
    return RatioEstimate(ratio, math.exp(diff - t_crit * se), math.exp(diff + t_crit * se), p_value, n_s, n_b,
                         se, float(df))


def paired_ratio_ci(pairs: list[tuple[float, float]], confidence: float = 0.95) -> RatioEstimate:
    """Ratio of geometric means from ``(sample, baseline)`` pairs: a t interval on the log differences.

    A pair shares a round (or a duet), so what moved both sides alike cancels in the difference;
    the interval has n-1 degrees of freedom for n pairs.
    """
    if not pairs:
        raise ValueError("pairing needs at least one pair")
    if min(min(p) for p in pairs) <= 0:
        raise ValueError("ratios need positive values")
    return paired_of_diffs([math.log(s) - math.log(b) for s, b in pairs], confidence)


def paired_of_diffs(diffs: list[float], confidence: float = 0.95) -> RatioEstimate:
    """``paired_ratio_ci`` on the pairs' log differences."""
    mean, var = _mean_var(diffs)
    ratio, n = math.exp(mean), len(diffs)
    if n < 2:
        return RatioEstimate(ratio, None, None, None, n, n)
    if var == 0.0:
        return RatioEstimate(ratio, ratio, ratio, 0.0 if mean != 0 else 1.0, n, n, 0.0, float(n - 1))
    se = math.sqrt(var / n)
    t_crit = float(t_ppf(0.5 + confidence / 2, n - 1))
    p_value = float(2 * t_sf(abs(mean) / se, n - 1))
    return RatioEstimate(ratio, math.exp(mean - t_crit * se), math.exp(mean + t_crit * se), p_value, n, n,
                         se, float(n - 1))


def crossover_ratio_ci(by_side: list[list[tuple[float, float]]], confidence: float = 0.95) -> RatioEstimate:
    """Ratio from duet pairs grouped by the side (core) the compared cell ran on: a 2x2 crossover.

    A duet swaps sides every round, so a core that runs faster than the other for a while
    (a busy neighbour on the physical core behind one vCPU) adds +c to the log difference in
    one group and -c in the other. The mean of the two groups' means cancels it, and the error
    is the pooled spread within the groups, with n-2 degrees of freedom.
    """
    if len(by_side) != 2 or min(len(g) for g in by_side) < 2:
        raise ValueError("a crossover needs two sides with at least two pairs each")
    return crossover_of_diffs([[math.log(s) - math.log(b) for s, b in g] for g in by_side], confidence)


def crossover_of_diffs(groups: list[list[float]], confidence: float = 0.95) -> RatioEstimate:
    """``crossover_ratio_ci`` on each side's log differences."""
    means = [sum(g) / len(g) for g in groups]
    mean = (means[0] + means[1]) / 2
    n = sum(len(g) for g in groups)
    df = n - 2
    pooled = sum((d - m) ** 2 for g, m in zip(groups, means, strict=True) for d in g) / df
    ratio = math.exp(mean)
    if pooled == 0.0:
        return RatioEstimate(ratio, ratio, ratio, 0.0 if mean != 0 else 1.0, n, n, 0.0, float(df))
    se = math.sqrt(pooled / 4 * sum(1 / len(g) for g in groups))
    t_crit = float(t_ppf(0.5 + confidence / 2, df))
    p_value = float(2 * t_sf(abs(mean) / se, df))
    return RatioEstimate(ratio, math.exp(mean - t_crit * se), math.exp(mean + t_crit * se), p_value, n, n,
                         se, float(df))


def interval_at(log_ratio: float, se: float | None, df: float | None,
                confidence: float) -> tuple[float, float] | None:
    """Two-sided t interval of a ratio from its log estimate, standard error and degrees of freedom."""
    if se is None or df is None:
        return None
    if se == 0.0:
        return math.exp(log_ratio), math.exp(log_ratio)
    half = float(t_ppf(0.5 + confidence / 2, max(df, 1.0))) * se
    return math.exp(log_ratio - half), math.exp(log_ratio + half)


# -- bootstrap by repetition ------------------------------------------------------------
BOOTSTRAP_METHOD = "percentile bootstrap of log ratio, by repetition"
BOOTSTRAP_RESAMPLES = 4000


def bootstrap_ratio_ci(sample: list[float], baseline: list[float], confidence: float = 0.95,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval for the ratio of geometric means, resampling repetitions.

    Each group is resampled on its own (repetitions are the independent units; items within a
    cell are not), on log values. Percentile rather than BCa: on the log scale the statistic
    is near-symmetric, so BCa's bias and skew corrections are small, while its acceleration is
    estimated by a jackknife over the same 3-10 repetitions and is itself too noisy to trust.
    Shown beside Welch as a distribution-free cross-check; at small n it is known to be too
    narrow (see the module docstring), which the report says.
    """
    if len(sample) < 2 or len(baseline) < 2:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    log_s = np.log(np.asarray(sample, dtype=float))
    log_b = np.log(np.asarray(baseline, dtype=float))
    mean_s = log_s[rng.integers(0, len(log_s), (resamples, len(log_s)))].mean(axis=1)
    mean_b = log_b[rng.integers(0, len(log_b), (resamples, len(log_b)))].mean(axis=1)
    diffs = mean_s - mean_b
    alpha = (1 - confidence) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    return math.exp(float(low)), math.exp(float(high))


# -- many comparisons -------------------------------------------------------------------
def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone); None stays None."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(indexed)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


# -- effect sizes in words --------------------------------------------------------------
def effect_words(ratio: float, metric: str = "e2e") -> str:
    """'3.2% slower (small)'. Thresholds on |ratio-1|: <1% negligible, <5% small, <20% moderate,
    else large. Times read slower/faster, rates faster/slower; other metrics higher/lower."""
    change = ratio - 1
    size = abs(change)
    if size < 0.01:
        return f"{change:+.1%} (negligible)"
    word = "small" if size < 0.05 else "moderate" if size < 0.20 else "large"
    direction = direction_word(metric, change > 0)
    amount = f"{size:.1%}" if ratio < 2 else f"{ratio:.1f}×"
    return f"{amount} {direction} ({word})"


def log_sd(values: list[float]) -> float | None:
    """Sample standard deviation of log values (≈ the coefficient of variation)."""
    if len(values) < 2 or min(values) <= 0:
        return None
    return math.sqrt(_mean_var([math.log(v) for v in values])[1])


def fmt_seconds(value: float) -> str:
    """A duration in s, ms or µs, for tables and views."""
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def fmt_floor(width: float) -> str:
    """A noise floor (how far the A/A interval reaches from 1) in words: ±1.2%, or a factor when it
    is wider than the value itself (two noisy repetitions can give that)."""
    return f"±{width:.1%}" if width < 1 else f"a factor of {1 + width:.0f}"

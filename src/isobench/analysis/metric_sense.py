"""Which way a metric reads: a time (a higher ratio is slower), a rate (a higher ratio is faster)
or any other amount (higher or lower).

The harness's own times are known by their prefix. A workload's own metrics (``workload.<name>``)
are amounts unless the workload declares them in ``Workload.headline_metrics``: llm-generate's
TTFT and TPOT are times and its tokens/s a rate, so tokens/s at 0.9× the baseline reads "10%
slower", the same word as a TTFT at 1.1×.
"""

from __future__ import annotations

from functools import cache

TIME, RATE, AMOUNT = "time", "rate", "amount"
#: metrics that are times by their name: per-item, phase, set-up, cell and CPU seconds
TIME_PREFIXES = ("e2e", "phase.", "setup.", "cell.", "cpu.")


@cache
def declared_metrics() -> dict[str, str]:
    """``workload.<name>`` -> "time" or "rate", as the registered workloads declare them."""
    from isobench.workloads import WORKLOADS

    senses: dict[str, str] = {}
    for _, workload in WORKLOADS:
        for name, sense in workload.headline_metrics.items():
            senses.setdefault(f"workload.{name}", sense)
    return senses


def sense(metric: str) -> str:
    if metric.startswith(TIME_PREFIXES):
        return TIME
    if metric.startswith("workload."):
        return declared_metrics().get(metric, AMOUNT)
    return AMOUNT


def direction_word(metric: str, up: bool) -> str:
    """The word for a ratio above 1 (``up``) or below it."""
    kind = sense(metric)
    if kind == TIME:
        return "slower" if up else "faster"
    if kind == RATE:
        return "faster" if up else "slower"
    return "higher" if up else "lower"


def time_ratio(metric: str, ratio: float) -> float:
    """The ratio as a time's: a rate's is inverted, so above 1 is slower for every time or rate."""
    return 1.0 / ratio if sense(metric) == RATE and ratio > 0 else ratio

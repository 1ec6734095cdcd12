"""How a finding's estimates are written: a ratio with its interval, a value in its unit."""

from __future__ import annotations

from isobench.analysis.finding_spec import Check


def num(x: float) -> str:
    return f"{x:.3f}" if 0.001 <= abs(x) < 100 else f"{x:.3g}"


def fmt_ratio(ratio: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{num(ratio)}× (one repetition: no interval)"
    return f"{num(ratio)}× ({num(low)}–{num(high)})"


def fmt_value(value: float, low: float | None, high: float | None, check: Check, signed: bool = False) -> str:
    def f(x: float) -> str:
        scaled = x * check.scale
        text = f"{scaled:+.3g}" if signed else f"{scaled:.3g}"
        return text + (f" {check.unit}" if check.unit else "")

    if low is None or high is None:
        return f"{f(value)} (one repetition: no interval)"
    return f"{f(value)} ({f(low)} to {f(high)})"

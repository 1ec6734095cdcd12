"""The power rule: a finding reads "does not hold" only where its design could have seen the paper's effect.

A check's interval says what the data allow; it does not say what the data could have shown.
Three things stop a check from counting as evidence against a paper, each turning its verdict
into ``not testable by this design`` with the reason:

* **A fixed outcome.** An interval of zero width (every cell read the same value, e.g. a
  write-back count set by the kernel's 30-s timer) shows what the design fixed, not what the
  platform did: it is no evidence either way, whether it would have held or not.
* **Too little power.** Where the check names the paper's ``effect``, "does not hold" needs the
  interval to exclude that effect and the minimum detectable effect (MDE) to be no larger than
  the effect's distance from no effect. The MDE is the smallest true effect a two-sided 5% test
  finds 80% of the time, from the interval's own standard error and degrees of freedom:
  ``(t(0.975, df) + t(0.80, df)) × SE``, in log units for ratios (shown as a percentage).
* **A design limit** that no statistic sees (a core ratio the paper's effect hardly reaches, a
  capacity the tool chose): ``design_limit`` on the check or the finding says which.

A finding whose paper measured in another setting (``setting``) and that does not hold here
reads "not reproduced in this setting", in words that name both settings. Checks marked
``in_setting`` measure in the paper's setting (a GPU study, on a host that has one): where they
ran, they decide the finding, and this host's setting is named beside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from isobench.analysis.finding_spec import Check, Finding
from isobench.analysis.tdist import t_ppf

HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE = "holds", "does not hold", "inconclusive", "cannot be tested here"
DESIGN_UNTESTABLE = "not testable by this design"
NOT_IN_SETTING = "not reproduced in this setting"
#: the test the MDE is computed for: two-sided at ALPHA, with POWER
ALPHA, POWER = 0.05, 0.80


class Interval(Protocol):
    """A check's estimate (findings.Estimate): the interval and the spread it came from."""

    value: float
    low: float | None
    high: float | None
    scale: str
    se: float | None
    df: float | None
    shown: str


class Outcome(Protocol):
    """A check's result (findings.CheckResult), as far as the finding's verdict reads it."""

    what: str
    verdict: str
    reason: str
    repetitions_needed: int | None


def minimum_detectable(se: float | None, df: float | None) -> float | None:
    """The MDE in the interval's own units (log units for ratios); None without a spread."""
    if se is None or df is None or se <= 0:
        return None
    dof = max(df, 1.0)
    return float(t_ppf(1 - ALPHA / 2, dof) + t_ppf(POWER, dof)) * se


def _is_fixed(est: Interval) -> bool:
    if est.low is None or est.high is None:
        return False
    return est.low == est.high or math.isclose(est.low, est.high, rel_tol=1e-9)


def _reach_words(log_effect: float) -> str:
    """How far from no effect a ratio reaches, either way: "1.4%", or "2.5×" beyond a doubling."""
    factor = math.exp(abs(log_effect))
    return f"{factor:.3g}×" if factor >= 2 else f"{factor - 1:.1%}"


def _effect_words(effect: float) -> str:
    """A ratio effect as the papers give it: "+53.7%", or "6.7×" beyond a doubling or halving."""
    return f"{effect - 1:+.1%}" if 0.5 < effect < 2 else f"{effect:.3g}×"


def _amount_words(amount: float, check: Check) -> str:
    return f"{abs(amount) * check.scale:.3g}" + (f" {check.unit}" if check.unit else "")


def _distance(effect: float, scale: str) -> float:
    """How far the paper's effect lies from no effect: 1 for ratios (in log units), 0 for amounts."""
    return abs(math.log(effect)) if scale == "log" else abs(effect)


@dataclass
class Judged:
    verdict: str
    reason: str
    #: the MDE on the check's own scale: a ratio (1.014 = 1.4%) or an amount in the metric's unit
    mde: float | None
    #: "could see ≥ 1.4%, the paper's +53.7%", shown beside the estimate ("" without an MDE)
    words: str


def judge(check: Check, est: Interval, verdict: str, reason: str) -> Judged:
    """The check's verdict after the fixed-outcome and power rules, with its MDE."""
    mde_raw = minimum_detectable(est.se, est.df)
    log = est.scale == "log"
    mde = (math.exp(mde_raw) if log else mde_raw) if mde_raw is not None else None
    see = (_reach_words(mde_raw) if log else _amount_words(mde_raw, check)) if mde_raw is not None else ""
    paper = ""
    if check.effect is not None:
        paper = _effect_words(check.effect) if log else _amount_words(check.effect, check)
    words = ", ".join(x for x in (f"could see ≥ {see}" if see else "", f"the paper's {paper}" if paper else "") if x)
    if _is_fixed(est):
        return Judged(DESIGN_UNTESTABLE, f"the outcome is fixed: {est.shown}, an interval of zero width "
                                         "(every repetition read the same), so it is no evidence either way", mde, words)
    if verdict != FAILS or check.effect is None or est.low is None or est.high is None:
        return Judged(verdict, reason, mde, words)
    if est.low <= check.effect <= est.high:
        return Judged(DESIGN_UNTESTABLE, f"the interval includes the paper's {paper}", mde, words)
    if mde_raw is None or mde_raw > _distance(check.effect, est.scale):
        could = f"could only see effects ≥ {see}" if see else "its power is unknown"
        return Judged(DESIGN_UNTESTABLE, f"{could}; the paper's is {paper}", mde, words)
    return Judged(verdict, reason, mde, words)  # the shown estimate carries the MDE beside the paper's


def apply_design_limits(finding: Finding, checks: list[Check], results: Sequence[Outcome]) -> None:
    """A check that reads "does not hold" where the design itself decides (``design_limit`` on
    the check or the finding) reads "not testable by this design", with that text."""
    for check, result in zip(checks, results, strict=False):
        limit = check.design_limit or finding.design_limit
        if limit and result.verdict == FAILS:
            result.verdict, result.reason, result.repetitions_needed = DESIGN_UNTESTABLE, limit.strip(), None


@dataclass
class Combined:
    verdict: str
    reason: str
    repetitions_needed: int | None
    #: the verdict's own sentence where it has one ("not reproduced on the CPU; ...")
    words: str = ""


def _named(parts: Sequence[Outcome]) -> str:
    return "; ".join(f"{r.what} ({r.reason})" for r in parts)


def combine(finding: Finding, checks: list[Check], results: Sequence[Outcome], absent: str | None) -> Combined:
    """The finding's verdict: a resolved "does not hold" decides; all tested parts holding is
    "holds", unless a part was not testable by this design: a claim is all its parts, so the
    parts that held cannot stand for one the design could not see, and the finding reads "not
    testable by this design" with what held named; a finding left with only parts the design (or
    the host) cannot test says so; anything else is inconclusive. Parts left out are named in the
    reason. Where checks in the paper's own setting (``in_setting``) were tested, they alone
    decide, and what this host's setting showed is named beside them."""
    apply_design_limits(finding, checks, results)
    if finding.setting is not None:
        own = [(c, r) for c, r in zip(checks, results, strict=False) if c.in_setting]
        if any(r.verdict != UNTESTABLE for _, r in own):
            decided = combine(finding.model_copy(update={"setting": None}), [c for c, _ in own],
                              [r for _, r in own], absent)
            here = [r for c, r in zip(checks, results, strict=False) if not c.in_setting and r.verdict != UNTESTABLE]
            if here:
                decided.reason += f"; on the {finding.setting.here}: " + "; ".join(
                    f"{r.what}: {r.verdict}" for r in here)
            if decided.verdict in (HOLDS, FAILS):
                decided.words = f"{decided.verdict} on the {finding.setting.paper}"
            return decided
    tested = [r for r in results if r.verdict in (HOLDS, FAILS, INCONCLUSIVE)]
    by_design = [r for r in results if r.verdict == DESIGN_UNTESTABLE]
    by_host = [r for r in results if r.verdict == UNTESTABLE]
    needed, words = None, ""
    if not tested and by_design:
        verdict, reason = DESIGN_UNTESTABLE, "; ".join(dict.fromkeys(f"{r.what}: {r.reason}" for r in by_design))
    elif not tested:
        verdict = UNTESTABLE
        reason = absent or "; ".join(dict.fromkeys(r.reason for r in by_host)) or "no checks"
    elif any(r.verdict == FAILS for r in tested):
        verdict = FAILS
        reason = "; ".join(f"{r.what}: {r.reason}" for r in tested if r.verdict == FAILS)
        if finding.setting is not None:
            verdict = NOT_IN_SETTING
            words = (f"not reproduced on the {finding.setting.here}; "
                     f"the {finding.setting.paper} setting is not tested here")
    elif all(r.verdict == HOLDS for r in tested) and by_design:
        verdict, reason = DESIGN_UNTESTABLE, "held: " + _named(tested)
    elif all(r.verdict == HOLDS for r in tested):
        verdict, reason = HOLDS, "every tested part holds"
    else:
        verdict = INCONCLUSIVE
        open_parts = [r for r in tested if r.verdict == INCONCLUSIVE]
        known = [r.repetitions_needed for r in open_parts if r.repetitions_needed]
        needed = max(known) if known and len(known) == len(open_parts) else None
        reason = "; ".join(f"{r.what}: {r.reason}" for r in open_parts)
    if by_design and tested:
        reason += f"; {DESIGN_UNTESTABLE}: " + _named(by_design)
    if by_host and (tested or by_design):
        reason += "; not tested here: " + _named(by_host)
    return Combined(verdict, reason, needed, words)


def t_spread(values: list[float]) -> tuple[float | None, float | None]:
    """The standard error and degrees of freedom of a mean over cells (None: one value)."""
    if len(values) < 2:
        return None, None
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance / len(values)), float(len(values) - 1)


def welch_spread(sample: list[float], reference: list[float]) -> tuple[float | None, float | None]:
    """Welch's standard error and degrees of freedom of a difference of means (None: a side of one)."""
    if len(sample) < 2 or len(reference) < 2:
        return None, None
    va, vb = (t_spread(side)[0] ** 2 for side in (sample, reference))  # type: ignore[operator]
    pieces = (va**2 / (len(sample) - 1) if va else 0.0) + (vb**2 / (len(reference) - 1) if vb else 0.0)
    return math.sqrt(va + vb), ((va + vb) ** 2 / pieces if pieces else 1.0)

"""Student's t and the noncentral t, through ``scipy.special``.

Importing ``scipy.stats`` takes about 1.3 s here (its hundred distributions), on every command
that analyses, and before a bad flag can even be refused; ``scipy.special`` holds the same
functions and loads in a third of that. tests/test_tdist.py checks both agree.
"""

from __future__ import annotations

from scipy import special


def t_ppf(q: float, df: float) -> float:
    """The quantile: P(T <= x) = q."""
    return float(special.stdtrit(df, q))


def t_sf(x: float, df: float) -> float:
    """P(T > x), by symmetry the CDF at -x (exact in the upper tail, where 1 - CDF is not)."""
    return float(special.stdtr(df, -x))


def nct_cdf(x: float, df: float, nc: float) -> float:
    return float(special.nctdtr(df, nc, x))


def nct_sf(x: float, df: float, nc: float) -> float:
    return 1.0 - nct_cdf(x, df, nc)

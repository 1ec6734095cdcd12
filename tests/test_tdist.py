"""The t quantiles and tails the verdicts use agree with scipy.stats, which the CLI no longer
imports (1.3 s on every command that analyses)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scipy import stats

from isobench.analysis.tdist import nct_cdf, nct_sf, t_ppf, t_sf


@pytest.mark.parametrize("df", [1.0, 2.0, 4.5, 11.0, 57.3, 1e4])
def test_t_quantiles_and_tails_match_scipy_stats(df: float) -> None:
    for q in (0.5, 0.8, 0.9, 0.95, 0.975, 0.995):
        assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9)
    for x in (-3.0, 0.0, 0.7, 2.1, 9.0):
        assert t_sf(x, df) == pytest.approx(stats.t.sf(x, df), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("df,nc", [(3.0, 0.5), (10.0, 2.0), (25.5, -1.0)])
def test_noncentral_t_matches_scipy_stats(df: float, nc: float) -> None:
    for x in (-2.0, 0.0, 2.2):
        assert nct_cdf(x, df, nc) == pytest.approx(stats.nct.cdf(x, df, nc), rel=1e-7, abs=1e-12)
        assert nct_sf(x, df, nc) == pytest.approx(stats.nct.sf(x, df, nc), rel=1e-6, abs=1e-9)


def test_the_cli_and_its_analysis_do_not_import_scipy_stats() -> None:
    code = "import sys, isobench.cli, isobench.analysis.compare, isobench.analysis.findings\n" \
           "print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]

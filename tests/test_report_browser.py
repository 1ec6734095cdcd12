"""The HTML report in a real headless Chromium: renders without console errors, fits 1280 px."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import report_store
from tests.browser import Browser, chromium_binary
from tests.conftest import run_cli

#: where the first screen is saved for a reviewer (CI can collect it)
SCREENSHOT = Path(os.environ.get("ISOBENCH_SCREENSHOT_DIR", "/tmp/isobench-test-report")) / "report-first-screen.png"


def need_chromium() -> None:
    if chromium_binary() is None:
        pytest.skip("host lacks chromium (./isobench.sh setup installs it)")


def test_report_renders_in_chromium_without_errors(tmp_path: Path) -> None:
    need_chromium()
    store = report_store.build(tmp_path / "study")
    report = tmp_path / "report.html"
    result = run_cli("report", str(store), "-o", str(report))
    assert result.returncode == 0, result.stderr
    bad = tmp_path / "bad.html"
    bad.write_text("<p>x</p><script>console.error('boom'); missing();</script>")
    with Browser(width=1280, height=900) as browser:
        browser.open(bad.as_uri())  # the detector itself must see errors, or the check below proves nothing
        assert any("boom" in p for p in browser.problems()) and any("missing" in p for p in browser.problems())
        browser.open(report.as_uri())
        assert browser.problems() == []
        assert browser.evaluate("document.title") == "isobench report: known"
        # Legible at 1280 px: nothing wider than the window, every figure drawn at a readable width.
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
        widths = browser.evaluate("[...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)")
        assert len(widths) >= 6 and min(widths) >= 500
        headline = browser.evaluate("document.querySelector('ul.headline li').innerText")
        assert "1.24× baremetal" in headline
        # Every hint's evidence link lands on an element of the page.
        assert browser.evaluate("[...document.querySelectorAll('.hint a')].every(a => "
                                "document.getElementById(a.getAttribute('href').slice(1)))")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 20_000
    shutil.copy(SCREENSHOT, tmp_path / "first-screen.png")

"""Hostile study files through the real CLI (tests/hostile/): each ends in a run whose strings show
verbatim in the terminal and escaped in every other output, or in exit 2 with one line naming the
file, the field and the fix. Never a traceback; nothing written outside the results directory."""

from __future__ import annotations

import csv
import html
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from isobench.report.plaintext import Markup, PlainConsole, csv_cell, markup, md, md_fence, plain
from isobench.runner.execute import MAX_RECORD_BYTES, _ChannelReader

HOSTILE = Path(__file__).parent / "hostile"
FILES = sorted(HOSTILE.glob("*.yaml"))
ISOBENCH = str(Path(sys.executable).with_name("isobench"))
PWN = Path("/tmp/pwn")


def _expect(path: Path) -> tuple[str, str | None]:
    """('ok', None) or ('error', field) from the file's `# expect:` line ('-': no field to name)."""
    for line in path.read_bytes().decode(errors="replace").splitlines():
        if line.startswith("# expect:"):
            kind, _, field = line.removeprefix("# expect:").strip().partition(" ")
            return kind, (None if field in ("", "-") else field)
    raise AssertionError(f"{path.name} has no `# expect:` line")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run([ISOBENCH, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _squash(text: str) -> str:
    """Text without the table borders and the line breaks rich puts in long cells."""
    return re.sub(r"[\s│┃]", "", text)


def _labels(path: Path) -> list[str]:
    study = yaml.safe_load(path.read_text())
    return [e["label"] for key in ("workloads", "platforms") for e in study[key] if e.get("label")]


def test_the_suite_is_large_enough() -> None:
    assert len(FILES) >= 30
    assert sum(_expect(p)[0] == "ok" for p in FILES) >= 5  # successes too, not only refusals


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_plan(path: Path, tmp_path: Path) -> None:
    kind, field = _expect(path)
    PWN.unlink(missing_ok=True) if PWN.is_file() and PWN.stat().st_uid == os.getuid() else None
    result = _cli("plan", str(path), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Error:" not in output.replace("error:", "")
    assert list(tmp_path.iterdir()) == [], "plan wrote into the working directory"
    assert not PWN.exists()
    if kind == "error":
        assert result.returncode == 2, output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and result.stdout == "", output
        line = lines[0]
        assert line.startswith(f"error: {path}: "), line
        if field:
            assert line.startswith(f"error: {path}: {field}"), line
        assert "(fix: " in line and len(line) < 400, line
    else:
        assert result.returncode == 0, output
        for label in _labels(path):  # shown as written: no markup, no emoji codes
            assert _squash(label) in _squash(result.stdout), label


def test_run_summary_reports_export(tmp_path: Path) -> None:
    """A study with hostile labels runs; every output shows them as text."""
    study = HOSTILE / "run_labels.yaml"
    labels = _labels(study)
    out = tmp_path / "out"
    run = _cli("run", str(study), "--out", str(out), cwd=tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    summary = _cli("summary", str(out), cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    for text in (run.stdout, summary.stdout):
        for label in labels:
            assert _squash(label) in _squash(text), label

    assert _cli("report", str(out), "--format", "html", cwd=tmp_path).returncode == 0
    page = (out / "report.html").read_text()
    for label in labels:
        assert html.escape(label) in page
    assert "<img src=x" not in page and "<script>alert" not in page
    assert "$\\foo$" in page or html.escape("$\\foo$") in page  # the figure's tick label, as text

    assert _cli("report", str(out), "--format", "md", cwd=tmp_path).returncode == 0
    text = (out / "report.md").read_text()
    for label in labels:
        assert md("x" + label)[1:] in text  # escaped as text inside a line
    fence = next(line for line in text.splitlines() if line.startswith("```"))
    assert len(fence.removesuffix("yaml")) > 3  # the study's own ``` cannot close the block
    rendered = text.split(fence)[0]  # before the study file's code block, which shows it raw
    assert "<img" not in rendered and "<script>" not in rendered

    exported = _cli("export", str(out), "--format", "csv", cwd=tmp_path)  # to stdout
    assert exported.returncode == 0
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    platforms = {row["platform"] for row in rows}
    assert "'baremetal/=HYPERLINK(\"x\")" not in platforms  # "baremetal/..." does not start a formula
    assert all(not row[k].startswith(("=", "+", "@")) for row in rows for k in row)
    assert any("=HYPERLINK" in p for p in platforms)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_markup_is_escaped_and_plain_on_any_console() -> None:
    from rich.console import Console

    console = PlainConsole(file=io.StringIO(), width=200)
    console.print(markup("[red]{}[/] {}", "a[/x]\\", ":smile: [bold]b\\"))
    console.print("c[/y] :smile:")
    assert console.file.getvalue().splitlines() == ["a[/x]\\ :smile: [bold]b\\", "c[/y] :smile:"]
    other = Console(file=io.StringIO(), width=200)  # plain() is plain text on any console
    other.print(plain("c[/y] :smile:"))
    assert other.file.getvalue() == "c[/y] :smile:\n"
    assert isinstance(markup("[b]{}[/]", "x"), Markup)


def test_csv_cells_are_inert_but_numbers_stay_numbers() -> None:
    assert csv_cell('=HYPERLINK("x")') == "'=HYPERLINK(\"x\")"
    assert [csv_cell(v) for v in ("+1", "-cmd", "@SUM(A1)", "\tx")] == ["'+1", "'-cmd", "'@SUM(A1)", "'\tx"]
    assert csv_cell(-1.5) == -1.5 and csv_cell(3) == 3 and csv_cell("plain") == "plain"


def test_markdown_text_and_fences() -> None:
    assert md("<script>x</script>") == "&lt;script&gt;x&lt;/script&gt;"
    assert md("a|b`c`[l](u)") == "a\\|b\\`c\\`\\[l\\](u)"
    assert md("# h") == "\\# h" and md("a\nb") == "a b"
    fence, body, close = md_fence("x\n````\ny", "yaml")
    assert fence == "`````yaml" and close == "`````" and body == "x\n````\ny"


def _read(data: bytes) -> _ChannelReader:
    reader = _ChannelReader(io.BytesIO(data))
    reader.run()
    return reader


@pytest.mark.parametrize("data, problem", [
    (b'{"type":"hello"}\n42\n', "record 2 is a JSON int"),
    (b"null\n", "record 1 is a JSON NoneType"),
    (b'{"type":"setup","name":1,"dur":"x"}\n', "(setup) needs"),
    (b'{"type":"item","e2e":1,"phases":{"a":"b"}}\n', "(item) needs"),
    (b'{"type":"item","e2e":true,"phases":{}}\n', "(item) needs"),
    (b'{"type":"done","info":[1]}\n', "(done) has a `info`"),
    (b'{"type":"done","run_s":"1"}\n', "(done) has a `run_s`"),
    (b'{"type":["done"]}\n', "has no string `type`"),
    (b'{"type":"run_start","start_line_wait_s":"1e9"}\n', "(run_start) has a `start_line_wait_s`"),
    (b"x" * (3 * MAX_RECORD_BYTES) + b'\n{"type":"done"}\n', "longer than 64 KiB"),
])
def test_a_malformed_channel_fails_with_its_reason(data: bytes, problem: str) -> None:
    reader = _read(data)
    assert reader.problem is not None and problem in reader.problem
    assert all(isinstance(r, dict) for r in reader.records)


def test_a_good_channel_is_read_whole() -> None:
    reader = _read(b'{"type":"hello"}\nnot json\n{"type":"item","e2e":0.1,"phases":{"a":0.1}}\n'
                   b'{"type":"done","run_s":0.2}\n')
    assert reader.problem is None and len(reader.records) == 3 and reader.garbage == 1

"""A 5,000-character value in a study gives one short error line that still names the file, the
field and the fix (errors.UserError bounds every echoed value in one place); and the front door's
small defects stay fixed: `benchmarks/fuzz_study.py --help`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from isobench.errors import VALUE_LIMIT, UserError, bounded
from isobench.studyfile import load_study_text
from tests.conftest import run_cli, write_study

LONG = "x" * 5000
#: the longest line (less the study file's path) a 5,000-character value may give: the message
#: and its fix (the fix of an unknown platform lists the registered ones), not the value
LINE_LIMIT = 400
SPIN = {"name": "cpu-spin", "params": {"iterations": 2, "work": 1000}}


def study_with(field: str, value: str = LONG) -> dict:
    """A small study whose ``field`` holds ``value``."""
    platforms: list[dict] = [{"name": "baremetal"}, {"name": "docker"}]
    study: dict = {"name": "long", "workloads": [SPIN], "platforms": platforms}
    if field == "baseline":
        study["baseline"] = value
    elif field == "name":
        platforms[1] = {"name": value}
    else:  # runtime: the OCI platform names the runtimes it drives
        platforms[1] = {"name": "oci", "runtime": value}
    return study


@pytest.mark.parametrize(("field", "named"), [("baseline", "baseline"), ("name", "platforms[1].name"),
                                              ("runtime", "runtime")])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_long_value_gives_one_short_line(tmp_path: Path, field: str, named: str, command: str) -> None:
    study = write_study(tmp_path / "long.yaml", study_with(field))
    out = tmp_path / "out"
    result = run_cli(command, str(study), *(["--out", str(out)] if command == "run" else []), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr[:500]
    lines = result.stderr.strip().splitlines()
    line = lines[0]
    assert len(lines) == 1 and len(line) - len(str(study)) < LINE_LIMIT, (len(result.stderr), result.stderr[:500])
    assert line.startswith(f"error: {study}: ") and named in line and "(fix: " in line
    assert "x" * 70 in line and "(5000 characters)" in line  # the value's start, and how long it was
    assert result.stdout == "" and not out.exists()  # nothing written
    short = write_study(tmp_path / "short.yaml", study_with(field, "x"))
    with pytest.raises(UserError) as err:
        load_study_text(short.read_text(), str(study), check_host=False)
    assert len(line) <= len(str(err.value)) + VALUE_LIMIT + 20  # the value's part is bounded


def test_the_error_bounds_its_parts() -> None:
    spaced = "word " * 1000  # no single long token: the ceiling on the message holds it
    err = UserError(f"unknown platform {spaced!r}", file="s.yaml", field="platforms[0].name", fix=f"use {spaced}")
    line = str(err)
    assert len(line) < 1200 and "\n" not in line  # 600 + 400 + the rest: a long message stays whole
    assert line.startswith("error: s.yaml: platforms[0].name: unknown platform 'word")
    assert "characters cut]" in line and "(fix: use word" in line
    assert str(UserError("a\nb\x1b[31m", field="f")) == "error: f: a\\nb\\x1b[31m"  # one line, no escapes run


def test_short_values_and_repr_quotes_are_kept() -> None:
    assert bounded("baseline 'aa' names no platform entry", 240) == "baseline 'aa' names no platform entry"
    cut = bounded(f"unknown {'y' * 200!r}", 240)
    token = cut.split(" ", 1)[1]
    assert token.startswith("'yyy") and token.endswith("characters)'") and len(token.split(" ")[0]) <= VALUE_LIMIT
    assert bounded(cut, 240) == cut  # a cut value is not cut again


def test_fuzz_study_help_and_bad_count() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_study.py"
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "usage:" in shown.stdout and "examples" in shown.stdout, shown.stderr
    assert "Traceback" not in shown.stderr
    bad = subprocess.run([sys.executable, str(script), "many"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "invalid" in bad.stderr
    few = subprocess.run([sys.executable, str(script), "3"], capture_output=True, text=True, timeout=120)
    assert few.returncode == 0 and "3 study files, 0 tracebacks" in few.stdout, few.stdout + few.stderr

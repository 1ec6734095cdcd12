"""`isobench history`: a comparison followed over runs, its change points (Apache Otava) and what
differed at each. On six real runs of a tiny study whose `cand` entry gets `slowdown: 0.2` from
the fourth run on; on synthetic series for the attribution and the output shapes; and the bad
input that must end in exit 2 with nothing written."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from rich.console import Console

from isobench.analysis.history import (
    ABSENT,
    Point,
    Run,
    Series,
    SeriesKey,
    analyse_history,
    attribute,
    detect,
    history_document,
    min_magnitude,
    starts_change,
)
from isobench.errors import UserError
from isobench.report.history_html import print_history, render_history_html
from isobench.store import history_db
from tests.conftest import need_root, run_cli, write_study

SPIN = {"name": "cpu-spin", "params": {"iterations": 10, "work": 150_000}}
RUNS = 6
KNOB_FROM = 4  # the run from which `cand` carries the knob


def study(with_knob: bool) -> dict:
    """Baseline, an A/A entry, and `cand`, which is the baseline again until it gets the knob. A
    small design written out: one cell at a time, four rounds, no warm-up (about 5 s a run)."""
    cand = {"name": "baremetal", "label": "cand", **({"knobs": {"slowdown": 0.2}} if with_knob else {})}
    return {"name": "hist", "workloads": [SPIN],
            "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}, cand],
            "baseline": "baremetal", "repetitions": 4, "warmup": 0, "seed": 7, "probes": {}}


@pytest.fixture(scope="module")
def six_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The study run six times, each run appended to one history database."""
    need_root()
    tmp = tmp_path_factory.mktemp("history")
    history, directories = tmp / "history.sqlite", []
    for number in range(1, RUNS + 1):
        path = write_study(tmp / f"study{number}.yaml", study(number >= KNOB_FROM))
        out = tmp / f"run{number}"
        result = run_cli("run", str(path), "--out", str(out), "--history", str(history), timeout=300, check=True)
        assert f"appended to {history}" in result.stderr, result.stderr
        directories.append(out)
    return history, directories


def series_of(document: dict, entry: str, metric: str) -> dict:
    return next(s for s in document["series"] if s["entry"] == entry and s["metric"] == metric)


@pytest.mark.slow
def test_a_knob_change_is_found_at_its_run_and_attributed_to_the_knob(six_runs: tuple[Path, list[Path]]) -> None:
    """Followed on CPU time per item, which the injected work moves by its 20% whatever else runs:
    on a shared test host wall time (e2e) also waits for neighbours, and another job's burst made
    one run's A/A read 1.23x in e2e, a real change of the host's state that would blur this check."""
    history, directories = six_runs
    result = run_cli("history", "--history", str(history), "--metric", "cpu.per_item", "--metric", "e2e", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [r["run"] for r in document["runs"]] == list(range(1, RUNS + 1))
    assert [r["directory"] for r in document["runs"]] == [str(d.resolve()) for d in directories]
    cand = series_of(document, "cand", "cpu.per_item")
    assert len(cand["points"]) == RUNS
    assert [cp["run"] for cp in cand["change_points"]] == [KNOB_FROM], cand
    change = cand["change_points"][0]
    assert 1.12 < change["after"] / change["before"] < 1.3, change
    first = change["attribution"][0]
    assert first == {"fact": "knob slowdown", "before": ABSENT, "after": "0.2", "steady": True}, change
    # the knob is a fact of each point, not part of the key: one series, the knob on the points after it
    assert ["knob slowdown" in p["facts"] for p in cand["points"]] == [n >= KNOB_FROM for n in range(1, RUNS + 1)]
    aa = series_of(document, "aa", "cpu.per_item")
    assert len(aa["points"]) == RUNS and aa["change_points"] == [], aa
    assert all(p["is_aa"] for p in aa["points"]) and aa["min_magnitude"] >= 0.02
    assert all(len(series_of(document, entry, "e2e")["points"]) == RUNS for entry in ("aa", "cand"))
    text = run_cli("history", "--history", str(history), "--metric", "cpu.per_item", check=True).stdout
    assert f"change at run {KNOB_FROM}" in text and "knob slowdown: - → 0.2" in text, text


@pytest.mark.slow
def test_directories_give_the_history_the_database_holds(six_runs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    history, directories = six_runs
    page = tmp_path / "history.html"
    # in shuffled order: runs are ordered by their start, not by the arguments
    shuffled = [str(d) for d in directories[3:] + directories[:3]]
    result = run_cli("history", *shuffled, "--metric", "cpu.per_item", "--json", "--html", str(page))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    cand = series_of(document, "cand", "cpu.per_item")
    assert [cp["run"] for cp in cand["change_points"]] == [KNOB_FROM]
    # a run both in the database and given as a directory counts once
    both = json.loads(run_cli("history", "--history", str(history), str(directories[-1]), "--metric",
                              "cpu.per_item", "--json", check=True).stdout)
    assert len(both["runs"]) == RUNS
    html = page.read_text()
    assert html.count("<svg") == 2 and "knob slowdown: - → 0.2" in html and "<script" not in html


@pytest.mark.slow
def test_fail_on_change_passes_when_the_newest_run_starts_none(six_runs: tuple[Path, list[Path]]) -> None:
    history, _ = six_runs
    result = run_cli("history", "--history", str(history), "--metric", "cpu.per_item", "--fail-on-change")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "starts no change" in result.stderr and "change at run 4" in result.stdout


# -- synthetic series ---------------------------------------------------------------------------

KEY = SeriesKey("s", "resnet-infer", "docker", "e2e", "cpu, 2 cores, x86_64")
BASE_FACTS = {"kernel": "6.1.0-18", "runc": "1.1.5", "torch": "2.14.1", "hostname": "ci-1"}


def synthetic_runs(ratios: list[float], facts: list[dict[str, str]], floor: float = 0.01,
                   key: SeriesKey = KEY) -> list[Run]:
    runs = []
    for number, (ratio, known) in enumerate(zip(ratios, facts, strict=True), start=1):
        run = Run(f"s@{number}", "s", f"/results/run{number}", 1_000_000.0 + 3600 * number)
        run.points = [Point(key, ratio, ratio * 0.99, ratio * 1.01, 6, "equivalent", False, floor, 0.02,
                            "docker/runc", dict(known), run.run_id, run.started_at, run.directory)]
        runs.append(run)
    return runs


STEADY = [1.01, 0.99, 1.00, 1.005, 0.995]
STEP = [1.01, 0.99, 1.00, 1.20, 1.21, 1.19]


def test_attribution_names_what_differed_steady_facts_first() -> None:
    facts = [dict(BASE_FACTS, hostname=f"ci-{n}") for n in range(6)]  # a fresh CI machine each run
    for known in facts[3:]:
        known.update(kernel="6.1.0-21", runc="1.1.12")
    facts[4]["torch"] = "2.15.0"  # after the change, and only in one run: no cause of it
    runs = synthetic_runs(STEP, facts)
    (series,) = analyse_history(runs)
    assert [cp.index for cp in series.change_points] == [3]
    changes = series.change_points[0].attribution
    assert [(c.fact, c.before, c.after, c.steady) for c in changes] == [
        ("runc", "1.1.5", "1.1.12", True), ("kernel", "6.1.0-18", "6.1.0-21", True),
        ("hostname", "ci-2", "ci-3", False)]  # torch did not differ between runs 3 and 4


def test_attribution_of_a_fact_that_appears() -> None:
    facts = [dict(BASE_FACTS) for _ in STEP]
    for known in facts[3:]:
        known["knob cpus"] = "1.5"
    changes = attribute([run.points[0] for run in synthetic_runs(STEP, facts)], 3)
    assert [(c.fact, c.before, c.after, c.steady) for c in changes] == [("knob cpus", ABSENT, "1.5", True)]


def test_steady_series_and_short_series_have_no_change() -> None:
    (steady,) = analyse_history(synthetic_runs(STEADY, [BASE_FACTS] * len(STEADY)))
    assert steady.change_points == []
    (short,) = analyse_history(synthetic_runs([1.0, 1.5], [BASE_FACTS] * 2))
    assert short.change_points == []  # a t-test needs three runs


def test_a_change_inside_the_noise_floor_is_not_called() -> None:
    ratios = [1.00, 1.002, 0.998, 1.06, 1.062, 1.058]  # a clean 6% step
    (quiet,) = analyse_history(synthetic_runs(ratios, [BASE_FACTS] * 6, floor=0.01))
    assert [cp.index for cp in quiet.change_points] == [3]
    (noisy,) = analyse_history(synthetic_runs(ratios, [BASE_FACTS] * 6, floor=0.08))
    assert noisy.min_magnitude == pytest.approx(0.08) and noisy.change_points == []


def test_min_magnitude_is_the_median_floor_and_at_least_the_margin() -> None:
    points = [r.points[0] for r in synthetic_runs(STEADY, [BASE_FACTS] * 5)]
    for point, floor in zip(points, [0.01, 0.30, 0.05, 0.04, None], strict=True):
        point.noise_floor = floor
    assert min_magnitude(points) == pytest.approx(0.045)  # one noisy run does not set it
    for point in points:
        point.noise_floor = 0.005
    assert min_magnitude(points) == pytest.approx(0.02)
    for point in points:
        point.noise_floor = None
    assert min_magnitude(points) == pytest.approx(0.02)


def test_the_newest_run_starting_a_change() -> None:
    ratios = [1.00, 1.01, 0.99, 1.005, 0.995, 1.25]
    runs = synthetic_runs(ratios, [BASE_FACTS] * 5 + [dict(BASE_FACTS, kernel="6.1.0-21")])
    (series,) = analyse_history(runs)
    assert starts_change(series, runs[-1]) is not None
    assert starts_change(series, runs[-2]) is None
    assert series.change_points[0].attribution[0].fact == "kernel"


def test_json_shape() -> None:
    runs = synthetic_runs(STEP, [BASE_FACTS] * 3 + [dict(BASE_FACTS, runc="1.1.12")] * 3)
    document = history_document(runs, analyse_history(runs))
    assert set(document) == {"parameters", "runs", "series"}
    assert document["parameters"]["max_pvalue"] == 0.005 and "otava" in document["parameters"]["detector"]
    assert [r["run"] for r in document["runs"]] == [1, 2, 3, 4, 5, 6]
    (series,) = document["series"]
    assert {k: series[k] for k in ("study", "workload", "entry", "metric", "host", "variant")} == \
        {"study": "s", "workload": "resnet-infer", "entry": "docker", "metric": "e2e",
         "host": "cpu, 2 cores, x86_64", "variant": ""}
    assert series["newest_run_starts_change"] is False
    assert [p["ratio"] for p in series["points"]] == STEP and series["points"][0]["facts"] == BASE_FACTS
    (change,) = series["change_points"]
    assert change["run"] == 4 and change["index"] == 3 and change["change"] == pytest.approx(0.2, abs=0.01)
    assert change["attribution"] == [{"fact": "runc", "before": "1.1.5", "after": "1.1.12", "steady": True}]
    json.dumps(document)  # all of it is JSON


def test_text_shape_and_plain_user_strings() -> None:
    key = SeriesKey("s", "w[bold]x[/]", "docker:smile:", "e2e", "cpu, 2 cores, x86_64")
    runs = synthetic_runs(STEP, [BASE_FACTS] * 3 + [dict(BASE_FACTS, kernel="[red]6.2[/]")] * 3, key=key)
    console = Console(record=True, width=220)
    print_history(runs, analyse_history(runs), console)
    text = console.export_text()
    assert "6 run(s) of s" in text
    row = next(line for line in text.splitlines() if "docker:smile:" in line)
    assert "w[bold]x[/]" in row and "1.190 (run 6)" in row and "run 4: +20.0%" in row, row
    assert "change at run 4" in text and "kernel: 6.1.0-18 → [red]6.2[/]" in text, text
    html = render_history_html(runs, analyse_history(runs))
    assert "[red]6.2[/]" in html and "w[bold]x[/]" in html and html.count("<svg") == 1


def test_a_missing_otava_is_one_line_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "otava.analysis", None)  # the import then fails
    with pytest.raises(UserError) as caught:
        detect(Series(KEY, [r.points[0] for r in synthetic_runs(STEP, [BASE_FACTS] * 6)]))
    assert "pip install --no-deps apache-otava==0.8.0" in str(caught.value) and "\n" not in str(caught.value)


# -- the gate and bad input on the command line ---------------------------------------------------

def write_history(path: Path, runs: list[Run]) -> Path:
    for run in runs:
        history_db.append_run(path, {"run_id": run.run_id, "study": run.study, "directory": run.directory,
                                     "started_at": run.started_at}, [p.record() for p in run.points])
    return path


def test_fail_on_change_exit_codes(tmp_path: Path) -> None:
    ratios = [1.00, 1.01, 0.99, 1.005, 0.995, 1.25]
    runs = synthetic_runs(ratios, [BASE_FACTS] * 5 + [dict(BASE_FACTS, runc="1.1.12")])
    history = write_history(tmp_path / "h.sqlite", runs)
    tripped = run_cli("history", "--history", str(history), "--fail-on-change")
    assert tripped.returncode == 1, tripped.stdout + tripped.stderr
    assert "change at run 6" in tripped.stdout  # the table still goes to stdout
    assert "fail-on-change: the newest run (run 6, /results/run6) starts a change" in tripped.stderr
    assert "runc: 1.1.5 → 1.1.12" in tripped.stderr
    as_json = run_cli("history", "--history", str(history), "--fail-on-change", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["series"][0]["newest_run_starts_change"]
    assert run_cli("history", "--history", str(history)).returncode == 0  # no gate: a change is a finding
    # one more run at the new level: the change is history now, the newest run starts none
    later = synthetic_runs([1.0] * 6 + [1.24], [BASE_FACTS] * 7)[-1]
    write_history(history, [later])
    passed = run_cli("history", "--history", str(history), "--fail-on-change")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "change at run 6" in passed.stdout and "starts no change" in passed.stderr


def test_appending_a_run_again_replaces_it(tmp_path: Path) -> None:
    runs = synthetic_runs(STEADY, [BASE_FACTS] * 5)
    history = write_history(tmp_path / "h.sqlite", runs)
    runs[0].points[0].ratio = 1.5
    write_history(history, runs[:1])
    loaded = history_db.load_runs(history)
    assert len(loaded) == 5 and loaded[0]["points"][0]["ratio"] == 1.5


def newer_history(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(history_db.SCHEMA)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(history_db.HISTORY_SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    return path


def one_error_line(result: object) -> str:
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, result  # type: ignore[attr-defined]
    assert lines[0].startswith("error: ") and "(fix: " in lines[0], lines
    return lines[0]


def test_a_newer_history_file_is_refused(tmp_path: Path) -> None:
    history = newer_history(tmp_path / "newer.sqlite")
    before = history.read_bytes()
    page = tmp_path / "page.html"
    line = one_error_line(run_cli("history", "--history", str(history), "--html", str(page)))
    assert str(history) in line and "newer isobench" in line and "version 2" in line
    assert not page.exists() and history.read_bytes() == before
    # `run --history` refuses it before the study runs: no results directory, the file untouched
    study_file = write_study(tmp_path / "s.yaml", study(False))
    out = tmp_path / "out"
    line = one_error_line(run_cli("run", str(study_file), "--out", str(out), "--history", str(history)))
    assert "newer isobench" in line and not out.exists() and history.read_bytes() == before


def test_bad_inputs_are_one_line_and_exit_2(tmp_path: Path) -> None:
    assert "no runs given" in one_error_line(run_cli("history"))
    missing = tmp_path / "missing"
    assert str(missing) in one_error_line(run_cli("history", str(missing)))
    assert "no history database here" in one_error_line(run_cli("history", "--history", str(missing)))
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not sqlite at all " * 100)
    assert "as an isobench history database" in one_error_line(run_cli("history", "--history", str(junk)))
    store_file = tmp_path / "isobench.sqlite"  # a study store is SQLite too, but no history
    sqlite3.connect(store_file).executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); "
                                              "INSERT INTO meta VALUES ('schema_version', '1');")
    assert "no history tables" in one_error_line(run_cli("history", "--history", str(store_file)))
    history = write_history(tmp_path / "h.sqlite", synthetic_runs(STEADY, [BASE_FACTS] * 5))
    assert f"--history {history}" in one_error_line(run_cli("history", str(history)))  # as a directory
    line = one_error_line(run_cli("history", "--history", str(history), "--metric", "nope"))
    assert "--metric" in line and "e2e" in line
    line = one_error_line(run_cli("run", "--history", str(tmp_path / "no" / "h.sqlite"), "--out", str(tmp_path / "o")))
    assert "directory does not exist" in line and not (tmp_path / "o").exists()
    with pytest.raises(UserError):
        history_db.check_appendable(tmp_path)  # a directory


def test_the_history_file_has_its_version(tmp_path: Path) -> None:
    history = write_history(tmp_path / "h.sqlite", synthetic_runs(STEADY[:1], [BASE_FACTS]))
    conn = sqlite3.connect(history)
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    conn.close()
    assert version == str(history_db.HISTORY_SCHEMA_VERSION)

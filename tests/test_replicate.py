"""`isobench replicate --quick`: every paper's whole pipeline at toy size, on this host's real
platforms, ends in a verdict table, JSON records that match the schema, and a Markdown page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from isobench.analysis.finding_spec import load_findings
from isobench.replicate.run import unrunnable
from isobench.schema import finding_record
from tests.conftest import need_docker, need_root, run_cli

VERDICTS = {"holds", "does not hold", "inconclusive", "cannot be tested here", "not testable by this design",
            "not reproduced in this setting"}


@pytest.mark.parametrize("paper", ["prashanthi-2023", "samani-salehi", "siddaramanna-john", "park-bahn-2023"])
def test_quick_replication_prints_a_verdict_per_finding(paper: str, tmp_path: Path) -> None:
    need_root()
    need_docker()
    out, doc = tmp_path / "rep", tmp_path / "replication.md"
    done = run_cli("replicate", paper, "--quick", "--out", str(out), "--json", "--markdown", str(doc), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)  # stdout holds only the JSON; progress went to stderr
    expected = [f.id for f in load_findings(paper).findings]
    assert [r["id"] for r in document["findings"]] == expected
    for record in document["findings"]:
        jsonschema.validate(record, finding_record())
        assert record["verdict"] in VERDICTS and record["paper"] == paper
        if record["verdict"] == "cannot be tested here":
            assert record["reason"]  # always says why
    # each study is an ordinary results directory, with what the host lacked beside it; a study
    # whose needs this host lacks (the GPU study on a CPU host) is not run, and says why
    skipped = document["papers"][0]["skipped"]
    assert set(skipped) == set(unrunnable(load_findings(paper), document["papers"][0]["missing"]))
    for study in load_findings(paper).studies:
        if study in skipped:
            assert not (out / paper / study).exists() and f"study {study} is not run here" in done.stderr
            continue
        assert (out / paper / study / "isobench.sqlite").exists()
        assert isinstance(json.loads((out / paper / study / "capabilities.json").read_text()), dict)
    assert json.loads((out / "replication.json").read_text())["findings"] == [
        {**r, "seconds": json.loads((out / "replication.json").read_text())["findings"][i]["seconds"]}
        for i, r in enumerate(document["findings"])]
    text = doc.read_text()
    assert f"isobench replicate {paper} --quick" in text and "## Verdicts" in text
    assert all(f"| {i} |" in text for i in expected)
    if paper == "prashanthi-2023":
        _resume_and_report(out, paper)


def _resume_and_report(out: Path, paper: str) -> None:
    again = run_cli("replicate", paper, "--quick", "--out", str(out))
    assert again.returncode == 2 and "--resume" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    resumed = run_cli("replicate", paper, "--quick", "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "0 to run" in resumed.stderr.replace("\n", " ")
    assert "F1" in resumed.stdout and "verdict" in resumed.stdout
    # the study's own report and summary carry the same findings
    store = out / paper / paper
    summary = json.loads(run_cli("summary", str(store), "--json", check=True).stdout)
    findings = [r for r in summary if r.get("type") == "finding"]
    assert [r["id"] for r in findings] == ["F1", "F2", "F3", "F11", "F12", "F20"]  # those that read this study
    html = tmp_html = store / "report.html"
    run_cli("report", str(store), "-o", str(tmp_html), check=True)
    page = html.read_text()
    assert '<section id="replication">' in page and "Prashanthi 5.1.4" in page


def test_unknown_paper_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run_cli("replicate", "nobody-2020", "--out", str(tmp_path / "x"))
    assert done.returncode == 2 and "nobody-2020" in done.stderr and "prashanthi-2023" in done.stderr
    assert not (tmp_path / "x").exists()


def test_a_resumed_paper_adds_its_earlier_time_only_while_its_results_are_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A paper removed from the results and run again with --resume had its deleted run's minutes
    added to the new run's on the page (samani-salehi read 19.8 min for a 9.7-min run)."""
    from rich.console import Console

    from isobench.replicate import run as replicate_run

    def fake_paper(name: str, out: Path, *args: object, **kwargs: object) -> replicate_run.PaperRun:
        (out / name).mkdir(parents=True, exist_ok=True)
        return replicate_run.PaperRun(paper=name, title=name, results=[], seconds=60.0)

    monkeypatch.setattr(replicate_run, "replicate_paper", fake_paper)
    out, quiet = tmp_path / "rep", Console(file=open("/dev/null", "w"))  # noqa: SIM115
    replicate_run.replicate("samani-salehi", out, False, False, None, quiet)
    [again] = replicate_run.replicate("samani-salehi", out, True, False, None, quiet)
    assert again.seconds == 120.0  # a re-test on kept results: both invocations' time
    shutil.rmtree(out / "samani-salehi")  # removed to run it afresh
    [fresh] = replicate_run.replicate("samani-salehi", out, True, False, None, quiet)
    assert fresh.seconds == 60.0
    assert json.loads((out / "replication.json").read_text())["papers"][0]["seconds"] == 60.0

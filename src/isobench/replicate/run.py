"""Run each paper's studies, then test its findings: the work behind `isobench replicate`.

Layout of ``--out DIR``: ``DIR/<paper>/<study>/`` is each study's results directory (an
ordinary one: `isobench report` reads it), with ``capabilities.json`` beside the store saying
what the host lacked; ``DIR/replication.json`` holds every finding's record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from isobench.analysis.finding_spec import PAPERS, PaperFindings, load_findings
from isobench.analysis.findings import FindingResult, evaluate
from isobench.errors import UserError
from isobench.replicate.capabilities import missing_capabilities
from isobench.report.plaintext import markup
from isobench.store import Store

#: results of a replication (records in replication.json); bump when a field changes meaning
REPLICATION_VERSION = 1


@dataclass
class PaperRun:
    paper: str
    title: str
    results: list[FindingResult]
    seconds: float
    directories: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def papers_of(choice: str) -> list[str]:
    if choice == "all":
        return list(PAPERS)
    if choice not in PAPERS:
        raise UserError(f"unknown paper {choice!r}", field="isobench replicate PAPER",
                        fix=f"use one of {', '.join(PAPERS)} or all")
    return [choice]


def study_text(paper: PaperFindings, study: str, quick: bool, max_minutes: float | None) -> str:
    """The built-in study, at toy size with ``quick`` (the paper's ``quick:`` fields replace the
    study's), its adaptive budget capped at ``max_minutes`` when given."""
    data: dict[str, Any] = yaml.safe_load(resources.files("isobench.studies").joinpath(f"{study}.yaml").read_text())
    if quick:
        data.update(paper.quick.get(study, {}))
        if data.get("repetitions") != "auto":
            data.pop("adaptive", None)
    if max_minutes is not None and data.get("repetitions") == "auto":
        adaptive = dict(data.get("adaptive") or {})
        adaptive["max_time_s"] = min(float(adaptive.get("max_time_s", max_minutes * 60)), max_minutes * 60)
        data["adaptive"] = adaptive
    return yaml.safe_dump(data, sort_keys=False)


def _needed(paper: PaperFindings) -> set[str]:
    return {n for f in paper.findings for n in [*f.needs, *(x for c in f.checks for x in c.needs)]}


def replicate_paper(name: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
                    console: Console) -> PaperRun:
    from isobench.runner.study import run_study

    paper = load_findings(name)
    missing = missing_capabilities(_needed(paper))
    started = time.monotonic()
    directories: dict[str, Path] = {}
    for study in paper.studies:
        directory = out / name / study
        again = resume and Store.exists(directory)
        if Store.exists(directory) and not again:
            raise UserError("results already there", file=str(directory),
                            fix="add --resume to finish them, or choose another --out")
        console.print(markup("[bold]{}[/]: study {}{}", name, study,
                             " (quick)" if quick else " (resuming)" if again else ""))
        directory.parent.mkdir(parents=True, exist_ok=True)
        text = None if again else study_text(paper, study, quick, max_minutes)
        directories[study] = run_study(text, None if again else study, directory, again, console)
        (directories[study] / "capabilities.json").write_text(json.dumps(missing, indent=1) + "\n")
    results = evaluate(paper, directories, missing)
    return PaperRun(name, paper.title, results, time.monotonic() - started,
                    {k: str(v) for k, v in directories.items()}, missing)


def replicate(choice: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
              console: Console) -> list[PaperRun]:
    runs = []
    for name in papers_of(choice):
        runs.append(replicate_paper(name, out, resume, quick, max_minutes, console))
        write_records(runs, out)  # a later paper's failure keeps the earlier ones' verdicts
    return runs


def write_records(runs: list[PaperRun], out: Path) -> Path:
    path = out / "replication.json"
    records = [{**r.as_record(), "seconds": round(run.seconds, 1)} for run in runs for r in run.results]
    payload = {"version": REPLICATION_VERSION, "papers": [
        {"paper": run.paper, "title": run.title, "seconds": round(run.seconds, 1), "studies": run.directories,
         "missing": run.missing} for run in runs], "findings": records}
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
    return path

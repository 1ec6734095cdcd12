"""Run each paper's studies, then test its findings: the work behind `isobench replicate`.

Layout of ``--out DIR``: ``DIR/<paper>/<study>/`` is each study's results directory (an
ordinary one: `isobench report` reads it), with ``capabilities.json`` beside the store saying
what the host lacked, and in the store the paper's rules as they were when its cells first ran
(analysis/finding_rules.py); ``DIR/replication.json`` holds every finding's record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from isobench.analysis.finding_rules import record_rules
from isobench.analysis.finding_spec import PAPERS, PaperFindings, load_findings
from isobench.analysis.findings import FindingResult, evaluate
from isobench.errors import UserError
from isobench.replicate.capabilities import missing_capabilities
from isobench.replicate.hostload import fmt_loadavg
from isobench.replicate.power import PowerResult, apply_power, run_power
from isobench.replicate.study_text import study_text
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
    #: study -> why this host could not run it (its ``study_needs`` unmet)
    skipped: dict[str, str] = field(default_factory=dict)
    #: the 1/5/15-minute load average when its cells started, and the steal share while they ran
    load_at_start: str = ""
    steal: float | None = None
    #: with --power: each check's injected effect and whether its design saw it (replicate/power.py)
    power: list[PowerResult] = field(default_factory=list)


def papers_of(choice: str) -> list[str]:
    if choice == "all":
        return list(PAPERS)
    if choice not in PAPERS:
        raise UserError(f"unknown paper {choice!r}", field="isobench replicate PAPER",
                        fix=f"use one of {', '.join(PAPERS)} or all")
    return [choice]


def _needed(paper: PaperFindings) -> set[str]:
    return ({n for f in paper.findings for n in [*f.needs, *(x for c in f.checks for x in c.needs)]}
            | {n for needs in paper.study_needs.values() for n in needs})


def unrunnable(paper: PaperFindings, missing: dict[str, str]) -> dict[str, str]:
    """study -> why this host cannot run it: the first capability of its ``study_needs`` it lacks."""
    lacking = {study: [missing[n] for n in needs if n in missing] for study, needs in paper.study_needs.items()}
    return {study: reasons[0] for study, reasons in lacking.items() if reasons}


def replicate_paper(name: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
                    console: Console, power: bool = False, power_only: set[str] | None = None) -> PaperRun:
    from isobench.runner.study import run_study

    paper = load_findings(name)
    missing = missing_capabilities(_needed(paper))
    skipped = unrunnable(paper, missing)
    started = time.monotonic()
    directories: dict[str, Path] = {}
    ran_cells = False
    for study in paper.studies:
        if study in skipped:
            console.print(markup("[bold]{}[/]: study {} is not run here: {}", name, study, skipped[study]))
            continue
        directory = out / name / study
        again = resume and Store.exists(directory)
        if Store.exists(directory) and not again:
            raise UserError("results already there", file=str(directory),
                            fix="add --resume to finish them, or choose another --out")
        console.print(markup("[bold]{}[/]: study {}{}", name, study,
                             " (quick)" if quick else " (resuming)" if again else ""))
        directory.parent.mkdir(parents=True, exist_ok=True)
        text = None if again else study_text(paper, study, quick, max_minutes)
        before = _finished(directory) if again else 0
        try:
            directories[study] = run_study(text, None if again else study, directory, again, console)
        finally:
            # the rules as loaded before these cells first ran (even if the run was cut short); a
            # --resume keeps that record, and never records a store that had none: its rules
            # could have been written after its data (analysis/finding_rules.py)
            if not again:
                record_rules(directory, paper)
        ran_cells = ran_cells or _finished(directory) > before
        (directories[study] / "capabilities.json").write_text(json.dumps(missing, indent=1) + "\n")
    results = evaluate(paper, directories, missing, skipped)
    load, steal = host_load(list(directories.values()))
    checked: list[PowerResult] = []
    if power:  # the power runs after the real ones, so that they never load the host beside them
        checked = run_power(paper, out, resume, quick, max_minutes, missing, console, power_only)
        apply_power(paper, results, checked)
    # a resume that ran no cell only re-tested the findings: its seconds are not the paper's time
    return PaperRun(name, paper.title, results, time.monotonic() - started if ran_cells else 0.0,
                    {k: str(v) for k, v in directories.items()}, missing, skipped, load, steal, checked)


def _finished(directory: Path) -> int:
    store = Store.open(directory)
    try:
        return len(store.finished_ids())
    finally:
        store.close()


def host_load(directories: list[Path]) -> tuple[str, float | None]:
    """The load average when the paper's first study started (the host fingerprint's) and the
    share of the cells' core time stolen by the hypervisor (their interference accounting): read
    from the stores, so a resumed replication reports the run that measured."""
    load, stolen, window = "", 0.0, 0.0
    for directory in directories:
        store = Store.open(directory)
        try:
            host = store.host()
            if not load and isinstance(host.get("loadavg_at_start"), list):
                load = fmt_loadavg(host["loadavg_at_start"])
            for row in store.conn.execute("SELECT platform_info FROM cells WHERE platform_info IS NOT NULL"):
                info = json.loads(row["platform_info"]).get("interference") or {}
                if info.get("window_s") and info.get("cores"):
                    stolen += float(info.get("steal_s", 0.0))
                    window += float(info["window_s"]) * float(info["cores"])
        finally:
            store.close()
    return load, (stolen / window if window else None)


def appended_command(commands: list[str], command: str) -> list[str]:
    """The invocations so far, ``command`` last (a repeated re-test is listed once)."""
    return commands if commands and commands[-1] == command else [*commands, command]


def previous_records(out: Path) -> dict[str, Any]:
    """What an earlier invocation on ``out`` recorded (empty when none, or unreadable)."""
    try:
        payload = json.loads((out / "replication.json").read_text())
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) and payload.get("version") == REPLICATION_VERSION else {}


def replicate(choice: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
              console: Console, command: str = "isobench replicate", power: bool = False,
              power_only: set[str] | None = None) -> list[PaperRun]:
    """Each paper of ``choice`` in turn. With ``resume``, a paper's time adds up over the
    invocations (the first ran the cells; a later one may only re-test the findings), as long as
    its results are still there: a paper whose directory was removed to run it again starts its
    time afresh (its earlier time measured cells that are gone). The other papers' records in
    ``out`` stay, with or without ``resume``: one paper run on its own beside them must not
    erase what they took and which invocation made them."""
    earlier = previous_records(out)
    before = {p["paper"]: p for p in earlier.get("papers", [])}
    commands = appended_command(earlier.get("commands", []), command)
    runs = []
    for name in papers_of(choice):
        kept = resume and (out / name).is_dir()
        run = replicate_paper(name, out, resume, quick, max_minutes, console, power, power_only)
        if kept:
            run.seconds += float(before.get(name, {}).get("seconds", 0.0))
        runs.append(run)
        # a later paper's failure keeps the earlier ones' verdicts
        write_records(runs, out, commands, earlier)
    return runs


def write_records(runs: list[PaperRun], out: Path, commands: list[str] | None = None,
                  earlier: dict[str, Any] | None = None) -> Path:
    """``replication.json``: these runs, after ``earlier``'s records of the papers they did not run."""
    path = out / "replication.json"
    ran = {run.paper for run in runs}
    records = [{**r.as_record(), "seconds": round(run.seconds, 1)} for run in runs for r in run.results]
    papers = [{"paper": run.paper, "title": run.title, "seconds": round(run.seconds, 1), "studies": run.directories,
               "missing": run.missing, "skipped": run.skipped, "load_at_start": run.load_at_start,
               "steal": run.steal, "power": [p.as_record() for p in run.power]} for run in runs]
    kept = [p for p in (earlier or {}).get("papers", []) if p.get("paper") not in ran]
    kept_findings = [r for r in (earlier or {}).get("findings", []) if r.get("paper") not in ran]
    payload = {"version": REPLICATION_VERSION, "commands": commands or [], "papers": kept + papers,
               "findings": kept_findings + records}
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
    return path

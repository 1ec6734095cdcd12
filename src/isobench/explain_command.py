"""``isobench explain DIR``: run the follow-up studies that test a study's suspected causes
(explain.py plans them: the interventions and the evidence, and more cores for a sandbox's own
threads in a study of its own, judged by analysis/more_cores.py). Registered on the main app by
cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from isobench.console import console, outlive_reader
from isobench.report.plaintext import markup


def explain(directory: Path,
            out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
                "--out", help="where to write the follow-up study (default: DIRECTORY/explain); the cores "
                              "study, where one runs, goes beside it (OUT-cores)")] = None,
            budget: Annotated[Optional[str], typer.Option(  # noqa: UP045
                "--budget", metavar="TIME",
                help="time budget of `repetitions: auto` (e.g. 8m, 90s, 1h), over the study's own `budget`: "
                     "where both the follow-up and the cores study run, each gets half of it (without "
                     "--budget each keeps the study's own)")] = None) -> None:
    """Test the study's suspected causes: run the interventions its hints name (e.g. the same entry
    with its data copied in) and the microbenchmarks that price each resolved overhead's mechanisms
    beside the entries they explain, then say which hints they confirm or refute. More cores for a
    sandbox's own threads runs as a study of its own (schedule: sequential, cell_cores: all), after
    the follow-up."""
    from isobench.explain import budget_each, explain_directory
    from isobench.report.terminal import print_results
    from isobench.runner.study import run_study
    from isobench.studyfile import with_budget_text

    plan = explain_directory(directory, out)
    for line in plan.skipped:
        console.print(markup("cannot test: {}", line), highlight=False)
    for line in plan.own_study:
        console.print(markup("cannot test within the study, so it runs as a study of its own ({}): {}",
                             plan.cores.target if plan.cores else "", line), highlight=False)
    planned = [p for p in (plan.follow_up, plan.cores) if p is not None]
    if not planned:
        console.print("no suspected hint in this study names an intervention to run, and every resolved "
                      "overhead is priced already: nothing to explain", markup=False, highlight=False)
        return
    share = budget_each(budget, len(planned))
    texts = [with_budget_text(p.text, p.name, share) for p in planned]  # a bad --budget: refused before any runs
    with outlive_reader():
        written: list[Path] = []
        for p, text in zip(planned, texts, strict=True):
            try:
                written.append(run_study(text, p.name, p.target, False, console))
            except KeyboardInterrupt:
                raise typer.Exit(130) from None
            print_results(written[-1], "cores study results" if p is plan.cores else "follow-up results", console)
        if plan.cores is not None:
            _print_verdicts(directory, written[-1], plan.cores_suspects)


def _print_verdicts(directory: Path, cores: Path, suspects: list[tuple[str, str]]) -> None:
    """Each suspect's overhead on the study's cells against its overhead with every core."""
    from isobench.analysis.more_cores import cores_verdicts
    from isobench.store import Store

    parent, theirs = Store.open(directory), Store.open(cores)
    try:
        verdicts = cores_verdicts(parent, theirs, suspects)
    finally:
        parent.close()
        theirs.close()
    for _, line in verdicts:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

"""``isobench history``: results over time (analysis/history.py), shown as a table, JSON or an
HTML page (report/history_html.py), with a CI gate. Registered on the main app by cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from isobench.console import console, err_console, print_json
from isobench.errors import UserError
from isobench.report.history_html import (
    attribution_words,
    change_words,
    print_history,
    render_history_html,
    run_numbers,
)
from isobench.text import capped_list

if TYPE_CHECKING:  # the analysis (and scipy under it) loads when the command runs, not with the CLI
    from isobench.analysis.history import Run, Series


def _note(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def history(directories: Annotated[Optional[list[Path]], typer.Argument(  # noqa: UP045
                metavar="DIR", help="result directories (`isobench run --out`), in any order: runs are ordered "
                                    "by start")] = None,
            history_file: Annotated[Optional[Path], typer.Option(  # noqa: UP045
                "--history", metavar="FILE", help="a history database that `isobench run --history FILE` "
                                                  "appends to (with directories: both)")] = None,
            metrics: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
                "--metric", metavar="METRIC", help="metric(s) to follow, repeatable, or `all` (default: e2e and "
                                                   "the workloads' headline metrics)")] = None,
            as_json: Annotated[bool, typer.Option(
                "--json", help="print the runs and each series with its points and change points as JSON")] = False,
            html: Annotated[Optional[Path], typer.Option(  # noqa: UP045
                "--html", metavar="FILE", help="also write a self-contained HTML page: one trend figure "
                                               "per series, change points and what differed marked")] = None,
            fail_on_change: Annotated[bool, typer.Option(
                "--fail-on-change", help="for CI: exit 1 when the newest run starts a change in a series "
                                         "(0 otherwise; 2 stays for bad input)")] = False,
            ) -> None:
    """Results over time: each comparison followed across runs of a study, its change points
    (Apache Otava) and what differed at each (kernel, runtime versions, torch, knobs)."""
    from isobench.analysis.history import analyse_history, default_metrics, history_document, load_runs

    if not directories and history_file is None:
        raise UserError("no runs given", field="isobench history",
                        fix="give result directories, or --history FILE (written by `isobench run --history`)")
    runs = load_runs(directories or [], history_file)
    wanted = None if metrics and "all" in metrics else set(metrics) if metrics else default_metrics()
    series = analyse_history(runs, wanted)
    if not series and wanted and metrics and any(r.points for r in runs):
        known = sorted({p.key.metric for r in runs for p in r.points})
        raise UserError(f"no comparison of metric(s) {', '.join(sorted(wanted))} in these runs",
                        field="--metric", fix=f"give one of {capped_list(known, 12)}, or all")
    if html is not None:
        text = render_history_html(runs, series)
        try:
            html.write_text(text)
        except OSError as error:
            raise UserError(f"cannot write: {error.strerror or error}", file=str(html), field="--html",
                            fix="give a file in a directory that exists and that you may write") from None
    if as_json:
        print_json(history_document(runs, series))
    else:
        print_history(runs, series, console)
    if html is not None:
        _note(f"wrote {html}")
    if fail_on_change:
        _gate(runs, series)


def _gate(runs: list[Run], series: list[Series]) -> None:
    from isobench.analysis.history import newest_run, starts_change

    newest = newest_run(runs)
    numbers = run_numbers(runs)
    tripped = [(s, cp) for s in series if (cp := starts_change(s, newest)) is not None]
    where = f"the newest run (run {numbers[newest.run_id]}, {newest.directory})" if newest else "no run"
    for s, cp in tripped:
        _note(f"fail-on-change: {where} starts a change in {s.key.words()}: {change_words(cp)}; "
              f"what differed: {attribution_words(cp)}")
    if tripped:
        raise typer.Exit(1)
    _note(f"fail-on-change: {where} starts no change ({len(series)} series)")

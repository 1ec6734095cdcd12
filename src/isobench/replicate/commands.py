"""`isobench replicate`: the command, registered on the CLI by cli.py, and its body (run, test,
print). Its heavy imports wait for the command to run: cli.py imports this module at start."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from isobench.console import JsonOpt, err_console, print_json
from isobench.report.plaintext import markup


def replicate(paper: Annotated[str, typer.Argument(help="park-bahn-2023, prashanthi-2023, samani-salehi, "
                                                        "siddaramanna-john, or all")] = "all",
              out: Annotated[Path, typer.Option(help="directory for the studies' results")] = Path("replication"),
              resume: Annotated[bool, typer.Option("--resume", help="finish the studies already started")] = False,
              quick: Annotated[bool, typer.Option("--quick", help="toy sizes (about 2 min per paper): the "
                                                                  "whole pipeline, verdicts where it can")] = False,
              max_minutes: Annotated[Optional[float], typer.Option(  # noqa: UP045
                  help="cap each adaptive study's time budget (minutes)")] = None,
              markdown: Annotated[Optional[Path], typer.Option(  # noqa: UP045
                  help="also write the verdicts, host and timings as Markdown (docs/replication.md)")] = None,
              power: Annotated[bool, typer.Option("--power", help="also run each injectable check with an "
                                                  "effect of the paper's size injected on the baseline, and say "
                                                  "whether its design sees it")] = False,
              power_findings: Annotated[Optional[str], typer.Option(  # noqa: UP045
                  help="with --power: only these findings' checks, e.g. F1,F2 (implies --power)")] = None,
              as_json: JsonOpt = False) -> None:
    """Re-test each paper's headline findings on this host and print one verdict table."""
    replicate_command(paper, out, resume, quick, max_minutes, markdown, as_json, sys.argv, power, power_findings)


def replicate_command(paper: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
                      markdown: Path | None, as_json: bool, argv: list[str], power: bool = False,
                      power_findings: str | None = None) -> None:
    from isobench.console import console
    from isobench.replicate.document import write_markdown
    from isobench.replicate.hostload import cpu_times, loadavg
    from isobench.replicate.power import print_power
    from isobench.replicate.run import previous_records
    from isobench.replicate.run import replicate as run_replication
    from isobench.report.findings_table import print_table, records

    started_cpu, load_before = cpu_times(), loadavg()
    command = "isobench " + " ".join(shlex.quote(a) for a in argv[1:])
    # progress goes to stderr so that stdout holds only the table (or the JSON)
    only = {f.strip() for f in power_findings.split(",") if f.strip()} if power_findings else None
    runs = run_replication(paper, out, resume, quick, max_minutes, err_console, command, power or bool(only), only)
    results = [r for run in runs for r in run.results]
    if as_json:
        print_json({"findings": records(results),
                    "papers": [{"paper": r.paper, "seconds": round(r.seconds, 1), "missing": r.missing,
                                "skipped": r.skipped, "power": [p.as_record() for p in r.power]}
                               for r in runs]})
    else:
        for run in runs:
            print_table(run.results, console, f"{run.title} ({run.seconds / 60:.1f} min)")
            if run.power:
                print_power(run.power, console, f"{run.title}: injected effects of the paper's size (--power)")
    if markdown is not None:
        # the invocations as replicate recorded them in replication.json, this one last
        commands = previous_records(out).get("commands", [command])
        path = write_markdown(runs, markdown, commands, started_cpu, load_before)
        err_console.print(markup("written: {}", path))
    err_console.print(markup("results: {} (isobench report {}/PAPER/STUDY)", out, out))

"""`isobench replicate`: run, test, print; the CLI's body, kept out of cli.py."""

from __future__ import annotations

import shlex
from pathlib import Path

from isobench.console import err_console, print_json
from isobench.replicate.document import write_markdown
from isobench.replicate.hostload import cpu_times, loadavg
from isobench.replicate.power import print_power
from isobench.replicate.run import previous_records, replicate
from isobench.report.findings_table import print_table, records
from isobench.report.plaintext import markup


def replicate_command(paper: str, out: Path, resume: bool, quick: bool, max_minutes: float | None,
                      markdown: Path | None, as_json: bool, argv: list[str], power: bool = False,
                      power_findings: str | None = None) -> None:
    from isobench.console import console

    started_cpu, load_before = cpu_times(), loadavg()
    command = "isobench " + " ".join(shlex.quote(a) for a in argv[1:])
    # progress goes to stderr so that stdout holds only the table (or the JSON)
    only = {f.strip() for f in power_findings.split(",") if f.strip()} if power_findings else None
    runs = replicate(paper, out, resume, quick, max_minutes, err_console, command, power or bool(only), only)
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

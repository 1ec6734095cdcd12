"""docs/replication.md, written by `isobench replicate ... --markdown PATH`, never by hand."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from isobench.analysis.finding_spec import load_findings
from isobench.fingerprint import host_fingerprint
from isobench.replicate.hostload import loadavg, steal_since
from isobench.replicate.power import markdown_power
from isobench.replicate.run import PaperRun
from isobench.report.findings_table import markdown_details, markdown_table
from isobench.report.plaintext import md


def write_markdown(runs: list[PaperRun], path: Path, commands: list[str], started_cpu: tuple[int, int],
                   load_before: str) -> Path:
    """The page; ``commands`` are the invocations that made the results, in order (the first ran
    the cells; a ``--resume`` after it re-tests the findings on the same stores)."""
    host = host_fingerprint()
    lines = ["# Replication: each paper's findings on this host", "",
             f"Generated on {datetime.date.today().isoformat()} by "
             + " then ".join(f"`{md(c)}`" for c in commands)
             + ". Do not edit by hand: run the command again to regenerate it.", "",
             "## Host", "",
             f"- {md(host.get('cpu_model') or host.get('machine'))}, {md(host.get('cores') or os.cpu_count())} CPUs, "
             f"kernel {md(host.get('kernel'))}",
             f"- Python {md(host.get('python'))}, torch {md(host.get('torch'))}, GPU: {md(host.get('gpu') or 'none')}",
             f"- this page written with load average {md(load_before)} before and {md(loadavg())} after, "
             f"steal {steal_since(started_cpu):.1%} in between", ""]
    lines += ["## Time per paper", "",
              "Wall time of the paper's studies (over every invocation), the host's load average when its "
              "first study started, and the share of the cells' core time the hypervisor stole.", "",
              "| paper | studies | time | load average at start | steal |", "|---|---|---|---|---|"]
    lines += [f"| {md(r.paper)} | {md(', '.join(r.directories))} | {r.seconds / 60:.1f} min | "
              f"{md(r.load_at_start)} | {'' if r.steal is None else f'{r.steal:.1%}'} |" for r in runs]
    lines += ["", "## Verdicts", "",
              "Each rule carries the date it was last written and a hash of what decides its verdict "
              "(its checks and text). A rule that differs from the one recorded with its study's data "
              "is marked \"changed after seeing data\", with the verdict of the recorded rule beside it. "
              "Each estimate shows the smallest effect its design could see (\"could see ≥\"); a fixed "
              "outcome, or a \"does not hold\" the design could not have seen, reads \"not testable by "
              "this design\" (docs/statistics.md).", ""]
    lines += markdown_table([f for r in runs for f in r.results])
    missing = {k: v for r in runs for k, v in r.missing.items()}
    if missing:
        lines += ["", "What this host lacks: " + "; ".join(f"{md(k)}: {md(v)}" for k, v in sorted(missing.items())) + "."]
    skipped = [f"{md(study)} ({md(why)})" for r in runs for study, why in r.skipped.items()]
    if skipped:
        lines += ["", "Studies not run on this host: " + "; ".join(skipped) + "."]
    powered = [r for r in runs if r.power]
    if powered:
        lines += ["", "## Power: injected effects of the paper's size", "",
                  "With `--power`, each check whose effect can be injected ran again on the baseline platform "
                  "twice, one arm carrying an injected effect of the paper's size (the `slowdown` knob, inside "
                  "the check's phases; for device write-back calls, an extra writer on the device, the "
                  "`extra_writebacks` knob) and nothing else different. \"seen\": the check's own analysis reads "
                  "\"holds\" on that store; \"missed\": it does not, so a \"does not hold\" of that check "
                  "reads \"not testable by this design\" above.", ""]
        for run in powered:
            lines += [f"### {md(run.title)}", "", *markdown_power(run.power), ""]
    lines += ["", "## Finding by finding", ""]
    for run in runs:
        findings = {f.id: f for f in load_findings(run.paper).findings}
        lines += [f"## {md(run.title)}", ""]
        for result in run.results:
            finding = findings.get(result.id)
            lines += markdown_details(result, finding.rule if finding else "",
                                      [(r.date.isoformat(), r.reason) for r in finding.revisions] if finding else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path

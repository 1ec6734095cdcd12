"""The replication verdict table: on the terminal, in Markdown (docs/replication.md) and HTML."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from isobench.analysis.findings import FAILS, HOLDS, INCONCLUSIVE, FindingResult
from isobench.report.plaintext import html_text, md, plain

COLUMNS = ("id", "finding (source)", "paper's figure", "here, with 95% CI", "verdict")
_STYLE = {HOLDS: "green", FAILS: "red", INCONCLUSIVE: "yellow"}


def row(result: FindingResult) -> tuple[str, str, str, str, str]:
    return (result.id, f"{result.claim} ({result.source})", result.paper_figure, result.here, result.verdict_words)


def print_table(results: list[FindingResult], console: Console, title: str) -> None:
    table = Table(title=title, show_lines=True)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for result in results:
        cells = [plain(v) for v in row(result)]
        cells[-1].stylize(_STYLE.get(result.verdict, "dim"))
        table.add_row(*cells)
    console.print(table)


def markdown_table(results: list[FindingResult]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(md(v).replace("|", "\\|") for v in row(r)) + " |" for r in results]
    return lines


def markdown_details(result: FindingResult, rule: str) -> list[str]:
    """A finding's paragraph: the rule, each check's result, and why the verdict is what it is."""
    lines = [f"### {md(result.id)}: {md(result.claim)}", "",
             f"*{md(result.source)}.* Paper: {md(result.paper_figure)}. Verdict: **{md(result.verdict_words)}**.", ""]
    if rule:
        lines += [f"Rule: {md(rule)}", ""]
    for check in result.checks:
        shown = f": {md(check.shown)}" if check.shown else ""
        lines.append(f"- {md(check.what)}{shown} → {md(check.verdict)} ({md(check.reason)})")
    lines += ["", f"Why: {md(result.reason)}", ""]
    return lines


def html_section(results: list[FindingResult]) -> str:
    if not results:
        return ""
    head = "".join(f"<th>{html_text(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html_text(v)}</td>" for v in row(r)) + "</tr>" for r in results)
    return (f'<section id="replication"><h2>Replication</h2><p>Each finding of the paper this study replicates, '
            f'tested on this host\'s results (`isobench replicate` runs all of a paper\'s studies).</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")


def records(results: list[FindingResult]) -> list[dict[str, Any]]:
    return [r.as_record() for r in results]

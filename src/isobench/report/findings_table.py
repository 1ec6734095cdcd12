"""The replication verdict table: on the terminal, in Markdown (docs/replication.md) and HTML."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, NOT_IN_SETTING
from isobench.analysis.findings import FAILS, HOLDS, INCONCLUSIVE, FindingResult
from isobench.report.plaintext import html_text, md, plain

COLUMNS = ("id", "finding (source)", "paper's figure", "here, with 95% CI", "verdict", "rule written, hash")
_STYLE = {HOLDS: "green", FAILS: "red", INCONCLUSIVE: "yellow", DESIGN_UNTESTABLE: "magenta",
          NOT_IN_SETTING: "dark_orange"}
#: the verdict cell's column (styled by the verdict on the terminal)
_VERDICT = COLUMNS.index("verdict")


def verdict_cell(result: FindingResult) -> str:
    """The verdict, marked when the rule changed after its data, with the recorded rule's verdict beside it."""
    if not result.changed_after_data:
        return result.verdict_words
    before = f"; before the change: {result.verdict_before}" if result.verdict_before else ""
    return f"{result.verdict_words} (rule changed after seeing data{before})"


def rule_cell(result: FindingResult) -> str:
    return f"{result.rule_written or 'undated'}, {result.rule_hash}" if result.rule_hash else ""


def row(result: FindingResult) -> tuple[str, ...]:
    return (result.id, f"{result.claim} ({result.source})", result.paper_figure, result.here, verdict_cell(result),
            rule_cell(result))


def print_table(results: list[FindingResult], console: Console, title: str) -> None:
    table = Table(title=title, show_lines=True)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for result in results:
        cells = [plain(v) for v in row(result)]
        cells[_VERDICT].stylize(_STYLE.get(result.verdict, "dim"))
        table.add_row(*cells)
    console.print(table)


def markdown_table(results: list[FindingResult]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(md(v).replace("|", "\\|") for v in row(r)) + " |" for r in results]
    return lines


def markdown_details(result: FindingResult, rule: str, revisions: list[tuple[str, str]] | None = None) -> list[str]:
    """A finding's paragraph: the rule (its date, hash and revisions; whether it changed after its
    data), each check's result, and why the verdict is what it is."""
    lines = [f"### {md(result.id)}: {md(result.claim)}", "",
             f"*{md(result.source)}.* Paper: {md(result.paper_figure)}. Verdict: **{md(result.verdict_words)}**.", ""]
    if rule:
        lines += [f"Rule: {md(rule)}", ""]
    if result.rule_hash:
        lines += [f"Rule written {md(result.rule_written or 'undated')}, hash {md(result.rule_hash)}."
                  + "".join(f" Revised {md(day)}: {md(why.rstrip('.'))}." for day, why in revisions or []), ""]
    if result.changed_after_data:
        before = (f" The rule recorded with the data ({md(result.rule_hash_before)}) gives: "
                  f"**{md(result.verdict_before)}**." if result.verdict_before else "")
        lines += [f"**Changed after seeing data**: {md(result.change_reason.rstrip('.'))}.{before}", ""]
    for check in result.checks:
        shown = f": {md(check.shown)}" if check.shown else ""
        aa = f"; {md(check.aa)}" if check.aa else ""  # the check's false-alarm rate beside it
        lines.append(f"- {md(check.what)}{shown}{aa} → {md(check.verdict)} ({md(check.reason)})")
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

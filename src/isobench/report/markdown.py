"""The report as Markdown: the same content as the HTML report, with figures as their numbers."""

from __future__ import annotations

from isobench.analysis.summary import ADVISOR_NOTE, Analysis
from isobench.analysis.views import Figure, Skipped, Table
from isobench.analysis.views.why import WHY_PREFIX
from isobench.report.adaptive_table import stop_words
from isobench.report.html import comparison_columns, comparison_rows, multi_host, ordered, resolve_target
from isobench.report.plaintext import md, md_fence, md_table
from isobench.report.replication import replication
from isobench.report.terminal import fmt_knobs, headline


def _source(view: Table | Figure) -> str:
    """The view's id, and the paper it regenerates where it does (the fleet views regenerate none)."""
    return f"`{view.id}`; {view.paper}" if view.paper else f"`{view.id}`"


def render_markdown(analysis: Analysis) -> str:
    study = analysis.study
    out = [f"# isobench: {md(study.name)}", "", md(study.description), "", "## Headline", ""]
    if any(w.kind == "host" for w in analysis.warnings):
        out += ["> **Caution:** warnings about the host (load, frequency scaling): differences below may reflect "
                "the host rather than the platforms.", ""]
    out += [f"- {md(line)}" for line in headline(ordered(analysis))] or ["- no comparison yet"]
    rep = replication(study.name)
    if rep:
        out += ["", f"**Replication of {rep['paper']}.** Scaled down: {rep['scale']}.", ""]
        for text, prefix in rep["numbers"]:  # type: ignore[union-attr]
            target, measured = resolve_target(analysis, prefix)
            out.append(f"- {text} → " + (f"`{target}`" if target else "")
                       + ("" if measured else " (not measured in this run)"))
    out += ["", "## Comparisons with the baseline (E2E time per item)", "",
            md_table(comparison_columns(analysis), comparison_rows(analysis))]
    if analysis.advice:
        target = analysis.advice[0].target
        out += ["", "### Sample-size advisor", "", ADVISOR_NOTE, "",
                md_table(["workload", "platform", "knobs", "noise (sd of logs)", "repetitions now", f"for a ±{target:.0%} CI",
                          f"to detect +{target:.0%} (80% power)"],
                         [[a.workload, a.platform + (f" on {a.host}" if multi_host(analysis) else ""),
                           fmt_knobs(a.knobs), f"{a.noise:.2%}", str(a.n_now),
                           str(a.n_halfwidth), str(a.n_power)] for a in analysis.advice])]
    if analysis.adaptive:
        a = analysis.adaptive
        out += ["", "### Adaptive repetitions", "", f"Target ±{a['target']:.1%} on {md(a['metric'])}, {a['rounds']} "
                f"round(s): {md(a['reason'])}.", ""]
        out.append(md_table(["workload", "platform", "n", "half-width", "why it stopped"],
                            [[c["workload"], c["platform"] + (f" on {c.get('host')}" if multi_host(analysis) else ""),
                              str(c["n"]),
                              "n/a" if c["half_width"] is None else f"±{c['half_width']:.2%}", stop_words(c, a)]
                             for c in a["comparisons"]]))
    out += ["", "## Warnings", ""]
    out += [f"- {md(w.text)}" for w in analysis.warnings] or ["- none"]
    out += ["", "## Root-cause hints", ""]
    out += [f"- **{h.status}**: {md(h.text)} (see `{h.figure}`)" for h in analysis.hints] or ["- no rule found evidence"]
    why = [v for v in analysis.views if isinstance(v, Table) and v.id.startswith(WHY_PREFIX)]
    if why:
        out += ["", "## Why, in numbers: what each mechanism explains", "", md(why[0].note), ""]
        for view in why:
            out += [f"### {md(view.title)} (`{view.id}`)", "", md_table(view.columns, view.rows), ""]
    out += ["", "## Tables and figures (numbers)", ""]
    skipped = []
    for view in analysis.views:
        if isinstance(view, Table) and view.id.startswith(WHY_PREFIX):
            continue
        if isinstance(view, Skipped):
            skipped.append(view)
        elif isinstance(view, Figure):
            if view.table:
                out += [f"### {md(view.title)} ({_source(view)})", "", md_table(view.table.columns,
                                                                                       view.table.rows), ""]
        elif isinstance(view, Table):
            out += [f"### {md(view.title)} ({_source(view)})", "", md_table(view.columns, view.rows), ""]
    if skipped:
        out += ["### Not measured in this study", ""] + [f"- {md(s.title)} ({md(s.paper)}): {md(s.reason)}"
                                                         for s in skipped]
    if analysis.failures:
        out += ["", f"## Cells that did not finish ({len(analysis.failures)})", ""]
        out += [f"- {md(line)}" for line in analysis.failures[:50]]
    host = analysis.host
    out += ["", "## Host", "", md(f"{host.get('cpu_model')}, {host.get('cores')} cores, kernel {host.get('kernel')}, "
            f"governor {host.get('governor')}, turbo {host.get('turbo')}, load at start {host.get('loadavg_at_start')}"),
            "", "## Study file", "", *md_fence(analysis.study_text.rstrip(), "yaml"), ""]
    return "\n".join(out)

"""One self-contained HTML report: inline CSS and inline SVG, nothing fetched from a network."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from isobench.analysis.stats import fmt_floor
from isobench.analysis.summary import ADVISOR_NOTE, Analysis
from isobench.analysis.verdict import NOT_COMPARABLE, fmt_margin, within_margin
from isobench.analysis.views import Figure, Skipped, Table
from isobench.report import figures
from isobench.report.adaptive_table import stop_words
from isobench.report.plaintext import html_text
from isobench.report.replication import replication
from isobench.report.terminal import fmt_knobs, fmt_seconds, headline

#: tables longer than this start folded
LONG_TABLE = 25

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1d1d1f;
       margin: 0; background: #f6f6f4; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 32px 64px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 32px 0 8px; border-bottom: 1px solid #ddd;
       padding-bottom: 4px; } h3 { font-size: 16px; margin: 22px 0 4px; }
.sub { color: #555; margin: 0 0 16px; }
ul.headline { padding-left: 20px; } ul.headline li { margin: 4px 0; font-size: 16px; }
.box { border-radius: 6px; padding: 8px 14px; margin: 10px 0; }
.warn { background: #fff6e0; border: 1px solid #f0c36d; } .hint { background: #eaf4ff; border: 1px solid #9cc3ec; }
.paper { background: #f0f7ee; border: 1px solid #a9d19e; } .skip { color: #666; font-size: 14px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13.5px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 4px 8px; text-align: left; vertical-align: top; }
table.wrap td { overflow-wrap: anywhere; }
div.scroll { max-width: 100%; overflow-x: auto; }
.caution { background: #fdecea; border: 1px solid #e8a39b; }
table { max-width: 100%; } figure svg { display: block; max-width: 100%; }
th { background: #fafafa; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.slower { color: #b42318; font-weight: 600; } .faster { color: #106b36; font-weight: 600; } .same { color: #555; }
.nowrap { white-space: nowrap; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; }
figure { margin: 12px 0 24px; } figcaption { color: #555; font-size: 13px; }
pre { background: #f4f4f4; padding: 10px; overflow-x: auto; font-size: 12.5px; white-space: pre-wrap; }
details summary { cursor: pointer; color: #335; font-size: 13px; }
nav a { margin-right: 14px; font-size: 14px; }
"""


def esc(value: Any) -> str:
    return html_text(value)  # every user string in the page goes through here (report/plaintext.py)


def _table(table: Table, klass: str = "") -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td class=\"{'num' if _numeric(v) else ''}\">{esc(v)}</td>" for v in row)
                   + "</tr>" for row in table.rows)
    note = f"<p class=\"skip\">{esc(table.note)}</p>" if table.note else ""
    attr = f" class=\"{klass}\"" if klass else ""
    # a table wider than the page scrolls inside its own box; the page never scrolls sideways
    return f"<div class=\"scroll\"><table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}"


NUMERIC = re.compile(r"^[±+-]?[\d,.]+(e[+-]?\d+)?\s*(×|%|ms|s|µs|J|W)?(\s*\(.*\))?$|^[\d.]+–[\d.]+$")


def _numeric(value: str) -> bool:
    return bool(NUMERIC.match(str(value).strip()))


def _ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def ordered(analysis: Analysis) -> list[Any]:
    """Comparisons by workload, then the study's platform order (A/A entries where they are listed)."""
    order = {p.key: i for i, p in enumerate(analysis.study.platforms)}
    return sorted(analysis.shown, key=lambda c: (c.workload, json.dumps(c.params, sort_keys=True),
                                                 order.get(c.label, 99), json.dumps(c.knobs, sort_keys=True),
                                                 c.host))


def ordered_e2e(analysis: Analysis) -> list[Any]:
    return [c for c in ordered(analysis) if c.metric == "e2e"]


def multi_host(analysis: Analysis) -> bool:
    return len(analysis.hosts) > 1


def comparison_rows(analysis: Analysis) -> list[list[str]]:
    """One row per e2e comparison, in COMPARISON_COLUMNS' order; with several hosts a host column after
    the workload (see comparison_columns)."""
    rows = []
    for c in ordered_e2e(analysis):
        entry = c.platform + (f" ({c.label})" if c.label not in c.platform and not c.is_aa else "")
        # across devices the ratio is the devices' (cpu vs cuda): the verdict column says so, no number
        numbers = ["-"] * 3 if c.verdict == NOT_COMPARABLE else \
            [f"{c.ratio:.3f}", _ci(c.ci_low, c.ci_high), _ci(c.boot_low, c.boot_high)]
        rows.append([c.workload, *([c.host] if multi_host(analysis) else []), entry + (" (A/A)" if c.is_aa else "") + (" [emulated]" if c.emulated else ""),
                     fmt_knobs(c.knobs), f"{c.n}/{c.n_baseline}", fmt_seconds(c.baseline_mean), fmt_seconds(c.mean),
                     *numbers, "" if c.p_holm is None else f"{c.p_holm:.3g}",
                     "-" if c.noise_floor is None else fmt_floor(c.noise_floor),
                     ("the noise floor (A/A): " if c.is_aa else "") + verdict_text(c)])
    return rows


def verdict_text(c: Any) -> str:
    """The verdict column: the effect in words, 'equivalent (±2%)', 'inconclusive (about N more repetitions)'
    or 'not comparable: why' (the two sides ran on different devices)."""
    if c.verdict == NOT_COMPARABLE:
        return f"{NOT_COMPARABLE}: {c.verdict_reason}"
    if c.verdict == "equivalent":
        return f"equivalent ({fmt_margin(c.margin)})"
    if c.verdict == "inconclusive":
        more = None if c.repetitions_needed is None else c.repetitions_needed - min(c.n, c.n_baseline)
        return "inconclusive" + ("" if more is None else f" (about {more} more repetitions)")
    return (c.effect or c.verdict) + (f", within {fmt_margin(c.margin)}" if within_margin(c) else "")


COMPARISON_COLUMNS = ["workload", "platform", "knobs", "n", "baseline", "platform", "×",
                      "95% CI (logs)", "95% CI (bootstrap)", "p (Holm)", "A/A noise floor", "verdict"]


def comparison_columns(analysis: Analysis) -> list[str]:
    return ["workload", "host", *COMPARISON_COLUMNS[1:]] if multi_host(analysis) else COMPARISON_COLUMNS


def _comparison_table(analysis: Analysis, colours: dict[str, str]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in comparison_columns(analysis))
    body = []
    for c, row in zip(ordered_e2e(analysis), comparison_rows(analysis), strict=True):
        host = [f"<td>{esc(row.pop(1))}</td>"] if multi_host(analysis) else []
        klass = {"slower": "slower", "higher": "slower", "faster": "faster", "lower": "faster"}.get(c.verdict, "same")
        swatch = f"<span class=\"swatch\" style=\"background:{colours.get(c.label, '#999')}\"></span>"
        cells = [f"<td>{esc(row[0])}</td>", *host, f"<td class=\"nowrap\">{swatch}{esc(row[1])}</td>",
                 f"<td>{esc(row[2])}</td>", *(f"<td class=\"num\">{esc(v)}</td>" for v in row[3:11])]
        cells.append(f"<td class=\"{klass}\">{esc(row[11])}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _fingerprint_rows(host: dict[str, Any], prefix: str = "") -> list[list[str]]:
    rows = []
    for key, value in sorted(host.items()):
        if isinstance(value, dict):
            rows.extend(_fingerprint_rows(value, f"{prefix}{key}."))
        else:
            rows.append([f"{prefix}{key}", json.dumps(value) if isinstance(value, list | tuple) else str(value)])
    return rows


def resolve_target(analysis: Analysis, prefix: str) -> tuple[str | None, bool]:
    """The first view whose id starts with ``prefix`` (views carry the workload in their id), and
    whether it was measured; (None, False) when the report has no such view."""
    for view in analysis.views:
        if view.id == prefix or view.id.startswith(prefix + "-"):
            return view.id, not isinstance(view, Skipped)
    return None, False


def _target_link(analysis: Analysis, prefix: str) -> str:
    target, measured = resolve_target(analysis, prefix)
    if target is None:
        return "not measured in this run"
    return f"<a href=\"#{esc(target)}\">{esc(target)}</a>" + ("" if measured else " (not measured in this run)")


def findings_html(analysis: Analysis) -> str:
    """The Replication section: a built-in replication study's findings, tested on this store."""
    directory = analysis.directory
    if directory is None:
        return ""
    from isobench.analysis.findings import findings_for_study
    from isobench.report.findings_table import html_section

    return html_section(findings_for_study(analysis.study.name, directory))


def render_html(analysis: Analysis) -> str:
    study = analysis.study
    colours = figures.platform_colours([p.key for p in study.platforms])
    parts: list[str] = []
    host = analysis.host
    parts.append(f"<h1>isobench: {esc(study.name)}</h1>")
    parts.append(f"<p class=\"sub\">{esc(study.description)} · {len(analysis.groups)} groups · "
                 f"host {esc(host.get('cpu_model', '?'))}, {esc(host.get('cores', '?'))} cores, kernel "
                 f"{esc(host.get('kernel', '?'))} · report written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p>")
    parts.append("<nav><a href=\"#results\">results</a><a href=\"#warnings\">warnings</a><a href=\"#hints\">hints</a>"
                 "<a href=\"#figures\">figures</a><a href=\"#host\">host</a><a href=\"#study\">study file</a></nav>")
    parts.append("<h2 id=\"results\">Headline</h2>")
    host_warnings = [w for w in analysis.warnings if w.kind == "host"]
    if host_warnings:
        parts.append(f"<div class=\"box caution\"><b>Caution:</b> {len(host_warnings)} warning(s) about the host "
                     "(load, frequency scaling): differences below may reflect the host rather than the platforms. "
                     "See <a href=\"#warnings\">warnings</a>.</div>")
    parts.append("<ul class=\"headline\">")
    lines = headline(ordered(analysis))
    parts.extend(f"<li>{esc(line)}</li>" for line in lines or ["no comparison yet: the study has no finished "
                                                               "cells on both a platform and the baseline"])
    parts.append("</ul>")
    rep = replication(study.name)
    if rep:
        items = "".join(f"<li>{esc(text)} → {_target_link(analysis, target)}</li>"
                        for text, target in rep["numbers"])  # type: ignore[union-attr]
        parts.append(f"<div class=\"box paper\"><b>Replication of {esc(rep['paper'])}.</b> Scaled down: "
                     f"{esc(rep['scale'])}. This run's counterparts of the paper's numbers:<ul>{items}</ul></div>")
    parts.append(findings_html(analysis))
    parts.append("<h2>Comparisons with the baseline (E2E time per item)</h2>")
    parts.append(f"<p class=\"sub\">Ratio of geometric means over repetitions. Primary interval: Welch's t on log "
                 f"values; beside it a percentile bootstrap by repetition. p (Holm): Welch's p adjusted across the "
                 f"study's {sum(1 for c in analysis.shown if c.metric == 'e2e' and not c.is_aa)} non-A/A "
                 "comparisons. Effect words: &lt;1% negligible, &lt;5% small, &lt;20% moderate, else large.</p>")
    if multi_host(analysis):
        parts.append(f"<p class=\"sub\">The study ran on {len(analysis.hosts)} hosts: each platform is compared with "
                     "the baseline of its own host, never another's. How each platform spreads over the hosts: "
                     "<a href=\"#tab-fleet\">fleet</a>, <a href=\"#tab-hosts\">host by host</a>.</p>")
    parts.append(_comparison_table(analysis, colours))
    if analysis.advice:
        rows = [[a.workload, a.platform + (f" on {a.host}" if multi_host(analysis) else ""), fmt_knobs(a.knobs),
                 f"{a.noise:.2%}", str(a.n_now), str(a.n_halfwidth),
                 str(a.n_power)] for a in analysis.advice]
        target = analysis.advice[0].target
        parts.append(f"<h3>Sample-size advisor</h3><p class=\"sub\">{html_text(ADVISOR_NOTE)}</p>")
        parts.append(_table(Table("advisor", "", "", ["workload", "platform", "knobs", "noise (sd of logs)",
                                                      "repetitions now", f"for a ±{target:.0%} CI",
                                                      f"to detect +{target:.0%} (80% power)"], rows)))
    if analysis.adaptive:
        a = analysis.adaptive
        rows = [[c["workload"], c["platform"] + (f" on {c.get('host')}" if multi_host(analysis) else ""),
                 fmt_knobs(c["knobs"]), str(c["n"]),
                 "n/a" if c["half_width"] is None else f"±{c['half_width']:.2%}", stop_words(c, a)]
                for c in a["comparisons"]]
        parts.append(f"<h3>Adaptive repetitions</h3><p>Target ±{a['target']:.1%} on {esc(a['metric'])}; "
                     f"{a['rounds']} round(s); {'stopped: ' if a['stopped'] else ''}{esc(a['reason'])}.</p>")
        parts.append(_table(Table("adaptive", "", "", ["workload", "platform", "knobs", "n", "half-width", "why it "
                                                       "stopped"], rows)))
    parts.append("<h2 id=\"warnings\">Warnings</h2>")
    if analysis.warnings:
        parts.extend(f"<div class=\"box warn\">{esc(w.text)}</div>" for w in analysis.warnings)
    else:
        parts.append("<p>None: the host looked tuned and every effect is above the noise floor.</p>")
    parts.append("<h2 id=\"hints\">Why: root-cause hints</h2>")
    if analysis.hints:
        parts.extend(f"<div class=\"box hint\"><strong>{esc(h.status)}</strong>: {esc(h.text)} "
                     f"<a href=\"#{esc(h.figure)}\">evidence</a></div>"
                     for h in analysis.hints)
    else:
        parts.append("<p>No rule found evidence to explain a difference (rules read probe metrics, phases and "
                     "write-back and page-fault series; a study without probes gives them little to read).</p>")
    parts.append("<h2 id=\"figures\">Figures and tables</h2>")
    skipped: list[Skipped] = []
    for view in analysis.views:
        if isinstance(view, Skipped):
            skipped.append(view)
            continue
        paper = f" <span class=\"skip\">({esc(view.paper)})</span>" if view.paper else ""
        if isinstance(view, Figure):
            svg = figures.render(view, colours)
            data = f"<details><summary>numbers</summary>{_table(view.table)}</details>" if view.table else ""
            note = f"<figcaption>{esc(view.note)}</figcaption>" if view.note else ""
            parts.append(f"<figure id=\"{esc(view.id)}\"><h3>{esc(view.title)}{paper}</h3>{svg}{note}{data}</figure>")
        elif len(view.rows) > LONG_TABLE:  # e.g. every probe metric: keep the page scannable
            unfold = " open" if view.id in {h.figure for h in analysis.hints} else ""  # a hint points here
            parts.append(f"<section id=\"{esc(view.id)}\"><h3>{esc(view.title)}{paper}</h3><details{unfold}><summary>"
                         f"{len(view.rows)} rows</summary>{_table(view)}</details></section>")
        else:
            parts.append(f"<section id=\"{esc(view.id)}\"><h3>{esc(view.title)}{paper}</h3>{_table(view)}</section>")
    if skipped:
        parts.append("<h3>Not measured in this study</h3><ul class=\"skip\">")
        parts.extend(f"<li id=\"{esc(s.id)}\">{esc(s.title)} ({esc(s.paper)}): {esc(s.reason)}</li>" for s in skipped)
        parts.append("</ul>")
    if analysis.failures:
        parts.append(f"<h2>Cells that did not finish ({len(analysis.failures)})</h2><ul>")
        parts.extend(f"<li>{esc(line)}</li>" for line in analysis.failures[:50])
        parts.append("</ul>")
    parts.append("<h2 id=\"host\">Host fingerprint</h2>")
    parts.append(_table(Table("host", "", "", ["key", "value"], _fingerprint_rows(host)), klass="wrap"))
    if multi_host(analysis) and analysis.hosts_meta:  # the runner's record of each host of a cluster study
        parts.append("<h3>Hosts of the study</h3>")
        parts.append(_table(Table("hosts", "", "", ["host", "key", "value"],
                                  [[h, *row] for h in analysis.hosts
                                   for row in _fingerprint_rows(analysis.hosts_meta.get(h) or {})]), klass="wrap"))
    parts.append(f"<h2 id=\"study\">Study file</h2><pre>{esc(analysis.study_text)}</pre>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>isobench report: {esc(study.name)}</title><style>{CSS}</style></head>"
            f"<body><main>{''.join(parts)}</main></body></html>\n")

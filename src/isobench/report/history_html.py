"""``isobench history``'s text table and its self-contained HTML page (one trend figure per
series: the ratio and its interval run after run, change points marked, and what differed at
each as text). The series and change points come from analysis/history.py; the command itself is
isobench/history_command.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from isobench.report.plaintext import html_text

if TYPE_CHECKING:  # the analysis (and scipy under it) loads when the command runs, not with the CLI
    from isobench.analysis.history import ChangePoint, Run, Series


def _plain(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def attribution_words(cp: ChangePoint, limit: int = 6) -> str:
    """"knob slowdown: - → 0.2; kernel: 6.1.0-18 → 6.1.0-21", or what to suspect when nothing differs."""
    if not cp.attribution:
        return "nothing isobench records differed between these runs (the host's state, or a change it does not record)"
    shown = [f"{c.fact}: {c.before} → {c.after}" + ("" if c.steady else " (varies)") for c in cp.attribution[:limit]]
    more = len(cp.attribution) - limit
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def change_words(cp: ChangePoint) -> str:
    return f"{cp.before:.3f}× → {cp.after:.3f}× ({cp.change:+.1%}, p={cp.pvalue:.2g})"


def run_numbers(runs: list[Run]) -> dict[str, int]:
    """Run id -> its number, 1 for the oldest: how the table and the figures name runs."""
    return {run.run_id: i + 1 for i, run in enumerate(runs)}


def _ci(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{low:.3f}–{high:.3f}"


def parameters_words() -> str:
    from isobench.analysis.history import MAX_PVALUE, OTAVA_VERSION

    return (f"change points: Apache Otava {OTAVA_VERSION} (E-divisive means, t-test p < {MAX_PVALUE:g} between "
            "segments, a change at least the runs' A/A noise floor and the equivalence margin)")


def change_lines(runs: list[Run], series: list[Series]) -> list[tuple[Series, ChangePoint, str]]:
    """One sentence per change point: where, how much, and what differed."""
    numbers, by_id = run_numbers(runs), {r.run_id: r for r in runs}
    lines = []
    for s in series:
        for cp in s.change_points:
            run = by_id[cp.run_id]
            lines.append((s, cp, f"{s.key.words()}: change at run {numbers[cp.run_id]} ({run.started()}, "
                                 f"{run.directory}): {change_words(cp)}; what differed from run "
                                 f"{numbers[s.points[cp.index - 1].run_id]}: {attribution_words(cp)}"))
    return lines


def print_history(runs: list[Run], series: list[Series], console: Console) -> None:
    """The text view: one row per series, then one line per change point."""
    studies = sorted({r.study for r in runs})
    if runs:
        _plain(console, f"{len(runs)} run(s) of {', '.join(studies)} from {runs[0].started()} to "
                        f"{runs[-1].started()}; {parameters_words()}")
    if not series:
        _plain(console, "no comparison in these runs yet: a run needs finished cells on a platform and the baseline")
        return
    numbers = run_numbers(runs)
    several_studies, several_hosts = len(studies) > 1, len({s.key.host for s in series}) > 1
    table = Table(title="ratio to the baseline, run after run")
    columns = [*(["study"] if several_studies else []), "workload", "entry", "metric",
               *(["host"] if several_hosts else []), "runs", "newest ×", "95% CI", "change points"]
    for column in columns:
        table.add_column(column)
    for s in series:
        last = s.points[-1]
        changes = ", ".join(f"run {numbers[cp.run_id]}: {cp.change:+.1%}" for cp in s.change_points) or "none"
        entry = s.key.entry + (f" [{s.key.variant}]" if s.key.variant else "") + (" (A/A)" if last.is_aa else "")
        cells = [*([s.key.study] if several_studies else []), s.key.workload, entry, s.key.metric,
                 *([s.key.host] if several_hosts else []), str(len(s.points)),
                 f"{last.ratio:.3f} (run {numbers[last.run_id]})", _ci(last.ci_low, last.ci_high), changes]
        table.add_row(*(Text(cell) for cell in cells))  # plain text on any console: labels are the user's
    console.print(table)
    for _, _, line in change_lines(runs, series):
        _plain(console, line)


# -- the HTML page ----------------------------------------------------------------------------

def trend(data: dict[str, Any], colours: dict[str, str]) -> Any:
    """One series over runs: each run's ratio and 95% interval (hollow: the run's A/A), the mean of
    each segment between change points dotted, each change point a dashed line before its run."""
    from isobench.report.figures import WIDTH_IN, plt

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.9))
    colour = colours.get(data["key"], "#4c72b0")
    x, ratio = data["runs"], data["ratio"]
    ax.plot(x, ratio, color=colour, linewidth=1, alpha=0.5)
    for xi, r, low, high, aa in zip(x, ratio, data["low"], data["high"], data["aa"], strict=True):
        if low is not None and high is not None:
            ax.plot([xi, xi], [low, high], color=colour, linewidth=2, alpha=0.6)
        ax.plot([xi], [r], "o", color=colour, markerfacecolor="white" if aa else colour, markersize=6)
    for start, end, mean in data["segments"]:
        ax.plot([x[start] - 0.3, x[end - 1] + 0.3], [mean, mean], color="#555555", linestyle=":", linewidth=1.2)
    for index, label in data["changes"]:
        ax.axvline(x[index] - 0.5, color="#c44e52", linestyle="--", linewidth=1.2)
        ax.annotate(label, (x[index] - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color="#c44e52", fontsize=9)
    ax.axhline(1.0, color="#888888", linewidth=0.8)
    ax.set_xticks(x, [str(n) for n in x])
    ax.set_xlim(min(x) - 0.7, max(x) + 0.7)
    ax.set_xlabel("run (oldest first)")
    ax.set_ylabel(f"× {data['baseline']}")
    return fig


def trend_data(series: Series, numbers: dict[str, int]) -> dict[str, Any]:
    cuts = [0, *(cp.index for cp in series.change_points), len(series.points)]
    means = [sum(p.ratio for p in series.points[a:b]) / (b - a) for a, b in zip(cuts, cuts[1:], strict=False)]
    return {"key": series.key.entry, "runs": [numbers[p.run_id] for p in series.points],
            "ratio": [p.ratio for p in series.points], "low": [p.ci_low for p in series.points],
            "high": [p.ci_high for p in series.points], "aa": [p.is_aa for p in series.points],
            "segments": [(a, b, m) for a, b, m in zip(cuts, cuts[1:], means, strict=False)],
            "changes": [(cp.index, f"{cp.change:+.1%}") for cp in series.change_points],
            "baseline": series.points[-1].facts.get("baseline", "baseline")}


def render_history_html(runs: list[Run], series: list[Series]) -> str:
    """The page: the runs, then one figure per series with its change points and what differed."""
    import matplotlib

    from isobench.report import figures
    from isobench.report.html import CSS
    from isobench.report.plaintext import MPL_RC

    esc = html_text  # every user string in the page goes through it
    numbers = run_numbers(runs)
    colours = figures.platform_colours(list(dict.fromkeys(s.key.entry for s in series)))
    by_series = {id(s): [line for t, _, line in change_lines(runs, series) if t is s] for s in series}
    parts = ["<h1>isobench history</h1>",
             f"<p class=\"sub\">{len(runs)} run(s) of {esc(', '.join(sorted({r.study for r in runs})))} · "
             f"{len(series)} series · {esc(parameters_words())} · written "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p>",
             "<h2>Runs</h2><div class=\"scroll\"><table><thead><tr><th>run</th><th>started</th><th>study</th>"
             "<th>directory</th></tr></thead><tbody>"]
    parts += [f"<tr><td class=\"num\">{numbers[r.run_id]}</td><td>{esc(r.started())}</td><td>{esc(r.study)}</td>"
              f"<td>{esc(r.directory)}</td></tr>" for r in runs]
    parts.append("</tbody></table></div><h2>Series</h2>")
    figures.plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False,
                                 "axes.spines.right": False})
    for index, s in enumerate(series):
        with matplotlib.rc_context(MPL_RC):  # labels are text: "$\\foo$" is never math text
            svg = figures._svg(trend(trend_data(s, numbers), colours))
        title = f"{s.key.workload} · {s.key.entry}" + (f" [{s.key.variant}]" if s.key.variant else "") + \
            f" ({s.points[-1].display}) · {s.key.metric} · {s.key.study} · {s.key.host}"
        notes = by_series[id(s)] or [f"no change point in {len(s.points)} run(s) (a change must be at least "
                                     f"{s.min_magnitude:.1%})"]
        items = "".join(f"<li>{esc(line)}</li>" for line in notes)
        parts.append(f"<figure id=\"series-{index}\"><h3>{esc(title)}</h3>{svg}<figcaption><ul>{items}</ul>"
                     "</figcaption></figure>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>isobench history</title><style>{CSS}</style></head>"
            f"<body><main>{''.join(parts)}</main></body></html>\n")

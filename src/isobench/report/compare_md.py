"""`isobench compare A B --format md`: two studies side by side as a Markdown table sized for a
pull-request comment.

One row per comparison of B with A: each study's own ratio to its baseline (what the platform
cost in A, what it costs in B) and the change, B's time over A's, with its verdict. Resolved
changes come first, so a comment cut to fit still shows them.
"""

from __future__ import annotations

import json
from collections import defaultdict

from isobench.analysis.compare import Comparison
from isobench.analysis.crossstudy import CrossResult
from isobench.analysis.verdict import NOT_COMPARABLE
from isobench.report.plaintext import md, md_table
from isobench.report.terminal import fmt_knobs
from isobench.store import Store
from isobench.studyfile import load_study_text

#: GitHub refuses a comment over 65,536 characters: the table stops short of it, with room to spare
SIZE_LIMIT = 60_000
#: row order by verdict: a slowdown first (and a comparison across devices, a setup to fix), then a
#: speed-up, then what is not resolved
VERDICT_ORDER = {NOT_COMPARABLE: 0, "slower": 0, "higher": 0, "faster": 1, "lower": 1, "inconclusive": 2,
                 "equivalent": 3}
COLUMNS = ["workload", "platform", "metric", "A ×baseline (95% CI)", "B ×baseline (95% CI)",
           "change B/A (95% CI)", "verdict"]
LEGEND = ("×baseline: each study's time relative to its own baseline; change: B's time over A's "
          "(ratio of geometric means, Welch 95% CI on logs, Holm across comparisons).")


def baseline_of(store: Store) -> str:
    """The platform entry a study compares with (its rows show "baseline" for their own ratio)."""
    study = load_study_text(store.meta("study_yaml") or "", store.meta("study_file") or "store", check_host=False)
    return study.baseline


def _ratio(c: Comparison) -> str:
    if c.verdict == NOT_COMPARABLE:  # a ratio across devices is no platform's cost
        return NOT_COMPARABLE
    if c.ci_low is None or c.ci_high is None:
        return f"{c.ratio:.3f}× (n<2)"
    return f"{c.ratio:.3f}× ({c.ci_low:.3f}–{c.ci_high:.3f})"


def _key(c: Comparison, with_host: bool) -> tuple[str, ...]:
    key = (c.workload, json.dumps(c.params, sort_keys=True), c.label, json.dumps(c.knobs, sort_keys=True),
           c.metric)
    return (*key, c.host) if with_host else key


def _own(within: list[Comparison]) -> dict[tuple[str, ...], str]:
    """A study's own ratios by group, with and without the host: B's group meets A's on the same
    host where A has it (a cluster study), else wherever A ran it (two hosts, two studies)."""
    cells: dict[tuple[str, ...], str] = {}
    for c in within:
        cells.setdefault(_key(c, True), _ratio(c))
        cells.setdefault(_key(c, False), _ratio(c))
    return cells


def _own_cell(own: dict[tuple[str, ...], str], baseline: str, c: Comparison) -> str:
    found = own.get(_key(c, True)) or own.get(_key(c, False))
    return found or ("baseline" if c.label == baseline else "n/a")


def render_compare_md(result: CrossResult, name_a: str, name_b: str, baselines: tuple[str, str]) -> str:
    """The comment: a heading, A and B, the table, notes and how to read it."""
    rows_of = sorted(result.comparisons, key=lambda c: VERDICT_ORDER.get(c.verdict, 2))
    own_a, own_b = _own(result.within_a), _own(result.within_b)
    variants: dict[str, set[str]] = defaultdict(set)
    for c in rows_of:
        variants[c.workload].add(json.dumps(c.params, sort_keys=True))
    several_hosts = len({c.host for c in rows_of}) > 1
    rows = []
    for c in rows_of:
        workload = c.workload
        if len(variants[c.workload]) > 1:  # a sweep: the parameters tell its rows apart
            workload += " " + ", ".join(f"{k}={v}" for k, v in sorted(c.params.items()))
        platform = c.label + (f" · {fmt_knobs(c.knobs)}" if c.knobs else "") + \
            (f" on {c.host}" if several_hosts else "")
        rows.append([workload, platform, c.metric, _own_cell(own_a, baselines[0], c),
                     _own_cell(own_b, baselines[1], c), _ratio(c),
                     f"{c.verdict}: {c.verdict_reason}" if c.verdict == NOT_COMPARABLE else c.verdict])
    head = ["### isobench compare: B relative to A", "", f"A: {md(name_a)}  ", f"B: {md(name_b)}", ""]
    tail = [""] + [f"- note: {md(note)}" for note in result.notes] + ([""] if result.notes else []) + [LEGEND]
    room = SIZE_LIMIT - sum(len(line) + 1 for line in head + tail) - 200  # 200: the note on rows cut
    shown = rows
    while shown and len(md_table(COLUMNS, shown)) > room:
        shown = shown[:len(shown) * 9 // 10]
    cut = len(rows) - len(shown)
    table = [md_table(COLUMNS, shown)]
    if cut:
        table.append(f"\n{cut} more row(s) left out to fit a comment: `isobench compare A B` shows them all.")
    return "\n".join(head + table + tail) + "\n"

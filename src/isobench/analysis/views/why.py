"""Why: per resolved overhead, the time each mechanism explains (counts × unit costs) and the rest."""

from __future__ import annotations

from typing import Any

from isobench.analysis.attribution import Attribution, Estimate, Row
from isobench.analysis.compare import Comparison
from isobench.analysis.interventions import FIELDS, describe_fields, engine_of, stored_entries
from isobench.analysis.views.base import Context, Table, View, builder

#: every "why" table's id starts so (the Markdown report gives them a section of their own)
WHY_PREFIX = "tab-why-"


def why_table_id(workload: str, label: str, knobs: dict[str, object]) -> str:
    extra = "-".join(f"{k}-{v}" for k, v in sorted(knobs.items()))
    return WHY_PREFIX + "-".join(filter(None, [workload, label, extra]))[:112]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _interval_ms(e: Estimate) -> str:
    low, high = e.interval()
    return f"{_ms(e.mean)} ({_ms(low)} to {_ms(high)})"


def _count(e: Estimate | None, scale: float = 1.0, unit: str = "") -> str:
    if e is None:
        return "not counted"
    value = e.mean * scale
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{shown} {unit}" if unit else shown


def _cost(e: Estimate | None) -> str:
    return "not measured" if e is None else f"{e.mean * 1e6:.3f}"


def _share(row: Row) -> str:
    if row.share is None:
        return "n/a"
    point, low, high = row.share
    return f"{point:.0%} ({low:.0%} to {high:.0%})"


def why_rows(a: Attribution) -> list[list[str]]:
    rows = []
    for row in a.rows:
        mech = row.mechanism
        scale, unit = mech.count_scale, mech.count_unit
        counts = f"{_count(row.n_baseline, scale, unit)} → {_count(row.n_platform, scale, unit)}" + (
            " (assumed)" if row.assumed else "")
        costs = "1 s per s, on any platform" if mech.fixed_cost is not None else "not priced" \
            if mech.unit_workload is None else f"{_cost(row.c_baseline)} → {_cost(row.c_platform)}"
        if row.explained is None:
            rows.append([mech.name, counts, costs, "n/a", "n/a", row.missing])
            continue
        note = mech.hidden_note if row.assumed else ""
        rows.append([mech.name, counts, costs, _interval_ms(row.explained), _share(row), note])
    if a.rest is not None:
        share = f"{a.rest.mean / a.added:.0%}" if a.added > 0 else "n/a"
        rows.append(["not explained by these", "", "", _interval_ms(a.rest), share,
                     "what no measured mechanism accounts for"])
    return rows


def _entry_change(ctx: Context, c: Comparison, t: Comparison) -> str | None:
    """What ``t``'s entry changes from ``c``'s, when it is one of its interventions (the same platform,
    labelled after it as ``isobench explain`` labels them: ``gvisor-platform-ptrace``); else None."""
    if not t.label.startswith(c.label + "-"):
        return None
    entries = stored_entries(ctx.store)
    mine, theirs = entries.get(c.label), entries.get(t.label)
    if mine is None or theirs is None or mine.name != theirs.name:
        return None
    written, other = mine.model_dump(), theirs.model_dump()
    fields = {f: other[f] for f in FIELDS if other.get(f) != written.get(f)}
    if set(fields) == {"platform"} and engine_of(mine) == engine_of(theirs):
        fields = {}  # systrap written out against gVisor's default: no change
    knobs: dict[str, Any] = {k: v for k, v in t.knobs.items() if c.knobs.get(k) != v}
    knobs.update({k: None for k in c.knobs if k not in t.knobs})
    words = [describe_fields(fields)] if fields else []
    words += [f"{k}={v}" if v is not None else f"without {k}" for k, v in sorted(knobs.items())]
    return " and ".join(words) or None


def tested_rows(ctx: Context, a: Attribution) -> list[list[str]]:
    """The interventions the study ran on this entry (``isobench explain`` adds them), each with the
    time per item it removed and its share of the added time: the tested steps of the waterfall."""
    c = a.comparison
    rows = []
    for t in ctx.comparisons:
        if (t.metric, t.workload, t.params, t.host) != (c.metric, c.workload, c.params, c.host) or t.is_aa \
                or t.label == c.label or t.mean is None or c.mean is None:
            continue
        change = _entry_change(ctx, c, t)
        if change is None:
            continue
        removed = c.mean - t.mean
        share = f"{removed / a.added:.0%} removed" if a.added > 0 else "n/a"
        interval = f" ({t.ci_low:.3f}–{t.ci_high:.3f})" if t.ci_low is not None and t.ci_high is not None else ""
        rows.append([f"tested: {change}", "", "", f"{-removed * 1e3:.3f}", share,
                     f"the entry as {t.label}: {t.ratio:.3f}×{interval} the baseline, against {c.ratio:.3f}×"])
    return rows


@builder(25)
def why(ctx: Context) -> list[View]:
    views: list[View] = []
    for a in ctx.attributions():
        c = a.comparison
        added = f"{a.added * 1e3:.3f} ms ({a.added_low * 1e3:.3f} to {a.added_high * 1e3:.3f})"
        views.append(Table(
            why_table_id(c.workload, c.label, c.knobs),
            f"Why {c.workload} on {c.platform}{ctx.on_host(c)} is slower: {added} added per item "
            f"({c.ratio:.3f}×)", "",
            ["mechanism", "per item, baseline → platform", "µs per event, baseline → platform",
             "adds per item (ms, 95% CI)", "share of the added time", "note"],
            why_rows(a) + tested_rows(ctx, a),
            "Each mechanism's added time is its count per item times its cost per event on each side "
            "(the cost from the mechanism's microbenchmark on the same host). Intervals are approximate "
            "(delta method). The rest is what the measured mechanisms do not explain. A 'tested' row is "
            "an intervention the study ran on this entry (isobench explain adds them): the time per item "
            "it removed (negative: it added time), and that as a share of the added time."))
    return views


def why_lines(attributions: list[Attribution], directory: str = "DIR") -> list[str]:
    """One sentence per resolved overhead: what each priced mechanism explains (a fixed-cost one that
    adds nothing is left out), which could be priced and are not, the rest, and the counts that
    jumped without a price."""
    lines = []
    for a in attributions:
        c = a.comparison
        parts = []
        for r in a.rows:
            if r.explained is None or a.added <= 0:
                continue
            share = r.explained.mean / a.added
            if r.mechanism.fixed_cost is not None and abs(share) < 0.005:
                continue
            parts.append(f"{r.mechanism.name} {r.explained.mean * 1e3:.2f} ms ({share:.0%})")
        unpriced = [r.mechanism.name for r in a.rows if r.explained is None
                    and (r.mechanism.unit_workload or r.mechanism.count_probe)]
        if unpriced:
            parts.append(f"{' and '.join(unpriced)} not priced (`isobench explain {directory}` prices them)")
        if a.rest is not None:
            by = " by what was priced" if unpriced else ""
            parts.append(f"not explained{by} {a.rest.mean * 1e3:.2f} ms ({a.rest.mean / a.added:.0%})")
        parts += [f"{r.mechanism.name} {r.n_baseline.mean:,.0f} → {r.n_platform.mean:,.0f} per item (not priced)"
                  for r in a.rows if r.explained is None and r.n_baseline is not None and r.n_platform is not None
                  and r.n_platform.mean > 1.5 * r.n_baseline.mean + 1]
        lines.append(f"{c.workload} on {c.platform} adds {a.added * 1e3:.2f} ms per item: {', '.join(parts)} "
                     f"(table {why_table_id(c.workload, c.label, c.knobs)})")
    return lines

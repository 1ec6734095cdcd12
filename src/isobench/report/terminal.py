"""The terminal view: a comparison table and hyperfine-style sentences."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from isobench.analysis.compare import Comparison, hosts_of, phase_attribution
from isobench.analysis.metric_sense import declared_metrics
from isobench.analysis.stats import fmt_floor, fmt_seconds
from isobench.analysis.verdict import (
    DIRECTIONS,
    MAX_NEEDED,
    NOT_COMPARABLE,
    fmt_devices,
    fmt_margin,
    within_margin,
)
from isobench.report.plaintext import Markup, markup, plain
from isobench.runtime_versions import version_words
from isobench.store import Store

#: CPU seconds per item from the cell's cgroup: beside e2e, it tells waiting from computing
CPU_METRIC = "cpu.per_item"

def fmt_knobs(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items())) or "-"


def fmt_ci(c: Comparison) -> str:
    if c.ci_low is None or c.ci_high is None:
        return "n/a (n<2)"
    return f"{c.ci_low:.2f}–{c.ci_high:.2f}"


def floor_width(aa: Comparison) -> float:
    """How far from 1 the A/A interval reaches: effects smaller than this are not resolved."""
    return max(abs(aa.ci_high - 1), abs(1 - aa.ci_low))  # type: ignore[operator]


def noise_floor(comparisons: list[Comparison], workload: str, metric: str, host: str | None = None) -> Comparison | None:
    return next((c for c in comparisons if c.is_aa and c.workload == workload and c.metric == metric
                 and c.verdict != NOT_COMPARABLE and (host is None or c.host == host)), None)


def common_knobs(comparisons: list[Comparison]) -> set[str]:
    """Knobs every comparison shares with the same value (study-wide settings): sentences leave them out."""
    if not comparisons:
        return set()
    first = comparisons[0].knobs
    return {k for k, v in first.items() if all(c.knobs.get(k) == v for c in comparisons)}


METHOD_WORDS = {"paired-log": "paired by round", "duet-paired": "paired in duets",
                "duet-crossover": "paired in duets, core difference removed"}


def sentence(c: Comparison, comparisons: list[Comparison], hide: set[str] | None = None) -> str:
    """One sentence per verdict, e.g.
    "docker/runc: resnet-infer e2e is equivalent to baremetal within ±2% (90% CI 0.99–1.01, n=8, paired by round)",
    "gvisor: resnet-infer e2e 1.07× baremetal (95% CI 1.04–1.10, n=5): 7.0% slower (moderate), mostly in
    inference (80% of the difference); A/A noise floor ±1.2%",
    "oci/runc: ... inconclusive: about 14 more repetitions would settle it",
    "oci/vanilla: resnet-infer e2e: not comparable: oci/vanilla ran on cpu and baremetal on cuda (...)"."""
    shown = {k: v for k, v in c.knobs.items() if k not in (hide or set())}
    knobs = f" [{fmt_knobs(shown)}]" if shown else ""
    where = f" on {c.host}" if len(hosts_of(comparisons)) > 1 else ""  # a cluster study: say which host
    how = ", " + METHOD_WORDS[c.method] if c.method in METHOD_WORDS else ""
    built = f" ({version_words(c.versions)})" if c.versions else ""  # which engine and runtime builds
    head = f"{c.platform}{built}{knobs}{where}: {c.workload} {c.metric}"
    if c.verdict == NOT_COMPARABLE:  # no ratio: across devices it would read as the platform's cost
        return f"{head}: {NOT_COMPARABLE}: {c.verdict_reason}"
    if c.verdict == "equivalent" and c.ci90_low is not None and c.ci90_high is not None:
        text = (f"{head} is equivalent to {c.baseline} within {fmt_margin(c.margin)} "
                f"(90% CI {c.ci90_low:.2f}–{c.ci90_high:.2f}, n={c.n}{how})")
        return text + _cpu_clause(c, comparisons)
    ci = f"95% CI {fmt_ci(c)}" if c.ci_low is not None else "no CI: fewer than 2 repetitions"
    text = f"{head} {c.ratio:.2f}× {c.baseline} ({ci}, n={c.n}{how})"
    if c.verdict in DIRECTIONS:
        text += f": {c.effect}" if c.effect else f": {c.verdict}"
        if within_margin(c):
            text += f", within the {fmt_margin(c.margin)} equivalence margin"
        if c.metric == "e2e":
            top = phase_attribution(comparisons, c)
            if top:
                share = (f"{top[1]:.0%} of the difference" if top[1] <= 1 else
                         f"{top[1]:.0%} of the difference: other phases moved the other way")
                text += f", mostly in {top[0]} ({share})"
        text += _cpu_clause(c, comparisons)
    else:
        text += ": inconclusive" + (f" ({c.verdict_reason})" if c.verdict_reason else "")
        if c.significant and c.p_holm is not None and c.p_holm >= 0.05:
            text += f" (the interval excludes 1, but not after Holm's correction: adjusted p={c.p_holm:.2f})"
        more = None if c.repetitions_needed is None else c.repetitions_needed - min(c.n, c.n_baseline)
        if more is not None and c.repetitions_needed is not None and c.repetitions_needed >= MAX_NEEDED:
            text += f": more than {MAX_NEEDED} repetitions would be needed at this noise"
        elif more is not None:
            text += f": about {more} more repetition{'s' if more != 1 else ''} would settle it"
        elif c.ci_low is None:
            text += ": it needs at least 2 repetitions a side"
    floor = noise_floor(comparisons, c.workload, c.metric, c.host) if c.noise_floor is None else None
    width = c.noise_floor if c.noise_floor is not None else (floor_width(floor) if floor and floor.ci_low is not None
                                                             else None)
    if width is not None and not c.is_aa:
        text += f"; A/A noise floor {fmt_floor(width)}"
    return text


def _cpu_clause(c: Comparison, comparisons: list[Comparison]) -> str:
    """Wall time and CPU time per item told apart: is the difference waiting or computing?"""
    if c.metric != "e2e":
        return ""
    cpu = next((o for o in comparisons if o.metric == CPU_METRIC and o.workload == c.workload and o.label == c.label
                and o.knobs == c.knobs and o.params == c.params and o.host == c.host), None)
    if cpu is None or cpu.verdict == "inconclusive":
        return ""
    cpu_text = f"CPU time per item {cpu.ratio:.2f}×, {cpu.verdict}"
    if c.verdict == "slower" and cpu.verdict in ("equivalent", "faster"):
        return f"; the extra time is spent waiting, not computing ({cpu_text})"
    if c.verdict == "slower" and cpu.verdict == "slower":
        return f"; it computes more per item ({cpu_text})"
    if c.verdict in ("equivalent", "faster") and cpu.verdict == "slower":
        return f"; it computes more per item without taking longer: the extra work runs beside waiting ({cpu_text})"
    if c.verdict == "faster" and cpu.verdict in ("equivalent", "slower"):
        return f"; it waits less, not computes less ({cpu_text})"
    return ""


def headline(comparisons: list[Comparison]) -> list[str]:
    from isobench.analysis.fleet import headlines as fleet_headlines

    hide = common_knobs(comparisons)
    # Several hosts: first how each platform spreads over the fleet, then host by host.
    lines = fleet_headlines(comparisons)
    # e2e, and the metrics a workload declares its headline (llm-generate's TTFT, TPOT, tokens/s)
    headlines = {"e2e", *declared_metrics()}
    lines += [sentence(c, comparisons, hide) for c in comparisons
              if c.metric in headlines and not c.is_aa and not c.emulated]
    for c in comparisons:
        if c.metric == "cell.startup" and c.significant and not c.is_aa and not c.emulated:
            shown = {k: v for k, v in c.knobs.items() if k not in hide}
            knobs = f" [{fmt_knobs(shown)}]" if shown else ""
            knobs += f" on {c.host}" if len(hosts_of(comparisons)) > 1 else ""
            lines.append(f"{c.platform}{knobs} ({c.workload}): starting a cell takes {c.mean:.2f} s vs {c.baseline_mean:.2f} s on "
                         f"{c.baseline} ({c.ratio:.1f}×, 95% CI {fmt_ci(c)}); not part of e2e")
    return lines


def noise_floor_lines(comparisons: list[Comparison]) -> list[str]:
    lines = []
    multi = len(hosts_of(comparisons)) > 1
    for c in comparisons:
        if c.is_aa and c.metric == "e2e" and c.verdict == NOT_COMPARABLE:
            lines.append(f"A/A entry for {c.workload}" + (f" on {c.host}" if multi else "")
                         + f": {NOT_COMPARABLE}, so no noise floor: {c.verdict_reason}")
        elif c.is_aa and c.metric == "e2e" and c.ci_low is not None and c.ci_high is not None:
            width = floor_width(c)
            lines.append(f"A/A noise floor for {c.workload}" + (f" on {c.host}" if multi else "") + f": {c.platform} vs {c.baseline} is {c.ratio:.3f}× "
                         f"(95% CI {fmt_ci(c)}): effects smaller than {fmt_floor(width)} are not resolved"
                         + _aa_verdict(c))
    return lines


def _aa_verdict(c: Comparison) -> str:
    if c.verdict == "equivalent":
        return f"; the A/A verdict is equivalent within {fmt_margin(c.margin)}"
    if c.verdict == "inconclusive":
        return "; the A/A verdict is inconclusive" + (f" ({c.verdict_reason})" if c.verdict_reason else "")
    return f"; the A/A entry reads {c.verdict}: a false alarm, or the host changed during the study"


#: the comparison table's verdict column: the word, coloured
MARKERS = {"slower": "[red]slower[/]", "faster": "[cyan]faster[/]", "higher": "[red]higher[/]",
           "lower": "[cyan]lower[/]", "equivalent": "[green]≈ equivalent[/]", "inconclusive": "[yellow]inconclusive[/]",
           NOT_COMPARABLE: "[magenta]not comparable[/]"}


def _startup(start: Comparison | None) -> str:
    """The start-up column: the platform's start-up time and its ratio (none across devices)."""
    if start is None:
        return ""
    return f"{start.mean:.2f} s" + ("" if start.verdict == NOT_COMPARABLE else f" ({start.ratio:.1f}×)")


def device_words(c: Comparison) -> str:
    """A not-comparable comparison's devices, in a few words: "cpu vs cuda" (the platform's first)."""
    return f"{fmt_devices(c.devices)} vs {fmt_devices(c.baseline_devices)}"


def comparison_table(store: Store, comparisons: list[Comparison]) -> Table:
    table = Table(title="E2E time per item vs the baseline (ratio of geometric means, 95% CI on logs: paired by "
                        "round or duet where that helps, else Welch)")
    baseline_rows = _baseline_rows(store)
    # A cluster study: each row is one host's ratio to that host's own baseline.
    multi = len(hosts_of(comparisons)) > 1 or len({row[5] for row in baseline_rows}) > 1
    host = (lambda h: [h]) if multi else (lambda h: [])  # noqa: E731
    for column in ("workload", *host("host"), "platform", "knobs", "n", "e2e/item", "× baseline", "95% CI", "verdict",
                   "start-up", "biggest phase change"):
        table.add_column(column, justify="right" if column in ("n", "e2e/item", "× baseline") else "left")
    startup = {(c.workload, c.label, str(c.knobs), c.host): c for c in comparisons if c.metric == "cell.startup"}
    for workload, display, knobs, n, mean, on in baseline_rows:
        table.add_row(*map(plain, (workload, *host(on), f"{display} (baseline)", fmt_knobs(knobs), str(n),
                                   fmt_seconds(mean), "1.00", "", "", "", "")))
    for c in comparisons:
        if c.metric != "e2e":
            continue
        start = startup.get((c.workload, c.label, str(c.knobs), c.host))
        top = phase_attribution(comparisons, c) if c.significant else None
        marker = Markup(MARKERS.get(c.verdict, "[yellow]inconclusive[/]"))
        ratio, ci = f"{c.ratio:.3f}", fmt_ci(c)
        if c.verdict == NOT_COMPARABLE:  # the devices, not the platform, set this ratio: none is shown
            marker, ratio, ci = markup("[magenta]not comparable ({})[/]", device_words(c)), "-", "-"
        table.add_row(*map(plain, (c.workload, *host(c.host), c.platform + (" (A/A)" if c.is_aa else ""),
                                   fmt_knobs(c.knobs), str(c.n), fmt_seconds(c.mean), ratio, ci,
                                   marker, _startup(start),
                                   f"{top[0]} ({top[1]:.0%})" if top else "")))
    return table


def _baseline_rows(store: Store) -> list[tuple[str, str, dict[str, Any], int, float, str]]:
    from isobench.analysis.groups import load_groups
    from isobench.studyfile import load_study_text

    study = load_study_text(store.meta("study_yaml") or "", "store", check_host=False)
    rows = []
    for group in load_groups(store):
        if group.platform_key == study.baseline and "e2e" in group.metrics:
            values = group.metrics["e2e"]
            rows.append((group.workload, group.display, group.knobs, len(values), sum(values) / len(values),
                         group.host))
    return rows


def failures(store: Store) -> list[str]:
    return [f"{row['status']}: {row['cell_id']} on {row['display']}: {row['error']}"
            for row in store.cells(include_warmup=True) if row["status"] != "ok"]


def cores_line(store: Store) -> str | None:
    """Where cells and harness ran (plan/cores.py), as the runner recorded it."""
    import json

    try:
        facts = json.loads(store.meta("cores") or "null")
    except ValueError:
        return None
    if not isinstance(facts, dict):
        return None
    if facts.get("layout") == "all":
        return "cores: every cell had every core (cell_cores: all), shared with the harness"
    sides = " | ".join(str(s) for s in facts.get("sides") or [])
    return (f"cores: cells on {sides} (one side per duet member)" if len(facts.get("sides") or []) > 1
            else f"cores: cells on {sides}") + f", harness on {facts.get('harness')}, engine {facts.get('engine')}"


def print_summary(store: Store, comparisons: list[Comparison], console: Console) -> None:
    from isobench.report.design import caveat_lines, design_line

    table = comparison_table(store, comparisons)
    if table.row_count:  # a density study times nothing per item: no empty e2e table
        console.print(table)
    for line in (design_line(store.meta("design")), cores_line(store)):
        if line:
            console.print(line, markup=False, highlight=False)
    for line in caveat_lines(store.meta("study_yaml"), store.meta("cores")):
        console.print(line, markup=False, highlight=False)
    for text in noise_floor_lines(comparisons) + headline(comparisons):
        console.print(text, markup=False, highlight=False)
    print_fleet(store, comparisons, console)
    from isobench.analysis.interference import summary_lines as interference_lines
    from isobench.analysis.layer_ladder import summary_lines as layer_lines

    for text in layer_lines(store) + interference_lines(store):
        console.print(text, markup=False, highlight=False)
    print_density(store, console)
    failed = failures(store)
    if failed:
        console.print(markup("[red]{} cell(s) did not finish:[/]", len(failed)))
        for line in failed[:20]:
            console.print(f"  {line}", markup=False, highlight=False)
    from isobench.analysis.summary import analyse

    analysis = analyse(store, with_views=False)
    for warning in analysis.warnings:
        if warning.kind != "cells":  # failures are listed above
            console.print(markup("[yellow]warning:[/] {}", warning.text), highlight=False)
    for hint in analysis.hints:
        console.print(markup("[cyan]why ({}):[/] {}", hint.status, hint.text), highlight=False)
    from isobench.analysis.views.why import why_lines

    for line in why_lines(analysis.attributions, str(store.directory)):
        console.print(markup("[cyan]why, in numbers:[/] {}", line), highlight=False)


def print_density(store: Store, console: Console) -> None:
    """A density study's table (analysis/density.py): memory per sandbox and start-up, per platform and N."""
    from isobench.analysis.density import COLUMNS, TITLE, density_rows, notes, table_rows

    rows = density_rows(store)
    if not rows:
        return
    table = Table(title=TITLE)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "platform" else "right")
    for row in table_rows(rows):
        table.add_row(*map(plain, row))
    console.print(table)
    for line in notes(rows):
        console.print(line, markup=False, highlight=False)


def print_fleet(store: Store, comparisons: list[Comparison], console: Console) -> None:
    """With two or more hosts: the fleet table and the host × comparison table (nothing with one host)."""
    from isobench.analysis.fleet import fleet_views
    from isobench.analysis.summary import load_hosts_meta
    from isobench.analysis.views import Table as ViewTable

    if len(hosts_of(comparisons)) < 2:
        return
    for view in fleet_views(comparisons, load_hosts_meta(store)):
        if isinstance(view, ViewTable):
            _print_table(view, console)


def _print_table(table: object, console: Console) -> None:
    rich_table = Table(title=plain(f"{table.title} ({table.paper})" if table.paper else table.title))  # type: ignore[attr-defined]
    for column in table.columns:  # type: ignore[attr-defined]
        rich_table.add_column(plain(column))
    for row in table.rows:  # type: ignore[attr-defined]
        rich_table.add_row(*map(plain, row))  # "[anon]" is a file name, not markup
    console.print(rich_table)


def print_cross(result: object, console: Console) -> None:
    """Two studies compared: a table of B/A ratios and one sentence per comparison."""
    comparisons: list[Comparison] = result.comparisons  # type: ignore[attr-defined]
    table = Table(title="B relative to A (ratio of geometric means, Welch 95% CI on logs, Holm across comparisons)")
    for column in ("workload", "platform", "knobs", "n A/B", "A", "B", "B/A", "95% CI", "p (Holm)", "effect"):
        table.add_column(column)
    for c in comparisons:
        table.add_row(*map(plain, (c.workload, c.platform, fmt_knobs(c.knobs), f"{c.n_baseline}/{c.n}",
                                   fmt_seconds(c.baseline_mean), fmt_seconds(c.mean), f"{c.ratio:.3f}", fmt_ci(c),
                                   "" if c.p_holm is None else f"{c.p_holm:.3g}",
                                   f"{NOT_COMPARABLE} ({device_words(c)})" if c.verdict == NOT_COMPARABLE
                                   else c.effect if c.significant_holm else "not resolved")))
    console.print(table)
    for c in comparisons:
        console.print(sentence(c, comparisons), markup=False, highlight=False)
    for note in result.notes:  # type: ignore[attr-defined]
        console.print(markup("[yellow]note:[/] {}", note))


def print_views(analysis: object, console: Console) -> None:
    """The studies' tables (and each figure's numbers) in the terminal; what was not measured, in one line each."""
    from isobench.analysis.views import Figure, Skipped
    from isobench.analysis.views import Table as ViewTable

    skipped = []
    for view in analysis.views:  # type: ignore[attr-defined]
        if isinstance(view, Skipped):
            skipped.append(view)
            continue
        table = view.table if isinstance(view, Figure) else view
        if not isinstance(table, ViewTable):
            continue
        rich_table = Table(title=plain(f"{view.title} ({view.paper})" if view.paper else view.title))
        for column in table.columns:
            rich_table.add_column(plain(column))
        for row in table.rows:
            rich_table.add_row(*map(plain, row))  # "[anon]" is a file name, not markup
        console.print(rich_table)
    for view in skipped:
        console.print(markup("[dim]not measured: {} ({}): {}[/]", view.title, view.paper, view.reason), highlight=False)


def print_results(directory: Any, label: str, console: Console) -> None:
    """A finished run's closing lines (``run``, ``explain``): its summary, then where its results are."""
    from isobench.analysis.compare import compare

    store = Store.open(directory)
    try:
        # Comparisons against emulated cells (VMs under TCG) are refused; `summary --force` shows them.
        print_summary(store, [c for c in compare(store) if not c.emulated], console)
    finally:
        store.close()
    console.print(markup(label + ": [bold]{}[/] (isobench summary {})", directory, directory))

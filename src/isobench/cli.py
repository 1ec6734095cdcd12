"""The command line: isobench run | plan | summary | export | doctor | platforms | workloads."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from isobench.errors import UserError
from isobench.report.plaintext import Markup, PlainConsole, markup

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="What does this execution platform cost my deep-learning workload, and why?")
# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns: give them room.
# Plain consoles: a user's label or error text is never read as markup (report/plaintext.py).
console = PlainConsole() if sys.stdout.isatty() else PlainConsole(width=160)
err_console = PlainConsole(stderr=True)

StudyArg = Annotated[Optional[str], typer.Argument(  # noqa: UP045 (typer needs Optional)
    help="study YAML file, or a built-in study name (default: the built-in default study)")]


def _read_study(study: str | None) -> tuple[str, str]:
    from isobench.study.loader import load_study

    _, text, name = load_study(study)
    return text, name


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, study: StudyArg = None,
        study_opt: Annotated[Optional[str], typer.Option("--study", help="same as the STUDY argument")] = None,  # noqa: UP045
        out: Annotated[Optional[Path], typer.Option("--out", help="study directory to write")] = None,  # noqa: UP045
        resume: Annotated[bool, typer.Option("--resume", help="run only the cells not yet finished")] = False,
        script: Annotated[Optional[Path], typer.Option(  # noqa: UP045
            "--script", help="run your own Python script as the workload instead of a study: "
                             "`isobench run --script train.py -- ARGS`; mark phases with isobench.phase()")] = None,
        platforms: Annotated[str, typer.Option(help="with --script: the platforms, comma-separated")] =
        "baremetal,docker",
        repetitions: Annotated[int, typer.Option(help="with --script: measured runs per platform")] = 3,
        ray: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--ray", metavar="ADDRESS", help="run the cells on the nodes of the Ray cluster at ADDRESS "
                                             "(HOST:PORT, or auto), one cell per node at a time")] = None,
        allow_unauthenticated: Annotated[bool, typer.Option(
            "--allow-unauthenticated", help="with --ray: join a cluster that has no token authentication "
                                            "(anyone who reaches it runs code as root on its nodes)")] = False,
        ) -> None:
    """Run a study (or, with --script, your own script on bare metal and Docker) and print its result table."""
    from isobench.analysis.compare import compare
    from isobench.report.terminal import print_summary
    from isobench.runner.study import run_study
    from isobench.store import Store

    study = study or study_opt
    if script is not None:  # every positional (and anything after --) belongs to the script
        from isobench.workloads.script import script_study

        text, name = script_study(script, [*([study] if study else []), *ctx.args],
                                  platforms.split(","), repetitions)
    elif ctx.args:
        raise UserError(f"unexpected argument(s) {' '.join(ctx.args)}", field="isobench run",
                        fix="see `isobench run --help`; script arguments need --script")
    else:
        text, name = (None, None) if (resume and study is None) else _read_study(study)
    try:
        if ray is not None:
            from isobench.runner.cluster import run_study_on_ray

            directory = run_study_on_ray(text, name, out, resume, console, ray, allow_unauthenticated)
        else:
            directory = run_study(text, name, out, resume, console)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    store = Store.open(directory)
    # Comparisons against emulated cells (VMs under TCG) are refused; `summary --force` shows them.
    print_summary(store, [c for c in compare(store) if not c.emulated], console)
    console.print(markup("results: [bold]{}[/] (isobench summary {})", directory, directory))


@app.command()
def plan(study: StudyArg = None) -> None:
    """Print the cells a study expands to and the estimated time; runs nothing."""
    from isobench.plan import expand
    from isobench.platforms import PLATFORMS
    from isobench.study.loader import load_study
    from isobench.workloads import WORKLOADS

    parsed, _, name = load_study(study)
    cells = expand(parsed)
    table = Table(title=f"{parsed.name}: {len(cells)} cells (from {name})")
    for column in ("#", "cell", "workload", "platform", "knobs", "cores", "rep", "est. s"):
        table.add_column(column)
    total = 0.0
    pair_time: dict[str, float] = {}
    for cell in cells:
        workload = WORKLOADS.get(cell.workload)
        estimate = workload.estimate_s(workload.Params(**cell.params)) + \
            PLATFORMS.get(cell.platform).startup_estimate_s
        pair = cell.extra.get("duet_pair")
        if pair:  # a duet pair's two cells run at once: the pair takes as long as its slower cell
            total += max(0.0, estimate - pair_time.get(pair, 0.0))
            pair_time[pair] = max(estimate, pair_time.get(pair, 0.0))
        else:
            total += estimate
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(cell.knobs.items())) or "-"
        table.add_row(str(cell.seq), cell.cell_id, cell.workload_key, cell.platform_key, knobs,
                      cell.cores or "-",
                      f"warm-up {cell.rep}" if cell.warmup else str(cell.rep), f"{estimate:.1f}")
    console.print(table)
    console.print(f"estimated time: {total / 60:.1f} min for {len(cells)} cells "
                  f"({parsed.warmup} warm-up and {parsed.repetitions} measured round(s), order seeded by {parsed.seed}; "
                  f"schedule {parsed.schedule}" + (f"; cells of at least {parsed.min_seconds:g} s"
                                                   if parsed.min_seconds else "") + ")")


@app.command()
def summary(directory: Path,
            as_json: Annotated[bool, typer.Option("--json", help="one JSON record per comparison")] = False,
            tables: Annotated[bool, typer.Option("--tables", help="also the studies' tables (Park & Bahn, "
                                                               "Prashanthi, Samani & Salehi, Siddaramanna & John)")]
            = False,
            force: Annotated[bool, typer.Option("--force", help="also compare against emulated cells")] = False,
            ) -> None:
    """Print the comparisons of a finished (or interrupted) study."""
    from isobench.analysis.compare import compare
    from isobench.report.terminal import print_summary
    from isobench.store import Store

    store = Store.open(directory)
    comparisons = [c for c in compare(store) if force or not c.emulated]
    if as_json:
        fields = ("workload", "platform", "label", "knobs", "metric", "baseline", "ratio", "ci_low",
                  "ci_high", "n", "significant", "n_baseline", "p_value", "mean", "baseline_mean", "unit",
                  "method", "is_aa", "host", "p_holm", "verdict", "ci90_low", "ci90_high", "margin",
                  "repetitions_needed", "method_reason", "se_paired", "se_unpaired")
        sys.stdout.write(json.dumps([{k: c.as_dict()[k] for k in fields} for c in comparisons], indent=1) + "\n")
        return
    print_summary(store, comparisons, console)
    if tables:
        from isobench.analysis.summary import analyse
        from isobench.report.terminal import print_views

        print_views(analyse(store), console)


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"
    parquet = "parquet"


@app.command()
def export(directory: Path,
           fmt: Annotated[ExportFormat, typer.Option("--format", help="output format")] = ExportFormat.jsonl,
           output: Annotated[Optional[Path], typer.Option("--output", "-o", help="file to write")] = None,  # noqa: UP045
           ) -> None:
    """Write one record per cell and metric (jsonl, csv or parquet)."""
    from isobench.report.export import export as do_export
    from isobench.store import Store

    store = Store.open(directory)
    target = output or directory / f"export.{fmt.value}"
    do_export(store, fmt.value, target)
    console.print(f"wrote {target}")


@app.command("schema")
def schema_cmd(name: Annotated[str, typer.Argument(
        help="export (one `isobench export` record) or summary (`isobench summary --json`)")]) -> None:
    """Print the versioned JSON Schema of a machine-readable output."""
    from isobench.schema import schema

    sys.stdout.write(json.dumps(schema(name), indent=1) + "\n")


class ReportFormat(StrEnum):
    html = "html"
    md = "md"


@app.command()
def report(directory: Path,
           fmt: Annotated[ReportFormat, typer.Option("--format", help="html (one self-contained file) or md")] =
           ReportFormat.html,
           output: Annotated[Optional[Path], typer.Option("--output", "-o", help="file to write")] = None,  # noqa: UP045
           force: Annotated[bool, typer.Option("--force", help="also compare against emulated cells")] = False,
           ) -> None:
    """Write the study's report: headline, comparisons with CIs and noise floor, figures, hints, host."""
    from isobench.analysis.summary import analyse
    from isobench.store import Store

    store = Store.open(directory)
    analysis = analyse(store, force=force)
    if fmt is ReportFormat.html:
        from isobench.report.html import render_html

        text = render_html(analysis)
    else:
        from isobench.report.markdown import render_markdown

        text = render_markdown(analysis)
    target = output or directory / f"report.{fmt.value}"
    target.write_text(text)
    console.print(f"wrote {target}")


@app.command("compare")
def compare_cmd(directory_a: Path, directory_b: Path,
                force: Annotated[bool, typer.Option("--force", help="compare what the studies share even when "
                                                                    "their workloads or parameters differ")] = False,
                as_json: Annotated[bool, typer.Option("--json", help="one JSON record per comparison")] = False,
                ) -> None:
    """Compare two studies (e.g. two hosts or two versions): B's time relative to A's, group by group."""
    from isobench.analysis.crossstudy import cross_compare
    from isobench.report.terminal import print_cross
    from isobench.store import Store

    store_a, store_b = Store.open(directory_a), Store.open(directory_b)
    result = cross_compare(store_a, store_b, "A", "B", force=force)
    if as_json:
        sys.stdout.write(json.dumps([c.as_dict() for c in result.comparisons], indent=1) + "\n")
        return
    console.print(f"A = {directory_a}, B = {directory_b}")
    print_cross(result, console)


@app.command()
def doctor(ray: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--ray", metavar="ADDRESS", help="check every node of the Ray cluster at ADDRESS instead of this host")]
        = None,
        repair: Annotated[bool, typer.Option(
            "--repair", help="restore the host state (cpufreq, sysctls, Jetson clocks) and remove the "
                             "leftovers that runners which died left behind, and say what was restored")] = False,
        ) -> None:
    """Which platforms and knobs work on this host (or on each node of a Ray cluster), and why not where not."""
    if repair:
        _doctor_repair()
        return
    if ray is not None:
        _doctor_cluster(ray)
        return

    from isobench.fingerprint import host_fingerprint
    from isobench.platforms import PLATFORMS, platform_variants
    from isobench.platforms.base import ALL_KNOBS
    from isobench.study.model import PlatformEntry

    host = host_fingerprint()
    console.print(f"host: {host['cpu_model']}, {host['cores']} cores, kernel {host['kernel']}, "
                  f"cgroup {host['cgroup']['mode']}, governor {host['governor'] or 'not exposed'}")
    table = Table(title="platforms")
    for column in ("platform", "works", "why not / notes", *sorted(ALL_KNOBS)):
        table.add_column(column)
    for name, runtime in platform_variants():
        platform = PLATFORMS.get(name)(PlatformEntry(name=name, runtime=runtime))
        avail = platform.availability()
        knob_cells = []
        for knob in sorted(ALL_KNOBS):
            if not avail.ok:
                knob_cells.append("-")
            elif knob in avail.knobs_unavailable:
                knob_cells.append(Markup("[red]no[/]"))
            else:
                knob_cells.append(Markup("[green]yes[/]"))
        notes = "; ".join([avail.reason, *avail.notes, *(f"{k}: {v}" for k, v in avail.knobs_unavailable.items())])
        table.add_row(platform.display(), Markup("[green]yes[/]" if avail.ok else "[red]no[/]"), notes.strip("; "),
                      *knob_cells)
    console.print(table)
    from isobench.platforms.vm import doctor_lines

    for line in doctor_lines():
        console.print(Markup(line))  # the KVM line is styled; its text comes from this host
    from isobench.plan.placement import host_knob_problems

    problems = host_knob_problems()
    for knob in ("governor", "max_freq", "power_mode", "jetson_clocks", "numa_node"):
        state = markup("[red]unavailable[/]: {}", problems[knob]) if knob in problems else "[green]available[/]"
        console.print(Markup(f"host knob {knob}: {state}"))
    _probe_summary()


def _doctor_repair() -> None:
    from isobench.runner.hoststate import STATE_DIR, journal
    from isobench.runner.leftovers import sweep_leftovers

    restored, removed = sweep_leftovers()
    for line in restored:
        console.print(line, markup=False, highlight=False)  # "<kind> <target> restored to <value>"
    for line in removed:
        console.print(f"removed: {line}", markup=False, highlight=False)
    if not restored and not removed:
        console.print("nothing to repair: no runner that died left host state changed", markup=False)
    held = journal()
    if held:  # live runners' changes (or ones that could not be put back): listed, not touched
        console.print(f"still journaled in {STATE_DIR}: " + ", ".join(f"{e['kind']} {e['key']}" for e in held),
                      markup=False, highlight=False)


def _doctor_cluster(address: str) -> None:
    from isobench.runner.cluster import class_labels, connect_with_auth, describe_nodes
    from isobench.runner.rayauth import describe_mode

    ray, auth = connect_with_auth(address, allow_unauthenticated=True)  # shown below, not refused
    console.print(describe_mode(auth), markup=False, highlight=False)
    try:
        nodes = describe_nodes(ray, full=True)
    finally:
        ray.shutdown()
    table = Table(title=f"Ray cluster at {address}: {len(nodes)} live node(s)")
    for column in ("node", "host", "address", "cores", "memory", "GPUs", "labels", "platforms that work",
                   "platforms that do not"):
        table.add_column(column)
    nodes = sorted(nodes, key=lambda n: n["host_key"])
    for node in nodes:
        fp = node["fingerprint"]
        works = [p for p, why in node["platforms"].items() if not why]
        broken = [p for p, why in node["platforms"].items() if why]
        labels = ", ".join(f"{k}={v}" for k, v in sorted(class_labels(node["labels"]).items()))
        table.add_row(node["node_id"][:8], node["host_key"], node["address"], str(fp["cores"]),
                      f"{fp['memory_bytes'] / 2**30:.0f} GiB", str(node["gpus"]), labels,
                      ", ".join(works), ", ".join(broken))
    console.print(table)
    for node in nodes:  # why not, once per reason (VM variants share theirs)
        reasons: dict[str, list[str]] = {}
        for platform, why in node["platforms"].items():
            if why:
                reasons.setdefault(why, []).append(platform)
        for why, platforms in reasons.items():
            short = why if len(why) <= 160 else why[:157] + "..."
            console.print(f"{node['host_key']}: {', '.join(platforms)}: {short}")
    hosts = [n["host_key"] for n in nodes]
    if len(set(hosts)) < len(hosts):
        console.print(Markup("[yellow]several nodes share a host[/]: a study uses one node per host, so cells do not "
                      "measure each other; label separate hosts with `ray start --labels isobench-host=NAME`"))


def _probe_summary() -> None:
    from isobench.probes import PROBES

    ready, missing = [], []
    for name, cls in PROBES:
        check = cls.check()
        (ready if check.ok else missing).append(name if check.ok else f"{name} ({check.reason})")
    console.print(f"probes that work here: {', '.join(ready) or 'none'}"
                  + (f"; unavailable: {'; '.join(missing)}" if missing else "") + " (details: isobench probes)")


@app.command()
def platforms() -> None:
    """List the platform plugins."""
    from isobench.platforms import PLATFORMS

    table = Table(title="platforms")
    table.add_column("name")
    table.add_column("description")
    table.add_column("knobs")
    for name, cls in PLATFORMS:
        table.add_row(name, cls.description, ", ".join(sorted(cls.knobs)))
    console.print(table)


@app.command()
def workloads(names: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        help="only these workloads (default: all)")] = None) -> None:
    """List the workloads with their phases and parameters (name=default: meaning)."""
    from isobench.workloads import WORKLOADS

    unknown = [n for n in names or [] if n not in WORKLOADS]
    if unknown:
        raise UserError(f"unknown workload {unknown[0]!r}", field="isobench workloads",
                        fix=f"use one of {', '.join(WORKLOADS.names())}")
    table = Table(title="workloads", show_lines=True)
    for column in ("name", "description", "item", "phases", "parameters"):
        table.add_column(column)
    for name, cls in WORKLOADS:
        if names and name not in names:
            continue
        # defaults and descriptions hold brackets: the plain console shows them as they are
        params = "\n".join(f"{key}={field.get_default(call_default_factory=True)}: {field.description or ''}"
                           for key, field in cls.Params.model_fields.items())
        phases = ", ".join(cls.phases) + (f"\nonce: {', '.join(cls.setup_phases)}" if cls.setup_phases else "")
        table.add_row(name, cls.description, cls.item, phases, params)
    console.print(table)


@app.command()
def probes() -> None:
    """List the probes: what each measures, its settings (defaults in brackets), whether it is in
    the default set, and whether it can run on this host."""
    from isobench.probes import PROBES

    table = Table(title="probes (a study's `probes:` picks them; absent: the default set)", show_lines=True)
    for column in ("name", "default", "works here", "measures", "settings"):
        table.add_column(column)
    for name, cls in PROBES:
        check = cls.check()
        here = "[green]yes[/]" if check.ok else markup("[red]no[/]: {}", check.reason)
        if check.ok and check.partial:
            here += "".join(markup("\n[yellow]not here[/] {}: {}", part, why) for part, why in check.partial.items())
        settings = "\n".join(
            f"{key} [{field.default_factory() if field.default_factory else field.default}]: {field.description or ''}"
            for key, field in cls.Settings.model_fields.items())
        table.add_row(name, "yes" if cls.default else "", Markup(here), cls.description, settings or "-")
    console.print(table)


@app.command()
def baseload(seconds: Annotated[float, typer.Option(help="seconds to measure each idle state")] = 30.0,
             container: Annotated[bool, typer.Option(help="also measure an idle container")] = True) -> None:
    """Measure the idle host's power (and an idle container's) so the energy probe can split a
    cell's energy into baseload and incremental."""
    from isobench.probes.baseload import NoMeter, measure_baseload

    try:
        result = measure_baseload(seconds, container, console.print)
    except NoMeter as exc:
        err_console.print(f"energy meters: unavailable here: {exc}")
        raise typer.Exit(1) from None
    for key in ("host_idle_w", "container_idle_w"):
        if key in result:
            watts = ", ".join(f"{name} {value:.2f} W" for name, value in result[key].items())
            console.print(f"{key.removesuffix('_w').replace('_', ' ')}: {watts}")
    console.print(f"saved to {result['saved_to']} (the energy probe uses it when the meters match)")


@app.command()
def nvmsim(traces: Annotated[list[Path], typer.Argument(help="write-back trace(s), CSV or Parquet; several are "
                                                            "tenants replayed together in time order; or a study "
                                                            "directory: the ftrace probe's traces of its cells")],
           cell: Annotated[Optional[str], typer.Option(help="with a study directory: only this cell")] = None,  # noqa: UP045
           export_csv: Annotated[Optional[Path], typer.Option(help="with a study directory: write the cells' "  # noqa: UP045
                                                                   "traces as CSV here (file or directory)")] = None,
           capacity: Annotated[str, typer.Option(help="NVM buffer size: pages, or a size such as 64m")] = "16m",
           policy: Annotated[str, typer.Option(help="lru, clock or hot (hotness-aware)")] = "lru",
           nvm: Annotated[str, typer.Option(help="NVM device preset")] = "pcm",
           slow: Annotated[str, typer.Option(help="slow device preset")] = "hdd",
           high_watermark: Annotated[float, typer.Option(help="destage in the background above this "
                                                              "dirty fraction (1: only when full)")] = 1.0,
           low_watermark: Annotated[float, typer.Option(help="background destage stops at this fraction")] = 0.8,
           sweep: Annotated[int, typer.Option(help="also sweep this many LRU capacities (0: none)")] = 0,
           characterise: Annotated[bool, typer.Option(help="also show write-backs per page over time "
                                                           "and the hottest pages' share")] = False,
           plot: Annotated[Optional[Path], typer.Option(help="write the sweep as an SVG plot here")] = None,  # noqa: UP045
           as_json: Annotated[bool, typer.Option("--json", help="print the results as JSON")] = False,
           ) -> None:
    """Replay write-back traces against a slow device with and without an NVM flush layer.

    Trace columns: time_s, ino, index (page index in the inode), and optionally dev, op (W or R)
    and tenant. Devices: hdd, sata-ssd, nvme-ssd, pcm, optane (hdd and pcm as in Park & Bahn).
    """
    from isobench.nvmsim import trace as trace_mod
    from isobench.nvmsim.devices import device
    from isobench.nvmsim.run import capacity_sweep, compare, default_capacities

    if len(traces) == 1 and traces[0].is_dir():
        from isobench.nvmsim.study_cli import nvmsim_study

        for flag, given in (("--plot", plot), ("--characterise", characterise)):
            if given:
                raise UserError(f"{flag} works on trace files, not on a study directory", field=flag,
                                fix=f"write the cells' traces with --export-csv DIR, then run nvmsim {flag} on one")
        nvmsim_study(traces[0], cell, export_csv, capacity, policy, nvm, slow, high_watermark, low_watermark,
                     as_json, console, sweep=sweep)
        return
    from isobench.nvmsim.study_cli import sim_config_from_options

    config = sim_config_from_options(capacity, policy, nvm, slow, high_watermark, low_watermark)
    try:
        trace = trace_mod.load(traces)
    except (OSError, ValueError) as err:
        raise UserError(str(err), fix="see `isobench nvmsim --help` for the columns") from None
    result = compare(trace, config, device(nvm), device(slow))
    rows = capacity_sweep(trace, default_capacities(trace, sweep or 64), device(nvm), device(slow)) \
        if (sweep or plot) else []
    if plot:
        from isobench.nvmsim.plot import sweep_svg

        plot.write_text(sweep_svg(rows, f"NVM flush layer: {nvm} in front of {slow}, LRU"))
    extra: dict[str, object] = {}
    if characterise:
        from isobench.nvmsim.characterise import hot_share_over_time, writebacks_per_page_over_time

        extra = {"heatmap": writebacks_per_page_over_time(trace), "hot_share": hot_share_over_time(trace)}
    if as_json:
        sys.stdout.write(json.dumps({**result, "sweep": rows, **extra}, indent=1) + "\n")
        return
    table = Table(title=f"{result['events']} events, {result['pages']} pages, NVM {result['capacity_pages']} "
                        f"pages ({result['policy']}), {nvm} in front of {slow}")
    for column in ("system", "mean", "p50", "p99", "writes to the slow device"):
        table.add_column(column, justify="right")
    for label, key, writes in (("baseline", "baseline", result["slow_writes_baseline"]),
                               ("with NVM", "nvm_system", result["slow_writes_nvm"])):
        stats = result[key]
        table.add_row(label, *(f"{stats[k] * 1e6:,.1f} µs" for k in ("mean_s", "p50_s", "p99_s")), str(writes))
    console.print(table)
    console.print(f"I/O latency improvement: {result['improvement']:.1%}; NVM hit ratio {result['hit_ratio']:.1%}; "
                  f"{result['flushes_avoided']} flushes to {slow} avoided; destaged {result['destage_bytes']:,} bytes "
                  f"({result['sync_destages']} synchronous, {result['background_destages']} in the background)")
    if rows:
        sweep_table = Table(title="LRU capacity sweep (one pass, Mattson stack distances)")
        for column in ("capacity (pages)", "hit ratio", "mean latency", "improvement"):
            sweep_table.add_column(column, justify="right")
        writes = max(1, result["write_backs"])
        for row in rows:
            sweep_table.add_row(str(row["capacity"]), f"{row['hits'] / writes:.1%}", f"{row['mean_s'] * 1e6:,.1f} µs",
                                f"{row['improvement']:.1%}")
        console.print(sweep_table)
    if plot:
        console.print(f"sweep plot: {plot}")
    if extra:
        hot_table = Table(title="share of write-backs from each window's hottest 1% of pages")
        for column in ("window", "from (s)", "write-backs", "pages", "hottest 1% share"):
            hot_table.add_column(column, justify="right")
        for row in extra["hot_share"]:  # type: ignore[union-attr]
            hot_table.add_row(str(row["window"]), f"{row['start_s']:.1f}", str(row["write_backs"]),
                              str(row["pages"]), f"{row['hot_share']:.1%}")
        console.print(hot_table)


def main() -> None:
    try:
        # Without standalone mode click returns an Exit's code instead of raising it.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except UserError as err:
        err_console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(130)
    except Exception as err:  # click usage errors
        import click

        if isinstance(err, click.ClickException):
            err.show()
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()

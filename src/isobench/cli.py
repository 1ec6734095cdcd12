"""The command line: isobench run | plan | summary | export | schema | report | compare | history |
doctor | replicate | explain | platforms | workloads | probes | baseload | nvmsim. Commands that live elsewhere
are registered here: doctor (runner/doctor.py), the listings (listings.py), nvmsim (nvmsim/cli.py),
replicate (replicate/commands.py), history (history_command.py), explain (explain_command.py).
Tables and records go to stdout, progress and notes to stderr (console.py); bad input is one line
with its fix and exit 2, a tripped `compare --fail-if` or `history --fail-on-change` exit 1."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table

from isobench.console import (
    JsonOpt,
    console,
    err_console,
    outlive_reader,
    print_json,
    reader_may_leave,
)
from isobench.errors import UserError
from isobench.explain_command import explain
from isobench.history_command import history
from isobench.listings import platforms, probes, workloads
from isobench.nvmsim.cli import nvmsim
from isobench.replicate.commands import replicate
from isobench.runner.doctor import doctor

if TYPE_CHECKING:
    from isobench.analysis.compare import Comparison

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="What does this execution platform cost my deep-learning workload, and why? "
                       "Tables go to stdout, progress and errors to stderr; bad input exits 2.")

StudyArg = Annotated[Optional[str], typer.Argument(  # noqa: UP045 (typer needs Optional)
    help="study YAML file, or a built-in study name (default: the built-in default study)")]


def _read_study(study: str | None, budget: str | None = None) -> tuple[str, str]:
    """The study's text as written (``--budget`` in it) and its name: the runner fills in the
    resolving design, and stores how it did."""
    from isobench.studyfile import load_study_as_written, with_budget_text

    _, text, name = load_study_as_written(study)
    return with_budget_text(text, name, budget), name


BudgetOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--budget", metavar="TIME", help="time budget of `repetitions: auto` (e.g. 8m, 90s, 1h): rounds stop "
                                     "when it is spent; over the study's own `budget`")]


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
        repetitions: Annotated[Optional[int], typer.Option(  # noqa: UP045
            help="with --script: measured runs per platform (default: rounds until each verdict, "
                 "within the budget)")] = None,
        warmup_steps: Annotated[Optional[int], typer.Option(  # noqa: UP045
            "--warmup-steps", min=0, help="with --script: the script's first steps that are not timed "
                                          "(default 10: a process's first steps pay for lazy set-up)")] = None,
        budget: BudgetOpt = None,
        ray: Annotated[Optional[str], typer.Option(  # noqa: UP045
            "--ray", metavar="ADDRESS", help="run the cells on the nodes of the Ray cluster at ADDRESS "
                                             "(HOST:PORT, or auto), one cell per node at a time")] = None,
        allow_unauthenticated: Annotated[bool, typer.Option(
            "--allow-unauthenticated", help="with --ray: join a cluster that has no token authentication "
                                            "(anyone who reaches it runs code as root on its nodes)")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="progress on stderr, and at the end the records "
                                                             "of `isobench summary --json` on stdout")] = False,
        history: Annotated[Optional[Path], typer.Option(  # noqa: UP045
            "--history", metavar="FILE", help="after the study, append its comparisons to this history database "
                                              "(created if absent; read by `isobench history --history FILE`)")] = None,
        ) -> None:
    """Run a study (or, with --script, your own script on bare metal and Docker) and print its result table."""
    if history is not None:  # a history file the run could not be appended to is refused before it runs
        from isobench.store.history_db import check_appendable
        check_appendable(history)
    from isobench.runner.hostload_baseline import BeforeSetup

    # the host is watched from here, while the runner imports itself and reads the study (its own
    # work, subtracted), instead of for a second of its own before set-up
    before_setup = BeforeSetup() if ray is None and not resume else None
    from isobench.runner.study import run_study

    study = study or study_opt
    if script is not None:  # every positional (and anything after --) belongs to the script
        from isobench.studyfile import with_budget_text
        from isobench.workloads.script import script_study

        text, name = script_study(script, [*([study] if study else []), *ctx.args],
                                  platforms.split(","), repetitions, warmup_steps)
        text = with_budget_text(text, name, budget)
    elif ctx.args:
        raise UserError(f"unexpected argument(s) {' '.join(ctx.args)}", field="isobench run",
                        fix="see `isobench run --help`; script arguments need --script")
    elif resume and study is None:
        if budget is not None:
            raise UserError("a resumed study keeps the budget it was started with", field="--budget",
                            fix="drop --budget when resuming")
        text, name = None, None
    else:
        text, name = _read_study(study, budget)
    progress = err_console if as_json else console  # with --json, stdout holds only the records
    with outlive_reader():
        try:
            if ray is not None:
                from isobench.runner.cluster import run_study_on_ray

                directory = run_study_on_ray(text, name, out, resume, progress, ray, allow_unauthenticated)
            else:
                directory = run_study(text, name, out, resume, progress, before_setup)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        if history is not None:
            from isobench.analysis.history import append_to_history
            err_console.print(append_to_history(history, directory), markup=False, highlight=False, soft_wrap=True)
        if as_json:
            summary(directory, as_json=True)
            err_console.print(f"results: {directory} (isobench summary {directory})", markup=False,
                              highlight=False)
            return
        from isobench.report.terminal import print_results

        print_results(directory, "results", console)


@app.command()
def plan(study: StudyArg = None, as_json: JsonOpt = False, budget: BudgetOpt = None) -> None:
    """Print the cells a study expands to, its design and the estimated time; runs nothing."""
    from isobench.plan import expand
    from isobench.platforms import PLATFORMS
    from isobench.report.design import budget_lines, comparison_designs
    from isobench.studyfile import load_study_as_written, resolve_study_text
    from isobench.workloads import WORKLOADS

    _, written_text, name = load_study_as_written(study)
    parsed, _, design = resolve_study_text(written_text, name, budget)
    cells = expand(parsed)
    table = Table(title=f"{parsed.name}: {len(cells)} cells (from {name})")
    for column in ("#", "cell", "workload", "platform", "knobs", "cores", "rep", "est. s"):
        table.add_column(column)
    total = 0.0
    pair_time: dict[str, float] = {}
    group_work: dict[str, float] = {}
    records = []
    for cell in cells:
        workload = WORKLOADS.get(cell.workload)
        work, startup = workload.estimate_s(workload.Params(**cell.params)), PLATFORMS.get(cell.platform).startup_estimate_s
        estimate = work + startup
        pair = cell.duet.pair if cell.duet else None
        if pair:  # a duet pair's two cells run at once: the pair takes as long as its slower cell
            total += max(0.0, estimate - pair_time.get(pair, 0.0))
            pair_time[pair] = max(estimate, pair_time.get(pair, 0.0))
        elif cell.tenant:  # a tenant group's members launch one after another, then run at once
            group = cell.tenant.group
            total += startup + max(0.0, work - group_work.get(group, 0.0))
            group_work[group] = max(work, group_work.get(group, 0.0))
        else:
            total += estimate
        records.append({"seq": cell.seq, "cell_id": cell.cell_id, "workload": cell.workload_key,
                        "platform": cell.platform_key, "knobs": cell.knobs, "cores": cell.cores, "rep": cell.rep,
                        "warmup": cell.warmup, "estimate_s": estimate})
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(cell.knobs.items())) or "-"
        table.add_row(str(cell.seq), cell.cell_id, cell.workload_key, cell.platform_key, knobs,
                      cell.cores or "-",
                      f"warm-up {cell.rep}" if cell.warmup else str(cell.rep), f"{estimate:.1f}")
    lines = budget_lines(parsed, design, total)
    if as_json:
        print_json({"study": parsed.name, "source": name, "cells": records, "estimated_s": total,
                    "warmup": parsed.warmup, "repetitions": parsed.repetitions, "seed": parsed.seed,
                    "schedule": parsed.schedule, "min_seconds": parsed.min_seconds,
                    "warmup_items": parsed.warmup_items, "budget_s": design.budget_s,
                    "design": {"sentence": design.sentence(), "filled": design.filled, "written": design.written,
                               "fallback": design.fallback, "aa_added": design.aa_added},
                    "comparisons": comparison_designs(parsed), "notes": lines})
        return
    console.print(table)
    console.print(f"estimated time: {total / 60:.1f} min for {len(cells)} cells "
                  f"({parsed.warmup} warm-up and {parsed.initial_repetitions} measured round(s), order seeded by "
                  f"{parsed.seed}; schedule {parsed.schedule}" + (f"; cells of at least {parsed.min_seconds:g} s"
                                                                 if parsed.min_seconds else "") + ")")
    console.print(f"design: {design.sentence()}", markup=False, highlight=False)
    for comparison in comparison_designs(parsed):
        console.print(f"  {comparison['entry']} vs {comparison['baseline']}: {comparison['design']}",
                      markup=False, highlight=False)
        if comparison.get("caveat"):
            console.print(f"    note: {comparison['caveat']}", markup=False, highlight=False)
    for line in lines:
        console.print(line, markup=False, highlight=False)


#: the fields of one `summary --json` comparison record, in order (`isobench schema summary`)
SUMMARY_FIELDS = ("workload", "platform", "label", "knobs", "metric", "baseline", "ratio", "ci_low", "ci_high",
                  "n", "significant", "n_baseline", "p_value", "mean", "baseline_mean", "unit", "method", "is_aa",
                  "host", "p_holm", "verdict", "ci90_low", "ci90_high", "margin", "repetitions_needed",
                  "verdict_reason", "method_reason", "se_paired", "se_unpaired", "versions")


def summary_record(comparison: Comparison) -> dict[str, Any]:
    """One `summary --json` record, read off the comparison's attributes: ``dataclasses.asdict``
    deep-copies every field, and once per key it was half of the command's time."""
    return {name: getattr(comparison, name) for name in SUMMARY_FIELDS}


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
        from isobench.analysis.findings import findings_for_study

        findings = findings_for_study(store.meta("study_name") or "", directory)
        print_json([summary_record(c) for c in comparisons] + [f.as_record() for f in findings])
        return
    print_summary(store, comparisons, console)
    if tables:
        from isobench.analysis.summary import analyse
        from isobench.report.terminal import print_views

        print_views(analyse(store), console)


def _writing(path: Path, write: Callable[[], object]) -> None:
    """Run ``write``; a file that cannot be written is bad input (one line, exit 2), not a traceback."""
    try:
        write()
    except OSError as err:
        raise UserError(f"cannot write: {err.strerror or err}", file=str(path), field="--output",
                        fix="give a file in a directory that exists and that you may write") from None


class ExportFormat(StrEnum):
    """The names of report/export.py's WRITERS (not imported here: it pulls in the analysis)."""
    jsonl = "jsonl"
    csv = "csv"
    parquet = "parquet"
    bmf = "bmf"


@app.command()
def export(directory: Path,
           fmt: Annotated[ExportFormat, typer.Option(
               "--format", help="output format: jsonl, csv, parquet (one record per cell and metric), or "
                                "bmf (Bencher Metric Format: per comparison, the ratio and its 95% CI)")] =
           ExportFormat.jsonl,
           output: Annotated[Optional[Path], typer.Option(  # noqa: UP045
               "--output", "-o", help="file to write; absent or -: stdout")] = None,
           ) -> None:
    """Write one record per cell and metric (jsonl, csv or parquet), or the comparisons for Bencher
    (bmf), to stdout or to the -o file."""
    from isobench.report.export import export as do_export
    from isobench.report.export import write
    from isobench.store import Store

    target = None if output is None or str(output) == "-" else output  # None: stdout
    if target is None and fmt is ExportFormat.parquet and sys.stdout.isatty():
        raise UserError("parquet is binary and stdout is a terminal", field="--format parquet",
                        fix="give -o FILE, or pipe stdout into a file or another tool")
    store = Store.open(directory)
    if target is None:
        with reader_may_leave():
            write(store, fmt.value, sys.stdout.buffer)
        return
    _writing(target, lambda: do_export(store, fmt.value, target))
    err_console.print(f"wrote {target}", markup=False, highlight=False)


@app.command("schema")
def schema_cmd(name: Annotated[str, typer.Argument(
        help="export (one `isobench export` record) or summary (`isobench summary --json`)")]) -> None:
    """Print the versioned JSON Schema of a machine-readable output."""
    from isobench.schema import schema

    print_json(schema(name))


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
    _writing(target, lambda: target.write_text(text))
    err_console.print(f"wrote {target}", markup=False, highlight=False)


class CompareFormat(StrEnum):
    text = "text"
    md = "md"


@app.command("compare")
def compare_cmd(directory_a: Path, directory_b: Path,
                force: Annotated[bool, typer.Option("--force", help="compare what the studies share even when "
                                                                    "their workloads or parameters differ")] = False,
                as_json: Annotated[bool, typer.Option("--json", help="one JSON record per comparison")] = False,
                fmt: Annotated[CompareFormat, typer.Option(
                    "--format", help="text (tables and sentences) or md (one Markdown table, sized for a "
                                     "pull-request comment)")] = CompareFormat.text,
                fail_if: Annotated[Optional[str], typer.Option(  # noqa: UP045
                    "--fail-if", metavar="slower[:RATIO]",
                    help="for CI: exit 1 when a group of B is resolved slower than A (the verdict `slower`: "
                         "its 95% interval excludes 1 after Holm) and, with :RATIO, B/A >= RATIO "
                         "(slower:1.05: at least 5% slower); faster[:RATIO] likewise for B/A <= RATIO. "
                         "A group that ran on another device in B than in A (not comparable) exits 1 too. "
                         "Exit 0 otherwise; 2 stays for bad input")] = None,
                ) -> None:
    """Compare two studies (e.g. two hosts or two versions): B's time relative to A's, group by group."""
    from isobench.analysis.compare import parse_fail_if
    from isobench.analysis.crossstudy import cross_compare
    from isobench.analysis.verdict import NOT_COMPARABLE
    from isobench.report.terminal import print_cross
    from isobench.store import Store

    gate = parse_fail_if(fail_if) if fail_if is not None else None  # bad input before any work
    if as_json and fmt is not CompareFormat.text:
        raise UserError("--json and --format md are two outputs for one stdout", field="--format",
                        fix="give one of them")
    store_a, store_b = Store.open(directory_a), Store.open(directory_b)
    result = cross_compare(store_a, store_b, "A", "B", force=force)
    if as_json:
        print_json([c.as_dict() for c in result.comparisons])
    elif fmt is CompareFormat.md:
        from isobench.report.compare_md import baseline_of, render_compare_md

        text = render_compare_md(result, str(directory_a), str(directory_b),
                                 (baseline_of(store_a), baseline_of(store_b)))
        with reader_may_leave():
            sys.stdout.write(text)
    else:
        console.print(f"A = {directory_a}, B = {directory_b}")
        print_cross(result, console)
    if gate is None:
        return
    tripped = [c for c in result.comparisons if gate.trips(c)]
    for c in tripped:
        text = (f"fail-if {gate}: {c.workload} {c.platform} {c.metric}: {c.verdict}: {c.verdict_reason}"
                if c.verdict == NOT_COMPARABLE else
                f"fail-if {gate}: {c.workload} {c.platform} {c.metric} is {c.ratio:.3f}x {c.baseline} "
                f"(95% CI {c.ci_low:.3f}-{c.ci_high:.3f}), resolved {c.verdict}")
        err_console.print(text, markup=False, highlight=False, soft_wrap=True)
    if tripped:
        raise typer.Exit(1)
    err_console.print(f"fail-if {gate}: no group of B tripped it ({len(result.comparisons)} compared)",
                      markup=False, highlight=False, soft_wrap=True)


app.command()(doctor)  # runner/doctor.py


app.command()(replicate)  # replicate/commands.py


app.command()(explain)  # explain_command.py


app.command()(platforms)  # listings.py
app.command()(workloads)
app.command()(probes)


@app.command()
def baseload(seconds: Annotated[float, typer.Option(help="seconds to measure each idle state")] = 30.0,
             container: Annotated[bool, typer.Option(help="also measure an idle container")] = True,
             as_json: JsonOpt = False) -> None:
    """Measure the idle host's power (and an idle container's) so the energy probe can split a
    cell's energy into baseload and incremental."""
    from isobench.runner.baseload import NoMeter, measure_baseload

    try:  # progress on stderr: stdout holds only the result
        result = measure_baseload(seconds, container, lambda line: err_console.print(line, markup=False))
    except NoMeter as exc:
        err_console.print(f"energy meters: unavailable here: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        print_json(result)
        return
    for key in ("host_idle_w", "container_idle_w"):
        if key in result:
            watts = ", ".join(f"{name} {value:.2f} W" for name, value in result[key].items())
            console.print(f"{key.removesuffix('_w').replace('_', ' ')}: {watts}")
    console.print(f"saved to {result['saved_to']} (the energy probe uses it when the meters match)")


app.command()(nvmsim)  # nvmsim/cli.py
app.command()(history)  # history_command.py


def _usage_error(err: Exception) -> str:
    """A command-line usage error (unknown option, bad value, missing argument) as one line."""
    ctx = getattr(err, "ctx", None)
    command = getattr(ctx, "command_path", None) or "isobench"
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    return f"error: {' '.join(message.split())} (fix: see `{command} --help`)"


def main() -> None:
    # A broken pipe never reaches here: click turns it into exit 1 inside app(); the outputs a
    # reader may leave early handle it themselves (console.reader_may_leave, outlive_reader).
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
    except typer.TyperException as err:  # usage errors (typer's own click): unknown option, bad value
        err_console.print(_usage_error(err), markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

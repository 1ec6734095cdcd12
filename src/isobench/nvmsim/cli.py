"""``isobench nvmsim``: replay write-back traces (files, or a study's captured traces) against a
slow device with and without an NVM flush layer. Registered on the main app by isobench/cli.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from isobench.errors import UserError

# Consoles that read no markup or emoji in what they print (file names, preset names): this package
# sits below the report renderers, so it does not use their PlainConsole. Off a terminal, wide tables.
console = Console(markup=False, emoji=False, highlight=False, width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False)


def nvmsim(traces: Annotated[list[Path], typer.Argument(help="write-back trace(s), CSV or Parquet; several are "
                                                            "tenants replayed together in time order; or a study "
                                                            "directory: the ftrace probe's traces of its cells")],
           cell: Annotated[Optional[str], typer.Option(help="with a study directory: only this cell")] = None,  # noqa: UP045
           export_csv: Annotated[Optional[Path], typer.Option(help="with a study directory: write the cells' "  # noqa: UP045
                                                                   "traces as CSV here (file or directory)")] = None,
           capacity: Annotated[str, typer.Option(help="NVM buffer size: pages, a size such as 64m, or a "
                                                      "multiple of each trace's footprint (distinct pages "
                                                      "written back) such as 1x")] = "16m",
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
    from isobench.nvmsim.run import capacity_sweep, compare, default_capacities, footprint_report

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

    sim_config_from_options(capacity, policy, nvm, slow, high_watermark, low_watermark)  # checked before loading
    try:
        trace = trace_mod.load(traces)
    except (OSError, ValueError) as err:
        raise UserError(str(err), fix="see `isobench nvmsim --help` for the columns") from None
    config = sim_config_from_options(capacity, policy, nvm, slow, high_watermark, low_watermark, trace.footprint())
    result = compare(trace, config, device(nvm), device(slow))
    footprint = footprint_report(trace, device(nvm), device(slow))
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
        sys.stdout.write(json.dumps({**result, "footprint": footprint, "sweep": rows, **extra}, indent=1) + "\n")
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
    console.print(f"write-through at the end: {result['drain_pages']} pages still dirty in NVM "
                  f"({result['drain_s'] * 1e3:,.1f} ms on {slow}); improvement with it charged: "
                  f"{result['improvement_drained']:.1%}")
    from isobench.nvmsim.study_cli import needs_words

    fp_table = Table(title=f"capacity relative to the footprint: {footprint['footprint_pages']} pages "
                           f"({footprint['footprint_mib']:,.2f} MiB), {footprint['write_backs_per_page']:.2f} "
                           f"write-backs per page, top-10% pages {footprint['hot_share_top10']:.0%} of them (LRU)")
    for column in ("× footprint", "capacity", "improvement", "with drain", "drain (pages)"):
        fp_table.add_column(column, justify="right")
    for row in footprint["capacities"]:
        fp_table.add_row(f"{row['fraction']:g}×", f"{row['capacity_pages']} pages ({row['capacity_mib']:,.2f} MiB)",
                         f"{row['improvement']:.1%}", f"{row['improvement_drained']:.1%}", str(row["drain_pages"]))
    console.print(fp_table)
    console.print(f"capacity for Park & Bahn's {footprint['target']:.0%} (drain charged): {needs_words(footprint)}")
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
        err_console.print(f"sweep plot: {plot}")
    if extra:
        hot_table = Table(title="share of write-backs from each window's hottest 1% of pages")
        for column in ("window", "from (s)", "write-backs", "pages", "hottest 1% share"):
            hot_table.add_column(column, justify="right")
        for row in extra["hot_share"]:  # type: ignore[union-attr]
            hot_table.add_row(str(row["window"]), f"{row['start_s']:.1f}", str(row["write_backs"]),
                              str(row["pages"]), f"{row['hot_share']:.1%}")
        console.print(hot_table)

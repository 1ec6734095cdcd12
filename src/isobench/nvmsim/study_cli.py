"""``isobench nvmsim STUDY_DIR``: replay the write-back traces the ftrace probe captured in a
study's cells, one experiment per cell, with per-cell and average figures (Park & Bahn's format)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from isobench.errors import UserError
from isobench.nvmsim.model import SimConfig


def sim_config_from_options(capacity: str, policy: str, nvm: str, slow: str, high_watermark: float,
                            low_watermark: float, footprint: int = 1) -> SimConfig:
    """The command line's simulation options, checked: one-line errors naming the option. A
    capacity such as ``1x`` is that multiple of the trace's ``footprint`` (distinct pages written)."""
    from isobench.nvmsim.devices import PRESETS
    from isobench.study.model import parse_memory

    for name, value in (("--nvm", nvm), ("--slow", slow)):
        if value not in PRESETS:
            raise UserError(f"unknown device {value!r}", field=name, fix=f"use one of {', '.join(PRESETS)}")
    if policy not in ("lru", "clock", "hot"):
        raise UserError(f"unknown policy {policy!r}", field="--policy", fix="use lru, clock or hot")
    try:
        if capacity.lower().endswith("x"):
            fraction = float(capacity[:-1])
            if not fraction > 0:
                raise ValueError("a capacity relative to the footprint must be above 0")
            pages = max(1, math.ceil(fraction * max(footprint, 1) - 1e-9))
        else:
            pages = int(capacity) if capacity.isdigit() else max(1, parse_memory(capacity) // 4096)
        return SimConfig(pages, policy, high_watermark, low_watermark)  # type: ignore[arg-type]
    except ValueError as err:
        raise UserError(str(err).split("; fix:")[0], field="--capacity/--*-watermark",
                        fix="give pages, a size such as 64m or a multiple of the footprint such as 1x, "
                            "and 0 < low <= high <= 1") from None


def nvmsim_study(directory: Path, cell: str | None, export_csv: Path | None, capacity: str, policy: str,
                 nvm: str, slow: str, high_watermark: float, low_watermark: float, as_json: bool,
                 console: Console, sweep: int = 0) -> None:
    from isobench.nvmsim.devices import device
    from isobench.nvmsim.from_store import cell_traces
    from isobench.nvmsim.from_store import export_csv as write_csv
    from isobench.nvmsim.run import compare, footprint_report
    from isobench.store import Store

    if not Store.exists(directory):
        raise UserError("not a study directory (no results store)", file=str(directory),
                        fix="pass the --out directory of `isobench run`, or trace files")
    config = sim_config_from_options(capacity, policy, nvm, slow, high_watermark, low_watermark)
    traces = [t for t in cell_traces(directory, cell) if len(t.trace)]
    if not traces:
        raise UserError("no captured write-backs" + (f" for cell {cell}" if cell else ""), file=str(directory),
                        fix="run the study with the ftrace probe (probes: {ftrace: {}}) on a workload that writes files")
    if export_csv is not None:
        for path in write_csv(traces, export_csv):
            print(f"trace written: {path}", file=sys.stderr)  # progress, not the result
    results = []
    for item in traces:
        cell_config = sim_config_from_options(capacity, policy, nvm, slow, high_watermark, low_watermark,
                                              item.trace.footprint())
        result = compare(item.trace, cell_config, device(nvm), device(slow))
        results.append({"cell": item.cell_id, "workload": item.workload, "platform": item.platform, **result,
                        "footprint": footprint_report(item.trace, device(nvm), device(slow))})
    average = sum(r["improvement"] for r in results) / len(results)
    sweeps = _sweeps(traces, sweep, nvm, slow) if sweep else None
    if as_json:
        sys.stdout.write(json.dumps({"cells": results, "average_improvement": average,
                                     **({"sweep": sweeps} if sweeps else {})}, indent=1) + "\n")
        return
    size = f"{capacity} footprint" if capacity.lower().endswith("x") else f"{config.capacity} pages"
    table = Table(title=f"NVM flush layer: {nvm} ({size}, {policy}) in front of {slow}")
    for column in ("cell", "workload", "platform", "page write-backs", "footprint", "top-10% pages",
                   "baseline mean", "with NVM mean", "hit ratio", "improvement", "with drain", "82% needs"):
        table.add_column(column, justify="right")
    for r in results:
        fp = r["footprint"]
        table.add_row(r["cell"], r["workload"], r["platform"], str(r["write_backs"]), str(fp["footprint_pages"]),
                      f"{fp['hot_share_top10']:.0%}",
                      f"{r['baseline']['mean_s'] * 1e6:,.1f} µs", f"{r['nvm_system']['mean_s'] * 1e6:,.1f} µs",
                      f"{r['hit_ratio']:.1%}", f"{r['improvement']:.1%}", f"{r['improvement_drained']:.1%}",
                      needs_words(fp))
    console.print(table)
    drained = sum(r["improvement_drained"] for r in results) / len(results)
    console.print(f"average I/O latency improvement over {len(results)} cell(s): {average:.1%}, "
                  f"{drained:.1%} with the pages left dirty written through at the end "
                  f"(Park & Bahn report 77–90%, 82% on average)")
    if sweeps:
        sweep_table = Table(title=f"LRU capacity sweep: I/O latency improvement by NVM size ({nvm} in front of {slow})")
        sweep_table.add_column("capacity", justify="right")
        for item in traces:
            sweep_table.add_column(item.cell_id, justify="right")
        sweep_table.add_column("average", justify="right")
        for row in sweeps:
            values = row["improvement"]
            sweep_table.add_row(f"{row['capacity'] * 4096 / 2**20:,.2f} MiB",
                                *(f"{v:.1%}" for v in values), f"{sum(values) / len(values):.1%}")
        console.print(sweep_table)


def _sweeps(traces: list[Any], count: int, nvm: str, slow: str) -> list[dict[str, Any]]:
    """One LRU sweep per cell over capacities shared by all cells (log-spaced up to the largest
    trace's pages), so the cells line up row by row: [{capacity, improvement: [per cell]}]."""
    from isobench.nvmsim.devices import device
    from isobench.nvmsim.run import capacity_sweep

    top = max(max(item.trace.n_pages for item in traces), 2)
    capacities = sorted({int(c) for c in np.unique(np.geomspace(1, top, count).round())})
    per_cell = [capacity_sweep(item.trace, capacities, device(nvm), device(slow)) for item in traces]
    return [{"capacity": capacity, "improvement": [rows[k]["improvement"] for rows in per_cell]}
            for k, capacity in enumerate(capacities)]


def needs_words(report: dict[str, Any]) -> str:
    """The capacity a footprint report says reaches its target, in words: "0.85× (4.1 MiB)"."""
    needed = report["capacity_for_target"]
    if needed is None:
        return f"none (at most {report['ceiling']:.0%})"
    return f"{needed['fraction']:.2f}× ({needed['mib']:,.1f} MiB)"

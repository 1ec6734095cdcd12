"""``isobench platforms | workloads | probes``: the plugin listings, a table each or --json.
Registered on the main app by isobench/cli.py."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from isobench.console import JsonOpt, console, print_json
from isobench.errors import UserError
from isobench.report.plaintext import Markup, markup


def platforms(as_json: JsonOpt = False) -> None:
    """List the platform plugins."""
    from isobench.platforms import PLATFORMS

    if as_json:
        print_json([{"name": name, "description": cls.description, "knobs": sorted(cls.knobs)}
                    for name, cls in PLATFORMS])
        return
    table = Table(title="platforms")
    table.add_column("name")
    table.add_column("description")
    table.add_column("knobs")
    for name, cls in PLATFORMS:
        table.add_row(name, cls.description, ", ".join(sorted(cls.knobs)))
    console.print(table)


def workloads(names: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        help="only these workloads (default: all)")] = None, as_json: JsonOpt = False) -> None:
    """List the workloads with their phases and parameters (name=default: meaning)."""
    from isobench.workloads import WORKLOADS

    unknown = [n for n in names or [] if n not in WORKLOADS]
    if unknown:
        raise UserError(f"unknown workload {unknown[0]!r}", field="isobench workloads",
                        fix=f"use one of {', '.join(WORKLOADS.names())}")
    table = Table(title="workloads", show_lines=True)
    for column in ("name", "description", "item", "phases", "parameters"):
        table.add_column(column)
    records = []
    for name, cls in WORKLOADS:
        if names and name not in names:
            continue
        defaults = {key: field.get_default(call_default_factory=True) for key, field in cls.Params.model_fields.items()}
        records.append({"name": name, "description": cls.description, "item": cls.item, "phases": list(cls.phases),
                        "setup_phases": list(cls.setup_phases),
                        "parameters": {key: {"default": defaults[key], "description": field.description or ""}
                                       for key, field in cls.Params.model_fields.items()}})
        # defaults and descriptions hold brackets: the plain console shows them as they are
        params = "\n".join(f"{key}={defaults[key]}: {field.description or ''}"
                           for key, field in cls.Params.model_fields.items())
        phases = ", ".join(cls.phases) + (f"\nonce: {', '.join(cls.setup_phases)}" if cls.setup_phases else "")
        table.add_row(name, cls.description, cls.item, phases, params)
    if as_json:
        print_json(records)
        return
    console.print(table)


def probes(as_json: JsonOpt = False) -> None:
    """List the probes: what each measures, its settings (defaults in brackets), whether it is in
    the default set, whether it can run on this host, and what it cost a cell where that was measured."""
    from isobench.probes import PROBES

    costs, targets = _probe_costs()
    table = Table(title="probes (a study's `probes:` picks them; absent: the default set)", show_lines=True,
                  caption="cost per cell: the probe alone on a lenet-train cell against none, start+stop seconds and "
                          "the harness's extra CPU as a share of one core over the cell, as measured by "
                          f"benchmarks/bench_probes.py --write-costs on the host and day shown ({COSTS_FILE}); "
                          "not measured: -")
    for column in ("name", "default", "works here", "measures", "settings", "cost per cell"):
        table.add_column(column)
    records = []
    for name, cls in PROBES:
        check = cls.check()
        defaults = {key: field.default_factory() if field.default_factory else field.default
                    for key, field in cls.Settings.model_fields.items()}
        records.append({"name": name, "default": bool(cls.default), "works_here": bool(check.ok),
                        "why_not": None if check.ok else check.reason,
                        "not_here": dict(check.partial) if check.ok and check.partial else {},
                        "measures": cls.description,
                        "settings": {key: {"default": defaults[key], "description": field.description or ""}
                                     for key, field in cls.Settings.model_fields.items()},
                        "cost": costs.get(name)})
        here = "[green]yes[/]" if check.ok else markup("[red]no[/]: {}", check.reason)
        if check.ok and check.partial:
            here += "".join(markup("\n[yellow]not here[/] {}: {}", part, why) for part, why in check.partial.items())
        settings = "\n".join(f"{key} [{defaults[key]}]: {field.description or ''}"
                             for key, field in cls.Settings.model_fields.items())
        table.add_row(name, "yes" if cls.default else "", Markup(here), cls.description, settings or "-",
                      _cost_text(costs.get(name), targets))
    if as_json:
        print_json(records)
        return
    console.print(table)


#: written by benchmarks/bench_probes.py --write-costs; absent from an install that does not ship it
COSTS_FILE = "src/isobench/probes/costs.json"


def _probe_costs() -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """The stored cost of each measured probe, and the targets it was measured against."""
    import json
    from pathlib import Path

    import isobench.probes

    try:
        stored = json.loads((Path(isobench.probes.__file__).parent / "costs.json").read_text())
    except (OSError, ValueError):
        return {}, {}
    return dict(stored.get("probes") or {}), dict(stored.get("targets") or {})


def _cost_text(cost: dict[str, Any] | None, targets: dict[str, float]) -> str:
    if not cost:
        return "-"
    try:
        over = [what for what, key, value in (("start+stop", "start_stop_s", cost["start_stop_s"]),
                                               ("CPU", "harness_cpu_pct", cost["harness_cpu_pct"]))
                if key in targets and value > targets[key]]
        measured = cost.get("measured") or {}
        load = measured.get("load_avg") or []
        lines = [f"{cost['start_stop_s']:.2f} s start+stop, {cost['harness_cpu_pct']:.1f}% of a core "
                 f"({cost['harness_cpu_s']:+.2f} s CPU over a {cost['cell_wall_s']:.1f}-s cell)"]
        if over:
            lines.append(f"over its target: {', '.join(over)}")
        if cost.get("first_cell_start_stop_s") is not None:
            lines.append(f"a run's first cell: {cost['first_cell_start_stop_s']:.2f} s start+stop")
        lines.append(f"measured {measured.get('date', '?')}: {measured.get('cell', '?')}, {measured.get('rounds', '?')} "
                     f"rounds; {measured.get('host', '?')}; load {'-'.join(f'{v:.1f}' for v in load) or '?'}, "
                     f"steal {measured.get('steal_pct', float('nan')):.2f}%")
    except (KeyError, TypeError, ValueError):
        return "unreadable entry in costs.json"
    return "\n".join(lines)

"""``isobench doctor``: which platforms, knobs and probes work on this host (or on each node of a
Ray cluster), and ``--repair``: put back what runners that died left changed. Registered on the
main app by isobench/cli.py."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from isobench.console import console, print_json, text_of
from isobench.report.plaintext import Markup, markup

HOST_KNOBS = ("governor", "max_freq", "power_mode", "jetson_clocks", "numa_node")


def doctor(ray: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--ray", metavar="ADDRESS", help="check every node of the Ray cluster at ADDRESS instead of this host")]
        = None,
        repair: Annotated[bool, typer.Option(
            "--repair", help="restore the host state (cpufreq, sysctls, Jetson clocks) and remove the "
                             "leftovers that runners which died left behind, and say what was restored")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print the findings as one JSON document")] = False,
        ) -> None:
    """Which platforms and knobs work on this host (or on each node of a Ray cluster), and why not where not."""
    if repair:
        _doctor_repair(as_json)
        return
    if ray is not None:
        _doctor_cluster(ray, as_json)
        return

    from isobench.fingerprint import host_fingerprint
    from isobench.plan.placement import host_knob_problems
    from isobench.platforms import PLATFORMS, platform_variants
    from isobench.platforms.base import ALL_KNOBS
    from isobench.platforms.runsc import doctor_lines as runsc_lines
    from isobench.platforms.vm import doctor_lines
    from isobench.study.model import PlatformEntry

    host = host_fingerprint()
    rows: list[dict[str, Any]] = []
    for name, runtime in platform_variants():
        platform = PLATFORMS.get(name)(PlatformEntry(name=name, runtime=runtime))
        avail = platform.availability()
        knobs = {knob: (None if not avail.ok else knob not in avail.knobs_unavailable) for knob in sorted(ALL_KNOBS)}
        notes = "; ".join([avail.reason, *avail.notes, *(f"{k}: {v}" for k, v in avail.knobs_unavailable.items())])
        rows.append({"platform": platform.display(), "works": bool(avail.ok), "notes": notes.strip("; "),
                     "knobs": knobs})
    problems = host_knob_problems()
    vm_lines = doctor_lines()
    gvisor_lines = runsc_lines()  # after the VM lines: runsc's kvm platform reuses KVM's verdict
    if as_json:
        ready, missing = _probe_state()
        print_json({"host": {k: host[k] for k in ("cpu_model", "cores", "kernel", "governor")}
                    | {"cgroup": host["cgroup"]["mode"]},
                    "platforms": rows, "vm": [text_of(Markup(line)) for line in vm_lines],
                    "gvisor": [text_of(Markup(line)) for line in gvisor_lines],
                    "host_knobs": {knob: problems.get(knob) for knob in HOST_KNOBS},
                    "probes": {"works": ready, "unavailable": missing}})
        return
    console.print(f"host: {host['cpu_model']}, {host['cores']} cores, kernel {host['kernel']}, "
                  f"cgroup {host['cgroup']['mode']}, governor {host['governor'] or 'not exposed'}")
    table = Table(title="platforms")
    for column in ("platform", "works", "why not / notes", *sorted(ALL_KNOBS)):
        table.add_column(column)
    for row in rows:
        knob_cells = ["-" if ok is None else Markup("[green]yes[/]" if ok else "[red]no[/]")
                      for ok in row["knobs"].values()]
        table.add_row(row["platform"], Markup("[green]yes[/]" if row["works"] else "[red]no[/]"), row["notes"],
                      *knob_cells)
    console.print(table)
    for line in [*vm_lines, *gvisor_lines]:
        console.print(Markup(line))  # styled lines; their host text is escaped where they are made
    for knob in HOST_KNOBS:
        state = markup("[red]unavailable[/]: {}", problems[knob]) if knob in problems else "[green]available[/]"
        console.print(Markup(f"host knob {knob}: {state}"))
    _probe_summary()


def _doctor_repair(as_json: bool = False) -> None:
    from isobench.hoststate import STATE_DIR, journal
    from isobench.runner.leftovers import sweep_leftovers

    restored, removed = sweep_leftovers()
    held = journal()
    if as_json:
        print_json({"restored": restored, "removed": removed, "journal": str(STATE_DIR),
                    "still_journaled": [f"{e['kind']} {e['key']}" for e in held]})
        return
    for line in restored:
        console.print(line, markup=False, highlight=False)  # "<kind> <target> restored to <value>"
    for line in removed:
        console.print(f"removed: {line}", markup=False, highlight=False)
    if not restored and not removed:
        console.print("nothing to repair: no runner that died left host state changed", markup=False)
    if held:  # live runners' changes (or ones that could not be put back): listed, not touched
        console.print(f"still journaled in {STATE_DIR}: " + ", ".join(f"{e['kind']} {e['key']}" for e in held),
                      markup=False, highlight=False)


def _doctor_cluster(address: str, as_json: bool = False) -> None:
    from isobench.runner.nodes import class_labels
    from isobench.runner.ray_cluster import connect_with_auth, describe_nodes
    from isobench.runner.rayauth import describe_mode

    ray, auth = connect_with_auth(address, allow_unauthenticated=True)  # shown below, not refused
    if not as_json:
        console.print(describe_mode(auth), markup=False, highlight=False)
    try:
        nodes = describe_nodes(ray, full=True)
    finally:
        ray.shutdown()
    nodes = sorted(nodes, key=lambda n: n["host_key"])
    hosts = [n["host_key"] for n in nodes]
    shared = len(set(hosts)) < len(hosts)
    if as_json:
        print_json({"address": address, "authentication": describe_mode(auth), "shared_hosts": shared,
                    "nodes": [{"node_id": n["node_id"], "host": n["host_key"], "address": n["address"],
                               "cores": n["fingerprint"]["cores"], "memory_bytes": n["fingerprint"]["memory_bytes"],
                               "gpus": n["gpus"], "labels": class_labels(n["labels"]),
                               "platforms": {p: why or None for p, why in n["platforms"].items()}}
                              for n in nodes]})
        return
    table = Table(title=f"Ray cluster at {address}: {len(nodes)} live node(s)")
    for column in ("node", "host", "address", "cores", "memory", "GPUs", "labels", "platforms that work",
                   "platforms that do not"):
        table.add_column(column)
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
    if shared:
        console.print(Markup("[yellow]several nodes share a host[/]: a study uses one node per host, so cells do not "
                      "measure each other; label separate hosts with `ray start --labels isobench-host=NAME`"))


def _probe_state() -> tuple[list[str], dict[str, str]]:
    from isobench.probes import PROBES

    ready: list[str] = []
    missing: dict[str, str] = {}
    for name, cls in PROBES:
        check = cls.check()
        if check.ok:
            ready.append(name)
        else:
            missing[name] = check.reason
    return ready, missing


def _probe_summary() -> None:
    ready, missing = _probe_state()
    console.print(f"probes that work here: {', '.join(ready) or 'none'}"
                  + (f"; unavailable: {'; '.join(f'{n} ({why})' for n, why in missing.items())}" if missing else "")
                  + " (details: isobench probes)")

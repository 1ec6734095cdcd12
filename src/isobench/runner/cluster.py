"""Run a study on the nodes of a Ray cluster (`isobench run STUDY --ray ADDRESS`): the head side.

One long-lived actor per node (a :class:`~isobench.runner.node_agent.NodeAgent`) runs that node's cells with exactly the
code of a local run (platforms, probes, tenancy), one unit of work at a time, and returns
the outcomes; the head (this process) owns the study store and writes each unit as it
comes back, so a head crash loses no finished cell and ``--resume`` works as locally.

Scheduling is the head's, not Ray's (:mod:`isobench.runner.scheduler`): the head hands a node its next unit only when the
last one is back, so a node never runs two cells at once (``hosts.cells_per_node`` asks
for co-location explicitly; a tenant group and a duet pair are co-located by definition: each
is one unit, run whole on one node, and re-run whole if that node is lost). In ``spread``
mode a node claims a whole measured round (every group once, in the plan's shuffled order),
so interleaving holds per host and every round has its baseline on the same host; each
host first runs its own copy of the warm-up rounds. In ``each`` mode every host runs the
whole plan (a fleet), its cell ids suffixed ``@host``. A node that is lost mid-cell has its
unit, and the rest of its queue, re-run on a live node with the same labels, or recorded
as ``lost`` when none is left (a resumed run tries lost cells again).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from isobench.errors import UserError
from isobench.plan.cells import Cell, expand
from isobench.report.plaintext import markup
from isobench.runner.execute import CellOutcome
from isobench.runner.nodes import HOST_LABEL, Node, class_labels, matches
from isobench.runner.ray_cluster import connect, gather, start_agents
from isobench.runner.scheduler import Scheduler
from isobench.runner.setup import create_store, open_store, sigterm_as_interrupt


def select_nodes(agents: list[tuple[dict[str, Any], Any]], described: list[dict[str, Any]],
                 wanted: dict[str, str | list[str]], console: Console) -> list[Node]:
    nodes: list[Node] = []
    seen_hosts: dict[str, str] = {}
    for (_, actor), info in zip(agents, described, strict=True):
        if not matches(info["labels"], wanted):
            continue
        if info["host_key"] in seen_hosts:
            # two Ray nodes on one host would measure each other: use one of them
            console.print(markup("[yellow]node {} is on host {} like node {}: using only one node per host[/] "
                                 "(give nodes on separate hosts distinct `{}` labels only if they truly are "
                                 "separate)", info["node_id"][:8], info["host_key"],
                                 seen_hosts[info["host_key"]][:8], HOST_LABEL))
            continue
        seen_hosts[info["host_key"]] = info["node_id"]
        nodes.append(Node(info, actor))
    return nodes


def run_study_on_ray(study_text: str | None, file: str | None, out: Path | None, resume: bool,
                     console: Console, address: str, allow_unauthenticated: bool = False) -> Path:
    study, study_text, file, out, store = open_store(study_text, file, out, resume)
    hosts = study.hosts
    mode = hosts.mode if hosts else "spread"
    if study.schedule == "duet" and hosts is not None and hosts.cells_per_node > 1:
        # two pairs on one node would share its two sides' cores and each pair would measure the other
        raise UserError("schedule: duet runs one pair at a time on a node's cores, and hosts.cells_per_node "
                        f"{hosts.cells_per_node} would put {hosts.cells_per_node} pairs on them at once",
                        file=file, field="hosts.cells_per_node",
                        fix="drop cells_per_node (1), or use schedule: sequential for co-location")
    if study.repetitions == "auto" and mode == "each":
        raise UserError("repetitions: auto on a cluster needs hosts.mode spread", file=file, field="hosts.mode",
                        fix="use mode spread, or give a number of repetitions")
    slots = hosts.cells_per_node if hosts else 1
    ray = connect(address, allow_unauthenticated)
    agents: list[tuple[dict[str, Any], Any]] = []
    nodes: list[Node] = []
    interrupted = True  # until the cells are done: any exit on the way kills and sweeps
    try:
        agents = start_agents(ray)
        described = gather(ray, [actor.describe.remote() for _, actor in agents], timeout=600)
        for (node, _), info in zip(agents, described, strict=True):
            if isinstance(info, Exception):
                console.print(markup("[yellow]node {} does not answer, left out[/]: {}", node["NodeID"][:8],
                                     type(info).__name__))
        answering = [(a, d) for a, d in zip(agents, described, strict=True) if not isinstance(d, Exception)]
        nodes = select_nodes([a for a, _ in answering], [d for _, d in answering],
                             hosts.labels if hosts else {}, console)
        if not nodes:
            raise UserError(f"no live node of the cluster at {address} matches hosts.labels "
                            f"{hosts.labels if hosts else {}}", file=file, field="hosts.labels",
                            fix="see the nodes' labels with `isobench doctor --ray ADDRESS`")
        usable = gather(ray, [n.actor.prepare.remote(study_text, file) for n in nodes], timeout=1800)
        for node, reasons in zip(nodes, usable, strict=True):
            if isinstance(reasons, ray.exceptions.RayTaskError):
                raise reasons  # a bug in the agent: say so rather than hide the node
            if isinstance(reasons, Exception):
                node.alive = False
                console.print(markup("[yellow]node of host {} was lost while preparing, left out[/]", node.host))
                continue
            node.usable = reasons
        nodes = [n for n in nodes if n.alive]
        if not nodes:
            raise UserError(f"every selected node of the cluster at {address} was lost while preparing",
                            field="--ray", fix="check the cluster (`isobench doctor --ray ADDRESS`) and resume")
        for index, entry in enumerate(study.platforms):
            if not any(n.usable.get(entry.key) == "" for n in nodes):
                why = "; ".join(f"{n.host}: {n.usable.get(entry.key)}" for n in nodes)
                raise UserError(f"{entry.name} cannot run on any selected node ({why})", file=file,
                                field=f"platforms[{index}]", fix="see `isobench doctor --ray ADDRESS`, or drop it")

        if store is None:
            store = create_store(out, study, study_text, file, cluster={"address": address, "mode": mode})
        known = json.loads(store.meta("hosts") or "{}")
        for node in nodes:
            known[node.host] = {"labels": class_labels(node.info["labels"]), "fingerprint": node.info["fingerprint"],
                                "node_id": node.info["node_id"]}
        store.set_meta("hosts", json.dumps(known, sort_keys=True, default=str))
        plan, more_rounds = (_adaptive_plan(study, store, nodes, console) if study.repetitions == "auto"
                             else (expand(study), None))
        done = store.finished_ids()
        scheduler = Scheduler(nodes, plan, done, mode)
        total = sum(len(u) for n in nodes for u in n.queue) + sum(len(u) for u, _ in scheduler.unrunnable) \
            if mode == "each" else (
            sum(not c.warmup for c in plan) + sum(len(u) for u in scheduler.warmup) * len(nodes))
        console.print(markup("study [bold]{}[/] on {} host(s) ({}), mode {}: about {} cells ({} already done) -> {}",
                             study.name, len(nodes), ", ".join(n.host for n in nodes), mode, total, len(done), out))
        failures = _drive(ray, scheduler, nodes, slots, store, out, console, total, len(done), more_rounds)
        interrupted = False
    except KeyboardInterrupt:
        console.print(markup("\n[yellow]interrupted[/]: finished cells are saved; continue with "
                             "`isobench run --resume --out {} --ray {}`", out, address))
        raise
    finally:
        _finish_nodes(ray, nodes, console, interrupted)
        for _, actor in agents:  # the nodes not selected, too
            try:
                ray.kill(actor)
            except Exception:
                pass
        ray.shutdown()
        if store is not None:
            store.close()
    if failures:
        console.print(markup("[red]{} cell(s) failed or were lost[/]; `isobench summary {}` lists them", failures, out))
    return out


def _keys(unit: list[Cell]) -> list[str]:
    """What the store shows as each member's platform when the unit never ran."""
    return [c.platform_key for c in unit]


def _lost_outcome(cell: Cell, why: str) -> CellOutcome:
    return CellOutcome(cell=cell, status="lost", exit_code=None, error=why, stderr_tail="",
                       started_at=time.time(), wall_s=0.0, startup_s=None)


Rounds = list[list[list[Cell]]]  # rounds of units of cells


def _adaptive_plan(study: Any, store: Any, nodes: list[Node], console: Console
                   ) -> tuple[list[Cell], Callable[[], Rounds]]:
    """`repetitions: auto` on a cluster: the planned rounds, and a function that decides, once
    they are all back, whether to add more: one round per live host at a time."""
    from isobench.runner.adaptive import _round, decide, finished_rounds
    from isobench.runner.tenancy import tenant_batches

    settings = study.adaptive
    state = {"rounds": max(study.initial_repetitions, finished_rounds(store)),
             "previous": json.loads(store.meta("adaptive") or "null")}
    plan = expand(study)
    previous = state["previous"]
    if previous and previous.get("active") and state["rounds"] > study.initial_repetitions:
        # resumed after adaptive rounds began: finish the last one's groups
        plan += _round(expand(study, state["rounds"]), state["rounds"] - 1, set(previous["active"]))

    def more() -> Rounds:
        decision = decide(store, study, state["rounds"], state["previous"])
        state["previous"] = decision.as_meta(settings.target, settings.metric) | {
            "active": sorted(decision.active_groups)}
        store.set_meta("adaptive", json.dumps(state["previous"]))
        if decision.stop:
            console.print(f"adaptive repetitions: stopped after {state['rounds']} round(s): {decision.reason}")
            return []
        added: Rounds = []
        for _ in range(max(1, sum(n.alive for n in nodes))):
            if state["rounds"] >= settings.max_repetitions:
                break
            state["rounds"] += 1
            cells = _round(expand(study, state["rounds"]), state["rounds"] - 1, decision.active_groups)
            added.append(list(tenant_batches(cells)))
        console.print(f"adaptive repetitions: rounds up to {state['rounds']}: {decision.reason}")
        return added

    return plan, more


def _drive(ray: Any, scheduler: Scheduler, nodes: list[Node], slots: int, store: Any, out: Path,
           console: Console, total: int, already: int, more_rounds: Callable[[], Rounds] | None) -> int:
    """Keep every live node busy with one unit (``slots`` with co-location) and store results;
    with ``more_rounds`` (adaptive repetitions), ask for more rounds whenever all are back."""
    failures = 0
    progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), console=console, transient=False)  # labels are plain text
    by_ref: dict[Any, Node] = {}

    def record(outcomes: list[CellOutcome], display: str | list[str]) -> None:
        nonlocal failures
        store.record_all(outcomes, display)
        for outcome in outcomes:
            scheduler.done.add(outcome.cell.cell_id)
            if outcome.status not in ("ok", "unavailable"):
                failures += 1
                progress.console.print(markup("[red]{}[/] {}: {}", outcome.status, outcome.cell.cell_id,
                                              outcome.error))
            progress.advance(task)

    with sigterm_as_interrupt(), progress:
        task = progress.add_task("running", total=total, completed=already)
        for unit, why in scheduler.unrunnable:
            record([dataclasses.replace(_lost_outcome(c, why), status="unavailable") for c in unit], _keys(unit))
        while True:
            for node in nodes:
                while node.alive and len(node.running) < slots:
                    unit = scheduler.next_unit(node)
                    if unit is None:
                        break
                    ref = node.actor.run.remote(unit, str(out.resolve()))
                    node.running[ref] = (unit, time.monotonic())
                    by_ref[ref] = node
                    shown = " + ".join(dict.fromkeys(c.platform_key for c in unit))
                    progress.update(task, description=f"{node.host}: {unit[0].workload_key} on {shown}")
            if not by_ref:
                extra = more_rounds() if more_rounds is not None else []
                if not extra:
                    break
                scheduler.rounds.extend(extra)
                progress.update(task, total=(progress.tasks[0].total or 0) + sum(len(u) for r in extra for u in r))
                continue
            ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=5.0)
            for ref in ready:
                node = by_ref.pop(ref)
                unit, sent = node.running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as exc:  # the node (or its agent) is gone
                    node.alive = False
                    for other_ref in list(node.running):
                        unit_more, _ = node.running.pop(other_ref)
                        by_ref.pop(other_ref, None)
                        node.queue.appendleft(unit_more)
                    why = f"node {node.info['node_id'][:8]} (host {node.host}) was lost mid-cell"
                    progress.console.print(markup("[yellow]{}[/]: {}; re-running its {} unit(s) on nodes alike",
                                                  why, type(exc).__name__, len(node.queue) + 1))
                    stranded = scheduler.reassign(node, [unit, *node.queue], why)
                    node.queue.clear()
                    for lost_unit, reason in stranded:
                        record([_lost_outcome(c, reason) for c in lost_unit], _keys(lost_unit))
                    continue
                except ray.exceptions.RayTaskError as exc:  # a bug in the agent: the node lives on
                    message = str(exc).strip().splitlines()[-1][:500]
                    record([CellOutcome(cell=c, status="failed", exit_code=None,
                                        error=f"the node's agent failed: {message}", stderr_tail=str(exc)[-2000:],
                                        started_at=time.time(), wall_s=0.0, startup_s=None) for c in unit],
                           _keys(unit))
                    continue
                head_s = time.monotonic() - sent
                for outcome in result["outcomes"]:
                    info = outcome.platform_info.setdefault("ray", {})
                    info.update(host_key=node.host, head_s=head_s,
                                overhead_s=max(0.0, head_s - result["agent_s"]))
                    if outcome.cell.reruns:
                        info.update(reruns=outcome.cell.reruns, lost_on=outcome.cell.lost_on)
                record(result["outcomes"], result["display"])
        for unit in scheduler.stranded_rounds():
            gone = ", ".join(n.host for n in nodes if not n.alive)
            record([_lost_outcome(c, "no live node of the study can run it" + (f" (lost: {gone})" if gone else ""))
                    for c in unit], _keys(unit))
    return failures


def _finish_nodes(ray: Any, nodes: list[Node], console: Console, interrupted: bool) -> None:
    """Clean every live node up and end the agents.

    After a normal end the agents are idle and clean up themselves. After an interrupt they may
    be mid-cell, and a Ray actor's running task cannot be interrupted: the agents are killed and
    a fresh agent on each node sweeps what they left (their runner locks died with them)."""
    live = [n for n in nodes if n.alive]
    if interrupted:
        for node in nodes:
            try:
                ray.kill(node.actor)
            except Exception:
                pass
        janitors = start_agents(ray, {n.info.get("node_id") for n in live})
        refs = [actor.sweep.remote() for _, actor in janitors]
        actors = [actor for _, actor in janitors]
    else:
        refs = [n.actor.finish.remote() for n in live]
        actors = [n.actor for n in nodes]
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=120)
        for ref in ready:
            try:
                for removed in ray.get(ref):
                    console.print(markup("[yellow]removed a leftover:[/] {}", removed))
            except Exception:  # a node lost at the very end: its own next run sweeps it
                pass
    finally:
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:
                pass

"""Run a whole study: validate, prepare, run the cells in plan order, store each as it ends."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from isobench.errors import UserError
from isobench.liveness import runner_tag
from isobench.plan.cells import Cell, expand
from isobench.plan.cores import core_layout
from isobench.platforms import PLATFORMS, Platform
from isobench.platforms.artifact_dirs import artifacts_dir_for
from isobench.report.plaintext import Markup, markup
from isobench.runner.adaptive import cells_to_run, rerun_fits, time_split
from isobench.runner.duet import Leads
from isobench.runner.execute import CellOutcome
from isobench.runner.harness import harness_on_its_cores
from isobench.runner.hostknobs import applied_host_knobs
from isobench.runner.hostload_baseline import BeforeSetup
from isobench.runner.interference import shared_disturbance
from isobench.runner.nodes import safe_host_key
from isobench.runner.setup import (
    create_store,
    open_store,
    prepare_data,
    sigterm_as_interrupt,
    sweep_for,
    tidy_up,
    unavailable_knobs,
)
from isobench.runner.tenancy import run_group, tenant_batches
from isobench.store import Store
from isobench.study.model import Study


def check_platforms(study: Study, file: str) -> dict[str, Platform]:
    """Instantiate every platform entry; refuse, before anything is written, what cannot run."""
    platforms: dict[str, Platform] = {}
    for index, entry in enumerate(study.platforms):
        platform = PLATFORMS.get(entry.name)(entry)
        availability = platform.availability()
        if not availability.ok:
            raise UserError(f"{entry.name} cannot run on this host: {availability.reason}", file=file,
                            field=f"platforms[{index}]", fix="see `isobench doctor`, or drop this entry")
        for knob in unavailable_knobs(study, entry, availability):
            raise UserError(f"knob {knob!r} is unavailable here: {availability.knobs_unavailable[knob]}",
                            file=file, field=f"platforms[{index}].knobs.{knob}",
                            fix="see `isobench doctor`")
        platforms[entry.key] = platform
    return platforms


def describe_layout(facts: dict[str, object]) -> str:
    sides = facts.get("sides") or []
    if facts.get("layout") == "all":
        return "every cell may use every core (cell_cores: all); the harness competes with it"
    cells = " and ".join(str(s) for s in sides) if len(sides) > 1 else str(sides[0] if sides else "?")
    return (f"cell(s) on core(s) {cells}, harness on {facts.get('harness')}; container engine "
            f"{facts.get('engine')}")


def _stamp(outcomes: list[CellOutcome]) -> None:
    for outcome in outcomes:
        # A resumed study may finish on another boot or host: say where each cell ran.
        outcome.platform_info.update(host=socket.gethostname(), runner=runner_tag(),
                                     host_key=safe_host_key(socket.gethostname()))


def _rerun_cell(cell: Cell, attempt: int) -> Cell:
    suffix = f"+rerun{attempt}"
    duet = dataclasses.replace(cell.duet, pair=cell.duet.pair + suffix) if cell.duet else None
    tenant = dataclasses.replace(cell.tenant, group=cell.tenant.group + suffix) if cell.tenant else None
    return dataclasses.replace(cell, cell_id=cell.cell_id + suffix, duet=duet, tenant=tenant)


def share_contamination(outcomes: list[CellOutcome]) -> str | None:
    """Mark the flagged members of a trading duet pair that met one disturbance alike as ``shared``
    (runner/interference.py ``shared_disturbance``): the pair's ratio cancelled it, so the pair
    stays valid and is not re-run. Returns the reason, or None when the pair is not shared."""
    if len(outcomes) != 2 or outcomes[0].cell.duet is None or any(o.status != "ok" for o in outcomes):
        return None
    reason = shared_disturbance([o.interference for o in outcomes],
                                [o.platform_info.get("duet") or {} for o in outcomes],
                                outcomes[0].cell.contamination_threshold)
    for outcome in outcomes if reason else []:
        if outcome.interference.get("contaminated"):
            outcome.interference.update(shared=True, shared_reason=reason)
            outcome.platform_info["interference"] = dict(outcome.interference)
    return reason


def run_unit(study: Study, batch: list[Cell], members: list[Platform], store: Store,
             say: Callable[[str], None], leads: Leads | None = None) -> Iterator[list[CellOutcome]]:
    """Run one unit (a cell, a tenant group, a duet pair), store it, and re-run it while a member
    is contaminated (at most ``study.reruns`` times). Every run is stored: a contaminated cell
    stays in the store, flagged, and its re-run points back at it (``rerun_of``). A trading pair
    whose members met the disturbance alike is kept, not re-run; and no re-run starts that would
    make the study's re-runs take longer than its first runs (``rerun_fits``)."""
    originals = [c.cell_id for c in batch]
    together = members if batch[0].duet else members[0]
    displays = [p.display() for p in members]
    with applied_host_knobs(batch[0].knobs):  # cpufreq / power-mode knobs, restored after
        outcomes = run_group(batch, together, leads)  # a tenant group or a duet pair starts together
    for attempt in range(1, study.reruns + 2):
        _stamp(outcomes)
        if attempt > 1:
            for outcome, original in zip(outcomes, originals, strict=True):
                outcome.platform_info["rerun_of"] = original
        shared = share_contamination(outcomes)
        store.record_all(outcomes, displays)  # a group or a pair: whole or not at all
        yield outcomes
        if shared:
            say(f"kept pair {outcomes[0].cell.duet.pair}: {shared}")  # type: ignore[union-attr]
        dirty = [o for o in outcomes if o.status == "ok" and o.interference.get("contaminated")
                 and not o.interference.get("shared")]
        if not dirty or attempt > study.reruns or batch[0].warmup:
            return
        ids, why = ", ".join(o.cell.cell_id for o in dirty), dirty[0].interference.get("reason")
        first_s, rerun_s = time_split(store)
        cost = max(o.wall_s for o in outcomes)  # the unit runs again about as long as it just took
        if not rerun_fits(first_s, rerun_s, cost):
            say(f"not re-running {ids} (contaminated: {why}): re-runs have taken {rerun_s:.0f} s of the "
                f"{first_s:.0f} s of first runs, and another {cost:.0f} s would exceed it; the re-run budget "
                "keeps a study within twice its own time")
            return
        say(f"re-running {ids}: contaminated ({why})")
        with applied_host_knobs(batch[0].knobs):
            outcomes = run_group([_rerun_cell(c, attempt) for c in batch], together, leads)


def run_study(study_text: str | None, file: str | None, out: Path | None, resume: bool,
              console: Console, before_setup: BeforeSetup | None = None) -> Path:
    """Run (or resume) a study here. ``before_setup``: the sample of the host before set-up, when
    the caller started it earlier (it overlaps the runner's own imports); else it starts now."""
    # From the first step that can change the host (sweeps, images, pinning), SIGTERM unwinds like
    # Ctrl-C: a signal during set-up must restore what set-up changed, as one during a cell does.
    with sigterm_as_interrupt():
        return _run_study(study_text, file, out, resume, console, before_setup or BeforeSetup())


def _run_study(study_text: str | None, file: str | None, out: Path | None, resume: bool,
               console: Console, before_setup: BeforeSetup) -> Path:
    # the host before our own set-up is watched while we read and plan (our own work is subtracted)
    study, study_text, file, out, store = open_store(study_text, file, out, resume)
    plan = expand(study)
    before_setup.finish(resuming=store is not None)
    platforms = check_platforms(study, file)  # asks the engines: their daemons' work is no neighbour's
    done = store.finished_ids() if store else set()
    todo = [c for c in plan if c.cell_id not in done]

    if study.hosts is not None:
        console.print(Markup("[yellow]note:[/] the study's `hosts:` applies to cluster runs (`--ray ADDRESS`); "
                             "this local run ignores it"))
    for kind, what in sweep_for(list(platforms.values())):
        console.print(markup("[yellow]removed a leftover of an earlier run:[/] {}" if kind == "removed" else
                             "[yellow]host state left by an earlier run:[/] {}", what))

    failures = 0
    harness = contextlib.ExitStack()
    try:
        data_paths = prepare_data(todo)
        for platform in platforms.values():
            platform.prepare()
            platform.versions()  # the tools answer now, not beside a measuring cell
        # What set-up (and whatever ran just before: a venv install, data sets) left dirty goes
        # out now, not as write-back inside the first cells.
        os.sync()
        if store is None:
            store = create_store(out, study, study_text, file, platforms={
                key: {"display": p.display(), **p.fingerprint(), "versions": p.versions()}
                for key, p in platforms.items()})
        console.print(markup("study [bold]{}[/]: {} cells ({} already done, {} to run) -> {}", study.name,
                             len(plan), len(done), len(todo), out))
        layout = core_layout(study)
        pin_engine = any(p.uses_engine for p in platforms.values())
        facts = harness.enter_context(harness_on_its_cores(layout, pin_engine))
        if store.meta("cores") is None:
            store.set_meta("cores", json.dumps(facts))
        console.print(markup("cores: {}", describe_layout(facts)))
        progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                            TimeRemainingColumn(), console=console, transient=False)  # labels are plain text
        with progress:
            task = progress.add_task("running", total=len(plan), completed=len(done))
            # `repetitions: auto` appends rounds while comparisons are too wide (runner/adaptive.py)
            grow = lambda n: progress.update(task, total=(progress.tasks[0].total or 0) + n)  # noqa: E731
            leads = Leads()  # duet members start so that their measured windows coincide
            for batch in tenant_batches(cells_to_run(study, todo, store, grow, progress.console.print)):
                batch = [dataclasses.replace(cell, data_dir=data_paths.get(cell.data_key or ""),
                                             artifacts_dir=artifacts_dir_for(cell, out)) for cell in batch]
                cell = batch[0]
                members = [platforms[c.platform_key] for c in batch]
                tag = " (warm-up)" if cell.warmup else ""
                tag += (" in a duet" if cell.duet else
                        f" ×{len(batch)} tenants" if len(batch) > 1 else "")
                shown = " + ".join(dict.fromkeys(f"{c.workload_key} on {p.display()}" for c, p in zip(batch, members, strict=True)))
                progress.update(task, description=f"{shown}{tag}")
                for outcomes in run_unit(study, batch, members, store, progress.console.print, leads):
                    for outcome in outcomes:
                        cell = outcome.cell
                        if outcome.status == "unavailable":
                            progress.console.print(markup("[yellow]unavailable[/] {}: {}", cell.cell_id, outcome.error))
                        elif outcome.status != "ok":
                            failures += 1
                            progress.console.print(markup("[red]{}[/] {}: {}", outcome.status, cell.cell_id,
                                                          outcome.error))
                progress.advance(task, len(batch))
    except KeyboardInterrupt:
        console.print(markup("\n[yellow]interrupted[/]: finished cells are saved; continue with "
                             "`isobench run --resume --out {}`", out))
        raise
    finally:
        harness.close()
        for platform in platforms.values():
            platform.cleanup()
        tidy_up()
        if store is not None:
            store.close()
    if failures:
        console.print(markup("[red]{} cell(s) failed[/]; `isobench summary {}` lists them", failures, out))
    return out


"""What every run does before its first cell and after its last, locally or on a cluster node:
which store it writes, which platform entries can run here, the data sets, the sweep of what
dead runners left behind, and the tidy-up. ``runner/study.py`` and ``runner/node_agent.py``
both call these, so a local run and a node run set up the same way."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from isobench.errors import UserError
from isobench.plan.cells import Cell
from isobench.platforms import Availability, Platform
from isobench.store import Store
from isobench.study.model import Knobs, PlatformEntry, Study
from isobench.studyfile import load_study_text, resolve_study_text


def default_out_dir(study: Study) -> Path:
    return Path("results") / f"{study.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def open_store(study_text: str | None, file: str | None, out: Path | None, resume: bool
               ) -> tuple[Study, str, str, Path, Store | None]:
    """Work out which study runs where; return the store only when resuming one."""
    if resume:
        if out is None:
            raise UserError("--resume needs the study directory", field="--out",
                            fix="pass --out DIR of the interrupted run")
        if Store.exists(out):
            store = Store.open(out)
            stored_text = store.meta("study_yaml") or ""
            stored_file = store.meta("study_file") or str(out)
            if study_text is not None and study_text != stored_text and \
                    resolve_study_text(study_text, file or stored_file)[1] != stored_text:
                raise UserError("the study file differs from the one this directory was started with",
                                file=file, fix=f"resume without a study file, or use a new --out than {out}")
            return load_study_text(stored_text, stored_file), stored_text, stored_file, out, store
    if study_text is None or file is None:
        raise UserError("no study given", fix="pass a study file")
    # The resolving design is filled in where the study writes none; the text stored is the one run.
    study, study_text, _ = resolve_study_text(study_text, file)
    out = out or default_out_dir(study)
    if Store.exists(out):
        raise UserError("this directory already holds results", file=str(out),
                        fix="add --resume to finish that study, or choose another --out")
    return study, study_text, file, out, None


def create_store(out: Path, study: Study, study_text: str, file: str, **facts: Any) -> Store:
    """A new study store, its host fingerprint extended by ``facts`` (platforms, cluster)."""
    from isobench.fingerprint import host_fingerprint
    from isobench.runner.hostload_baseline import take_before_setup

    store = Store.create(out, study_text, study.name, file, {**host_fingerprint(), **take_before_setup(), **facts})
    if study._design is not None:  # how the design was chosen, for plan-like lines in the summary
        store.set_meta("design", study._design.as_meta())
    return store


def unavailable_knobs(study: Study, entry: PlatformEntry, availability: Availability) -> list[str]:
    """The knobs the entry asks for (any value of a sweep counts) that this host cannot apply, sorted."""
    knobs = {**study.knobs, **entry.knobs}
    wanted = set(Knobs(**{k: v for k, v in knobs.items() if not isinstance(v, list)}).as_dict())
    wanted |= {k for k, v in knobs.items() if isinstance(v, list)}
    return sorted(wanted & set(availability.knobs_unavailable))


def sweep_for(platforms: list[Platform]) -> Iterator[tuple[str, str]]:
    """Remove what runners that died left behind for these platforms, every probe and the host
    state; yields ("removed" | "restored", what) as it goes. Takes this runner's liveness lock
    first, so what it sweeps is never its own."""
    from isobench.hoststate import sweep_stale as sweep_host_state
    from isobench.liveness import runner_tag
    from isobench.probes import PROBES  # probes leave tracefs instances and sysctls behind on kill -9

    runner_tag()
    for platform_cls in {type(p) for p in platforms}:
        for removed in platform_cls.sweep_stale():
            yield "removed", removed
    for _, probe_cls in PROBES:
        for removed in probe_cls.sweep_stale():
            yield "removed", removed
    for restored in sweep_host_state():  # cpufreq, sysctls, ... that a dead runner left changed
        yield "restored", restored


def prepare_data(cells: list[Cell]) -> dict[str, str]:
    """Generate each data set the cells need once, on the host, before any cell starts."""
    from isobench.platforms.hostmirror import data_root
    from isobench.workloads import WORKLOADS

    paths: dict[str, str] = {}
    for cell in cells:
        if cell.data_key is None or cell.data_key in paths:
            continue
        workload = WORKLOADS.get(cell.workload)
        target = data_root() / cell.data_key
        workload.prepare_data(workload.Params(**cell.params), target)
        paths[cell.data_key] = str(target)
    return paths


def tidy_up() -> None:
    """After the last cell: remove this runner's empty cgroups and forget ended runners' locks."""
    from isobench.liveness import prune_stale_runner_locks, runner_tag
    from isobench.platforms.cgroups import prune_empty

    prune_empty(runner_tag())
    prune_stale_runner_locks()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Make SIGTERM (and SIGHUP) unwind like Ctrl-C, so every cleanup path runs. A SIGHUP that
    arrives ignored (``nohup isobench run``) stays ignored: the user asked to outlive the terminal."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    wanted = [signal.SIGTERM] + ([signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else [])
    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

"""Keep the harness off the cells' cores (plan/cores.py decides which cores are whose).

The runner process (its record readers, probe samplers, progress bar) and containerd (the
shims it forks for each container inherit its affinity, and every record a container writes
passes through a shim) go onto the harness's cores for the study. dockerd stays where it is:
it checks a container's ``--cpus`` against the cores it may run on itself, so a pinned dockerd
refuses ``cpus: 1.5`` on a 2-core host; cells write their records in batches, so the little
it forwards does not matter. The runner's own affinity is
process state and simply put back; the daemons' is host state, changed through the
journal (hoststate.py), so a runner killed with ``kill -9`` leaves it to the next
run's sweep or ``isobench doctor --repair`` to restore.

A cell started by the runner inherits the runner's affinity until its platform moves it
into its own cpuset cgroup (which resets a task's affinity to that cpuset); the worker
also widens its own affinity to what its cgroup allows (workloads/worker.py), so a cell
given every core is never left on the harness's one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psutil

from isobench.hostinfo import cpu_list
from isobench.plan.cores import CoreLayout

#: engine daemons moved to the harness's cores (see the module docstring for why not dockerd)
PINNED_DAEMONS = ("containerd",)


def _pin_process(pid: int, cores: list[int]) -> None:
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cores)


def engine_pids() -> list[int]:
    return sorted(p.pid for p in psutil.process_iter(["name"]) if (p.info["name"] or "") in PINNED_DAEMONS)


@contextlib.contextmanager
def harness_on_its_cores(layout: CoreLayout, pin_engine: bool) -> Iterator[dict[str, object]]:
    """For the block: the runner (every thread) and, if asked, the engine daemons on the
    harness's cores. Yields what was done, for the store's meta."""
    facts: dict[str, object] = layout.describe()
    if not layout.harness:
        facts["engine"] = "not pinned"
        yield facts
        return
    own = sorted(os.sched_getaffinity(0))
    _pin_process(os.getpid(), layout.harness)
    with contextlib.ExitStack() as stack:
        from isobench.hoststate import changed

        pinned = []
        if pin_engine:
            for pid in engine_pids():
                try:
                    stack.enter_context(changed("affinity", str(pid), cpu_list(layout.harness)))
                    pinned.append(pid)
                except (OSError, ValueError):  # a daemon that exited meanwhile
                    continue
        facts["engine"] = f"pinned ({len(pinned)} daemons)" if pinned else "not pinned"
        try:
            yield facts
        finally:
            _pin_process(os.getpid(), own)

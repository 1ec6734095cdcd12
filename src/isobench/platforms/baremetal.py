"""baremetal: the workload as a plain host process, in a cgroup of its own.

Knobs apply here too (CFS quota, cpuset, memory limit through the cell's cgroup), so
"pinned container vs pinned host" compares like with like.
"""

from __future__ import annotations

import os
import platform as pyplatform
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from isobench.hostinfo import cgroup_layout
from isobench.liveness import runner_tag
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import Availability, Launched, Platform, kill_process_group
from isobench.platforms.cgroups import CGROUP_ROOT, PARENT, CellCgroup, remove_tree, stale_groups
from isobench.platforms.datapath import bind_memory_node
from isobench.study.model import Knobs
from isobench.target import ProbeTarget


def cell_cgroup_path(cell: Cell) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in cell.cell_id)
    return f"{PARENT}/{runner_tag()}/{safe[-120:]}"


def cgroups_writable() -> str | None:
    """None when isobench can make cgroups here, else why not."""
    layout = cgroup_layout()
    if layout["mode"] == "v2":
        target = CGROUP_ROOT
    elif "cpu" in layout["v1_controllers"]:  # type: ignore[operator]
        target = CGROUP_ROOT / "cpu"
    else:
        return "no cgroup hierarchy with the cpu controller is mounted"
    if os.geteuid() != 0 or not os.access(target, os.W_OK):
        return f"{target} is not writable (run as root)"
    return None


@dataclass
class CgroupLaunched(Launched):
    """A host process and the cell's cgroup it runs in."""

    cgroup: CellCgroup


@PLATFORMS.register("baremetal")
class BareMetal(Platform):
    description = "a host process in a cgroup of its own (knobs via cgroup v1/v2)"
    start_line = True

    @classmethod
    def check(cls) -> Availability:
        why = cgroups_writable()
        if why:
            return Availability(True, "", {k: why for k in ("cpus", "cpuset", "memory")})
        return Availability(True, "", notes=["a host process runs without a seccomp filter: "
                                             "seccomp 'default' and 'unconfined' both mean none"])

    def fingerprint(self) -> dict[str, Any]:
        return {"kernel": pyplatform.release(), "cgroup": cgroup_layout()}

    # -- hooks for platforms that add one mechanism (platforms/layers.py) -----------------
    def cell_knobs(self, cell: Cell) -> Knobs:
        """The knobs the cell's cgroup applies."""
        return Knobs(**cell.effective_knobs())

    def wrap(self, argv: list[str]) -> list[str]:
        """The command that starts the worker (a layer adds its mechanism around it)."""
        return argv

    def installer(self) -> Any:
        """Something with ``install()`` to run in the child before exec, or None."""
        return None

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        knobs = self.cell_knobs(cell)
        installer = self.installer()
        command = self.wrap(argv)
        group = CellCgroup.create(cell_cgroup_path(cell), cpus=knobs.cpus, cpuset=knobs.cpuset_list(),
                                  memory=knobs.memory_bytes())

        def enter() -> None:
            group.join()
            if installer is not None:
                installer.install()

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        try:
            if knobs.numa_node is not None:
                bind_memory_node(group, knobs.numa_node)
            proc = subprocess.Popen(command, stdin=self.cell_stdin(cell), stdout=subprocess.PIPE, stderr=stderr,
                                    env=env, start_new_session=True, preexec_fn=enter)
        except BaseException:
            group.destroy()
            raise
        return CgroupLaunched(proc=proc, name=cell.cell_id, started=started, cgroup=group)

    def probe_target(self, launched: CgroupLaunched) -> ProbeTarget:  # type: ignore[override]
        group = launched.cgroup
        return ProbeTarget(platform=self.name, root_pid=launched.proc.pid, cgroups=dict(group.dirs))

    def collect(self, launched: CgroupLaunched) -> dict[str, Any]:  # type: ignore[override]
        group = launched.cgroup
        info: dict[str, Any] = {"cgroup": group.relpath}
        memory = group.dirs.get("memory")
        if memory is not None:
            try:
                info["oom_kills"] = int(dict(line.split() for line in
                                             (memory / "memory.oom_control").read_text().splitlines())
                                        .get("oom_kill", 0))
            except (OSError, ValueError):
                pass
        return info

    def cleanup_cell(self, launched: CgroupLaunched) -> None:  # type: ignore[override]
        kill_process_group(launched.proc)
        launched.cgroup.destroy()

    @classmethod
    def sweep_stale(cls) -> list[str]:
        from isobench.liveness import tag_is_stale

        removed = []
        for tag_dir in stale_groups(tag_is_stale):
            remove_tree(tag_dir)
            removed.append(f"cgroup {tag_dir}")
        return removed

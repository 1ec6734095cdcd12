"""Where a cell runs as the host sees it: its cgroup directories, its processes and the container
engine's, gathered in a :class:`ProbeTarget`.

Platforms name a cell's target (``probe_target``) and probes watch it, so this is a leaf both
import; the helpers read ``/proc`` only and change nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil

T = TypeVar("T")

#: controllers whose counters probes read (others, such as devices or freezer, say nothing useful)
WATCHED_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids")
#: the container engine's long-lived processes (comm names)
ENGINE_DAEMONS = ("dockerd", "containerd")


def cgroup_mounts(mounts_text: str | None = None) -> dict[str, Path]:
    """controller -> mount point of its v1 hierarchy, plus ``unified`` -> the cgroup2 mount."""
    if mounts_text is None:
        mounts_text = Path("/proc/self/mounts").read_text()
    found: dict[str, Path] = {}
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup2":
            found["unified"] = Path(parts[1])
        elif parts[2] == "cgroup":
            for option in parts[3].split(","):
                if option in WATCHED_CONTROLLERS:
                    found.setdefault(option, Path(parts[1]))
    return found


def cgroups_of_pid(pid: int, mounts: dict[str, Path] | None = None) -> dict[str, Path]:
    """The host cgroup directories of ``pid``: controller -> dir (``unified`` for cgroup2).

    Groups at a hierarchy's root are left out: the root is the whole host, not the cell
    (gVisor's sandbox, for one, joins the v1 groups but stays at the cgroup2 root)."""
    mounts = cgroup_mounts() if mounts is None else mounts
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return {}
    dirs: dict[str, Path] = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if path in ("", "/"):
            continue
        names = ["unified"] if controllers == "" else controllers.split(",")
        for name in names:
            mount = mounts.get(name)
            if mount is not None:
                directory = mount / path.lstrip("/")
                if directory.is_dir():
                    dirs[name] = directory
    return dirs


def docker_engine_pids(container_id: str) -> list[int]:
    """dockerd, containerd, and the containerd shim serving ``container_id`` (not other cells' shims)."""
    pids = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        name = proc.info["name"] or ""
        ours = name.startswith("containerd-shim") and container_id in (proc.info["cmdline"] or [])
        if name in ENGINE_DAEMONS or ours:
            pids.append(proc.pid)
    return sorted(pids)


def launcher_pids(launcher_pid: int, cell_pids: set[int]) -> list[int]:
    """The launcher (a runtime's foreground process) and its descendants that are not the cell."""
    try:
        root = psutil.Process(launcher_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    return sorted(p.pid for p in tree if p.pid not in cell_pids)


def poll(fetch: Callable[[], T | None], still_starting: Callable[[], bool], timeout_s: float = 30.0) -> T | None:
    """Call ``fetch`` until it answers (not None), the cell stops starting, or the timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        answer = fetch()
        if answer is not None or not still_starting() or time.monotonic() > deadline:
            return answer
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


@dataclass
class ProbeTarget:
    """What a probe may watch: the cell's processes and cgroups, as the host sees them."""

    platform: str
    #: host pid of the cell's top process (the worker, the container's init, the sandbox)
    root_pid: int | None
    #: controller -> host cgroup directory ("unified" for cgroup v2 / the hybrid v2 mount)
    cgroups: dict[str, Path] = field(default_factory=dict)
    #: the container's full id, for engine-side views (perf --for-each-cgroup, docker stats)
    container_id: str | None = None
    #: pids of the platform's own machinery (container daemon, shims) that are not the cell
    engine_pids: list[int] = field(default_factory=list)

    def pids(self) -> list[int]:
        """The cell's live host pids: every task in its cgroups (children stay in their parent's
        group), or the root's process tree when it has none. The tree walk reads every process on
        the host, so samplers avoid it wherever a cgroup says the same."""
        found: set[int] = set()
        if self.root_pid and not self.cgroups:
            try:
                root = psutil.Process(self.root_pid)
                found.add(root.pid)
                found.update(child.pid for child in root.children(recursive=True))
            except psutil.Error:
                pass
        elif self.root_pid and psutil.pid_exists(self.root_pid):
            found.add(self.root_pid)
        for directory in self.cgroups.values():
            procs = directory / "cgroup.procs"
            try:
                found.update(int(line) for line in procs.read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

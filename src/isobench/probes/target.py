"""Finding a cell as the host sees it: its cgroup directories and the container engine's processes.

Platforms use these in ``probe_target``; they read ``/proc`` only and change nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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

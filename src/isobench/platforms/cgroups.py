"""A cgroup of isobench's own for a host process (bare-metal cells and later layer ablations).

Works on cgroup v1 (one directory per controller, as on this project's hosts) and on
a pure cgroup v2 host. Groups live under ``isobench/<runner tag>/<cell>`` so a later
run can find and remove the groups of a runner that was killed.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from isobench.hostinfo import cgroup_layout

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "isobench"
CFS_PERIOD_US = 100_000
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class CellCgroup:
    """The directories of one cell's group, one per controller (v1) or one (v2)."""

    relpath: str
    dirs: dict[str, Path] = field(default_factory=dict)
    v2: bool = False

    @classmethod
    def create(cls, relpath: str, *, cpus: float | None, cpuset: list[int] | None,
               memory: int | None) -> CellCgroup:
        layout = cgroup_layout()
        group = cls(relpath=relpath, v2=layout["mode"] == "v2")
        if group.v2:
            group._create_v2(cpus, cpuset, memory)
        else:
            group._create_v1(layout["v1_controllers"], cpus, cpuset, memory)  # type: ignore[arg-type]
            if layout["cgroup2_mount"]:
                # Hybrid host: runc also puts containers in the controller-free cgroup2 tree, which
                # gives PSI and perf's cgroup filter; give bare-metal cells the same group.
                unified = Path(str(layout["cgroup2_mount"])) / relpath
                unified.mkdir(parents=True, exist_ok=True)
                group.dirs["unified"] = unified
        return group

    def _create_v1(self, mounted: list[str], cpus: float | None, cpuset: list[int] | None,
                   memory: int | None) -> None:
        for controller in V1_CONTROLLERS:
            if controller not in mounted:
                continue
            path = CGROUP_ROOT / controller / self.relpath
            path.mkdir(parents=True, exist_ok=True)
            self.dirs[controller] = path
            if controller == "cpuset":
                # A v1 cpuset group starts empty: fill every level from its parent.
                self._inherit_cpuset(path)
        if cpus is not None:
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * CFS_PERIOD_US)))
        if cpuset is not None:
            _write(self.dirs["cpuset"] / "cpuset.cpus", ",".join(map(str, cpuset)))
        if memory is not None:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(memory))
            swap = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
            if swap.exists():
                _write(swap, str(memory))

    @staticmethod
    def _inherit_cpuset(path: Path) -> None:
        chain = []
        current = path
        while current != CGROUP_ROOT / "cpuset":
            chain.append(current)
            current = current.parent
        for level in reversed(chain):
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (level / name).read_text().strip():
                    _write(level / name, (level.parent / name).read_text().strip())

    def _create_v2(self, cpus: float | None, cpuset: list[int] | None, memory: int | None) -> None:
        path = CGROUP_ROOT / self.relpath
        # Enable the controllers down the chain so the leaf gets its files.
        current = CGROUP_ROOT
        for part in Path(self.relpath).parts:
            try:
                _write(current / "cgroup.subtree_control", "+cpu +cpuset +memory +pids")
            except OSError:
                pass
            current = current / part
            current.mkdir(exist_ok=True)
        self.dirs["unified"] = path
        if cpus is not None:
            _write(path / "cpu.max", f"{int(cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}")
        if cpuset is not None:
            _write(path / "cpuset.cpus", ",".join(map(str, cpuset)))
        if memory is not None:
            _write(path / "memory.max", str(memory))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def join(self, pid: int | str = 0) -> None:
        """Move ``pid`` (0: the calling process) into every directory of the group."""
        for procs in self.procs_files():
            _write(procs, str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files():
            try:
                found.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
        return found

    def destroy(self, timeout: float = 5.0) -> None:
        """Kill whatever is left inside and remove the directories."""
        remove_group_dirs(list(self.dirs.values()), timeout)


def remove_group_dirs(dirs: list[Path], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    for directory in dirs:
        while directory.exists():
            try:
                pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                directory.rmdir()
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        # Remove emptied parents up to (and including) the isobench parent.
        parent = directory.parent
        while parent != CGROUP_ROOT and parent.parent != parent:
            try:
                parent.rmdir()
            except OSError:
                break
            if parent.name == PARENT:
                break
            parent = parent.parent


def stale_groups(is_stale) -> list[Path]:  # type: ignore[no-untyped-def]
    """Directories ``isobench/<tag>`` whose runner is gone, across all hierarchies."""
    found = []
    for root in _hierarchy_roots():
        parent = root / PARENT
        if not parent.is_dir():
            continue
        for tag_dir in parent.iterdir():
            if tag_dir.is_dir() and is_stale(tag_dir.name):
                found.append(tag_dir)
    return found


def remove_tree(tag_dir: Path) -> None:
    """Remove a runner's whole subtree (cells first)."""
    for _ in range(5):  # another runner may be sweeping the same tree right now (Ray agents on one host)
        try:
            leaves = sorted((p for p in tag_dir.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            break
        except FileNotFoundError:
            if not tag_dir.exists():
                return
    else:
        leaves = []
    remove_group_dirs(leaves + [tag_dir])


def prune_empty(tag: str) -> None:
    """Remove ``isobench/<tag>`` (and ``isobench``) wherever they are empty now."""
    for root in _hierarchy_roots():
        for directory in (root / PARENT / tag, root / PARENT):
            try:
                directory.rmdir()
            except OSError:
                pass


def _hierarchy_roots() -> list[Path]:
    """Every mounted hierarchy: runtimes such as runc make groups in all of them."""
    layout = cgroup_layout()
    roots = [CGROUP_ROOT / c for c in layout["v1_controllers"]]  # type: ignore[union-attr]
    if layout["cgroup2_mount"]:
        roots.append(Path(str(layout["cgroup2_mount"])))
    return roots

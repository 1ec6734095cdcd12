"""What a run may leave behind: the tests assert there is none of it.

A resource belongs to the runner named in it (``<pid>-<boot>``). Another runner that is still
alive (a second isobench on this host, e.g. a study someone else is running) owns its resources:
they are not this test's leftovers. Ours, and those of every runner that has exited, are.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from isobench.hostinfo import cgroup_layout
from isobench.liveness import _held_lock, tag_is_stale

TAG = re.compile(r"(\d+-[0-9a-f]{8})")


def _someone_elses_live(name: str) -> bool:
    found = TAG.search(name)
    if found is None:
        return False
    tag = found.group(1)
    return tag != _held_lock.get("tag") and not tag_is_stale(tag)


def containers(others_live: bool = True) -> list[str]:
    """Isobench's containers; without those of another live runner when ``others_live`` is False."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", "label=isobench.runner", "--format", "{{.Names}}"],
                         capture_output=True, text=True)
    return [name for name in out.stdout.split() if others_live or not _someone_elses_live(name)]


def oci_state(others_live: bool = True) -> list[str]:
    found = []
    root = Path("/run/isobench/oci")
    for sub in ("runc", "crun", "runsc", "bundles"):
        if (root / sub).is_dir():
            found += [f"{sub}/{p.name}" for p in (root / sub).iterdir() if others_live or not _someone_elses_live(p.name)]
    return found


def cgroups(others_live: bool = True) -> list[str]:
    layout = cgroup_layout()
    roots = [Path("/sys/fs/cgroup") / c for c in layout["v1_controllers"]]
    if layout["cgroup2_mount"]:
        roots.append(Path(layout["cgroup2_mount"]))
    found = []
    for root in roots:
        for directory in sorted((root / "isobench").rglob("*")) if (root / "isobench").exists() else []:
            if directory.is_dir() and (others_live or not _someone_elses_live(str(directory.relative_to(root)))):
                procs = (directory / "cgroup.procs").read_text().split()
                found.append(f"{directory} procs={procs}")
        parent = root / "isobench"
        if parent.exists() and not found and not any(p.is_dir() for p in parent.iterdir()):
            found.append(str(parent))  # an empty parent left behind (a live runner's keeps it)
    return found


def perf_outputs(others_live: bool = True) -> list[str]:
    """The perf probe's output directories in /dev/shm (probes/perf.py)."""
    shm = Path("/dev/shm")
    return [p.name for p in sorted(shm.glob("isobench-perf-*")) if others_live or not _someone_elses_live(p.name)] \
        if shm.is_dir() else []


def all_leftovers() -> dict[str, list[str]]:
    """What exited runners (and this process) left: another live runner's cells are its own business."""
    found = {"containers": containers(False), "oci": oci_state(False), "cgroups": cgroups(False),
             "perf": perf_outputs(False)}
    return {k: v for k, v in found.items() if v}

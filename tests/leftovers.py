"""What a run may leave behind: the tests assert there is none of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from isobench.hostinfo import cgroup_layout


def containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", "label=isobench.runner", "--format", "{{.Names}}"],
                         capture_output=True, text=True)
    return out.stdout.split()


def oci_state() -> list[str]:
    found = []
    root = Path("/run/isobench/oci")
    for sub in ("runc", "crun", "runsc", "bundles"):
        if (root / sub).is_dir():
            found += [f"{sub}/{p.name}" for p in (root / sub).iterdir()]
    return found


def cgroups() -> list[str]:
    layout = cgroup_layout()
    roots = [Path("/sys/fs/cgroup") / c for c in layout["v1_controllers"]]
    if layout["cgroup2_mount"]:
        roots.append(Path(layout["cgroup2_mount"]))
    found = []
    for root in roots:
        for directory in sorted((root / "isobench").rglob("*")) if (root / "isobench").exists() else []:
            if directory.is_dir():
                procs = (directory / "cgroup.procs").read_text().split()
                found.append(f"{directory} procs={procs}")
        if (root / "isobench").exists() and not found:
            found.append(str(root / "isobench"))
    return found


def all_leftovers() -> dict[str, list[str]]:
    return {k: v for k, v in {"containers": containers(), "oci": oci_state(), "cgroups": cgroups()}.items() if v}

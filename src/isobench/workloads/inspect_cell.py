"""Read, from inside a cell, what the platform and knobs really gave it.

Tests and the store use this to check that knobs took effect: CPU affinity, CFS
quota, memory limit and seccomp mode, as the process itself sees them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _status_fields() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    except OSError:
        pass
    return fields


def _cgroup_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                paths[controller] = path
    except (OSError, ValueError):
        pass
    return paths


def _read_cgroup_file(controller: str, filename: str, own_path: str | None) -> str | None:
    """Read a v1 controller file for this process's group.

    On the host the group is ``/sys/fs/cgroup/<ctl>/<own path>``; inside a container
    the runtime mounts the group itself at ``/sys/fs/cgroup/<ctl>``, so try both.
    """
    base = Path("/sys/fs/cgroup") / controller
    candidates = []
    if own_path:
        candidates.append(base / own_path.lstrip("/") / filename)
    candidates.append(base / filename)
    for candidate in candidates:
        try:
            return candidate.read_text().strip()
        except OSError:
            continue
    return None


def _to_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


NAMESPACES = ("pid", "mnt", "uts", "ipc", "net", "user", "cgroup", "time")


def namespaces() -> dict[str, str | None]:
    """The inode of each namespace this process is in (compare with the host's to see which are new)."""
    found: dict[str, str | None] = {}
    for name in NAMESPACES:
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            found[name] = None
    return found


def mount_of(path: str) -> dict[str, str] | None:
    """Mount point and filesystem type holding ``path`` (longest matching mount point)."""
    best: dict[str, str] | None = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best["mount_point"])):
            best = {"mount_point": point, "fstype": right.split()[0]}
    return best


def _cell_data_dir() -> str | None:
    """The cell's data set path, from the worker's argument (the cell JSON), if any."""
    import json

    try:
        return json.loads(sys.argv[1]).get("data_dir")
    except (IndexError, ValueError, AttributeError):
        return None


def inspect_cell() -> dict[str, object]:
    status = _status_fields()
    cgroups = _cgroup_paths()
    quota = _to_int(_read_cgroup_file("cpu", "cpu.cfs_quota_us", cgroups.get("cpu")))
    period = _to_int(_read_cgroup_file("cpu", "cpu.cfs_period_us", cgroups.get("cpu")))
    mem_limit = _to_int(_read_cgroup_file("memory", "memory.limit_in_bytes", cgroups.get("memory")))
    seccomp = status.get("Seccomp")
    return {
        "pid": os.getpid(),
        "hostname": os.uname().nodename,
        "kernel": os.uname().release,
        "affinity": sorted(os.sched_getaffinity(0)),
        "cpus_allowed_list": status.get("Cpus_allowed_list"),
        "cfs_quota_us": quota,
        "cfs_period_us": period,
        "cpu_limit": (quota / period) if quota and period and quota > 0 else None,
        "memory_limit_bytes": mem_limit if mem_limit and mem_limit < 2**62 else None,
        "seccomp_mode": int(seccomp) if seccomp and seccomp.isdigit() else None,
        "no_new_privs": status.get("NoNewPrivs"),
        "cgroups": cgroups,
        "in_pid_namespace": os.getpid() < 10,
        "namespaces": namespaces(),
        "seccomp_filters": _to_int(status.get("Seccomp_filters")),
        "speculation_store_bypass": status.get("Speculation_Store_Bypass"),
        "root_mount": mount_of("/"),
        "executable_mount": mount_of(os.path.realpath(sys.executable)),
        "data_mount": mount_of(data_dir) if (data_dir := _cell_data_dir()) else None,
    }

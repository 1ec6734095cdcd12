"""Where a container cell reads its data set from (``data_mount``), and NUMA memory binding.

``data_mount`` (docker platforms):

- ``bind`` (default): the host directory bind-mounted read-only at its own path;
- ``copy``: the data set copied into the container's writable layer (overlay upper dir)
  with ``docker cp`` between ``docker create`` and ``docker start``; the copy is done
  before the cell's clock starts, so only reads pay for the layer;
- ``volume``: a named volume ``isobench-data-<data set>``, filled once from the host
  directory and kept between studies like the host-mirror image (``docker volume rm``
  removes it), mounted read-only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from isobench.platforms.dockercli import docker
from isobench.platforms.hostmirror import data_root

if TYPE_CHECKING:
    from isobench.platforms.cgroups import CellCgroup

VOLUME_PREFIX = "isobench-data-"
FILLED_MARK = ".isobench-filled"


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return docker(*args, timeout=600, check=False)  # a data copy may take minutes; callers read the status


def volume_name(data_dir: str) -> str:
    return VOLUME_PREFIX + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in Path(data_dir).name)


def ensure_volume(data_dir: str, image: str) -> str:
    """The named volume holding a copy of ``data_dir`` (created and filled once)."""
    name = volume_name(data_dir)
    probe = _docker("run", "--rm", "--network", "none", "-v", "/usr:/usr:ro", "-v", f"{name}:/dst", image,
                    "/usr/bin/test", "-e", f"/dst/{FILLED_MARK}")
    if probe.returncode == 0:
        return name
    _docker("volume", "create", "--label", "isobench.data=1", name)
    filled = _docker("run", "--rm", "--network", "none", "-v", "/usr:/usr:ro", "-v", f"{data_dir}:/src:ro",
                     "-v", f"{name}:/dst", image, "/usr/bin/sh", "-c",
                     f"cp -a /src/. /dst/ && touch /dst/{FILLED_MARK}")
    if filled.returncode != 0:
        raise RuntimeError(f"could not fill the docker volume {name}: {filled.stderr.strip()}")
    return name


def mount_args(data_mount: str | None, data_dir: str | None, mounts: list[str], image: str
               ) -> tuple[list[str], list[str]]:
    """(the read-only bind mounts left, extra docker arguments) for a cell's data path."""
    if data_mount in (None, "bind") or data_dir is None:
        return mounts, []
    # The data set must not also arrive through the bind mount of the whole data root.
    kept = [m for m in mounts if m != str(data_root())]
    if data_mount == "volume":
        return kept, ["-v", f"{ensure_volume(data_dir, image)}:{data_dir}:ro"]
    return kept, []  # copy: see copy_into()


def copy_into(run_cmd: list[str], name: str, data_dir: str) -> list[str]:
    """Create the container from a ``docker run`` command, copy the data set in; return the start command."""
    if run_cmd[:2] != ["docker", "run"]:
        raise ValueError("expected a `docker run` command")
    created = _docker("create", *run_cmd[2:])
    if created.returncode != 0:
        raise RuntimeError(f"docker create failed: {created.stderr.strip()}")
    copied = _docker("cp", data_dir, f"{name}:{data_dir}")
    if copied.returncode != 0:
        _docker("rm", "-f", name)
        raise RuntimeError(f"docker cp of the data set failed: {copied.stderr.strip()}")
    # a duet member's start line comes on stdin: `docker start` attaches it only when asked to
    interactive = ["--interactive"] if "--interactive" in run_cmd else []
    return ["docker", "start", "--attach", *interactive, name]


def bind_memory_node(group: CellCgroup, node: int) -> None:
    """Restrict a cell's memory to one NUMA node (cpuset.mems; the cpus are the cell's cpuset)."""
    directory = group.dirs.get("cpuset") or group.dirs.get("unified")
    if directory is None:
        raise RuntimeError("no cpuset controller to bind memory with")
    (directory / "cpuset.mems").write_text(str(node))

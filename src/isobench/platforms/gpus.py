"""GPU passthrough for containers run on a generated bundle (``oci``'s ``options.gpus``): what
``docker run --gpus`` gets from the NVIDIA container toolkit, done by hand. The driver's device
nodes go in (OCI ``linux.devices``, each allowed by a cgroup device rule), and its user-space
libraries are found as a host process finds them: they lie under the mirrored ``/usr`` (or are
bound where they lie), and the host's loader cache and ``LD_LIBRARY_PATH`` go in too."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isobench.platforms.hostmirror import cell_mounts

#: the dynamic loader's cache: bound into a GPU cell, so that it finds the driver's libraries
#: (libcuda) as a host process does
LD_SO_CACHE = "/etc/ld.so.cache"
#: directories the loader searches without a cache; their libraries need no LD_LIBRARY_PATH
DEFAULT_LIB_DIRS = frozenset({"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                              "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"})
_GPU_NODE = re.compile(r"^nvidia(\d+)$")


def gpu_selection(value: Any) -> str | list[int]:
    """``options.gpus``: ``all`` (as ``docker run --gpus all``) or GPU indices (a list or ``"0,1"``)."""
    if value == "all":
        return "all"
    given = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(given, str):
        given = [v.strip() for v in given.split(",")]
    try:
        indices = sorted({int(v) for v in given if not isinstance(v, bool)}) \
            if isinstance(given, list) and given else None
    except (TypeError, ValueError, OverflowError):
        indices = None
    if not indices or any(i < 0 or i > 1023 for i in indices):
        raise ValueError(f"options.gpus: {str(value)[:40]!r} is not a GPU selection "
                         "(fix: write `gpus: all`, or GPU indices such as `gpus: [0]`)")
    return indices


@dataclass
class GpuPassthrough:
    """What an oci cell needs to use the host's NVIDIA GPUs: the device nodes (OCI ``linux.devices``
    plus a cgroup allow rule each) and where the driver's user-space libraries are."""

    #: OCI linux.devices entries: path, type c, major, minor, fileMode, uid, gid
    devices: list[dict[str, Any]]
    #: host directories holding libcuda that the mirrored paths do not hold: bound read-only
    library_mounts: list[str] = field(default_factory=list)
    #: the container's LD_LIBRARY_PATH (the host's, then libcuda's directories outside the defaults)
    library_path: list[str] = field(default_factory=list)
    #: bind the host's loader cache (the skeleton must hold the mount point)
    ld_so_cache: bool = False
    #: passed through when set on the host, as a bare-metal cell inherits it
    env: dict[str, str] = field(default_factory=dict)


def gpu_device_nodes(selection: str | list[int], dev: Path = Path("/dev")) -> list[Path]:
    """The character devices a selection needs: every ``nvidia*`` node that is not a GPU
    (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset), the selected ``nvidiaN``, and
    ``nvidia-caps/*`` (MIG). Raises ValueError naming a missing node."""
    if not (dev / "nvidiactl").exists():
        raise ValueError(f"options.gpus: no {dev / 'nvidiactl'} on this host (no NVIDIA driver loaded)")
    nodes: list[Path] = []
    gpus: dict[int, Path] = {}
    for path in sorted(dev.glob("nvidia*")):
        match = _GPU_NODE.match(path.name)
        if match:
            gpus[int(match.group(1))] = path
        elif path.is_dir():
            nodes.extend(sorted(p for p in path.iterdir() if not p.is_dir()))
        else:
            nodes.append(path)
    wanted = sorted(gpus) if selection == "all" else list(selection)
    missing = [i for i in wanted if i not in gpus]
    if missing or not wanted:
        have = ", ".join(str(i) for i in sorted(gpus)) or "none"
        raise ValueError(f"options.gpus: no {dev}/nvidia{missing[0] if missing else 'N'} on this host "
                         f"(GPUs here: {have})")
    nodes.extend(gpus[i] for i in wanted)
    return [n for n in nodes if stat.S_ISCHR(os.stat(n).st_mode)]


def _libcuda_dirs() -> list[str]:
    """Directories holding libcuda.so.1 as the host's loader finds it: its cache and LD_LIBRARY_PATH."""
    dirs: list[str] = []
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.strip().startswith("libcuda.so") and "=>" in line:
            dirs.append(os.path.dirname(line.split("=>", 1)[1].strip()))
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry and any(Path(entry).glob("libcuda.so*")):
            dirs.append(entry)
    found: list[str] = []
    for directory in dirs:  # and where its symbolic links lead
        for candidate in (directory, *(os.path.dirname(os.path.realpath(lib))
                                       for lib in Path(directory).glob("libcuda.so*"))):
            if candidate not in found:
                found.append(candidate)
    return found


def gpu_passthrough(selection: str | list[int], dev: Path = Path("/dev"),
                    libcuda_dirs: list[str] | None = None) -> GpuPassthrough:
    """Everything a cell needs for ``options.gpus`` on this host (``dev`` and ``libcuda_dirs`` for tests)."""
    devices = []
    for node in gpu_device_nodes(selection, dev):
        info = os.stat(node)
        devices.append({"path": "/dev/" + str(node.relative_to(dev)), "type": "c",
                        "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev),
                        "fileMode": stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid})
    lib_dirs = _libcuda_dirs() if libcuda_dirs is None else libcuda_dirs
    mirrored = [Path(p) for p in cell_mounts()]
    # Judged and bound where they lead: a GPU host's loader cache names /lib/libcuda.so.1, and its
    # /lib is a link into the mirrored /usr (and a link in the skeleton, where no mount point fits).
    resolved = dict.fromkeys(Path(os.path.realpath(d)) for d in lib_dirs)
    mounts = [str(d) for d in resolved if not any(d == m or m in d.parents for m in mirrored)]
    host_path = [e for e in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if e and os.path.isabs(e)]
    library_path = [*host_path, *(d for d in lib_dirs if d not in host_path and d not in DEFAULT_LIB_DIRS)]
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
           if k in os.environ and selection == "all"}
    return GpuPassthrough(devices=devices, library_mounts=mounts, library_path=library_path,
                          ld_so_cache=os.path.isfile(LD_SO_CACHE), env=env)

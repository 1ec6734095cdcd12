"""The host mirror: run the host's own interpreter and packages inside a container.

The root filesystem is a tiny skeleton (no distribution inside); ``/usr``, the
Python prefixes and the project are bind-mounted read-only at the paths they have on
the host, so a container cell executes the very same binaries as a bare-metal cell.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
from functools import cache
from pathlib import Path

import isobench
from isobench.hostinfo import cache_root

SKELETON_DIRS = ("proc", "sys", "dev", "tmp", "etc", "usr", "root", "run", "var/tmp", "mnt")
SKELETON_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
SKELETON_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "etc/resolv.conf": "",
    "etc/hostname": "isobench\n",
}


def _project_root() -> Path:
    package_dir = Path(isobench.__file__).resolve().parent
    # src layout checkout: <root>/src/isobench; installed: <site-packages>/isobench
    return package_dir.parent.parent if package_dir.parent.name == "src" else package_dir.parent


def _collapse(paths: list[Path]) -> list[Path]:
    """Drop paths that lie inside another path of the list."""
    result: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(path == kept or kept in path.parents for kept in result):
            result.append(path)
    return sorted(result)


def python_path() -> list[str]:
    """The host's ``PYTHONPATH`` directories (absolute, existing): packages a host process imports
    from outside the interpreter's prefixes, so a mirrored cell must see and search them too."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return [e for e in entries if e and os.path.isabs(e) and os.path.isdir(e)]


@cache
def mirror_paths() -> tuple[str, ...]:
    """Host directories to bind read-only at the same path inside the container."""
    candidates = [Path("/usr"), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
                  Path(sys.prefix), _project_root(), Path(sys.executable).resolve().parent,
                  *(Path(e) for e in python_path())]
    # Non-/usr libraries the interpreter links against live in /etc/ld.so.cache's dirs; on
    # Debian they are all under /usr, and /lib* are symlinks into it.
    return tuple(str(p) for p in _collapse([c for c in candidates if c.exists()]))


def python_inside() -> str:
    """The interpreter path a mirrored cell runs: the host's own (pyenv shims do not work inside)."""
    return sys.executable


def container_env(extra_path: str | None = None) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    path = ":".join(p for p in (extra_path, bindir, "/usr/local/bin", "/usr/bin", "/bin") if p)
    env = {"PATH": path, "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
           "LANG": "C.UTF-8", "XDG_CACHE_HOME": "/tmp/.cache"}
    if python_path():  # a host whose packages come through PYTHONPATH (mirrored above): the same imports
        env["PYTHONPATH"] = os.pathsep.join(python_path())
    return env


def _skeleton_spec(extra_mountpoints: tuple[str, ...], file_mountpoints: tuple[str, ...] = ()) -> dict[str, object]:
    spec: dict[str, object] = {"dirs": SKELETON_DIRS, "links": SKELETON_LINKS, "files": SKELETON_FILES,
                               "mountpoints": sorted(set(mirror_paths()) | set(extra_mountpoints)), "v": 1}
    if file_mountpoints:  # only then: the digests of skeletons without any stay as they were
        spec["file_mountpoints"] = sorted(set(file_mountpoints))
    return spec


def skeleton_digest(extra_mountpoints: tuple[str, ...] = (), file_mountpoints: tuple[str, ...] = ()) -> str:
    spec = json.dumps(_skeleton_spec(extra_mountpoints, file_mountpoints), sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def build_skeleton(extra_mountpoints: tuple[str, ...] = (), file_mountpoints: tuple[str, ...] = ()) -> Path:
    """Create (once, cached by content) the skeleton root filesystem directory. ``file_mountpoints``
    are empty files a single host file is bound over (e.g. ``/etc/ld.so.cache``)."""
    digest = skeleton_digest(extra_mountpoints, file_mountpoints)
    target = cache_root() / "rootfs" / digest
    if target.is_dir():
        return target
    tmp = target.with_name(f".{digest}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for directory in SKELETON_DIRS:
        (tmp / directory).mkdir(parents=True, exist_ok=True)
    (tmp / "tmp").chmod(0o1777)
    for link, dest in SKELETON_LINKS.items():
        (tmp / link).symlink_to(dest)
    for name, text in SKELETON_FILES.items():
        (tmp / name).write_text(text)
    # Mount points must exist in a read-only root: create them in the skeleton itself.
    for mountpoint in _skeleton_spec(extra_mountpoints)["mountpoints"]:  # type: ignore[union-attr]
        (tmp / str(mountpoint).lstrip("/")).mkdir(parents=True, exist_ok=True)
    for mountpoint in file_mountpoints:
        file = tmp / mountpoint.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(b"")
    try:
        tmp.rename(target)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def skeleton_tar(extra_mountpoints: tuple[str, ...] = ()) -> Path:
    root = build_skeleton(extra_mountpoints)
    tar_path = root.with_suffix(".tar")
    if not tar_path.exists():
        tmp = tar_path.with_name(f".{tar_path.name}.{os.getpid()}")
        with tarfile.open(tmp, "w") as tar:
            tar.add(root, arcname=".")
        tmp.rename(tar_path)
    return tar_path


def data_root() -> Path:
    """Where generated data sets live; mounted read-only into every cell."""
    path = cache_root() / "data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cell_mounts(extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Every host path a mirrored cell sees (read-only, same path); ``extra`` (a user's script
    directory) is added unless a mirrored path already holds it."""
    base = set(mirror_paths()) | {str(data_root())}
    more = [p for p in _collapse([Path(e) for e in extra])
            if not any(p == Path(b) or Path(b) in p.parents for b in base)]
    return sorted(base | {str(p) for p in more})

"""The root filesystem a VM guest sees: the host mirror, not the host.

A guest gets exactly what a container cell gets (:mod:`isobench.platforms.hostmirror`):
the skeleton root, with ``/usr``, the Python prefixes, the project, the data sets, the
cell's own read-only mounts and its artifacts directory bound in at their host paths. It
never sees the rest of the host (``/root``, ``/etc/shadow``, ssh keys, other users' files).

QEMU shares one directory over 9p. That directory is a tmpfs built in a mount namespace
of QEMU's own (``unshare --mount``, private propagation): a copy of the skeleton with
each exported path bind-mounted read-only (``nosuid,nodev``), the artifacts directory of
a producing cell alone read-write. The namespace, and every mount in it, ends with QEMU:
nothing is mounted on the host and nothing is left to clean up.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from isobench.platforms.hostmirror import build_skeleton, data_root, mirror_paths


@dataclass(frozen=True)
class Export:
    path: str  # host path, seen at the same path in the guest
    writable: bool = False


def guest_exports(read_only: tuple[str, ...] | list[str] = (), writable: str | None = None) -> list[Export]:
    """The host mirror and the data sets, ``read_only`` paths (a script's directory, a
    container's root inside the guest) and one ``writable`` path (a producer's artifacts)."""
    paths = {*mirror_paths(), str(data_root()), *read_only}
    exports = [Export(p) for p in paths if p != writable and Path(p).is_dir()]
    if writable:
        exports.append(Export(writable, True))
    # Parents first, so a path inside another one (the artifacts under the project) binds on top.
    return sorted(exports, key=lambda e: (len(Path(e.path).parts), e.path))


def namespace_script(stage: Path, exports: list[Export]) -> str:
    """A shell script that builds the guest's root at ``stage`` (in the caller's mount
    namespace) and then execs its arguments (QEMU)."""
    skeleton = build_skeleton(tuple(e.path for e in exports))
    lines = ["set -e",
             "mount --make-rprivate /",  # nothing below propagates back to the host
             f"mount -t tmpfs -o mode=755,nosuid,nodev isobench-guest-root {shlex.quote(str(stage))}",
             f"cp -a {shlex.quote(str(skeleton))}/. {shlex.quote(str(stage))}/"]
    for export in exports:
        source = shlex.quote(export.path)
        target = shlex.quote(str(stage) + export.path)
        mode = "rw" if export.writable else "ro"
        lines += [f"mkdir -p {target}", f"mount --bind {source} {target}",
                  f"mount -o remount,bind,{mode},nosuid,nodev {target}"]
    lines.append('exec "$@"')
    return "\n".join(lines) + "\n"


def wrap(qemu_argv: list[str], script: Path) -> list[str]:
    """QEMU's command line, started in a mount namespace of its own that runs ``script`` first."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return [unshare, "--mount", "--propagation", "private", "/bin/sh", str(script), *qemu_argv]

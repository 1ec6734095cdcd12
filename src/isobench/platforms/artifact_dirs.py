"""Where cells put what must outlive them (trained models): ``<study out>/artifacts``.

The directory is on the host, next to the study's results, so a model trained in a
container is a file on the host that a later cell (on any platform) loads. Containers run
as their own root, and bare-metal cells as the host's, so no cell gets more than it needs:

- a producer (``train-save``) gets its own ``<name>/<platform key>`` directory, read-write,
  emptied and made afresh by the runner just before it runs;
- a consumer (``deploy-infer``, ``serve`` with ``load_from``) gets the whole directory
  read-only.

Whatever a container left in the tree (a symbolic link to ``/etc``, say) is removed
here, never followed; the workers open files without following links
(:mod:`isobench.workloads.artifacts`).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from isobench.plan.cells import Cell


def _flow(cell: Cell) -> tuple[str | None, str | None]:
    from isobench.workloads import WORKLOADS

    workload = WORKLOADS.get(cell.workload)
    if not workload.uses_artifacts:
        return None, None
    return workload.artifact_flow(workload.Params(**cell.params))


def artifacts_writable(cell: Cell) -> bool:
    """True for a cell that saves an artifact (its directory is mounted read-write), False
    for one that only loads (the study's artifacts directory is mounted read-only)."""
    return _flow(cell)[0] is not None


def artifacts_mode(cell: Cell) -> str:
    """The bind-mount mode of ``cell.artifacts_dir``: ``rw`` or ``ro``."""
    return "rw" if artifacts_writable(cell) else "ro"


def _remove(path: Path) -> None:
    """Remove whatever is at ``path`` without following a link (rmtree does not follow them)."""
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _real_dir(path: Path, fresh: bool = False) -> Path:
    """``path`` as a real directory: a link or a file there is removed, not followed;
    with ``fresh``, an existing directory is emptied too."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and (fresh or not stat.S_ISDIR(info.st_mode)):
        _remove(path)
        info = None
    if info is None:
        path.mkdir(mode=0o755)
    return path


def _component(text: str, what: str) -> str:
    if not text or "/" in text or "\0" in text or text in (".", ".."):
        raise ValueError(f"{what} {text!r} cannot be a directory name")
    return text


def artifacts_dir_for(cell: Cell, out: Path) -> str | None:
    """The artifacts directory a cell gets (see the module's docstring), or None when its
    workload saves and loads nothing."""
    produces, consumes = _flow(cell)
    if produces is None and consumes is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    root = _real_dir(out.resolve() / "artifacts")
    if produces is None:
        return str(root)
    name = _real_dir(root / _component(produces, "artifact"))
    area = _real_dir(name / _component(cell.platform_key, "platform key"), fresh=True)
    os.chmod(area, 0o755)
    return str(area)

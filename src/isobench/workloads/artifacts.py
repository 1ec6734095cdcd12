"""Saving a trained model for a later cell, and loading it honestly.

Layout: ``<artifacts>/<name>/<platform key>/model.pt`` (a ``state_dict``) and
``manifest.json`` beside it, written last, naming the cell that produced the model, its
repetition and the file's SHA-256. A loader checks all of it: a missing artifact, one
left by an earlier round (its own round's training cell did not save one), or a file that
does not match its manifest is an error that says so, never a silent fallback.

A producing cell's ``artifacts_dir`` is its own ``<name>/<platform key>`` directory, the
only one it may write (the runner empties it first); a consuming cell's is the study's
artifacts directory, mounted read-only. Cells on other platforms (a container running as
its own root) may have left links there, so every file is opened relative to a directory
descriptor without following links: a planted link is refused, never written through.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from isobench.workloads.channel import CellContext

MODEL_FILE = "model.pt"
MANIFEST_FILE = "manifest.json"
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ArtifactError(RuntimeError):
    """The artifact a cell needs is missing, stale or corrupt."""


def _round_tag(cell_id: str) -> str:
    # "r0", or "r0+rerun1" for a re-run of a cell of round r0: the round is what must match.
    return cell_id.rsplit("/", 1)[-1].split("+", 1)[0]


def _root(ctx: CellContext) -> Path:
    root = ctx.cell.get("artifacts_dir")
    if not root:
        raise ArtifactError("this cell has no artifacts directory (run it through `isobench run`, "
                            "which mounts <out>/artifacts into cells that save or load models)")
    return Path(root)


def artifact_dir(ctx: CellContext, name: str, platform_key: str | None = None) -> Path:
    """Where a consumer finds artifact ``name`` of ``platform_key`` (default: its own platform)."""
    return _root(ctx) / name / (platform_key or str(ctx.cell.get("platform_key") or "default"))


def _open_dir(path: Path, parts: tuple[str, ...] = ()) -> int:
    """A descriptor of ``path/parts...``, each of ``parts`` opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if not part or "/" in part or part in (".", ".."):
                raise ArtifactError(f"{part!r} is not a plain directory name")
            inner = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _open_file(dir_fd: int, name: str, where: Path) -> Iterator[IO[bytes]]:
    """A regular file in ``dir_fd`` for reading; a link or anything else there is an ArtifactError."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        raise ArtifactError(f"{where / name} cannot be opened as a plain file (a symbolic link is refused): "
                            f"{exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ArtifactError(f"{where / name} is not a regular file")
        yield handle


def _sha256(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    handle.seek(0)
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    handle.seek(0)
    return digest.hexdigest()


def _write_synced(dir_fd: int, name: str, write: Any) -> tuple[str, int]:
    """Write ``name`` in ``dir_fd`` through a fresh temporary file (O_EXCL, no link followed)
    renamed over it; a link planted at ``name`` is replaced, never written through.
    Returns the SHA-256 and size of what was written."""
    tmp = f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w+b") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
            digest, size = _sha256(handle), os.fstat(handle.fileno()).st_size
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return digest, size


def save_model(ctx: CellContext, name: str, state_dict: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Write the model, then its manifest (so a manifest always names a complete file), in the
    cell's own artifacts directory."""
    import torch

    target = _root(ctx)
    try:
        dir_fd = os.open(target, _NOFOLLOW_DIR)
    except OSError as exc:
        raise ArtifactError(f"the cell's artifacts directory {target} cannot be opened as a directory "
                            f"(a symbolic link is refused): {exc.strerror}") from None
    try:
        with suppress(OSError):  # a half-written model never looks finished
            os.unlink(MANIFEST_FILE, dir_fd=dir_fd)
        digest, size = _write_synced(dir_fd, MODEL_FILE, lambda fh: torch.save(state_dict, fh))
        manifest = {"artifact": name, "producer_cell": ctx.cell.get("cell_id"),
                    "producer_platform": ctx.cell.get("platform_key"), "saved_at": time.time(),
                    "sha256": digest, "bytes": size, **meta}
        _write_synced(dir_fd, MANIFEST_FILE, lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
    finally:
        os.close(dir_fd)
    return {"path": str(target / MODEL_FILE), **manifest}


def load_model(ctx: CellContext, name: str, platform_key: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state_dict, manifest) of the artifact this cell's round produced; errors say what is wrong."""
    import torch

    where = platform_key or str(ctx.cell.get("platform_key") or "default")
    target = artifact_dir(ctx, name, platform_key)
    missing = ArtifactError(f"artifact {name!r} from platform {where!r} not found at {target}: no training cell "
                            f"saved it in this study (add a `train-save` workload with artifact: {name} on "
                            f"platform {where!r}, or fix load_from/from_platform)")
    try:
        dir_fd = _open_dir(_root(ctx), (name, where))
    except FileNotFoundError:
        raise missing from None
    except OSError as exc:
        raise ArtifactError(f"artifact {name!r}: {target} is not a plain directory (a symbolic link is "
                            f"refused): {exc.strerror}") from None
    try:
        try:
            with _open_file(dir_fd, MANIFEST_FILE, target) as handle:
                manifest = json.loads(handle.read(1 << 20))
        except ArtifactError:
            if not _exists(dir_fd, MANIFEST_FILE):
                raise missing from None
            raise
        producer = str(manifest.get("producer_cell"))
        if _round_tag(producer) != _round_tag(str(ctx.cell.get("cell_id"))):
            raise ArtifactError(f"artifact {name!r} at {target} was produced by cell {producer}, of another round "
                                f"than this cell's ({_round_tag(str(ctx.cell.get('cell_id')))}): this round's "
                                "training cell did not save one (did it fail?)")
        model_path = target / MODEL_FILE
        with _open_file(dir_fd, MODEL_FILE, target) as handle:
            if _sha256(handle) != manifest.get("sha256"):
                raise ArtifactError(f"artifact {name!r}: {model_path} does not match its manifest's SHA-256")
            # The very bytes just checked: loaded from the same open file, not the path again.
            state = torch.load(handle, map_location="cpu", weights_only=True)
    finally:
        os.close(dir_fd)
    return state, {"path": str(model_path), **manifest}


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True

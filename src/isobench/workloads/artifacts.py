"""Saving a trained model for a later cell, and loading it honestly.

Layout: ``<artifacts_dir>/<name>/<platform key>/model.pt`` (a ``state_dict``) and
``manifest.json`` beside it, written last, naming the cell that produced the model, its
repetition and the file's SHA-256. A loader checks all of it: a missing artifact, one
left by an earlier round (its own round's training cell did not save one), or a file that
does not match its manifest is an error that says so, never a silent fallback.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from isobench.workloads.channel import CellContext

MODEL_FILE = "model.pt"
MANIFEST_FILE = "manifest.json"


class ArtifactError(RuntimeError):
    """The artifact a cell needs is missing, stale or corrupt."""


def _round_tag(cell_id: str) -> str:
    return cell_id.rsplit("/", 1)[-1]


def artifact_dir(ctx: CellContext, name: str, platform_key: str | None = None) -> Path:
    root = ctx.cell.get("artifacts_dir")
    if not root:
        raise ArtifactError("this cell has no artifacts directory (run it through `isobench run`, "
                            "which mounts <out>/artifacts into cells that save or load models)")
    return Path(root) / name / (platform_key or str(ctx.cell.get("platform_key") or "default"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_synced(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def save_model(ctx: CellContext, name: str, state_dict: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Write the model, then its manifest (so a manifest always names a complete file)."""
    import torch

    target = artifact_dir(ctx, name)
    target.mkdir(parents=True, exist_ok=True)
    (target / MANIFEST_FILE).unlink(missing_ok=True)  # a half-written model never looks finished
    _write_synced(target / MODEL_FILE, lambda fh: torch.save(state_dict, fh))
    manifest = {"artifact": name, "producer_cell": ctx.cell.get("cell_id"),
                "producer_platform": ctx.cell.get("platform_key"), "saved_at": time.time(),
                "sha256": _sha256(target / MODEL_FILE), "bytes": (target / MODEL_FILE).stat().st_size, **meta}
    _write_synced(target / MANIFEST_FILE, lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
    return {"path": str(target / MODEL_FILE), **manifest}


def load_model(ctx: CellContext, name: str, platform_key: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state_dict, manifest) of the artifact this cell's round produced; errors say what is wrong."""
    import torch

    target = artifact_dir(ctx, name, platform_key)
    where = platform_key or ctx.cell.get("platform_key")
    manifest_path = target / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ArtifactError(f"artifact {name!r} from platform {where!r} not found at {target}: no training cell "
                            f"saved it in this study (add a `train-save` workload with artifact: {name} on "
                            f"platform {where!r}, or fix load_from/from_platform)")
    manifest = json.loads(manifest_path.read_text())
    producer = str(manifest.get("producer_cell"))
    if _round_tag(producer) != _round_tag(str(ctx.cell.get("cell_id"))):
        raise ArtifactError(f"artifact {name!r} at {target} was produced by cell {producer}, of another round "
                            f"than this cell's ({_round_tag(str(ctx.cell.get('cell_id')))}): this round's "
                            "training cell did not save one (did it fail?)")
    model_path = target / MODEL_FILE
    if not model_path.is_file() or _sha256(model_path) != manifest.get("sha256"):
        raise ArtifactError(f"artifact {name!r}: {model_path} is missing or does not match its manifest's SHA-256")
    state = torch.load(model_path, map_location="cpu", weights_only=True)
    return state, {"path": str(model_path), **manifest}

"""Real data sets given by path (a workload's ``data_path`` parameter).

Cells only see the data root (mounted read-only into every platform), so a user's data
set is brought there once, on the host, before any cell starts: hard links where the
path shares the data root's filesystem (no copy, no extra space), copies otherwise.
:func:`check` runs when the study is loaded, so a wrong or empty path is a one-line
error before anything runs; it reads headers only, never whole files.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
from pathlib import Path

from isobench.workloads.datasets import (
    CORPUS_FILE,
    IDX_IMAGES,
    IDX_LABELS,
    IMAGE_MAGIC,
    IMAGE_SUFFIXES,
    LABEL_MAGIC,
    RECSYS_FILE,
    _find_idx,
    _generate_atomically,
    link_or_copy,
    recsys_layout,
)

#: kind -> what the path must be, for error messages
KINDS = {
    "mnist": "a directory with MNIST idx files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
             "optionally .gz), or torchvision's root holding MNIST/raw/",
    "imagefolder": "an ImageFolder tree: one folder per class holding JPEG/PNG files",
    "text": "a UTF-8 text file, one sample per line",
    "wav": "a directory of .wav files (PCM)",
    "csv": "a CSV file with a header naming dense columns I1.. and categorical columns C1.. (and label), "
           "or Criteo's tab-separated train.txt",
}


class DataPathError(ValueError):
    """A data_path that cannot be used; the message reads 'data_path: problem; fix: ...'."""

    def __init__(self, kind: str, path: str, problem: str) -> None:
        super().__init__(f"data_path: {path}: {problem}; fix: give {KINDS[kind]}")


def fingerprint(path: str) -> str:
    """Names the data set by its resolved path and its top-level mtime (a changed set gets a new copy)."""
    resolved = Path(path).expanduser().resolve()
    try:
        stamp = resolved.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return hashlib.sha1(f"{resolved}:{stamp}".encode()).hexdigest()[:12]


def check(kind: str, path: str) -> None:
    """Raise DataPathError unless ``path`` holds a data set of ``kind``."""
    where = Path(path).expanduser()
    if not where.exists():
        raise DataPathError(kind, path, "no such file or directory")
    if kind in ("text", "csv"):
        if not where.is_file():
            raise DataPathError(kind, path, "not a file")
        if where.stat().st_size == 0:
            raise DataPathError(kind, path, "the file is empty")
        with where.open("rb") as fh:
            head = fh.read(65536)
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            if len(head) < 65536 or b"\x00" in head:
                raise DataPathError(kind, path, "not UTF-8 text") from None
            text = head.decode("utf-8", errors="ignore")
        if not text.strip():
            raise DataPathError(kind, path, "holds only blank lines")
        if kind == "csv":
            try:
                recsys_layout(text.splitlines()[0])
            except ValueError as err:
                raise DataPathError(kind, path, str(err)) from None
        return
    if not where.is_dir():
        raise DataPathError(kind, path, "not a directory")
    if kind == "mnist":
        try:
            for name, magic in ((IDX_IMAGES, IMAGE_MAGIC), (IDX_LABELS, LABEL_MAGIC)):
                found = _find_idx(where, name, gz=True)
                opener = gzip.open if found.suffix == ".gz" else open
                with opener(found, "rb") as fh:
                    header = fh.read(4)
                if len(header) < 4 or struct.unpack(">I", header)[0] != magic:
                    raise ValueError(f"{found.name} is not an idx file (bad magic number)")
        except (ValueError, OSError) as err:
            raise DataPathError(kind, path, str(err).removeprefix(f"{where}: ")) from None
    elif kind == "imagefolder":
        classes = [d for d in sorted(where.iterdir()) if d.is_dir()]
        if not classes:
            raise DataPathError(kind, path, "no class folders in it")
        if not any(f.suffix.lower() in IMAGE_SUFFIXES for d in classes for f in d.iterdir()):
            raise DataPathError(kind, path, "no image files in its class folders")
    elif kind == "wav":
        wav = next((f for f in where.rglob("*") if f.suffix.lower() == ".wav"), None)
        if wav is None:
            raise DataPathError(kind, path, "no .wav files in it")
        with wav.open("rb") as fh:
            header = fh.read(12)
        if header[:4] != b"RIFF" or header[8:12] != b"WAVE":
            raise DataPathError(kind, path, f"{wav.name} is not a RIFF/WAVE file")


def materialise(kind: str, path: str, target: Path, file_name: str | None = None) -> None:
    """Bring the data set at ``path`` into ``target`` (under the data root), once."""
    source = Path(path).expanduser().resolve()

    def fill(tmp: Path) -> None:
        if kind in ("text", "csv"):
            link_or_copy(source, tmp / (file_name or (CORPUS_FILE if kind == "text" else RECSYS_FILE)))
        elif kind == "mnist":
            for name in (IDX_IMAGES, IDX_LABELS):
                found = _find_idx(source, name, gz=True)
                if found.suffix == ".gz":
                    with gzip.open(found, "rb") as src, (tmp / name).open("wb") as dst:
                        shutil.copyfileobj(src, dst)
                else:
                    link_or_copy(found, tmp / name)
        elif kind == "imagefolder":
            for folder in sorted(d for d in source.iterdir() if d.is_dir()):
                for image in folder.iterdir():
                    if image.suffix.lower() in IMAGE_SUFFIXES and image.is_file():
                        link_or_copy(image, tmp / folder.name / image.name)
        elif kind == "wav":
            for wav in source.rglob("*"):
                if wav.suffix.lower() == ".wav" and wav.is_file():
                    link_or_copy(wav, tmp / wav.relative_to(source))

    _generate_atomically(target, fill)


def check_tokenizer(path: str) -> None:
    """A tokenizer.json the `tokenizers` library loads, or a BERT vocab.txt holding [UNK]."""
    where = Path(path).expanduser()
    fix = "; fix: give a tokenizer.json (Hugging Face tokenizers) or a BERT vocab.txt"
    if not where.is_file():
        raise ValueError(f"tokenizer_path: {path}: no such file{fix}")
    if where.suffix == ".json":
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(where))
        except Exception as err:  # the library raises its own exception types
            raise ValueError(f"tokenizer_path: {path}: not a tokenizer file ({str(err)[:80]}){fix}") from None
    else:
        try:
            tokens = where.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError:
            raise ValueError(f"tokenizer_path: {path}: not UTF-8 text{fix}") from None
        if "[UNK]" not in tokens:
            raise ValueError(f"tokenizer_path: {path}: no [UNK] line, not a WordPiece vocab.txt{fix}")

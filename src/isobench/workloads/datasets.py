"""Data sets generated on disk in their real formats, deterministic by seed.

Cells read these files like real data (idx files, JPEG folders), so the data path
(bind mount, overlay, 9p) is part of what a platform is measured on. A generation
lands in a temporary directory first and is renamed into place, so a half-written
data set is never used; an existing target is a finished one and is reused.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

IDX_IMAGES = "train-images-idx3-ubyte"
IDX_LABELS = "train-labels-idx1-ubyte"
IMAGE_MAGIC = 0x00000803
LABEL_MAGIC = 0x00000801


def _generate_atomically(target: Path, fill: Callable[[Path], None]) -> None:
    if target.is_dir():
        return
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        tmp.rename(target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _digit_images(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """28×28 images with a class-dependent stroke pattern plus noise (learnable, not MNIST)."""
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    yy, xx = np.mgrid[0:28, 0:28]
    images = np.zeros((n, 28, 28), dtype=np.float32)
    for digit in range(10):
        angle = digit * np.pi / 10
        line = np.abs((xx - 14) * np.sin(angle) - (yy - 14) * np.cos(angle)) < 2.0
        ring = np.abs(np.hypot(xx - 14, yy - 14) - (4 + digit)) < 1.5
        images[labels == digit] = np.where(line | (ring if digit % 2 else False), 220.0, 0.0)
    images += rng.normal(0, 30, size=images.shape)
    return np.clip(images, 0, 255).astype(np.uint8), labels


def write_mnist_idx(target: Path, n_train: int, seed: int) -> None:
    def fill(tmp: Path) -> None:
        images, labels = _digit_images(n_train, np.random.default_rng(seed))
        with (tmp / IDX_IMAGES).open("wb") as fh:
            fh.write(struct.pack(">IIII", IMAGE_MAGIC, n_train, 28, 28))
            fh.write(images.tobytes())
        with (tmp / IDX_LABELS).open("wb") as fh:
            fh.write(struct.pack(">II", LABEL_MAGIC, n_train))
            fh.write(labels.tobytes())

    _generate_atomically(target, fill)


def _find_idx(directory: Path, name: str) -> Path:
    for candidate in (directory / name, directory / "MNIST" / "raw" / name, directory / "raw" / name):
        if candidate.is_file():
            return candidate
    raise ValueError(f"{directory}: no {name} (expected MNIST idx files there or under MNIST/raw/)")


def read_mnist_idx(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read idx images and labels, checking magic numbers and sizes."""
    image_path, label_path = _find_idx(directory, IDX_IMAGES), _find_idx(directory, IDX_LABELS)
    image_bytes, label_bytes = image_path.read_bytes(), label_path.read_bytes()
    if len(image_bytes) < 16 or len(label_bytes) < 8:
        raise ValueError(f"{image_path.parent}: idx files are truncated")
    magic, count, rows, cols = struct.unpack(">IIII", image_bytes[:16])
    if magic != IMAGE_MAGIC:
        raise ValueError(f"{image_path}: bad magic 0x{magic:08x}, expected 0x{IMAGE_MAGIC:08x}")
    label_magic, label_count = struct.unpack(">II", label_bytes[:8])
    if label_magic != LABEL_MAGIC:
        raise ValueError(f"{label_path}: bad magic 0x{label_magic:08x}, expected 0x{LABEL_MAGIC:08x}")
    if label_count != count or len(image_bytes) != 16 + count * rows * cols or len(label_bytes) != 8 + count:
        raise ValueError(f"{image_path.parent}: idx sizes disagree with their headers")
    images = np.frombuffer(image_bytes, dtype=np.uint8, offset=16).reshape(count, rows, cols)
    labels = np.frombuffer(label_bytes, dtype=np.uint8, offset=8)
    return images, labels


def write_jpeg_folder(target: Path, n_images: int, size: int, n_classes: int, seed: int) -> None:
    """ImageNet-style class folders of real JPEG files, plus labels.txt."""
    from PIL import Image

    def fill(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        names = [f"class_{c:03d}" for c in range(n_classes)]
        (tmp / "labels.txt").write_text("\n".join(names) + "\n")
        for name in names:
            (tmp / name).mkdir()
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        for index in range(n_images):
            label = index % n_classes
            # Smooth gradients and a disc: compresses like a photo, not like noise.
            base = rng.uniform(0, 255, size=3)
            slope = rng.uniform(-120, 120, size=(3, 2))
            pixels = base + slope[:, 0, None, None].T * xx[..., None] + slope[:, 1, None, None].T * yy[..., None]
            cx, cy, radius = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.1, 0.3)
            pixels[np.hypot(xx - cx, yy - cy) < radius] = rng.uniform(0, 255, size=3)
            pixels += rng.normal(0, 6, size=pixels.shape)
            image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
            image.save(tmp / names[label] / f"img_{index:05d}.jpg", quality=90)

    _generate_atomically(target, fill)


def list_jpeg_folder(directory: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    """(file, class index) pairs sorted by path, and the class names."""
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory of class folders")
    labels_file = directory / "labels.txt"
    classes = (labels_file.read_text().split() if labels_file.exists()
               else sorted(p.name for p in directory.iterdir() if p.is_dir()))
    files = [(path, index) for index, name in enumerate(classes)
             for path in sorted((directory / name).glob("*.jp*g"))]
    if not files:
        raise ValueError(f"{directory}: no JPEG files in its class folders")
    return files, classes

"""The image-classification request path shared by resnet-infer, loadgen, serve and deploy-infer.

One request is ``preprocess`` (decode, resize, normalize), ``inference`` (the forward
pass) and ``postprocess`` (softmax, top-k, label lookup). Keeping it in one place means
the LoadGen, serving and pipeline workloads time exactly what resnet-infer times.
"""

from __future__ import annotations

import time
from io import BytesIO
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from isobench.workloads.base import WorkloadParams
from isobench.workloads.datasets import jpeg_folder_key, write_jpeg_folder

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TORCH_IMPORT_S = 4.0
ImageModel = Literal["resnet18", "resnet50"]


class ImageParams(WorkloadParams):
    """The image-classification knobs every workload on this request path shares."""

    image_size: int = Field(64, ge=16, le=1024, description="model input size (pixels, square)")
    n_images: int = Field(64, ge=1, le=1_000_000, description="JPEG files in the generated data set")
    source_size: int = Field(96, ge=16, le=4096, description="size of the JPEG files on disk")
    n_classes: int = Field(10, ge=1, le=100_000, description="classes (output units and class folders)")
    top_k: int = Field(5, ge=1, le=1000, description="labels returned per request")
    model: ImageModel = Field("resnet18", description="ResNet in torchvision's layout, random weights")

    @model_validator(mode="after")
    def _top_k_fits(self) -> ImageParams:
        if self.top_k > self.n_classes:
            raise ValueError(f"top_k {self.top_k} exceeds n_classes {self.n_classes}; "
                             "fix: lower top_k or raise n_classes")
        return self


class JpegData:
    """Mixin (before ``Workload``) for workloads over the generated JPEG folder: the data key and
    generation from the params' ``n_images``, ``source_size`` and ``n_classes``."""

    @classmethod
    def data_key(cls, params: Any) -> str:
        return jpeg_folder_key(params.n_images, params.source_size, params.n_classes)

    @classmethod
    def prepare_data(cls, params: Any, target: Path) -> None:
        write_jpeg_folder(target, params.n_images, params.source_size, params.n_classes, seed=0)


def per_request_estimate_s(params: Any) -> float:
    return 1.5 * (params.image_size / 224) ** 2 / 16 * (3 if params.model == "resnet50" else 1) + 0.002


def decode_normalize(data: bytes, size: int, mean: Any, std: Any) -> Any:
    """JPEG bytes -> a normalized 1×3×size×size tensor."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(BytesIO(data)) as image:
        image = image.convert("RGB").resize((size, size), Image.BILINEAR)
        array = np.asarray(image, dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array).permute(2, 0, 1)
    return ((tensor - mean) / std).unsqueeze(0)


def top_k_labels(logits: Any, classes: list[str], k: int) -> list[tuple[str, float]]:
    """Softmax, top-k and label lookup for a batch of one."""
    import torch

    probabilities = torch.softmax(logits, dim=1)
    top = torch.topk(probabilities, k, dim=1)
    return [(classes[i], float(p)) for p, i in zip(top.values[0].tolist(), top.indices[0].tolist(), strict=True)]


def build_model(name: str, n_classes: int, seed: int) -> Any:
    """A ResNet in torchvision's layout with random weights, without importing torchvision."""
    import torch

    from isobench.workloads.resnets import build_resnet

    torch.manual_seed(seed)
    return build_resnet(name, n_classes)


class Classifier:
    """A model in eval mode plus what a request needs around it."""

    def __init__(self, model: Any, classes: list[str], image_size: int, top_k: int) -> None:
        import torch

        self.model = model.eval()
        self.classes = classes
        self.image_size = image_size
        self.top_k = min(top_k, len(classes))
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def classify(self, data: bytes | Path) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """One request from JPEG bytes, or a file (read inside ``preprocess``, as resnet-infer does):
        the top-k labels and the three phase durations."""
        import torch

        clock = time.perf_counter
        with torch.inference_mode():
            t0 = clock()
            raw = data.read_bytes() if isinstance(data, Path) else data
            batch = decode_normalize(raw, self.image_size, self.mean, self.std)
            t1 = clock()
            logits = self.model(batch)
            t2 = clock()
            labels = top_k_labels(logits, self.classes, self.top_k)
            t3 = clock()
        return labels, {"preprocess": t1 - t0, "inference": t2 - t1, "postprocess": t3 - t2}

"""image-infer: end-to-end image classification over image files on disk.

Per request: ``preprocess`` (read ``batch_size`` files, or take them from memory with
``preload``; decode, resize, normalize; LeNet gets 28×28 grey), ``inference`` (the forward pass), ``postprocess`` (softmax, top-k,
label mapping through the data set's labels.txt or its class folder names). Models:
ResNet-50 (Samani & Salehi's and Prashanthi et al.'s), ResNet-18, MobileNetV3 large and
small (torchvision, random weights) and LeNet-5.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.data_import import check, fingerprint, materialise
from isobench.workloads.datasets import list_jpeg_folder
from isobench.workloads.imaging import JpegData
from isobench.workloads.inference import INFER_PHASES, INFER_SETUP, InferParams, infer_loop, softmax_top_k
from isobench.workloads.timing import resolve_device

TORCH_IMPORT_S = 5.0
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
#: rough seconds per image (forward) at 64×64 on one core of this box
COST_64PX = {"lenet5": 0.0002, "mobilenet_v3_large": 0.006, "mobilenet_v3_small": 0.003, "resnet18": 0.012,
             "resnet50": 0.03}


class ImageInferParams(InferParams):
    model: Literal["resnet50", "resnet18", "mobilenet_v3_large", "mobilenet_v3_small", "lenet5"] = Field(
        "resnet50", description="torchvision model (lenet5: LeNet-5), random weights")
    image_size: int = Field(64, ge=16, le=1024, description="model input size, square (lenet5: 28)")
    n_images: int = Field(64, ge=1, le=10_000_000, description="JPEG files in the generated data set")
    source_size: int = Field(96, ge=16, le=4096, description="size of the generated JPEG files")
    n_classes: int = Field(10, ge=1, le=100_000, description="classes of the generated data set")
    preload: bool = Field(False, description="read every file into memory at data_load (Prashanthi et al.'s "
                                             "images already in memory): preprocess only decodes")

    @model_validator(mode="after")
    def _top_k_fits(self) -> ImageInferParams:
        self.top_k_within(self.n_classes, "n_classes")
        return self


class ImagePreprocess:
    """Read, decode, resize and normalize image files into one batch tensor."""

    def __init__(self, size: int, grey: bool, device: Any) -> None:
        import torch

        channels = 1 if grey else 3
        self.size, self.grey, self.device = size, grey, device
        self.mean = torch.tensor(MEAN[:channels]).view(1, channels, 1, 1)
        self.std = torch.tensor(STD[:channels]).view(1, channels, 1, 1)

    def __call__(self, inputs: list[Path] | list[bytes]) -> Any:
        import numpy as np
        import torch
        from PIL import Image

        arrays = []
        for source in inputs:
            data = source.read_bytes() if isinstance(source, Path) else source
            with Image.open(BytesIO(data)) as image:
                image = image.convert("L" if self.grey else "RGB").resize((self.size, self.size), Image.BILINEAR)
                arrays.append(np.asarray(image, dtype=np.float32))
        batch = torch.from_numpy(np.stack(arrays)).div_(255.0)
        batch = batch.unsqueeze(1) if self.grey else batch.permute(0, 3, 1, 2)
        return ((batch - self.mean) / self.std).to(self.device, non_blocking=True)


@WORKLOADS.register("image-infer")
class ImageInfer(JpegData, Workload):
    description = "E2E image classification (ResNet-50/18, MobileNetV3, LeNet-5) over image files on disk"
    item = "request"
    phases = INFER_PHASES
    setup_phases = INFER_SETUP
    Params = ImageInferParams
    imports = ("torch", "PIL.Image")

    @classmethod
    def import_modules(cls, params: ImageInferParams) -> tuple[str, ...]:  # type: ignore[override]
        from isobench.workloads.nets import image_model_imports

        return cls.imports + image_model_imports(params.model)

    @classmethod
    def data_key(cls, params: ImageInferParams) -> str:  # type: ignore[override]
        if params.data_path:
            return f"user-imagefolder-{fingerprint(params.data_path)}"
        return super().data_key(params)

    @classmethod
    def check_host(cls, params: ImageInferParams) -> None:  # type: ignore[override]
        if params.data_path:
            check("imagefolder", params.data_path)

    @classmethod
    def prepare_data(cls, params: ImageInferParams, target: Path) -> None:  # type: ignore[override]
        if params.data_path:
            materialise("imagefolder", params.data_path, target)
        else:
            super().prepare_data(params, target)

    @classmethod
    def estimate_s(cls, params: ImageInferParams) -> float:  # type: ignore[override]
        size = 28 if params.model == "lenet5" else params.image_size
        per_image = COST_64PX[params.model] * (size / 64) ** 2 + 0.001
        return max(TORCH_IMPORT_S + 1.0 + params.requests * params.batch_size * per_image, params.min_seconds)

    def run(self, params: ImageInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads.nets import build_image_model

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "image-infer needs its data set"
        with ctx.setup("data_load"):
            files, classes = list_jpeg_folder(ctx.data_dir)
            inputs: list[Any] = [path.read_bytes() if params.preload else path for path, _ in files]
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = build_image_model(params.model, len(classes)).to(device).eval()
        grey = params.model == "lenet5"
        preprocess = ImagePreprocess(28 if grey else params.image_size, grey, device)
        k = min(params.top_k, len(classes))

        def load(index: int) -> Any:
            start = index * params.batch_size
            return preprocess([inputs[(start + i) % len(inputs)] for i in range(params.batch_size)])

        infer_loop(ctx, params, device, load, model, lambda logits: softmax_top_k(logits, classes, k))

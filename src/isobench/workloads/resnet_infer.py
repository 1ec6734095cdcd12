"""resnet-infer: end-to-end image classification over JPEG files on disk, one request at a time.

Per request: ``preprocess`` (read the file, decode, resize, normalize), ``inference``
(the model's forward pass) and ``postprocess`` (softmax, top-k, label lookup).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import list_jpeg_folder
from isobench.workloads.imaging import MEAN, STD, JpegData, build_model, decode_normalize
from isobench.workloads.inference import InferParams, infer_loop, softmax_top_k
from isobench.workloads.timing import resolve_device

TORCH_IMPORT_S = 4.0


class ResnetInferParams(InferParams):
    image_size: int = Field(64, ge=16, le=1024, description="model input size (pixels, square)")
    n_images: int = Field(64, ge=1, le=1_000_000, description="JPEG files in the generated data set")
    source_size: int = Field(96, ge=16, le=4096, description="size of the JPEG files on disk")
    n_classes: int = Field(10, ge=1, le=100_000, description="classes (output units and class folders)")
    model: Literal["resnet18", "resnet50"] = Field("resnet18", description="ResNet in torchvision's layout, "
                                                                          "random weights")

    @model_validator(mode="after")
    def _top_k_fits(self) -> ResnetInferParams:
        self.top_k_within(self.n_classes, "n_classes")
        return self


def preprocess(path: Path, size: int, mean: Any, std: Any) -> Any:
    return decode_normalize(path.read_bytes(), size, mean, std)


@WORKLOADS.register("resnet-infer")
class ResnetInfer(JpegData, Workload):
    description = "ResNet E2E inference over a folder of JPEG files generated on disk"
    item = "request"
    phases = ("preprocess", "inference", "postprocess")
    setup_phases = ("import", "model_load", "data_load")
    Params = ResnetInferParams
    imports = ("torch", "PIL.Image")  # not torchvision: its import costs ~3 s (isobench.workloads.resnets)

    @classmethod
    def estimate_s(cls, params: ResnetInferParams) -> float:  # type: ignore[override]
        per_request = 1.5 * (params.image_size / 224) ** 2 / 16 * (3 if params.model == "resnet50" else 1)
        return max(TORCH_IMPORT_S + 2.0 + params.requests * (per_request + 0.002), params.min_seconds)

    def run(self, params: ResnetInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        assert ctx.data_dir is not None, "resnet-infer needs its data set"
        device = resolve_device(params.device)
        with ctx.setup("model_load"):
            model = build_model(params.model, params.n_classes, ctx.seed).eval().to(device)
        with ctx.setup("data_load"):
            files, classes = list_jpeg_folder(ctx.data_dir)
            mean = torch.tensor(MEAN).view(3, 1, 1)
            std = torch.tensor(STD).view(3, 1, 1)

        def load(index: int) -> Any:
            paths = [files[(index * params.batch_size + j) % len(files)][0] for j in range(params.batch_size)]
            batch = torch.cat([preprocess(path, params.image_size, mean, std) for path in paths])
            return batch.to(device, non_blocking=True)

        # Timed by the loop every inference workload shares, so the headline workload is measured
        # (and a `slowdown` injected) exactly as the others are.
        infer_loop(ctx, params, device, load, model, lambda logits: softmax_top_k(logits, classes, params.top_k))

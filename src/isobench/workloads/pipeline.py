"""Train-then-deploy (Park & Bahn's training image and deployment image), as two workloads.

``train-save`` trains an image classifier on the JPEG folder and saves its ``state_dict``
to the study's artifacts directory, a host directory every platform mounts read-write at
the same path (``<out>/artifacts``), so the model leaves the container as a host file.
``deploy-infer`` loads that file in a later cell (any platform) and answers inference
requests over the JPEG folder. In each round the plan runs the cells that produce an
artifact before those that load it; the loader refuses a missing, stale or corrupt
artifact (see :mod:`isobench.workloads.artifacts`) and the deploy cell's results name the
cell that produced its model.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.artifacts import load_model, save_model
from isobench.workloads.base import Workload, WorkloadParams
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import list_jpeg_folder
from isobench.workloads.imaging import (
    MEAN,
    STD,
    TORCH_IMPORT_S,
    Classifier,
    ImageParams,
    JpegData,
    build_model,
    decode_normalize,
    per_request_estimate_s,
)

ARTIFACT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class TrainSaveParams(ImageParams):
    artifact: str = Field("model", pattern=ARTIFACT_NAME, description="name the saved model goes by")
    steps: int = Field(20, ge=1, le=10_000_000, description="timed minibatches (epochs cycle as needed)")
    batch_size: int = Field(8, ge=1, le=65536, description="images per minibatch")
    lr: float = Field(0.01, gt=0, le=10, description="learning rate")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="sgd (momentum 0.9) or adam")


class LoadFromParams(WorkloadParams):
    load_from: str = Field("model", pattern=ARTIFACT_NAME,
                           description="artifact a train-save workload of this study saved")
    from_platform: str | None = Field(None, description="platform entry (label or name) whose training "
                                                        "cell saved it; default: this cell's own")


class DeployInferParams(LoadFromParams):
    requests: int = Field(50, ge=1, le=10_000_000, description="timed requests (cycling over the files)")
    n_images: int = Field(64, ge=1, le=1_000_000, description="JPEG files in the generated data set")
    source_size: int = Field(96, ge=16, le=4096, description="size of the JPEG files on disk")
    n_classes: int = Field(10, ge=1, le=100_000, description="classes of the data set; must match the model")
    top_k: int = Field(5, ge=1, le=1000, description="labels returned per request")


def load_classifier(ctx: CellContext, params: LoadFromParams, classes: list[str], top_k: int
                    ) -> tuple[Classifier, dict[str, object]]:
    """The trained model of ``params.load_from`` as a Classifier, and its manifest."""
    state, manifest = load_model(ctx, params.load_from, params.from_platform)
    if manifest.get("classes") != classes:
        raise ValueError(f"artifact {params.load_from!r} was trained on classes {manifest.get('classes')}, "
                         f"this cell's data set has {classes} (fix: use the same n_classes in both workloads)")
    model = build_model(str(manifest["model"]), len(classes), ctx.seed)
    model.load_state_dict(state)
    return Classifier(model, classes, int(manifest["image_size"]), top_k), manifest


@WORKLOADS.register("train-save")
class TrainSave(JpegData, Workload):
    description = "train an image classifier on the JPEG folder, save it to <out>/artifacts on the host"
    item = "minibatch"
    phases = ("fetch", "forward", "backward", "optimizer")
    setup_phases = ("import", "data_load", "model_load", "save")
    Params = TrainSaveParams
    imports = ("torch", "PIL.Image", "torch._dynamo")  # torch.optim pulls in torch._dynamo
    uses_artifacts = True

    @classmethod
    def artifact_flow(cls, params: TrainSaveParams) -> tuple[str | None, str | None]:  # type: ignore[override]
        return params.artifact, None

    @classmethod
    def estimate_s(cls, params: TrainSaveParams) -> float:  # type: ignore[override]
        return TORCH_IMPORT_S + 2.0 + params.steps * params.batch_size * 3 * per_request_estimate_s(params)

    def run(self, params: TrainSaveParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        assert ctx.data_dir is not None, "train-save needs its data set"
        with ctx.setup("data_load"):
            files, classes = list_jpeg_folder(ctx.data_dir)
            mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
            images = torch.cat([decode_normalize(path.read_bytes(), params.image_size, mean, std)
                                for path, _ in files])
            labels = torch.tensor([label for _, label in files])
        with ctx.setup("model_load"):
            model = build_model(params.model, len(classes), ctx.seed).train()
            optimizer = (torch.optim.SGD(model.parameters(), lr=params.lr, momentum=0.9)
                         if params.optimizer == "sgd" else torch.optim.Adam(model.parameters(), lr=params.lr))
            loss_fn = torch.nn.CrossEntropyLoss()
            order = torch.randperm(len(files), generator=torch.Generator().manual_seed(ctx.seed))

        clock = time.perf_counter
        loss = torch.zeros(())
        ctx.start_run()
        for step in range(params.steps):
            t0 = clock()
            start = (step * params.batch_size) % len(files)
            index = order[torch.arange(start, start + params.batch_size) % len(files)]
            inputs, targets = images[index], labels[index]
            t1 = clock()
            loss = loss_fn(model(inputs), targets)
            t2 = clock()
            loss.backward()
            t3 = clock()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t4 = clock()
            ctx.item({"fetch": t1 - t0, "forward": t2 - t1, "backward": t3 - t2, "optimizer": t4 - t3}, t4 - t0)
        with ctx.setup("save"):
            saved = save_model(ctx, params.artifact, model.state_dict(),
                               {"model": params.model, "image_size": params.image_size, "classes": classes,
                                "steps": params.steps, "final_loss": float(loss.item())})
        ctx.note(info={"artifact": saved}, metrics={"final_loss": float(loss.item()),
                                                    "artifact_bytes": (saved["bytes"], "B")})


@WORKLOADS.register("deploy-infer")
class DeployInfer(JpegData, Workload):
    description = "load a model train-save stored on the host, answer inference requests over the JPEG folder"
    item = "request"
    phases = ("preprocess", "inference", "postprocess")
    setup_phases = ("import", "data_load", "model_load")
    Params = DeployInferParams
    imports = ("torch", "PIL.Image")
    uses_artifacts = True

    @classmethod
    def artifact_flow(cls, params: DeployInferParams) -> tuple[str | None, str | None]:  # type: ignore[override]
        return None, params.load_from

    @classmethod
    def estimate_s(cls, params: DeployInferParams) -> float:  # type: ignore[override]
        return TORCH_IMPORT_S + 2.0 + params.requests * 0.01

    def run(self, params: DeployInferParams, ctx: CellContext) -> None:  # type: ignore[override]
        assert ctx.data_dir is not None, "deploy-infer needs its data set"
        with ctx.setup("data_load"):
            files, classes = list_jpeg_folder(ctx.data_dir)
        with ctx.setup("model_load"):  # reading the model from the host volume is part of it
            classifier, manifest = load_classifier(ctx, params, classes, params.top_k)
        ctx.start_run()
        for index in range(params.requests):
            t0 = time.perf_counter()
            _, phases = classifier.classify(files[index % len(files)][0])
            ctx.item(phases, time.perf_counter() - t0)
        ctx.note(info={"artifact": manifest})

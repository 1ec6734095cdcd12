"""image-train: an image classifier trained from files on disk, timed per minibatch.

Models are torchvision's definitions with random weights (LeNet-5 is written out in
``nets``): LeNet-5 reads MNIST idx files (loaded into memory at ``data_load``, as
torchvision's MNIST does); the others read an ImageFolder tree of JPEG files through
torchvision's ``ImageFolder`` and transforms, so decoding and resizing happen in the
DataLoader (in ``fetch_stall`` with ``workers: 0``, overlapped with compute otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.data_import import check, fingerprint, materialise
from isobench.workloads.datasets import jpeg_folder_key, read_mnist_idx, write_jpeg_folder, write_mnist_idx
from isobench.workloads.timing import resolve_device
from isobench.workloads.training import (
    DYNAMO_IMPORT_S,
    TORCH_IMPORT_S,
    TRAIN_PHASES,
    TRAIN_SETUP,
    TrainParams,
    make_loader,
    make_optimizer,
    optimizer_imports,
    train_loop,
    train_phases,
)

ImageTrainModel = Literal["lenet5", "mobilenet_v3_large", "mobilenet_v3_small", "resnet18", "squeezenet1_1",
                          "alexnet", "resnet50"]
#: smallest input each model's down-sampling stack accepts
MIN_SIZE = {"alexnet": 63, "squeezenet1_1": 24}
#: rough seconds per image (forward + backward + step) at 64×64 on one core of this box
COST_64PX = {"lenet5": 0.0006, "mobilenet_v3_large": 0.03, "mobilenet_v3_small": 0.012, "resnet18": 0.05,
             "squeezenet1_1": 0.02, "alexnet": 0.06, "resnet50": 0.2}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class ImageTrainParams(TrainParams):
    model: ImageTrainModel = Field("mobilenet_v3_large", description="torchvision model (lenet5: LeNet-5), "
                                                                     "random weights")
    dataset: Literal["auto", "mnist", "imagefolder"] = Field(
        "auto", description="auto: mnist for lenet5, JPEG class folders otherwise")
    image_size: int = Field(64, ge=16, le=1024, description="input resolution, square (lenet5: 28)")
    n_train: int = Field(512, ge=1, le=10_000_000, description="images in the generated data set")
    n_classes: int = Field(10, ge=2, le=100_000, description="classes of the generated data set")
    source_size: int = Field(80, ge=16, le=4096, description="size of the generated JPEG files")

    @property
    def kind(self) -> str:
        if self.dataset != "auto":
            return self.dataset
        return "mnist" if self.model == "lenet5" else "imagefolder"

    @property
    def input_size(self) -> int:
        return 28 if self.model == "lenet5" else self.image_size

    @model_validator(mode="after")
    def _fits(self) -> ImageTrainParams:
        if self.kind == "mnist" and self.model != "lenet5":
            raise ValueError(f"dataset mnist has 1-channel 28×28 images; {self.model} needs RGB; "
                             "fix: use model lenet5, or dataset imagefolder")
        if self.input_size < MIN_SIZE.get(self.model, 0):
            raise ValueError(f"{self.model} needs image_size of at least {MIN_SIZE[self.model]}; "
                             f"fix: raise image_size to {MIN_SIZE[self.model]} or more")
        return self


def image_data_key(params: Any) -> str:
    if params.data_path:
        return f"user-{params.kind}-{fingerprint(params.data_path)}"
    if params.kind == "mnist":
        return f"mnist-idx-n{params.n_train}-s0"
    return jpeg_folder_key(params.n_train, params.source_size, params.n_classes)


def prepare_image_data(params: Any, target: Path) -> None:
    if params.data_path:
        materialise(params.kind, params.data_path, target)
    elif params.kind == "mnist":
        write_mnist_idx(target, params.n_train, seed=0)
    else:
        write_jpeg_folder(target, params.n_train, params.source_size, params.n_classes, seed=0)


def load_image_dataset(params: Any, directory: Path) -> tuple[Any, int]:
    """The torch dataset and its class count."""
    import torch
    from torch.utils.data import TensorDataset

    if params.kind == "mnist":
        images, labels = read_mnist_idx(directory)
        x = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)
        return TensorDataset(x, torch.from_numpy(labels.astype("int64"))), 10
    from torchvision import datasets, transforms

    steps: list[Any] = [transforms.Grayscale(1)] if params.model == "lenet5" else []
    size = params.input_size
    steps += [transforms.Resize((size, size)), transforms.ToTensor(),
              transforms.Normalize(MEAN[:1], STD[:1]) if params.model == "lenet5" else transforms.Normalize(MEAN, STD)]
    dataset = datasets.ImageFolder(str(directory), transform=transforms.Compose(steps))
    return dataset, len(dataset.classes)


@WORKLOADS.register("image-train")
class ImageTrain(Workload):
    description = ("image classifier training (LeNet-5, MobileNetV3, ResNet, SqueezeNet, AlexNet) "
                   "over MNIST idx or JPEG class folders on disk")
    item = "minibatch"
    phases = TRAIN_PHASES
    setup_phases = TRAIN_SETUP
    Params = ImageTrainParams
    imports = ("torch",)

    @classmethod
    def import_modules(cls, params: ImageTrainParams) -> tuple[str, ...]:  # type: ignore[override]
        # torchvision (ImageFolder and its transforms) pulls in torch._dynamo as well
        vision = ("torch._dynamo", "torchvision") if params.kind == "imagefolder" else ()
        return tuple(dict.fromkeys(cls.imports + optimizer_imports(params) + vision))

    @classmethod
    def data_key(cls, params: ImageTrainParams) -> str:  # type: ignore[override]
        return image_data_key(params)

    @classmethod
    def item_phases(cls, params: ImageTrainParams) -> tuple[str, ...]:  # type: ignore[override]
        return train_phases(params)

    @classmethod
    def check_host(cls, params: ImageTrainParams) -> None:  # type: ignore[override]
        if params.data_path:
            check(params.kind, params.data_path)

    @classmethod
    def prepare_data(cls, params: ImageTrainParams, target: Path) -> None:  # type: ignore[override]
        prepare_image_data(params, target)

    @classmethod
    def estimate_s(cls, params: ImageTrainParams) -> float:  # type: ignore[override]
        per_image = COST_64PX[params.model] * (params.input_size / 64) ** 2
        steps = params.steps if not params.epochs else params.epochs * max(1, params.n_train // params.batch_size)
        decode = 0.0 if params.kind == "mnist" else 0.001
        start = TORCH_IMPORT_S + (DYNAMO_IMPORT_S if len(cls.import_modules(params)) > 1 else 0.0)
        return max(start + 1.0 + steps * params.batch_size * (per_image + decode), params.min_seconds)

    def run(self, params: ImageTrainParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        from isobench.workloads.nets import build_image_model

        device = resolve_device(params.device)
        assert ctx.data_dir is not None, "image-train needs its data set"
        with ctx.setup("data_load"):
            dataset, n_classes = load_image_dataset(params, ctx.data_dir)
            loader = make_loader(dataset, params, ctx.seed, device)
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = build_image_model(params.model, n_classes).to(device).train()
            optimizer = make_optimizer(params, model.parameters())
            loss_fn = torch.nn.CrossEntropyLoss()

        def forward(batch: Any) -> tuple[Any, Any]:
            inputs, targets = batch
            outputs = model(inputs)
            return loss_fn(outputs, targets), outputs

        def read_out(loss: Any, outputs: Any, batch: Any) -> dict[str, float]:
            return {"loss": loss.item(), "accuracy": (outputs.argmax(1) == batch[1]).float().mean().item()}

        train_loop(ctx, params, loader, device, optimizer, forward, read_out, model)

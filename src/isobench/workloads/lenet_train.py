"""lenet-train: LeNet-5 trained on MNIST-format idx files, timed phase by phase per minibatch.

Phases per minibatch: ``fetch_stall`` (waiting for the DataLoader), ``forward`` (forward
and loss), ``backward``, ``optimizer`` (step and zero_grad) and ``logging`` (the rest of
the iteration: the periodic loss/accuracy read-out). No synchronisation is added: on the
CPU every op is synchronous anyway, and the timers only read the clock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload, WorkloadParams
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import read_mnist_idx, write_mnist_idx

TORCH_IMPORT_S = 4.0


class LenetTrainParams(WorkloadParams):
    batch_size: int = Field(32, ge=1, le=65536, description="images per minibatch")
    steps: int = Field(60, ge=1, le=10_000_000, description="timed minibatches (epochs cycle as needed)")
    lr: float = Field(0.01, gt=0, le=10, description="learning rate")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="sgd (momentum 0.9) or adam")
    workers: int = Field(0, ge=0, le=64, description="DataLoader worker processes (0: in the main process)")
    n_train: int = Field(2048, ge=1, le=1_000_000, description="images in the generated data set")
    log_every: int = Field(10, ge=1, le=1_000_000, description="read out loss and accuracy every N steps")
    device: Literal["cpu", "cuda"] = Field("cpu", description="where the model runs")


def build_lenet5() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10),
    )


@WORKLOADS.register("lenet-train")
class LenetTrain(Workload):
    description = "LeNet-5 training on MNIST-format idx files generated on disk"
    item = "minibatch"
    phases = ("fetch_stall", "forward", "backward", "optimizer", "logging")
    setup_phases = ("import", "data_load", "model_load")
    Params = LenetTrainParams
    # torch.optim pulls in torch._dynamo on first use (~2 s): count it as import, not model load
    imports = ("torch", "torch._dynamo")
    needs_data = True

    @classmethod
    def data_key(cls, params: LenetTrainParams) -> str:  # type: ignore[override]
        return f"mnist-idx-n{params.n_train}-s0"

    @classmethod
    def prepare_data(cls, params: LenetTrainParams, target: Path) -> None:  # type: ignore[override]
        write_mnist_idx(target, params.n_train, seed=0)

    @classmethod
    def estimate_s(cls, params: LenetTrainParams) -> float:  # type: ignore[override]
        return TORCH_IMPORT_S + 0.5 + params.steps * params.batch_size * 0.6e-3

    def run(self, params: LenetTrainParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        if params.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device: cuda was asked for, but torch sees no CUDA device here")
        device = torch.device(params.device)
        assert ctx.data_dir is not None, "lenet-train needs its data set"
        with ctx.setup("data_load"):
            images, labels = read_mnist_idx(ctx.data_dir)
            x = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)
            y = torch.from_numpy(labels.astype("int64"))
            generator = torch.Generator().manual_seed(ctx.seed)
            loader = DataLoader(TensorDataset(x, y), batch_size=params.batch_size, shuffle=True,
                                num_workers=params.workers, generator=generator, drop_last=False,
                                persistent_workers=params.workers > 0)
        with ctx.setup("model_load"):
            torch.manual_seed(ctx.seed)
            model = build_lenet5().to(device)
            if params.optimizer == "sgd":
                optimizer = torch.optim.SGD(model.parameters(), lr=params.lr, momentum=0.9)
            else:
                optimizer = torch.optim.Adam(model.parameters(), lr=params.lr)
            loss_fn = torch.nn.CrossEntropyLoss()
            model.train()

        log: list[tuple[int, float, float]] = []
        batches = iter(loader)
        ctx.start_run()
        clock = time.perf_counter
        for step in range(params.steps):
            t0 = clock()
            try:
                inputs, targets = next(batches)
            except StopIteration:  # next epoch
                batches = iter(loader)
                inputs, targets = next(batches)
            inputs, targets = inputs.to(device), targets.to(device)
            t1 = clock()
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
            t2 = clock()
            loss.backward()
            t3 = clock()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t4 = clock()
            if step % params.log_every == 0:
                accuracy = (outputs.argmax(1) == targets).float().mean().item()
                log.append((step, loss.item(), accuracy))
            t5 = clock()
            ctx.item({"fetch_stall": t1 - t0, "forward": t2 - t1, "backward": t3 - t2,
                      "optimizer": t4 - t3, "logging": t5 - t4}, t5 - t0)
        ctx.emit({"type": "note", "final_loss": log[-1][1] if log else None,
                  "final_accuracy": log[-1][2] if log else None})

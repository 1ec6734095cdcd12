"""The training loop shared by the training workloads, timed phase by phase per minibatch.

Phases: ``fetch_stall`` (waiting for the DataLoader, plus the copy to the device),
``forward`` (forward and loss), ``backward``, ``optimizer`` (step and zero_grad) and
``logging`` (the rest of the iteration: the periodic loss read-out every ``log_every``
steps). ``logging`` is defined as end-to-end minus the other phases, so the phases add up
to the minibatch's end-to-end time; the record write to the runner happens between
minibatches and is in no minibatch's time.

How long: ``steps`` minibatches, or with ``epochs: N`` at least N whole epochs; either way
training goes on until ``min_seconds`` have passed ("at least N epochs or T seconds,
whichever is longer", as Prashanthi et al. ran theirs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from isobench.workloads.base import WorkloadParams
from isobench.workloads.timing import phase_clock, timing_mode

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

TORCH_IMPORT_S = 6.0  # torch plus torch._dynamo (pulled in by torch.optim) on this 2-core box
TRAIN_PHASES = ("fetch_stall", "forward", "backward", "optimizer", "logging")
TRAIN_SETUP = ("import", "data_load", "model_load")


class TrainParams(WorkloadParams):
    batch_size: int = Field(16, ge=1, le=65536, description="samples per minibatch")
    steps: int = Field(20, ge=1, le=10_000_000, description="timed minibatches (epochs cycle as needed); "
                                                            "ignored when epochs > 0")
    epochs: int = Field(0, ge=0, le=100_000, description="0: run `steps`; N: at least N whole epochs")
    min_seconds: float = Field(0.0, ge=0, le=7 * 86400,
                               description="go on until at least this long (whichever is longer)")
    optimizer: Literal["sgd", "adam", "adamw", "rmsprop"] = Field("sgd", description="sgd (with momentum), "
                                                                  "adam, adamw or rmsprop")
    lr: float = Field(0.01, gt=0, le=10, description="learning rate")
    momentum: float = Field(0.9, ge=0, lt=1, description="sgd/rmsprop momentum")
    workers: int = Field(0, ge=0, le=64, description="DataLoader worker processes (0: in the main process)")
    log_every: int = Field(10, ge=1, le=1_000_000, description="read out the loss every N steps")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees one")
    sync_timing: bool = Field(False, description="CUDA-event timing (synchronises each minibatch; "
                                                 "a no-op on the CPU); the mode is in `done`")
    data_path: str | None = Field(None, description="a real data set instead of the generated one")


def make_optimizer(params: TrainParams, parameters: Any) -> Any:
    import torch

    if params.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=params.lr, momentum=params.momentum)
    if params.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=params.lr)
    if params.optimizer == "adamw":
        return torch.optim.AdamW(parameters, lr=params.lr)
    return torch.optim.RMSprop(parameters, lr=params.lr, momentum=params.momentum)


def make_loader(dataset: Any, params: TrainParams, seed: int, device: Any,
                collate_fn: Callable[..., Any] | None = None) -> Any:
    import torch
    from torch.utils.data import DataLoader

    generator = torch.Generator().manual_seed(seed)
    # Batch-norm models fail on a last minibatch of one sample: drop a ragged tail when there is more.
    drop_last = len(dataset) > params.batch_size
    return DataLoader(dataset, batch_size=params.batch_size, shuffle=True, num_workers=params.workers,
                      generator=generator, drop_last=drop_last, collate_fn=collate_fn,
                      persistent_workers=params.workers > 0, pin_memory=device.type == "cuda")


def to_device(batch: Any, device: Any) -> Any:
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch.to(device, non_blocking=True) if hasattr(batch, "to") else batch


def train_loop(ctx: CellContext, params: TrainParams, loader: Any, device: Any, optimizer: Any,
               forward: Callable[[Any], tuple[Any, Any]],
               read_out: Callable[[Any, Any, Any], dict[str, float]]) -> None:
    """Run and time the minibatches. ``forward(batch) -> (loss, outputs)``;
    ``read_out(loss, outputs, batch)`` is the periodic logging (it may synchronise, as real
    training logs do)."""
    mode = timing_mode(params.sync_timing, device.type)
    clock = phase_clock(mode)
    steps_per_epoch = len(loader)
    log: dict[str, float] = {}
    step = epochs_done = in_epoch = 0
    batches = iter(loader)
    ctx.start_run()
    started = time.perf_counter()
    while True:
        clock.start()
        try:
            batch = next(batches)
        except StopIteration:  # the next epoch
            batches = iter(loader)
            batch = next(batches)
        batch = to_device(batch, device)
        clock.lap("fetch_stall")
        loss, outputs = forward(batch)
        clock.lap("forward")
        loss.backward()
        clock.lap("backward")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        clock.lap("optimizer")
        if step % params.log_every == 0:
            log = read_out(loss, outputs, batch)
        clock.lap("logging")
        phases, e2e = clock.stop()
        ctx.item(phases, e2e)
        step += 1
        in_epoch += 1
        if in_epoch == steps_per_epoch:
            epochs_done, in_epoch = epochs_done + 1, 0
        counted = epochs_done >= params.epochs if params.epochs else step >= params.steps
        if counted and time.perf_counter() - started >= params.min_seconds:
            break
    ctx.emit({"type": "note", **{f"final_{k}": v for k, v in log.items()}})
    ctx.note(timing=mode, sync_timing=params.sync_timing, device=str(device), steps=step,
             steps_per_epoch=steps_per_epoch, **{f"final_{k}": v for k, v in log.items()})
    ctx.metric("epochs", step / steps_per_epoch, "epochs")

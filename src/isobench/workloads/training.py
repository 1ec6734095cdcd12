"""The training loop shared by the training workloads, timed phase by phase per minibatch.

Phases: ``fetch_stall`` (waiting for the DataLoader, plus the copy to the device),
``forward`` (forward and loss), ``backward``, ``optimizer`` (step and zero_grad) and
``logging`` (the rest of the iteration: the periodic loss read-out every ``log_every``
steps, appended to a log file with ``log_file``) and, with ``checkpoint_every: N``,
``checkpoint`` (model and optimizer state saved every N steps, near zero on the other
steps). Each phase ends where the next begins, so the phases add up to the minibatch's
end-to-end time; the record write to the runner happens between minibatches and is in no
minibatch's time.

Checkpoints and the log go to a scratch directory of the cell's own under
``checkpoint_dir`` (disk-backed, so the kernel's flusher threads write them back: they are
not fsync'd), rewritten in place each time as real checkpointing does, and removed at the end.

How long: ``steps`` minibatches, or with ``epochs: N`` at least N whole epochs; either way
training goes on until ``min_seconds`` have passed ("at least N epochs or T seconds,
whichever is longer", as Prashanthi et al. ran theirs).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from isobench.workloads.base import WorkloadParams
from isobench.workloads.timing import loop_clock, timing_mode

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

TORCH_IMPORT_S = 4.0  # torch alone, on one core of this 2-core box
DYNAMO_IMPORT_S = 3.0  # torch._dynamo, which torch.optim and torchvision pull in
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
    checkpoint_every: int = Field(0, ge=0, le=10_000_000, description="save model and optimizer state every N "
                                                                      "steps (0: never); rewritten in place, "
                                                                      "not fsync'd")
    log_file: bool = Field(False, description="append each loss read-out as a line to a log file")
    checkpoint_dir: str = Field("/var/tmp", description="where the cell's scratch directory for checkpoints and "
                                                        "the log goes (disk-backed to see write-backs)")

    @field_validator("checkpoint_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"checkpoint_dir {value!r} is relative; fix: give an absolute path such as /var/tmp")
        return value


def train_phases(params: TrainParams) -> tuple[str, ...]:
    """The phases each minibatch reports: ``checkpoint`` only when checkpointing is on."""
    return (*TRAIN_PHASES, "checkpoint") if params.checkpoint_every else TRAIN_PHASES


class Scratch:
    """The cell's own directory for checkpoints and the training log, removed by ``close``."""

    def __init__(self, parent: str) -> None:
        try:
            self.dir = Path(tempfile.mkdtemp(prefix="isobench-train-", dir=parent))
        except OSError as exc:
            raise RuntimeError(f"checkpoint_dir {parent} is not writable in this cell ({exc.strerror}); "
                               "fix: set checkpoint_dir to a writable, disk-backed directory") from exc
        self.checkpoint = self.dir / "checkpoint.pt"
        self.log = self.dir / "train.log"
        self.saved = 0
        self.size = 0

    def save(self, step: int, model: Any, optimizer: Any) -> None:
        import torch

        # Rewritten in place rather than truncated: ext4 (auto_da_alloc) starts write-back at
        # close of a file truncated to zero, which would take it from the flusher threads.
        with open(self.checkpoint, "r+b" if self.saved else "wb") as handle:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, handle)
            handle.truncate()
            self.size = handle.tell()
        self.saved += 1

    def append(self, step: int, values: dict[str, float]) -> None:
        line = " ".join(f"{k}={v:.6g}" for k, v in values.items())
        with open(self.log, "a") as handle:
            handle.write(f"step {step} {time.time():.6f} {line}\n")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def optimizer_imports(params: TrainParams) -> tuple[str, ...]:
    """torch.optim imports torch._dynamo on its first call: the import phase counts it, not the
    first minibatch. Plain SGD is written here without it (isobench.workloads.sgd)."""
    return () if params.optimizer == "sgd" else ("torch._dynamo",)


def make_optimizer(params: TrainParams, parameters: Any) -> Any:
    import torch

    if params.optimizer == "sgd":  # torch.optim.SGD's update, without importing torch._dynamo
        from isobench.workloads.sgd import MomentumSgd

        return MomentumSgd(parameters, lr=params.lr, momentum=params.momentum)
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
               read_out: Callable[[Any, Any, Any], dict[str, float]], model: Any = None) -> None:
    """Run and time the minibatches. ``forward(batch) -> (loss, outputs)``;
    ``read_out(loss, outputs, batch)`` is the periodic logging (it may synchronise, as real
    training logs do); ``model`` is what checkpoints save."""
    if params.checkpoint_every and model is None:
        raise ValueError("checkpoint_every: this workload has no model to checkpoint; fix: leave it at 0")
    scratch = Scratch(params.checkpoint_dir) if params.checkpoint_every or params.log_file else None
    try:
        _loop(ctx, params, loader, device, optimizer, forward, read_out, model, scratch)
    finally:
        if scratch is not None:
            scratch.close()


def _loop(ctx: CellContext, params: TrainParams, loader: Any, device: Any, optimizer: Any,
          forward: Callable[[Any], tuple[Any, Any]], read_out: Callable[[Any, Any, Any], dict[str, float]],
          model: Any, scratch: Scratch | None) -> None:
    mode = timing_mode(params.sync_timing, device.type)
    batch: Any = None

    def one_more_step() -> None:  # what a slowdown repeats (timing.loop_clock)
        loss, _ = forward(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    clock = loop_clock(mode, ctx, params.min_seconds, one_more_step)
    steps_per_epoch = len(loader)
    log: dict[str, float] = {}
    step = epochs_done = in_epoch = 0
    batches = iter(loader)
    ctx.start_run(rolling=params.min_seconds > 0)
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
            if params.log_file and scratch is not None:
                scratch.append(step, log)
        clock.lap("logging")
        if params.checkpoint_every:
            if (step + 1) % params.checkpoint_every == 0 and scratch is not None:
                scratch.save(step + 1, model, optimizer)
            clock.lap("checkpoint")
        phases, e2e = clock.stop()
        ctx.item(phases, e2e)
        step += 1
        in_epoch += 1
        if in_epoch == steps_per_epoch:
            epochs_done, in_epoch = epochs_done + 1, 0
        counted = epochs_done >= params.epochs if params.epochs else step >= params.steps
        if counted and ctx.measured_s() >= params.min_seconds:
            break
    ctx.emit({"type": "note", **{f"final_{k}": v for k, v in log.items()}})
    ctx.note(timing=mode, sync_timing=params.sync_timing, device=str(device), steps=step,
             steps_per_epoch=steps_per_epoch, **{f"final_{k}": v for k, v in log.items()})
    if scratch is not None:
        ctx.note(checkpoints=scratch.saved, checkpoint_bytes=scratch.size, scratch_dir=str(scratch.dir))
    ctx.metric("epochs", step / steps_per_epoch, "epochs")

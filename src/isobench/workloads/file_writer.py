"""file-writer: dirties file pages the way training does (a checkpoint rewritten every round,
a log appended), to produce write-back traces for the ftrace probe and nvmsim.

With ``fsync`` the data goes out in the writer's own context (sync write-backs); without it
the kernel's flusher writes it back later: ``periodic`` after dirty_expire (~30 s, so set
``wait_s`` past it), or ``background`` when the dirty data passes dirty_background_bytes.
With ``train_steps`` each round first trains a small LeNet-style CNN for that many steps
(CPU, random data) and the checkpoint is its real ``torch.save`` state (model and
optimizer), as a training job's checkpointing is. Files live under ``dir`` (disk-backed by default; a tmpfs is never written back) and are
removed at the end.

The ``extra_writebacks`` knob (calls a second) injects what a container engine's own writes add
on the same device (its json-file log, overlay and containerd metadata), so that
`isobench replicate --power` can check that a design sees more device write-back calls
(Park & Bahn F6): a side thread of the cell appends a page to a second file beside the checkpoint
and calls syncfs(2) on it, once at a random moment in each 1/rate-second slot (seeded by the
cell's seed): the count is the rate's, within one call, while the gaps between calls vary from
0 to two slots. syncfs hands the file system's dirty inodes to the kernel's flusher
as a ``sync`` write-back call on that device (at least one counted ``device_writebacks`` call each, as
measured on ext4 here), the one flusher path whose rate does not wait for the 30-s dirty-expire
timer or the dirty-background threshold. The done record notes the rate and the calls made.
"""

from __future__ import annotations

import ctypes
import os
import random
import threading
import time
from pathlib import Path

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload, WorkloadParams
from isobench.workloads.channel import CellContext


class FileWriterParams(WorkloadParams):
    rounds: int = Field(5, ge=1, le=100_000, description="checkpoints written")
    file_kb: int = Field(1024, ge=4, le=16 << 20, description="checkpoint size, KiB (rewritten in place)")
    fsync: bool = Field(True, description="fsync after each round")
    interval_s: float = Field(0.05, ge=0, le=3600, description="pause between rounds")
    wait_s: float = Field(0.0, ge=0, le=3600, description="wait before removing the files (let the flusher run)")
    delay_s: float = Field(0.0, ge=0, le=3600, description="wait before the first round (lets probes attach)")
    dir: str = Field("/var/tmp", description="where to write (must be disk-backed to see write-backs)")
    train_steps: int = Field(0, ge=0, le=1_000_000, description="train a small CNN this many steps per round "
                                                                "and checkpoint it (0: random bytes)")


@WORKLOADS.register("file-writer")
class FileWriter(Workload):
    description = "rewrites a checkpoint file and appends a log each round (write-back traces)"
    item = "round"
    phases = ("write", "sync")
    Params = FileWriterParams
    own_knobs = frozenset({"extra_writebacks"})

    @classmethod
    def estimate_s(cls, params: FileWriterParams) -> float:  # type: ignore[override]
        return params.delay_s + params.rounds * (params.interval_s + params.file_kb / 200_000) + params.wait_s

    def run(self, params: FileWriterParams, ctx: CellContext) -> None:  # type: ignore[override]
        base = Path(params.dir) / f"isobench-writer-{os.getpid()}"
        payload = os.urandom(params.file_kb * 1024)
        step = _trainer(params.train_steps) if params.train_steps else None
        time.sleep(params.delay_s)
        rate = ctx.cell.get("knobs", {}).get("extra_writebacks")
        side = ExtraWriter(Path(f"{base}.side"), float(rate), ctx.seed) if rate else None
        ctx.start_run()
        try:
            if side is not None:
                side.start()
            with open(f"{base}.ckpt", "wb") as ckpt, open(f"{base}.log", "ab") as log:
                for round_no in range(params.rounds):
                    start = time.perf_counter()
                    ckpt.seek(0)
                    if step is not None:
                        step(ckpt)
                        ckpt.truncate()
                    else:
                        ckpt.write(payload)
                    ckpt.flush()
                    log.write(f"round {round_no} {time.time():.6f}\n".encode())
                    log.flush()
                    written = time.perf_counter()
                    if params.fsync:
                        os.fsync(ckpt.fileno())
                        os.fsync(log.fileno())
                    done = time.perf_counter()
                    ctx.item({"write": written - start, "sync": done - written}, done - start)
                    if params.interval_s:
                        time.sleep(params.interval_s)
            time.sleep(params.wait_s)
        finally:
            if side is not None:
                side.stop()
                ctx.note(extra_writebacks=rate, extra_writeback_syncs=side.calls)
            for suffix in (".ckpt", ".log", ".side"):
                Path(f"{base}{suffix}").unlink(missing_ok=True)
        if side is not None and side.error:
            raise RuntimeError(f"extra_writebacks: {side.error}")


class ExtraWriter:
    """The ``extra_writebacks`` knob's side writer: a page appended to ``path`` and syncfs(2) once
    at a random moment of each 1/``rate``-second slot (seeded), until :meth:`stop`."""

    def __init__(self, path: Path, rate: float, seed: int) -> None:
        self.path, self.rate = path, rate
        self.random = random.Random(seed)
        self.calls = 0
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="extra-writebacks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        page = os.urandom(4096)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        start = time.monotonic()
        try:
            while not self._stop.wait(max(0.0, start + (self.calls + self.random.random()) / self.rate
                                          - time.monotonic())):
                os.write(fd, page)  # a dirty page and inode on the checkpoint's device
                if syncfs(fd) != 0:
                    errno = ctypes.get_errno()
                    self.error = f"syncfs failed: {os.strerror(errno)} (errno {errno})"
                    return
                self.calls += 1
        finally:
            os.close(fd)


def _trainer(steps: int):  # type: ignore[no-untyped-def]
    """A closure that trains ``steps`` minibatches and saves the checkpoint into a file object."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                          nn.ReLU(), nn.Linear(84, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))

    def step(handle) -> None:  # type: ignore[no-untyped-def]
        for _ in range(steps):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, handle)

    return step

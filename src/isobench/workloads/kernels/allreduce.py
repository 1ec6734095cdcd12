"""kernel-allreduce: torch.distributed all-reduce (sum, float32) across processes of the cell.

The cell's worker is rank 0; it spawns the other ranks itself, so every rank runs inside
the platform (same cgroup, namespaces, seccomp filter). Rendezvous goes through a file in
a private temporary directory; gloo's traffic goes over loopback, which exists even in a
``--network none`` container. ``device: cuda`` uses NCCL with one GPU per rank.

Bandwidth follows the bus-bandwidth convention of the NCCL tests: ``algbw`` = bytes /
time per call, ``busbw`` = algbw · 2(n-1)/n for n ranks, comparable across rank counts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import WorkloadParams
from isobench.workloads.kernels.common import (
    AUTO_BYTES,
    Bench,
    KernelParams,
    KernelWorkload,
    Step,
    auto_calls,
    cuda_problem,
    device_sync,
    run_benches,
)

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

# DeepBench's all-reduce sizes (float32 elements); ``small`` takes the first four / 16.
DEEPBENCH = (100_000, 3_097_600, 4_194_304, 6_553_600, 16_777_217, 38_360_000, 64_500_000)
SMALL = tuple(n // 16 for n in DEEPBENCH[:4])
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


def parse_elements(text: str) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"all-reduce size {text!r} must be a positive number of float32 elements")
    return int(value)


class AllReduceParams(KernelParams):
    shape_syntax: ClassVar[str] = "'100000' (float32 elements per rank)"
    ranks: int = Field(2, ge=2, le=64, description="processes taking part, all inside the cell")

    def shape_specs(self) -> list[int]:
        if self.shapes == "list":
            return [parse_elements(text) for text in self.shape_list]
        return list(DEEPBENCH if self.shapes == "deepbench" else SMALL)


def _benches(params: AllReduceParams, device: str) -> list[Bench]:
    import torch
    import torch.distributed as dist

    ranks = params.ranks
    benches = []
    for elements in params.shape_specs():
        tensor = torch.ones(elements, dtype=torch.float32, device=device)
        size = 4.0 * elements

        def call(_: object, tensor: torch.Tensor = tensor) -> None:
            dist.all_reduce(tensor)

        rates = {"algbw": (size, "B/s"), "busbw": (size * 2 * (ranks - 1) / ranks, "B/s")}
        benches.append(Bench(f"allreduce:{elements}", [Step("", call, rates)],
                             auto_calls(params.calls, size, AUTO_BYTES)))
    return benches


def _init(rank: int, params: AllReduceParams, init_file: str) -> None:
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: present even without a network
    if params.device == "cuda":
        import torch

        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if params.device == "cuda" else "gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=params.ranks, timeout=COLLECTIVE_TIMEOUT)


class _Silent:
    """A CellContext stand-in for ranks > 0: they run the same collectives, report nothing."""

    def setup(self, name: str) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def rank_main(rank: int, params_json: str, init_file: str, threads: int | None) -> None:
    """A rank other than 0: same collectives in the same order, nothing reported."""
    import torch
    import torch.distributed as dist

    if threads:
        torch.set_num_threads(threads)
    params = AllReduceParams.model_validate_json(params_json)
    _init(rank, params, init_file)
    try:
        device = f"cuda:{rank}" if params.device == "cuda" else "cpu"
        run_benches(_Silent(), lambda: _benches(params, device), params.iterations,  # type: ignore[arg-type]
                    params.warmup_calls, device_sync(params.device), dist.barrier)
    finally:
        dist.destroy_process_group()


@WORKLOADS.register("kernel-allreduce")
class KernelAllReduce(KernelWorkload):
    description = ("all-reduce (torch.distributed; gloo over loopback on CPU, NCCL on GPUs) across ranks "
                   "spawned inside the cell; time per call, algbw and busbw per size")
    phases = ("allreduce:<float32 elements> (one per size)",)
    setup_phases = ("spawn", "init", "allocate", "warmup")
    Params = AllReduceParams

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        return [f"allreduce:{n}" for n in params.shape_specs()]

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        assert isinstance(params, AllReduceParams)
        moved = sum(4.0 * n * auto_calls(params.calls, 4.0 * n, AUTO_BYTES) for n in params.shape_specs())
        return 6.0 + moved * params.iterations / 5e8  # spawning ranks imports torch in each

    def run(self, params: KernelParams, ctx: CellContext) -> None:  # type: ignore[override]
        import multiprocessing

        import torch.distributed as dist

        assert isinstance(params, AllReduceParams)
        if params.device == "cuda":
            import torch

            problem = cuda_problem()
            if problem is None and torch.cuda.device_count() < params.ranks:
                problem = (f"NCCL needs one GPU per rank: {torch.cuda.device_count()} visible, "
                           f"{params.ranks} ranks asked for")
            if problem is None and not dist.is_nccl_available():
                problem = "this torch build has no NCCL"
            if problem:
                ctx.unavailable(problem)
                return
        scratch = tempfile.mkdtemp(prefix="isobench-allreduce-")
        init_file = os.path.join(scratch, "rendezvous")
        spawn = multiprocessing.get_context("spawn")  # no fork of a process holding torch's threads
        children = []
        try:
            with ctx.setup("spawn"):
                for rank in range(1, params.ranks):
                    child = spawn.Process(target=rank_main, daemon=True,
                                          args=(rank, params.model_dump_json(), init_file, ctx.threads))
                    child.start()
                    children.append(child)
            with ctx.setup("init"):
                _init(0, params, init_file)
            try:
                ctx.note(device=params.device, ranks=params.ranks,
                         backend="nccl" if params.device == "cuda" else "gloo")
                device = "cuda:0" if params.device == "cuda" else "cpu"
                run_benches(ctx, lambda: _benches(params, device), params.iterations, params.warmup_calls,
                            device_sync(params.device), dist.barrier)
            finally:
                dist.destroy_process_group()
            for child in children:
                child.join(timeout=60)
                if child.exitcode != 0:
                    raise RuntimeError(f"all-reduce rank {children.index(child) + 1} exited with {child.exitcode}")
        finally:
            for child in children:
                if child.is_alive():
                    child.kill()
                    child.join(timeout=10)
            shutil.rmtree(scratch, ignore_errors=True)

"""What every kernel workload shares: parameters, the timing loop, the metrics it reports."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from isobench.workloads.base import Workload, WorkloadParams

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

#: work per shape per item when ``calls`` is 0: enough to outlast timer noise, the same on
#: every platform (a count derived from a measured rate would differ between platforms)
AUTO_FLOP = 2e8
AUTO_BYTES = 64 * 2**20
MAX_AUTO_CALLS = 1000
#: FLOP/s assumed for time estimates only (a 2-core CPU)
NOMINAL_RATE = 2e10


class KernelParams(WorkloadParams):
    shapes: Literal["small", "deepbench", "list"] = Field(
        "small", description="small: a representative DeepBench subset scaled down; deepbench: "
                             "the same shapes at DeepBench's sizes; list: the shapes in shape_list")
    shape_list: list[str] = Field(default_factory=list, description="shapes when shapes is list")
    iterations: int = Field(5, ge=1, le=100_000, description="timed items; each runs every shape once")
    calls: int = Field(0, ge=0, le=1_000_000,
                       description="back-to-back calls per shape per item; 0: enough for about 2e8 FLOP "
                                   "(64 MiB moved), the same count on every platform")
    warmup_calls: int = Field(2, ge=0, le=10_000, description="untimed calls per shape first")
    device: Literal["cpu", "cuda"] = Field("cpu", description="cuda: on the GPU (unavailable without one)")

    #: the shape grammar, shown in errors
    shape_syntax: ClassVar[str] = ""

    def shape_specs(self) -> list[Any]:
        """The shapes these params select (parsed)."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _check_shapes(self) -> KernelParams:
        if self.shapes == "list" and not self.shape_list:
            raise ValueError(f"shape_list: empty while shapes is list; fix: list shapes such as {self.shape_syntax}")
        if self.shape_list and self.shapes != "list":
            raise ValueError(f"shape_list: given while shapes is {self.shapes!r}; fix: set shapes: list")
        try:
            self.shape_specs()
        except ValueError as err:
            raise ValueError(f"shape_list: {err}; fix: write shapes as {self.shape_syntax}") from None
        return self


def auto_calls(calls: int, work: float, target: float) -> int:
    """``calls`` when given, else a count reaching ``target`` work (deterministic)."""
    if calls:
        return calls
    return max(1, min(MAX_AUTO_CALLS, math.ceil(target / max(work, 1.0))))


def ints(text: str, count: int, what: str, minimum: int = 1) -> list[int]:
    parts = text.strip().lower().split("x")
    if len(parts) != count or not all(p.isdigit() and int(p) >= minimum for p in parts):
        raise ValueError(f"{what} {text!r} needs {count} integers of at least {minimum} joined by 'x'")
    return [int(p) for p in parts]


@dataclass
class Step:
    """One timed part of a call (forward, backward); ``fn`` takes the previous step's result."""

    suffix: str
    fn: Callable[[Any], Any]
    #: rate name -> (work per call, unit): FLOP for FLOP/s, bytes for B/s
    rates: dict[str, tuple[float, str]] = field(default_factory=dict)


@dataclass
class Bench:
    """One kernel shape: its phase label, the steps of one call, and how many calls per item."""

    label: str
    steps: list[Step]
    calls: int


def _noop() -> None:
    return None


def run_benches(ctx: CellContext, build: Callable[[], list[Bench]], iterations: int, warmup_calls: int,
                sync: Callable[[], None] = _noop, before_block: Callable[[], None] = _noop) -> None:
    """Allocate, warm up, then time ``iterations`` items of every bench; report per-call metrics.

    ``sync`` waits for queued device work (CUDA) before a clock is read; ``before_block``
    lines up cooperating processes (all-reduce ranks) outside the timed blocks.
    """
    with ctx.setup("allocate"):
        benches = build()
        sync()
    with ctx.setup("warmup"):
        for bench in benches:
            before_block()
            for _ in range(warmup_calls):
                value = None
                for step in bench.steps:
                    value = step.fn(value)
            sync()
    totals: dict[str, float] = {}
    ctx.start_run()
    clock = time.perf_counter
    for _ in range(iterations):
        phases: dict[str, float] = {}
        item_start = clock()
        for bench in benches:
            before_block()
            if len(bench.steps) == 1:  # one clock read per block: the least timer overhead
                fn = bench.steps[0].fn
                start = clock()
                for _ in range(bench.calls):
                    fn(None)
                sync()
                phases[bench.label] = clock() - start
                continue
            spent = [0.0] * len(bench.steps)
            for _ in range(bench.calls):
                value = None
                for index, step in enumerate(bench.steps):
                    start = clock()
                    value = step.fn(value)
                    sync()
                    spent[index] += clock() - start
            for step, seconds in zip(bench.steps, spent, strict=True):
                phases[bench.label + step.suffix] = seconds
        ctx.item(phases, clock() - item_start)
        for name, seconds in phases.items():
            totals[name] = totals.get(name, 0.0) + seconds
    for bench in benches:
        for step in bench.steps:
            name = bench.label + step.suffix
            per_call = totals[name] / (iterations * bench.calls)
            ctx.metric(f"{name}.per_call", per_call, "s")
            for rate, (work, unit) in step.rates.items():
                if per_call > 0:
                    ctx.metric(f"{name}.{rate}", work / per_call, unit)
    ctx.note(kernel_calls={bench.label: bench.calls for bench in benches})


def cuda_problem() -> str | None:
    """None when this cell sees a CUDA device, else why not (said, never faked)."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        import glob

        nodes = "present" if glob.glob("/dev/nvidia[0-9]*") else "absent"
        return (f"no CUDA device visible in this cell (torch {torch.__version__}, CUDA {torch.version.cuda}; "
                f"/dev/nvidia* {nodes})")
    return None


def device_sync(device: str) -> Callable[[], None]:
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    return _noop


class KernelWorkload(Workload):
    """A kernel workload: ``benches(params, device)`` builds its shapes."""

    item = "pass over the shapes"
    imports = ("torch",)
    Params: ClassVar[type[KernelParams]] = KernelParams  # type: ignore[assignment]

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        raise NotImplementedError

    @classmethod
    def shape_work(cls, params: KernelParams) -> list[float]:
        """FLOP of one call of each shape (for the time estimate)."""
        return []

    @classmethod
    def item_phases(cls, params: WorkloadParams) -> tuple[str, ...]:
        return tuple(cls.labels(params))  # type: ignore[arg-type]

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        assert isinstance(params, KernelParams)
        flop = sum(work * (params.iterations * auto_calls(params.calls, work, AUTO_FLOP) + params.warmup_calls)
                   for work in cls.shape_work(params))
        return 3.0 + flop / NOMINAL_RATE

    def benches(self, params: KernelParams, device: str) -> list[Bench]:
        raise NotImplementedError

    def run(self, params: KernelParams, ctx: CellContext) -> None:  # type: ignore[override]
        import torch

        if params.device == "cuda":
            problem = cuda_problem()
            if problem:
                ctx.unavailable(problem)
                return
        torch.manual_seed(ctx.seed)
        ctx.note(device=params.device)
        run_benches(ctx, lambda: self.benches(params, params.device), params.iterations,
                    params.warmup_calls, device_sync(params.device))


_LABEL = re.compile(r"^(?P<kernel>[a-z0-9-]+):(?P<shape>.+?)(?::(?P<step>fwd|bwd))?$")


def describe(label: str) -> dict[str, Any]:
    """A phase label's fields, e.g. ``gemm:1760x16x1760:NN`` -> kernel gemm, m, n, k, transposes."""
    match = _LABEL.match(label)
    if not match:
        raise ValueError(f"{label!r} is not a kernel phase label")
    kernel, shape, step = match["kernel"], match["shape"], match["step"]
    info: dict[str, Any] = {"kernel": kernel, "shape": shape}
    if step:
        info["step"] = step
    if kernel == "gemm":
        dims, _, trans = shape.partition(":")
        m, n, k = ints(dims, 3, "gemm shape")
        info.update(m=m, n=n, k=k, a_t=trans[:1] == "T", b_t=trans[1:] == "T")
    elif kernel == "conv":
        nchw, krs, pad, stride = shape.split(":")
        n, c, h, w = ints(nchw, 4, "input")
        k, r, s = ints(krs, 3, "filter")
        ph, pw = ints(pad.removeprefix("p"), 2, "padding", minimum=0)
        sh, sw = ints(stride.removeprefix("s"), 2, "stride")
        info.update(n=n, c=c, h=h, w=w, k=k, r=r, s=s, pad_h=ph, pad_w=pw, stride_h=sh, stride_w=sw)
    elif kernel in ("vanilla", "lstm", "gru"):
        hidden, batch, steps = ints(shape, 3, "rnn shape")
        info.update(cell=kernel, hidden=hidden, batch=batch, time_steps=steps)
    elif kernel == "allreduce":
        info.update(elements=int(shape), bytes=4 * int(shape))
    return info

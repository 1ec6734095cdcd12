"""The end-to-end inference loop shared by the inference workloads, timed per request.

Each request is ``preprocess`` (read and decode the input: an image file, a WAV file, a
line of text to tokenize, CSV rows to parse), ``inference`` (the model's forward pass, or
its decoding search for a transducer) and ``postprocess`` (softmax, top-k, label mapping),
as Samani & Salehi time MLPerf's applications; a request's end-to-end time is the three
together. Requests run one after another, ``batch_size`` samples each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from isobench.workloads.base import WorkloadParams
from isobench.workloads.timing import loop_clock, timing_mode

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

INFER_PHASES = ("preprocess", "inference", "postprocess")
INFER_SETUP = ("import", "model_load", "data_load")


class InferParams(WorkloadParams):
    requests: int = Field(50, ge=1, le=100_000_000, description="timed requests (cycling over the inputs)")
    min_seconds: float = Field(0.0, ge=0, le=7 * 86400,
                               description="go on until at least this long (whichever is longer)")
    batch_size: int = Field(1, ge=1, le=65536, description="samples per request")
    top_k: int = Field(5, ge=1, le=1000, description="labels returned per request")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees one")
    sync_timing: bool = Field(False, description="CUDA-event timing (synchronises each request; "
                                                 "a no-op on the CPU); the mode is in `done`")
    data_path: str | None = Field(None, description="a real data set instead of the generated one")

    def top_k_within(self, limit: int, what: str) -> None:
        if self.top_k > limit:
            raise ValueError(f"top_k {self.top_k} exceeds {what} {limit}; fix: lower top_k or raise {what}")


def softmax_top_k(logits: Any, labels: list[str], k: int) -> list[list[tuple[str, float]]]:
    """Per sample: the k most probable labels with their probabilities."""
    import torch

    top = torch.topk(torch.softmax(logits.float(), dim=-1), min(k, logits.shape[-1]), dim=-1)
    return [[(labels[i], p) for p, i in zip(values, indices, strict=True)]
            for values, indices in zip(top.values.tolist(), top.indices.tolist(), strict=True)]


def infer_loop(ctx: CellContext, params: InferParams, device: Any, preprocess: Callable[[int], Any],
               infer: Callable[[Any], Any], postprocess: Callable[[Any], Any]) -> None:
    """``preprocess(request index) -> model input (on the device)``; ``infer(input) -> output``;
    ``postprocess(output) -> answer``."""
    import torch

    mode = timing_mode(params.sync_timing, device.type)
    index = 0

    def one_more_item() -> None:  # what a slowdown repeats (timing.loop_clock)
        postprocess(infer(preprocess(index)))

    clock = loop_clock(mode, ctx, params.min_seconds, one_more_item)
    answers = 0
    ctx.start_run(rolling=params.min_seconds > 0)
    with torch.inference_mode():
        while index < params.requests or ctx.measured_s() < params.min_seconds:
            clock.start()
            batch = preprocess(index)
            clock.lap("preprocess")
            output = infer(batch)
            clock.lap("inference")
            answer = postprocess(output)
            clock.lap("postprocess")
            phases, e2e = clock.stop()
            ctx.item(phases, e2e)
            answers += len(answer)
            index += 1
    ctx.note(timing=mode, sync_timing=params.sync_timing, device=str(device), answers=answers)

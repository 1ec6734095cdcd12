"""kernel-conv: 2-D convolution, NCHW, over DeepBench's shapes.

A shape is ``NxCxHxW:KxRxS:PHxPW:SHxSW``: input batch, channels, height, width; K filters
of RxS; padding and stride (height x width). FLOP per forward call 2·N·K·C·R·S·P·Q (P, Q:
output height, width); ``mode: train`` adds the backward pass (data and filter gradients,
twice the forward FLOP) as phase ``<label>:bwd``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.kernels.common import (
    AUTO_FLOP,
    Bench,
    KernelParams,
    KernelWorkload,
    Step,
    auto_calls,
    ints,
)

# A representative subset of DeepBench's convolution sets as (N, C, H, W, K, R, S, pad_h,
# pad_w, stride_h, stride_w): speech front ends (wide filters, stride 2), a VGG and a ResNet
# stem, 3x3 and 1x1 layers deep in image networks, an Inception 5x5, and batch-1 inference.
DEEPBENCH = (
    (4, 1, 161, 700, 32, 5, 20, 0, 0, 2, 2), (4, 32, 79, 341, 32, 5, 10, 0, 0, 2, 2),
    (16, 1, 48, 480, 16, 3, 3, 1, 1, 1, 1), (8, 3, 108, 108, 64, 3, 3, 1, 1, 2, 2),
    (8, 64, 54, 54, 64, 3, 3, 1, 1, 1, 1), (8, 3, 224, 224, 64, 3, 3, 1, 1, 1, 1),
    (8, 128, 56, 56, 256, 3, 3, 1, 1, 1, 1), (16, 3, 224, 224, 64, 7, 7, 3, 3, 2, 2),
    (16, 192, 28, 28, 32, 5, 5, 2, 2, 1, 1), (8, 64, 56, 56, 256, 1, 1, 0, 0, 2, 2),
    (8, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1), (8, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1),
    (16, 832, 7, 7, 256, 1, 1, 0, 0, 1, 1), (1, 3, 224, 224, 64, 7, 7, 3, 3, 2, 2),
    (1, 1024, 14, 14, 256, 1, 1, 0, 0, 1, 1), (1, 2048, 7, 7, 512, 1, 1, 0, 0, 1, 1),
)
#: ``small``: batch at most 2, height and width / 4, channels / 4 (1-3 input channels kept)
SMALL_BATCH, SMALL_SPATIAL, SMALL_CHANNELS = 2, 4, 4


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad_h - self.r) // self.stride_h + 1,
                (self.w + 2 * self.pad_w - self.s) // self.stride_w + 1)

    @property
    def label(self) -> str:
        return (f"conv:{self.n}x{self.c}x{self.h}x{self.w}:{self.k}x{self.r}x{self.s}"
                f":p{self.pad_h}x{self.pad_w}:s{self.stride_h}x{self.stride_w}")

    @property
    def flop(self) -> float:
        p, q = self.out_hw
        return 2.0 * self.n * self.k * self.c * self.r * self.s * p * q


def parse_conv(text: str) -> ConvShape:
    parts = text.strip().split(":")
    if len(parts) not in (2, 4):
        raise ValueError(f"conv shape {text!r} needs NxCxHxW:KxRxS[:PHxPW:SHxSW]")
    n, c, h, w = ints(parts[0], 4, "input")
    k, r, s = ints(parts[1], 3, "filter")
    pad, stride = (0, 0), (1, 1)
    if len(parts) == 4:
        pad = tuple(ints(parts[2].removeprefix("p"), 2, "padding", minimum=0))  # type: ignore[assignment]
        stride = tuple(ints(parts[3].removeprefix("s"), 2, "stride"))  # type: ignore[assignment]
    shape = ConvShape(n, c, h, w, k, r, s, pad[0], pad[1], stride[0], stride[1])
    if min(shape.out_hw) < 1:
        raise ValueError(f"conv shape {text!r}: the filter is larger than the padded input")
    return shape


def _small(shape: ConvShape) -> ConvShape:
    return ConvShape(
        min(shape.n, SMALL_BATCH), shape.c if shape.c <= 3 else max(1, shape.c // SMALL_CHANNELS),
        max(shape.r, shape.h // SMALL_SPATIAL), max(shape.s, shape.w // SMALL_SPATIAL),
        max(1, shape.k // SMALL_CHANNELS), shape.r, shape.s, shape.pad_h, shape.pad_w,
        shape.stride_h, shape.stride_w)


class ConvParams(KernelParams):
    shape_syntax: ClassVar[str] = "'8x64x56x56:128x3x3:1x1:1x1' (NxCxHxW:KxRxS:PHxPW:SHxSW)"
    mode: Literal["forward", "train"] = Field("forward", description="train: also the backward pass")

    def shape_specs(self) -> list[ConvShape]:
        if self.shapes == "list":
            return [parse_conv(text) for text in self.shape_list]
        shapes = [ConvShape(*row) for row in DEEPBENCH]
        if self.shapes == "small":
            shapes = [_small(s) for s in shapes]
        return list(dict.fromkeys(shapes))


@WORKLOADS.register("kernel-conv")
class KernelConv(KernelWorkload):
    description = "DeepBench-style 2-D convolution (NCHW); time per call and FLOP/s per shape"
    phases = ("conv:<N>x<C>x<H>x<W>:<K>x<R>x<S>:p<PH>x<PW>:s<SH>x<SW> (one per shape; "
              "mode train: <label>:fwd and <label>:bwd)",)
    setup_phases = ("allocate", "warmup")
    Params = ConvParams

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        assert isinstance(params, ConvParams)
        suffixes = (":fwd", ":bwd") if params.mode == "train" else ("",)
        return [s.label + suffix for s in params.shape_specs() for suffix in suffixes]

    @classmethod
    def shape_work(cls, params: KernelParams) -> list[float]:
        assert isinstance(params, ConvParams)
        return [s.flop * (3 if params.mode == "train" else 1) for s in params.shape_specs()]

    def benches(self, params: KernelParams, device: str) -> list[Bench]:
        import torch
        import torch.nn.functional as F

        assert isinstance(params, ConvParams)
        train = params.mode == "train"
        benches = []
        for shape in params.shape_specs():
            x = torch.randn(shape.n, shape.c, shape.h, shape.w, device=device, requires_grad=train)
            weight = torch.randn(shape.k, shape.c, shape.r, shape.s, device=device, requires_grad=train)
            stride, padding = (shape.stride_h, shape.stride_w), (shape.pad_h, shape.pad_w)

            def forward(_: object, x: torch.Tensor = x, weight: torch.Tensor = weight,
                        stride: tuple[int, int] = stride, padding: tuple[int, int] = padding) -> torch.Tensor:
                return F.conv2d(x, weight, stride=stride, padding=padding)

            calls = auto_calls(params.calls, shape.flop * (3 if train else 1), AUTO_FLOP)
            if not train:
                benches.append(Bench(shape.label, [Step("", forward, {"flop_per_s": (shape.flop, "FLOP/s")})],
                                     calls))
                continue
            grad = torch.randn(shape.n, shape.k, *shape.out_hw, device=device)

            def backward(y: torch.Tensor, grad: torch.Tensor = grad) -> None:
                y.backward(grad)

            benches.append(Bench(shape.label, [Step(":fwd", forward, {"flop_per_s": (shape.flop, "FLOP/s")}),
                                               Step(":bwd", backward, {"flop_per_s": (2 * shape.flop, "FLOP/s")})],
                                 calls))
        return benches

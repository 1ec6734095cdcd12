"""kernel-gemm: dense matrix multiply C = op(A) op(B), over DeepBench's shapes.

M, N, K and the transposes follow DeepBench: ``MxNxK:NN`` multiplies an MxK matrix by a
KxN one; ``T`` marks an operand stored transposed (A as KxM, B as NxK). FLOP per call
2·M·N·K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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

# A representative subset of DeepBench's GEMM sets (M, N, K, transposes): training shapes
# (speech/LM layers at batch 16-7000, both layouts), then server inference (small N).
DEEPBENCH = (
    (1760, 16, 1760, "NN"), (1760, 128, 1760, "NN"), (2048, 7000, 2048, "NN"), (2560, 64, 2560, "NN"),
    (4096, 128, 4096, "NN"), (1760, 16, 1760, "TN"), (2560, 128, 2560, "TN"), (1760, 7133, 1760, "NT"),
    (7680, 64, 2560, "TN"), (3072, 128, 1024, "TN"), (35, 8457, 2560, "NN"), (5124, 9124, 1760, "NN"),
    (5124, 700, 2048, "NN"), (35, 700, 2048, "NN"), (7680, 1, 2560, "NN"), (3072, 4, 1024, "NN"),
    (512, 1500, 2816, "NN"), (1024, 1, 512, "NN"),
)
#: ``small`` divides every dimension above this by SMALL_DIVISOR (batch-like sizes stay)
SMALL_KEEP = 128
SMALL_DIVISOR = 8


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    trans: str = "NN"

    @property
    def label(self) -> str:
        return f"gemm:{self.m}x{self.n}x{self.k}:{self.trans}"

    @property
    def flop(self) -> float:
        return 2.0 * self.m * self.n * self.k


def parse_gemm(text: str) -> GemmShape:
    dims, _, trans = text.strip().partition(":")
    trans = (trans or "NN").upper()
    if trans not in ("NN", "NT", "TN", "TT"):
        raise ValueError(f"transposes {trans!r} must be NN, NT, TN or TT")
    m, n, k = ints(dims, 3, "gemm shape")
    return GemmShape(m, n, k, trans)


def _small(size: int) -> int:
    return size if size <= SMALL_KEEP else max(SMALL_KEEP, size // SMALL_DIVISOR)


class GemmParams(KernelParams):
    shape_syntax: ClassVar[str] = "'1760x16x1760:NN' (MxNxK, then NN, NT, TN or TT)"

    def shape_specs(self) -> list[GemmShape]:
        if self.shapes == "list":
            return [parse_gemm(text) for text in self.shape_list]
        shapes = [GemmShape(*row) for row in DEEPBENCH]
        if self.shapes == "small":
            shapes = [GemmShape(_small(s.m), _small(s.n), _small(s.k), s.trans) for s in shapes]
        return list(dict.fromkeys(shapes))  # scaling can merge two shapes: keep one of each


@WORKLOADS.register("kernel-gemm")
class KernelGemm(KernelWorkload):
    description = "DeepBench-style GEMM (M,N,K, transposes); time per call and FLOP/s per shape"
    phases = ("gemm:<M>x<N>x<K>:<NN|NT|TN|TT> (one per shape)",)
    setup_phases = ("allocate", "warmup")
    Params = GemmParams

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        return [s.label for s in params.shape_specs()]

    @classmethod
    def shape_work(cls, params: KernelParams) -> list[float]:
        return [s.flop for s in params.shape_specs()]

    def benches(self, params: KernelParams, device: str) -> list[Bench]:
        import torch

        benches = []
        for shape in params.shape_specs():
            a = torch.randn(shape.k, shape.m, device=device).t() if shape.trans[0] == "T" \
                else torch.randn(shape.m, shape.k, device=device)
            b = torch.randn(shape.n, shape.k, device=device).t() if shape.trans[1] == "T" \
                else torch.randn(shape.k, shape.n, device=device)
            out = torch.empty(shape.m, shape.n, device=device)

            def call(_: object, a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out) -> None:
                torch.mm(a, b, out=out)

            benches.append(Bench(shape.label, [Step("", call, {"flop_per_s": (shape.flop, "FLOP/s")})],
                                 auto_calls(params.calls, shape.flop, AUTO_FLOP)))
        return benches

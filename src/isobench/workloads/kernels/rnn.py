"""kernel-rnn: recurrent layers (vanilla tanh RNN, LSTM, GRU) over DeepBench's shapes.

A shape is ``cell:HxBxT``: hidden units (input size equals hidden size, as in DeepBench),
batch, time steps. FLOP per forward call counts the two matrix products per gate and step:
vanilla 4·H²·B·T, GRU 12·H²·B·T, LSTM 16·H²·B·T (element-wise work left out). ``mode:
train`` adds the backward pass (twice the forward FLOP) as ``<label>:bwd``. Many small
time steps mean many small kernels: the GRU launch-overhead finding of the paper.
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

GATES = {"vanilla": 1, "gru": 3, "lstm": 4}
# A representative subset of DeepBench's RNN sets as (cell, hidden, batch, time steps):
# training (speech and language models) and server inference at batch 1-4.
DEEPBENCH = (
    ("vanilla", 1760, 16, 50), ("vanilla", 2560, 64, 50), ("lstm", 512, 16, 25), ("lstm", 1024, 64, 25),
    ("lstm", 2048, 32, 25), ("lstm", 256, 16, 150), ("lstm", 1536, 8, 50), ("gru", 512, 32, 1),
    ("gru", 1536, 32, 187), ("gru", 2816, 32, 187), ("lstm", 512, 1, 25), ("gru", 2048, 1, 187),
    ("gru", 512, 4, 1),
)
#: ``small``: hidden / 8, time steps / 5 (at least 1); batch kept
SMALL_HIDDEN, SMALL_STEPS = 8, 5


@dataclass(frozen=True)
class RnnShape:
    cell: str
    hidden: int
    batch: int
    steps: int

    @property
    def label(self) -> str:
        return f"{self.cell}:{self.hidden}x{self.batch}x{self.steps}"

    @property
    def flop(self) -> float:
        return 4.0 * GATES[self.cell] * self.hidden ** 2 * self.batch * self.steps


def parse_rnn(text: str) -> RnnShape:
    cell, _, dims = text.strip().lower().partition(":")
    if cell not in GATES:
        raise ValueError(f"rnn cell {cell!r} must be vanilla, lstm or gru")
    hidden, batch, steps = ints(dims, 3, "rnn shape")
    return RnnShape(cell, hidden, batch, steps)


class RnnParams(KernelParams):
    shape_syntax: ClassVar[str] = "'lstm:512x16x25' (vanilla|lstm|gru:HIDDENxBATCHxSTEPS)"
    mode: Literal["forward", "train"] = Field("forward", description="train: also the backward pass")

    def shape_specs(self) -> list[RnnShape]:
        if self.shapes == "list":
            return [parse_rnn(text) for text in self.shape_list]
        shapes = [RnnShape(*row) for row in DEEPBENCH]
        if self.shapes == "small":
            shapes = [RnnShape(s.cell, max(8, s.hidden // SMALL_HIDDEN), s.batch, max(1, s.steps // SMALL_STEPS))
                      for s in shapes]
        return list(dict.fromkeys(shapes))


@WORKLOADS.register("kernel-rnn")
class KernelRnn(KernelWorkload):
    description = "DeepBench-style RNN layers (vanilla, LSTM, GRU); time per call and FLOP/s per shape"
    phases = ("<vanilla|lstm|gru>:<H>x<B>x<T> (one per shape; mode train: <label>:fwd and <label>:bwd)",)
    setup_phases = ("allocate", "warmup")
    Params = RnnParams

    @classmethod
    def labels(cls, params: KernelParams) -> list[str]:
        assert isinstance(params, RnnParams)
        suffixes = (":fwd", ":bwd") if params.mode == "train" else ("",)
        return [s.label + suffix for s in params.shape_specs() for suffix in suffixes]

    @classmethod
    def shape_work(cls, params: KernelParams) -> list[float]:
        assert isinstance(params, RnnParams)
        return [s.flop * (3 if params.mode == "train" else 1) for s in params.shape_specs()]

    def benches(self, params: KernelParams, device: str) -> list[Bench]:
        import torch

        assert isinstance(params, RnnParams)
        train = params.mode == "train"
        layers = {"vanilla": lambda h: torch.nn.RNN(h, h, nonlinearity="tanh"),
                  "lstm": lambda h: torch.nn.LSTM(h, h), "gru": lambda h: torch.nn.GRU(h, h)}
        benches = []
        for shape in params.shape_specs():
            layer = layers[shape.cell](shape.hidden).to(device)
            layer.requires_grad_(train)
            x = torch.randn(shape.steps, shape.batch, shape.hidden, device=device, requires_grad=train)

            def forward(_: object, layer: torch.nn.Module = layer, x: torch.Tensor = x) -> torch.Tensor:
                return layer(x)[0]

            calls = auto_calls(params.calls, shape.flop * (3 if train else 1), AUTO_FLOP)
            if not train:
                benches.append(Bench(shape.label, [Step("", forward, {"flop_per_s": (shape.flop, "FLOP/s")})],
                                     calls))
                continue
            grad = torch.randn(shape.steps, shape.batch, shape.hidden, device=device)

            def backward(y: torch.Tensor, grad: torch.Tensor = grad) -> None:
                y.backward(grad)

            benches.append(Bench(shape.label, [Step(":fwd", forward, {"flop_per_s": (shape.flop, "FLOP/s")}),
                                               Step(":bwd", backward, {"flop_per_s": (2 * shape.flop, "FLOP/s")})],
                                 calls))
        return benches

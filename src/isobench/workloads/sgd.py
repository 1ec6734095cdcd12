"""Momentum SGD in plain tensor operations, so that a training cell never imports torch._dynamo.

Every method of a ``torch.optim`` optimizer is wrapped by ``torch._disable_dynamo``, whose first
call imports ``torch._dynamo``: about 3 s of CPU in every fresh worker on a 2-core VM, and more
under gVisor, spent before the first minibatch and repeated in every cell of a study.

The update is ``torch.optim.SGD``'s with dampening 0, no Nesterov and no weight decay: the
momentum buffer starts as a copy of the first gradient, then ``buf = momentum * buf + grad`` and
``param -= lr * buf``. tests/test_sgd.py checks both give the same parameters, step for step.
On CUDA the update runs as multi-tensor (foreach) kernels, as ``torch.optim`` would choose there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class MomentumSgd:
    """The optimizer interface training loops use: ``step``, ``zero_grad``, ``state_dict``."""

    def __init__(self, parameters: Iterable[torch.Tensor], lr: float, momentum: float) -> None:
        self.params = [p for p in parameters if p.requires_grad]
        self.lr = lr
        self.momentum = momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        live = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        if live[0][1].is_cuda:
            self._step_foreach(live)
            return
        for i, param in live:
            param.add_(self._direction(i, param.grad), alpha=-self.lr)

    def _direction(self, i: int, grad: torch.Tensor) -> torch.Tensor:
        if not self.momentum:
            return grad
        buffer = self.buffers[i]
        if buffer is None:
            buffer = self.buffers[i] = grad.detach().clone()
        else:
            buffer.mul_(self.momentum).add_(grad)
        return buffer

    def _step_foreach(self, live: list[tuple[int, torch.Tensor]]) -> None:
        params = [p for _, p in live]
        grads = [p.grad for p in params]
        if not self.momentum:
            torch._foreach_add_(params, grads, alpha=-self.lr)
            return
        fresh = {i for i, _ in live if self.buffers[i] is None}
        older = [i for i, _ in live if i not in fresh]
        for i in fresh:
            self.buffers[i] = self.params[i].grad.detach().clone()
        if older:
            buffers = [self.buffers[i] for i in older]
            torch._foreach_mul_(buffers, self.momentum)
            torch._foreach_add_(buffers, [self.params[i].grad for i in older])
        torch._foreach_add_(params, [self.buffers[i] for i, _ in live], alpha=-self.lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """Shaped like torch.optim's, so a checkpoint writes what a torch.optim one would."""
        state = {i: {"momentum_buffer": b} for i, b in enumerate(self.buffers) if b is not None}
        group = {"lr": self.lr, "momentum": self.momentum, "dampening": 0, "weight_decay": 0,
                 "nesterov": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

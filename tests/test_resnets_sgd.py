"""The ResNets and the SGD written without torchvision and torch.optim compute what those do,
and a training or ResNet cell then never imports torch._dynamo (the ~3 s they would cost)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torchvision

from isobench.workloads.resnets import build_resnet
from isobench.workloads.sgd import MomentumSgd


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_a_torchvision_resnet_state_dict_loads_and_gives_the_same_output(name: str) -> None:
    reference = getattr(torchvision.models, name)(weights=None, num_classes=7).eval()
    ours = build_resnet(name, 7).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)  # same names and shapes
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(ours(images), reference(images), atol=1e-5)


def test_resnet_initialisation_matches_torchvisions_scale() -> None:
    torch.manual_seed(0)
    ours = build_resnet("resnet18", 10)
    torch.manual_seed(0)
    reference = torchvision.models.resnet18(weights=None, num_classes=10)
    # Same init scheme and creation order: the same seed gives the same first convolution.
    assert torch.equal(ours.conv1.weight, reference.conv1.weight)
    assert torch.equal(ours.layer4[1].conv2.weight, reference.layer4[1].conv2.weight)


def _lenet_steps(make_optimizer, steps: int = 4) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    from isobench.workloads.nets import build_lenet5

    torch.manual_seed(3)
    model = build_lenet5(10)
    optimizer = make_optimizer(model.parameters())
    batches = torch.Generator().manual_seed(4)
    for _ in range(steps):
        x = torch.randn(8, 1, 28, 28, generator=batches)
        y = torch.randint(0, 10, (8,), generator=batches)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("momentum", [0.9, 0.0])
def test_momentum_sgd_takes_torch_optim_sgds_steps(momentum: float) -> None:
    ours = _lenet_steps(lambda ps: MomentumSgd(ps, lr=0.05, momentum=momentum))
    reference = _lenet_steps(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=momentum))
    initial = _lenet_steps(lambda ps: MomentumSgd(ps, lr=0.05, momentum=momentum), steps=0)
    assert all(torch.equal(a, b) for a, b in zip(ours, reference, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(ours, initial, strict=True))  # it did move


def test_the_multi_tensor_path_takes_the_same_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA takes the foreach path; the same kernels run on CPU tensors, so it is checked here.
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    ours = _lenet_steps(lambda ps: MomentumSgd(ps, lr=0.05, momentum=0.9))
    monkeypatch.undo()
    reference = _lenet_steps(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, reference, strict=True))


def test_state_dict_holds_a_momentum_buffer_per_parameter() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = MomentumSgd(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(3)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    assert sorted(state["state"]) == [0, 1]
    assert state["param_groups"][0]["params"] == [0, 1]


CELL = """
import sys
from isobench.workloads.{module} import {factory} as build
{body}
print("torch._dynamo" in sys.modules, "torchvision" in sys.modules)
"""


@pytest.mark.parametrize("module,factory,body", [
    ("imaging", "build_model", "model = build('resnet18', 10, 0); import torch; model(torch.ones(1, 3, 64, 64))"),
    ("training", "make_optimizer", "import torch\nfrom isobench.workloads.lenet_train import LenetTrainParams\n"
                                   "m = torch.nn.Linear(2, 2); o = build(LenetTrainParams(), m.parameters())\n"
                                   "m(torch.ones(2)).sum().backward(); o.step(); o.zero_grad()"),
])
def test_resnet_and_sgd_cells_never_import_dynamo_or_torchvision(module: str, factory: str, body: str) -> None:
    code = CELL.format(module=module, factory=factory, body=body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_demo_workloads_import_phase_is_torch_alone() -> None:
    from isobench.workloads import WORKLOADS

    lenet, resnet = WORKLOADS.get("lenet-train"), WORKLOADS.get("resnet-infer")
    assert lenet.import_modules(lenet.Params()) == ("torch",)
    assert lenet.import_modules(lenet.Params(optimizer="adam")) == ("torch", "torch._dynamo")
    assert "torchvision" not in resnet.import_modules(resnet.Params())
    image_train = WORKLOADS.get("image-train")
    assert "torchvision" in image_train.import_modules(image_train.Params())  # ImageFolder needs it

"""ResNet-18 and ResNet-50 in torchvision's layout, built without importing torchvision.

torchvision's package import pulls in torch._dynamo (through torchvision.ops): about 3 s of CPU
in every fresh worker on a 2-core VM, and more under gVisor, before the first request. Inference
on a ResNet needs only the network, so it is written here with the same module names, shapes,
strides (the stride on the 3×3 convolution, "ResNet v1.5") and initialisation. A torchvision
state dict loads into it unchanged, and tests/test_resnets.py checks that both give the same
output for the same weights.
"""

from __future__ import annotations

from torch import Tensor, nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + shortcut)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + shortcut)


class ResNet(nn.Module):
    def __init__(self, block: type[BasicBlock | Bottleneck], depths: tuple[int, int, int, int],
                 num_classes: int) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(block, 64, depths[0], 1)
        self.layer2 = self._stage(block, 128, depths[1], 2)
        self.layer3 = self._stage(block, 256, depths[2], 2)
        self.layer4 = self._stage(block, 512, depths[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def _stage(self, block: type[BasicBlock | Bottleneck], planes: int, depth: int, stride: int) -> nn.Sequential:
        width = planes * block.expansion
        downsample = None
        if stride != 1 or self.inplanes != width:  # the shortcut changes shape: project it
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, width, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(width))
        blocks = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = width
        blocks += [block(width, planes, 1, None) for _ in range(depth - 1)]
        return nn.Sequential(*blocks)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


SHAPES = {"resnet18": (BasicBlock, (2, 2, 2, 2)), "resnet50": (Bottleneck, (3, 4, 6, 3))}


def build_resnet(name: str, num_classes: int) -> ResNet:
    block, depths = SHAPES[name]
    return ResNet(block, depths, num_classes)

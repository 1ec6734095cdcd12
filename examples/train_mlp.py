"""A small training script marked for isobench: a 300-step MLP training loop whose forward,
backward and optimizer phases become the cell's phases. Outside isobench it runs as is.

    isobench run --script examples/train_mlp.py                 # bare metal vs Docker, with an A/A
    isobench run --script examples/train_mlp.py -- --steps 600  # the script's own arguments

isobench takes each ``step()`` as one item; the first 10 are untimed warm-up (``--warmup-steps``).
The script decides how long a cell runs: 300 steps take about 2 s on one core here, which is
what a cell needs for a precise pair (docs/workloads.md, "How a script is sized").
"""

import argparse

import torch
from torch import nn

import isobench

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
inputs = torch.randn(args.batch_size * 16, 256)
labels = torch.randint(0, 10, (args.batch_size * 16,))

for step in range(args.steps):
    start = (step % 16) * args.batch_size
    x, y = inputs[start:start + args.batch_size], labels[start:start + args.batch_size]
    with isobench.phase("forward"):
        loss = loss_fn(model(x), y)
    with isobench.phase("backward"):
        optimizer.zero_grad()
        loss.backward()
    with isobench.phase("optimizer"):
        optimizer.step()
    isobench.step()
isobench.metric("final_loss", loss.item())

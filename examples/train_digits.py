"""A training script as it runs on a cluster node: no notebook, the watch saved to a file.

    python examples/train_digits.py relu.hookviz --activation relu
    python examples/train_digits.py sigmoid.hookviz --activation sigmoid
    hookviz report sigmoid.hookviz
    hookviz compare relu.hookviz sigmoid.hookviz

scikit-learn's digits (8x8 images of 10 digits), an 8-layer MLP under SGD; the same seed and batches
for either activation, so two runs differ only by it. With sigmoid the gradient vanishes toward
the input.
"""

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import hookviz
from hookviz.examples import sigmoid_mlp

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("path", help="the .hookviz file to write")
parser.add_argument("--activation", choices=["relu", "sigmoid"], default="relu")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--lr", type=float, default=0.1)
options = parser.parse_args()

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32)
x, y = (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(digits.target)
torch.manual_seed(0)
activation = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid}[options.activation]
model = sigmoid_mlp(depth=8, width=32, inputs=64, classes=10, activation=activation)
optimizer = torch.optim.SGD(model.parameters(), lr=options.lr)
batches = torch.Generator().manual_seed(0)

with hookviz.watch(model, optimizer=optimizer) as w:
    for _ in range(options.steps):
        index = torch.randint(0, len(x), (64,), generator=batches)
        loss = F.cross_entropy(model(x[index]), y[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print(f"loss {loss.item():.3f}; watch saved to {hookviz.save(w, options.path)}")

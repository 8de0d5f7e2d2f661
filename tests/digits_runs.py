"""Real training runs for the command line's and compare's tests: scikit-learn's digits, an MLP
from :func:`hookviz.examples.sigmoid_mlp` under SGD, watched with ``optimizer=`` and saved; beside
the watch, plain PyTorch's own per-layer gradient norms of every step, read from ``.grad`` in the
same loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz.examples import sigmoid_mlp


@dataclass
class Trained:
    """A saved watch and what plain PyTorch saw in the same loop."""

    path: Path
    watch: hookviz.Watch
    # per step: {layer: 2-norm of its parameters' .grad together} (NaN/Inf as the gradient held)
    norms: list[dict[str, float]] = field(default_factory=list)
    first_nonfinite: int | None = None  # the first step some .grad held NaN/Inf
    first_big: int | None = None  # the first step some finite .grad's norm passed 1e3


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    data = pytest.importorskip("sklearn.datasets").load_digits()
    x = torch.tensor(data.data, dtype=torch.float32)
    return (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(data.target)


def train(
    path: Path,
    activation: type[nn.Module] = nn.ReLU,
    depth: int = 6,
    lr: float = 0.1,
    momentum: float = 0.0,
    steps: int = 30,
) -> Trained:
    """Train ``sigmoid_mlp(depth, 32 wide, activation)`` on digits (seed 0: the same weights for the
    same depth, whatever the activation) for ``steps`` SGD steps of 64 samples under
    ``hookviz.watch(model, optimizer=...)``; the watch saved at ``path``."""
    x, y = digits()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=depth, width=32, inputs=64, classes=10, activation=activation)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    generator = torch.Generator().manual_seed(0)
    layers: dict[str, list[nn.Parameter]] = {}
    for name, parameter in model.named_parameters():
        layers.setdefault(name.rpartition(".")[0], []).append(parameter)
    trained = Trained(path, None)  # type: ignore[arg-type]
    with hookviz.watch(model, optimizer=optimizer) as w:
        for step in range(steps):
            index = torch.randint(0, len(x), (64,), generator=generator)
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            if trained.first_nonfinite is None and not all(torch.isfinite(g).all() for g in grads):
                trained.first_nonfinite = step
            if trained.first_big is None and any(
                torch.isfinite(g).all() and torch.linalg.vector_norm(g).item() > 1e3 for g in grads
            ):
                trained.first_big = step
            trained.norms.append(
                {
                    layer: math.hypot(*(torch.linalg.vector_norm(p.grad).item() for p in parameters))
                    for layer, parameters in layers.items()
                }
            )
            optimizer.step()
    trained.watch = w
    hookviz.save(w, path)
    return trained

"""The benchmark models, one definition each: what every row of ``python -m benchmarks`` runs on.

Each case is built from seed 0 on the device asked for. A *plain step* of a case is what a user's
training step costs without hookviz: ``zero_grad(set_to_none=True)``, forward, loss, ``backward()``;
a *plain optimizer step* adds ``opt.step()`` of the case's optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hookviz.examples import sigmoid_mlp


@dataclass
class Case:
    """One model with its inputs and loss.

    Attributes:
        key: short name on the command line (``--only mlp``).
        title: what the results table calls it.
        model: the ``nn.Module``, on ``device``.
        args: its positional forward arguments, on ``device``.
        loss_fn: ``loss_fn(model(*args))`` is a 0-dim float tensor.
        repeats: how many interleaved pairs a row takes by default (fewer for a slow model).
        optimizer: ``optimizer(model)`` makes the optimizer a training step with ``opt.step()``
            uses (the rows with ``optimizer=``); ``optimizer_name`` says which, in the row's label.
    """

    key: str
    title: str
    model: torch.nn.Module
    args: tuple
    loss_fn: Callable[[object], torch.Tensor]
    repeats: int
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]
    optimizer_name: str

    def plain_step(self) -> None:
        """One plain training step (no optimizer): ``zero_grad``, forward, loss, ``backward``."""
        self.model.zero_grad(set_to_none=True)
        self.loss_fn(self.model(*self.args)).backward()


def mlp(device: str = "cpu") -> Case:
    """The MLP: 20 Linear layers of width 256 with sigmoids, 64 inputs, 10 classes, batch 64,
    cross-entropy (41 parameters)."""
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10).to(device)
    data = torch.randn(64, 64, device=device)
    labels = torch.randint(0, 10, (64,), device=device)
    return Case(
        "mlp",
        "20-layer sigmoid MLP, width 256, batch 64",
        model,
        (data,),
        lambda out: F.cross_entropy(out, labels),
        repeats=15,
        # SGD with momentum: the cheapest usual step, so the watch's share is the largest
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9),
        optimizer_name="SGD(momentum=0.9)",
    )


def gpt2(device: str = "cpu") -> Case:
    """Hugging Face ``GPT2LMHeadModel`` from its config (6 layers, width 384, 6 heads, eager attention,
    GPT-2's vocabulary and dropout), train mode, 4 x 128 random tokens, next-token cross-entropy."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=6, n_embd=384, n_head=6, attn_implementation="eager")
    model = GPT2LMHeadModel(config).to(device)
    tokens = torch.randint(0, config.vocab_size, (4, 128), device=device)

    def next_token(out) -> torch.Tensor:
        logits = out.logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

    return Case(
        "gpt",
        "Hugging Face GPT-2 6x384, 4x128 tokens",
        model,
        (tokens,),
        next_token,
        repeats=9,
        optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=1e-4),  # a transformer's usual
        optimizer_name="AdamW",
    )


CASES = {"mlp": mlp, "gpt": gpt2}

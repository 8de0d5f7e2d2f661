"""Small real models used by the tests, benchmarks and notebooks."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Canonical(nn.Module):
    """The teaching example: ``forward(x, y, z) = 2*x + 3*y - 5*z``.

    With x=[2,3], y=[6,4], z=[1,5] and MSE against [9,-1]: loss 50, leaf grads x [16,-12],
    y [24,-18], z [-40,30]; a legacy module backward hook sees the last op's two gradients.
    """

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return 2 * x + 3 * y - 5 * z


def canonical_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x, y, z`` (requiring grad) and the MSE target of the canonical example."""
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    return x, y, z, torch.tensor([9.0, -1.0])


def sigmoid_mlp(
    depth: int = 20,
    width: int = 256,
    inputs: int = 64,
    classes: int = 10,
    activation: type[nn.Module] = nn.Sigmoid,
) -> nn.Sequential:
    """A deep MLP of ``depth`` Linear layers (``width`` wide) with ``activation`` between them."""
    layers: list[nn.Module] = [nn.Linear(inputs, width), activation()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), activation()]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


class ResidualBlock(nn.Module):
    """``x + relu(LayerNorm(Linear(x)))``: nine autograd Nodes per block, for large graphs."""

    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.norm(self.fc(x)))


class ResidualStack(nn.Module):
    """``depth`` residual blocks and a linear head; the output is already a scalar (a sum)."""

    def __init__(self, depth: int, width: int = 8):
        super().__init__()
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).sum()


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (GPT-2 style), on ``F.scaled_dot_product_attention``."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each with a residual connection."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class TinyGPT(nn.Module):
    """A GPT-2-like decoder: token + position embeddings, ``layers`` blocks, tied output head."""

    def __init__(
        self,
        vocab: int = 1000,
        context: int = 128,
        layers: int = 6,
        width: int = 384,
        heads: int = 6,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers)
        for name, parameter in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(parameter)
            elif parameter.dim() > 1:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(parameter, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting ``tokens[:, 1:]`` from ``logits[:, :-1]``."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

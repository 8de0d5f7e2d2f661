"""The models and command line that ``overhead.py`` and ``watch.py`` share."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from hookviz.examples import TinyGPT, next_token_loss, sigmoid_mlp


def options(description: str, repeats: int, *extra: tuple[str, dict]) -> argparse.Namespace:
    """``--repeats`` (default ``repeats``), ``--device``, ``--only mlp|gpt`` and ``extra``
    (``(flag, add_argument keywords)``) parsed; prints the torch version, device and threads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=["mlp", "gpt"])
    for flag, keywords in extra:
        parser.add_argument(flag, **keywords)
    parsed = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, device {parsed.device}, threads {torch.get_num_threads()}", end=", ")
    return parsed


def mlp():
    """(name, model, args, loss_fn) of issue 11's MLP: 20 sigmoid layers of width 256, batch 128."""
    model = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10)
    data, labels = torch.randn(128, 64), torch.randint(0, 10, (128,))
    loss_fn = lambda out: F.cross_entropy(out, labels.to(out.device))  # noqa: E731
    return "20-layer sigmoid MLP, width 256, batch 128", model, (data,), loss_fn


def tiny_gpt(layers: int = 12):
    """A GPT-2-small-like TinyGPT (``layers`` x 768, 12 heads, GPT-2's vocabulary), no dropout."""
    return TinyGPT(vocab=50257, context=1024, layers=layers, width=768, heads=12, dropout=0.0)


def tokens_and_loss(batch: int, length: int):
    """Random token ids ``[batch, length]`` and the next-token loss on them."""
    tokens = torch.randint(0, 50257, (batch, length))
    return tokens, lambda out: next_token_loss(out, tokens.to(out.device))

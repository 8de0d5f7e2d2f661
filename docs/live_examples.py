"""The saved pages the guides embed, so a reader can click an example without a kernel.

Each page is a real run shown in the widget and written with ``Widget.save_html``: the canonical
example after an edit (``canonical_edit``), a Hugging Face GPT-2 of 6 layers built from its config
(``gpt2``) and a 10-layer sigmoid MLP's training watch drawn on its graph (``watch``). The docs
build runs this file (``docs/hooks/examples.py``, in a fresh process) and copies the pages to
``examples/<name>.html`` in the site; ``docs/pictures.py`` screenshots the same pages for the
README and the site. The models are small so the whole file runs in seconds.

Usage: ``python docs/live_examples.py OUT_DIR [NAME ...]`` writes ``OUT_DIR/<name>.html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import hookviz
from hookviz.examples import Canonical, canonical_inputs, sigmoid_mlp


def canonical_edit():
    """``2*x + 3*y - 5*z`` with MSE, after ``grad + 888888`` / ``grad - 777777`` on ``SubBackward0``'s
    two ``grad_inputs`` and a re-run; the edited node is selected, so the inspector shows it."""
    x, y, z, target = canonical_inputs()
    widget = hookviz.show(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
    for slot, expression in (("grad_inputs[0]", "grad + 888888"), ("grad_inputs[1]", "grad - 777777")):
        if widget.apply_edit("SubBackward0_0", slot, expression) is None:
            raise RuntimeError(f"the canonical edit was refused: {widget.errors}")
    if not widget.rerun():
        raise RuntimeError(f"the canonical re-run failed: {widget.errors}")
    widget.select("SubBackward0_0")
    return widget


def gpt2():
    """A Hugging Face GPT-2 language model, 6 layers x 128 wide (built from its config, random
    weights: nothing is downloaded), on 2 x 32 random tokens, the loss its forward computes."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=6, n_embd=128, n_head=4, vocab_size=1000)
    ids = torch.randint(0, 1000, (2, 32))
    return hookviz.show(
        GPT2LMHeadModel(config), (), kwargs={"input_ids": ids, "labels": ids}, loss_fn=lambda out: out.loss
    )


def watch():
    """A 10-layer sigmoid MLP trained 12 SGD steps under ``hookviz.watch``; the watch drawn on a
    session's graph (``hookviz.show_watch``): its vanishing gradients, step by step.

    (``hookviz.show(watch)``, the live view, is drawn from messages a saved page does not keep:
    its ``save_html`` page is empty, so the guide embeds this one.)
    """
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=10, width=32, inputs=16, classes=4)
    x, labels = torch.randn(32, 16), torch.randint(0, 4, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model) as w:
        for _ in range(12):
            optimizer.zero_grad()
            F.cross_entropy(model(x), labels).backward()
            optimizer.step()
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    return hookviz.show_watch(w, session)


EXAMPLES = {"canonical_edit": canonical_edit, "gpt2": gpt2, "watch": watch}
TITLES = {
    "canonical_edit": "hookviz: 2*x + 3*y - 5*z after an edit",
    "gpt2": "hookviz: GPT-2, 6 layers",
    "watch": "hookviz: a vanishing MLP's watch",
}


def write(out: Path, names: list[str] | None = None) -> list[Path]:
    """Write the pages ``names`` (default: all) to ``out/<name>.html``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(EXAMPLES):
        widget = EXAMPLES[name]()
        try:
            written.append(widget.save_html(out / f"{name}.html", title=TITLES[name]))
        finally:
            widget.close()
    return written


if __name__ == "__main__":
    if len(sys.argv) < 2 or any(name not in EXAMPLES for name in sys.argv[2:]):
        sys.exit(f"usage: python docs/live_examples.py OUT_DIR [{' '.join(EXAMPLES)}]")
    for path in write(Path(sys.argv[1]), sys.argv[2:] or None):
        print(path)

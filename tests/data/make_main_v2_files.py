"""Wrote tests/data/main-v2-*.hookviz with main's code at 96b96b6 (before the explicit schema); kept so
that files saved by that hookviz keep loading. Run from the repository root:
``python tests/data/make_main_v2_files.py``."""

import torch
import torch.nn.functional as F

import hookviz
from hookviz.examples import Canonical, canonical_inputs, sigmoid_mlp

x, y, z, target = canonical_inputs()
session = hookviz.Session(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
session.run().save("tests/data/main-v2-run.hookviz")
torch.manual_seed(0)
model = sigmoid_mlp(depth=2, width=4, inputs=3, classes=2)
with hookviz.watch(model) as w:
    for _ in range(3):
        model.zero_grad()
        F.cross_entropy(model(torch.randn(4, 3)), torch.zeros(4, dtype=torch.long)).backward()
w.save("tests/data/main-v2-watch.hookviz")

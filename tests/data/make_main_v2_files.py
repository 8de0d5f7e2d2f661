"""Wrote tests/data/main-v2-*.hookviz with main's code at 96b96b6 (before the explicit schema); kept so
that files saved by that hookviz keep loading. Run from the repository root: python tests/data/make_main_v2_files.py"""

import torch, torch.nn.functional as F, hookviz
from hookviz.examples import sigmoid_mlp
from hookviz.examples import Canonical, canonical_inputs
x, y, z, target = canonical_inputs()
s = hookviz.Session(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
s.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
run = s.run()
print(run.save("tests/data/main-v2-run.hookviz"), run.leaf_grad("x"))
torch.manual_seed(0)
model = sigmoid_mlp(depth=2, width=4, inputs=3, classes=2)
with hookviz.watch(model) as w:
    for step in range(3):
        model.zero_grad()
        F.cross_entropy(model(torch.randn(4, 3)), torch.zeros(4, dtype=torch.long)).backward()
print(w.save("tests/data/main-v2-watch.hookviz"))

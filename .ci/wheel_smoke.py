"""The installed wheel works: run by .ci/wheel inside a fresh venv that holds torch and the wheel only.

Not a pytest file (pytest collects tests/ only): it must import hookviz from the venv, never from a
checkout, so .ci/wheel runs it with ``python -I`` from outside the repository. It checks what a
user's first session needs from the package, package data included:

- ``import hookviz`` comes from the venv's site-packages;
- the canonical run's leaf gradients equal plain PyTorch's, bit for bit;
- ``hookviz.show()`` builds its payload and carries the page's bundle (``widget/static/widget.js``);
- ``Widget.save_html`` writes a page that holds that bundle, its loader and the run.

A file missing from the wheel's package data fails one of these (or the file list .ci/wheel
compares first), so CI fails.
"""

from __future__ import annotations

import base64
import gzip
import re
import sysconfig
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import hookviz
from hookviz.examples import Canonical, canonical_inputs

site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
package = Path(hookviz.__file__).resolve().parent
assert package.parent == site_packages, f"hookviz was imported from {package}, not from {site_packages}"
static = package / "widget" / "static"
bundle = (static / "widget.js").read_text(encoding="utf-8")
loader = (static / "saved_page.js").read_text(encoding="utf-8")
assert bundle and loader, f"the page's bundle or its loader in {static} is empty"

# The canonical run against plain PyTorch: 2x + 3y - 5z, MSE against [9, -1].
x, y, z, target = canonical_inputs()


def loss_fn(output):
    return F.mse_loss(output, target)


plain = [t.detach().clone().requires_grad_(True) for t in (x, y, z)]
loss_fn(Canonical()(*plain)).backward()
run = hookviz.Session(Canonical(), (x, y, z), loss_fn=loss_fn).run()
compared = 0
for name, tensor in zip("xyz", plain):
    assert torch.equal(run.leaf_grad(name), tensor.grad), (name, run.leaf_grad(name), tensor.grad)
    compared += 1
assert compared == 3
assert run.loss.item() == 50.0 and run.leaf_grad("x").tolist() == [16.0, -12.0]

# show(): the payload the page draws, and the bundle anywidget sends it.
widget = hookviz.show(Canonical(), (x, y, z), loss_fn=loss_fn)
node_ids = {node["id"] for node in widget.graph["nodes"]}
assert {"x", "y", "z", "SubBackward0_0"} <= node_ids, node_ids
assert len(widget.graph["edges"]) > 0 and len(widget.leaf_summary) == 3
assert widget._esm == bundle, "the widget's _esm is not the installed static/widget.js"

# save_html: one page holding the bundle (base64), its loader and the run.
with tempfile.TemporaryDirectory() as folder:
    page = widget.save_html(Path(folder) / "run.html").read_text(encoding="utf-8")
packed = re.search(r'<script type="text/plain" id="hookviz-esm">([^<]*)</script>', page)
assert packed and gzip.decompress(base64.b64decode(packed.group(1))).decode("utf-8") == bundle, (
    "save_html's page lacks the bundle"
)
assert loader.strip() in page, "save_html's page lacks the bundle's loader (static/saved_page.js)"
assert '"SubBackward0_0"' in page, "save_html's page lacks the run"

print(
    f"wheel smoke test: hookviz {hookviz.__version__} from {package}: {compared} leaf gradients equal "
    f"plain PyTorch; show() payload {len(node_ids)} nodes with the {len(bundle):,}-character bundle; "
    f"save_html page {len(page):,} characters"
)

"""The page ``save_html`` writes keeps every name in its state JSON, and no name can end a script."""

from __future__ import annotations

import json
import re

import torch
from torch import nn

import hookviz

# Legal module names (add_module refuses only "." and ""), hostile to an HTML page.
HOSTILE_NAMES = ["a<!--<script>", "</script>", "b&amp;<b>"]


def hostile_widget():
    """A three-layer model whose modules carry the hostile names, shown as a widget."""
    torch.manual_seed(0)
    model = nn.Sequential()
    for name in HOSTILE_NAMES:
        model.add_module(name, nn.Linear(3, 3))
    x = torch.randn(2, 3)
    return hookviz.show(model, (x,), loss_fn=lambda out: out.square().sum()), model


def test_the_state_json_holds_no_character_that_can_end_a_script(tmp_path):
    widget, model = hostile_widget()
    page = widget.save_html(tmp_path / "page.html").read_text(encoding="utf-8")
    assert page.count("<script") == 3 and page.count("</script>") == 3 and "<!--" not in page
    state_text = re.search(r'<script type="application/json" id="hookviz-state">(.*?)</script>', page, re.S)[
        1
    ]
    assert not set(state_text) & {"<", ">", "&"}
    state = json.loads(state_text)
    # every name arrives as it was, in the graph the page draws and in the inspectors
    groups = json.dumps(state["graph"])
    compared = 0
    for name in HOSTILE_NAMES:
        assert json.dumps(name) in groups, name
        assert "module:" + name in state["__inspectors"] or any(
            name in key for key in state["__inspectors"]
        ), name
        compared += 1
    assert compared == len(list(model.named_children())) == 3

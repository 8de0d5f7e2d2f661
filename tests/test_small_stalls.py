"""Small stalls of the page: edit ids count within the session's edits (after Reset edits the
first is e1 again), and the root module's box is "edited" for its own sites only, not for an edit
of a node inside it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import hookviz


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def _widget():
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    return hookviz.show(
        Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, torch.tensor([9.0, -1.0]))
    )


def test_edit_ids_start_again_after_reset_edits():
    widget = _widget()
    for expression in ("grad * 2", "grad * 3", "grad * 4"):
        assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", expression)  # one site: replaced
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[1]", "grad - 1")
    assert [e.id for e in widget.session.edits] == ["e3", "e4"]
    widget.reset_edits()
    assert widget.apply_edit("MulBackward0_0", "grad_inputs[0]", "grad * 0")
    assert [e.id for e in widget.session.edits] == ["e1"]


def test_the_root_box_is_edited_for_its_own_sites_only():
    widget = _widget()
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888") and widget.rerun()
    root = next(g for g in widget.graph["groups"] if g["module"] == "")
    sub = next(n for n in widget.graph["nodes"] if n["id"] == "SubBackward0_0")
    assert sub["edited"] and not root["edited"] and root["edits_inside"]
    assert widget.apply_edit("", "grad_input[2]", "grad * 2") and widget.rerun()
    root = next(g for g in widget.graph["groups"] if g["module"] == "")
    assert root["edited"]

"""One number format: the same value reads the same in every place that shows it (a finding, the
banner, the graph, the leaf table, the inspector, the chart's hover), and a min and a max that
differ never read equal."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz import text


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def test_one_norm_reads_the_same_everywhere():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 2, bias=False))
    with torch.no_grad():  # weights 3000x too large: both layers' gradients explode
        for layer in model:
            layer.weight.mul_(3e3)
    widget = hookviz.show(model, (torch.randn(3, 4),), loss_fn=lambda out: out.square().mean())
    grad = widget.run.leaf_grad("0.weight")
    shown = text.norm(grad.norm().item())  # as plain PyTorch computes it
    assert "e+" in shown  # a norm of billions: the exponent form, "4.87e+9"
    places = {
        "finding": next(f.message for f in hookviz.diagnose(widget.run) if f.kind == "exploding"),
        "banner": " ".join(f["message"] for f in widget.diagnosis["findings"]),
        "graph": next(n["norm_text"] for n in widget.graph["nodes"] if n["id"] == "0.weight"),
        "leaf table": next(r["text"]["norm"] for r in widget.leaf_summary if r["name"] == "0.weight"),
        "chart hover": widget.chart["figure"]["data"][1]["customdata"][widget.chart["modules"].index("0")],
    }
    widget.select("0.weight")
    places["inspector"] = widget.inspector["grad_outputs"][0]["text"]["norm"]
    compared = [name for name, written in places.items() if shown in written]
    assert compared == list(places), places
    # plotly draws the hover from that text, not from its own number format
    assert "%{customdata}" in widget.chart["figure"]["data"][1]["hovertemplate"]
    ticks = widget.chart["figure"]["layout"]["yaxis"]
    assert ticks["ticktext"] == [text.number(v) for v in ticks["tickvals"]] and len(ticks["tickvals"]) > 1


def test_a_min_and_a_max_that_differ_never_read_equal():
    # Notebook 01's legacy-hook edits: x's gradient becomes [1777792, 1777764], whose min and
    # max once read "1.78e+6" and "1.78e+6" in the leaf table.
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    widget = hookviz.show(
        Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, torch.tensor([9.0, -1.0]))
    )
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[1]", "grad - 777777")
    assert widget.rerun()
    assert widget.run.leaf_grad("x").tolist() == [1777792.0, 1777764.0]
    rows = {r["name"]: r for r in widget.leaf_summary}
    compared = 0
    for name, row in rows.items():
        lo, hi = row["after"]["min"], row["after"]["max"]
        if lo != hi:
            assert row["text"]["min"] != row["text"]["max"], (name, row["text"])
            compared += 1
    assert compared >= 3  # x, y and z
    assert (rows["x"]["text"]["min"], rows["x"]["text"]["max"]) == ("1.77776e+6", "1.77779e+6")
    widget.select("x")
    inspected = widget.inspector["grad_outputs"][0]["text"]
    assert inspected["min"] != inspected["max"] and inspected["value"] == "[1777792, 1777764]"
    assert text.apart([2.5, 2.5, 3.0]) == ["2.5", "2.5", "3"]  # equal numbers keep equal texts

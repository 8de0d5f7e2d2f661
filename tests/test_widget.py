"""The widget's Python side: every interaction the page can ask for, driven from Python.

Each number the widget shows is checked against plain PyTorch on the same example (micrograd style):
the canonical ``2*x + 3*y - 5*z`` with an MSE loss, and its legacy module backward hook, which sees
the gradients of the module's last op (SubBackward0) and moves x.grad to [1777792, 1777764].
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hookviz.widget as hookviz_widget
from hookviz import widget_data

TRAITS = (
    "graph",
    "collapsed",
    "view",
    "inspector",
    "selected",
    "edits",
    "code",
    "devices",
    "device",
    "errors",
    "leaf_summary",
    "log",
    "replay",
    "chart",
    "summary",
)


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


TARGET = torch.tensor([9.0, -1.0])


def canonical_inputs():
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    return x, y, z


def loss_fn(out):
    return F.mse_loss(out, TARGET)


@pytest.fixture
def widget():
    return hookviz_widget.show(Canonical(), canonical_inputs(), loss_fn=loss_fn)


def plain_grads(legacy_hook=None):
    """x, y, z grads from a plain backward, optionally with a legacy module backward hook."""
    model = Canonical()
    x, y, z = canonical_inputs()
    if legacy_hook is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.register_backward_hook(legacy_hook)
    loss_fn(model(x, y, z)).backward()
    return x.grad, y.grad, z.grad


def leaf_after(widget, name):
    return next(leaf for leaf in widget.leaf_summary if leaf["name"] == name)


def assert_json_safe(widget):
    for name in TRAITS:
        json.dumps(getattr(widget, name), allow_nan=False)


def test_opens_on_the_canonical_graph(widget):
    ids = {n["id"] for n in widget.graph["nodes"]}
    assert {
        "MulBackward0_0",
        "MulBackward0_1",
        "AddBackward0_0",
        "MulBackward0_2",
        "SubBackward0_0",
        "MseLossBackward0_0",
        "x",
        "y",
        "z",
    } <= ids
    edges = {(u, v) for u, v, _ in widget.graph["edges"]}
    assert ("x", "MulBackward0_0") in edges and ("SubBackward0_0", "MseLossBackward0_0") in edges
    layer = {n["id"]: n["layer"] for n in widget.graph["nodes"]}
    assert layer["x"] == 0 and layer["MseLossBackward0_0"] == max(layer.values())
    assert widget.summary["loss"] == 50.0
    assert widget.collapsed == []  # small graph: nothing collapsed
    assert widget.devices[0] == "cpu" and widget.device == "cpu"
    x, y, z = plain_grads()
    for name, grad in zip("xyz", (x, y, z)):
        leaf = leaf_after(widget, name)
        assert leaf["after"]["value"] == grad.tolist() and not leaf["changed"]
    assert_json_safe(widget)


def test_select_shows_what_hooks_at_the_node_see(widget):
    assert widget.select("SubBackward0_0")
    data = widget.inspector
    assert data["op"] == "SubBackward0" and data["kind"] == "node"
    x, y, z = (t.detach() for t in canonical_inputs())
    out = 2 * x + 3 * y - 5 * z
    grad_out = (2 * (out - TARGET) / out.numel()).tolist()
    assert data["grad_outputs"][0]["value"] == grad_out
    assert data["grad_inputs"][0]["value"] == grad_out
    assert data["grad_inputs"][1]["value"] == [-g for g in grad_out]
    assert data["output"]["value"] == out.tolist()
    assert "grad_inputs[0]" in data["sites"] and "grad_inputs[1]" in data["sites"]
    assert any(h["owner"] == "hookviz" for h in data["hooks"])
    assert widget.selected == "SubBackward0_0"
    assert widget.select("x") and widget.inspector["node_kind"] == "leaf"
    assert widget.select("module:") and widget.inspector["kind"] == "module"
    # The loss's group in the module view is no module: it shows the loss's root op.
    assert widget.select("module:(loss)") and widget.inspector["id"] == "MseLossBackward0_0"
    assert_json_safe(widget)


def test_edit_and_rerun_match_a_legacy_hook_in_plain_pytorch(widget):
    widget.select("SubBackward0_0")
    first = widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    second = widget.apply_edit("SubBackward0_0", "grad_inputs[1]", "grad - 777777")
    assert first and second and [e["id"] for e in widget.edits] == [first, second]
    assert "888888" in widget.code and "777777" in widget.code
    assert widget.code == widget.session.edits_as_code()
    assert widget.rerun()

    def legacy_hook(module, grad_input, grad_output):
        return grad_input[0] + 888888, grad_input[1] - 777777

    x, y, z = plain_grads(legacy_hook)
    assert x.tolist() == [1777792.0, 1777764.0]
    for name, grad in zip("xyz", (x, y, z)):
        leaf = leaf_after(widget, name)
        assert leaf["after"]["value"] == grad.tolist()
        assert leaf["changed"]
    assert leaf_after(widget, "x")["before"]["value"] == [16.0, -12.0]
    # The inspector followed the re-run: before -> after on the edited node.
    data = widget.inspector
    assert data["id"] == "SubBackward0_0" and data["edited"]
    assert data["changed"]["grad_inputs"] == [True, True]
    assert data["before"]["grad_inputs"][0]["value"] == data["grad_inputs_before_edit"][0]["value"]
    edited = {n["id"] for n in widget.graph["nodes"] if n["edited"]}
    assert "SubBackward0_0" in edited
    assert widget.graph["run"] == 2
    assert widget.errors == {}
    assert_json_safe(widget)


def test_remove_and_reset_edits(widget):
    a = widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad * 0")
    widget.apply_edit("MulBackward0_2", "grad_inputs[0]", "grad * 2")
    assert len(widget.edits) == 2
    assert widget.remove_edit(a)
    assert [e["target"] for e in widget.edits] == ["MulBackward0_2"]
    assert not widget.remove_edit("no-such-edit") and "edits" in widget.errors
    widget.reset_edits()
    assert widget.edits == [] and widget.code == widget.session.edits_as_code()
    assert widget.rerun()
    assert leaf_after(widget, "x")["after"]["value"] == [16.0, -12.0]


def test_errors_appear_beside_their_control_and_keep_the_last_good_run(widget):
    graph = widget.graph
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "import os") is None
    assert "edit" in widget.errors
    assert (
        widget.apply_edit("SubBackward0_0", "grad_inputs[7]", "grad") is None or not widget.rerun()
    )
    widget.reset_edits()
    assert widget.apply_edit("NoSuchNode_3", "grad_inputs[0]", "grad") is None or not widget.rerun()
    widget.reset_edits()
    # A wrong-shaped result is refused beside the edit control (checked on the last run's gradient).
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "sum(grad)") is None
    assert "shape" in widget.errors["edit"]
    # One that only fails while backward runs: the error shows and the last good run stays.
    breaks_later = _BreaksLater()
    widget.session.edit("SubBackward0_0", "grad_inputs[0]", breaks_later)
    breaks_later.broken = True
    assert not widget.rerun()
    assert "rerun" in widget.errors and "edit" in widget.errors
    assert widget.graph is graph
    widget.reset_edits()
    assert not widget.rerun(device="tpu:9")
    assert "device" in widget.errors
    assert widget.rerun() and "device" not in widget.errors and "rerun" not in widget.errors
    assert not widget.select("NoSuchNode_0") and "select" in widget.errors
    assert widget.select("x") and "select" not in widget.errors


class _BreaksLater:
    """An edit callable that returns a wrong-shaped gradient once ``broken`` is set."""

    broken = False

    def __call__(self, grad):
        return grad[:1] if self.broken else grad


def test_forward_error_keeps_the_last_good_run():
    class Flaky(nn.Module):
        fail = False

        def forward(self, x, y, z):
            if self.fail:
                raise ValueError("the forward broke")
            return 2 * x + 3 * y - 5 * z

    model = Flaky()
    widget = hookviz_widget.show(model, canonical_inputs(), loss_fn=loss_fn)
    graph = widget.graph
    model.fail = True
    assert not widget.rerun(forward=True)
    assert "the forward broke" in widget.errors["rerun"]
    assert widget.graph is graph
    model.fail = False
    assert widget.rerun(forward=True)
    assert "rerun" not in widget.errors


@pytest.mark.parametrize(
    "message",
    [
        None,
        "select",
        [1, 2],
        {},
        {"type": "no_such_request"},
        {"type": "select"},
        {"type": "select", "node": 3},
        {"type": "select", "node": "x" * 5000},
        {"type": "apply_edit", "target": "SubBackward0_0", "slot": "grad_inputs[0]"},
        {"type": "apply_edit", "target": "SubBackward0_0", "slot": None, "expression": "grad"},
        {"type": "rerun", "device": 0},
        {"type": "set_view", "view": ["ops"]},
        {"type": "toggle_group"},
        {"type": "remove_edit", "id": {}},
    ],
)
def test_malformed_messages_get_an_error_reply(widget, message):
    graph = widget.graph
    reply = widget.handle_message(message)
    assert reply["ok"] is False and reply["error"]
    assert widget.errors["message"] == reply["error"]
    assert widget.graph is graph
    widget._handle_message(widget, message, [])  # the comm callback never raises either


def test_requests_refused_by_their_control_are_not_malformed(widget):
    for message, control in [
        ({"type": "select", "node": "NoSuchNode_0"}, "select"),
        (
            {
                "type": "apply_edit",
                "target": "SubBackward0_0",
                "slot": "grad_inputs[0]",
                "expression": "__import__('os')",
            },
            "edit",
        ),
        (
            {
                "type": "apply_edit",
                "target": "SubBackward0_0",
                "slot": "gradient",
                "expression": "grad",
            },
            "edit",
        ),
        ({"type": "rerun", "device": "cuda:99"}, "device"),
        ({"type": "set_view", "view": "3d"}, "view"),
        ({"type": "toggle_group", "module": "no.such.module"}, "group"),
    ]:
        reply = widget.handle_message(message)
        assert reply["ok"] is False and reply["error"] is None
        assert control in widget.errors, (message, widget.errors)
    assert "message" not in widget.errors


def test_the_page_drives_the_whole_round_trip_through_messages(widget):
    send = widget.handle_message
    assert send({"type": "select", "node": "SubBackward0_0"})["ok"]
    assert send(
        {
            "type": "apply_edit",
            "target": "SubBackward0_0",
            "slot": "grad_inputs[0]",
            "expression": "grad + 888888",
        }
    )["ok"]
    assert send(
        {
            "type": "apply_edit",
            "target": "SubBackward0_0",
            "slot": "grad_inputs[1]",
            "expression": "grad - 777777",
        }
    )["ok"]
    assert send({"type": "rerun", "device": "cpu"})["ok"]
    assert leaf_after(widget, "x")["after"]["value"] == [1777792.0, 1777764.0]
    assert send({"type": "remove_edit", "id": widget.edits[0]["id"]})["ok"]
    assert send({"type": "reset_edits"})["ok"] and widget.edits == []
    assert send({"type": "set_view", "view": "modules"})["ok"] and widget.view == "modules"
    assert send({"type": "set_view", "view": "ops"})["ok"] and widget.view == "ops"
    assert send({"type": "rerun"})["ok"]
    assert leaf_after(widget, "x")["after"]["value"] == [16.0, -12.0]


def test_replay_follows_the_backward_execution_order(widget):
    run = widget.run
    steps = widget.replay
    executed = [e.node for e in run.events if e.kind == "node"]
    assert [s["node"] for s in steps] == executed
    assert steps[0]["node"] == "MseLossBackward0_0"
    order = {n["id"]: n["order"] for n in widget.graph["nodes"]}
    assert order["MseLossBackward0_0"] == 0
    assert all(s["op"] for s in steps)


def test_replay_shows_the_hooks_that_fired():
    model = Canonical()
    printed = []

    def legacy_hook(module, grad_input, grad_output):
        print("legacy hook sees", len(grad_input), "grads")
        printed.append(len(grad_input))

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.register_backward_hook(legacy_hook)
    widget = hookviz_widget.show(model, canonical_inputs(), loss_fn=loss_fn)
    assert printed and printed[-1] == 2
    assert any("legacy hook sees 2 grads" in entry["text"] for entry in widget.log)
    fired = [h for s in widget.replay for h in s["hooks"]]
    assert fired, widget.replay
    hooked = {n["id"] for n in widget.graph["nodes"] if n["user_hooks"]}
    assert hooked
    widget.select(sorted(hooked)[0])
    assert any(h["owner"] == "user" for h in widget.inspector["hooks"])


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x)))


class Deep(nn.Module):
    def __init__(self, depth, width=4):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(x)).sum()


def test_large_graph_opens_collapsed_by_module():
    torch.manual_seed(0)
    widget = hookviz_widget.show(Deep(40), (torch.randn(3, 4),))
    assert len(widget.graph["nodes"]) > widget_data.COLLAPSE_THRESHOLD
    assert widget.collapsed
    drawn = _drawn(widget.graph, widget.collapsed)
    assert drawn <= widget_data.VISIBLE_BUDGET
    modules = {g["module"] for g in widget.graph["groups"]}
    assert {"blocks", "blocks.0", "blocks.0.fc", "head"} <= modules
    parents = {g["module"]: g["parent"] for g in widget.graph["groups"]}
    assert parents["blocks.0.fc"] == "group:blocks.0" and parents["blocks"] is None
    collapsed = list(widget.collapsed)
    # A large group opens one level at a time.
    widget.collapse_all()
    assert widget.toggle_group("blocks")
    assert "blocks" not in widget.collapsed
    assert {f"blocks.{i}" for i in range(40)} <= set(widget.collapsed)
    assert widget.toggle_group("blocks") and "blocks" in widget.collapsed
    widget.collapsed = collapsed
    assert widget.toggle_group(collapsed[0])
    assert collapsed[0] not in widget.collapsed
    assert widget.toggle_group(collapsed[0]) and collapsed[0] in widget.collapsed
    widget.expand_all()
    assert widget.collapsed == []
    widget.collapse_all()
    assert set(widget.collapsed) == {"blocks", "head"}
    assert_json_safe(widget)


def _drawn(graph, collapsed):
    """Elements drawn for a collapse state (the page's visibleGraph, in Python)."""
    collapsed = set(collapsed)

    def hidden_by(module):
        chain, name = [], module
        while name:
            chain.append(name)
            name = widget_data.parent_module(name)
        for name in reversed(chain):
            if name in collapsed:
                return name
        return None

    drawn_nodes = sum(1 for n in graph["nodes"] if hidden_by(n["module"]) is None)
    drawn_groups = sum(
        1
        for g in graph["groups"]
        if widget_data.parent_module(g["module"]) is None
        or hidden_by(widget_data.parent_module(g["module"])) is None
    )
    return drawn_nodes + drawn_groups


def test_module_view_merges_nodes_by_module():
    torch.manual_seed(0)
    widget = hookviz_widget.show(Deep(3), (torch.randn(3, 4),))
    assert widget.set_view("modules") and widget.view == "modules"
    view = widget.graph["module_view"]
    ids = {n["id"] for n in view["nodes"]}
    assert {"module:blocks.0.fc", "module:head", "x"} <= ids, ids
    members = [m for n in view["nodes"] for m in n["members"]]
    assert sorted(members) == sorted(n["id"] for n in widget.graph["nodes"])
    assert widget.select("module:blocks.0.fc")
    data = widget.inspector
    assert data["kind"] == "module" and data["grad_input"]
    assert any(site.startswith("grad_input") for site in data["sites"])


def test_chart_compares_module_gradient_norms_with_the_baseline():
    torch.manual_seed(0)
    model = Deep(3)
    widget = hookviz_widget.show(model, (torch.randn(3, 4),))
    chart = widget.chart
    assert (
        "blocks.0.fc" in chart["modules"] and chart["threshold"] == widget_data.VANISHING_THRESHOLD
    )
    assert chart["current"] == chart["baseline"]
    assert widget.apply_edit("head", "grad_input[0]", "grad * 0")
    assert widget.rerun()
    chart = widget.chart
    index = chart["modules"].index("blocks.0.fc")
    assert chart["current"][index] in (0.0, None) and chart["baseline"][index] > 0


def test_nan_gradients_are_flagged_and_json_safe():
    class Sqrt(nn.Module):
        def forward(self, x):
            return torch.sqrt(x).sum()

    widget = hookviz_widget.show(Sqrt(), (torch.tensor([0.0, -1.0, 4.0], requires_grad=True),))
    assert any(n["nan"] for n in widget.graph["nodes"])
    assert_json_safe(widget)
    json.dumps(widget.inspector, allow_nan=False)
    nan_node = next(n["id"] for n in widget.graph["nodes"] if n["nan"])
    assert widget.select(nan_node)
    json.dumps(widget.inspector, allow_nan=False)

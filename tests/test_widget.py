"""The widget's Python side: every interaction the page can ask for, driven from Python.

Each number the widget shows is checked against plain PyTorch on the same example (micrograd style):
the canonical ``2*x + 3*y - 5*z`` with an MSE loss, and its legacy module backward hook, which sees
the gradients of the module's last op (SubBackward0) and moves x.grad to [1777792, 1777764].
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import math
import re
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from zoo import NoGradGate

import hookviz
import hookviz.record.details as record_details
import hookviz.widget.details as widget_details
import hookviz.widget.diagnosis as widget_diagnosis
from hookviz.examples import ResidualStack, sigmoid_mlp
from hookviz.widget import payload as widget_data
from hookviz.widget.chart import CHART_MARKERS, VANISHING_RATIO
from hookviz.widget.diagnosis import findings_json
from hookviz.widget.graph import operand_hint
from hookviz.widget.inspector import grad_input_names, node_inspector_json
from hookviz.widget.show import show
from hookviz.widget.widget import Widget

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
    "diagnosis",
    "watch_view",
    "watch_heatmap",
    "edit_state",
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
    return show(Canonical(), canonical_inputs(), loss_fn=loss_fn)


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
    assert widget.summary["loss"] == 50.0
    assert widget.collapsed is None  # the page opens the first view (js/tests: nothing collapsed)
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


def test_the_root_module_has_a_box_named_by_its_class_and_both_hook_views(widget):
    # The seed's lesson on the page: the root module (a model with no submodules) is a box of its
    # own; its inspector holds what each kind of module backward hook sees, every slot named.
    root = next(g for g in widget.graph["groups"] if g["module"] == "")
    assert root["label"] == "Canonical (root)" and root["parent"] is None
    assert {g["module"]: g["parent"] for g in widget.graph["groups"]} == {"": None, "(loss)": None}
    for name in ("Canonical (root)", "(root)", "Canonical", "module:"):
        assert widget.select(name) and widget.selected == "module:", name
    data = widget.inspector
    assert data["label"] == "Canonical (root)" and data["target"] == ""
    # plain PyTorch: a full hook and a legacy hook on two fresh modules
    seen = {}
    full, legacy = Canonical(), Canonical()
    keep = seen.__setitem__
    handles = [
        full.register_full_backward_hook(lambda m, gi, go: keep("full", [g.tolist() for g in gi])),
        legacy.register_backward_hook(lambda m, gi, go: keep("legacy", [g.tolist() for g in gi])),
    ]
    for model in (full, legacy):
        loss_fn(model(*canonical_inputs())).backward()
    for handle in handles:
        handle.remove()
    assert [t["value"] for t in data["grad_input"]] == seen["full"] and len(seen["full"]) == 3
    assert [t["value"] for t in data["legacy_grad_input"]] == seen["legacy"] and len(seen["legacy"]) == 2
    assert data["grad_input_names"] == ["x", "y", "z"]
    assert data["legacy_grad_input_names"] == [
        "self ← Add (AddBackward0_0)",
        "other ← Mul ×5 (MulBackward0_2)",
    ]
    assert data["sites"] == ["grad_input[0]", "grad_input[1]", "grad_input[2]", "grad_output[0]"]
    # an edit there is named by the box's name in the edit list and in the replay
    assert widget.apply_edit("", "grad_input[0]", "grad * 2")
    assert [(e["label"], e["slot"]) for e in widget.edits] == [("Canonical (root)", "grad_input[0]")]
    assert widget.rerun()
    fired = [hook["detail"] for step in widget.replay for hook in step["hooks"]]
    assert fired == ["Canonical (root): grad_input[0] <- grad * 2"]
    assert widget.run.leaf_grad("x").tolist() == [2 * g for g in seen["full"][0]]


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
    assert all(e["pending"] for e in widget.edits)
    assert widget.edit_state["stale"]
    assert widget.edit_state["pending_targets"] == ["MulBackward0_2", "SubBackward0_0"]
    assert widget.remove_edit(a)
    assert [e["target"] for e in widget.edits] == ["MulBackward0_2"]
    assert not widget.remove_edit("no-such-edit") and "edits" in widget.errors
    assert widget.rerun()
    assert not widget.edit_state["stale"] and not widget.edits[0]["pending"]
    widget.reset_edits()
    assert widget.edits == [] and widget.code == widget.session.edits_as_code()
    # The graph still shows the edited run until the re-run, and says so.
    assert widget.edit_state == {
        "stale": True,
        "pending_targets": [],
        "removed_targets": ["MulBackward0_2"],
    }
    assert widget.rerun()
    assert not widget.edit_state["stale"]
    assert leaf_after(widget, "x")["after"]["value"] == [16.0, -12.0]


def test_errors_appear_beside_their_control_and_keep_the_last_good_run(widget):
    graph = widget.graph
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "import os") is None
    assert "edit" in widget.errors
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[7]", "grad") is None or not widget.rerun()
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
    widget = show(model, canonical_inputs(), loss_fn=loss_fn)
    graph = widget.graph
    model.fail = True
    assert not widget.rerun(forward=True)
    assert "the forward broke" in widget.errors["rerun"]
    assert widget.graph is graph
    model.fail = False
    assert widget.rerun(forward=True)
    assert "rerun" not in widget.errors


def test_show_pauses_the_garbage_collector_for_its_own_call_only():
    """show() records and builds with Python's cyclic collector paused (the model's forward sees it
    off), enables it again after, on success and
    when the first run fails, and moves nothing to the oldest generation (garbage made before the
    call is freed by a young collection after it); a caller's own gc.disable() is kept."""
    import weakref

    seen = []

    class Probe(nn.Module):
        fail = False

        def forward(self, x, y, z):
            seen.append(gc.isenabled())
            if self.fail:
                raise ValueError("the forward broke")
            return 2 * x + 3 * y - 5 * z

    class Cycle:
        def __init__(self):
            self.me = self

    model = Probe()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect()
    garbage = weakref.ref(Cycle())  # only the collector can free it
    show(model, canonical_inputs(), loss_fn=loss_fn)
    assert seen == [False]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect(0)
    assert garbage() is None

    model.fail = True
    with pytest.raises(hookviz.ForwardError, match="the forward broke"):
        show(model, canonical_inputs(), loss_fn=loss_fn)
    assert seen == [False, False] and gc.isenabled()

    model.fail = False
    gc.disable()  # the caller's own choice
    try:
        show(model, canonical_inputs(), loss_fn=loss_fn)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen == [False, False, False]


@pytest.mark.parametrize(
    "message",
    [
        None,
        "select",
        [1, 2],
        {},
        {"type": "no_such_request"},
        {"type": "select", "node": "x"},  # the page selects by itself (the `selected` traitlet)
        {"type": "remove_edit"},
        {"type": "remove_edit", "id": 3},
        {"type": "remove_edit", "id": "x" * 5000},
        {"type": "apply_edit", "target": "SubBackward0_0", "slot": "grad_inputs[0]"},
        {"type": "apply_edit", "target": "SubBackward0_0", "slot": None, "expression": "grad"},
        {"type": "rerun", "device": 0},
        {"type": "apply_edit", "target": "x" * 5000, "slot": "grad_inputs[0]", "expression": "grad"},
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
        ({"type": "remove_edit", "id": "no-such-edit"}, "edits"),
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
    ]:
        reply = widget.handle_message(message)
        assert reply["ok"] is False and reply["error"] is None
        assert control in widget.errors, (message, widget.errors)
    assert "message" not in widget.errors


def test_the_page_drives_the_whole_round_trip_through_messages(widget):
    send = widget.handle_message
    widget.selected = "SubBackward0_0"  # the page's click
    assert widget.inspector["id"] == "SubBackward0_0" and widget.inspector["sites"]
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


def test_replay_shows_the_hooks_that_fired(capsys):
    model = Canonical()
    printed = []

    def legacy_hook(module, grad_input, grad_output):
        print("legacy hook sees", len(grad_input), "grads")
        printed.append(len(grad_input))

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.register_backward_hook(legacy_hook)
    widget = show(model, canonical_inputs(), loss_fn=loss_fn)
    assert printed and printed[-1] == 2
    assert "legacy hook sees 2 grads" in capsys.readouterr().out and widget.log == []
    fired = [h for s in widget.replay for h in s["hooks"]]
    assert fired, widget.replay
    hooked = {n["id"] for n in widget.graph["nodes"] if n["user_hooks"]}
    assert hooked
    widget.select(sorted(hooked)[0])
    assert any(h["owner"] == "user" for h in widget.inspector["hooks"])


class ResidualList(nn.Module):
    """Notebook 05's residual MLP: blocks in a ModuleList, each added to the stream by the root
    module's own ``Add`` (the Adds sit outside the list's box)."""

    def __init__(self, depth: int, width: int = 4):
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU()) for _ in range(depth)
        )
        self.out = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


def Deep(depth: int) -> ResidualStack:  # noqa: N802 (reads as the model it builds)
    return ResidualStack(depth, width=4)


# The page's view rules (js/src/collapse.js, find.js, names.js) and its parts are tested by the JS
# tests on these payloads, written here from real runs: the contract between Python's payload and
# the page cannot drift. CI runs pytest before the JS tests (.ci/run); run this test before
# `npx vitest run` by hand.
FIXTURES = Path(__file__).resolve().parents[1] / "js" / "tests" / "fixtures"


def _gpt2_widget(layers: int = 6):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=100)
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    model = transformers.GPT2LMHeadModel(config)
    return show(model, (), kwargs={"input_ids": ids, "labels": ids}, loss_fn=lambda out: out.loss)


def write_page_fixture(widget, name: str) -> None:
    """Write the state a saved page of ``widget`` holds (every traitlet the page reads, the
    inspectors of every element) to ``FIXTURES / name.json``: the JS tests draw the page's parts
    from it (js/tests/fixtures.js)."""
    with tempfile.TemporaryDirectory() as folder:
        page = widget.save_html(Path(folder) / "page.html", values="all").read_text(encoding="utf-8")
    state = re.search(r'<script type="application/json" id="hookviz-state">(.*?)</script>', page, re.S)
    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / f"{name}.json").write_text(state.group(1), encoding="utf-8")


def test_the_js_tests_read_payloads_written_from_real_runs():
    from hookviz.examples import Canonical as CanonicalExample
    from hookviz.examples import canonical_inputs as canonical_example_inputs

    x, y, z, target = canonical_example_inputs()
    widgets = {
        "canonical": show(CanonicalExample(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target)),
        "gpt2": _gpt2_widget(),
    }
    for depth in (2, 6, 12, 40):
        torch.manual_seed(0)
        widgets[f"deep{depth}"] = show(Deep(depth), (torch.randn(3, 4),), input_grads=True)
    torch.manual_seed(0)  # notebook 07's deep sigmoid MLP and notebook 05's residual stack
    mlp = sigmoid_mlp(depth=8, width=4, inputs=4, classes=2)
    widgets["mlp"] = show(mlp, (torch.randn(3, 4),), loss_fn=torch.sum)
    widgets["residual"] = show(ResidualList(10), (torch.randn(3, 4),), loss_fn=torch.sum)
    FIXTURES.mkdir(exist_ok=True)
    for name, widget in widgets.items():
        graph = widget.graph
        assert graph["nodes"] and graph["edges"] and "color_range" in graph, name
        # labels are the page's, but the root module's box: only the recording knows its class
        assert all("label" not in g and "repeat" not in g for g in graph["groups"] if g["module"]), name
        assert [g["label"] for g in graph["groups"] if not g["module"]] == [
            f"{type(widget.session.model).__name__} (root)"
        ], name
        (FIXTURES / f"{name}.json").write_text(json.dumps(graph, allow_nan=False), encoding="utf-8")
    # What the page shows of tensors, as text Python wrote (js/tests/text.test.js reads it): every
    # node's and module's inspector of a ReLU model whose outputs are partly zero.
    torch.manual_seed(0)
    relu = show(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), (torch.randn(16, 4),), loss_fn=torch.sum
    )
    inspectors = {}
    modules = [g for g in relu.graph["groups"] if g["module"] != "(loss)"]  # that box shows its op
    for target in [*relu.graph["nodes"], *modules]:
        assert relu.select(target["id"].replace("group:", "")), target["id"]
        inspectors[relu.selected] = relu.inspector
    (FIXTURES / "inspectors.json").write_text(
        json.dumps({"inspectors": inspectors, "leaves": relu.leaf_summary}, allow_nan=False), encoding="utf-8"
    )
    assert len(inspectors) == len(relu.graph["nodes"]) + len(modules) == 14  # the root box too
    write_page_fixture(relu, "page")  # the whole page's state, as a saved page holds it
    assert len(list(FIXTURES.glob("*.json"))) >= len(widgets) + 1
    # What only the recording knows, and the page cannot: identical blocks share a signature, and
    # two Embeddings of different shapes do not.
    groups = {g["module"]: g for g in widgets["gpt2"].graph["groups"]}
    assert len({groups[f"transformer.h.{i}"]["signature"] for i in range(6)}) == 1
    assert groups["transformer.wte"]["signature"] != groups["transformer.wpe"]["signature"]
    assert groups["transformer.h.3"]["type"] == "GPT2Block"
    deep = {g["module"]: g for g in widgets["deep40"].graph["groups"]}
    assert deep["blocks.0.fc"]["parent"] == "group:blocks.0" and deep["blocks"]["parent"] == "group:"
    assert deep[""]["parent"] is None and deep["(loss)"]["parent"] is None  # the loss is not the model
    # Siblings in the order the forward ran them, outer before inner.
    assert [g["module"] for g in widgets["deep12"].graph["groups"]][:5] == [
        "",
        "blocks",
        "head",
        "(loss)",
        "blocks.0",
    ]


def test_the_page_makes_the_first_view_and_python_asks_it_again():
    torch.manual_seed(0)
    widget = show(Deep(12), (torch.randn(3, 4),))
    assert widget.collapsed is None  # no page yet: the page opens the first view by its rules
    widget.collapsed = ["blocks"]  # as the page writes it
    assert widget.set_view("modules") and widget.view == "modules" and widget.collapsed is None
    widget.collapsed = ["blocks"]
    assert widget.rerun() and widget.collapsed == ["blocks"]  # same graph: the page's view stays
    widget.expand_all()
    assert widget.collapsed == []
    assert widget.toggle_group("blocks.3") and "group" not in widget.errors  # asked of the page
    assert not widget.toggle_group("no.such.module") and "no.such.module" in widget.errors["group"]


def test_select_takes_exact_names_and_search_asks_the_page():
    torch.manual_seed(0)
    widget = show(Deep(40), (torch.randn(3, 4),))
    assert widget.select("blocks.7.fc") and widget.selected == "module:blocks.7.fc"
    assert widget.inspector["kind"] == "module" and widget.inspector["id"] == "module:blocks.7.fc"
    assert widget.select("blocks.12.fc.weight") and widget.selected == "blocks.12.fc.weight"
    assert widget.inspector["id"] == "blocks.12.fc.weight"
    assert not widget.select("12.fc.weight") and "widget.search(text)" in widget.errors["select"]
    assert widget.selected == "blocks.12.fc.weight"  # a refused name changes nothing
    # The page selects: the kernel answers with the inspector (values) for that element.
    widget.selected = "module:head"
    assert widget.inspector["id"] == "module:head" and widget.inspector["grad_input"]
    widget.search("fc")
    assert widget.query == "fc"
    widget.search("fc")  # asked again: the page sees a change and searches again
    assert widget.query == "fc"


def test_a_container_that_was_never_called_is_inspected_as_what_it_is():
    """GPT-2's ``transformer.h`` (a ModuleList) ran only through its blocks: the inspector names its
    children and the norms of the parameters inside it, never an error."""
    widget = _gpt2_widget()
    assert widget.select("transformer.h") and widget.selected == "module:transformer.h"
    data = widget.inspector
    assert "select" not in widget.errors
    assert data["container"] and data["op"] == "ModuleList"
    assert data["children"] == [f"transformer.h.{i}" for i in range(6)]
    norms = data["parameter_norms"]
    assert len(norms) == len([n for n, _ in widget.session.model.transformer.h.named_parameters()])
    assert all(widget_data.json_float(v) == v for v in norms.values())
    # The page's own click on it gets the same answer.
    widget.selected = ""
    widget.selected = "module:transformer.h"
    assert widget.inspector["container"] and "select" not in widget.errors


def _layer_grad_norm(model, inputs, module):
    """Plain PyTorch: the 2-norm of ``module``'s parameter gradients after backward on a copy."""
    import copy

    twin = copy.deepcopy(model)
    twin(*inputs).backward()
    grads = [p.grad.double() for p in dict(twin.named_modules())[module].parameters()]
    return float(torch.sqrt(sum(g.pow(2).sum() for g in grads)))


def test_chart_compares_module_gradient_norms_with_the_baseline():
    torch.manual_seed(0)
    model = Deep(3)
    inputs = (torch.randn(3, 4),)
    widget = show(model, inputs)
    chart = widget.chart
    # One rule with the diagnosis: 0.001 x the gradient norm of the layer nearest the loss, the
    # norm of that layer's parameters' gradient (plain PyTorch's .grad).
    assert "blocks.0.fc" in chart["modules"] and chart["modules"][-1] == "head"
    head = _layer_grad_norm(model, inputs, "head")
    assert chart["current"][-1] == pytest.approx(head, rel=1e-5)
    assert chart["threshold"] == pytest.approx(VANISHING_RATIO * chart["current"][-1])
    assert "0.001 x the layer nearest the loss" in chart["rule"]
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

    widget = show(Sqrt(), (torch.tensor([0.0, -1.0, 4.0], requires_grad=True),))
    assert any(n["nan"] for n in widget.graph["nodes"])
    assert_json_safe(widget)
    json.dumps(widget.inspector, allow_nan=False)
    nan_node = next(n["id"] for n in widget.graph["nodes"] if n["nan"])
    assert widget.select(nan_node)
    json.dumps(widget.inspector, allow_nan=False)


# ----- diagnosis banner ------------------------------------------------------------------------


def findings_as_json(findings):
    return json.loads(json.dumps(findings_json(findings), allow_nan=False))


def test_canonical_example_has_no_diagnosis_banner(widget):
    assert hookviz.diagnose(widget.run) == []
    assert widget.diagnosis == {
        "source": "run",
        "step": None,
        "findings": [],
        "counts": {},
        "error": None,
        "pending": False,
    }


class Square(nn.Module):
    def forward(self, x):
        return (x * x).sum() + torch.tanh(x).sum()


@pytest.mark.parametrize("case", ["square", "deep"])
def test_graph_payload_is_the_runs_autograd_graph(case):
    """The page's nodes and edges are the run's graph (``Run.graph``), one edge per producer and
    consumer (``x * x`` reaches MulBackward0 through two slots), norms and NaN flags included."""
    torch.manual_seed(0)
    if case == "square":
        widget = show(Square(), (torch.randn(3, requires_grad=True),))
    else:
        widget = show(Deep(3), (torch.randn(3, 4),), input_grads=True)
    graph = widget.run.graph
    assert widget.graph["edges"] == [[u, v, d["slot"]] for u, v, d in graph.edges(data=True)]
    nodes = {n["id"]: n for n in widget.graph["nodes"]}
    assert list(nodes) == list(graph.nodes)
    for node_id, attrs in graph.nodes(data=True):
        assert nodes[node_id]["norm"] == widget_data.json_float(attrs["grad_norm"])
        assert nodes[node_id]["nan"] == attrs["has_nan"] and nodes[node_id]["op"] == attrs["op"]
    if case == "square":
        mul = next(n for n in graph.nodes if n.startswith("MulBackward0"))
        assert len([e for e in widget.run.edges if e[1] == mul]) == 2  # two slots, one drawn edge
        assert len([e for e in widget.graph["edges"] if e[1] == mul]) == 1


def test_a_large_run_is_drawn_from_its_norms_and_diagnosed_when_the_page_asks(monkeypatch):
    """Past the cheap-details limit the first paint needs no second recording: the graph is that
    of an eager run. The leaf table and the chart, drawn below it, wait for the page's "details"
    request, which sends them (the eager run's) and records the rest; then diagnosis and
    inspector are the eager run's too. Python asking for the chart gets it at once."""
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=32, inputs=8, classes=3)
    x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def loss(out):
        return F.cross_entropy(out, labels)

    eager = show(model, (x,), loss_fn=loss, details="eager")
    monkeypatch.setattr(record_details, "IN_FULL_NODES", 0)
    lazy = show(model, (x,), loss_fn=loss)
    assert lazy.details_pending and lazy.run.details_pending  # nothing read a deferred field
    assert lazy.diagnosis["pending"] and lazy.diagnosis["findings"] == []
    assert lazy.graph == eager.graph
    assert lazy.replay == eager.replay
    assert lazy.leaf_summary == [] and lazy.chart == {}

    when_sent = []
    lazy.observe(lambda _: when_sent.append((lazy.run.details_pending, gc.isenabled())), "leaf_summary")
    assert gc.isenabled()
    reply = lazy.handle_message({"type": "details"})
    assert reply["ok"] and not lazy.details_pending and not lazy.run.details_pending
    assert lazy.leaf_summary == eager.leaf_summary and lazy.chart == eager.chart
    # The table went out before the second recording; a fill leaves the cyclic collector running.
    assert when_sent == [(True, True)]
    assert lazy.diagnosis == eager.diagnosis and lazy.diagnosis["counts"]["vanishing"] > 0
    lazy.select("AddmmBackward0_0")
    eager.select("AddmmBackward0_0")
    assert lazy.inspector == eager.inspector

    charted = show(model, (x,), loss_fn=loss)
    assert charted.details_pending and charted.chart == {}
    assert charted.chart_figure().data and charted.chart == eager.chart and charted.details_pending


def test_in_ipython_a_large_runs_details_are_recorded_when_its_cell_ends(monkeypatch):
    """The page draws without the kernel; the details come right after the cell that showed the
    widget, before any later cell (a training step) can change the parameters."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setattr(record_details, "IN_FULL_NODES", 0)
    shell = InteractiveShell.instance()
    try:
        shell.user_ns.update(hookviz=hookviz, Canonical=Canonical, inputs=canonical_inputs(), loss_fn=loss_fn)
        shell.run_cell(
            "w = hookviz.show(Canonical(), inputs, loss_fn=loss_fn)\npending_inside = w.details_pending"
        )
        widget = shell.user_ns["w"]
        assert shell.user_ns["pending_inside"] is True  # the cell itself was not slowed down
        assert not widget.details_pending and not widget.run.details_pending
        assert widget.diagnosis["pending"] is False
        for event in ("post_run_cell", "pre_run_cell"):  # the hooks removed themselves
            assert all(getattr(f, "__name__", "") != "fill" for f in shell.events.callbacks[event])
    finally:
        InteractiveShell.clear_instance()


def test_in_a_kernel_a_large_runs_details_wait_for_the_page_and_come_without_one():
    """In a kernel the details wait DETAILS_WAIT_FOR_THE_PAGE_S for the page's request, so they do
    not take the cores while it draws the graph; with no page, they come on their own: the
    widget's update that ends them is sent after the cell has ended (not by the cell or its
    post_run_cell), and before any next cell runs."""
    import queue

    from jupyter_client.manager import start_new_kernel

    wait = widget_details.DETAILS_WAIT_FOR_THE_PAGE_S
    kernel, client = start_new_kernel(kernel_name="python3")

    def run(code: str, messages: list) -> str:
        reply = client.execute_interactive(code, timeout=120, output_hook=messages.append)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")

    def ends_the_details(message) -> bool:
        data = message["content"].get("data") or {}
        return (
            message["msg_type"] == "comm_msg"
            and data.get("method") == "update"
            and data.get("state", {}).get("details_pending") is False
        )

    try:
        during: list = []
        run(
            "import time, hookviz, hookviz.record.details as rd, hookviz.widget.widget as hw\n"
            "from hookviz.examples import Canonical, canonical_inputs\n"
            "rd.IN_FULL_NODES = 0\n"
            "filled, original = [], hw.Widget.fill_details\n"
            "def spy(self):\n"
            "    filled.append((time.time(), self.details_pending))\n"
            "    return original(self)\n"
            "hw.Widget.fill_details = spy\n"
            "x, y, z, target = canonical_inputs()\n"
            "w = hookviz.show(Canonical(), (x, y, z), loss_fn=lambda out: ((out - target) ** 2).mean())\n"
            "pending_inside, ended = w.details_pending, time.time()",
            during,
        )
        # Everything the cell sent, up to its idle status, is in `during`: the widget was shown
        # (its comm opened) and its details were not ended there.
        assert any(m["msg_type"] == "comm_open" for m in during)
        assert not any(ends_the_details(m) for m in during)
        # With no cell running, the kernel sends the update that ends them (120 s: a hang guard).
        try:
            while not ends_the_details(client.get_iopub_msg(timeout=120)):
                pass
        except queue.Empty:
            raise AssertionError("the details never came without a next cell") from None
        printed = run("print(pending_inside, filled[0][0] - ended, filled[0][1], w.details_pending)", [])
        words = printed.split()
        assert words[0] == "True"  # the cell itself was not slowed down
        assert float(words[1]) >= wait - 0.2, words  # after the wait given to the page, not at once
        assert words[2:] == ["True", "False"]
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)


def test_selecting_a_node_of_a_large_run_records_its_details_first(monkeypatch):
    monkeypatch.setattr(record_details, "IN_FULL_NODES", 0)
    widget = show(Canonical(), canonical_inputs(), loss_fn=loss_fn)
    assert widget.details_pending
    assert widget.select("SubBackward0_0")
    assert not widget.details_pending and widget.diagnosis["pending"] is False
    assert widget.inspector["grad_inputs"][0]["value"] is not None


def test_vanishing_gradients_are_diagnosed_and_a_click_selects_the_layer():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=32, inputs=8, classes=3)
    x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
    widget = show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    expected = hookviz.diagnose(widget.run)
    assert expected and {f.kind for f in expected} == {"vanishing"}
    diagnosis = widget.diagnosis
    assert diagnosis["source"] == "run" and diagnosis["error"] is None
    assert diagnosis["counts"] == {"vanishing": len(expected)}
    assert diagnosis["findings"] == findings_as_json(expected)
    nodes = {n["id"] for n in widget.graph["nodes"]}
    # The finding points at the layer's first parameter, a leaf of the graph: clicking selects it.
    first = diagnosis["findings"][0]
    assert first["node"] in nodes and first["node"].endswith(".weight")
    widget.selected = first["node"]  # the page's click on the finding
    assert widget.inspector["id"] == first["node"]
    assert_json_safe(widget)


class LogOfRelu(nn.Module):
    """log of a ReLU's output with the zeros masked out by ``where``: forward is finite where it
    is used, backward is NaN (0 * inf) at LogBackward0."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        h = self.fc(x)
        return self.out(torch.where(h > 0, torch.log(torch.relu(h)), 0)).sum()


def test_nan_origin_is_diagnosed_at_the_log():
    torch.manual_seed(0)
    widget = show(LogOfRelu(), (torch.randn(8, 4),))
    findings = widget.diagnosis["findings"]
    assert findings == findings_as_json(hookviz.diagnose(widget.run))
    assert widget.diagnosis["counts"]["nan"] >= 1
    backward = next(f for f in findings if "in backward" in f["message"])
    assert backward["kind"] == "nan" and backward["node"] == "LogBackward0_0"
    # Plain PyTorch agrees: the gradient that leaves log is where NaN first appears.
    torch.manual_seed(0)
    model, x = LogOfRelu(), torch.randn(8, 4)
    h = model.fc(x)
    relu = torch.relu(h)
    logged = torch.log(relu)
    seen = {}

    def note(where):
        def hook(grad):
            seen[where] = torch.isnan(grad).any().item()

        return hook

    logged.register_hook(note("into log"))
    relu.register_hook(note("out of log"))
    model.out(torch.where(h > 0, logged, 0)).sum().backward()
    assert seen == {"into log": False, "out of log": True}
    assert widget.select(backward["node"])
    assert_json_safe(widget)


def test_diagnosis_follows_every_rerun(widget):
    assert widget.diagnosis["findings"] == []
    assert widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad * inf")
    assert widget.rerun()
    findings = widget.diagnosis["findings"]
    # The baseline had no finding: each one now is the edit's doing, and says so.
    assert findings == [{**f, "from_edit": True} for f in findings_as_json(hookviz.diagnose(widget.run))]
    assert any(f["kind"] == "nan" and f["node"] == "SubBackward0_0" for f in findings)
    assert widget.diagnosis["counts"]["nan"] == sum(f["kind"] == "nan" for f in findings)
    widget.reset_edits()
    assert widget.rerun()
    assert widget.diagnosis["findings"] == [] and widget.diagnosis["error"] is None


def test_dead_gradients_made_by_the_users_own_zeroing_edit_say_so():
    """``grad * 0`` on the head's grad_input kills every gradient below it: the banner reports the
    blocks as dead, each finding marked as the edit's doing, and the head's own weight (whose
    gradient the edit does not touch) as healthy; after Reset and a re-run, nothing."""
    torch.manual_seed(0)
    widget = show(Deep(3), (torch.randn(3, 4),))
    assert widget.diagnosis["findings"] == []
    assert widget.apply_edit("head", "grad_input[0]", "grad * 0") and widget.rerun()
    findings = widget.diagnosis["findings"]
    # one grouped finding for the layers in a row (nearest the loss first), each one named
    assert {m for f in findings if f["kind"] == "dead" for m in f["modules"] or [f["module"]]} == {
        f"blocks.{i}.{part}" for i in range(3) for part in ("fc", "norm")
    }
    assert findings and all(f["from_edit"] for f in findings)
    assert widget.run.leaf_grad("blocks.0.fc.weight").count_nonzero() == 0
    assert widget.run.leaf_grad("head.weight").count_nonzero() > 0
    widget.reset_edits()
    assert widget.rerun() and widget.diagnosis["findings"] == []


def test_a_failing_diagnosis_is_shown_and_the_widget_keeps_going(monkeypatch):
    def broken(run, **thresholds):
        raise RuntimeError("diagnosis exploded")

    monkeypatch.setattr(widget_diagnosis, "diagnose", broken)
    widget = show(Canonical(), canonical_inputs(), loss_fn=loss_fn)
    assert widget.diagnosis["findings"] == []
    assert "diagnosis failed" in widget.diagnosis["error"]
    assert "diagnosis exploded" in widget.diagnosis["error"]
    assert widget.select("SubBackward0_0") and widget.rerun()
    assert leaf_after(widget, "x")["after"]["value"] == [16.0, -12.0]
    assert_json_safe(widget)


# ----- the gradient-flow chart as a plotly figure ------------------------------------------------


def test_chart_figure_is_the_gradient_flow_chart():
    import plotly.graph_objects as go

    torch.manual_seed(0)
    widget = show(Deep(3), (torch.randn(3, 4),))
    assert widget.apply_edit("head", "grad_input[0]", "grad * 0") and widget.rerun()
    figure = widget.chart_figure()
    assert isinstance(figure, go.Figure)
    baseline, current, zeros = figure.data
    assert (baseline.name, current.name) == ("baseline", "this run")
    chart = widget.chart
    assert list(current.x) == [hookviz.text.module_name(m, chart["root_type"]) for m in chart["modules"]]
    assert list(baseline.y) == [v if v and v > 0 else None for v in chart["baseline"]]
    # Zero norms cannot sit on a log axis: they are drawn at the floor, marked as zeros.
    index = chart["modules"].index("blocks.0.fc")
    assert chart["current"][index] == 0.0
    assert current.y[index] == chart["floor"] and baseline.y[index] > chart["floor"]
    assert "blocks.0.fc" in list(zeros.x)
    assert figure.layout.yaxis.type == "log"
    (line,) = figure.layout.shapes
    assert line.y0 == line.y1 == chart["threshold"]
    figure.to_json()  # it can be saved or shown
    # The page draws this same figure (the chart's one home): it travels in the chart traitlet.
    assert go.Figure(chart["figure"]) == figure
    assert [trace["name"] for trace in chart["figure"]["data"]] == [
        "baseline",
        "this run",
        "zero (drawn at the floor)",
    ]


def test_chart_of_many_layers_names_them_on_hover_and_draws_lines():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=CHART_MARKERS + 10, width=8, inputs=4, classes=3)
    widget = show(model, (torch.randn(3, 4),), loss_fn=lambda out: out.sum())
    chart = widget.chart
    layers = len(chart["modules"])
    assert layers == CHART_MARKERS + 10
    layout = chart["figure"]["layout"]
    assert layout["xaxis"]["showticklabels"] is False
    assert layout["xaxis"]["title"]["text"].startswith(f"{layers} modules")
    assert [trace["mode"] for trace in chart["figure"]["data"][:2]] == ["lines", "lines"]


# ----- the watch view -----------------------------------------------------------------------------


def train_under_watch(model, steps=4, inputs=8, classes=3, seed=1):
    torch.manual_seed(seed)
    data = [(torch.randn(32, inputs), torch.randint(0, classes, (32,))) for _ in range(steps)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model, outputs=True) as watch:  # module groups are coloured by their outputs
        for x, labels in data:
            optimizer.zero_grad()
            F.cross_entropy(model(x), labels).backward()
            optimizer.step()
    x, labels = data[0]
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    return watch, session


def test_watch_view_colours_the_graph_by_each_steps_norms():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=16, inputs=8, classes=3, activation=nn.ReLU)
    watch, session = train_under_watch(model)
    assert watch.steps == [0, 1, 2, 3]
    widget = hookviz.show_watch(watch, session, step=1)
    assert isinstance(widget, hookviz.Widget) and widget.watch_view["step"] == 1
    parameters = {n for n, _ in model.named_parameters()}
    modules = {n for n, _ in model.named_modules()}
    graph = widget.graph
    for step in (3, 0, 2):
        reply = widget.handle_message({"type": "watch_step", "step": step})
        assert reply["ok"], reply
        view = widget.watch_view
        norms = watch.norms(step)
        assert view["step"] == step and view["index"] == watch.steps.index(step)
        assert view["steps"] == watch.steps
        assert view["norms"] == {name: widget_data.json_float(v) for name, v in norms.items()}
        node_norms = view["node_norms"]
        # Parameter leaves by name; module groups and module-view nodes by the module's output.
        coloured_leaves, coloured_groups = set(), set()
        for item in graph["nodes"]:
            if item["id"] in parameters:
                assert node_norms[item["id"]] == norms[item["id"]]
                coloured_leaves.add(item["id"])
            else:
                assert item["id"] not in node_norms  # ops and forward arguments stay grey
        for group in graph["groups"]:
            if group["module"] in modules:
                assert node_norms[group["id"]] == norms[group["module"]]
                coloured_groups.add(group["module"])
            else:  # what loss_fn built is no module of the model
                assert group["id"] not in node_norms
        assert coloured_leaves == parameters and len(coloured_groups) > 0
        # The numbers are plain PyTorch's: the parameter's gradient norm at that step.
        assert norms["0.weight"] == watch.history.column("0.weight")[watch.steps.index(step)]
        assert widget.diagnosis["source"] == "watch" and widget.diagnosis["step"] == step
        assert widget.diagnosis["findings"] == findings_as_json(watch.diagnose(step))
    low, high = view["color_range"]["lo"], view["color_range"]["hi"]
    all_norms = [v for v in watch.history.norm.flatten().tolist() if v == v and v > 0]
    assert 10**low <= min(all_norms) and max(all_norms) <= 10**high
    heatmap = widget.watch_heatmap
    assert heatmap["data"][0]["type"] == "heatmap"
    assert heatmap["data"][0]["x"] == watch.steps
    assert heatmap["data"][0]["y"] == json.loads(watch.heatmap().to_json())["data"][0]["y"]
    assert_json_safe(widget)
    # The session's own runs happened after the watch closed: no step was added.
    assert watch.steps == [0, 1, 2, 3]

    assert widget.handle_message({"type": "hide_watch"})["ok"]
    assert widget.watch_view == {} and widget.watch_heatmap == {}
    assert widget.diagnosis["source"] == "run"


def test_the_default_watch_colours_module_groups_by_their_parameters_gradients():
    # Without outputs=True the watch has no module-output norms: a module group takes the 2-norm of
    # all its parameters' gradients together, checked against a plain-PyTorch twin's .grad.
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=16, inputs=8, classes=3, activation=nn.ReLU)
    twin = copy.deepcopy(model)
    torch.manual_seed(1)
    data = [(torch.randn(32, 8), torch.randint(0, 3, (32,))) for _ in range(2)]
    plain_steps = []
    for module, record in ((model, None), (twin, plain_steps)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        watcher = hookviz.watch(module) if record is None else contextlib.nullcontext()
        with watcher as watch:
            for x, labels in data:
                optimizer.zero_grad()
                F.cross_entropy(module(x), labels).backward()
                if record is not None:
                    record.append({n: p.grad.detach().clone() for n, p in module.named_parameters()})
                optimizer.step()
        if record is None:
            model_watch = watch
    x, labels = data[0]
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    widget = hookviz.show_watch(model_watch, session, step=1)
    node_norms = widget.watch_view["node_norms"]
    compared = 0
    for group in widget.graph["groups"]:
        module = group["module"]
        # the root module ("") holds every parameter
        grads = [g for n, g in plain_steps[1].items() if n.startswith(f"{module}." if module else "")]
        if not grads:  # what loss_fn built; a module without parameters
            assert group["id"] not in node_norms
            continue
        expected = torch.linalg.vector_norm(torch.cat([g.flatten().double() for g in grads])).item()
        assert node_norms[group["id"]] == pytest.approx(expected, rel=1e-6), module
        compared += 1
    assert compared == len(
        [m for m, mod in model.named_modules() if next(mod.parameters(), None) is not None]
    )


def test_watch_banner_shows_the_steps_findings():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=32, inputs=8, classes=3)
    watch, session = train_under_watch(model, steps=2)
    widget = Widget(session).show_watch(watch, step=0)
    expected = watch.diagnose(0)
    assert expected and widget.diagnosis["findings"] == findings_as_json(expected)
    assert widget.diagnosis["counts"]["vanishing"] == sum(f.kind == "vanishing" for f in expected)
    # A watch finding points at a parameter: a leaf of the graph, so a click selects it.
    node = widget.diagnosis["findings"][0]["node"]
    widget.selected = node  # the page's click on the finding
    assert widget.inspector["id"] == node
    # A re-run keeps the watch view (and its banner) on screen.
    assert widget.rerun()
    assert widget.watch_view["step"] == 0 and widget.diagnosis["source"] == "watch"


def test_watch_view_refuses_bad_steps_and_bad_watches(widget):
    assert not widget.watch_step(0)
    assert "show_watch" in widget.errors["watch"]
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=8, classes=3)
    with pytest.raises(hookviz.WatchError, match="no recorded step"):
        with hookviz.watch(model) as empty:
            pass
        hookviz.show_watch(empty, hookviz.Session(model, (torch.randn(2, 8),)))
    with pytest.raises(hookviz.WatchError, match="needs a hookviz.Watch"):
        widget.show_watch("not a watch")
    watch, session = train_under_watch(model, steps=2)
    with pytest.raises(hookviz.WatchError, match="needs a Session"):
        hookviz.show_watch(watch, None)
    shown = hookviz.show_watch(watch, session)
    assert shown.watch_view["step"] == 1
    for bad in (5, "1", True, None, 1.0):
        reply = shown.handle_message({"type": "watch_step", "step": bad})
        assert not reply["ok"] and reply["error"] is None
        assert "was not kept" in shown.errors["watch"] and shown.watch_view["step"] == 1
    assert shown.watch_step(0) and "watch" not in shown.errors
    with pytest.raises(hookviz.WatchError, match="was not kept"):
        shown.show_watch(watch, step=7)


def test_selecting_what_got_no_gradient_shows_why():
    torch.manual_seed(0)
    widget = show(NoGradGate(), (torch.randn(2, 3),), input_grads=True)
    assert widget.select("module:gate")
    assert "ran under torch.no_grad()" in widget.inspector["explanation"]
    assert widget.select("x") and widget.inspector.get("asked_grad") is True
    assert widget.select("module:fc") and "explanation" not in widget.inspector


def test_colour_scale_is_fixed_by_the_baseline_run(widget):
    scale = widget.graph["color_range"]
    widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    assert widget.rerun()
    # An unchanged leaf keeps its colour: the range is the baseline's, the edited norms saturate.
    assert widget.graph["color_range"] == scale
    norms = [float(n["norm"]) for n in widget.graph["nodes"] if n["norm"] is not None]
    assert max(norms) > 10 ** scale["hi"]


def test_save_html_writes_one_self_contained_page(widget, tmp_path):
    import base64
    import gzip
    import re

    widget.select("SubBackward0_0")
    path = widget.save_html(tmp_path / "canonical.html", title="2x + 3y - 5z")
    page = path.read_text()
    # Nothing is loaded from elsewhere: no script or style by URL, the bundle is inside.
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page)
    bundle = re.search(r'<script type="text/plain" id="hookviz-esm">([^<]*)</script>', page)
    static = (Path(widget_data.__file__).parent / "static" / "widget.js").read_bytes()
    assert gzip.decompress(base64.b64decode(bundle.group(1))) == static
    state = json.loads(
        re.search(r'id="hookviz-state">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</")
    )
    assert state["graph"] == widget.graph and state["collapsed"] == widget.collapsed
    assert state["static_note"] and set(state["__inspectors"]) >= {"SubBackward0_0", "x", "module:"}
    assert state["__inspectors"]["SubBackward0_0"]["op"] == "SubBackward0"
    # The page runs the bundle's own code: its one script is the built loader, nothing else.
    scripts = re.findall(r'<script type="module">(.*?)</script>', page, re.S)
    loader = (Path(widget_data.__file__).parent / "static" / "saved_page.js").read_text()
    assert scripts == [loader] and "renderSaved" in loader


def test_grad_inputs_carry_their_argument_names_from_the_op_schema():
    torch.manual_seed(0)
    linear = nn.Linear(3, 2)
    widget = show(linear, (torch.randn(4, 3),), loss_fn=lambda out: out.sum())
    addmm = next(n["id"] for n in widget.graph["nodes"] if n["op"] == "AddmmBackward0")
    assert widget.select(addmm)
    # addmm(self, mat1, mat2): bias, input, weight.T; torch.addmm's documented argument order.
    assert widget.inspector["grad_input_names"] == ["self/bias", "mat1", "mat2"]
    assert grad_input_names("MulBackward0", 2) == ["self", "other"]
    assert grad_input_names("AccumulateGrad", 0) is None
    assert grad_input_names("NoSuchOpBackward0", 1) is None


def test_ops_of_one_kind_are_told_apart_by_their_constant(widget):
    hints = {n["id"]: n["hint"] for n in widget.graph["nodes"]}
    # 2*x + 3*y - 5*z: each Mul's backward multiplies by its constant.
    assert [hints[f"MulBackward0_{i}"] for i in range(3)] == ["×2", "×3", "×5"]
    assert hints["SubBackward0_0"] == "" and hints["x"] == ""
    widget.apply_edit("MulBackward0_0", "grad_inputs[0]", "grad * 10")
    assert widget.rerun()
    assert {n["id"]: n["hint"] for n in widget.graph["nodes"]}["MulBackward0_0"] == "×2"


def test_operand_hints_come_from_saved_numbers_also_in_a_lazy_run():
    """The hint is read from what the Node saved (``_saved_other``, ``_saved_alpha``, ...), so it
    needs no gradient values: a lazy run has it without filling its details."""

    class Ops(torch.nn.Module):
        def forward(self, x, y):
            a = torch.add(x / 4, y**3, alpha=2)
            b = torch.nn.functional.leaky_relu(a - y, 0.2)
            return torch.clamp(b, -1.5, 1.5) * 0.5

    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    run = hookviz.Session(Ops(), (x, y), loss_fn=lambda out: out.sum(), details="lazy").run()
    hints = {record.op: operand_hint(record) for record in run.nodes.values()}
    assert hints["DivBackward0"] == "÷4" and hints["PowBackward0"] == "^3" and hints["MulBackward0"] == "×0.5"
    assert hints["AddBackward0"] == "α=2" and hints["SubBackward0"] == ""  # alpha 1 says nothing
    assert hints["LeakyReluBackward0"] == "negative_slope=0.2"
    assert hints["ClampBackward1"] == "max=1.5, min=-1.5"
    assert run.nodes["DivBackward0_0"].constants == {"other": 4}
    assert run.details is not None and not run.details.filled


def test_ops_of_one_kind_that_saved_leaves_are_told_apart_by_those_leaves():
    """``x * y`` and ``x * z`` save no number; they save ``x`` and ``y`` / ``z`` themselves, so
    the hint names them. A parameter of the op's own module goes unnamed (its box names it); a
    tied weight from another module is named by its last two parts."""

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(5, 3)
            self.fc = torch.nn.Linear(3, 3)

        def forward(self, x, y, z, tokens, labels):
            h = self.fc(x * y + x * z) + self.wte(tokens) + 0 * labels[:, None]
            return torch.nn.functional.linear(h, self.wte.weight) / z.sum()

    torch.manual_seed(0)
    x, y, z = (torch.randn(2, 3, requires_grad=True) for _ in range(3))
    tokens = torch.tensor([1, 4])
    # The token ids passed twice, as GPT-2 takes input_ids and labels: named by their first name.
    widget = show(Tied(), (x, y, z, tokens, tokens), loss_fn=lambda out: out.sum())
    run = widget.session.last_run
    hints = {record.id: operand_hint(record) for record in run.nodes.values()}
    assert [hints["MulBackward0_0"], hints["MulBackward0_1"]] == ["x×y", "x×z"]
    addmm = [r for r in run.nodes.values() if r.op == "AddmmBackward0"]
    assert len(addmm) == 1 and addmm[0].module == "fc" and hints[addmm[0].id] == ""
    assert {s.name: s.of for s in addmm[0].saved}["mat2"] == "fc.weight"  # weight.t(), a view
    mm = next(r for r in run.nodes.values() if r.op == "MmBackward0")
    assert mm.module == "" and hints[mm.id] == "wte.weight"
    assert hints["EmbeddingBackward0_0"] == "tokens"
    # The inspector says where each saved tensor came from.
    assert widget.select("MulBackward0_1")
    assert {s["name"]: s["of"] for s in widget.inspector["saved"]} == {"self": "x", "other": "z"}


def test_the_leaf_table_gives_each_gradient_its_norm_min_max_and_exact_values_up_to_16_elements():
    torch.manual_seed(0)
    # weights of 32 and 24 elements (shown as norm, min, max), biases of 8 and 3 (shown whole);
    # the second layer's weight is [3, 8] and the first's [8, 4]: two shapes of other sizes
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    x = torch.randn(5, 4)
    widget = hookviz.show(model, (x,), loss_fn=lambda out: out.pow(2).sum())
    plain = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    plain.load_state_dict(model.state_dict())
    plain(x).pow(2).sum().backward()
    compared = 0
    for name, parameter in plain.named_parameters():
        compared += 1
        row = leaf_after(widget, name)["after"]
        grad = parameter.grad
        assert row["shape"] == list(grad.shape) and row["numel"] == grad.numel()
        assert row["norm"] == pytest.approx(grad.norm().item(), rel=1e-6)
        assert (row["min"], row["max"]) == (grad.min().item(), grad.max().item())
        assert row["value"] == (grad.tolist() if grad.numel() <= 16 else None)
    assert compared == 4 == len(widget.leaf_summary)
    assert_json_safe(widget)
    # A NaN gradient's values are written as the string "nan", which JSON can carry.
    nan = hookviz.show(nn.Linear(2, 2), (torch.ones(1, 2),), loss_fn=lambda out: (out * math.nan).sum())
    assert leaf_after(nan, "bias")["after"]["value"] == ["nan", "nan"]
    assert_json_safe(nan)


def test_a_module_box_sums_the_nodes_of_every_module_inside_it():
    torch.manual_seed(0)
    model = ResidualStack(3, width=4)
    handle = model.blocks[1].norm.register_forward_hook(lambda module, args, output: None)
    try:
        widget = hookviz.show(model, (torch.randn(2, 4),))
    finally:
        handle.remove()
    nodes, groups = widget.graph["nodes"], {g["module"]: g for g in widget.graph["groups"]}
    assert {"blocks", "blocks.1", "blocks.1.norm", "head"} <= set(groups)
    assert groups[""]["label"] == "ResidualStack (root)"  # the model's own box holds all but the loss
    compared = 0
    for module, group in groups.items():
        if module == "":
            inside = [n for n in nodes if n["module"] != "(loss)"]
        else:
            inside = [n for n in nodes if n["module"] == module or n["module"].startswith(module + ".")]
        assert group["size"] == len(inside) > 0
        assert group["nan"] == any(n["nan"] for n in inside)
        # a module's own hook counts in its own box; its nodes' hooks in every box around them
        assert group["user_hooks"] == sum(n["user_hooks"] for n in inside) + (module == "blocks.1.norm")
        compared += 1
    assert compared == len(groups)


class LossInside(nn.Module):
    """Computes its loss in its own forward, after its last submodule (as Hugging Face models do)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.fc = nn.Linear(4, 3)

    def forward(self, x, labels):
        return F.cross_entropy(self.fc(x * self.scale).view(-1, 3), labels)


def test_the_ops_a_model_runs_after_its_last_submodule_are_drawn_in_the_loss_box():
    torch.manual_seed(0)
    x, labels = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    widget = hookviz.show(LossInside(), (x, labels))
    boxes = {n["id"]: n["module"] for n in widget.graph["nodes"]}
    in_loss = {node for node, module in boxes.items() if module == "(loss)"}
    assert {"ViewBackward0_0", "LogSoftmaxBackward0_0", "NllLossBackward0_0"} <= in_loss
    assert boxes["MulBackward0_0"] == ""  # x * scale runs before fc: not the loss
    assert {n for n in in_loss if not n.startswith(("View", "LogSoftmax", "NllLoss"))} == set()
    assert all(widget.run.nodes[node].module == "" for node in in_loss)  # the records are unchanged
    assert widget.run.loss_ops == in_loss  # the run decides, the page draws what it decided
    assert "(loss)" in {g["module"] for g in widget.graph["groups"]}
    # With a loss_fn, its ops alone are the (loss) box; a model of root ops alone has none.
    with_fn = hookviz.show(nn.Linear(4, 3), (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    assert {n["module"] for n in with_fn.graph["nodes"] if n["kind"] == "op"} == {"", "(loss)"}
    assert with_fn.run.loss_ops == {n for n, record in with_fn.run.nodes.items() if record.module == "(loss)"}
    root_only = hookviz.show(Scaled(), (x,))
    assert {n["module"] for n in root_only.graph["nodes"]} == {""}
    assert root_only.run.loss_ops == frozenset()


class Scaled(nn.Module):
    """Root ops alone: no submodule, so nothing runs after one."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return (x * self.scale).sum()


def test_the_page_gets_an_unchanged_leafs_summary_once(widget):
    def sent_rows():
        return {row["name"]: row for row in json.loads(bytes(widget.get_state()["leaf_summary"]))}

    first = sent_rows()
    assert set(first) == {"x", "y", "z"}
    assert all("after" not in row and row["before"]["value"] for row in first.values())
    send = widget.handle_message
    assert send({"type": "apply_edit", "target": "x", "slot": "grad", "expression": "grad * 3"})["ok"]
    assert send({"type": "rerun"})["ok"]
    edited = sent_rows()
    assert edited["x"]["changed"] and edited["x"]["after"]["value"] == [48.0, -36.0]
    assert edited["x"]["before"] == first["x"]["before"]
    assert "after" not in edited["y"] and "after" not in edited["z"]


def test_in_a_kernel_the_widget_opens_its_comm_after_its_first_run():
    """The comm to the page opens once the first run is recorded: opening it sends the widget's
    bundle, which the page loads at once, and on two cores that slowed the run down."""
    from datetime import datetime

    from jupyter_client.manager import start_new_kernel

    kernel, client = start_new_kernel(kernel_name="python3")
    messages: list = []

    def run(code: str) -> None:
        reply = client.execute_interactive(code, timeout=120, output_hook=messages.append)
        assert reply["content"]["status"] == "ok", reply["content"]

    try:
        run(
            "import time, hookviz\n"
            "from hookviz.examples import Canonical, canonical_inputs\n"
            "x, y, z, target = canonical_inputs()\n"
            "losses = []\n"
            "def loss_fn(out):\n"
            "    losses.append(time.time())\n"
            "    return ((out - target) ** 2).mean()\n"
            "w = hookviz.show(Canonical(), (x, y, z), loss_fn=loss_fn)"
        )
        run("print(losses[0])")
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)
    opened = [
        m
        for m in messages
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_anywidget_id") == "hookviz.widget.widget.Widget"
    ]
    assert len(opened) == 1
    printed = next(m for m in messages if m["msg_type"] == "stream")["content"]["text"]
    recorded_at = datetime.fromtimestamp(float(printed), tz=opened[0]["header"]["date"].tzinfo)
    assert opened[0]["header"]["date"] > recorded_at


# ----- save_html: what a saved page keeps ------------------------------------------------------


def _saved_state(path):
    import re

    page = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="hookviz-state">(.*?)</script>', page, re.S).group(1))


def _tensor_records(data):
    if isinstance(data, dict):
        if "numel" in data and "shape" in data:
            yield data
        else:
            for value in data.values():
                yield from _tensor_records(value)
    elif isinstance(data, list):
        for value in data:
            yield from _tensor_records(value)


def test_saved_page_keeps_small_values_everywhere_and_large_ones_of_the_opened_and_pinned(widget, tmp_path):
    from hookviz.widget.export import SMALL_TENSOR_ELEMENTS

    widget.select("SubBackward0_0")
    inspectors = _saved_state(widget.save_html(tmp_path / "opened.html"))["__inspectors"]
    x_grad, _, _ = plain_grads()
    opened = inspectors["SubBackward0_0"]["grad_inputs"][0]
    # the opened node's values are there, as PyTorch computes them: x.grad = 2 * d loss / d(2x + 3y)
    assert opened["value"] == (x_grad / 2).tolist() == [8.0, -6.0]
    # every other tensor of the canonical run has 2 elements: its values are kept too, the
    # leaf x's own value [2, 3] among them, and no note to the page's author is shown
    elsewhere = [
        r for key, data in inspectors.items() if key != "SubBackward0_0" for r in _tensor_records(data)
    ]
    assert elsewhere and all(r["numel"] <= SMALL_TENSOR_ELEMENTS and "value" in r for r in elsewhere)
    assert inspectors["x"]["output"]["value"] == [2.0, 3.0]
    assert not [r for r in elsewhere if "note" in r]
    # every tensor keeps its statistics: the norm of the opened gradient
    assert opened["norm"] == pytest.approx(math.hypot(8, 6), rel=1e-4)

    # a larger tensor (an 8 x 16 weight) keeps its values when opened or pinned, or with "all"
    torch.manual_seed(0)
    big = show(nn.Sequential(nn.Linear(16, 8)), (torch.randn(3, 16),), loss_fn=lambda out: out.sum())
    big.select("0.bias")
    large = _saved_state(big.save_html(tmp_path / "big.html"))["__inspectors"]
    assert "value" not in large["0.weight"]["output"] and "note" not in large["0.weight"]["output"]
    assert large["0.bias"]["output"]["value"] == big.run.nodes["0.bias"].output.value.tolist()
    pinned = _saved_state(big.save_html(tmp_path / "pinned.html", pinned=["0.weight"]))["__inspectors"]
    assert pinned["0.weight"]["output"]["numel"] == 128 and "value" in pinned["0.weight"]["output"]
    everything = _saved_state(widget.save_html(tmp_path / "all.html", values="all"))["__inspectors"]
    kept = [r for data in everything.values() for r in _tensor_records(data)]
    assert kept and all("value" in r for r in kept if r["numel"] <= 16)
    with pytest.raises(hookviz.HookvizError, match="values='every'"):
        widget.save_html(tmp_path / "bad.html", values="every")


def test_saved_page_histograms_and_overviews_are_coarser_but_true():
    from hookviz.widget import export

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(96, 192), nn.Tanh(), nn.Linear(192, 4))
    x = torch.randn(32, 96)
    widget = show(model, (x,), loss_fn=lambda out: out.square().mean())
    weight = next(n["id"] for n in widget.graph["nodes"] if n["id"] == "0.weight")
    full = node_inspector_json(widget.run, weight)["grad_outputs"][0]
    saved = export._compact(full, keep_values=False)
    # 192 x 96 elements: more than the full-tensor limit, so an overview of 32 x 32 blocks
    assert len(full["overview"]) == 32 and full["value"] is None
    overview = torch.tensor(saved["overview"], dtype=torch.float64)
    assert overview.shape == (export.EXPORT_OVERVIEW_BLOCKS, export.EXPORT_OVERVIEW_BLOCKS)
    grad = model[0].weight.grad if model[0].weight.grad is not None else widget.run.leaf_grad("0.weight")
    rms = grad.double().square().mean().sqrt().item()
    # still root mean squares: their own RMS is the gradient's, within the pooling's overlap
    assert overview.square().mean().sqrt().item() == pytest.approx(rms, rel=0.05)
    counts, edges = saved["histogram"]["counts"], saved["histogram"]["edges"]
    assert len(counts) == export.EXPORT_HISTOGRAM_BINS and len(edges) == len(counts) + 1
    assert sum(counts) == sum(full["histogram"]["counts"])
    assert edges[0] == pytest.approx(full["histogram"]["edges"][0], rel=1e-2)
    assert edges[-1] == pytest.approx(full["histogram"]["edges"][-1], rel=1e-2)
    assert saved["norm"] == pytest.approx(grad.norm().item(), rel=1e-3)


def test_saved_page_keeps_a_zero_fraction_that_is_almost_one():
    from hookviz.widget import export

    class Picks(nn.Module):  # uses one element of a 100,000-element parameter
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.ones(100_000))

        def forward(self, x):
            return self.table[0] * x

    widget = show(Picks(), (torch.ones(2),), loss_fn=lambda out: out.sum())
    full = node_inspector_json(widget.run, "table")["grad_outputs"][0]
    # 1 non-zero of 100,000: at 4 significant digits 0.99999 would read 1.0, "zeros 100%"
    assert full["zero_fraction"] == 1 - 1 / 100_000
    assert export._compact(full, keep_values=False)["zero_fraction"] == full["zero_fraction"]


# ----- hookviz.show(watch): the live view ------------------------------------------------------


def _train(model, steps, poison_at=None):
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        if step == poison_at:
            with torch.no_grad():
                model[0].weight[0, 0] = float("nan")
        optimizer.zero_grad()
        F.cross_entropy(model(torch.randn(16, 8)), torch.randint(0, 3, (16,))).backward()
        optimizer.step()


def test_show_of_an_open_watch_follows_training_and_keeps_the_final_state(tmp_path):
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=16, inputs=8, classes=3)
    with hookviz.watch(model) as watch:
        view = hookviz.show(watch, every_steps=1, every_seconds=None)
        assert view.watch_view == {} and view.graph == {}  # nothing kept yet, and no graph
        _train(model, 5)
        deadline = time.monotonic() + 10  # every_steps=1: the feed sends step 4 by itself
        while view.watch_view.get("step") != 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.watch_view["step"] == watch.steps[-1] == 4 and view.watch_view["live"]
        assert view.watch_view["norms"] == pytest.approx(watch.norms())
        heatmap = view.watch_heatmap["data"][0]
        assert heatmap["x"] == watch.steps and heatmap["y"] == watch.parameter_names
        expected = [[math.log10(v) for v in watch.history.column(name)] for name in watch.parameter_names]
        assert heatmap["z"] == [[pytest.approx(v, abs=1e-3) for v in row] for row in expected]
        lines = [trace for trace in view.watch_heatmap["data"] if trace["type"] == "scatter"]
        assert [trace["name"] for trace in lines] == ["0", "2", "4", "6"]
        assert lines[0]["y"][-1] == pytest.approx(
            math.hypot(watch.norms()["0.weight"], watch.norms()["0.bias"]), rel=1e-3
        )
        _train(model, 2)
    view.live._thread.join(5)
    assert not view.live._thread.is_alive()
    assert view.watch_view["step"] == 6 and view.watch_view["live"] is False
    # a widget with no graph refuses what needs one, and says what to do
    reply = view.handle_message({"type": "rerun"})
    assert not reply["ok"] and "show_watch" in reply["error"]
    # saving the watch works as without a live view
    loaded = hookviz.load(hookviz.save(watch, tmp_path / "watch.hookviz"))
    assert loaded.steps == watch.steps == list(range(7))


def test_a_nan_step_is_shown_at_once_whatever_the_throttle():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=16, inputs=8, classes=3)
    with hookviz.watch(model) as watch:
        view = hookviz.show(watch, every_seconds=600)
        _train(model, 3)
        deadline = time.monotonic() + 10
        while view.live.updates < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.live.updates == 1 and view.diagnosis.get("counts", {}).get("nan", 0) == 0
        _train(model, 2, poison_at=0)
        deadline = time.monotonic() + 10
        while view.live.updates < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # the throttle allows one update in ten minutes: the NaN came through it
        assert view.live.updates == 2 and view.diagnosis["counts"]["nan"] == 1
        assert view.watch_view["step"] >= 3


def test_save_html_of_a_live_watch_writes_the_watch_as_it_stands(tmp_path):
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=16, inputs=8, classes=3)
    with hookviz.watch(model) as watch:
        view = hookviz.show(watch, every_seconds=600)  # one update in ten minutes: the first step's
        with pytest.raises(hookviz.WatchError, match="kept no step yet"):
            view.save_html(tmp_path / "empty.html")
        assert not (tmp_path / "empty.html").exists()
        _train(model, 4)
        open_page = _saved_state(view.save_html(tmp_path / "training.html"))
    closed_page = _saved_state(view.save_html(tmp_path / "closed.html"))
    assert watch.steps == [0, 1, 2, 3]
    for page, live in ((open_page, True), (closed_page, False)):
        assert page["watch_view"]["step"] == 3 and page["watch_view"]["live"] is live
        assert page["watch_view"]["norms"] == pytest.approx(watch.norms())
        assert page["watch_heatmap"]["data"][0]["x"] == watch.steps


def test_show_live_refuses_bad_rates():
    model = sigmoid_mlp(depth=2, width=4, inputs=2, classes=2)
    with hookviz.watch(model) as watch:
        for options, message in [
            ({"every_steps": 0}, "every_steps=0"),
            ({"every_seconds": -1}, "every_seconds=-1"),
            ({"every_seconds": None}, "give every_steps or every_seconds"),
        ]:
            with pytest.raises(hookviz.WatchError, match=message):
                hookviz.show(watch, **options)


def test_every_none_in_the_inspector_says_why():
    # The README's seed: 2x + 3y - 5z in one module; z does not require grad.
    class Seed(nn.Module):
        def forward(self, x, y, z):
            return 2 * x + 3 * y - 5 * z

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.tensor([3.0, 4.0], requires_grad=True)
    z = torch.tensor([5.0, 6.0])
    widget = show(Seed(), (x, y, z), loss_fn=torch.sum)
    assert widget.select("SubBackward0_0")
    data = widget.inspector
    assert data["grad_inputs"][1] is None and data["grad_input_names"] == ["self", "other"]
    assert data["none_text"]["grad_inputs"] == [
        None,
        "None: other (input 1) does not require grad, so autograd computes no gradient for it",
    ]
    assert data["output"] is not None and data["output_note"] is None
    assert widget.select("module:")
    data = widget.inspector
    assert data["type"] == "Seed" and data["grad_input_names"] == ["x", "y", "z"]
    # a legacy hook sits on the last op's Node (SubBackward0): its slots are that op's arguments
    assert data["output_node"] == "SubBackward0_0"
    assert [n.split(" ")[0] for n in data["legacy_grad_input_names"]] == ["self", "other"]
    assert data["legacy_grad_input"][1] is None
    assert data["none_text"]["legacy_grad_input"][1].startswith("None: other (input 1) does not require grad")
    # A module input that does not require grad: its full hook's grad_input is None, and says so.
    linear = show(nn.Linear(2, 1), (torch.ones(3, 2),), loss_fn=torch.sum, input_grads=False)
    assert linear.select("module:")
    assert linear.inspector["grad_input"] == [None]
    assert linear.inspector["none_text"]["grad_input"] == ["None: input does not require grad"]


def test_a_step_inside_one_torch_call_names_the_call_and_saved_sizes_read_in_mib():
    from hookviz.examples import TinyGPT, next_token_loss

    torch.manual_seed(0)
    model = TinyGPT(dropout=0.0)
    tokens = torch.randint(0, 1000, (2, 128))
    widget = show(model, (tokens,), loss_fn=lambda logits: next_token_loss(logits, tokens))
    run = widget.run
    biggest = max(run.nodes.values(), key=lambda n: n.saved_bytes)
    assert widget.select(biggest.id)
    data = widget.inspector
    # nn.Linear's F.linear on a 3-D input is one call from Python that makes view, t, addmm, view
    assert data["output"] is None and biggest.op == "AddmmBackward0"
    note = data["output_note"]
    assert f"one torch call from Python in {biggest.module} (Linear), whose result is ViewBackward0_" in note
    assert "scaled_dot_product_attention" not in note
    result = note.split("whose result is ")[1].split(":")[0]
    assert run.nodes[result].output is not None and run.nodes[result].module == biggest.module
    saved = {s["name"]: s for s in data["saved"]}
    assert saved["mat1"]["nbytes"] == 1572864 and saved["mat1"]["size"] == "1.5 MiB"
    assert all(s["size"].endswith(("B", "KiB", "MiB")) for s in data["saved"])


def test_each_leaf_table_column_has_one_number_format():
    # x's gradient after grad + 888888 is whole; y's is not: one column held 2.51e+6 over 5499721
    widget = show(Canonical(), canonical_inputs(), loss_fn=loss_fn)
    widget.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad * 1234567.3")
    widget.apply_edit("MulBackward0_0", "grad_inputs[0]", "grad + 888888")
    widget.rerun()
    rows = widget.leaf_summary
    assert len(rows) == 3
    for column in ("norm", "min", "max", "ratio"):
        cells = [row["text"][column] for row in rows]
        exponent = ["e+" in c or "e-" in c for c in cells if c not in ("–", "0", "NaN")]
        assert exponent and len(set(exponent)) == 1, (column, cells)

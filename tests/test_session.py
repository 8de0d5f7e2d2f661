"""Session and Run on real models, every number checked against plain PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_state, model_state
from torch import nn

import hookviz
from hookviz.data.stats_batch import SETTLE_ABOVE
from hookviz.examples import TinyGPT, canonical_inputs, next_token_loss, sigmoid_mlp
from hookviz.record import torch_compat


def values(record):
    return None if record is None else record.value.tolist()


# ------------------------------------------------------------------ the canonical example


def test_canonical_numbers(canonical):
    session, _, _, _ = canonical
    run = session.run().fill_details()
    assert run.loss.item() == 50
    assert run.leaf_grad("x").tolist() == [16, -12]
    assert run.leaf_grad("y").tolist() == [24, -18]
    assert run.leaf_grad("z").tolist() == [-40, 30]
    full = run.module_grads("")
    assert [values(r) for r in full.grad_output] == [[8, -6]]
    assert [values(r) for r in full.grad_input] == [[16, -12], [24, -18], [-40, 30]]
    legacy = run.module_grads("", legacy=True)
    assert [values(r) for r in legacy.grad_input] == [[8, -6], [-8, 6]]
    assert [values(r) for r in legacy.grad_output] == [[8, -6]]
    assert run.module_io("").output_node == "SubBackward0_0"


def test_canonical_graph_ids_ops_and_modules(canonical):
    session, _, _, _ = canonical
    run = session.run().fill_details()
    assert set(run.graph.nodes) == {
        "x",
        "y",
        "z",
        "MulBackward0_0",
        "MulBackward0_1",
        "AddBackward0_0",
        "MulBackward0_2",
        "SubBackward0_0",
        "MseLossBackward0_0",
    }
    assert run.graph.nodes["x"]["op"] == "AccumulateGrad"
    assert run.graph.nodes["SubBackward0_0"]["module"] == ""
    assert run.graph.nodes["MseLossBackward0_0"]["module"] == "(loss)"
    assert run.graph.has_edge("x", "MulBackward0_0")
    assert run.graph.has_edge("SubBackward0_0", "MseLossBackward0_0")
    # forward values: what each op computed
    assert values(run.node("MulBackward0_0").output) == [4, 6]
    assert values(run.node("SubBackward0_0").output) == [17, -7]
    # backward order: the loss first, then the last op
    assert run.node("MseLossBackward0_0").order == 0
    assert run.node("SubBackward0_0").order == 1
    assert [e.node for e in run.events if e.kind == "node"][:2] == ["MseLossBackward0_0", "SubBackward0_0"]
    assert run.node("MulBackward0_2").saved[0].name in ("other", "self")


def test_canonical_edits_rerun_and_clear(canonical):
    session, _, _, _ = canonical
    baseline = session.run()
    session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    session.edit("SubBackward0_0", "grad_inputs[1]", "grad - 777777")
    edited = session.run().fill_details()
    assert edited.forward_reused  # one backward, no second forward
    assert edited.leaf_grad("x").tolist() == [1777792, 1777764]
    assert edited.leaf_grad("y").tolist() == [2666688, 2666646]
    assert edited.leaf_grad("z").tolist() == [-3888925, -3888855]
    node = edited.node("SubBackward0_0")
    assert [values(r) for r in node.grad_inputs_before_edit] == [[8, -6], [-8, 6]]
    assert [values(r) for r in node.grad_inputs] == [[888896, 888882], [-777785, -777771]]
    assert edited.graph.nodes["SubBackward0_0"]["edited"]
    # a fresh forward gives the same gradients as the backward-only re-run
    fresh = session.run(forward=True)
    assert not fresh.forward_reused
    for name in "xyz":
        assert torch.equal(fresh.leaf_grad(name), edited.leaf_grad(name))
    difference = hookviz.diff(baseline, edited)
    assert difference.changed_leaves == ["x", "y", "z"]
    assert "SubBackward0_0" in difference.changed_nodes
    assert "MseLossBackward0_0" not in difference.changed_nodes
    assert difference.leaves["x"].before.tolist() == [16, -12]
    session.clear_edits()
    again = session.run()
    assert again.leaf_grad("x").tolist() == [16, -12]
    assert not hookviz.diff(baseline, again).changed_leaves


def test_an_edit_at_a_site_that_has_one_replaces_it(canonical):
    # One edit per site: applying the notebook's edits twice (clicked, then from a cell) gives
    # what plain PyTorch's legacy hook gives once, not the edits stacked.
    session, _, _, _ = canonical
    for _ in range(2):
        session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
        session.edit("SubBackward0_0", "grad_inputs[1]", "grad - 777777")
    assert [(e.target, str(e.slot), e.source) for e in session.edits] == [
        ("SubBackward0_0", "grad_inputs[0]", "grad + 888888"),
        ("SubBackward0_0", "grad_inputs[1]", "grad - 777777"),
    ]
    assert session.run().leaf_grad("x").tolist() == [1777792, 1777764]
    # a new expression at the root module's grad_input[0] takes the old one's place in the list
    first = session.edit("", "grad_input[0]", "grad * 2")
    second = session.edit("", "grad_input[0]", "grad * 3")
    assert first.id != second.id and [e.id for e in session.edits][2:] == [second.id]
    assert session.run().leaf_grad("x").tolist() == [3 * 1777792, 3 * 1777764]


def test_variant_without_z_gives_the_add_node_last():
    class TwoTerms(nn.Module):
        def forward(self, x, y):
            return 2 * x + 3 * y

    x, y, _, target = canonical_inputs()
    run = (
        hookviz.Session(TwoTerms(), (x, y), loss_fn=lambda out: F.mse_loss(out, target)).run().fill_details()
    )
    assert run.module_io("").output_node == "AddBackward0_0"
    # 2x+3y = [22, 18] against [9, -1]: grad_output = [13, 19]
    assert [values(r) for r in run.module_grads("", legacy=True).grad_input] == [[13, 19], [13, 19]]
    assert run.leaf_grad("x").tolist() == [26, 38]


class BlogModule(nn.Module):
    """The canonical module as a blog reader writes it: a legacy backward hook in __init__."""

    def __init__(self):
        super().__init__()
        self.register_backward_hook(self.hook)

    def hook(self, module, grad_input, grad_output):
        print("grad_input:", [g.tolist() for g in grad_input])
        return (grad_input[0] + 888888, grad_input[1] - 777777)

    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def test_users_legacy_backward_hook_is_shown_run_and_recorded(capsys):
    x, y, z, target = canonical_inputs()
    model = BlogModule()
    session = hookviz.Session(model, (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
    before = model_state(model, (x, y, z))
    run = session.run()
    assert run.leaf_grad("x").tolist() == [1777792, 1777764]
    assert [(h.kind, h.name) for h in run.module_io("").user_hooks] == [
        ("legacy backward hook", "BlogModule.hook")
    ]
    assert [h.kind for h in run.node("SubBackward0_0").user_hooks] == ["legacy backward hook"]
    (call,) = [h for h in run.hook_calls if h.kind == "legacy backward hook"]
    assert call.node == "SubBackward0_0" and call.returned
    assert [values(r) for r in call.before] == [[8, -6], [-8, 6]]
    assert [values(r) for r in call.after] == [[888896, 888882], [-777785, -777771]]
    assert capsys.readouterr().out == "grad_input: [[8.0, -6.0], [-8.0, 6.0]]\n" and run.log == []
    assert run.hooks_at("SubBackward0_0") == [call]
    assert_same_state(before, model_state(model, (x, y, z)))
    assert session.run().leaf_grad("x").tolist() == [1777792, 1777764]


def test_user_tensor_hook_and_full_backward_hook_run_as_always():
    x, y, z, target = canonical_inputs()
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    seen = []
    handle_full = model[0].register_full_backward_hook(lambda m, gi, go: seen.append("full"))
    handle_tensor = model[0].weight.register_hook(lambda g: g * 3)
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.mse_loss(out, target))
    run = session.run()
    loss = F.mse_loss(model(x), target)
    loss.backward()
    assert torch.equal(run.leaf_grad("0.weight"), model[0].weight.grad)
    assert torch.equal(run.leaf_grad("input"), x.grad)  # Sequential.forward(input)
    kinds = [h.kind for h in run.hook_calls]
    assert "tensor hook" in kinds and "full backward hook" in kinds
    assert "BackwardHookFunctionBackward" not in {d["op"] for _, d in run.graph.nodes(data=True)}
    assert [h.kind for h in run.node("0.weight").user_hooks] == ["tensor hook"]
    handle_full.remove()
    handle_tensor.remove()


def test_a_rerun_lists_the_hooks_the_model_has_at_that_run():
    # Re-runs on one retained forward share its list of the user's hooks: any hook added or removed
    # since must start a fresh forward, and the run must list the hooks as they are.
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    session = hookviz.Session(model, (torch.randn(3, 2),), loss_fn=lambda out: out.sum())
    assert session.run().node("0.weight").user_hooks == []
    again = session.run()
    assert again.forward_reused and again.node("0.weight").user_hooks == []
    accumulated = model[0].weight.register_post_accumulate_grad_hook(lambda p: None)
    with_hook = session.run()
    assert not with_hook.forward_reused
    assert [h.kind for h in with_hook.node("0.weight").user_hooks] == ["post-accumulate-grad hook"]
    forward_hook = model[1].register_forward_hook(lambda m, i, o: None)
    with_module_hook = session.run()
    assert not with_module_hook.forward_reused
    assert [h.kind for h in with_module_hook.module_io("1").user_hooks] == ["forward hook"]
    accumulated.remove()
    forward_hook.remove()
    after = session.run()
    assert after.node("0.weight").user_hooks == [] and after.module_io("1").user_hooks == []
    assert session.run().forward_reused


def test_forward_hooks_are_recorded_once_and_leaves_belong_to_their_module(capsys):
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    handle = model[0].register_forward_hook(lambda module, args, output: print("fwd", output.shape))
    session = hookviz.Session(model, (torch.ones(1, 2),), loss_fn=lambda out: out.sum(), input_grads=True)
    first, again = session.run(), session.run()
    assert [h.kind for h in first.hook_calls] == ["forward hook"]
    assert capsys.readouterr().out == "fwd torch.Size([1, 2])\n"  # once: the second run ran no forward
    assert again.forward_reused and again.hook_calls == []
    for run in (first, again):
        assert run.node("0.weight").module == "0" and run.node("input").module == ""
        assert run.graph.nodes["0.bias"]["module"] == "0"
    handle.remove()


# ------------------------------------------------------------------ every kind of site


def test_every_site_kind_matches_plain_pytorch_hooks(canonical):
    session, model, (x, y, z), target = canonical
    session.run()
    session.edit("MulBackward0_0", "grad_outputs[0]", "clamp(grad, min=0)")
    session.edit("AddBackward0_0", "grad", "grad * 2")
    session.edit("y", "grad", "grad * 3")
    session.edit("", "grad_output[0]", "grad + 1")
    session.edit("MseLossBackward0_0", "grad_inputs[0]", double_it)
    run = session.run()
    namespace = {}
    exec(session.edits_as_code(), namespace)
    handles = namespace["install_edits"](model, y=y)
    loss = F.mse_loss(model(x, y, z), target)
    namespace["install_loss_edits"](loss)
    loss.backward()
    for handle in handles:
        handle.remove()
    for name, tensor in zip("xyz", (x, y, z)):
        assert torch.equal(run.leaf_grad(name), tensor.grad), name
    assert run.leaf_grad("y").tolist() != [24, -18]


def double_it(grad):
    return grad * 2


def test_module_grad_input_edit_uses_a_full_hook_and_leaves_legacy_hooks_possible():
    x, y, z, target = canonical_inputs()
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 2))
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.mse_loss(out, target))
    base = session.run().fill_details()
    session.edit("1", "grad_input[0]", "zeros_like(grad)")
    run = session.run().fill_details()
    assert not run.forward_reused
    assert torch.equal(run.leaf_grad("0.weight"), torch.zeros(2, 2))
    assert not torch.equal(base.leaf_grad("2.weight"), torch.zeros(2, 2))
    assert torch.equal(run.leaf_grad("2.weight"), base.leaf_grad("2.weight"))
    call = run.module_io("1")
    assert torch.equal(call.grad_input[0].value, torch.zeros(2))
    assert torch.equal(call.grad_input_before_edit[0].value, base.module_io("1").grad_input[0].value)
    assert model[1]._is_full_backward_hook is None
    model[1].register_backward_hook(lambda m, gi, go: None)  # PyTorch would refuse if still marked


# ------------------------------------------------------------------ fidelity on real models


def test_transformer_leaf_grads_equal_plain_backward_bit_for_bit():
    torch.manual_seed(0)
    model = TinyGPT(vocab=300, context=24, layers=6, width=64, heads=4, dropout=0.1)
    tokens = torch.randint(0, 300, (2, 24))
    session = hookviz.Session(model, (tokens,), loss_fn=lambda out: next_token_loss(out, tokens))
    rng = torch.get_rng_state()
    run = session.run()
    assert torch.equal(torch.get_rng_state(), rng)  # the user's random stream is untouched
    loss = next_token_loss(model(tokens), tokens)  # same RNG state, same dropout masks
    loss.backward()
    assert run.loss.item() == loss.item()
    compared = 0
    for name, parameter in model.named_parameters():
        assert torch.equal(run.leaf_grad(name), parameter.grad), name
        compared += 1
    assert compared == len(list(model.parameters())) > 0
    modules = {d["module"] for _, d in run.graph.nodes(data=True)}
    assert {"blocks.5.attn.qkv", "blocks.0.mlp.1", "(loss)", "ln_f"} <= modules
    assert run.node(run.module_io("blocks.2.mlp.0").output_node).module == "blocks.2.mlp.0"
    again = session.run(forward=True)  # fresh forward with the first run's RNG state
    compared = 0
    for name in run.leaf_names:
        assert torch.equal(again.leaf_grad(name), run.leaf_grad(name)), name
        compared += 1
    assert compared == len(run.leaf_names) >= len(list(model.parameters()))


def test_saved_tensors_are_recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    data = torch.randn(3, 4)
    run = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum()).run()
    tanh = run.node("TanhBackward0_0")
    assert [(s.name, s.shape, s.dtype, s.nbytes) for s in tanh.saved] == [("result", (3, 8), "float32", 96)]
    # data does not require grad, so addmm saves only what the weight's gradient needs: the data
    assert [s.name for s in run.node("AddmmBackward0_0").saved] == ["mat1"]
    assert run.node("AddmmBackward0_0").saved_bytes == 3 * 4 * 4


@pytest.mark.skipif(
    not torch_compat.SAVED_TENSORS_HOOKS_READABLE,
    reason=f"a run inside saved-tensor hooks needs torch >= 2.8 (this is {torch.__version__})",
)
def test_users_saved_tensor_hooks_still_apply_during_a_run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    data = torch.randn(3, 4)
    run = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum()).run()
    packed = []

    def pack(tensor):
        packed.append(tensor.shape)
        return tensor.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        offloaded = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum()).run()
    assert len(packed) == sum(len(n.saved) for n in offloaded.nodes.values())  # the user's hook ran
    for name in run.leaf_names:
        assert torch.equal(run.leaf_grad(name), offloaded.leaf_grad(name))


def test_a_forward_value_overwritten_in_place_is_reported_not_misreported():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True))
    run = hookviz.Session(model, (torch.randn(2, 3),), loss_fn=lambda out: out.sum()).run().fill_details()
    assert "modified in place" in run.node("AddmmBackward0_0").output.note  # ReLU overwrote it
    relu = run.node("ReluBackward0_0").output
    assert relu.min >= 0 and relu.value is not None


def test_node_ids_are_stable_across_reruns():
    model = sigmoid_mlp(depth=4, width=8, inputs=5, classes=3)
    data = torch.randn(6, 5)
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.logsumexp(1).mean())
    first, second = session.run(), session.run(forward=True)
    assert list(first.graph.nodes) == list(second.graph.nodes)
    assert sorted(first.graph.edges) == sorted(second.graph.edges)
    assert {first.graph.nodes[n]["op"] for n in first.graph} >= {"AddmmBackward0", "SigmoidBackward0"}


def test_statistics_for_large_tensors():
    model = nn.Linear(100, 100)
    session = hookviz.Session(
        model, (torch.randn(64, 100),), loss_fn=lambda out: out.pow(2).mean(), full_tensor_limit=1000
    )
    run = session.run().fill_details()
    record = run.node("0.weight" if "0.weight" in run.nodes else "weight").grad_outputs[0]
    grad = run.leaf_grad("weight")
    assert record.value is None and record.numel == 10000
    assert record.norm == pytest.approx(grad.norm().item(), rel=1e-6)
    assert record.min == grad.min().item() and record.max == grad.max().item()
    assert sum(record.histogram[0]) == 1024


# ------------------------------------------------------------------ no side effects, bad input


def test_run_leaves_model_exactly_as_it_was(canonical):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 1))
    model.eval()
    model[0].weight.grad = torch.full((4, 3), 7.0)
    model[3].bias.requires_grad_(False)
    model[0].register_forward_hook(lambda m, a, o: None)
    data = torch.randn(5, 3)
    before = model_state(model, (data,))
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum(), input_grads=True)
    session.run()
    session.edit("0", "grad_input[0]", "grad * 2")
    session.edit("3", "grad_output[0]", "grad * 0")
    session.run()
    assert_same_state(before, model_state(model, (data,)))
    assert not data.requires_grad


class Exploding(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(2, 2), Faulty())

    def forward(self, x):
        return self.inner(x)


class Faulty(nn.Module):
    def forward(self, x):
        raise ValueError("bad shape somewhere")


def test_forward_exception_names_module_and_loses_nothing():
    model = Exploding()
    data = torch.randn(3, 2)
    before = model_state(model, (data,))
    with pytest.raises(
        hookviz.ForwardError, match=r"module 'inner.1' \(Faulty\) raised ValueError: bad shape"
    ):
        hookviz.Session(model, (data,), loss_fn=lambda out: out.sum()).run()
    assert_same_state(before, model_state(model, (data,)))


def test_loss_errors():
    data = torch.randn(3, 2)
    with pytest.raises(hookviz.LossError, match=r"shape \[3, 2\], not a scalar; pass loss_fn"):
        hookviz.Session(nn.Linear(2, 2), (data,)).run()
    frozen = nn.Linear(2, 1).requires_grad_(False)
    with pytest.raises(hookviz.LossError, match="does not require grad"):
        hookviz.Session(frozen, (data,), loss_fn=lambda out: out.sum(), input_grads=False).run()


def test_a_module_edit_on_an_inplace_module_is_refused_at_edit():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(inplace=True), nn.Linear(3, 1))
    data = torch.randn(4, 2)
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum())
    good = session.run()
    before = model_state(model, (data,))
    for slot in ("grad_input[0]", "grad_output[0]"):  # PyTorch refuses full (pre-)hooks there
        with pytest.raises(
            hookviz.EditError,
            match=r"module '1' \(ReLU\) modifies its input in place.*"
            r"ReluBackward0_0.*inplace=False",
        ):
            session.edit("1", slot, "grad * 2")
    assert session.edits == [] and session.last_run is good
    assert_same_state(before, model_state(model, (data,)))
    session.edit("ReluBackward0_0", "grad_outputs[0]", "grad * 2")  # the fix the message names
    assert not torch.equal(session.run().leaf_grad("0.weight"), good.leaf_grad("0.weight"))


def test_bad_edits_are_refused_and_the_session_is_unchanged(canonical):
    session, model, _, _ = canonical
    run = session.run()
    cases = [
        ("SubBackward0_0", "grad_inputs[0]", "grad +", hookviz.ExpressionError, "syntax error"),
        ("SubBackward0_0", "grad_inputs[0]", "__import__('os')", hookviz.ExpressionError, "not allowed"),
        ("SubBackward0_0", "grad_inputs[0]", "grad.__class__", hookviz.ExpressionError, "attribute access"),
        ("SubBackward0_0", "grad_inputs[0]", "grad ** 99999", hookviz.ExpressionError, "exponent"),
        (
            "SubBackward0_0",
            "grad_inputs[0]",
            "[1, 2, 3]",
            hookviz.EditError,
            r"shape \[3\]; expected shape \[2\]",
        ),
        ("SubBackward0_0", "grad_inputs[2]", "grad", hookviz.TargetError, "has the sites grad_inputs"),
        ("SubBackward0_1", "grad", "grad", hookviz.TargetError, "did you mean 'SubBackward0_0'"),
        ("SubBackward0_0", "grads", "grad", hookviz.EditError, "is not a hook site"),
        ("nope", "grad_input[0]", "grad", hookviz.TargetError, "unknown module"),
    ]
    for target, slot, transform, error, message in cases:
        with pytest.raises(error, match=message):
            session.edit(target, slot, transform)
    assert session.edits == [] and session.last_run is run


def test_an_edit_failing_during_backward_loses_nothing(canonical):
    session, model, inputs, _ = canonical
    good = session.run()
    before = model_state(model, inputs)
    with pytest.raises(hookviz.EditError, match=r"returned shape \[1\]; expected shape \[2\]"):
        session.edit("SubBackward0_0", "grad_inputs[0]", lambda grad: grad[:1])  # checked on a sample
    assert session.edits == []
    calls = []

    def fine_at_first(grad):  # passes the check when the edit is made, fails during backward
        calls.append(1)
        return grad if len(calls) == 1 else grad[:1]

    session.edit("SubBackward0_0", "grad_inputs[0]", fine_at_first)
    with pytest.raises(hookviz.EditError, match=r"returned shape \[1\]; expected shape \[2\]"):
        session.run()
    assert session.last_run is good
    assert_same_state(before, model_state(model, inputs))
    session.clear_edits()
    assert session.run().leaf_grad("x").tolist() == [16, -12]


def test_interrupt_inside_backward_removes_every_hook():
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    data = torch.randn(4, 2)
    calls = []

    def interrupt_once(grad):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # what the kernel's interrupt button raises
        return None

    handle = model[0].weight.register_hook(interrupt_once)
    before = model_state(model, (data,))
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum())
    with pytest.raises(KeyboardInterrupt):
        session.run()
    assert_same_state(before, model_state(model, (data,)))
    assert session.last_run is None
    run = session.run()  # and the session still works
    model(data).sum().backward()
    assert torch.equal(run.leaf_grad("0.weight"), model[0].weight.grad)
    handle.remove()


def test_devices_and_bad_devices(canonical):
    session, _, _, _ = canonical
    assert hookviz.devices()[0] == "cpu"
    with pytest.raises(hookviz.DeviceError, match="not a device"):
        session.run(device="tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(hookviz.DeviceError, match=r"'cuda:0' is not available.*\['cpu'"):
            session.run(device="cuda")
    assert session.run(device="cpu").leaf_grad("x").tolist() == [16, -12]


def test_inputs_with_history_are_boundaries():
    base = torch.tensor([1.0, 2.0], requires_grad=True)
    x = base * 2  # history from outside the call

    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.tensor([[3.0, -1.0]]))

        def forward(self, x):
            return self.weight @ x

    model = Affine()
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    assert run.graph.nodes["x"]["kind"] == "boundary"
    assert "base" not in run.graph and [n for n in run.graph if run.graph.nodes[n]["kind"] == "leaf"] == [
        "weight"
    ]
    assert torch.equal(run.leaf_grad("x"), model.weight.detach()[0])
    assert base.grad is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_rerun_on_cuda_matches_plain_backward_there(canonical):
    session, model, (x, y, z), target = canonical
    session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    session.edit("SubBackward0_0", "grad_inputs[1]", "grad - 777777")
    run = session.run(device="cuda:0")
    assert run.device == "cuda:0" and run.leaf_grad("x").device.type == "cuda"
    assert run.leaf_grad("x").tolist() == [1777792, 1777764]
    assert next(iter(model.parameters()), x).device.type == "cpu"  # the user's model stays put
    torch.manual_seed(0)
    gpt = TinyGPT(vocab=200, context=16, layers=2, width=32, heads=2, dropout=0.0).cuda()
    tokens = torch.randint(0, 200, (2, 16), device="cuda")
    gpt_run = hookviz.Session(gpt, (tokens,), loss_fn=lambda out: next_token_loss(out, tokens)).run()
    next_token_loss(gpt(tokens), tokens).backward()
    for name, parameter in gpt.named_parameters():
        assert torch.equal(gpt_run.leaf_grad(name), parameter.grad), name


def test_huggingface_bert_from_config_matches_plain_backward():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=1000, hidden_size=96, num_hidden_layers=4, num_attention_heads=4, intermediate_size=384
    )
    model = transformers.BertModel(config).train()  # dropout on: the RNG state must be reproduced
    inputs = {
        "input_ids": torch.randint(0, 1000, (2, 16)),
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
    }
    before = model_state(model)

    def loss_fn(out):  # the pooler's output too, so that every parameter gets a gradient
        return out.last_hidden_state.pow(2).mean() + out.pooler_output.pow(2).mean()

    session = hookviz.Session(model, kwargs=inputs, loss_fn=loss_fn)
    run = session.run().fill_details()
    assert_same_state(before, model_state(model))
    # The run left the RNG as it found it, so this plain forward draws the same dropout masks.
    loss_fn(model(**inputs)).backward()
    compared = 0
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name}: plain backward gave it no gradient"
        assert torch.equal(run.leaf_grad(name), parameter.grad), name
        compared += 1
    assert compared == len(list(model.parameters())) == 71
    assert "encoder.layer.3.attention.self" in run.modules
    assert "attention_mask" in run.module_io("encoder.layer.0.attention.self").inputs


class Wide(nn.Module):
    """Large gradients (summarised during backward) and an input used twice inside one module."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1100, 1100)  # 1.21M-element weight gradient: above SETTLE_ABOVE

    def forward(self, x):
        return self.fc(x) * x + x  # x feeds three Nodes of this module


def test_large_gradients_summarised_during_backward_match_plain_pytorch():
    torch.manual_seed(0)
    model = Wide()
    x = torch.randn(16, 1100, requires_grad=True)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).mean()).run().fill_details()
    model(x).pow(2).mean().backward()
    weight = run.node("fc.weight").grad_outputs[0]
    assert weight.numel == 1100 * 1100 > SETTLE_ABOVE and weight.value is None
    # Against the exact norm (float64): on CPU a float32 gradient's squares are summed in float32 by
    # torch's own kernel, which drifts by ~2e-5 over 1.2 million elements.
    assert weight.norm == pytest.approx(model.fc.weight.grad.double().norm().item(), rel=1e-4)
    assert weight.min == model.fc.weight.grad.min().item() and weight.max == model.fc.weight.grad.max().item()
    assert torch.equal(run.leaf_grad("x"), x.grad)
    (grad_input,) = run.module_grads("").grad_input  # summed over the three uses of x
    assert grad_input.norm == pytest.approx(x.grad.double().norm().item(), rel=1e-6)
    assert grad_input.mean == pytest.approx(x.grad.mean().item(), rel=1e-4, abs=1e-9)
    checked = 0
    for node in run.nodes.values():
        for record in (*node.grad_inputs, *node.grad_outputs):
            assert record is None or record.norm is not None
            checked += record is not None
    assert checked >= len(run.nodes)  # every Node has at least one gradient record


def test_a_run_leaves_the_garbage_collector_as_it_found_it():
    """No gc.disable() or gc.freeze() of the user's process: the collector runs during the
    forward, garbage made before a run is freed by a young collection after it (not moved to the
    oldest generation), and the caller's frozen objects stay frozen, on success and on error."""
    import gc
    import weakref

    seen = []

    class Probe(nn.Module):
        def forward(self, x, fail=False):
            seen.append(gc.isenabled())
            if fail:
                raise ValueError("boom")
            return (x * 2).sum()

    class Cycle:
        def __init__(self):
            self.me = self

    x = torch.randn(3, requires_grad=True)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect()
    garbage = weakref.ref(Cycle())  # only the collector can free it
    hookviz.Session(Probe(), (x,)).run()
    assert seen == [True] and gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect(1)
    assert garbage() is None
    with pytest.raises(hookviz.HookvizError):
        hookviz.Session(Probe(), (x,), kwargs={"fail": True}).run()
    assert seen == [True, True] and gc.isenabled()

    gc.freeze()  # the caller's own
    try:
        frozen = gc.get_freeze_count()
        hookviz.Session(Probe(), (x,)).run()
        assert gc.get_freeze_count() == frozen > 0
    finally:
        gc.unfreeze()


def test_the_users_hooks_print_and_warn_as_usual_and_the_process_streams_stay_put(capsys):
    """What a user's hook prints reaches the notebook (here: pytest's captured stdout) as it would
    without hookviz, its warnings are warnings; the hook sees the process's own ``sys.stdout`` /
    ``sys.stderr`` (nothing swapped in), and ``run.log`` keeps no copy."""
    import sys
    import warnings

    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    model.register_forward_hook(lambda module, args, output: print("forward hook saw", list(output.shape)))
    model.register_full_backward_pre_hook(lambda module, grad_output: warnings.warn("pre-hook", stacklevel=1))
    model.register_full_backward_pre_hook(lambda module, grad_output: print("backward pre-hook"))
    streams = (sys.stdout, sys.stderr)
    seen = []
    model.register_full_backward_pre_hook(lambda module, grad_output: seen.append((sys.stdout, sys.stderr)))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="pre-hook"):
        run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    printed = capsys.readouterr()
    assert printed.out == "forward hook saw [4, 2]\nbackward pre-hook\n"
    assert seen == [streams] and run.log == []


def test_another_thread_is_untouched_by_a_recorded_forward():
    """While hookviz records a forward in one thread, a plain forward + backward in another thread,
    with its own ``Tensor.register_hook``, runs as without hookviz: its hook's returned gradient is
    used, and the run does not list that hook (nothing process-wide is patched). The recorded
    forward's own tensor hook is recorded."""
    import threading

    inside, done = threading.Event(), threading.Event()

    def triple(grad):
        return grad * 3

    class Waits(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            h = self.lin(x)
            h.register_hook(triple)
            inside.set()
            assert done.wait(60)  # the other thread runs its step now, in the middle of this forward
            return h.sum()

    other = {}

    def plain_step():
        try:
            assert inside.wait(60)
            w = torch.ones(3, requires_grad=True)
            h = w * 2

            def others_hook(grad):
                other["seen"] = grad.clone()
                return grad * 10

            h.register_hook(others_hook)
            h.sum().backward()
            other["grad"] = w.grad.clone()
        finally:
            done.set()

    thread = threading.Thread(target=plain_step)
    thread.start()
    torch.manual_seed(0)
    model, x = Waits(), torch.randn(4, 3)
    run = hookviz.Session(model, (x,)).run()
    thread.join()
    assert torch.equal(other["seen"], torch.ones(3)) and torch.equal(other["grad"], torch.full((3,), 20.0))
    assert [(h.kind, h.name.rsplit(".", 1)[-1]) for h in run.hook_calls] == [("tensor hook", "triple")]
    model.zero_grad()
    model(x).backward()
    assert torch.equal(run.leaf_grad("lin.weight"), model.lin.weight.grad)


def test_a_failed_run_puts_the_models_state_back_too():
    """A forward that changed buffers and parameters, then a loss_fn that raises: the model's state
    is as it was before the run."""
    from zoo import ParameterWrittenUnderNoGrad, StepCounter

    for model in (StepCounter(), ParameterWrittenUnderNoGrad()):
        before = model_state(model)
        with pytest.raises(hookviz.LossError):
            hookviz.Session(model, (torch.randn(4, 3),), loss_fn=lambda out: out).run()  # not a scalar
        assert_same_state(before, model_state(model))


def test_a_lazy_module_not_yet_run_gets_an_error_naming_the_fix():
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(2, 3)
    with pytest.raises(hookviz.HookvizError, match=r"'0\.weight', '0\.bias'.*run the model once first"):
        hookviz.Session(model, (x,), loss_fn=lambda out: out.sum())
    model(x)  # the fix: one forward makes the parameters
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    model(x).sum().backward()
    assert torch.equal(run.leaf_grad("0.weight"), model[0].weight.grad)


# ------------------------------------------------------------------ small runs: every value at once


def test_a_small_run_has_every_value_after_run_with_no_further_call():
    """The first lesson: the canonical example and the forward-hooks notebook's network read
    their values straight after ``run()``, equal to plain PyTorch's."""
    from collections import OrderedDict

    from hookviz.examples import Canonical
    from hookviz.record.details import recorded_in_full

    x, y, z, target = canonical_inputs()
    run = hookviz.Session(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target)).run()
    assert recorded_in_full(run) and not run.details_pending
    assert [values(r) for r in run.module_io("").inputs.values()] == [x.tolist(), y.tolist(), z.tolist()]
    assert values(run.module_io("").output[0]) == (2 * x + 3 * y - 5 * z).tolist()
    assert [values(r) for r in run.module_grads("", legacy=True).grad_input] == [[8, -6], [-8, 6]]

    torch.manual_seed(0)
    net = nn.Sequential(OrderedDict(fc1=nn.Linear(2, 2), act=nn.ReLU(), fc2=nn.Linear(2, 1)))
    data = torch.tensor([[2.0, 1.0]])
    run = hookviz.Session(net, (data,), loss_fn=lambda out: out.sum()).run()
    fc1 = run.module_io("fc1")
    assert values(fc1.inputs["input"]) == data.tolist() and fc1.inputs["input"].mean == 1.5
    assert f"{fc1.inputs['input'].mean:.3f}" == "1.500"  # what a student prints (it raised before)
    with torch.no_grad():
        assert torch.equal(fc1.output[0].value, net.fc1(data))
    checked = 0
    for node in run.nodes.values():
        for record in (*node.grad_inputs, *node.grad_outputs):
            if record is not None and record.note == "":
                assert not record.pending and record.value is not None
                checked += 1
    assert checked == sum(
        r is not None and r.note == "" for n in run.nodes.values() for r in (*n.grad_inputs, *n.grad_outputs)
    )
    assert checked > 10


def test_a_large_run_stays_lazy_and_says_pending_where_a_value_would_be():
    """Over the rule (here 4.2M gradient elements of one 2048 x 2048 weight) a run keeps its
    norms and leaf gradients; a module call's values print as pending, and using one names the
    fix instead of a bare None."""
    from hookviz.record.details import IN_FULL_GRADIENT_ELEMENTS, recorded_in_full

    torch.manual_seed(0)
    model = nn.Linear(2048, 2048)
    x = torch.randn(1, 2048)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum()).run()
    assert model.weight.numel() == IN_FULL_GRADIENT_ELEMENTS and not recorded_in_full(run)  # and more
    assert run.details_pending
    call = run.module_io("")
    assert repr(call.inputs) == "<pending: call run.fill_details()>" and not call.inputs
    assert "inputs=<pending: call run.fill_details()>" in repr(call)
    with pytest.raises(hookviz.DetailsPending, match=r"call run.fill_details\(\) first"):
        call.inputs["input"]
    with pytest.raises(hookviz.DetailsPending):
        list(call.output)
    assert not hasattr(call.output, "value")  # an AttributeError too, for hasattr
    expected = torch.autograd.grad(model(x).pow(2).sum(), model.weight)[0]
    assert torch.equal(run.leaf_grad("weight"), expected)
    run.fill_details()
    assert torch.equal(run.module_io("").inputs["input"].value, x)


def test_details_lazy_never_fills_and_details_is_checked():
    x, y, z, target = canonical_inputs()
    from hookviz.examples import Canonical

    session = hookviz.Session(Canonical(), (x, y, z), loss_fn=lambda o: F.mse_loss(o, target), details="lazy")
    run = session.run()
    assert run.details_pending and run.module_io("").pending
    with pytest.raises(hookviz.HookvizError, match='"auto" \\(the default\\), "lazy" or "eager"'):
        hookviz.Session(Canonical(), (x, y, z), details="soon")


# ------------------------------------------------------------------ torch.func and torch.nested


class _VmappedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        return torch.func.vmap(self.linear)(x)


@pytest.mark.parametrize("details", ["auto", "lazy", "eager"])
def test_vmap_in_forward_is_recorded_its_batched_values_named_not_read(details):
    """Inside vmap an op's output is a BatchedTensor whose storage PyTorch refuses to hand out
    ("Cannot access storage of BatchedTensorImpl"); it is recorded by shape with a note, and
    every gradient (outside vmap) as usual, equal to plain PyTorch's."""
    torch.manual_seed(0)
    model, x = _VmappedLinear(), torch.randn(4, 3)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum(), details=details).run()
    run.fill_details()
    assert not run.details_pending
    inside = run.module_io("linear")  # the module vmap calls: its input and output are batched
    seen = [inside.inputs["input"], *inside.output]
    assert len(seen) == 2 and all("torch.func.vmap" in r.note and r.value is None for r in seen)
    assert [r.shape for r in seen] == [(3,), (2,)]  # per example, as the module saw them
    loss = model(x).pow(2).sum()
    expected = torch.autograd.grad(loss, [model.linear.weight, model.linear.bias])
    assert torch.equal(run.leaf_grad("linear.weight"), expected[0])
    assert torch.equal(run.leaf_grad("linear.bias"), expected[1])
    assert torch.equal(run.module_io("").inputs["x"].value, x)


def test_vmap_in_forward_shows_in_the_widget():
    from hookviz.widget.show import show

    torch.manual_seed(0)
    widget = show(_VmappedLinear(), (torch.randn(4, 3),), loss_fn=lambda out: out.sum())
    assert not widget.details_pending and widget.errors.get("details") is None
    assert widget.diagnosis["error"] is None and widget.graph["nodes"]


def test_a_nested_tensor_input_is_refused_naming_why_and_the_alternative():
    nested = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(5, 3)], layout=torch.jagged)
    with pytest.raises(hookviz.UnsupportedError, match=r"input 'input' is a nested tensor.*to_padded_tensor"):
        hookviz.Session(nn.Linear(3, 2), (nested,), loss_fn=lambda out: out.values().sum())


def test_a_lazy_run_that_turns_out_small_is_filled_in_run_or_says_why_not():
    """A model whose parameters look large (an unused 3M-element one) is recorded lazily; its run
    is small, so run() fills it. A forward that differs each call cannot be filled: the run stays
    lazy, keeps its own numbers and says why in its notes."""

    calls = []  # outside the model: hookviz puts back the attributes a forward changes

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.spare = nn.Linear(3, 2), nn.Parameter(torch.zeros(3_000_000))

        def forward(self, x):
            calls.append(x)
            return self.linear(x) * len(calls)

    torch.manual_seed(0)
    model, x = Counting(), torch.randn(4, 3)
    steady = hookviz.Session(model.linear, (x,), loss_fn=lambda out: out.sum())
    assert not steady.run().details_pending  # small from the start: one eager pass
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    assert len(calls) == 2 and run.details_pending  # recorded lazily, then refused
    assert any("not recorded at once" in note and "the loss" in note for note in run.notes)
    assert torch.equal(run.leaf_grad("linear.bias"), torch.full((2,), 4.0))  # the first call's own
    model.forward = lambda x: model.linear(x)  # deterministic now
    filled = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    assert not filled.details_pending and filled.module_io("").inputs["x"].value is not None

"""Hard cases that used to give wrong views, late errors or crashes, each checked against PyTorch."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_same_state, model_state
from torch import nn
from torch.utils.checkpoint import checkpoint
from zoo import Checkpointed, Embedded, NoGradGate, TanhMLP, TwoInputs

import hookviz
from hookviz.record import torch_compat


def _sum(out):
    return out.sum()


def test_input_gradients_are_opt_in_and_marked():
    torch.manual_seed(0)
    model, u, v = TwoInputs(), torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    run = hookviz.Session(model, (u, v), loss_fn=_sum).run()
    assert run.leaf_names[:1] == ["u"] and "v" not in run.leaf_names and run.asked_grads == []
    assert run.module_grads("b").grad_input == (None,)  # what PyTorch's full hook sees: v needs no grad
    asked = hookviz.Session(model, (u, v), loss_fn=_sum, input_grads=True).run()
    assert asked.asked_grads == ["v"] and asked.leaf_grad("v") is not None
    assert "input_grads=True asked for it" in hookviz.explain(asked, "v")
    assert not v.requires_grad


class AddsToItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x):
        x.add_(1)
        return self.fc(x)


def test_in_place_ops_on_data_never_change_the_users_tensor():
    torch.manual_seed(0)
    model, x = AddsToItsInput(), torch.randn(4, 3)
    original = x.clone()
    session = hookviz.Session(model, (x,), loss_fn=_sum)
    first, again = session.run(), session.run(forward=True)
    assert torch.equal(x, original)
    assert torch.equal(first.loss, again.loss)
    plain = copy.deepcopy(model)
    assert torch.equal(first.loss, plain(original.clone()).sum().detach())
    with pytest.raises(
        hookviz.ForwardError, match=r"input_grads=True asked for gradients of 'x'.*input_grads=False"
    ):
        hookviz.Session(model, (x,), loss_fn=_sum, input_grads=True).run()


class DoublesASavedOutput(nn.Module):
    """sigmoid saves its output for backward; mul_ then changes it: plain PyTorch refuses the backward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = torch.sigmoid(self.fc(x))
        y.mul_(2)
        return y


def test_a_saved_tensor_changed_in_place_is_refused_as_plain_pytorch_refuses_it():
    torch.manual_seed(0)
    model, x = DoublesASavedOutput(), torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    before = model_state(model)
    # PyTorch's own check refuses it (hookviz sets no saved-tensor hooks of its own), and hookviz
    # adds the fix.
    with pytest.raises(
        hookviz.BackwardError,
        match=r"modified by an inplace operation.*\[2, 3\].*output 0 of Sigmoid(.|\n)*out of place",
    ):
        hookviz.Session(model, (x,), loss_fn=_sum).run()
    assert_same_state(before, model_state(model))


# torch < 2.8 cannot hand hookviz the user's saved-tensor hooks, so there a run inside them is refused
# (test_a_run_inside_saved_tensor_hooks_is_refused_where_torch_cannot_read_them).
chains_saved_tensor_hooks = pytest.mark.skipif(
    not torch_compat.SAVED_TENSORS_HOOKS_READABLE,
    reason=f"a run inside saved-tensor hooks needs torch >= 2.8 (this is {torch.__version__})",
)


@chains_saved_tensor_hooks
def test_users_saved_tensor_hooks_switch_the_in_place_check_off_as_in_plain_pytorch():
    torch.manual_seed(0)
    model, x = DoublesASavedOutput(), torch.randn(2, 3)
    # The user's own saved-tensor hooks switch PyTorch's check off; hookviz then checks nothing
    # either, and the gradients are those of plain PyTorch under the same hooks.
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        run = hookviz.Session(model, (x,), loss_fn=_sum).run()
        model(x).sum().backward()
    assert torch.equal(run.leaf_grad("fc.weight"), model.fc.weight.grad)


@pytest.mark.skipif(torch_compat.SAVED_TENSORS_HOOKS_READABLE, reason="this torch hands the hooks over")
def test_a_run_inside_saved_tensor_hooks_is_refused_where_torch_cannot_read_them():
    torch.manual_seed(0)
    model, x = TanhMLP(), torch.randn(4, 3)
    before = model_state(model)
    packed = []

    def pack(tensor):
        packed.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with pytest.raises(
            hookviz.UnsupportedError, match=r"needs torch >= 2\.8.*outside the saved_tensors_hooks"
        ):
            hookviz.Session(model, (x,), loss_fn=_sum).run()
        assert packed == [()]  # the probe saved one 0-dim tensor; the model never ran
        assert_same_state(before, model_state(model))
        model(x).sum().backward()  # the user's hooks are still the ones set
    assert len(packed) > 1


class ReadsSavedTensorHooks(nn.Module):
    """Notes, in forward, which saved-tensor hooks are set (as the outermost caller set them)."""

    def __init__(self):
        super().__init__()
        self.fc, self.seen = nn.Linear(3, 3), []

    def forward(self, x):
        self.seen.append(torch_compat.saved_tensors_hooks_set())
        return torch.sigmoid(self.fc(x))


def test_a_run_sets_saved_tensor_hooks_only_to_chain_to_the_users():
    model, x = ReadsSavedTensorHooks(), torch.randn(2, 3)
    run = hookviz.Session(model, (x,), loss_fn=_sum, details="eager").run()
    assert model.seen == [False]  # none: PyTorch's own unpacking and version check stay on
    sigmoid = next(n for n in run.nodes.values() if n.op == "SigmoidBackward0")
    assert [(s.name, s.shape, s.nbytes) for s in sigmoid.saved] == [("result", (2, 3), 24)]


@chains_saved_tensor_hooks
def test_a_run_inside_the_users_saved_tensor_hooks_chains_to_them():
    model, x = ReadsSavedTensorHooks(), torch.randn(2, 3)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
        run = hookviz.Session(model, (x,), loss_fn=_sum, details="eager").run()
    assert model.seen == [True]  # hookviz's, chained to the user's: they say where tensors live
    sigmoid = next(n for n in run.nodes.values() if n.op == "SigmoidBackward0")
    assert [(s.name, s.shape, s.nbytes) for s in sigmoid.saved] == [("result", (2, 3), 24)]


def test_an_edit_that_cannot_apply_is_refused_at_edit():
    session = hookviz.Session(NoGradGate(), (torch.randn(2, 3),))
    with pytest.raises(hookviz.EditError, match=r"never call a full backward hook of module 'gate'.*no_grad"):
        session.edit("gate", "grad_output[0]", "grad * 2")
    wrapper = nn.Sequential(DictOutput())
    session = hookviz.Session(wrapper, (torch.randn(2, 3),), loss_fn=lambda out: out["h"].sum())
    with pytest.raises(hookviz.EditError, match="not top-level tensors"):
        session.edit("0", "grad_output[0]", "grad * 2")
    assert session.edits == []
    session.run()  # later runs still work


def test_reentrant_checkpointing_is_refused_with_the_fix():
    model = Checkpointed(reentrant=True)
    before = model_state(model)
    with pytest.raises(hookviz.UnsupportedError, match="use_reentrant=False"):
        hookviz.Session(model, (torch.randn(2, 3, requires_grad=True),), loss_fn=_sum).run()
    assert_same_state(before, model_state(model))
    assert checkpoint  # the non-reentrant kind is in the conformance zoo


def test_trying_an_edit_leaves_the_users_random_numbers_alone():
    session = hookviz.Session(TanhMLP(), (torch.randn(4, 3),), loss_fn=_sum)
    session.run()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    session.edit("fc1", "grad_output[0]", "randn_like(grad)")
    assert torch.equal(torch.rand(3), expected)


def test_a_list_literal_is_bounded_before_it_is_built():
    session = hookviz.Session(nn.Linear(500, 500), (torch.randn(1, 500),), loss_fn=_sum)
    session.run()
    with pytest.raises(hookviz.ExpressionError, match="at most 4096 numbers; this one holds 35000000"):
        session.edit("weight", "grad", "[" + ", ".join(["grad"] * 140) + "][0]")


def test_inference_mode_works_in_run_watch_diff_and_diagnose():
    torch.manual_seed(0)
    model = TanhMLP()
    with torch.inference_mode():
        data = torch.randn(4, 3)
        session = hookviz.Session(model, (data,), loss_fn=_sum)
        run = session.run()
        again = session.run(forward=True)
        assert hookviz.diff(run, again).changed_leaves == []
        assert hookviz.diagnose(run) == []  # a healthy tanh MLP: nothing to report
    plain = copy.deepcopy(model)
    plain(data.clone()).sum().backward()
    assert torch.equal(run.leaf_grad("fc1.weight"), plain.fc1.weight.grad)
    with hookviz.watch(model) as watch:
        with torch.inference_mode():
            model(data)  # no backward: nothing to watch, and no error
    assert watch.steps == []


def test_sparse_and_complex_gradients_have_statistics_in_diff_diagnose_and_watch():
    torch.manual_seed(0)
    sparse = Embedded(True)
    tokens = torch.tensor([[1, 2, 4], [4, 3, 9]])
    session = hookviz.Session(sparse, (tokens,), loss_fn=_sum)
    run = session.run().fill_details()
    record = run.node("embedding.weight").grad_outputs[0]
    assert record.nnz == 5 and record.norm > 0 and record.zero_fraction == 0.5  # tokens 1, 2, 3, 4, 9 of 10
    session.edit("embedding.weight", "grad", "grad * 2")
    assert hookviz.diff(run, session.run()).changed_leaves == ["embedding.weight"]
    # half the embedding's rows get no gradient by design (only looked-up rows do): not "dead"
    assert hookviz.diagnose(run) == []
    complex_model = nn.Linear(3, 2).to(torch.complex64)
    data = torch.randn(4, 3, dtype=torch.complex64)
    crun = hookviz.Session(complex_model, (data,), loss_fn=lambda out: out.abs().sum()).run()
    grad = crun.node("weight").grad_outputs[0]
    assert grad.norm == pytest.approx(torch.linalg.vector_norm(crun.leaf_grad("weight")).item(), rel=1e-5)
    assert "magnitude" in grad.note
    assert hookviz.diagnose(crun) == []
    for model, inputs, loss_fn, parameters in (
        (sparse, (tokens,), _sum, ["embedding.weight", "head.weight", "head.bias"]),
        (complex_model, (data,), lambda o: o.abs().sum(), ["weight", "bias"]),
    ):
        with hookviz.watch(model) as watch:
            loss_fn(model(*inputs)).backward()
        norms = watch.norms(kind="parameter")
        assert sorted(norms) == sorted(parameters)  # every parameter compared
        assert [name for name, v in norms.items() if not v > 0] == []
        model.zero_grad()


def test_every_module_alias_and_tied_weight_name_is_accepted():
    shared = nn.Linear(3, 3)
    model = nn.Module()
    model.first, model.again = shared, shared  # one module, two names
    model.head = nn.Linear(3, 3)
    model.head.weight = shared.weight  # a tied weight
    model.forward = lambda x: model.head(torch.tanh(model.first(x)))
    session = hookviz.Session(model, (torch.randn(2, 3),), loss_fn=_sum)
    run = session.run()
    assert run.module_io("again") is run.module_io("first")
    assert torch.equal(run.leaf_grad("head.weight"), run.leaf_grad("first.weight"))
    assert torch.equal(run.leaf_grad("again.weight"), run.leaf_grad("first.weight"))
    session.edit("again", "grad_output[0]", "grad * 0")
    assert torch.equal(session.run().leaf_grad("first.bias"), torch.zeros(3))


def test_a_nan_made_by_an_edit_is_blamed_on_the_edit():
    session = hookviz.Session(TanhMLP(), (torch.randn(4, 3),), loss_fn=_sum)
    assert hookviz.diagnose(session.run()) == []
    session.edit("TanhBackward0_0", "grad_inputs[0]", "grad / 0 * 0")
    findings = [f for f in hookviz.diagnose(session.run()) if f.kind == "nan"]
    assert findings[0].node == "TanhBackward0_0" and "your edit" in findings[0].message


def test_a_compiled_model_is_recorded_through_its_original_module():
    torch.manual_seed(0)
    model, data = TanhMLP(), torch.randn(4, 3)
    compiled = torch.compile(model, backend="eager")
    compiled(data)  # a warm dynamo cache
    session = hookviz.Session(compiled, (data,), loss_fn=_sum)
    run = session.run()
    assert "torch.compile" in run.notes[0]
    plain = copy.deepcopy(model)
    plain(data).sum().backward()
    assert torch.equal(run.leaf_grad("fc1.weight"), plain.fc1.weight.grad)
    session.edit("fc2", "grad_output[0]", "grad * 0")
    assert torch.equal(session.run().leaf_grad("fc1.weight"), torch.zeros(4, 3))  # not silently ignored
    outer = nn.Sequential(torch.compile(TanhMLP(), backend="eager"), nn.Linear(2, 1))
    outer(data)
    inner = hookviz.Session(outer, (data,), loss_fn=_sum).run()
    assert inner.node("AddmmBackward0_0").module == "0._orig_mod.fc1"  # ran eagerly: every op seen
    assert "torch.compile'd region '0'" in hookviz.explain(inner, "0._orig_mod.fc1")


def test_forward_passes_leave_batchnorm_statistics_as_they_were():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    data = torch.randn(8, 3)
    before = model_state(model, (data,))
    session = hookviz.Session(model, (data,), loss_fn=_sum)
    session.run()
    session.edit("1", "grad_output[0]", "grad * 2")
    session.run(forward=True)
    session.run()
    assert int(model[1].num_batches_tracked) == 0
    assert_same_state(before, model_state(model, (data,)))
    plain = copy.deepcopy(model)
    plain(data).sum().backward()
    session.clear_edits()
    assert torch.equal(session.run().leaf_grad("0.weight"), plain[0].weight.grad)


def _penalised(data):
    """A loss with a gradient penalty: it differentiates through the output (``create_graph``)."""

    def loss_fn(out):
        (grad,) = torch.autograd.grad(out.sum(), data, create_graph=True)
        return out.pow(2).sum() + grad.pow(2).sum()

    return loss_fn


def test_an_edit_and_its_code_agree_when_the_loss_differentiates():
    torch.manual_seed(0)
    model, data = TanhMLP(), torch.randn(4, 3, requires_grad=True)
    session = hookviz.Session(model, (data,), loss_fn=_penalised(data))
    base = session.run()
    session.edit("fc2", "grad_input[0]", "grad * 3")
    edited = session.run()
    assert not torch.equal(edited.leaf_grad("fc1.weight"), base.leaf_grad("fc1.weight"))
    namespace: dict = {}
    exec(session.edits_as_code(), namespace)
    twin = copy.deepcopy(model)
    twin_data = data.detach().clone().requires_grad_(True)

    handles = namespace["install_edits"](twin)
    _penalised(twin_data)(twin(twin_data)).backward()
    for handle in handles:
        handle.remove()
    for name, parameter in twin.named_parameters():
        torch.testing.assert_close(edited.leaf_grad(name), parameter.grad)


def test_a_tensor_hook_registered_inside_forward_is_listed_at_its_node():
    class Hooked(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            h = self.fc(x)
            h.register_hook(lambda grad: grad * 10)
            return torch.tanh(h)

    torch.manual_seed(0)
    model, data = Hooked(), torch.randn(4, 3)
    run = hookviz.Session(model, (data,), loss_fn=_sum).run()
    node = run.node("AddmmBackward0_0")
    assert [h.kind for h in node.user_hooks] == ["tensor hook"]
    (call,) = [h for h in run.hooks_at("AddmmBackward0_0") if h.kind == "tensor hook"]
    assert torch.equal(call.after[0].value, call.before[0].value * 10)
    plain = copy.deepcopy(model)
    plain(data).sum().backward()
    assert torch.equal(run.leaf_grad("fc.weight"), plain.fc.weight.grad)


class HalfGradient(torch.autograd.Function):
    """Sends gradient to its first input only: the path to the second stops here."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class Explained(nn.Module):
    """Every reason a hook does not fire, in one model."""

    def __init__(self):
        super().__init__()
        self.used, self.unused, self.frozen = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)
        self.under_no_grad, self.detached, self.dict_out = nn.Linear(3, 3), nn.Linear(3, 3), DictOutput()
        self.argmax, self.blocked, self.changed = ArgmaxPath(), nn.Linear(3, 3), nn.Linear(3, 3)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        with torch.no_grad():
            gate = self.under_no_grad(x)
        h = self.used(x) * gate + self.detached(x).detach() + self.frozen(x) + self.dict_out(x)["h"]
        h = HalfGradient.apply(h, self.blocked(x))
        changed = self.changed(x)
        changed.mul_(2)  # in place, after the module returned it
        return (h + changed).sum() + self.argmax(x)


class DictOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return {"h": self.fc(x)}


class ArgmaxPath(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x).argmax().float()


def test_explain_says_why_a_hook_did_not_fire():
    torch.manual_seed(0)
    model = Explained()
    run = hookviz.Session(model, (torch.randn(2, 3),)).run()
    model.used.register_full_backward_hook(lambda module, grad_input, grad_output: None)  # after forward
    assert "fires" in hookviz.explain(run, "used")
    assert "registered after this run's forward" in hookviz.explain(run, "used")
    assert "does not require grad (requires_grad=False)" in hookviz.explain(run, "frozen.weight")
    assert "ran under torch.no_grad()" in hookviz.explain(run, "under_no_grad")
    assert "used only after .detach()" in hookviz.explain(run, "detached")
    assert "ops that have no gradient (argmax" in hookviz.explain(run, "argmax.fc")
    assert "does not require grad" in hookviz.explain(run, "argmax")  # argmax's output is an integer index
    assert "not top-level tensors" in hookviz.explain(run, "dict_out")
    assert "was never called" in hookviz.explain(run, "unused")
    blocked = hookviz.explain(run, "blocked")
    assert "No path carries gradient" in blocked and "the path stops at HalfGradientBackward_0" in blocked
    assert "got no gradient" in hookviz.explain(run, "AddmmBackward0_2")  # blocked's Linear
    assert "HalfGradientBackward_0 (HalfGradientBackward) sends no gradient to it from grad_inputs[1]" in (
        hookviz.explain(run, "AddmmBackward0_2")
    )
    assert "in-place op replaced the output of module 'changed'" in hookviz.explain(run, "changed")
    assert hookviz.explain(run, "AddmmBackward0_0").endswith("ran in backward, so its Node hooks fire.")
    with pytest.raises(hookviz.TargetError, match="unknown target"):
        hookviz.explain(run, "nope")


def test_a_custom_function_node_has_its_module_saved_tensors_and_output():
    from zoo import CustomFunction

    torch.manual_seed(0)
    run = hookviz.Session(CustomFunction(), (torch.randn(4, 3),), loss_fn=_sum).run().fill_details()
    node = run.node("CubeBackward_0")
    assert node.module == "cube"
    assert [s.name for s in node.saved] == ["saved_tensors[0]", "saved_tensors[1]"]
    assert node.output is not None and node.output.shape == (4, 3)
    assert all(g is not None for g in run.module_grads("cube").grad_input)


class NoneThenTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return None, self.fc(x)


def test_an_output_entry_that_is_not_a_tensor_keeps_the_slot_numbers():
    torch.manual_seed(0)
    model = nn.Sequential()
    model.inner = NoneThenTensor()
    model.forward = lambda x: model.inner(x)[1]
    data = torch.randn(2, 3, requires_grad=True)
    session = hookviz.Session(model, (data,), loss_fn=_sum)
    base = session.run()
    assert base.module_grads("inner").grad_output[0] is None  # what PyTorch's hook sees: (None, grad)
    session.edit("inner", "grad_output[1]", "grad * 3")
    edited = session.run()
    namespace: dict = {}
    exec(session.edits_as_code(), namespace)
    twin, twin_data = copy.deepcopy(model), data.detach().clone().requires_grad_(True)
    twin.forward = lambda x: twin.inner(x)[1]
    handles = namespace["install_edits"](twin)
    twin(twin_data).sum().backward()
    for handle in handles:
        handle.remove()
    assert torch.equal(edited.leaf_grad("x"), twin_data.grad)  # the forward argument's name
    torch.testing.assert_close(edited.leaf_grad("x"), base.leaf_grad("x") * 3)


def test_show_works_on_sparse_complex_and_inference_mode_runs():
    from zoo import Embedded

    torch.manual_seed(0)
    widgets = [
        hookviz.show(Embedded(True), (torch.tensor([[1, 2, 4]]),), loss_fn=_sum),
        hookviz.show(
            nn.Linear(3, 2).to(torch.complex64),
            (torch.randn(2, 3, dtype=torch.complex64),),
            loss_fn=lambda out: out.abs().sum(),
        ),
    ]
    model = TanhMLP()
    with torch.inference_mode():
        widgets.append(hookviz.show(model, (torch.randn(2, 3),), loss_fn=_sum))
        built_inside = TanhMLP()  # its parameters are inference tensors: no autograd can use them
    with pytest.raises(hookviz.HookvizError, match="created under torch.inference_mode.*outside"):
        hookviz.Session(built_inside, (torch.randn(2, 3),), loss_fn=_sum)
    for widget in widgets:
        leaf = widget.session.last_run.leaf_names[0]
        assert widget.select(leaf) and widget.inspector["id"] == leaf
        assert not widget.errors, widget.errors


def test_node_and_leaf_edits_are_refused_when_the_loss_differentiates():
    torch.manual_seed(0)
    model, data = TanhMLP(), torch.randn(4, 3, requires_grad=True)
    session = hookviz.Session(model, (data,), loss_fn=_penalised(data))
    assert session.run().loss_differentiates
    for target, slot in (("TanhBackward0_0", "grad_inputs[0]"), ("fc1.weight", "grad")):
        with pytest.raises(hookviz.EditError, match="loss_fn differentiates.*grad_input"):
            session.edit(target, slot, "grad * 2")
    assert session.edits == []
    assert not hookviz.Session(model, (data,), loss_fn=_sum).run().loss_differentiates


# ---------------------------------------------------------------- the model and the process as found


def _plain_grads(model: nn.Module, args: tuple, loss_fn=_sum) -> tuple[torch.Tensor, dict]:
    """Loss and every parameter's ``.grad`` of one plain forward + backward on ``model``."""
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(*args))
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


class RegistersHooksInForward(nn.Module):
    """Registers hooks on each call, as some research code does: each must fire in the run that
    made it and be gone after it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.fired: list[str] = []

    def forward(self, x):
        self.lin.weight.register_hook(lambda grad: grad * 2)
        self.lin.register_forward_pre_hook(lambda module, args: self.fired.append("pre"))
        self.lin.register_forward_hook(lambda module, args, output: self.fired.append("forward"))
        self.lin.register_full_backward_hook(lambda module, grad_in, grad_out: self.fired.append("full"))
        self.lin.bias.register_post_accumulate_grad_hook(lambda tensor: self.fired.append("accumulated"))
        return torch.tanh(self.lin(x))


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_hooks_a_forward_registers_fire_in_the_run_and_are_removed_after_it():
    torch.manual_seed(0)
    model, x = RegistersHooksInForward(), torch.randn(4, 3)
    plain_loss, plain = _plain_grads(copy.deepcopy(model), (x,))
    before = model_state(model)
    session = hookviz.Session(model, (x,), loss_fn=_sum)
    runs = [session.run(), session.run(), session.run(forward=True)]
    assert [run.forward_reused for run in runs] == [False, True, False]  # the user's hooks did not change
    compared = 0
    for run in runs:
        assert torch.equal(run.loss, plain_loss)
        for name, grad in plain.items():
            assert torch.equal(run.leaf_grad(name), grad), name
            compared += 1
    assert compared == 6
    assert model.fired.count("accumulated") == 3 and model.fired.count("full") == 3
    assert model.lin._is_full_backward_hook is None
    assert not model.lin.weight._backward_hooks and not model.lin.bias._post_accumulate_grad_hooks
    assert_same_state(before, model_state(model))


class RegistersGlobalHooksInForward(nn.Module):
    """Registers, on each call, a process-wide module hook of every kind and tensor hooks on its
    inputs (a leaf and one autograd made): each must fire in the run that made it and be gone
    after it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.fired: list[str] = []
        self.handles: list = []  # the test removes those of its plain run

    def forward(self, x, y):
        note = self.fired.append
        module = torch.nn.modules.module
        self.handles += [
            module.register_module_forward_pre_hook(lambda m, args: note("pre")),
            module.register_module_forward_hook(lambda m, args, output: note("forward")),
            module.register_module_forward_hook(
                lambda m, args, kwargs, output: note("forward, kwargs"), with_kwargs=True, always_call=True
            ),
            module.register_module_full_backward_pre_hook(lambda m, grad_out: note("backward pre")),
            module.register_module_full_backward_hook(lambda m, grad_in, grad_out: note("full")),
            module.register_module_buffer_registration_hook(lambda m, name, buffer: None),
            module.register_module_module_registration_hook(lambda m, name, sub: None),
            module.register_module_parameter_registration_hook(lambda m, name, parameter: None),
            x.register_hook(lambda grad: grad * 2),
            x.register_post_accumulate_grad_hook(lambda tensor: note("accumulated")),
            y.register_hook(lambda grad: grad * 3),
        ]
        return torch.tanh(self.lin(x * y))


GLOBAL_HOOK_DICTS = [
    name
    for name, value in vars(torch.nn.modules.module).items()
    if name.startswith("_global_") and isinstance(value, dict)
]


def _global_hooks() -> dict:
    module = torch.nn.modules.module
    return {name: dict(getattr(module, name)) for name in GLOBAL_HOOK_DICTS} | {
        "full": module._global_is_full_backward_hook
    }


def _set_global_hooks(state: dict) -> None:
    # Removing the handles is not enough: PyTorch's leave the with_kwargs mark and the full flag.
    module = torch.nn.modules.module
    for name in GLOBAL_HOOK_DICTS:
        getattr(module, name).clear()
        getattr(module, name).update(state[name])
    module._global_is_full_backward_hook = state["full"]


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_process_wide_hooks_and_input_hooks_a_forward_registers_are_removed_after_the_run():
    torch.manual_seed(0)
    model, x, base = RegistersGlobalHooksInForward(), torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    base.requires_grad_()
    y = base * 1.5  # an input autograd made: its hooks are the user's graph's
    before = _global_hooks()
    assert len(GLOBAL_HOOK_DICTS) >= 8 and before["full"] is None
    try:
        plain_model = copy.deepcopy(model)
        loss = _sum(plain_model(x, y))
        plain_x, plain_base = torch.autograd.grad(loss, [x, base], retain_graph=True)
        for handle in plain_model.handles:
            handle.remove()
        _set_global_hooks(before)
        plain_fired = list(plain_model.fired)
        assert not x._backward_hooks and not x._post_accumulate_grad_hooks and not y._backward_hooks
        session = hookviz.Session(model, (x, y), loss_fn=_sum)
        runs = [session.run(), session.run(), session.run(forward=True)]
        assert [run.forward_reused for run in runs] == [False, True, False]
        for run in runs:
            assert torch.equal(run.loss, loss.detach())
            assert torch.equal(run.leaf_grad("x"), plain_x)  # x's hook doubled it, as in plain PyTorch
        assert {"pre", "forward", "forward, kwargs", "backward pre", "full"} <= set(plain_fired)
        assert set(model.fired) == set(plain_fired) | {"accumulated"}  # hookviz runs the leaf's too
        assert model.fired.count("full") == 3 * plain_fired.count("full")  # in each of the 3 backwards
        assert _global_hooks() == before  # every process-wide hook the forwards registered is gone
        assert not x._backward_hooks and not x._post_accumulate_grad_hooks and not y._backward_hooks
    finally:
        for handle in model.handles:
            handle.remove()
        _set_global_hooks(before)


class AddsAndSwaps(nn.Module):
    """Adds a buffer, a parameter, a submodule and an attribute, and swaps a submodule, in forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        self.register_buffer("seen", torch.ones(2), persistent=False)
        self.scale = nn.Parameter(torch.full((2,), 3.0))
        self.head = nn.Linear(2, 2)
        self.lin = nn.Linear(3, 2)
        self.calls = getattr(self, "calls", 0) + 1
        return self.head(self.lin(x)) * self.scale + self.seen


def test_what_a_forward_adds_or_swaps_is_put_back():
    torch.manual_seed(0)
    model, x = AddsAndSwaps(), torch.randn(4, 3)
    lin, attributes = model.lin, set(vars(model))
    plain_model = copy.deepcopy(model)
    torch.manual_seed(1)
    plain_loss, plain = _plain_grads(plain_model, (x,))
    before = model_state(model)
    torch.manual_seed(1)
    run = hookviz.Session(model, (x,), loss_fn=_sum).run()
    assert torch.equal(run.loss, plain_loss)
    for name in ("head.weight", "head.bias", "lin.weight", "scale"):
        assert torch.equal(run.leaf_grad(name), plain[name]), name
    assert model.lin is lin and set(vars(model)) == attributes and "calls" not in vars(model)
    assert list(model._modules) == ["lin"] and not model._parameters and not model._buffers
    assert model._non_persistent_buffers_set == set()
    assert_same_state(before, model_state(model))


class SetsItsBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        with torch.no_grad():
            self.lin.bias.set_(torch.full((2,), 0.5))  # Tensor.set_ passes no function mode
        return self.lin(x)


def test_a_parameter_set_in_forward_gets_its_storage_back(recwarn):
    torch.manual_seed(0)
    model, x = SetsItsBias(), torch.randn(4, 3)
    plain_loss, plain = _plain_grads(copy.deepcopy(model), (x,))
    bias, address, before = model.lin.bias, model.lin.bias.data_ptr(), model_state(model)
    run = hookviz.Session(model, (x,), loss_fn=_sum).run()
    assert torch.equal(run.loss, plain_loss) and torch.equal(run.leaf_grad("lin.bias"), plain["lin.bias"])
    assert model.lin.bias is bias and bias.data_ptr() == address
    assert_same_state(before, model_state(model))
    assert not [w for w in recwarn if "hookviz could not copy" in str(w.message)]


class ZerosItsGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        self.lin.weight.grad.zero_()
        self.lin.bias.grad = None
        return self.lin(x)


def test_grad_written_in_forward_is_put_back():
    torch.manual_seed(0)
    model, x = ZerosItsGrad(), torch.randn(4, 3)
    model.lin.weight.grad, model.lin.bias.grad = torch.ones(2, 3), torch.ones(2)
    grads = (model.lin.weight.grad, model.lin.bias.grad)
    plain = copy.deepcopy(model)
    plain.lin.weight.grad = torch.ones(2, 3)
    plain_loss = plain(x).sum()
    plain_grad = torch.autograd.grad(plain_loss, plain.lin.weight)[0]
    before = model_state(model)
    run = hookviz.Session(model, (x,), loss_fn=_sum).run()
    assert torch.equal(run.loss, plain_loss.detach()) and torch.equal(run.leaf_grad("lin.weight"), plain_grad)
    assert (model.lin.weight.grad, model.lin.bias.grad) == grads  # the same objects, by identity
    assert torch.equal(grads[0], torch.ones(2, 3)) and torch.equal(grads[1], torch.ones(2))
    assert_same_state(before, model_state(model))


def test_a_loss_fn_that_runs_backward_itself_leaves_grad_as_it_was():
    """An LBFGS-style closure sums into ``.grad`` in C++ (AccumulateGrad), where no function mode
    sees it; the run puts the user's ``.grad`` back. Without ``retain_graph`` it frees the graph
    hookviz's own backward needs, and the error says what to do."""
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    plain_loss, plain = _plain_grads(copy.deepcopy(model), (x,))
    model.weight.grad = torch.ones(2, 3)
    before = model_state(model)

    def closure(out):
        loss = out.sum()
        loss.backward(retain_graph=True)
        return loss

    run = hookviz.Session(model, (x,), loss_fn=closure).run()
    assert torch.equal(run.loss, plain_loss) and torch.equal(run.leaf_grad("weight"), plain["weight"])
    assert_same_state(before, model_state(model))
    assert torch.equal(model.weight.grad, torch.ones(2, 3)) and model.bias.grad is None

    def frees_the_graph(out):
        loss = out.sum()
        loss.backward()
        return loss

    with pytest.raises(hookviz.BackwardError, match="LBFGS closure.*without calling backward"):
        hookviz.Session(model, (x,), loss_fn=frees_the_graph).run()
    assert_same_state(before, model_state(model))


def test_post_accumulate_grad_hooks_run_as_in_plain_pytorch():
    """``r.leaf_grad`` is what a plain ``.grad`` holds after the hooks; a hook that steps an
    optimizer (optimizer-in-backward) changes no weight of the user's; ``explain`` says they ran."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)), torch.randn(5, 3)
    plain_model = copy.deepcopy(model)

    def hooks(network: nn.Module) -> None:
        def halve(tensor):
            tensor.grad.mul_(0.5)

        optimizer = torch.optim.SGD([network[2].weight], lr=0.1)

        def step(tensor):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        network[0].weight.register_post_accumulate_grad_hook(halve)
        network[2].weight.register_post_accumulate_grad_hook(step)

    hooks(model)
    hooks(plain_model)
    plain_loss, plain = _plain_grads(plain_model, (x,))
    assert plain["2.weight"] is None and not torch.equal(plain_model[2].weight, model[2].weight)
    before = model_state(model)
    run = hookviz.Session(model, (x,), loss_fn=_sum).run()
    assert torch.equal(run.loss, plain_loss)
    compared = 0
    for name, grad in plain.items():
        assert (run.leaf_grad(name) is None) if grad is None else torch.equal(run.leaf_grad(name), grad), name
        compared += 1
    assert compared == 4
    assert [(c.kind, c.where) for c in run.hook_calls if c.kind == "post-accumulate-grad hook"] == [
        ("post-accumulate-grad hook", "2.weight"),  # in the order plain backward reaches the leaves
        ("post-accumulate-grad hook", "0.weight"),
    ]
    assert_same_state(before, model_state(model))
    assert "post-accumulate-grad hook" in hookviz.explain(run, "0.weight")
    assert "halve" in hookviz.explain(run, "0.weight") and "after" in hookviz.explain(run, "0.weight")


def test_an_edit_trial_that_writes_the_weights_leaves_them_as_they_were():
    torch.manual_seed(0)
    model, x = nn.Linear(3, 2), torch.randn(4, 3)
    session = hookviz.Session(model, (x,), loss_fn=_sum)
    session.run()
    before = model_state(model)

    def zeroes_the_weight(grad):
        with torch.no_grad():
            model.weight.zero_()
        return grad * 2

    session.edit("weight", "grad", zeroes_the_weight)
    assert_same_state(before, model_state(model))


class ReadsAndPrints(nn.Module):
    """``two(h, h)`` (one tensor as two arguments: hookviz runs ``two``'s forward again to split its
    full-hook ``grad_input``) whose inner layer has a hook that prints and reads ``input()``."""

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(3, 3)

        def forward(self, a, b):
            return self.inner(a) * b

    def __init__(self):
        super().__init__()
        self.fc, self.two = nn.Linear(3, 3), self.Two()

    def forward(self, x):
        h = self.fc(x)
        return self.two(h, h)


def test_hooks_print_and_read_stdin_during_the_module_view_rerun(capsys, monkeypatch):
    import io
    import sys

    torch.manual_seed(0)
    model, x = ReadsAndPrints(), torch.randn(4, 3)
    answers = []

    def asks(module, args, output):
        print("inner ran")
        answers.append(input("continue? "))

    model.two.inner.register_forward_hook(asks)
    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\nagain\n"))
    capsys.readouterr()
    run = hookviz.Session(model, (x,), loss_fn=_sum, details="eager").run()
    # The recorded forward, then hookviz's re-run of ``two`` (plain PyTorch has no such forward).
    assert capsys.readouterr().out == "inner ran\ncontinue? inner ran\ncontinue? "
    assert answers == ["yes", "again"]
    plain = copy.deepcopy(model)
    seen = []
    plain.two.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(grad_input))
    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\n"))
    plain(x).sum().backward()
    compared = 0
    for ours, theirs in zip(run.module_grads("two").grad_input, seen[0]):
        assert torch.equal(ours.value, theirs)
        compared += 1
    assert compared == 2


def _attention_grad_inputs(device: str) -> tuple[tuple, tuple]:
    """``MultiheadAttention(x, x, x)`` with dropout in train mode on ``device``: the full backward
    hook's ``grad_input`` in plain PyTorch and in hookviz's run, from the same random state."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).to(device)
    x = torch.randn(2, 5, 8, device=device, requires_grad=True)
    plain = copy.deepcopy(attention)
    seen = []
    plain.register_full_backward_hook(lambda module, grad_input, grad_output: seen.append(grad_input))
    torch.manual_seed(1)
    if device.startswith("cuda"):
        torch.cuda.manual_seed(1)
    plain(x, x, x)[0].sum().backward()
    torch.manual_seed(1)
    if device.startswith("cuda"):
        torch.cuda.manual_seed(1)
    run = hookviz.Session(attention, (x, x, x), loss_fn=lambda out: out[0].sum(), details="eager").run()
    return tuple(record.value for record in run.module_grads("").grad_input), seen[0]


def _assert_same_grad_inputs(ours: tuple, theirs: tuple) -> None:
    compared = 0
    for mine, plain in zip(ours, theirs):
        assert torch.equal(mine, plain)
        compared += 1
    assert compared == 3


def test_attention_with_dropout_splits_its_grad_input_as_pytorch_does():
    _assert_same_grad_inputs(*_attention_grad_inputs("cpu"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_attention_with_dropout_on_cuda_splits_its_grad_input_as_pytorch_does():
    """The re-run of the module's forward draws its dropout mask from the CUDA random state the call
    had, not only the CPU's."""
    _assert_same_grad_inputs(*_attention_grad_inputs("cuda:0"))

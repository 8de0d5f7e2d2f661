"""hookviz.watch on real training loops, every number checked against plain PyTorch."""

from __future__ import annotations

import functools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_state, model_state
from torch import nn

import hookviz
from hookviz.examples import TinyGPT, next_token_loss, sigmoid_mlp
from hookviz.watching.watch import WatchError, watch


def small_mlp():
    torch.manual_seed(0)
    return sigmoid_mlp(depth=4, width=16, inputs=8, classes=3, activation=nn.ReLU)


def batches(steps, inputs=8, classes=3):
    torch.manual_seed(1)
    return [(torch.randn(32, inputs), torch.randint(0, classes, (32,))) for _ in range(steps)]


def test_statistics_per_step_match_plain_pytorch():
    model = small_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    with watch(model, outputs=True, stats_every=2) as w:
        for x, y in batches(3):
            optimizer.zero_grad()
            outputs = {}
            handles = [
                m.register_forward_hook(
                    lambda m, a, o, n=n, kept=outputs: kept.setdefault(n, o).retain_grad()
                )
                for n, m in model.named_modules()
            ]
            F.cross_entropy(model(x), y).backward()
            for handle in handles:
                handle.remove()
            plain = {n: p.grad.clone() for n, p in model.named_parameters()}
            plain |= {n: o.grad.clone() for n, o in outputs.items()}
            expected.append(plain)
            optimizer.step()
    history = w.history
    assert history.steps == [0, 1, 2] and w.step == 3 and history.full_steps == [0, 2]
    assert history.names == [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_modules()]
    compared = 0
    for row, plain in enumerate(expected):
        for column, name in enumerate(history.names):
            grad = plain[name]  # the norm: float32 squares summed as torch sums them on CPU
            assert history.norm[row, column].item() == torch.linalg.vector_norm(grad).item()
            assert history.nonfinite[row, column].item() == 0
            if row == 1 and history.kinds[column] == "parameter":  # stats_every=2: norms only
                assert math.isnan(history.max_abs[row, column])
                assert math.isnan(history.zero_fraction[row, column])
            else:
                assert history.max_abs[row, column].item() == grad.abs().max().item()
                assert history.zero_fraction[row, column].item() == (grad == 0).double().mean().item()
            compared += 1
        assert w.norms(row)["0.weight"] == pytest.approx(
            torch.linalg.vector_norm(plain["0.weight"]).item(), rel=1e-6
        )
    assert compared == 3 * len(history.names) > 0
    assert set(w.norms(1, kind="parameter")) == {n for n, _ in model.named_parameters()}
    assert set(w.norms(1, kind="output")) == {n for n, _ in model.named_modules()}
    records = history.to_records()
    assert len(records) == 3 * len(history.names) and records[0]["step"] == 0


class TwiceOut(nn.Module):
    """Returns one tensor twice: the watch hooks it twice for one column, and must count it once."""

    def __init__(self):
        super().__init__()
        self.body = small_mlp()

    def forward(self, x):
        out = self.body(x)
        return out, out


@pytest.mark.parametrize("flush_bytes", [1, 1 << 62], ids=["reduced-in-each-hook", "reduced-at-the-end"])
def test_gradients_reduced_during_or_after_the_backward_give_the_same_row(monkeypatch, flush_bytes):
    """On CPU a batch that reaches FLUSH_BYTES is reduced inside the backward's hooks; the row is the
    same as when everything waits for the end. The root's output is its last child's tensor, and
    TwiceOut returns one tensor twice: each column counts that gradient once."""
    import hookviz.watching.reduce

    monkeypatch.setattr(hookviz.watching.reduce, "FLUSH_BYTES", flush_bytes)
    model = TwiceOut()
    x, y = batches(1)[0]
    with watch(model, outputs=True) as w:
        first, second = model(x)
        (F.cross_entropy(first, y) + F.cross_entropy(second, y)).backward()
    row = w.history
    plain = TwiceOut()
    plain.load_state_dict(model.state_dict())
    out = plain.body(x)
    out.retain_grad()
    (F.cross_entropy(out, y) + F.cross_entropy(out, y)).backward()
    for name in ("", "body", "body.6"):
        column = row.names.index(name)
        expected = torch.linalg.vector_norm(out.grad).item()
        assert row.norm[0, column].item() == pytest.approx(expected, rel=1e-6)
        assert row.max_abs[0, column].item() == out.grad.abs().max().item()
    compared = 0
    for name, parameter in plain.named_parameters():
        column = row.names.index(name)
        assert row.norm[0, column].item() == pytest.approx(torch.linalg.vector_norm(parameter.grad).item())
        assert row.zero_fraction[0, column].item() == (parameter.grad == 0).double().mean().item()
        compared += 1
    assert compared == len(list(plain.parameters())) > 0


class EveryKindOfOutput(nn.Module):
    """Outputs of every kind a watch hooks: a leaf (an Identity given the input, a tensor hook), a
    Node's second output (``output_nr`` 1), a tensor two modules return (``body`` and its last
    child), a transpose (``split``'s first gradient arrives not contiguous), float64 layers, and
    modules called twice (``doubled``'s two outputs get one gradient object)."""

    def __init__(self):
        super().__init__()
        self.entry = nn.Identity()
        self.body = small_mlp()
        self.wide = nn.Linear(3, 6).double()
        self.split = SplitInTwo()
        self.mix = nn.Linear(32, 32, bias=False).double()
        self.doubled = Doubled()

    def forward(self, x):
        x = self.entry(x)
        out = self.body(x) + self.body(x * 2)
        first, second = self.split(self.wide(out.double()))
        mixed = self.mix(first.t()).t()  # first's gradient arrives as a transpose
        # doubled's two calls get one gradient object from the sum, one right after the other
        return (self.doubled(mixed) + self.doubled(second * 1.5)).float()


class Doubled(nn.Module):
    def forward(self, x):
        return x * 2


class SplitInTwo(nn.Module):
    def forward(self, x):
        return x.split(3, dim=1)


def test_every_kind_of_output_over_nan_overflow_and_every_2_matches_plain_pytorch():
    """Module outputs of every kind and the parameters, over steps with NaN, with float32 squares that
    would overflow (1e30), with a gradient that is not contiguous and float64 layers, every=2; then
    step 0 against plain PyTorch."""
    torch.manual_seed(0)
    model = EveryKindOfOutput()
    x, y = torch.randn(32, 8, requires_grad=True), torch.randint(0, 3, (32,))
    with watch(model, every=2, outputs=True) as w:
        for scale in (1.0, math.nan, 1e30, 1.0, 2.0, 1.0):
            model.zero_grad(set_to_none=True)
            (F.cross_entropy(model(x), y) * scale).backward()
            model.zero_grad(set_to_none=True)
            (F.cross_entropy(model(x), y) * scale).backward()
    history = w.history
    # every=2 keeps the even steps; the NaN steps (2, 3) and the 1e30 ones (above exploding_norm:
    # 4, 5) are alarms, kept whatever every= says
    assert history.steps == [0, 2, 3, 4, 5, 6, 8, 10]
    assert history.nonfinite[1].sum() > 0 and history.nonfinite[2].sum() > 0  # the NaN steps
    assert math.isfinite(history.norm[3].nansum().item())  # 1e30: float32 squares would overflow
    # Step 0 against plain PyTorch: each module's outputs over all its calls (body's two calls get
    # one gradient object from the sum, and count it twice), and each parameter's .grad.
    torch.manual_seed(0)
    model = EveryKindOfOutput()
    x, y = torch.randn(32, 8, requires_grad=True), torch.randint(0, 3, (32,))
    outputs: dict[str, list] = {}

    def keep(name, module, args, output):
        tensors = [output] if isinstance(output, torch.Tensor) else list({id(t): t for t in output}.values())
        for tensor in tensors:
            if tensor is not x:
                tensor.retain_grad()
            outputs.setdefault(name, []).append(tensor)

    for name, module in model.named_modules():
        module.register_forward_hook(functools.partial(keep, name))
    F.cross_entropy(model(x), y).backward()
    grads = {n: [t.grad for t in ts] for n, ts in outputs.items()}
    grads |= {n: [p.grad] for n, p in model.named_parameters()}
    assert len(grads["body"]) == len(grads["split"]) == len(grads["doubled"]) == 2
    assert grads["entry"][0] is x.grad
    compared = 0
    for name, column in zip(history.names, history.norm[0].tolist()):
        expected = math.sqrt(sum(torch.linalg.vector_norm(g.double()).item() ** 2 for g in grads[name]))
        assert column == pytest.approx(expected, rel=1e-6), name
        compared += 1
    assert compared == len(history.names) == len(grads)


def test_watch_changes_no_gradient_and_leaves_no_hook():
    torch.manual_seed(0)
    model = TinyGPT(vocab=50, context=16, layers=2, width=32, heads=2, dropout=0.0)
    tokens = torch.randint(0, 50, (2, 16))
    before = model_state(model)
    next_token_loss(model(tokens), tokens).backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    with watch(model) as w:
        next_token_loss(model(tokens), tokens).backward()
    compared = 0
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter.grad, plain[name]), name  # bit for bit
        compared += 1
    assert compared == len(plain) > 0
    assert w.norms()["wte.weight"] == pytest.approx(
        torch.linalg.vector_norm(plain["wte.weight"]).item(), rel=1e-6
    )
    model.zero_grad(set_to_none=True)
    assert_same_state(before, model_state(model))


def test_an_output_gradient_is_seen_as_its_node_receives_it_after_the_users_tensor_hooks():
    """The watch reads a module output's gradient in a pre-hook of the Node that made the output,
    so a tensor hook of the user's on that output has run first, whenever it was registered (in a
    forward hook of the module, before the watch's, or on the output after forward)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Sigmoid())
    x = torch.randn(5, 4)

    def triple_its_gradient(module, args, out):
        out.register_hook(lambda g: g * 3)  # returns None: the output stays as it is

    model[0].register_forward_hook(triple_its_gradient)
    with watch(model, outputs=True) as w:
        out = model(x)
        out.register_hook(lambda g: g * 2)  # on the Sigmoid's output, after its forward hooks
        out.sum().backward()
    norms = w.norms(kind="output")
    assert norms["1"] == pytest.approx(2 * math.sqrt(out.numel()), rel=1e-6)
    sigmoid = torch.sigmoid(model[0](x))
    received = 3 * 2 * sigmoid * (1 - sigmoid)  # what the Linear's Node receives
    assert norms["0"] == pytest.approx(torch.linalg.vector_norm(received).item(), rel=1e-6)


def test_hooks_are_removed_when_the_loop_raises():
    model = small_mlp()
    before = model_state(model)
    with pytest.raises(RuntimeError, match="boom"), watch(model):
        model(torch.randn(2, 8)).sum().backward()
        raise RuntimeError("boom")
    model.zero_grad(set_to_none=True)
    assert_same_state(before, model_state(model))
    with watch(model) as again:  # the model can be watched again after close
        model(torch.randn(2, 8)).sum().backward()
    assert again.steps == [0]


def test_every_and_bounded_memory():
    model = small_mlp()
    with watch(model, every=2, capacity=4) as w:
        for x, _ in batches(20):
            model.zero_grad()  # accumulated over 20 steps, the norms would pass exploding_norm: kept
            model(x).sum().backward()
    assert w.step == 20
    # every 2nd step, thinned twice when the 4 rows filled: 0, 8, 16 and nothing in between
    assert w.steps == [0, 8, 16] and len(w.history) == 3
    with pytest.raises(WatchError, match="step 2 is not kept.*nearest kept"):
        w.norms(2)


def test_steps_with_no_backward_and_no_step_yet():
    model = small_mlp()
    with watch(model) as w:
        model(torch.randn(2, 8))  # forward only
        with torch.no_grad():
            model(torch.randn(2, 8))
        with pytest.raises(WatchError, match="no step recorded yet"):
            w.norms()
        with pytest.raises(WatchError, match="no step recorded yet"):
            w.heatmap()
        model(torch.randn(2, 8)).sum().backward()
    assert w.steps == [0]


def test_bad_input_is_a_clear_error():
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(WatchError, match="no parameter that requires grad.*requires_grad=True"):
        watch(frozen)
    model = small_mlp()
    with watch(model):
        with pytest.raises(WatchError, match="already watched by an open watch"):
            watch(model)
        other = small_mlp()
        with watch(other) as second:  # another model can be watched at the same time
            other(torch.randn(2, 8)).sum().backward()
        assert second.steps == [0]
    with pytest.raises(WatchError, match="every=0"):
        watch(model, every=0)
    assert issubclass(WatchError, hookviz.HookvizError)


def test_nonfinite_everywhere_is_counted_and_diagnosed():
    model = small_mlp()
    with watch(model) as w:
        model(torch.full((4, 8), math.nan)).sum().backward()
    history = w.history
    column = history.names.index("0.weight")
    assert history.nonfinite[0, column].item() == model[0].weight.numel()
    findings = w.diagnose()
    assert findings[0].kind == "nan" and findings[0].step == 0
    figure = w.heatmap()
    assert figure.data[0].z[column][0] is None  # NaN shown as a gap, not a crash
    w.diagnosis_over_time()


def test_norms_only_steps_keep_tiny_huge_nan_and_zero_gradients_exact():
    # Steps 1-4 read only norms (stats_every=16): a plain step's norms come from one batched call;
    # a tiny gradient (float32 squares underflow) or a huge one (they overflow) is summed in float64
    # instead, and a huge, NaN or zero norm reads every statistic at once (an alarm).
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    x = torch.randn(4, 8)
    scales = [1.0, 1.0, 1e-30, 1e30, math.nan, 0.0]
    grads = []
    with watch(model, stats_every=16) as w:
        for scale in scales:
            model.zero_grad()
            (model(x).sum() * scale).backward()
            grads.append(model.weight.grad.clone())
    history = w.history
    column = history.names.index("weight")
    assert history.full_steps == [0, 3, 4, 5]  # step 0, then the alarms: huge, NaN, zero
    compared = 0
    for step, grad in enumerate(grads):
        norm = history.norm[step, column].item()
        exact = torch.linalg.vector_norm(grad.double()).item()
        assert norm == pytest.approx(exact, rel=1e-6, abs=0, nan_ok=True), step
        max_abs = history.max_abs[step, column].item()
        if step in (1, 2):  # norms only
            assert math.isnan(max_abs)
        else:  # the largest finite magnitude (NaN/Inf counted apart); NaN when none is finite
            finite = grad.abs()[grad.isfinite()]
            expected = finite.max().item() if finite.numel() else math.nan
            assert max_abs == pytest.approx(expected, rel=0, abs=0, nan_ok=True)
        compared += 1
    assert compared == 6 and history.norm[2, column] > 0 and math.isfinite(history.norm[3, column])
    assert history.nonfinite[4, column].item() == grads[4].isnan().sum().item() > 0
    assert history.zero_fraction[5, column].item() == 1.0


def test_vanishing_and_plots_over_steps():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=12, width=64, inputs=16, classes=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model) as w:
        for x, y in batches(3, inputs=16, classes=4):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    layers = w.layer_norms()
    assert next(iter(layers)) == "22"  # the layer nearest the loss
    expected = math.hypot(
        torch.linalg.vector_norm(model[0].weight.grad).item(),
        torch.linalg.vector_norm(model[0].bias.grad).item(),
    )
    assert layers["0"] == pytest.approx(expected, rel=1e-6)
    vanishing = {m for f in w.diagnose() if f.kind == "vanishing" for m in f.modules or (f.module,)}
    assert vanishing == {m for m, n in layers.items() if n < 1e-3 * layers["22"]} and "0" in vanishing
    heatmap = w.heatmap()
    assert list(heatmap.data[0].x) == [0, 1, 2]
    assert heatmap.data[0].z[0][2] == pytest.approx(
        math.log10(torch.linalg.vector_norm(model[0].weight.grad).item())
    )
    lines = w.lines(["0.weight", "22.weight"])
    assert [t.name for t in lines.data] == ["0.weight", "22.weight"]
    over_time = w.diagnosis_over_time()
    assert any(t.name == "vanishing" for t in over_time.data)
    with pytest.raises(WatchError, match="unknown parameter or module '0.weigth'.*did you mean '0.weight'"):
        w.lines(["0.weigth"])


def test_history_to_pandas_without_pandas_is_a_clear_error():
    model = small_mlp()
    with watch(model) as w:
        model(torch.randn(2, 8)).sum().backward()
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(WatchError, match="pip install pandas"):
            w.history.to_pandas()
    else:
        assert len(w.history.to_pandas()) == len(w.names)


def test_step_reducer_matches_direct_statistics_across_dtypes():
    """Every statistic of a step's reduction equals the one taken on the gradient alone in float64:
    half precision (norms accumulated in float64), gradients over a million elements, zeros or NaN
    only at the end, not contiguous, sparse and complex ones, NaN and Inf, a column with two
    gradients (combined), a float32 norm whose squares would overflow, and a second step."""
    from hookviz.watching.reduce import StepReducer

    torch.manual_seed(0)

    def sparse_zeros(shape, dtype=torch.float32):
        t = torch.randn(shape).to(dtype)
        t[t.abs() < 0.5] = 0
        return t

    steps = [
        [
            (0, sparse_zeros(65536, torch.float16)),
            (1, sparse_zeros(65536, torch.float16)),
            (2, sparse_zeros((256, 64), torch.bfloat16)),
            (3, sparse_zeros((64, 256), torch.bfloat16)),
            (4, sparse_zeros((300, 300))),  # larger than a stacked row
            (5, sparse_zeros(7, torch.float64)),
            (6, torch.sparse_coo_tensor([[0, 3]], [2.0, -1.0], (5,), check_invariants=True)),
            (7, torch.complex(torch.randn(8), torch.randn(8))),
            (8, torch.tensor([1.0, math.nan, math.inf, 0.0])),
            (9, sparse_zeros(32)),
            (9, sparse_zeros(32)),  # one column, two gradients (a module called twice)
            (10, torch.full((40,), 3e20)),  # float32 squares overflow; the norm must not
            (11, torch.randn(32)),  # stacked with column 9's rows, and no exact zero in it
            (12, torch.arange(32.0)),  # one exact zero
            # Too large to stack: zeros only at the end
            (13, torch.cat([torch.rand(17 * 65536) + 0.5, torch.zeros(5), torch.rand(100) + 0.5])),
            (14, sparse_zeros((1100, 1000)).t()),  # not contiguous, zeros in every row
            (15, torch.cat([torch.rand(3 * 65536) + 0.5, torch.tensor([math.nan])])),  # NaN only at the end
            (16, sparse_zeros((2, 70000), torch.float16)),  # half precision
            (17, torch.full((65537,), 3e20)),  # float32 squares overflow
        ],
        [(0, sparse_zeros(65536, torch.float16)), (2, sparse_zeros((256, 64), torch.bfloat16))],
    ]
    reducer, compared = StepReducer(), 0
    for pairs in steps:
        row = reducer(pairs, 18)
        for column in range(18):
            grads = [g for c, g in pairs if c == column]
            if not grads:
                assert row[column].isnan().all()
                continue
            dense = [g.to_dense() for g in grads]
            dense = [(g.abs() if g.is_complex() else g).double() for g in dense]
            flat = torch.cat([g.reshape(-1) for g in dense])
            finite = flat[flat.isfinite()]
            norm, max_abs, nonfinite, zero_fraction = row[column].tolist()
            assert nonfinite == (~flat.isfinite()).sum().item()
            assert zero_fraction == (flat == 0).double().mean().item()
            if nonfinite:
                assert math.isnan(norm) or math.isinf(norm)
                continue
            assert norm == pytest.approx(torch.linalg.vector_norm(flat).item(), rel=1e-5)  # float32 sums
            assert max_abs == finite.abs().max().item()
            compared += 1
    assert compared == 18  # 16 finite columns of the first step, 2 of the second
    assert reducer(steps[1], 3)[0, 3].item() == (steps[1][0][1] == 0).double().mean().item()


def test_the_usual_step_s_row_kept_unmade_reads_as_the_made_row():
    """A norms-only step of parameters 0 .. k-1 is kept as a NormsRow (no torch call on the step's
    path): made when read, it equals the row finish() makes from the same gradients, bit for bit,
    with and without columns that got no gradient; every other step is a tensor at once."""
    from hookviz.watching.history import StepInfo
    from hookviz.watching.kept_steps import KeptSteps
    from hookviz.watching.reduce import EXPLODING, NormsRow, StepReducer

    torch.manual_seed(0)
    grads = [torch.randn(16, 8), torch.randn(8), torch.randn(3, 3)]
    compared = 0
    for width in (3, 5):
        lazy, made = StepReducer(), StepReducer()
        assert lazy.add_all([0, 1, 2], grads, False, EXPLODING) is False
        made.add_all([0, 1, 2], grads, False, EXPLODING)
        row = lazy.finish_lazily(width)
        assert isinstance(row, NormsRow)
        assert row.norms == pytest.approx([g.norm().item() for g in grads], rel=1e-6)
        expected = made.finish(width)
        assert torch.equal(row.tensor().isnan(), expected.isnan())
        assert torch.equal(row.tensor().nan_to_num(), expected.nan_to_num())
        # as written out: (norm, max_abs not measured, no NaN/Inf, zero fraction not measured)
        by_hand = torch.full((width, 4), math.nan, dtype=torch.float64)
        by_hand[:3, 0] = torch.tensor([torch.linalg.vector_norm(g).item() for g in grads])
        by_hand[:3, 2] = 0.0
        assert torch.equal(expected.isnan(), by_hand.isnan())
        assert torch.allclose(expected.nan_to_num(), by_hand.nan_to_num(), rtol=1e-6)
        kept = KeptSteps(capacity=4, width=width)
        kept.keep(kept.plan("a"), row, StepInfo())
        step, read = kept.row(None)
        assert step == 0 and torch.equal(read.nan_to_num(), expected.nan_to_num())
        assert torch.equal(kept.snapshot()[1][0].isnan(), expected.isnan())
        compared += 1
    assert compared == 2
    # full statistics, a column out of order, or a NaN: a tensor
    full = StepReducer()
    full.add_all([0, 1, 2], grads, True)
    assert isinstance(full.finish_lazily(3), torch.Tensor)
    swapped = StepReducer()
    swapped.add_all([1, 0], grads[:2], False, EXPLODING)
    assert isinstance(swapped.finish_lazily(3), torch.Tensor)
    nan = StepReducer()
    nan.add_all([0], [torch.tensor([1.0, math.nan])], False, EXPLODING)
    assert isinstance(nan.finish_lazily(1), torch.Tensor)


# ---------------------------------------------------------------------------- one step per backward


def test_two_threads_backpropagating_under_one_watch_each_record_their_own_steps():
    """Each backward is a graph task of its own: 40 backwards from two threads are 40 steps, and each
    step's module-output row is one thread's, never a mix of both."""
    import threading

    model = small_mlp()
    inputs = [torch.randn(16, 8).requires_grad_(), (torch.randn(16, 8) * 3).requires_grad_()]
    expected = []
    for x in inputs:  # the gradient w.r.t. the model's output, as plain PyTorch gives it
        out = model(x)
        out.retain_grad()
        (out**2).sum().backward(inputs=[out])
        expected.append(torch.linalg.vector_norm(out.grad).item())
    start = threading.Barrier(2)

    def train(x):
        start.wait()
        for _ in range(20):
            (model(x) ** 2).sum().backward(inputs=[x])  # leaves .grad of the parameters alone

    with watch(model, outputs=True) as w:
        threads = [threading.Thread(target=train, args=(x,)) for x in inputs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert w.step == 40 and w.steps == list(range(40))
    root = w.names.index("")
    found = w.history.norm[:, root].tolist()
    assert sorted(found) == sorted(expected * 20)


def test_a_second_backward_through_a_retained_graph_is_a_step_with_its_module_outputs():
    model = small_mlp()
    x = torch.randn(8, 8)
    with watch(model, outputs=True) as w:
        out = model(x)
        out.sum().backward(retain_graph=True)
        (3 * out.sum()).backward()
    plain = small_mlp()
    plain(x).sum().backward()
    first = {n: p.grad.clone() for n, p in plain.named_parameters()}
    (3 * plain(x).sum()).backward()
    history = w.history
    assert history.steps == [0, 1]
    compared = 0
    for column, name in enumerate(history.names):
        if history.kinds[column] == "parameter":
            grad = plain.get_parameter(name).grad  # accumulated over both backwards, as .grad holds it
            assert history.norm[0, column].item() == torch.linalg.vector_norm(first[name]).item()
            assert history.norm[1, column].item() == torch.linalg.vector_norm(grad).item()
        else:  # module outputs in both steps, the second three times the first
            assert history.norm[1, column].item() == pytest.approx(
                3 * history.norm[0, column].item(), rel=1e-6
            )
        compared += 1
    assert compared == len(history.names)


def test_a_parameter_replaced_mid_training_is_followed_to_its_new_tensor():
    model = small_mlp()
    x = torch.randn(8, 8)
    with watch(model) as w:
        model(x).sum().backward()
        model[0].weight = nn.Parameter(torch.randn_like(model[0].weight) * 5)
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
    column = w.names.index("0.weight")
    expected = torch.linalg.vector_norm(model[0].weight.grad).item()
    assert w.history.norm[1, column].item() == expected


def test_a_parameter_replaced_without_a_registration_is_read_from_its_first_step():
    # module._parameters[name] = p runs no registration hook: the backward that reaches the new
    # parameter (and not the old one) follows it at its end and reads the .grad it wrote
    model = small_mlp()
    x = torch.randn(8, 8)
    with watch(model) as w:
        model(x).sum().backward()
        model[0]._parameters["weight"] = nn.Parameter(torch.randn_like(model[0].weight) * 5)
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
    column = w.names.index("0.weight")
    expected = torch.linalg.vector_norm(model[0].weight.grad).item()
    assert w.steps == [0, 1, 2]
    assert w.history.norm[1, column].item() == expected and w.history.norm[2, column].item() == expected


def test_the_registration_hooks_a_watch_counts_with_go_when_its_watches_close_or_are_collected():
    import gc

    from torch.nn.modules import module as torch_module

    from hookviz.watching.structure import REGISTRATIONS

    def hooks():
        return (
            dict(torch_module._global_parameter_registration_hooks),
            dict(torch_module._global_module_registration_hooks),
        )

    before = hooks()
    first, second = small_mlp(), small_mlp()
    with watch(first), watch(second):
        counted = REGISTRATIONS.count
        first[0].extra = nn.Parameter(torch.ones(1))
        first.add_module("more", nn.Identity())
        assert REGISTRATIONS.count == counted + 2  # both registrations counted while watches are open
    assert hooks() == before
    dropped = watch(small_mlp())  # never closed: collected
    del dropped
    gc.collect()
    assert hooks() == before


def test_a_module_replaced_mid_training_has_its_new_parameters_followed():
    model = small_mlp()
    x = torch.randn(8, 8)
    with watch(model) as w:
        model(x).sum().backward()
        model[0] = nn.Linear(8, model[0].out_features)
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # same names: nothing goes unwatched, no warning
            model(x).sum().backward()
    compared = 0
    for name in ("0.weight", "0.bias"):
        expected = torch.linalg.vector_norm(model.get_parameter(name).grad).item()
        assert w.history.norm[1, w.names.index(name)].item() == expected
        compared += 1
    assert compared == 2


@pytest.mark.parametrize("outputs", [False, True], ids=["parameters", "and outputs"])
def test_a_parameter_or_module_added_mid_training_is_named_in_a_warning(outputs):
    model = small_mlp()
    x = torch.randn(8, 8)
    with watch(model, outputs=outputs) as w:
        model(x).sum().backward()
        model[0].scale = nn.Parameter(torch.ones(()))
        model.add_module("extra", nn.Identity())
        with pytest.warns(UserWarning) as caught:
            model(x).sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # named once, not at every step
            model(x).sum().backward()
    (warning,) = caught
    message = str(warning.message)
    assert "parameter '0.scale'" in message and "open a new one" in message
    assert ("module 'extra'" in message) == outputs
    assert "0.scale" not in w.names and w.steps == [0, 1, 2]


@pytest.mark.parametrize("outputs", [False, True], ids=["parameters", "and outputs"])
def test_forwards_without_backward_do_not_pile_up_hook_handles(outputs):
    model = small_mlp()
    with watch(model, outputs=outputs) as w:
        with torch.no_grad():
            model(torch.randn(2, 8))  # no graph: no hook
        assert not w.handles.on_graphs
        for _ in range(5000):
            model(torch.randn(2, 8))  # each graph is freed at once, and its hooks with it
        if outputs:
            assert 0 < len(w.handles.on_graphs) <= 2 * 64 + len(w.names)
        else:  # steps start from the parameters' own hooks: no hook on any forward's graph
            assert not w.handles.on_graphs
        out = model(torch.randn(2, 8))
        out.sum().backward()
    assert w.steps == [0] and not w.handles.on_graphs


def test_backwards_that_raise_are_not_steps_and_are_not_kept():
    model = small_mlp()
    x = torch.randn(4, 8)

    def fail(grad):
        raise RuntimeError("boom")

    def fail_in_backward(module, args, out):
        out.register_hook(fail)  # returns None: the output stays

    failing = model[0].register_forward_hook(fail_in_backward)
    with watch(model, outputs=True) as w:
        for _ in range(100):  # each begins a step at the model's output, then raises deep inside
            with pytest.raises(RuntimeError, match="boom"):
                model(x).sum().backward()
        assert w.step == 0 and 0 < len(w.backwards.pending) <= 32
        failing.remove()
        model(x).sum().backward()
    assert w.steps == [0]


def test_a_step_listener_gets_every_kept_row_then_the_close():
    model = small_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    heard = []
    with watch(model) as w:
        handle = w.add_step_listener(
            lambda step, row: heard.append((step, None if row is None else row.clone()))
        )
        plain = []
        for x, y in batches(4):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            plain.append([torch.linalg.vector_norm(p.grad).item() for p in model.parameters()])
            optimizer.step()
    assert [step for step, _ in heard] == [0, 1, 2, 3, None]
    history = w.history
    compared = 0
    for (step, row), norms in zip(heard[:-1], plain):
        # the row is the step's kept row: the columns of STATISTICS, norms as plain PyTorch's
        assert torch.equal(row[:, 0], history.norm[step])
        assert torch.equal(row[:, 2], history.nonfinite[step])
        assert row[:, 0].tolist() == norms
        compared += 1
    assert compared == 4 and heard[-1] == (None, None)
    # removed: the next watch's steps and close are not heard
    handle.remove()
    w.close()
    assert len(heard) == 5


def test_a_failing_step_listener_warns_and_training_goes_on():
    model = small_mlp()
    ((x, y),) = batches(1)

    def broken(step, row):
        raise ValueError("a bug in a viewer")

    with pytest.warns(RuntimeWarning, match="a bug in a viewer"), watch(model) as w:
        w.add_step_listener(broken)
        F.cross_entropy(model(x), y).backward()
    assert w.steps == [0] and model[0].weight.grad is not None


def test_a_thinned_out_step_is_not_heard():
    model = small_mlp()
    heard = []
    with watch(model, capacity=2) as w:
        w.add_step_listener(lambda step, row: heard.append(step))
        for x, y in batches(5):
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
    # capacity 2: 0 and 1 kept; at 2 they thin to every other step (0, 2), at 3 nothing is kept,
    # at 4 to every fourth (0, 4): 3 was never kept, so never heard
    assert w.steps == [0, 4]
    assert heard == [0, 1, 2, 4, None]


def test_a_closed_watch_diagnoses_as_it_did_while_open():
    # close() lets go of the model and its parameters; the findings and layer norms read after the
    # with block (the docs' first example) still weigh each layer by its parameters' sizes.
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=8, width=16, inputs=8, classes=3)
    x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with hookviz.watch(model) as w:
        for _ in range(3):
            model.zero_grad()
            F.cross_entropy(model(x), labels).backward()
        open_findings = [(f.kind, f.module, f.value) for f in w.diagnose()]
        open_norms = w.layer_norms()
    assert w.model is None
    assert [(f.kind, f.module, f.value) for f in w.diagnose()] == open_findings
    assert w.layer_norms() == open_norms
    assert len(open_norms) == 8 and open_findings

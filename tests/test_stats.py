"""The statistics engine and the run records built on it, against plain PyTorch in float64."""

from __future__ import annotations

import copy
import gc
import math
import struct
import traceback

import pytest
import torch

from hookviz.data.stats_batch import StatsBatch
from hookviz.data.tensors import TensorRecord
from hookviz.errors import HookvizError
from hookviz.stats.reduce import (
    combine,
    measure,
    norm_column,
    norms_in_range,
    queue_norms,
    reduce,
    summary_of,
)


def summarise(tensor: torch.Tensor) -> TensorRecord:
    """One tensor's record, as a run makes it (a batch of one)."""
    batch = StatsBatch()
    batch.add(tensor)
    return batch.compute()[0]


def test_batched_statistics_equal_per_tensor_reductions():
    torch.manual_seed(0)
    tensors = [
        torch.randn(3, 4),
        torch.randn(5000),
        torch.zeros(7),
        torch.randn(2, 2, 2).double(),
        torch.arange(6),
        torch.randn(10).half(),
    ]
    batch = StatsBatch(full_limit=100)
    keys = [batch.add(t) for t in tensors]
    assert batch.add(tensors[0]) == keys[0]  # the same tensor is summarised once
    records = batch.compute()
    for key, tensor in zip(keys, tensors):
        record, reference = records[key], tensor.double()
        assert record.shape == tuple(tensor.shape) and record.numel == tensor.numel()
        assert record.norm == pytest.approx(reference.norm().item(), rel=1e-3)
        assert record.mean == pytest.approx(reference.mean().item(), rel=1e-3, abs=1e-6)
        assert record.min == reference.min().item() and record.max == reference.max().item()
        assert record.zero_fraction == (tensor == 0).double().mean().item()
        assert (record.value is None) == (tensor.numel() > 100)
    assert torch.equal(records[keys[0]].value, tensors[0])
    counts, edges = records[keys[1]].histogram
    assert sum(counts) == 1024 and len(edges) == 33  # a fixed 1024-element sample


def test_every_tensor_of_more_than_16_elements_gets_a_histogram_exact_up_to_the_sample():
    """The inspector shows up to 16 elements as numbers and any larger tensor as statistics and a
    histogram: one of up to 1,024 elements is counted whole (equal to ``torch.histc`` over its
    range), a larger one on its fixed 1,024-element sample; stacked (equal shapes) or alone."""
    tensors = [
        torch.arange(16.0),  # shown as numbers: no histogram
        torch.arange(100.0),  # alone
        torch.arange(300.0).reshape(10, 30),  # two of one shape: stacked rows
        -torch.arange(300.0).reshape(10, 30),
        torch.linspace(-1, 1, 3000),  # sampled
    ]
    batch = StatsBatch(full_limit=4096)
    keys = [batch.add(t) for t in tensors]
    records = batch.compute()
    assert records[keys[0]].histogram is None
    for key, tensor in zip(keys[1:4], tensors[1:4]):
        counts, edges = records[key].histogram
        expected = torch.histc(tensor, bins=32, min=tensor.min().item(), max=tensor.max().item())
        assert counts == expected.long().tolist() and sum(counts) == tensor.numel()
        assert edges[0] == tensor.min().item() and edges[-1] == pytest.approx(tensor.max().item())
    counts, _ = records[keys[4]].histogram
    assert sum(counts) == 1024 and records[keys[4]].value is not None


def test_a_2d_tensor_too_large_to_keep_gets_a_block_overview_for_its_heatmap():
    """[64, 64] in 32 x 32 blocks of 2 x 2: each cell is the root mean square of its block (no sign
    cancels); tensors kept whole, and those that are not 2-D, get none."""
    torch.manual_seed(0)
    matrix = torch.randn(64, 64)
    matrix[:, :10] = -matrix[:, :10].abs()  # signs that a block mean would cancel
    batch = StatsBatch(full_limit=1000)
    keys = [batch.add(t) for t in (matrix, torch.randn(20, 20), torch.randn(5000))]
    records = batch.compute()
    expected = matrix.reshape(32, 2, 32, 2).square().mean((1, 3)).sqrt()
    assert torch.allclose(records[keys[0]].overview, expected, rtol=1e-6)
    assert records[keys[0]].to_dict()["overview"][3][4] == pytest.approx(expected[3, 4].item(), rel=1e-6)
    assert records[keys[1]].overview is None and records[keys[2]].overview is None


def test_nan_inf_and_empty_tensors():
    record = summarise(torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0]))
    assert (record.nan_count, record.inf_count, record.zero_fraction) == (1, 2, 0.2)
    assert not record.finite
    assert record.to_dict()["value"] == [1.0, "nan", "inf", "-inf", 0.0]
    empty = summarise(torch.empty(0, 3))
    assert empty.numel == 0 and empty.norm is None and empty.nan_count == 0


def test_huge_values_do_not_overflow_the_norm():
    record = summarise(torch.tensor([3e30, 4e30]))
    assert record.norm == pytest.approx(5e30, rel=1e-6) and math.isfinite(record.norm)


def test_in_place_change_after_recording_is_reported():
    tensor = torch.ones(3)
    batch = StatsBatch()
    key = batch.add(tensor, version=tensor._version)
    tensor.mul_(2)
    record = batch.compute()[key]
    assert record.value is None and "modified in place" in record.note


# ---------------------------------------------------------------------------- the engine


def _reference(tensor: torch.Tensor) -> dict:
    """Plain PyTorch in float64 over the dense elements (a complex tensor's magnitudes): the norm
    scaled by the largest magnitude first, so that float64 squares do not underflow either."""
    dense = tensor.to_dense() if tensor.layout != torch.strided else tensor
    dense = dense.abs() if dense.is_complex() else dense
    exact = dense.double()
    largest = exact.abs().max()
    norm = (largest * torch.linalg.vector_norm(exact / largest)).item() if largest > 0 else 0.0
    return {
        "norm": norm,
        "sum": exact.sum().item(),
        "min": dense.min().item(),
        "max": dense.max().item(),
        "zero_count": int((dense == 0).sum()),
        "nan_count": int(exact.isnan().sum()),
        "inf_count": int(exact.isinf().sum()),
    }


def _dense_sparse(size: tuple[int, int]) -> torch.Tensor:
    torch.manual_seed(1)
    dense = torch.randn(size)
    dense[dense.abs() < 0.8] = 0
    return dense


CASES = {
    "float32": torch.randn(300, 7),
    "bfloat16": torch.randn(4096, dtype=torch.bfloat16) * 3,
    "float16": torch.randn(64, 64, dtype=torch.float16),
    "tiny float32": torch.full((50,), 1e-23),
    "tiny float64": torch.full((40,), 1e-200, dtype=torch.float64),
    "huge float64": torch.tensor([1e300, -1e300, 3.0], dtype=torch.float64),
    "huge float32": torch.tensor([3e30, 4e30]),
    "transposed": torch.randn(33, 65).t(),
    "sliced": torch.randn(40, 50)[::3, 5:-7],
    "expanded": torch.randn(1, 9).expand(6, 9),
    "negative view": torch._neg_view(torch.randn(17)),
    "complex": torch.randn(30, dtype=torch.complex64),
    "conjugate view": torch.randn(12, dtype=torch.complex128).conj(),
    "sparse COO": _dense_sparse((20, 30)).to_sparse(),
    "sparse COO rows": _dense_sparse((20, 30)).to_sparse(sparse_dim=1),  # an embedding's gradient
    "sparse CSR": _dense_sparse((20, 30)).to_sparse_csr(),
    "sparse CSC": _dense_sparse((20, 30)).to_sparse_csc(),
    "with zeros": torch.tensor([0.0, -0.0, 2.0, 0.0]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_statistic_equals_plain_pytorch_in_float64(name):
    """Norms never underflow or overflow (fifty values of 1e-23 do not get norm 0): float32 accuracy
    where the squares are summed in float32 (a float32 or half-precision CPU tensor of moderate
    magnitude), float64 accuracy elsewhere; min and max exactly, sums to float64 rounding, counts
    exactly."""
    tensor = CASES[name]
    (row,) = reduce([tensor])
    expected = _reference(tensor)
    assert row.numel == tensor.numel()
    # float32 is kept where its norm is finite and at least 2**-61 * sqrt(numel) (the engine's bound)
    finite = math.isfinite(expected["norm"]) and expected["norm"] * 2.0**-128 < 2.0**-1  # no overflow
    in_float32 = tensor.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.complex64)
    in_float32 &= finite and expected["norm"] >= 2.0**-61 * math.sqrt(tensor.numel())
    assert row.norm == pytest.approx(expected["norm"], rel=1e-6 if in_float32 else 1e-12, abs=0)
    assert row.norm > 0
    assert row.sum == pytest.approx(expected["sum"], rel=1e-9, abs=1e-300)
    assert (row.min, row.max) == (expected["min"], expected["max"])
    assert (row.zero_count, row.nan_count, row.inf_count) == (
        expected["zero_count"],
        expected["nan_count"],
        expected["inf_count"],
    )
    sparse = tensor.layout != torch.strided
    assert ("sparse" in row.note) == sparse and ("complex" in row.note) == (
        tensor.is_complex() and not sparse
    )


def test_integer_extremes_and_sums_are_exact():
    large = torch.tensor([2147483647, -2147483648, 5], dtype=torch.int32)
    huge = torch.tensor([2**62 + 1, -(2**62) - 3], dtype=torch.int64)
    flags = torch.tensor([True, False, True])
    rows = reduce([large, huge, flags])
    assert (rows[0].min, rows[0].max, rows[0].sum) == (-2147483648, 2147483647, 4)
    assert (rows[1].min, rows[1].max, rows[1].sum) == (-(2**62) - 3, 2**62 + 1, -2)
    assert (rows[2].min, rows[2].max, rows[2].sum, rows[2].zero_count) == (0, 1, 2, 1)
    assert rows[0].norm == torch.linalg.vector_norm(large.double()).item()


def test_nan_and_inf_are_counted_now_or_on_the_second_look_alike():
    tensor = torch.tensor([1.0, math.nan, math.inf, -math.inf, 0.0, math.nan])
    later = reduce([tensor])[0]
    now = measure([tensor], counts=True).rows()[0]
    assert repr(later) == repr(now)  # NaN fields: equal as text
    assert (later.nan_count, later.inf_count, later.zero_count) == (2, 2, 1)
    assert math.isnan(later.norm) and math.isnan(later.min) and math.isnan(later.max_abs)


def test_tensors_with_nothing_to_read_get_rows_that_say_why():
    zero = torch._efficientzerotensor((3, 4))
    empty = torch.empty(0, 5)
    meta = torch.empty(4, 4, device="meta")
    nothing_stored = torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.long), torch.empty(0), (3, 3))
    rows = reduce([zero, empty, meta, nothing_stored])
    assert (rows[0].norm, rows[0].min, rows[0].max, rows[0].zero_count) == (0.0, 0.0, 0.0, 12)
    assert "ZeroTensor" in rows[0].note
    assert (rows[1].numel, rows[1].norm, rows[1].min) == (0, None, None)
    assert rows[2].norm is None and "meta" in rows[2].note
    assert (rows[3].norm, rows[3].zero_count, rows[3].stored) == (0.0, 9, 0)
    record = summarise(zero)
    assert torch.equal(record.value, torch.zeros(3, 4)) and record.zero_fraction == 1.0


def test_a_row_depends_on_the_tensor_alone_not_on_the_batch():
    torch.manual_seed(0)
    tensors = [torch.randn(256, 256), torch.randn(256), torch.randn(256, 256).t(), torch.randn(9).half()]
    together = reduce(tensors)
    alone = [reduce([t])[0] for t in tensors]
    assert together == alone
    assert reduce(list(reversed(tensors))) == list(reversed(alone))


def test_combine_equals_the_statistics_of_the_tensors_taken_together():
    torch.manual_seed(0)
    parts = [torch.randn(30), torch.tensor([0.0, 5.0, -7.0]), torch.empty(0), torch.randn(4, 4)]
    combined = combine(reduce(parts))
    expected = _reference(torch.cat([p.reshape(-1) for p in parts]))
    assert combined.numel == 49
    assert combined.norm == pytest.approx(expected["norm"], rel=1e-6)  # float32 squares, combined
    assert combined.sum == pytest.approx(expected["sum"], rel=1e-12)
    assert (combined.min, combined.max, combined.zero_count) == (expected["min"], expected["max"], 1)
    with_nan = combine(reduce([torch.tensor([math.nan]), torch.tensor([1.0])]))
    assert math.isnan(with_nan.max) and with_nan.nan_count == 1
    with pytest.raises(HookvizError, match="at least one row"):
        combine([])


def test_a_run_a_watch_and_a_gather_give_one_parameter_the_same_statistics_bit_for_bit(tmp_path):
    """One gradient, three places: the run's leaf record, the watch's step row and the rank history
    a DDP watch gathers (one process, gloo). Every number is the engine's, bit for bit."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import hookviz

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Tanh(), torch.nn.Linear(48, 5))
    x = torch.randn(32, 64)

    def loss_fn(out):
        return out.pow(2).mean()

    run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    watched = copy.deepcopy(model)
    with hookviz.watch(watched) as w:
        loss_fn(watched(x)).backward()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    parallel = ranked = None
    try:
        parallel = DistributedDataParallel(copy.deepcopy(model))
        with hookviz.watch(parallel) as ranked:
            loss_fn(parallel(x)).backward()
        gathered = ranked.gather(dst=0)
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # its frames hold the DDP model too
        raise
    finally:
        # The DDP model, and the watch that held it while open, go before the process group: a
        # DDP Reducer freed after destroy_process_group() can hang in ProcessGroupGloo's destructor.
        del parallel, ranked
        gc.collect()
        dist.destroy_process_group()
    compared = 0
    for column, name in enumerate(w.parameter_names):
        grad = watched.get_parameter(name).grad
        (row,) = reduce([grad])
        record = run.node(name).grad_outputs[0]
        assert torch.equal(run.leaf_grad(name), grad)
        expected = (row.norm, row.max_abs, float(row.nonfinite), row.zero_fraction)
        assert (record.norm, record.min, record.max, record.zero_fraction) == (
            row.norm,
            row.min,
            row.max,
            row.zero_fraction,
        )
        assert tuple(w.history.norm[:, column].tolist()) == (row.norm,)
        assert tuple(w.kept.row(0)[1][column].tolist()) == expected
        assert tuple(gathered.local[0, 0, column].tolist()) == expected
        assert tuple(gathered.reduced[0, column].tolist()) == expected
        compared += 1
    assert compared == 4


def test_the_float32_bound_keeps_norms_accurate_where_squares_underflow():
    # The float32 path is kept down to a norm of 2**-61 * sqrt(numel): at that size, squares lost
    # to underflow (each below 2**-149) must still change the norm by less than one float32 rounding.
    # The worst case: one element at the bound, every other element too small to square into a
    # float32 (all their squares lost), or squaring into subnormals (each rounded).
    compared = 0
    for numel in (2, 1000, 2**20):
        floor = 2.0**-61 * math.sqrt(numel)
        for rest in (2.0**-75.5, 2.0**-70.3):
            tensor = torch.full((numel,), rest)
            tensor[0] = floor * 1.01
            (row,) = reduce([tensor])
            exact = torch.linalg.vector_norm(tensor.double()).item()
            assert row.norm == pytest.approx(exact, rel=1e-6, abs=0), (numel, rest)  # float32 accuracy
            compared += 1
    assert compared == 6
    # Just below the bound the float64 pass is taken: its norm is float64-accurate.
    tiny = torch.full((1000,), 2.0**-75.5)
    (row,) = reduce([tiny])
    assert row.norm == pytest.approx(torch.linalg.vector_norm(tiny.double()).item(), rel=1e-12, abs=0)


def _queued_norms(tensors: list[torch.Tensor]) -> list[float | None]:
    return [None if queued is None else float(queued) for queued, _, _ in queue_norms(tensors)]


@pytest.mark.parametrize(
    ("norms", "no_norm"),
    [(lambda tensors: norm_column(tensors).tolist(), math.nan), (_queued_norms, None)],
    ids=["norm_column", "queue_norms"],
)
def test_each_way_to_a_norm_alone_is_reduce_norms_bit_for_bit(norms, no_norm):
    # A watch's norms-only steps read norm_column(); its full steps and runs read reduce(). A lazy
    # run queues norms without reading a tensor's extremes where its own norm proves it in the
    # float32-safe range; tiny, huge, NaN and zero tensors beside it have theirs read. Each norm
    # must be the number reduce() gives that tensor, alone or in any company.
    torch.manual_seed(0)
    tensors = [
        torch.randn(64, 256),
        torch.full((50,), 1e-23),
        torch.randn(300).double() * 1e200,
        torch.tensor([1.0, float("nan")]),
        torch.tensor([3e30, 4e30]),
        torch.zeros(7),
        torch.empty(0),
        torch.randn(5000).half(),
        torch.randn(17).double(),
    ]
    compared = 0
    for company in (tensors, tensors[::-1], *[[t] for t in tensors]):
        for tensor, norm in zip(company, norms(company)):
            (row,) = reduce([tensor])
            expected = no_norm if row.norm is None else row.norm  # None: an empty tensor has none
            both_nan = isinstance(norm, float) and isinstance(expected, float) and math.isnan(norm)
            assert norm == expected or (both_nan and math.isnan(expected)), tensor.dtype
            compared += 1
    assert compared == 3 * len(tensors)


def _mlp_gradients(dtype: torch.dtype) -> list[torch.Tensor]:
    """The gradients of one real training step of a 6-layer sigmoid MLP in ``dtype``: norms from
    about 1 down to 1e-5 (they vanish layer by layer)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 32) for _ in range(6)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.Sigmoid())]).to(dtype)
    x, y = torch.randn(16, 32, dtype=dtype), torch.randn(16, 32, dtype=dtype)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_norms_in_range_are_norm_column_bit_for_bit_and_float64_accurate(dtype):
    # A watch's usual norms-only step reads norms_in_range(): one _foreach_norm call for all.
    grads = _mlp_gradients(dtype)
    found = norms_in_range(grads, math.inf)
    assert found is not None and found.dtype == torch.float64 and found.shape == (len(grads),)
    assert list(map(_bits, found.tolist())) == list(map(_bits, norm_column(grads).tolist()))
    compared = 0
    for grad, norm in zip(grads, found.tolist()):
        exact = torch.linalg.vector_norm(grad.double()).item()
        rel = 1e-12 if dtype == torch.float64 else 1e-6  # summed in float64 / float32
        assert norm == pytest.approx(exact, rel=rel, abs=0) and norm > 0
        compared += 1
    assert compared == 12
    # gradients that require grad (a backward with create_graph=True): read, never recorded
    tracked = [g.detach().requires_grad_() for g in grads]
    again = norms_in_range(tracked, math.inf)
    assert not again.requires_grad and again.grad_fn is None
    assert list(map(_bits, again.tolist())) == list(map(_bits, found.tolist()))


def test_norms_in_range_leave_every_doubtful_norm_to_the_general_path():
    # None, and nothing taken as read, wherever the one call cannot tell the norm from an alarm
    # (NaN, Inf, 0, an overflow): the general path (norm_column, measure) then keeps NaN and Inf
    # and sums tiny or huge values in float64 (no underflow, no overflow).
    plain = torch.randn(64, 64)
    floor32 = 2.0**-61 * math.sqrt(1000)
    cases = {
        "NaN": (torch.tensor([1.0, math.nan]), math.nan),
        "Inf": (torch.tensor([1.0, math.inf]), math.inf),
        "float32 squares overflow": (torch.full((4,), 3e30), 6e30),
        "float32 squares underflow": (torch.full((1000,), 1e-25), 1e-25 * math.sqrt(1000)),
        "tiny float64": (torch.full((10,), 1e-300, dtype=torch.float64), 1e-300 * math.sqrt(10)),
        "huge float64": (torch.full((4,), 1e300, dtype=torch.float64), 2e300),
        "all zero": (torch.zeros(9), 0.0),
    }
    compared = 0
    for name, (tensor, norm) in cases.items():
        assert norms_in_range([plain, tensor], math.inf) is None, name
        general = norm_column([plain, tensor])[1].item()
        assert general == pytest.approx(norm, rel=1e-6, abs=0, nan_ok=True), name
        compared += 1
    assert compared == len(cases)
    # a norm below the float32 floor (a vanishing gradient) is not an alarm: summed again in float64
    # by itself, as norm_column sums it, bit for bit
    tiny = torch.full((1000,), floor32 / 40)
    found = norms_in_range([plain, tiny], math.inf)
    assert found is not None
    assert list(map(_bits, found.tolist())) == list(map(_bits, norm_column([plain, tiny]).tolist()))
    assert found[1].item() == pytest.approx(torch.linalg.vector_norm(tiny.double()).item(), rel=1e-12, abs=0)
    # above the alarm, or read only after preparation: the general path too
    assert norms_in_range([plain], torch.linalg.vector_norm(plain).item() / 2) is None
    assert norms_in_range([plain], torch.linalg.vector_norm(plain).item()) is not None
    others = {
        "empty": torch.empty(0),
        "other dtype": plain.double(),
        "integer": torch.ones(3, dtype=torch.int64),
        "complex": torch.randn(3, dtype=torch.complex64),
        "sparse": plain.to_sparse(),
        "ZeroTensor": torch._efficientzerotensor((3,)),
        "negative view": plain._neg_view(),
        "meta": torch.ones(3, device="meta"),
    }
    for name, tensor in others.items():
        assert norms_in_range([plain, tensor], math.inf) is None, name
    assert norms_in_range([], math.inf) is None


def test_a_summary_is_the_rows_numbers_bit_for_bit():
    # A watch keeps Measured.summary(), computed as whole columns; a run keeps rows(). Every one of
    # the four numbers must be the row's, bit for bit, for every kind of tensor the engine reads.
    extra = [
        torch.tensor([2147483647, -2147483648, 5], dtype=torch.int32),
        torch.tensor([-(2**63), 2**62 + 1], dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.tensor([1.0, math.nan, math.inf, -math.inf, 0.0, math.nan]),
        torch.tensor([-math.inf, 2.0]),
        torch._efficientzerotensor((3, 4)),
        torch.empty(0, 5),
        torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.long), torch.empty(0), (3, 3)),
        torch.full((5,), 7.0),  # no zero: min > 0
    ]
    tensors = [*CASES.values(), *extra]
    compared = 0
    for counts in (False, True):
        for company in (tensors, tensors[::-1]):
            summary = measure(company, sums=False, counts=counts).summary()
            rows = reduce(company, sums=False)
            assert summary.shape == (len(company), 4)
            for line, row in zip(summary.tolist(), rows):
                assert list(map(_bits, line)) == list(map(_bits, summary_of(row))), (row, line)
                compared += 1
    assert compared == 4 * len(tensors)


def _bits(value: float) -> bytes:
    """A float's bytes, every NaN alike (NaN payloads are not numbers)."""
    return b"nan" if math.isnan(value) else struct.pack("<d", value)

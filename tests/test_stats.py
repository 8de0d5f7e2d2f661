"""Batched tensor summaries against per-tensor torch reductions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hookviz.stats import one_pass
from hookviz.stats.engine import StatsBatch, summarise


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


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "stock kernels"])
def test_a_2d_tensor_too_large_to_keep_gets_a_block_overview_for_its_heatmap(compiled, monkeypatch):
    """[64, 64] in 32 x 32 blocks of 2 x 2: each cell is the root mean square of its block (no sign
    cancels); tensors kept whole, and those that are not 2-D, get none. The same through the
    compiled overview and through PyTorch's pooling."""
    if compiled:
        assert one_pass.OVERVIEWS, "hookviz._fused was not built: install gcc and reinstall hookviz"
    else:
        monkeypatch.setattr(one_pass, "OVERVIEWS", {})
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


def test_the_compiled_overview_cuts_blocks_as_adaptive_avg_pool2d_and_sums_in_double():
    """Against ``adaptive_avg_pool2d`` of the squares in float64, square-rooted: sizes that 32 does
    not divide (blocks overlap), fewer than 32 rows or columns, a contiguous matrix's transpose
    (a Linear weight's gradient is one), float64, and NaN / Inf, which reach only their own blocks.
    A matrix it cannot read whole (a view with gaps, half precision, not 2-D) gets None: the caller
    pools it with PyTorch."""
    torch.manual_seed(0)
    cases = [
        torch.randn(64, 64),
        torch.randn(50, 70),
        torch.randn(33, 5),
        torch.randn(7, 100),
        torch.randn(1000, 3).double(),
        torch.randn(40, 90).t(),
        torch.randn(512, 4097),
    ]
    cases[1][3, 4], cases[1][40, 60] = math.nan, math.inf
    for matrix in cases:
        blocks = (min(matrix.shape[0], 32), min(matrix.shape[1], 32))
        expected = F.adaptive_avg_pool2d(matrix.double().square()[None, None], blocks)[0, 0].sqrt()
        found = one_pass.overview(matrix, 32)
        assert found.dtype == torch.float32 and tuple(found.shape) == blocks
        assert torch.allclose(found.double(), expected, rtol=1e-6, equal_nan=True)
        assert torch.equal(found.isnan(), expected.isnan()) and torch.equal(found.isinf(), expected.isinf())
    wide = torch.randn(64, 64)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the buffer it fills stays float32 whatever the default
    try:
        expected = F.adaptive_avg_pool2d(wide.double().square()[None, None], 32)[0, 0].sqrt()
        assert torch.allclose(one_pass.overview(wide, 32).double(), expected, rtol=1e-6)
    finally:
        torch.set_default_dtype(default)
    assert one_pass.overview(wide[:, ::2], 32) is None  # a view with gaps
    assert one_pass.overview(wide.half(), 32) is None
    assert one_pass.overview(wide.reshape(-1), 32) is None


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


def test_a_strided_view_is_read_run_by_run_as_its_contiguous_copy_would_be():
    """Views whose last dimension is contiguous (GPT-2's ``logits[:, :-1]``, attention heads split by
    ``view`` and ``transpose``, a column slice, every other row, an expanded dimension) are read by
    the compiled pass in place: the same counts, minimum and maximum as their contiguous copies, and
    sums as close to float64's as theirs (float32 lanes, blocks added in double). Their histograms
    sample the same elements, gathered through the view. A view it cannot read (a last dimension
    that is not contiguous, runs too short to gain, or a negative view whose memory holds the values
    unnegated) gets None, and PyTorch's kernels."""
    assert one_pass.STRIDED, "hookviz._fused was not built: install gcc and reinstall hookviz"
    torch.manual_seed(0)
    views = [
        torch.randn(4, 128, 300)[:, :-1],
        torch.randn(4, 128, 384).view(4, 128, 6, 64).transpose(1, 2),
        torch.randn(10, 40)[:, 3:37],
        torch.randn(9, 32)[::3],
        torch.randn(1, 64).expand(5, 64),
        torch.randn(2, 3, 4, 50)[::2, :, 1:, :],
    ]
    views[2][2, 5] = 0
    views[3][1, 7] = math.inf
    for view in views:
        assert not view.is_contiguous()
        found, copy = one_pass.summary(view), one_pass.summary(view.contiguous())
        assert found[2:] == copy[2:]  # min, max, zeros, NaNs, Infs
        exact = view.double()
        exact = exact[exact.isfinite()]
        if math.isfinite(found[0]):
            assert found[:2] == pytest.approx(((exact**2).sum().item(), exact.sum().item()), rel=1e-5)
        assert found[:2] == pytest.approx(copy[:2], rel=1e-5)
        batch = StatsBatch(full_limit=10)
        keys = batch.add(view), batch.add(view.contiguous())
        records = batch.compute()
        assert records[keys[0]].histogram == records[keys[1]].histogram
    nan_view = torch.randn(6, 40)[:, 1:]
    nan_view[2, 3] = math.nan
    assert one_pass.summary(nan_view)[5] == 1 and math.isnan(one_pass.summary(nan_view)[0])
    assert one_pass.summary(torch.randn(4, 5, 6).transpose(1, 2)) is None  # last dimension strided
    assert one_pass.summary(torch._neg_view(torch.randn(64))) is None  # memory holds -x
    assert one_pass.summary(torch.randn(64, 8)[:, :4]) is None  # runs of 4 elements

"""What the watch did not measure says so: a History's measured mask tells a statistic not read at a
step (``stats_every``) from a name with no gradient and from a real NaN, and its text writes them
"—", "no grad" and "NaN". Checked against the gradients plain PyTorch left in ``.grad``."""

from __future__ import annotations

import json
import math
import struct

import safetensors.torch
import torch
from torch import nn

import hookviz
from hookviz.files.saving import load
from hookviz.text import NO_GRADIENT, NOT_MEASURED, number

STATS_EVERY = 4
STEPS = 8
NAN_STEP = 7  # the last step's gradients hold NaN (an alarm: every statistic is read)


class TwoBranches(nn.Module):
    """``fc`` every step; ``side`` only on even steps (its ``.grad`` stays None on odd ones)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.side = nn.Linear(4, 3)

    def forward(self, x, use_side: bool):
        out = self.fc(x)
        return out + self.side(x) if use_side else out


def _train():
    """The watched loop, and per step what plain PyTorch left in each ``.grad`` (None: none)."""
    torch.manual_seed(0)
    model = TwoBranches()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = []
    with hookviz.watch(model, optimizer=optimizer, stats_every=STATS_EVERY) as w:
        for step in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            x = torch.randn(5, 4)
            if step == NAN_STEP:
                x[0, 0] = math.nan
            model(x, use_side=step % 2 == 0).pow(2).sum().backward()
            plain.append({n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()})
            optimizer.step()
    return w, plain


def test_measured_tells_not_read_from_no_gradient_from_a_real_nan():
    w, plain = _train()
    history = w.history
    names = history.names
    assert names == ["fc.weight", "fc.bias", "side.weight", "side.bias"] and history.steps == list(
        range(STEPS)
    )
    got = torch.tensor([[plain[s][n] is not None for n in names] for s in range(STEPS)])
    # every statistic is read every STATS_EVERY-th step, and at an alarm: a gradient with NaN/Inf
    # or a norm of exactly 0 (here only the NaN step)
    alarms = [
        any(g is not None and not 0 < torch.linalg.vector_norm(g).item() < 1e3 for g in plain[s].values())
        for s in range(STEPS)
    ]
    assert [s for s, alarm in enumerate(alarms) if alarm] == [NAN_STEP]
    full = torch.tensor([s % STATS_EVERY == 0 or alarms[s] for s in range(STEPS)])
    assert torch.equal(history.gradient(), got)
    assert torch.equal(history.measured("norm"), got) and torch.equal(history.measured("nonfinite"), got)
    for statistic in ("max_abs", "zero_fraction"):
        assert torch.equal(history.measured(statistic), got & full[:, None])
    # the optimizer's update ratios are read with every statistic, for the parameters it stepped
    assert torch.equal(history.measured("update_ratio"), got & full[:, None])
    compared = 0
    for step in range(STEPS):
        for column, name in enumerate(names):
            grad = plain[step][name]
            if grad is None:
                assert math.isnan(history.norm[step, column])
                continue
            norm = torch.linalg.vector_norm(grad.double()).item()
            if math.isnan(norm):  # a real NaN: measured, and NaN
                assert math.isnan(history.norm[step, column]) and history.nonfinite[step, column] > 0
            else:
                torch.testing.assert_close(history.norm[step, column].item(), norm, rtol=1e-5, atol=0)
            if full[step]:
                zeros = (grad == 0).double().mean().item()
                assert history.zero_fraction[step, column].item() == zeros
            compared += 1
    assert compared == sum(int(g) for g in got.flatten().tolist())
    # the NaN step's SGD step made fc's weights NaN: its ratio was read, and it is NaN
    fc = names.index("fc.weight")
    assert history.measured("update_ratio")[NAN_STEP, fc] and math.isnan(history.update_ratio[NAN_STEP, fc])
    assert not history.measured("update_ratio")[1, fc] and math.isnan(history.update_ratio[1, fc])


def _cell(text: str, statistic: str, name: str, step: int) -> str:
    """The cell of ``name`` at ``step`` in ``statistic``'s table of a History's text."""
    lines = text.splitlines()
    start = lines.index(statistic)
    header = lines[start + 1].split()
    assert header[0] == "step"
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        cells = line.split("  ")
        cells = [c.strip() for c in cells if c.strip()]
        if cells[0] == name:
            return cells[header.index(str(step))]
    raise AssertionError(f"no line {name!r} in {statistic}")


def test_print_history_writes_dash_not_measured_no_grad_and_nan_only_for_real_nan():
    w, plain = _train()
    history = w.history
    text = str(history)
    assert repr(history) == text and text.startswith(
        f"History: {STEPS} kept steps (0 … {STEPS - 1}) of 4 names"
    )
    zeros = (plain[0]["side.weight"] == 0).double().mean().item()
    assert _cell(text, "zero_fraction", "side.weight", 0) == number(zeros)
    assert _cell(text, "zero_fraction", "side.weight", 1) == NO_GRADIENT  # odd step: no gradient
    assert _cell(text, "zero_fraction", "side.weight", 2) == NOT_MEASURED  # read only every 4th step
    assert _cell(text, "zero_fraction", "fc.weight", 2) == NOT_MEASURED
    assert _cell(text, "norm", "fc.weight", 2) == number(history.norm[2, 0].item())
    assert _cell(text, "norm", "fc.weight", NAN_STEP) == "NaN"  # read, and NaN
    assert _cell(text, "nonfinite", "fc.weight", NAN_STEP) == number(history.nonfinite[NAN_STEP, 0].item())
    assert _cell(text, "update_ratio", "fc.weight", NAN_STEP) == "NaN"
    assert _cell(text, "update_ratio", "fc.weight", 3) == NOT_MEASURED


def test_the_measured_mask_survives_a_file_and_an_older_file_reads_without_it(tmp_path):
    w, _ = _train()
    history = w.history
    path = hookviz.save(w, tmp_path / "watch")
    loaded = load(path).history(0)
    for statistic in ("norm", "zero_fraction", "update_ratio"):
        assert torch.equal(loaded.measured(statistic), history.measured(statistic))
    assert loaded.numels == history.numels == [12, 3, 12, 3]
    # a version 5 file kept no mask: a ratio counts as read where it is a number
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    tensors = safetensors.torch.load(data)
    structure = json.loads(bytes(tensors["hookviz.json"].tolist()))
    fields = structure["fields"]
    del tensors[fields.pop("update_measured")["__tensor__"]]
    fields.pop("numels")
    tensors["hookviz.json"] = torch.frombuffer(bytearray(json.dumps(structure).encode()), dtype=torch.uint8)
    old = tmp_path / "old.hookviz"
    old.write_bytes(safetensors.torch.save(tensors, metadata=dict(header["__metadata__"], version="5")))
    older = load(old)
    assert older.update_measured is None and older.numels == []
    ratios = older.history(0).update_ratio
    assert torch.equal(older.history(0).measured("update_ratio"), ~ratios.isnan())


def test_the_watch_plots_hover_with_the_history_text():
    w, _ = _train()
    texts = w.history.text("zero_fraction")
    figure = w.heatmap(statistic="zero_fraction")
    hover = [list(row) for row in figure.data[0].text]
    assert hover == [[texts[step][column] for step in range(STEPS)] for column in range(4)]
    assert NOT_MEASURED in hover[0] and NO_GRADIENT in hover[2] and "%{text}" in figure.data[0].hovertemplate
    lines = w.lines(["fc.weight"], statistic="norm")
    assert list(lines.data[0].text) == [row[0] for row in w.history.text("norm")]
    assert lines.data[0].text[NAN_STEP] == "NaN" and "%{text}" in lines.data[0].hovertemplate

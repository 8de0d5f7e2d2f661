"""``hookviz.show``: its second positional argument is always the model's inputs; a baseline run
and the run a watch is drawn on are keywords, and an option that does not apply is refused."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import watched_mlp
from torch import nn

import hookviz
from hookviz.advice import advice
from hookviz.errors import HookvizError, WatchError
from hookviz.watching.gather import from_watch


def _sum(out: torch.Tensor) -> torch.Tensor:
    return out.sum()


@pytest.fixture(scope="module")
def trained():
    """A small MLP watched over three plain PyTorch steps, a run of it and the watch's history."""
    model, data, watch, session = watched_mlp()
    return model, data, watch, session, session.run(), from_watch(watch)


def test_the_second_argument_is_the_models_inputs():
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    widget = hookviz.show(model, (x,), loss_fn=_sum)
    expected = torch.autograd.grad(model(x).sum(), model.weight)[0]
    assert torch.equal(widget.session.last_run.leaf_grads["weight"], expected)
    single = hookviz.show(model, x, loss_fn=_sum)  # a single tensor is one input
    assert torch.equal(single.session.last_run.leaf_grads["weight"], expected)


def test_a_run_in_the_second_place_is_refused_with_the_keyword_to_use(trained):
    model, data, watch, session, run, history = trained
    with pytest.raises(HookvizError, match=re.escape(advice("show_baseline"))):
        hookviz.show(run, run)
    with pytest.raises(WatchError, match=re.escape(advice("show_watch_on"))):
        hookviz.show(watch, run)
    with pytest.raises(WatchError, match=re.escape(advice("show_watch_on"))):
        hookviz.show(watch, session)
    with pytest.raises(WatchError, match=re.escape(advice("show_history_on_run"))):
        hookviz.show(history, run)
    with pytest.raises(HookvizError, match=r"not a recording.*baseline=hookviz.load\(path\).*on=run"):
        hookviz.show(model, run)
    with pytest.raises(WatchError, match="takes no inputs"):
        hookviz.show(watch, (data,))


def test_baseline_and_on_are_keywords(trained):
    model, data, watch, session, run, history = trained
    compared = hookviz.show(run, baseline=run)
    assert compared.session.baseline is run and compared.session.last_run is run
    on_run = hookviz.show(watch, on=run)
    assert on_run.watch_view["step"] == watch.steps[-1]
    on_history = hookviz.show(history, on=run)
    assert on_history.watch_view["norms"]
    with pytest.raises(HookvizError, match="baseline must be a hookviz.Run"):
        hookviz.show(run, baseline=(data,))
    with pytest.raises(WatchError, match="must be a hookviz.Run or hookviz.Session"):
        hookviz.show(history, on=data)


def test_an_option_that_does_not_apply_is_refused_by_name(trained):
    model, data, watch, session, run, history = trained
    with pytest.raises(HookvizError, match="does not take every_seconds="):
        hookviz.show(model, (data,), loss_fn=_sum, every_seconds=0.5)
    with pytest.raises(HookvizError, match="does not take on="):
        hookviz.show(model, (data,), loss_fn=_sum, on=run)
    with pytest.raises(HookvizError, match="does not take baseline="):
        hookviz.show(model, (data,), loss_fn=_sum, baseline=run)
    with pytest.raises(WatchError, match="does not take details="):
        hookviz.show(watch, details="eager")
    with pytest.raises(WatchError, match="does not take baseline="):
        hookviz.show(watch, baseline=run)
    with pytest.raises(HookvizError, match="does not take on=, every_steps="):
        hookviz.show(run, on=run, every_steps=2)
    with pytest.raises(WatchError, match="does not take input_grads="):
        hookviz.show(history, input_grads=True)


def test_live_options_reach_the_live_view():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    with hookviz.watch(model) as watch:
        view = hookviz.show(watch, every_steps=3, every_seconds=None)
        try:
            assert view.live is not None
            assert (view.live.every_steps, view.live.every_seconds) == (3, None)
        finally:
            view.close()

"""No error vanishes: what hookviz catches so that the page or ``==`` keeps working is logged with
its traceback, and what the page cannot show is named on it."""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import watched_mlp

import hookviz
from hookviz.data.tensors import equal_values
from hookviz.examples import sigmoid_mlp
from hookviz.widget import diagnosis as widget_diagnosis
from hookviz.widget import watch_view


def _logged(caplog, logger: str, exception: type[BaseException]) -> list[logging.LogRecord]:
    """The records of ``logger`` that carry a traceback of ``exception``."""
    return [
        r
        for r in caplog.records
        if r.name == logger
        and r.exc_info
        and isinstance(r.exc_info[1], exception)
        and r.exc_info[2] is not None
    ]


def test_equal_values_that_cannot_compare_reads_not_equal_and_says_why(caplog):
    caplog.set_level(logging.WARNING, logger="hookviz.data")
    meta = torch.empty(3, device="meta")  # no values: PyTorch cannot copy them out
    assert equal_values(meta, torch.empty(3, device="meta")) is False
    assert len(_logged(caplog, "hookviz.data", NotImplementedError)) == 1
    arrays = [np.arange(3)], [np.arange(3)]  # numpy's == gives an array, whose truth is ambiguous
    assert equal_values(*arrays) is False
    assert len(_logged(caplog, "hookviz.data", ValueError)) == 1

    class Broken:
        def __eq__(self, other):
            return 1 / 0

    with pytest.raises(ZeroDivisionError):  # an error that is no comparison's propagates
        equal_values(Broken(), Broken())


@pytest.fixture
def watched():
    _, _, watch, session = watched_mlp()
    return watch, session.run()


def test_an_onset_that_fails_is_logged_and_named_in_the_banner(watched, caplog, monkeypatch):
    watch, run = watched
    caplog.set_level(logging.ERROR, logger="hookviz.widget")

    def onsets_of_a_step_count(history, arrival_order):  # a real error: a history is not a number
        return int(history)

    monkeypatch.setattr(watch_view, "onsets", onsets_of_a_step_count)
    view = hookviz.show(watch, on=run)
    assert view.diagnosis["onset"] == []
    assert "finding the onsets failed: TypeError" in view.diagnosis["error"]
    assert len(_logged(caplog, "hookviz.widget", TypeError)) == 1
    monkeypatch.undo()
    view.show_watch(watch)  # the onsets work again: the note goes
    assert "onsets" not in (view.diagnosis.get("error") or "")


def test_a_reply_the_kernel_cannot_send_is_replaced_logged_and_shown(watched, caplog):
    watch, run = watched
    caplog.set_level(logging.ERROR, logger="hookviz.widget")
    view = hookviz.show(run)
    # JSON has no NaN: a request named NaN gets a reply that repeats it, which cannot be sent
    view._handle_message(view, {"type": math.nan})
    assert "sending the reply to the page failed: ValueError" in view.errors["message"]
    assert len(_logged(caplog, "hookviz.widget", ValueError)) == 1


def test_a_failing_diagnosis_is_logged_with_its_traceback(watched, caplog, monkeypatch):
    watch, run = watched
    caplog.set_level(logging.ERROR, logger="hookviz.widget")

    def diagnose_without_thresholds(run, **thresholds):
        return hookviz.diagnose(run, vanishing=-1.0)  # a real refusal: a negative threshold

    monkeypatch.setattr(widget_diagnosis, "diagnose", diagnose_without_thresholds)
    view = hookviz.show(run)
    assert view.diagnosis["error"].startswith("diagnosis failed: HookvizError: threshold vanishing=-1.0")
    assert "traceback in the log" in view.diagnosis["error"]
    assert len(_logged(caplog, "hookviz.widget", hookviz.HookvizError)) == 1


def test_a_failing_live_update_is_logged_and_shown_and_training_goes_on(caplog, monkeypatch):
    caplog.set_level(logging.ERROR, logger="hookviz.widget")

    def show_a_step_of_nothing(widget, watch, closed):
        return watch.norms(step=-1)  # a real WatchError: no step -1 is kept

    monkeypatch.setattr(watch_view, "show_live_state", show_a_step_of_nothing)
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=2, width=8, inputs=4, classes=2)
    with hookviz.watch(model) as watch:
        view = hookviz.show(watch, every_steps=1, every_seconds=None)
        F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
        deadline = time.monotonic() + 10
        while "watch" not in view.errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.errors["watch"].startswith("live update failed: WatchError: step -1 is not kept")
        F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
    assert watch.steps == [0, 1]  # training went on
    view.live.stop(wait=5)
    assert _logged(caplog, "hookviz.widget", hookviz.WatchError)

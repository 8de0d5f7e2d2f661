"""The entry points: ``hookviz.show`` (a model, a recorded run, a gathered watch history or a live
watch) and ``hookviz.show_watch``, each returning the :class:`~hookviz.widget.widget.Widget` that shows it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any

import torch

from hookviz.advice import advice
from hookviz.data.run import Run
from hookviz.data.stats_batch import DEFAULT_FULL_TENSOR_LIMIT, DEFAULT_HISTOGRAM_BINS
from hookviz.errors import HookvizError, WatchError
from hookviz.record import module_tree
from hookviz.record.session import Session
from hookviz.watching.gather import RankHistory
from hookviz.watching.watch import Watch
from hookviz.widget.chart import VANISHING_RATIO
from hookviz.widget.recorded import RecordedSession
from hookviz.widget.watch_view import check_watch
from hookviz.widget.widget import Widget


def show(
    model: torch.nn.Module | Run | RankHistory | Watch,
    args: Any = (),
    kwargs: dict[str, Any] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    *,
    baseline: Run | None = None,
    on: Run | Session | None = None,
    input_grads: bool = False,
    full_tensor_limit: int = DEFAULT_FULL_TENSOR_LIMIT,
    histogram_bins: int = DEFAULT_HISTOGRAM_BINS,
    details: str = "auto",
    visible_budget: int | None = None,
    vanishing_threshold: float = VANISHING_RATIO,
    every_steps: int | None = None,
    every_seconds: float | None = 1.0,
) -> Widget:
    """Record one forward + backward of ``model(*args, **kwargs)`` and show it as a widget.

    The second positional argument is always the model's inputs; what else ``show`` draws is
    named by a keyword:

    - ``show(model, args, loss_fn=...)``: records a :class:`hookviz.Session` of ``model`` (lazy
      details by default: a large run is drawn from its norms and its details are recorded when
      the page asks, or soon after the cell ends, see :meth:`Widget.fill_details`).
    - ``show(run)``: a recorded run, read-only (one from :func:`hookviz.load`: inspect, replay,
      diagnosis; edit and re-run are refused with a note, ``Widget.read_only``);
      ``show(run, baseline=before)`` compares it with ``before``.
    - ``show(history)``: a gathered watch history (``hookviz.load`` of ``hookviz.save(watch,
      path)``) over the run saved with it, reduced norms first (``Widget.watch_rank(r)``: rank
      ``r``'s); ``show(history, on=run)`` over another run's graph.
    - ``show(watch)``: follows a :class:`hookviz.Watch` while it trains, in the same cell:
      heatmap, per-layer lines and findings, updated at most every ``every_steps`` kept steps or
      ``every_seconds`` seconds, a NaN/Inf or exploding step at once (:meth:`Widget.show_live`);
      ``show(watch, on=run)`` draws it on that run's (or Session's) graph: live while the watch
      is open, else its last step.

    Args:
        model: an ``nn.Module``; or a :class:`hookviz.Run`, a
            :class:`~hookviz.watching.gather.RankHistory` or a :class:`hookviz.Watch` to show.
        args: the model's positional inputs (a tuple, or a single tensor); a model only.
        kwargs: the model's keyword inputs; a model only.
        loss_fn: ``loss_fn(output) -> scalar tensor``; None when the output is already a scalar;
            a model only.
        baseline: the run ``model`` (a Run) is compared with: another run of the same model.
        on: the run or :class:`hookviz.Session` whose graph a watch or a watch history is
            drawn on (same model, same parameter names).
        input_grads: also the gradients of inputs that do not require grad (as
            :class:`hookviz.Session`); a model only.
        full_tensor_limit: tensors up to this many elements keep their values (as
            :class:`hookviz.Session`); a model only.
        histogram_bins: bins of each tensor's histogram (as :class:`hookviz.Session`); a model only.
        details: ``"auto"``, ``"eager"`` or ``"lazy"`` (as :class:`hookviz.Session`); a model only.
        visible_budget: the most nodes the graph opens with (see :class:`Widget`).
        vanishing_threshold: the ratio under which a layer's gradient reads as vanishing.
        every_steps: a live watch's view updates at most every this many kept steps; a watch only.
        every_seconds: and at most every this many seconds (default 1); a watch only.

    Returns:
        The :class:`Widget`; display it by leaving it last in a notebook cell.

    Raises:
        HookvizError: ``model`` is none of the above, a second positional argument that is a
            run (use ``baseline=`` or ``on=``), an option that does not apply to what is shown,
            or what :class:`hookviz.Session` raises for a bad model or bad options.
        ForwardError, LossError, BackwardError, UnsupportedError, DeviceError: recording the
            model's run failed (see :meth:`hookviz.Session.run`).
        WatchError: a watch or history given inputs, a loss or a run positionally; ``on=`` that
            is not a run of the watched model; a history with no run to draw on; bad
            ``every_steps``/``every_seconds``.
    """
    live_options = {"every_steps": every_steps, "every_seconds": every_seconds}
    session_options = {
        "input_grads": input_grads,
        "full_tensor_limit": full_tensor_limit,
        "histogram_bins": histogram_bins,
        "details": details,
    }
    widget_options = {"visible_budget": visible_budget, "vanishing_threshold": vanishing_threshold}
    with _collector_paused():
        return _show(
            model, args, kwargs, loss_fn, baseline, on, session_options, live_options, widget_options
        )


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused for one ``show()``, enabled again after it, on
    success or error, unless the caller had disabled it.

    ``show()`` of a model records a run and builds its page's state: tens of objects per autograd
    Node, all reachable until the widget is returned, so every collection meanwhile scans the
    growing heap and frees nothing (a 20,000-Node graph has its heap triple and eight full
    collections run, over half of ``show()``; docs/perf.md). Reference counting still frees what
    is dropped at once; cyclic garbage made meanwhile, by hookviz or by the model's forward, waits
    for the first collection after the call, which comes at the next allocation. ``Session.run()``,
    re-runs, fills and the watch leave the collector alone (architecture decision 9)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_SESSION_DEFAULTS = {
    "input_grads": False,
    "full_tensor_limit": DEFAULT_FULL_TENSOR_LIMIT,
    "histogram_bins": DEFAULT_HISTOGRAM_BINS,
    "details": "auto",
}
_LIVE_DEFAULTS = {"every_steps": None, "every_seconds": 1.0}


def _show(
    model, args, kwargs, loss_fn, baseline, on, session_options, live_options, widget_options
) -> Widget:
    """:func:`show` with the collector paused: checks that every argument given applies to what
    ``model`` is, then shows it."""

    unset = {"baseline": None, "on": None}
    keywords = {"baseline": baseline, "on": on}
    session_given = _given(session_options, _SESSION_DEFAULTS)
    live_given = _given(live_options, _LIVE_DEFAULTS)
    if isinstance(model, Watch):
        _refuse_inputs(
            "w",
            args,
            kwargs,
            loss_fn,
            WatchError,
            f"to draw the watch on a run's graph: {advice('show_watch_on')}",
        )
        _refuse_options("a watch", WatchError, {**_given({"baseline": baseline}, unset), **session_given})
        _check_on(on, "watch", "w")
        return _show_watch_on(model, on, widget_options, live_options)
    if isinstance(model, Run):  # a recorded run, usually opened from a file: read-only
        _refuse_inputs(
            "run",
            args,
            kwargs,
            loss_fn,
            HookvizError,
            f"to compare two runs: {advice('show_baseline')}",
        )
        _refuse_options("a run", HookvizError, {**_given({"on": on}, unset), **session_given, **live_given})
        if baseline is not None and not isinstance(baseline, Run):
            raise HookvizError(
                f"show(run, baseline={type(baseline).__name__}): baseline must be a hookviz.Run of the same "
                f"model, e.g. {advice('show_baseline')}"
            )
        return Widget(RecordedSession(model, baseline=baseline), **widget_options)
    if isinstance(model, RankHistory):
        _refuse_inputs(
            "history",
            args,
            kwargs,
            loss_fn,
            WatchError,
            f"to draw the history on a run's graph: {advice('show_history_on_run')}",
        )
        _refuse_options(
            "a watch history",
            WatchError,
            {**_given({"baseline": baseline}, unset), **session_given, **live_given},
        )
        _check_on(on, "history", "history")
        graph = on if on is not None else model.run
        if graph is None:
            raise WatchError(
                "this watch history holds gradient norms, not a graph: pass a run of the same model "
                f"to draw them on, e.g. {advice('show_saved_history')}, or save "
                f"one with it: {advice('save_watch_with_run')}"
            )
        widget = Widget(RecordedSession(graph) if isinstance(graph, Run) else graph, **widget_options)
        return widget.show_watch_history(model)
    if isinstance(args, (Run, Session, Watch, RankHistory)):
        raise HookvizError(
            f"show(model, {type(args).__name__}): the second argument is the model's inputs, not a "
            f"recording; show a run with {advice('show_run')} ({advice('show_baseline')} compares "
            f"two), draw a watch on a run's graph with {advice('show_watch_on')}"
        )
    _refuse_options("a model", HookvizError, {**_given(keywords, unset), **live_given})
    # The session's checks and its first run share one listing of the model (a walk is not free on a
    # model of thousands of modules); the run lists it afresh after its forward.
    with module_tree.listed_once(model):
        session = Session(model, args, kwargs=kwargs, loss_fn=loss_fn, **session_options)
        return Widget(session, **widget_options)


def _given(options: dict, defaults: dict) -> dict:
    """The options whose value is not their default (a value of another type counts as given)."""
    return {k: v for k, v in options.items() if type(v) is not type(defaults[k]) or v != defaults[k]}


def _refuse_inputs(shown: str, args, kwargs, loss_fn, error: type[HookvizError], fix: str) -> None:
    """Raise ``error`` when inputs, kwargs or a loss are given to show something that does not run
    the model (``shown``: a run, a watch ``w``, a history); ``fix`` says how to pass a run instead."""

    if isinstance(args, (Run, Session)):
        raise error(
            f"show({shown}, {type(args).__name__}): the second positional argument is a model's inputs; "
            f"a run is passed by keyword, {fix}"
        )
    if not (isinstance(args, tuple) and not args) or kwargs is not None or loss_fn is not None:
        raise error(f"show({shown}) takes no inputs, kwargs or loss_fn: it does not run the model; {fix}")


def _refuse_options(what: str, error: type[HookvizError], given: dict) -> None:
    """Raise ``error`` naming the options ``given`` that do not apply to showing ``what``."""
    if given:
        raise error(
            f"show() of {what} does not take {', '.join(f'{k}=' for k in given)}: baseline= goes with a "
            "run, on= with a watch or a watch history, every_steps=/every_seconds= with a watch, and "
            "input_grads=, full_tensor_limit=, histogram_bins=, details= with a model"
        )


def _check_on(on, noun: str, name: str) -> None:
    """Raise WatchError unless ``on`` is None, a Run or a Session (``noun``: what is drawn, a watch
    or a history; ``name``: its variable in the example)."""

    if on is not None and not isinstance(on, (Run, Session)):
        raise WatchError(
            f"show({name}, on={type(on).__name__}): on= draws the {noun} on a graph and must be a "
            f"hookviz.Run or hookviz.Session of the watched model, e.g. "
            f"{advice('show_watch_on_run' if name == 'w' else 'show_history_on_run')}"
        )


def show_watch(
    watch: Watch, session: Session | Widget | None, step: int | None = None, **widget_options: Any
) -> Widget:
    """Show ``session``'s graph coloured by the gradient norms ``watch`` recorded over training.

    Args:
        watch: a :class:`hookviz.Watch` of the model (closed, or at least not training now).
        session: a :class:`hookviz.Session` of the same model (it draws the graph; the watch's
            parameter and module names are the graph's leaf ids and module names), or a
            :class:`Widget` already showing one.
        step: the step shown first; None = the last kept step.
        **widget_options: passed to :class:`Widget` (``visible_budget``, ...).

    Returns:
        The :class:`Widget` in its watch view (see :meth:`Widget.show_watch`).

    Raises:
        WatchError: no session given, or the watch has no recorded step.
    """
    step = check_watch(watch, step)
    if session is None:
        raise WatchError(
            "show_watch() needs a Session of the watched model to draw its graph, e.g. "
            f"{advice('show_watch_on_graph')}"
        )
    widget = session if isinstance(session, Widget) else Widget(session, **widget_options)
    return widget.show_watch(watch, step)


def _show_watch_on(watch, graph, widget_options: dict, live_options: dict) -> Widget:
    """``show(watch)`` and ``show(watch, on=run)``: the watch alone (live), or on ``graph``'s graph
    (a Run or a Session of the same model). Raises WatchError for anything else as ``graph``, or a
    run none of whose leaves the watch recorded."""

    if graph is None:
        return Widget(None, **widget_options).show_live(watch, **live_options)
    widget = Widget(RecordedSession(graph) if isinstance(graph, Run) else graph, **widget_options)
    leaves = {item["id"] for item in widget.graph.get("nodes", []) if item["kind"] == "leaf"}
    if not leaves & set(watch.parameter_names):
        widget.close()
        raise WatchError(
            "none of the watch's parameters is a leaf of this run's graph: the run is of another "
            "model (or of a wrapper with other names); record a run of the watched model itself"
        )
    if watch.closed:
        check_watch(watch, None)
        return widget.show_watch(watch)
    return widget.show_live(watch, **live_options)

"""The entry points: ``hookviz.show`` (a model, a recorded run, a gathered watch history or a live
watch) and ``hookviz.show_watch``, each returning the :class:`~hookviz.widget.widget.Widget` that shows it.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any

from hookviz.advice import advice
from hookviz.errors import WatchError
from hookviz.record import module_tree
from hookviz.widget.recorded import RecordedSession
from hookviz.widget.watch_view import check_watch
from hookviz.widget.widget import Widget


def show(model, args=(), kwargs: dict | None = None, loss_fn=None, **session_options: Any) -> Widget:
    """Record one forward + backward of ``model(*args, **kwargs)`` and show it as a widget.

    ``show(run)`` shows a recorded run read-only (one from :func:`hookviz.load`: inspect, replay,
    diagnosis; edit and re-run are refused with a note, ``Widget.read_only``; ``show(run,
    baseline)`` compares two). ``show(history, run)`` shows a gathered watch history (from
    ``hookviz.load`` of ``hookviz.save(watch, path)``) over that run's graph (``show(history)``: over the run
    saved with it), reduced norms first; ``Widget.watch_rank(r)`` shows rank ``r``'s.
    ``show(watch)`` follows a :class:`hookviz.Watch` while it trains, in the same cell: heatmap,
    per-layer lines and findings, updated at most every ``every_steps`` steps or ``every_seconds``
    seconds (default 1 s), a NaN/Inf or exploding step at once (:meth:`Widget.show_live`).
    ``show(watch, run)`` (a :class:`hookviz.Run` or :class:`hookviz.Session` of the same model)
    draws the watch on that run's graph: live while the watch is open, else its last step.

    Args:
        model: an ``nn.Module``.
        args: positional inputs (a tuple, or a single tensor).
        kwargs: keyword inputs.
        loss_fn: ``loss_fn(output) -> scalar tensor``; None when the output is already a scalar.
        **session_options: passed to :class:`hookviz.Session` (lazy details by default: a large
            run is drawn from its norms and its details are recorded when the page asks, or
            soon after the cell ends, see :meth:`Widget.fill_details`); ``visible_budget`` and
            ``vanishing_threshold`` go to :class:`Widget`.

    Returns:
        The :class:`Widget`; display it by leaving it last in a notebook cell.
    """
    widget_options = {
        k: session_options.pop(k) for k in ("visible_budget", "vanishing_threshold") if k in session_options
    }
    with _collector_paused():
        return _show(model, args, kwargs, loss_fn, widget_options, session_options)


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


def _show(model, args, kwargs, loss_fn, widget_options: dict, session_options: dict) -> Widget:
    """:func:`show` with the collector paused."""
    from hookviz.data.run import Run
    from hookviz.record.session import Session
    from hookviz.watching.gather import RankHistory
    from hookviz.watching.watch import Watch

    if isinstance(model, Watch):
        return _show_watch_on(model, args, kwargs, loss_fn, widget_options, session_options)
    if isinstance(model, Run):  # a recorded run, usually opened from a file: read-only
        return Widget(
            RecordedSession(model, baseline=args if isinstance(args, Run) else None), **widget_options
        )
    if isinstance(model, RankHistory):
        run = args if isinstance(args, Run) else model.run
        if run is None:
            raise WatchError(
                "this watch history holds gradient norms, not a graph: pass a run of the same model "
                f"to draw them on, e.g. {advice('show_saved_history')}, or save "
                f"one with it: {advice('save_watch_with_run')}"
            )
        widget = Widget(RecordedSession(run), **widget_options)
        return widget.show_watch_history(model)
    # The session's checks and its first run share one listing of the model (a walk is not free on a
    # model of thousands of modules); the run lists it afresh after its forward.
    with module_tree.listed_once(model):
        session = Session(model, args, kwargs=kwargs, loss_fn=loss_fn, **session_options)
        return Widget(session, **widget_options)


def show_watch(watch, session, step: int | None = None, **widget_options: Any) -> Widget:
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


def _show_watch_on(watch, graph, kwargs, loss_fn, widget_options: dict, live_options: dict) -> Widget:
    """``show(watch)`` and ``show(watch, run)``: the watch alone (live), or on ``graph``'s graph (a
    Run or a Session of the same model). Raises WatchError for anything else as ``graph``, or a
    run none of whose leaves the watch recorded."""
    from hookviz.data.run import Run
    from hookviz.record.session import Session

    if kwargs is not None or loss_fn is not None:
        raise WatchError(
            "show(watch) takes no kwargs or loss_fn: the watch does not run the model; to draw it on "
            f"a graph pass a recorded run, {advice('show_watch_on_run')}"
        )
    if isinstance(graph, tuple) and not graph:
        return Widget(None, **widget_options).show_live(watch, **live_options)
    if not isinstance(graph, (Run, Session)):
        raise WatchError(
            f"show(watch, {type(graph).__name__}): the second argument draws the watch on a graph and "
            "must be a hookviz.Run or hookviz.Session of the watched model, e.g. "
            f"{advice('show_watch_on_run')}"
        )
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

"""The watch view: the graph coloured by a :class:`hookviz.Watch`'s norms at one step, with its heatmap,
a step slider and its findings; live while the watch trains (:mod:`hookviz.widget.live` follows it).
"""

from __future__ import annotations

from hookviz.advice import advice
from hookviz.analysis.onset import onsets
from hookviz.colors import NO_GRAD_COLOR, NOT_WATCHED_COLOR, SKIPPED_COLOR, legend, norm_color
from hookviz.errors import WatchError
from hookviz.widget.diagnosis import diagnosis_json, findings_json
from hookviz.widget.failures import reported
from hookviz.widget.payload import json_float
from hookviz.widget.selection import with_watch
from hookviz.widget.sources import arrival_order
from hookviz.widget.watch_json import (
    figure_json,
    live_watch_figure,
    watch_chart_json,
    watch_color_range,
    watch_leaf_table,
    watch_node_norms,
    watched_elements,
    with_onsets,
    with_step_marker,
)
from hookviz.widget.watch_rows import SKIPPED_TEXT, with_step_rows


def show_watch(widget, watch, step: int | None = None) -> None:
    """:meth:`hookviz.Widget.show_watch`: colour the graph by ``watch``'s norms at ``step``."""
    step = check_watch(watch, step)
    history = watch.history
    found = watch_onsets(widget, watch, history)
    try:
        heatmap = with_onsets(with_step_marker(figure_json(watch.heatmap())), found)
        with_step_rows(heatmap, history)
    except Exception as error:  # the heatmap is a picture: without it the view still works
        heatmap = {"error": reported("heatmap", error)}
    if widget.watch is None:  # the run's chart comes back with hide_watch
        widget._run_chart = widget.chart
    widget.watch = watch
    widget._watch_onsets = found
    widget._watch_range = watch_color_range(history)
    with widget.hold_sync():
        widget.watch_heatmap = heatmap
        show_watch_step(widget, step)
        widget._clear_errors("watch")


def show_live(widget, watch, every_steps: int | None = None, every_seconds: float | None = 1.0) -> None:
    """:meth:`hookviz.Widget.show_live`: follow ``watch`` while it trains."""
    from hookviz.watching.watch import Watch
    from hookviz.widget.live import LiveFeed

    if not isinstance(watch, Watch):
        raise WatchError(
            f"show_live() needs a hookviz.Watch (from {advice('watch')}), got {type(watch).__name__}"
        )
    if every_steps is not None and (
        isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1
    ):
        raise WatchError(f"every_steps={every_steps!r} must be a positive int (or None: update by time)")
    if every_seconds is not None and (isinstance(every_seconds, bool) or not every_seconds > 0):
        raise WatchError(f"every_seconds={every_seconds!r} must be a positive number of seconds (or None)")
    if every_steps is None and every_seconds is None:
        raise WatchError(
            "give every_steps or every_seconds (the default, every_seconds=1.0, updates once a second)"
        )
    if widget.live is not None:
        widget.live.stop()
    widget.watch = watch
    widget.live = LiveFeed(widget, watch, every_steps, every_seconds)


def show_live_state(widget, watch, closed: bool) -> None:
    """The live view of ``watch``'s latest kept step (called from the LiveFeed's thread)."""
    history = watch.history
    if not history.steps or widget.watch is not watch:
        return
    step = history.steps[-1]
    name = watch.model_name
    found = watch_onsets(widget, watch, history)
    try:
        figure = with_onsets(live_watch_figure(history, f"{name}: gradient norms over training"), found)
    except Exception as error:  # the figure is a picture: without it the view still works
        figure = {"error": reported("heatmap", error)}
    widget._watch_onsets = found
    widget._watch_range = watch_color_range(history)
    with widget.hold_sync():
        widget.watch_heatmap = figure
        show_watch_step(widget, step, live=not closed)
        widget._clear_errors("watch")


def watch_step(widget, step: int) -> bool:
    """:meth:`hookviz.Widget.watch_step`: show step ``step`` of the watch on screen."""
    if widget.watch is None:
        widget._set_error("watch", "no watch is shown; call show_watch(watch) first")
        return False
    steps = widget.watch.steps
    if isinstance(step, bool) or not isinstance(step, int) or step not in steps:
        widget._set_error(
            "watch", f"step {step!r} was not kept by the watch; kept steps: {_steps_text(steps)}"
        )
        return False
    with widget.hold_sync():
        show_watch_step(widget, step)
        widget._clear_errors("watch")
    return True


def show_watch_history(widget, history, rank: int | None = None, step: int | None = None) -> None:
    """:meth:`hookviz.Widget.show_watch_history`: show a gathered history, ``rank``'s or reduced."""
    from hookviz.watching.gather import RankHistory
    from hookviz.watching.rank_view import RankView

    if not isinstance(history, RankHistory):
        raise WatchError(
            f"show_watch_history() takes a watch history (hookviz.load of a saved watch, or "
            f"Watch.gather), got {type(history).__name__}; a Watch itself: Widget.show_watch(w)"
        )
    if rank is None and not history.strategy:
        rank = history.ranks[0]
    widget.watch_ranks = list(history.ranks)
    show_watch(widget, RankView(history, rank), step)


def watch_rank(widget, rank: int | None) -> bool:
    """:meth:`hookviz.Widget.watch_rank`: switch the gathered history on screen to ``rank``."""
    from hookviz.watching.rank_view import RankView

    if not isinstance(widget.watch, RankView):
        widget._set_error(
            "watch", f"no gathered watch history is shown; call {advice('show_history_on_run')}"
        )
        return False
    try:
        view = RankView(widget.watch.source, rank)
    except WatchError as error:
        widget._set_error("watch", str(error))
        return False
    step = widget.watch_view.get("step")
    widget.show_watch(view, step if step in view.steps else None)
    return True


def hide_watch(widget) -> None:
    """:meth:`hookviz.Widget.hide_watch`: leave the watch view."""
    widget.watch = None
    with widget.hold_sync():
        widget.watch_view = {}
        widget.watch_heatmap = {}
        widget.diagnosis = widget._run_diagnosis
        if getattr(widget, "_run_chart", None) is not None:
            widget.chart = widget._run_chart
            widget._run_chart = None
        widget.inspector = with_watch(widget, widget.inspector)
        widget._clear_errors("watch")


def show_watch_step(widget, step: int, live: bool = False) -> None:
    """The ``watch_view`` traitlet and the banner for ``step`` of the watch on screen (``live``: it
    still trains)."""
    watch = widget.watch
    parameters = watch.norms(step, kind="parameter")
    outputs = watch.norms(step, kind="output")
    steps = watch.steps
    node_norms = watch_node_norms(widget.graph, parameters, outputs)
    try:
        diagnosis = diagnosis_json(watch.diagnose(step), "watch", step)
    except Exception as error:  # a diagnosis bug must not take the widget down
        diagnosis = diagnosis_json([], "watch", step, error=reported("diagnosis", error))
    # when each trouble started and where, over every kept step: the banner keeps it at any step
    diagnosis["onset"] = findings_json(getattr(widget, "_watch_onsets", []))
    onset_error = getattr(widget, "_watch_onset_error", None)
    if onset_error:
        diagnosis["error"] = "; ".join(filter(None, [diagnosis.get("error"), onset_error]))
    # whose findings: the banner names the rank (or reduced) as the picker does
    diagnosis["of"] = picker_label(watch)
    colors = {element: NO_GRAD_COLOR for element in watched_elements(widget.graph, watch_names(watch))}
    colors.update({element: norm_color(norm, widget._watch_range) for element, norm in node_norms.items()})
    what = watch_label(watch)
    legend_now = legend(widget._watch_range, f"log10 ‖grad‖: {what}, step {step}")
    legend_now["keys"].append({"color": NOT_WATCHED_COLOR, "text": "not watched"})
    widget.watch_view = {
        "steps": steps,
        "step": step,
        "index": steps.index(step),
        "norms": {name: json_float(norm) for name, norm in watch.norms(step).items()},
        "node_norms": node_norms,
        # what the page draws: each element's colour; "no grad" grey where the watch records the
        # element and it got no gradient at this step, "not watched" where the watch records nothing
        "node_colors": colors,
        "missing_color": NOT_WATCHED_COLOR,
        "color_range": widget._watch_range,
        "legend": legend_now,
        "model": watch.model_name,
        # a gathered history: the rank shown (None = reduced over ranks), for the rank selector
        "rank": getattr(watch, "rank", None),
        "reduced": bool(getattr(getattr(watch, "source", None), "strategy", "")),
        # the rank picker's words ("rank 1 (local)"); None for a watch of one process
        "of": diagnosis["of"],
        # a watch still training (show_live): the page says so, and updates follow
        "live": live,
        # what a reader of the numbers must know (what a step is, a loss scale in them), and what
        # this step was beside its gradients (skipped by the GradScaler)
        "notes": watch_notes(watch),
        "step_note": SKIPPED_TEXT if step in watch_skipped(watch) else "",
        "step_note_color": SKIPPED_COLOR,
        # what each part of the page shows, in words (the distributed view has three quantities)
        "parts": [
            *([f"Graph colours and chart: {what} at step {step}."] if widget.graph.get("nodes") else []),
            f"Heatmap: {what}, every kept step; the dashed lines mark when a trouble started"
            + (
                "; under it, each layer's update-to-weight ratio and each learning rate per step."
                if (widget.watch_heatmap or {}).get("step_rows", {}).get("rows")
                else "."
            ),
            *(
                [
                    f"Leaf table: {what} of each parameter at step {step}; Back to the run shows "
                    "the gradients of the run the graph was recorded from."
                ]
                if widget.graph.get("nodes")
                else []
            ),
            f"Findings (banner): read from {what} at step {step}"
            + ("; the ranks compared at that step." if getattr(watch, "source", None) is not None else "."),
        ],
        # the leaf table follows the picker: the watch's statistics of each parameter at this step
        "leaves": watch_leaf_table(watch.history, step, what),
    }
    if widget.graph.get("nodes"):
        widget.chart = watch_chart_json(parameters, widget._watch_range, f"{what}, step {step}")
    widget.diagnosis = diagnosis
    # the selection's inspector says what the watch recorded for it at this step
    widget.inspector = with_watch(widget, widget.inspector)


def watch_onsets(widget, watch, history) -> list:
    """:func:`hookviz.analysis.onset.onsets` of the watch on screen (a Watch, or a rank of a
    gathered history: the order its gradients arrived in backward, a Watch's own or the history's
    :func:`hookviz.widget.sources.arrival_order`). When it fails: logged, its note kept in
    ``widget._watch_onset_error`` for the banner (:func:`show_watch_step`), and [] (the banner
    still shows the step's findings)."""
    widget._watch_onset_error = None
    order = getattr(watch, "arrival_order", None)
    if order is None and getattr(watch, "source", None) is not None:  # a history read from a file
        order = arrival_order(watch.source, watch.rank)
    try:
        return onsets(history, order)
    except Exception as error:  # the onset is a headline: without it the view still works
        widget._watch_onset_error = reported("finding the onsets", error)
        return []


def watch_notes(watch) -> list[str]:
    """The notes of the watch on screen (:attr:`hookviz.Watch.notes`, or a gathered history's)."""
    notes = getattr(watch, "notes", None)
    return list(notes if notes is not None else getattr(watch.source, "notes", []))


def watch_skipped(watch) -> set[int]:
    """The steps of the watch on screen that the ``GradScaler`` skipped."""
    history = getattr(watch, "source", None)
    if history is None:
        return set(watch.skipped_steps)
    return {s for s, skipped in zip(history.steps, history.skipped) if skipped}


def watch_names(watch) -> list[str]:
    """Every name the watch records (parameters and module outputs)."""
    names = getattr(watch, "names", None)
    return list(names) if names is not None else list(watch.source.names)


def watch_label(watch) -> str:
    """What the watch's norms are, in words: a rank's local ones, the reduced ones, or a watch's."""
    rank = getattr(watch, "rank", None)
    if getattr(watch, "source", None) is None:
        return "gradient norms"
    if rank is not None:
        return f"rank {rank}'s local gradient norms (its own batch, before the all-reduce)"
    return "reduced gradient norms (.grad after the all-reduce, what the optimizer stepped on)"


def picker_label(watch) -> str | None:
    """The rank picker's words for the norms on screen ("rank 1 (local)", "all ranks
    (reduced)"); None for a watch of one process (no picker)."""
    if getattr(watch, "source", None) is None:
        return None
    rank = getattr(watch, "rank", None)
    return "all ranks (reduced)" if rank is None else f"rank {rank} (local)"


def check_watch(watch, step: int | None) -> int:
    """The step to show first (None = the last kept one); raises WatchError for a bad watch or step."""
    from hookviz.watching.rank_view import RankView
    from hookviz.watching.watch import Watch

    if not isinstance(watch, (Watch, RankView)):
        raise WatchError(
            f"show_watch() needs a hookviz.Watch (from {advice('watch')}), got {type(watch).__name__}"
        )
    steps = watch.steps
    if not steps:
        raise WatchError(
            f"the watch has no recorded step yet: train under `with {advice('watch')} as watch:` "
            "(every backward that reaches the model is a step), then call show_watch(watch)"
        )
    step = steps[-1] if step is None else step
    if isinstance(step, bool) or step not in steps:
        raise WatchError(f"step {step!r} was not kept by the watch; kept steps: {_steps_text(steps)}")
    return step


def _steps_text(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:8]))
    return f"{shown} ... {steps[-1]} ({len(steps)} steps)" if len(steps) > 8 else shown

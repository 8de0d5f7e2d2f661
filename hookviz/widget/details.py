"""When the widget records a run's details: at once for a small run, after the page drew a large one.

Runs are recorded lazily (norms first, see :mod:`hookviz.record.details`); one rule,
:func:`hookviz.record.details.recorded_in_full`, says which are small enough to get their details
at once (``Session.run()`` fills those already). A large run's leaf table and chart wait with its
details, and are sent first when the page (or :meth:`hookviz.Widget.fill_details`) asks for them.
"""

from __future__ import annotations

import asyncio
import contextlib

from hookviz.errors import DetailsRefused
from hookviz.widget.chart import chart_json
from hookviz.widget.diagnosis import diagnose_run, diagnosis_json
from hookviz.widget.leaf_table import leaf_summaries, leaf_summary_json
from hookviz.widget.selection import inspect

# In a kernel, how long after the cell that showed a large run its details wait for the page to
# ask for them (it asks once it has drawn the graph). Recorded at once, they would take the
# machine's cores while the page draws, and delay its first paint (docs/perf.md).
DETAILS_WAIT_FOR_THE_PAGE_S = 2.0


def fill_before_the_next_cell(widget) -> None:
    """In IPython, record ``widget``'s pending details after the cell that showed it has ended
    and in any case before another cell runs: a training step in the next cell would change the
    parameters, and the details could no longer be recorded. In a kernel (an event loop runs)
    they wait up to :data:`DETAILS_WAIT_FOR_THE_PAGE_S` for the page, which asks for them once it
    has drawn the graph (its state is already on the way, and it draws without the kernel); in
    a terminal IPython they are recorded when the cell ends. Whichever comes first records them;
    the others find nothing to do."""
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython: the page's request (or w.fill_details()) does it
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "events"):
        return

    def fill(*_) -> None:
        for event in ("post_run_cell", "pre_run_cell"):
            with contextlib.suppress(ValueError):
                shell.events.unregister(event, fill)
        # A refusal is shown by the widget; any other error is IPython's to print (it never
        # stops the next cell).
        widget.fill_details()

    def after_the_cell(*_) -> None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", after_the_cell)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a terminal IPython: no page draws meanwhile
            fill()
            return
        loop.call_later(DETAILS_WAIT_FOR_THE_PAGE_S, fill)

    shell.events.register("post_run_cell", after_the_cell)
    shell.events.register("pre_run_cell", fill)


def fill_details(widget) -> bool:
    """:meth:`hookviz.Widget.fill_details`: record the pending details of the run on screen."""
    run = widget.run
    show_pending_tables(widget)
    if not widget.details_pending or run is None:
        return True
    try:
        refused = record_details(widget, run)
    finally:
        widget.details_pending = False  # the page stops asking, whatever happened
    with widget.hold_sync():
        widget._run_diagnosis = (
            diagnosis_json([], "run", error=refused) if refused else diagnose_run(widget, run)
        )
        if widget.watch is None:
            widget.diagnosis = widget._run_diagnosis
        if widget.selected:
            inspect(widget, widget.selected, quiet=True)
    return refused is None


def record_details(widget, run) -> str | None:
    """``run.fill_details()``, then the baseline's (the inspector compares their values):
    None when the run's details are there, else the message of its refusal. A refusal, the
    run's or the baseline's, is shown in ``errors["details"]``. Only the documented refusals
    (:class:`~hookviz.errors.DetailsRefused`) are caught."""
    try:
        run.fill_details()
    except DetailsRefused as refusal:
        widget._set_error("details", str(refusal))
        return str(refusal)
    baseline, message = widget.baseline, None
    if baseline is not None and baseline is not run and baseline.details_pending:
        try:
            baseline.fill_details()
        except DetailsRefused as refusal:
            message = f"the baseline run's values (shown as before): {refusal}"
    widget._set_error("details", message)
    return None


def show_tables(widget, run) -> None:
    """The leaf table and the chart of ``run`` (norms and leaf gradients: no details needed)."""
    baseline = widget.baseline
    widget.leaf_summary = leaf_summary_json(run, baseline, _baseline_leaf_summaries(widget, run))
    widget.chart = chart_json(run, baseline, widget.vanishing_threshold)


def show_pending_tables(widget) -> None:
    """Send the leaf table and the chart of the run on screen if they still wait (before its
    details: they need no second recording, so the page gets them at once)."""
    if widget._tables_pending and widget.run is not None:
        widget._tables_pending = False
        with widget.hold_sync():
            show_tables(widget, widget.run)


def _baseline_leaf_summaries(widget, run) -> dict:
    baseline = widget.baseline if widget.baseline is not None else run
    if widget._baseline_leaves is None or widget._baseline_leaves[0] is not baseline:
        widget._baseline_leaves = (baseline, leaf_summaries(baseline))
    return widget._baseline_leaves[1]

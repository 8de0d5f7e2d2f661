"""The hookviz widget: an ``anywidget.AnyWidget`` whose state lives in typed traitlets.

Python holds the run; the page (``hookviz/static/widget.js``, built from ``js/``) owns the view:
which module boxes are open, the selection, the search and the view kind are decided there (the
rules live once, in ``js/src/collapse.js`` and ``find.js``) and synced to the ``collapsed``,
``selected``, ``query`` and ``view`` traitlets. Python reads them, and sets them to drive the page
(:meth:`Widget.select`, :meth:`Widget.search`, :meth:`Widget.set_view`); the page follows. A
selection is answered with the ``inspector`` traitlet (tensor statistics and values, which only the
kernel has). Requests that need Python (edits, re-run) come with ``model.send({"type": ..., ...})``;
each is validated (:mod:`hookviz.widget.messages`) and answered through the traitlets (an error goes
to ``errors[control]``, next to the control that caused it); the last good run stays on screen. The
same requests are public methods, so every interaction can be driven from Python:

>>> w = hookviz.show(model, (x, y, z), loss_fn=loss_fn)   # doctest: +SKIP
>>> w.select("SubBackward0_0"); w.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
>>> w.rerun()

After every run the widget calls ``hookviz.diagnose(run)`` and shows the findings in a banner above the
graph (``diagnosis``); clicking one selects its node. Runs are recorded lazily (norms first, see
:mod:`hookviz.record.details`): a small run's details are recorded at once, a large one's when the page
asks after drawing it, or at the latest two seconds after the cell that showed it ends, or before
the next cell (:meth:`Widget.fill_details`), so the graph of GPT-2 appears before its values and diagnosis are
computed. ``w.show_watch(watch)`` (or
``hookviz.show_watch(watch, session)``) colours the graph by the gradient norms a
:class:`hookviz.Watch` recorded at one training step, with a step slider and the watch's heatmap.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import orjson
import traitlets

from hookviz.analysis.diagnose import check_thresholds
from hookviz.errors import HookvizError
from hookviz.record.devices import devices
from hookviz.widget import chart, details, display, editing, messages, selection, view_commands, watch_view
from hookviz.widget.chart import VANISHING_RATIO
from hookviz.widget.failures import sendable
from hookviz.widget.recorded import READ_ONLY_NOTE, RecordedSession
from hookviz.widget.view_commands import VIEWS

if TYPE_CHECKING:  # annotations only
    import plotly.graph_objects

    from hookviz.data.run import Run
    from hookviz.record.session import Session
    from hookviz.watching.gather import RankHistory
    from hookviz.watching.watch import Watch

_STATIC = Path(__file__).parent / "static"
# The bundle's text, read once: given a path, anywidget connects every widget to the file's change
# signal with a closure that holds the widget, so no widget would ever be freed (anywidget issue 929).
_BUNDLE = (_STATIC / "widget.js").read_text(encoding="utf-8")


def _json_buffer(value: dict | list, widget=None) -> memoryview:
    """A large state value as one binary buffer of UTF-8 JSON. ipywidgets walks a nested state
    element by element looking for buffers; a buffer it passes as it is, and the page parses it
    once. Encoded by orjson, several times faster than the standard library's json on a large graph
    (docs/perf.md). The values are JSON-safe already (``payload.json_float``); orjson would write a
    stray NaN as null."""
    return memoryview(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))


def _leaf_rows_buffer(rows: list[dict], widget=None) -> memoryview:
    """The leaf table (``leaf_table.leaf_summary_json``) as :func:`_json_buffer`, each unchanged
    leaf's summary sent once: its row has no ``after`` (there the baseline's summary itself), which
    the page reads as ``before``. On the first run every leaf is unchanged, so this halves the
    table sent."""
    return _json_buffer(
        [row if row["changed"] else {k: v for k, v in row.items() if k != "after"} for row in rows]
    )


class Widget(anywidget.AnyWidget):
    """Interactive view of a :class:`hookviz.Session`: graph, inspector, edits, re-run, replay, chart.

    Args:
        session: the session to show; it is run once now when it has no run yet. None: no
            graph, for a watch shown alone (``hookviz.show(watch)``, :meth:`show_live`); requests
            that need a run are refused with a note.
        visible_budget: about how many elements the first view draws: the module tree opens as
            deep as fits in it (the page's rule, ``defaultCollapsed`` in ``js/src/collapse.js``);
            None: the page's default (40).
        vanishing_threshold: a layer's gradient "vanishes" below this fraction of the gradient of
            the layer nearest the loss: the chart's line and the diagnosis banner use it alike.
        **kwargs: passed to ``anywidget.AnyWidget`` (ipywidgets options such as ``layout``).

    Raises:
        HookvizError: ``visible_budget`` is not None or an int of at least 1,
            ``vanishing_threshold`` is not a positive number of at most 1, or the first run fails
            (there is nothing to show yet: :meth:`hookviz.Session.run`'s errors).
    """

    _esm = _BUNDLE

    graph = traitlets.Dict(value_trait=traitlets.Any(), key_trait=traitlets.Unicode()).tag(
        sync=True, to_json=_json_buffer
    )
    """The run's graph for the page: nodes, edges, module groups, colour range (``graph.graph_json``);
    sent as one buffer of JSON."""
    collapsed = traitlets.List(traitlets.Unicode(), allow_none=True, default_value=None).tag(sync=True)
    """Names of the module boxes drawn closed, as the page last drew them; None until the page has
    made the first view of this graph (a new graph structure and :meth:`set_view` set it back to
    None: the page opens the first view by its rules)."""
    view = traitlets.Enum(VIEWS, default_value="ops").tag(sync=True)
    """``"ops"`` (the module tree, opened as far as fits) or ``"modules"`` (every module box)."""
    visible_budget = traitlets.Int(allow_none=True, default_value=None).tag(sync=True)
    """About how many elements the first view draws (None: the page's default)."""
    inspector = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """What the kernel knows of the selection (``inspector.*_inspector_json``: statistics and
    values); the page draws what its graph says meanwhile."""
    selected = traitlets.Unicode("").tag(sync=True)
    """Id of the selected node (``"module:<name>"`` for a module box); "" for none. Set by the page
    (a click, a search, a finding) or by :meth:`select`; the ``inspector`` follows it."""
    query = traitlets.Unicode("").tag(sync=True)
    """The last search (the page's box or :meth:`search`); the page finds and selects its match."""
    edits = traitlets.List(traitlets.Dict()).tag(sync=True)
    """The session's edits: id, target, slot, source, one dict each."""
    edit_state = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """Whether edits wait for a re-run (``pending``) and what the run on screen is (``shown``)."""
    code = traitlets.Unicode("").tag(sync=True)
    """``session.edits_as_code()``: the plain PyTorch hooks that make the edits."""
    devices = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Devices a re-run may pick (``hookviz.devices()``)."""
    device = traitlets.Unicode("cpu").tag(sync=True)
    """Device of the run on screen."""
    errors = traitlets.Dict(value_trait=traitlets.Unicode(), key_trait=traitlets.Unicode()).tag(sync=True)
    """Control name -> the error shown beside that control."""
    leaf_summary = traitlets.List(traitlets.Dict()).tag(sync=True, to_json=_leaf_rows_buffer)
    """The leaf table: one row per leaf, its gradient now and in the baseline run (one buffer);
    empty while a large run's leaf table and chart wait for the page (:meth:`fill_details` sends
    them first)."""
    log = traitlets.List(traitlets.Dict()).tag(sync=True)
    """What the user's hooks printed during the run on screen."""
    replay = traitlets.List(traitlets.Dict()).tag(sync=True, to_json=_json_buffer)
    """Backward step by step, in execution order, for the replay slider (one buffer)."""
    chart = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """The gradient-flow chart's data: per-layer norms now and in the baseline; {} while a large
    run's chart waits for the page, as ``leaf_summary`` does."""
    summary = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """Loss, baseline loss, device, run number and size of the run on screen."""
    diagnosis = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """The diagnosis banner: ``hookviz.diagnose(run)`` findings grouped by kind."""
    watch_view = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """The watch view (``show_watch``): step slider, the step's norms per node; {} when hidden."""
    watch_heatmap = traitlets.Dict(key_trait=traitlets.Unicode()).tag(sync=True)
    """The watch's layers x steps heatmap as a plotly figure dict; {} when hidden."""
    details_pending = traitlets.Bool(False).tag(sync=True)
    """True while the run on screen is drawn from its norms only (:meth:`fill_details` records the rest)."""
    read_only = traitlets.Unicode("").tag(sync=True)
    """Why edit and re-run are off (a run opened from a file, ``hookviz.load``), else ""."""
    watch_ranks = traitlets.List(traitlets.Int()).tag(sync=True)
    """The ranks of a gathered watch history on screen (``hookviz.watching.gather``), for the selector."""

    def __init__(
        self,
        session: Session | RecordedSession | None,
        *,
        visible_budget: int | None = None,
        vanishing_threshold: float = VANISHING_RATIO,
        **kwargs: Any,
    ) -> None:
        # The first run is recorded before the comm to the page opens: opening it sends the
        # bundle, which the page loads at once. Loaded during the run, the page and the run's
        # OpenMP regions compete for the cores and the first paint comes later; loaded while the
        # page's state is built (one Python thread), it costs nothing (docs/perf.md).
        _check_options(visible_budget, vanishing_threshold)
        # session None: a live watch alone (hookviz.show(watch)), with no graph.
        run = None if session is None else session.last_run if session.last_run is not None else session.run()
        super().__init__(**kwargs)
        self.session = session
        self.visible_budget = visible_budget
        self.vanishing_threshold = vanishing_threshold
        self._structure: str | None = None
        self._run_count = 0
        self._baseline_leaves: tuple[object, dict] | None = None
        self._tables_pending = False  # the leaf table and chart of the run on screen wait for the page
        self._run_diagnosis: dict = {}
        self.watch = None  # the hookviz.Watch on screen (show_watch), or None
        self._watch_range: dict = {}
        self.devices = list(devices())
        self.read_only = READ_ONLY_NOTE if getattr(session, "read_only", False) else ""
        self.live = None  # the hookviz.widget.live.LiveFeed following an open watch, if any
        if run is not None:
            self._show_run(run)
        self.on_msg(self._handle_message)

    def close(self) -> None:
        """Close the widget and its comm to the page; a live view stops following its watch first
        (its thread ends, after at most 2 s of an update being sent)."""
        live = getattr(self, "live", None)  # None also when __init__ failed (ipywidgets closes on __del__)
        if live is not None:
            live.stop(wait=2.0)
        super().close()

    # ----- the runs --------------------------------------------------------------------------

    @property
    def run(self) -> Run | None:
        """The run on screen (the last good one); None for a watch shown alone."""
        return None if self.session is None else self.session.last_run

    @property
    def baseline(self) -> Run | None:
        """The run everything is compared with (the session's first run); None without a session."""
        return None if self.session is None else self.session.baseline

    def _show_run(self, run) -> None:
        display.show_run(self, run)

    def fill_details(self) -> bool:
        """Record the details of the run on screen (values, statistics, forward values) if they
        are still pending, then diagnose it and refresh the inspector. A large run's leaf table
        and chart, which wait with them, are sent first (they need no second recording).
        The page asks for it once it has drawn the graph; in IPython it also runs before the
        next cell, and in a kernel at the latest
        :data:`~hookviz.widget.details.DETAILS_WAIT_FOR_THE_PAGE_S` after the cell that showed a
        large run (at once in a terminal IPython); call it from Python to have ``diagnosis`` at once.
        Recording them is one more forward + backward of the model (``run.fill_details()``,
        :mod:`hookviz.record.details`). When it refuses (the model changed since the run), the
        reason goes to ``errors["details"]`` and the diagnosis banner, and the records show
        what is pending; any other error propagates.

        Returns:
            True when the details are there (also when nothing was pending); False when refused.
        """
        return details.fill_details(self)

    # ----- errors ----------------------------------------------------------------------------

    def _set_error(self, control: str, message: str | None) -> None:
        errors = dict(self.errors)
        if message:
            errors[control] = message
        else:
            errors.pop(control, None)
        if errors != self.errors:
            self.errors = errors

    def _clear_errors(self, *controls: str) -> None:
        errors = {k: v for k, v in self.errors.items() if k not in controls}
        if errors != self.errors:
            self.errors = errors

    # ----- what the page (or a test) asks for ---------------------------------------------------

    def select(self, target: str) -> bool:
        """Select a node (its id, e.g. ``"SubBackward0_0"`` or a leaf's name) or a module
        (``"module:<name>"`` or its qualified name, e.g. ``"transformer.h"``): the inspector shows
        it, and the page opens the module boxes around it and zooms to it.

        The name must be exact; :meth:`search` takes part of a name. Returns False (and sets
        ``errors["select"]``) when nothing is named so.

        Args:
            target: a node id (``"SubBackward0_0"``), a leaf name, ``"module:<name>"`` or a
                module's qualified name.
        """
        return selection.select(self, target)

    def search(self, query: str) -> None:
        """Search the graph as the page's search box does: the page selects the best match of
        part of a module name, op node id or leaf name (exact name first, then a name ending with
        it, then the shortest; ``find`` in ``js/src/find.js``), and ``selected`` follows.

        Args:
            query: part of a module name, op node id or leaf name.
        """
        selection.search(self, query)

    @traitlets.observe("selected")
    def _on_selected(self, change) -> None:
        selection.inspect(self, change["new"], quiet=True)

    def _sites(self, target: str) -> list[str]:
        return selection.sites(self, target)

    def apply_edit(self, target: str, slot: str, expression: str) -> str | None:
        """Add an edit (applied at the next :meth:`rerun`). Returns its id, or None and sets
        ``errors["edit"]`` when the target, slot or expression is bad.

        Args:
            target: what to edit, as for :meth:`hookviz.Session.edit` (a node id, a leaf name or a
                module's qualified name).
            slot: which gradient of the target, as for :meth:`hookviz.Session.edit`.
            expression: the new gradient, an expression of the safe expression language (a
                string here, where ``Session.edit`` also takes a callable).
        """
        return editing.apply_edit(self, target, slot, expression)

    def remove_edit(self, edit_id: str) -> bool:
        """Remove one edit by id (takes effect at the next re-run).

        Args:
            edit_id: the id :meth:`apply_edit` returned (``"e3"``).
        """
        return editing.remove_edit(self, edit_id)

    def reset_edits(self) -> None:
        """Remove every edit (takes effect at the next re-run)."""
        editing.reset_edits(self)

    def rerun(self, device: str | None = None, forward: bool = False) -> bool:
        """Run again with the current edits (backward only when the device is unchanged, unless
        ``forward`` is True).

        On failure the error goes to ``errors["device"]``, ``errors["edit"]`` or ``errors["rerun"]``
        and the last good run stays on screen. Returns True on success.

        Args:
            device: one of :func:`hookviz.devices`; None for the device on screen.
            forward: run forward again even when the device is unchanged.
        """
        return editing.rerun(self, device, forward)

    def set_view(self, view: str) -> bool:
        """``"modules"``: the module tree as a tree diagram (one box per module, an edge from each
        module to its children, no ops), opened as deep as its columns fit; ``"ops"``: the first
        view again (the graph with its module boxes, opened as deep as fits). The page opens the
        boxes by its rules (``firstCollapsed`` in ``js/src/collapse.js``).

        Args:
            view: ``"modules"`` or ``"ops"``.
        """
        return view_commands.set_view(self, view)

    def toggle_group(self, module: str) -> bool:
        """Open a closed module box on the page (its child modules as closed boxes), or close an
        open one: the page does it by its rule, as for a click, and ``collapsed`` follows. Returns
        False (and sets ``errors["group"]``) for a module the graph has no box for.

        Args:
            module: the module's qualified name.
        """
        return view_commands.toggle_group(self, module)

    def collapse_all(self) -> None:
        """Close every top-level module box on the page."""
        view_commands.collapse_all(self)

    def expand_all(self) -> None:
        """Open every module box."""
        view_commands.expand_all(self)

    def save_html(
        self,
        path: str | os.PathLike,
        title: str = "hookviz",
        values: str = "opened",
        pinned: Iterable[str] = (),
    ) -> Path:
        """Write this view to one self-contained HTML file that opens in a browser with no kernel
        and no network (graph, inspector, replay, chart and search work; edits and re-run are
        disabled there). Embed it in a blog post or course page with an ``<iframe>``. A live
        watch view (``hookviz.show(watch)``) is saved as the watch stands, mid-training too.

        Args:
            path: the file to write.
            title: the page's title.
            values: ``"opened"`` (default): every tensor's statistics, histogram and overview, and
                the values (numbers) only of the inspector on screen and of ``pinned``; ``"all"``:
                the values of every tensor the run recorded too (a larger file).
            pinned: node ids or module names whose inspectors keep their values.

        Returns:
            the ``pathlib.Path`` written.

        Raises:
            HookvizError: ``values`` is not "opened" or "all".
            WatchError: a live watch view whose watch has kept no step yet (the page would be
                empty).
        """
        from hookviz.widget.export import save_html

        self.fill_details()
        return save_html(self, path, title, values=values, pinned=pinned)

    def chart_figure(self) -> plotly.graph_objects.Figure:
        """The gradient-flow chart as a ``plotly.graph_objects.Figure``: per-module norm of the
        gradient into the module's inputs, log scale, this run vs the baseline, and the vanishing
        threshold as a dashed line. Display it (``fig.show()``) or save it (``fig.write_html``)."""
        details.show_pending_tables(self)
        return chart.chart_figure(self.chart)

    # ----- the watch view ----------------------------------------------------------------------

    def show_watch(self, watch: Watch, step: int | None = None) -> Widget:
        """Colour the graph by the gradient norms ``watch`` recorded at one training step.

        Parameter leaves take ``watch.norms(step)[parameter name]``; module groups (and the
        nodes of the module view) the norm of the gradient w.r.t. the module's output; the rest
        is grey. A step slider walks ``watch.steps``, the banner shows ``watch.diagnose(step)``,
        and ``watch.heatmap()`` is drawn below the chart. :meth:`hide_watch` goes back to the run.
        Names match when the watch and this widget's session are on the same model (or one
        with the same structure). Record the steps first and close the watch (``with
        hookviz.watch(model) as w: ...``) so the widget's own runs are not counted as steps.

        Args:
            watch: a :class:`hookviz.Watch` with at least one recorded step.
            step: the step to show first; None = the last kept step.

        Returns:
            this widget, so ``w.show_watch(watch)`` displays it when last in a cell.

        Raises:
            WatchError: ``watch`` is not a Watch, has no recorded step, or ``step`` was not kept.
        """
        watch_view.show_watch(self, watch, step)
        return self

    def show_live(
        self, watch: Watch, every_steps: int | None = None, every_seconds: float | None = 1.0
    ) -> Widget:
        """Follow ``watch`` while it trains: heatmap, per-layer lines and findings of its latest
        kept step, updated from a background thread (:mod:`hookviz.widget.live`) at most once
        every ``every_steps`` kept steps or ``every_seconds`` seconds; a step that newly holds
        NaN/Inf or an exploding norm is shown at once. When the watch closes its final state
        stays on screen. The training thread only notes each step (one comparison), so the cost
        is the watch's own plus the updates' (see ``benchmarks``).

        Args:
            watch: a :class:`hookviz.Watch`, open (or closed: its final state, once).
            every_steps: at most one update every this many kept steps; None: by time.
            every_seconds: at most one update every this many seconds (default 1); with
                ``every_steps`` too, whichever allows fewer updates.

        Returns:
            this widget; display it by leaving it last in a cell, then train in the same cell.

        Raises:
            WatchError: ``watch`` is not a Watch, or neither ``every_steps`` nor ``every_seconds``
                is a positive number.
        """
        watch_view.show_live(self, watch, every_steps, every_seconds)
        return self

    def _show_live_state(self, watch, closed: bool) -> None:
        """The live view of ``watch``'s latest kept step (called from the LiveFeed's thread)."""
        watch_view.show_live_state(self, watch, closed)

    def watch_step(self, step: int) -> bool:
        """Show step ``step`` of the watch on screen (one of ``watch.steps``).

        Returns False and sets ``errors["watch"]`` when no watch is shown or the step was not kept.

        Args:
            step: one of ``watch.steps``.
        """
        return watch_view.watch_step(self, step)

    def show_watch_history(
        self, history: RankHistory, rank: int | None = None, step: int | None = None
    ) -> Widget:
        """Show a gathered :class:`~hookviz.watching.gather.RankHistory`: ``rank``'s local norms, or
        (None) the reduced ones, with ``watch_ranks`` listing the ranks for the selector. A
        one-process history (``hookviz.save(watch, path)`` without a gather) has nothing reduced:
        it opens on its one rank.

        Args:
            history: a RankHistory (from ``Watch.gather`` or ``hookviz.load``).
            rank: a rank of ``history.ranks``; None for the reduced norms.
            step: the step shown first; None for the last kept.

        Returns:
            this widget, so it displays when last in a cell.

        Raises:
            WatchError: ``history`` is not a RankHistory, ``rank`` is not one of its ranks, or
                ``step`` was not kept.
        """
        watch_view.show_watch_history(self, history, rank, step)
        return self

    def compare_with(
        self, other: str | Path | Any, names: tuple[str, str] | list[str] | None = None, factor: float = 10.0
    ) -> Widget:
        """Draw a second run over the watch on screen: each layer's gradient norm of ``other``
        as a dashed line beside this watch's (same colour, one log scale, aligned by step number),
        and the first step where they part by more than ``factor`` marked
        (:func:`hookviz.compare`'s numbers, kept in ``self.comparison``). ``save_html`` keeps it.

        Args:
            other: a :class:`hookviz.Watch`, a watch history or the path of a saved one.
            names: the two labels ``(this, other)``; default "this run" and the file's name.
            factor: the ratio of norms above which the runs part.

        Returns:
            this widget.

        Raises:
            WatchError: no watch is shown, or the one shown is still training live.
            HookvizError: ``other`` is a run or shares no layer; bad ``names`` or ``factor``.
            FileFormatError: ``other`` is a file that is not a hookviz file.
        """
        from hookviz.widget.compare import show_comparison

        return show_comparison(self, other, names, factor)

    def watch_rank(self, rank: int | None) -> bool:
        """Switch the gathered history on screen to ``rank`` (None = reduced). Returns False and
        sets ``errors["watch"]`` when no gathered history is shown or the rank is unknown.

        Args:
            rank: a rank of the history on screen; None for the reduced norms.
        """
        return watch_view.watch_rank(self, rank)

    def hide_watch(self) -> None:
        """Leave the watch view: colours and banner are the run's again."""
        watch_view.hide_watch(self)

    # ----- page -> Python messages --------------------------------------------------------------

    def handle_message(self, content: Any) -> dict:
        """Validate and dispatch one request from the page; never raises.

        Returns the reply ``{"type": "reply", "request": ..., "ok": bool, "error": str|None}``,
        which is also sent back to the page.

        Args:
            content: one request from the page, a dict with a ``"type"``.
        """
        return messages.handle_message(self, content)

    def _handle_message(self, widget, content, buffers=None) -> None:
        """``on_msg`` callback: ``(widget, content, buffers)``."""
        # With no page attached or the comm closed, ipywidgets sends nothing; a reply the kernel
        # cannot send as JSON is replaced by one that says so (logged: hookviz.widget.failures).
        reply = self.handle_message(content)
        sent = sendable(reply, "reply")
        if sent is not reply:
            self._set_error("message", sent["error"])
        self.send(sent)


def _check_options(visible_budget: object, vanishing_threshold: object) -> None:
    """Refuse a :class:`Widget` option of the wrong type or out of range."""
    if visible_budget is not None and (
        isinstance(visible_budget, bool) or not isinstance(visible_budget, int) or visible_budget < 1
    ):
        raise HookvizError(
            f"visible_budget={visible_budget!r} must be an int of at least 1 (about how many elements the "
            "first view draws), or None for the page's default"
        )
    if isinstance(vanishing_threshold, bool) or not isinstance(vanishing_threshold, (int, float)):
        raise HookvizError(f"vanishing_threshold={vanishing_threshold!r} must be a number, e.g. 1e-3")
    check_thresholds({"vanishing": vanishing_threshold})

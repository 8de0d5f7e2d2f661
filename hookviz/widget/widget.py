"""The hookviz widget: an ``anywidget.AnyWidget`` whose state lives in typed traitlets.

Python holds the run; the page (``hookviz/static/widget.js``, built from ``js/``) owns the view:
which module boxes are open, the selection, the search and the view kind are decided there (the
rules live once, in ``js/src/logic.js``) and synced to the ``collapsed``, ``selected``, ``query``
and ``view`` traitlets. Python reads them, and sets them to drive the page (:meth:`Widget.select`,
:meth:`Widget.search`, :meth:`Widget.set_view`); the page follows. A selection is answered with
the ``inspector`` traitlet (tensor statistics and values, which only the kernel has). Requests that
need Python (edits, re-run) come with ``model.send({"type": ..., ...})``; each is validated here
and answered through the traitlets (an error goes to ``errors[control]``, next to the control that
caused it); the last good run stays on screen. The same requests are public methods, so every
interaction can be driven from Python:

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

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import anywidget
import orjson
import traitlets

from hookviz.analysis.diagnose import diagnose, places
from hookviz.data.run import LOSS_MODULE
from hookviz.errors import DetailsRefused, DeviceError, EditError, ExpressionError, HookvizError, WatchError
from hookviz.record import module_tree
from hookviz.record.devices import devices
from hookviz.widget import payload as widget_data
from hookviz.widget.recorded import READ_ONLY_NOTE, RecordedSession

_STATIC = Path(__file__).parent / "static"
_MAX_TEXT = 4096
VIEWS = ("ops", "modules")


def _json_buffer(value: dict | list, widget=None) -> memoryview:
    """A large state value as one binary buffer of UTF-8 JSON. ipywidgets walks a nested state
    element by element looking for buffers (0.6 s for a 20,000-Node graph); a buffer it passes
    as it is, and the page parses it once. Encoded by orjson: the 20,000-Node graph's 13 MB took
    0.31 s with the standard library's json and take 0.04 s (most of it float formatting). The
    values are JSON-safe already (``widget_data.json_float``); orjson would write a stray NaN as
    null."""
    return memoryview(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))


def _leaf_rows_buffer(rows: list[dict], widget=None) -> memoryview:
    """The leaf table (``widget_data.leaf_summary_json``) as :func:`_json_buffer`, each unchanged
    leaf's summary sent once: its row has no ``after`` (there the baseline's summary itself), which
    the page reads as ``before``. On the first run every leaf is unchanged: the 20,000-Node graph's
    table went from 5.6 MB to 2.8 MB."""
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
            deep as fits in it (the page's rule, ``defaultCollapsed`` in ``js/src/logic.js``);
            None: the page's default (40).
        vanishing_threshold: a layer's gradient "vanishes" below this fraction of the gradient of
            the layer nearest the loss: the chart's line and the diagnosis banner use it alike.

    Raises:
        HookvizError: when the first run fails (there is nothing to show yet).
    """

    _esm = _STATIC / "widget.js"

    graph = traitlets.Dict(value_trait=traitlets.Any(), key_trait=traitlets.Unicode()).tag(
        sync=True, to_json=_json_buffer
    )
    """The run's graph for the page: nodes, edges, module groups, colour range (``graph_json``);
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
    """What the kernel knows of the selection (``widget_data.*_inspector_json``: statistics and
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
        session,
        *,
        visible_budget: int | None = None,
        vanishing_threshold: float = widget_data.VANISHING_RATIO,
        **kwargs: Any,
    ) -> None:
        # The first run is recorded before the comm to the page opens: opening it sends the 3.6 MB
        # bundle, which the page loads at once (about 0.1 s of its main thread since plotly waits
        # for the first chart; 0.6-0.8 s before). On two cores, loaded during the run (OpenMP
        # regions waiting on the busy core), the 20,000-Node graph's first paint came 1.2-1.7 s
        # later; loaded while the page's state is built (one Python thread), it costs nothing.
        # Opened after that instead, it came 0.5-1 s later.
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

    # ----- the runs --------------------------------------------------------------------------

    @property
    def run(self):
        """The run on screen (the last good one); None for a watch shown alone."""
        return None if self.session is None else self.session.last_run

    @property
    def baseline(self):
        """The run everything is compared with (the session's first run); None without a session."""
        return None if self.session is None else self.session.baseline

    def _show_run(self, run) -> None:
        self._show_run_now(run)

    def _show_run_now(self, run) -> None:
        baseline = self.baseline
        self._run_count += 1
        key = widget_data.structure_key(run)
        new_structure = self._structure != key
        self._structure = key
        data = widget_data.graph_json(run, baseline, key)
        data["run"] = self._run_count
        self._name_containers(data["groups"])
        with self.hold_sync():
            if new_structure:  # the page opens the first view of the new graph
                self.collapsed = None
            self.graph = data
            self.device = run.device
            self.summary = {
                "loss": widget_data.json_float(float(run.loss)),
                "baseline_loss": widget_data.json_float(float(baseline.loss))
                if baseline is not None
                else None,
                "device": run.device,
                "run": self._run_count,
                "forward_reused": bool(run.forward_reused),
                "nodes": len(run.nodes),
            }
            self.replay = widget_data.replay_json(run)
            self.log = widget_data.log_json(run)
            refused = None
            if run.details_pending and _cheap_details(run):
                refused = self._record_details(run)
            self.details_pending = run.details_pending and refused is None
            # A large run's leaf table and chart (the page draws them below the graph, after it)
            # come when the page asks for its details: on a 20,000-Node graph they took a tenth
            # of show().
            self._tables_pending = self.details_pending
            if self._tables_pending:
                self.leaf_summary, self.chart = [], {}
            else:
                self._show_tables(run)
            self._run_diagnosis = (
                widget_data.diagnosis_json([], "run", pending=True, error=refused)
                if self.details_pending or refused
                else self._diagnose_run(run)
            )
            if self.watch is None:
                self.diagnosis = self._run_diagnosis
            else:  # the graph's elements may have changed: map the step's norms onto them again
                self._show_watch_step(self.watch_view["step"])
            self._sync_edits()
            if self.selected and not self.details_pending:  # else fill_details refreshes it
                self._inspect(self.selected, quiet=True)
        if self.details_pending:
            _fill_before_the_next_cell(self)

    def _name_containers(self, groups: list[dict]) -> None:
        """Give the boxes of containers that were never called (a ``ModuleList``: no call
        recorded its type) their type from the model, when the session has one."""
        model = getattr(self.session, "model", None)
        if model is None or all(g["type"] for g in groups):
            return
        modules = dict(model.named_modules())
        for group in groups:
            if not group["type"] and group["module"] in modules:
                group["type"] = type(modules[group["module"]]).__name__

    def fill_details(self) -> bool:
        """Record the details of the run on screen (values, statistics, forward values) if they
        are still pending, then diagnose it and refresh the inspector. A large run's leaf table
        and chart, which wait with them, are sent first (they need no second recording).
        The page asks for it once it has drawn the graph; in IPython it also runs before the
        next cell, and in a kernel at the latest :data:`DETAILS_WAIT_FOR_THE_PAGE_S` after the
        cell that showed a large run (at once in a terminal IPython); call it from Python to
        have ``diagnosis`` at once.
        Recording them is one more forward + backward of the model (``run.fill_details()``,
        :mod:`hookviz.record.details`). When it refuses (the model changed since the run), the
        reason goes to ``errors["details"]`` and the diagnosis banner, and the records show
        what is pending; any other error propagates.

        Returns:
            True when the details are there (also when nothing was pending); False when refused.
        """
        run = self.run
        self._show_pending_tables()
        if not self.details_pending or run is None:
            return True
        try:
            refused = self._record_details(run)
        finally:
            self.details_pending = False  # the page stops asking, whatever happened
        with self.hold_sync():
            self._run_diagnosis = (
                widget_data.diagnosis_json([], "run", error=refused) if refused else self._diagnose_run(run)
            )
            if self.watch is None:
                self.diagnosis = self._run_diagnosis
            if self.selected:
                self._inspect(self.selected, quiet=True)
        return refused is None

    def _record_details(self, run) -> str | None:
        """``run.fill_details()``, then the baseline's (the inspector compares their values):
        None when the run's details are there, else the message of its refusal. A refusal, the
        run's or the baseline's, is shown in ``errors["details"]``. Only the documented refusals
        (:class:`~hookviz.errors.DetailsRefused`) are caught."""
        try:
            run.fill_details()
        except DetailsRefused as refusal:
            self._set_error("details", str(refusal))
            return str(refusal)
        baseline, message = self.baseline, None
        if baseline is not None and baseline is not run and baseline.details_pending:
            try:
                baseline.fill_details()
            except DetailsRefused as refusal:
                message = f"the baseline run's values (shown as before): {refusal}"
        self._set_error("details", message)
        return None

    def _show_tables(self, run) -> None:
        """The leaf table and the chart of ``run`` (norms and leaf gradients: no details needed)."""
        baseline = self.baseline
        self.leaf_summary = widget_data.leaf_summary_json(run, baseline, self._baseline_leaf_summaries(run))
        self.chart = widget_data.chart_json(run, baseline, self.vanishing_threshold)

    def _show_pending_tables(self) -> None:
        """Send the leaf table and the chart of the run on screen if they still wait (before its
        details: they need no second recording, so the page gets them at once)."""
        if self._tables_pending and self.run is not None:
            self._tables_pending = False
            with self.hold_sync():
                self._show_tables(self.run)

    def _diagnose_run(self, run) -> dict:
        """``hookviz.diagnose(run)`` as the banner's JSON, with the chart's vanishing rule; a finding the
        baseline run does not have, in a run with edits, is marked as caused by the edits. A
        failure is shown in the banner, never raised."""
        try:
            findings = diagnose(run, vanishing=self.vanishing_threshold)
            caused = set()
            if run.edits and self.baseline is not None and self.baseline is not run:
                before = diagnose(self.baseline, vanishing=self.vanishing_threshold)
                caused = places(findings) - places(before)
            return widget_data.diagnosis_json(findings, "run", caused_by_edits=caused)
        except Exception as error:  # a diagnosis bug must not take the widget down
            return widget_data.diagnosis_json(
                [], "run", error=f"diagnosis failed: {type(error).__name__}: {error}"
            )

    def _baseline_leaf_summaries(self, run) -> dict:
        baseline = self.baseline if self.baseline is not None else run
        if self._baseline_leaves is None or self._baseline_leaves[0] is not baseline:
            self._baseline_leaves = (baseline, widget_data.leaf_summaries(baseline))
        return self._baseline_leaves[1]

    def _sync_edits(self) -> None:
        shown = self.run.edits
        self.edits = widget_data.edits_json(self.session.edits, shown)
        self.edit_state = widget_data.edit_state_json(self.session.edits, shown)
        self.code = self.session.edits_as_code()

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
        """
        found = self._element(target)
        if found is None:
            self._set_error(
                "select",
                f"nothing is named {target!r}: select takes a node id (AddmmBackward0_3), a leaf "
                "(transformer.h.0.mlp.c_fc.weight) or a module (transformer.h.0); "
                "w.search(text) finds part of a name",
            )
            return False
        with self.hold_sync():
            self._clear_errors("select")
            if found == self.selected:
                self._inspect(found, quiet=False)
            self.selected = found  # the page reveals it; the inspector follows (_on_selected)
        return True

    def search(self, query: str) -> None:
        """Search the graph as the page's search box does: the page selects the best match of
        part of a module name, op node id or leaf name (exact name first, then a name ending with
        it, then the shortest; ``find`` in ``js/src/logic.js``), and ``selected`` follows."""
        with self.hold_sync():
            if self.query == query:  # asked again: the page searches again
                self.query = ""
        self.query = query

    def _element(self, target: str) -> str | None:
        """The id the page selects for ``target``: a node id as it is, a module as
        ``"module:<name>"``, the loss (``"module:(loss)"``) as its root op; None when unknown."""
        run = self.run
        if target in run.nodes:
            return target
        name = target.removeprefix(widget_data.MODULE_PREFIX)
        if name == LOSS_MODULE:
            return run.root
        groups = {g["module"] for g in self.graph.get("groups", [])}
        if name in groups or name in run.modules:
            return widget_data.MODULE_PREFIX + name
        return None

    @traitlets.observe("selected")
    def _on_selected(self, change) -> None:
        self._inspect(change["new"], quiet=True)

    def _inspect(self, target: str, quiet: bool) -> bool:
        if not target:
            self.inspector = {}
            return True
        self.fill_details()  # the inspector shows values: record them now, and the diagnosis with them
        run = self.run
        try:
            if target in run.nodes:
                data = widget_data.node_inspector_json(run, target, self.baseline)
            else:
                module = target.removeprefix(widget_data.MODULE_PREFIX)
                if module == LOSS_MODULE:  # not a module: what loss_fn built; show its root op
                    data = {**widget_data.node_inspector_json(run, run.root, self.baseline), "id": target}
                elif self._container(module):
                    data = self._container_json(module)
                else:
                    run.module_io(module)  # raises TargetError for an unknown name
                    data = widget_data.module_inspector_json(run, module, self._sites(module), self.baseline)
        except HookvizError as error:
            if not quiet:
                self._set_error("select", str(error))
            else:
                self.inspector = {}
            return False
        with self.hold_sync():
            self.inspector = data
            self._clear_errors("select")
        return True

    def _container(self, module: str) -> bool:
        """A module box of the graph that was never called itself (a ``ModuleList``, GPT-2's
        ``transformer.h``): only its children ran."""
        return module not in {call.module for call in self.run.calls} and any(
            g["module"] == module for g in self.graph.get("groups", [])
        )

    def _container_json(self, module: str) -> dict:
        """The inspector of a container: what it is and which of its children ran, with the
        gradient norms of the parameters it holds (``run.leaves``)."""
        group = next(g for g in self.graph.get("groups", []) if g["module"] == module)
        prefix = module + "."
        children = [g["module"] for g in self.graph["groups"] if g["parent"] == group["id"]]
        parameters = {
            item["id"]: item["norm"]
            for item in self.graph["nodes"]
            if item["kind"] != "op" and item["module"].startswith(prefix)
        }
        kind = group.get("type") or "module"
        return {
            "id": widget_data.MODULE_PREFIX + module,
            "target": module,
            "kind": "module",
            "node_kind": "container",
            "container": True,
            "op": kind,
            "module": module,
            "children": children,
            "parameter_norms": parameters,
            "explanation": f"{module} ({kind}) is a container: it was never called itself, its "
            f"{len(children)} child modules were. Its gradients are theirs: open it, or pick a child.",
            "sites": [],
        }

    def _sites(self, target: str) -> list[str]:
        try:
            return list(self.session.sites(target))
        except HookvizError:
            return []

    def apply_edit(self, target: str, slot: str, expression: str) -> str | None:
        """Add an edit (applied at the next :meth:`rerun`). Returns its id, or None and sets
        ``errors["edit"]`` when the target, slot or expression is bad."""
        try:
            edit = self.session.edit(target, slot, expression)
        except HookvizError as error:
            self._set_error("edit", str(error))
            return None
        with self.hold_sync():
            self._sync_edits()
            self._clear_errors("edit", "edits")
        return edit.id

    def remove_edit(self, edit_id: str) -> bool:
        """Remove one edit by id (takes effect at the next re-run)."""
        try:
            self.session.remove_edit(edit_id)
        except HookvizError as error:
            self._set_error("edits", str(error))
            return False
        with self.hold_sync():
            self._sync_edits()
            self._clear_errors("edits")
        return True

    def reset_edits(self) -> None:
        """Remove every edit (takes effect at the next re-run)."""
        self.session.clear_edits()
        with self.hold_sync():
            self._sync_edits()
            self._clear_errors("edits", "edit")

    def rerun(self, device: str | None = None, forward: bool = False) -> bool:
        """Run again with the current edits (backward only when the device is unchanged, unless
        ``forward`` is True).

        On failure the error goes to ``errors["device"]``, ``errors["edit"]`` or ``errors["rerun"]``
        and the last good run stays on screen. Returns True on success.
        """
        device = device or self.device
        try:
            if device not in self.devices:
                raise DeviceError(f"device {device!r} is not available here; choose one of {self.devices}")
            run = self.session.run(device=device, forward=forward)
        except DeviceError as error:
            self._set_error("device", str(error))
            return False
        except (EditError, ExpressionError) as error:
            with self.hold_sync():
                self._set_error("edit", str(error))
                self._set_error("rerun", f"re-run failed, showing the last good run: {error}")
            return False
        except HookvizError as error:
            self._set_error("rerun", f"re-run failed, showing the last good run: {error}")
            return False
        with self.hold_sync():
            self._show_run(run)
            self._clear_errors("device", "rerun", "edit")
        return True

    def set_view(self, view: str) -> bool:
        """``"modules"``: the module tree as a tree diagram (one box per module, an edge from each
        module to its children, no ops), opened as deep as its columns fit; ``"ops"``: the first
        view again (the graph with its module boxes, opened as deep as fits). The page opens the
        boxes by its rules (``firstCollapsed`` in ``js/src/logic.js``)."""
        if view not in VIEWS:
            self._set_error("view", f"view {view!r} does not exist; use 'ops' or 'modules'")
            return False
        with self.hold_sync():
            self.view = view
            self.collapsed = None
            self._clear_errors("view")
        return True

    def toggle_group(self, module: str) -> bool:
        """Open a closed module box on the page (its child modules as closed boxes), or close an
        open one: the page does it by its rule, as for a click, and ``collapsed`` follows. Returns
        False (and sets ``errors["group"]``) for a module the graph has no box for."""
        if module not in {g["module"] for g in self.graph.get("groups", [])}:
            self._set_error("group", f"module {module!r} has no box in this graph")
            return False
        self._clear_errors("group")
        self._ask_page({"command": "toggle_group", "module": module})
        return True

    def collapse_all(self) -> None:
        """Close every top-level module box on the page."""
        self._ask_page({"command": "collapse_all"})

    def expand_all(self) -> None:
        """Open every module box."""
        self.collapsed = []

    def _ask_page(self, message: dict) -> None:
        """Ask the page for a view change it makes by its own rules (as lonboard's ``fly_to``);
        its answer comes back in the traitlets. Nothing happens while no page shows the widget."""
        try:
            self.send({"type": "view", **message})
        except Exception:  # no page attached (tests) or a closed comm
            pass

    def save_html(self, path, title: str = "hookviz", values: str = "opened", pinned=()):
        """Write this view to one self-contained HTML file that opens in a browser with no kernel
        and no network (graph, inspector, replay, chart and search work; edits and re-run are
        disabled there). Embed it in a blog post or course page with an ``<iframe>``.

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
        """
        from hookviz.widget.export import save_html

        self.fill_details()
        return save_html(self, path, title, values=values, pinned=pinned)

    def chart_figure(self):
        """The gradient-flow chart as a ``plotly.graph_objects.Figure``: per-module norm of the
        gradient into the module's inputs, log scale, this run vs the baseline, and the vanishing
        threshold as a dashed line. Display it (``fig.show()``) or save it (``fig.write_html``)."""
        self._show_pending_tables()
        return widget_data.chart_figure(self.chart)

    # ----- the watch view ----------------------------------------------------------------------

    def show_watch(self, watch, step: int | None = None) -> Widget:
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
        step = _check_watch(watch, step)
        try:
            heatmap = widget_data.figure_json(watch.heatmap())
        except Exception as error:  # the heatmap is a picture: without it the view still works
            heatmap = {"error": f"heatmap failed: {type(error).__name__}: {error}"}
        self.watch = watch
        self._watch_range = widget_data.watch_color_range(watch.history)
        with self.hold_sync():
            self.watch_heatmap = heatmap
            self._show_watch_step(step)
            self._clear_errors("watch")
        return self

    def show_live(self, watch, every_steps: int | None = None, every_seconds: float | None = 1.0) -> Widget:
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
        from hookviz.watching.watch import Watch
        from hookviz.widget.live import LiveFeed

        if not isinstance(watch, Watch):
            raise WatchError(
                f"show_live() needs a hookviz.Watch (from hookviz.watch(model)), got {type(watch).__name__}"
            )
        if every_steps is not None and (
            isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1
        ):
            raise WatchError(f"every_steps={every_steps!r} must be a positive int (or None: update by time)")
        if every_seconds is not None and (isinstance(every_seconds, bool) or not every_seconds > 0):
            raise WatchError(
                f"every_seconds={every_seconds!r} must be a positive number of seconds (or None)"
            )
        if every_steps is None and every_seconds is None:
            raise WatchError(
                "give every_steps or every_seconds (the default, every_seconds=1.0, updates once a second)"
            )
        if self.live is not None:
            self.live.stop()
        self.watch = watch
        self.live = LiveFeed(self, watch, every_steps, every_seconds)
        return self

    def _show_live_state(self, watch, closed: bool) -> None:
        """The live view of ``watch``'s latest kept step (called from the LiveFeed's thread)."""
        history = watch.history
        if not history.steps or self.watch is not watch:
            return
        step = history.steps[-1]
        name = type(watch.model).__name__
        try:
            figure = widget_data.live_watch_figure(history, f"{name}: gradient norms over training")
        except Exception as error:  # the figure is a picture: without it the view still works
            figure = {"error": f"heatmap failed: {type(error).__name__}: {error}"}
        self._watch_range = widget_data.watch_color_range(history)
        with self.hold_sync():
            self.watch_heatmap = figure
            self._show_watch_step(step, live=not closed)
            self._clear_errors("watch")

    def watch_step(self, step: int) -> bool:
        """Show step ``step`` of the watch on screen (one of ``watch.steps``).

        Returns False and sets ``errors["watch"]`` when no watch is shown or the step was not kept.
        """
        if self.watch is None:
            self._set_error("watch", "no watch is shown; call show_watch(watch) first")
            return False
        steps = self.watch.steps
        if isinstance(step, bool) or not isinstance(step, int) or step not in steps:
            self._set_error(
                "watch", f"step {step!r} was not kept by the watch; kept steps: {_steps_text(steps)}"
            )
            return False
        with self.hold_sync():
            self._show_watch_step(step)
            self._clear_errors("watch")
        return True

    def show_watch_history(self, history, rank: int | None = None, step: int | None = None) -> Widget:
        """Show a gathered :class:`~hookviz.watching.gather.RankHistory`: ``rank``'s local norms, or
        (None) the reduced ones, with ``watch_ranks`` listing the ranks for the selector. A
        one-process history (``hookviz.save(watch, path)`` without a gather) has nothing reduced:
        it opens on its one rank."""
        from hookviz.watching.gather import RankView

        if rank is None and not history.strategy:
            rank = history.ranks[0]
        self.watch_ranks = list(history.ranks)
        return self.show_watch(RankView(history, rank), step)

    def watch_rank(self, rank: int | None) -> bool:
        """Switch the gathered history on screen to ``rank`` (None = reduced). Returns False and
        sets ``errors["watch"]`` when no gathered history is shown or the rank is unknown."""
        from hookviz.watching.gather import RankView

        if not isinstance(self.watch, RankView):
            self._set_error("watch", "no gathered watch history is shown; call hookviz.show(history, run)")
            return False
        try:
            view = RankView(self.watch.source, rank)
        except WatchError as error:
            self._set_error("watch", str(error))
            return False
        step = self.watch_view.get("step")
        self.show_watch(view, step if step in view.steps else None)
        return True

    def hide_watch(self) -> None:
        """Leave the watch view: colours and banner are the run's again."""
        self.watch = None
        with self.hold_sync():
            self.watch_view = {}
            self.watch_heatmap = {}
            self.diagnosis = self._run_diagnosis
            self._clear_errors("watch")

    def _show_watch_step(self, step: int, live: bool = False) -> None:
        watch = self.watch
        parameters = watch.norms(step, kind="parameter")
        outputs = watch.norms(step, kind="output")
        steps = watch.steps
        try:
            diagnosis = widget_data.diagnosis_json(watch.diagnose(step), "watch", step)
        except Exception as error:  # a diagnosis bug must not take the widget down
            diagnosis = widget_data.diagnosis_json(
                [], "watch", step, error=f"diagnosis failed: {type(error).__name__}: {error}"
            )
        self.watch_view = {
            "steps": steps,
            "step": step,
            "index": steps.index(step),
            "norms": {name: widget_data.json_float(norm) for name, norm in watch.norms(step).items()},
            "node_norms": widget_data.watch_node_norms(self.graph, parameters, outputs),
            "color_range": self._watch_range,
            "model": getattr(watch, "model_name", None) or type(watch.model).__name__,
            # a gathered history: the rank shown (None = reduced over ranks), for the rank selector
            "rank": getattr(watch, "rank", None),
            "reduced": bool(getattr(getattr(watch, "source", None), "strategy", "")),
            # a watch still training (show_live): the page says so, and updates follow
            "live": live,
        }
        self.diagnosis = diagnosis

    # ----- page -> Python messages --------------------------------------------------------------

    def handle_message(self, content: Any) -> dict:
        """Validate and dispatch one request from the page; never raises.

        Returns the reply ``{"type": "reply", "request": ..., "ok": bool, "error": str|None}``,
        which is also sent back to the page.
        """
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            ok, error = self._dispatch(content)
        except Exception as exc:  # a bug must not kill the widget: report it beside the page
            ok, error = (
                False,
                f"internal error while handling {kind!r}: {type(exc).__name__}: {exc}",
            )
        if error:
            self._set_error("message", error)
        elif ok:
            self._clear_errors("message")
        return {"type": "reply", "request": kind, "ok": ok, "error": error}

    def _handle_message(self, widget, content, buffers=None) -> None:
        """``on_msg`` callback: ``(widget, content, buffers)``."""
        reply = self.handle_message(content)
        try:
            self.send(reply)
        except Exception:  # no page attached (tests) or a closed comm
            pass

    def _dispatch(self, content: Any) -> tuple[bool, str | None]:
        if not isinstance(content, dict):
            return False, f"malformed message: expected an object, got {type(content).__name__}"
        kind = content.get("type")
        handlers = {
            "apply_edit": (
                ("target", "slot", "expression"),
                lambda c: self.apply_edit(c["target"], c["slot"], c["expression"]) is not None,
            ),
            "remove_edit": (("id",), lambda c: self.remove_edit(c["id"])),
            "reset_edits": ((), lambda c: self.reset_edits() or True),
            "rerun": ((), lambda c: self.rerun(c.get("device"))),
            "watch_step": ((), lambda c: self.watch_step(c.get("step"))),
            "hide_watch": ((), lambda c: self.hide_watch() or True),
            "watch_rank": ((), lambda c: self.watch_rank(c.get("rank"))),
            "details": ((), lambda c: self.fill_details()),
        }
        if kind not in handlers:
            return False, f"unknown message type {kind!r}; expected one of {sorted(handlers)}"
        if self.session is None and kind not in ("watch_step", "hide_watch", "details"):
            return False, (
                f"{kind!r} needs a recorded run, and this widget shows a watch alone: to see the graph, "
                "show a run of the model too, e.g. "
                "hookviz.show_watch(w, hookviz.Session(model, args, loss_fn=...))"
            )
        required, handler = handlers[kind]
        for field in (
            *required,
            *(("device",) if kind == "rerun" and content.get("device") is not None else ()),
        ):
            value = content.get(field)
            if not isinstance(value, str):
                return (
                    False,
                    f"malformed {kind!r} message: field {field!r} must be a string, got "
                    f"{type(value).__name__}",
                )
            if len(value) > _MAX_TEXT:
                return (
                    False,
                    f"malformed {kind!r} message: field {field!r} is longer than {_MAX_TEXT} characters",
                )
        # A refused request reports beside its own control, not as a malformed message.
        return bool(handler(content)), None


# In a kernel, how long after the cell that showed a large run its details wait for the page to
# ask for them (it asks once it has drawn the graph). Recorded at once, they took the machine's
# cores while the page drew: a 20,000-Node graph's first paint came about 1.1 s later.
DETAILS_WAIT_FOR_THE_PAGE_S = 2.0


def _fill_before_the_next_cell(widget: Widget) -> None:
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


# A run this small gets its details at once (one more recording of tens of milliseconds), so
# its diagnosis is there with the first paint; a larger one gets them after the page drew it.
CHEAP_DETAILS_NODES = 2_000
CHEAP_DETAILS_ELEMENTS = 1 << 22


def _cheap_details(run) -> bool:
    """Whether recording ``run``'s details costs little: few Nodes and few gradient elements."""
    if len(run.nodes) > CHEAP_DETAILS_NODES:
        return False
    elements = 0
    for record in run.nodes.values():
        for tensor in (*record.grad_inputs, *record.grad_outputs):
            elements += tensor.numel if tensor is not None else 0
    return elements <= CHEAP_DETAILS_ELEMENTS


def _check_watch(watch, step: int | None) -> int:
    """The step to show first (None = the last kept one); raises WatchError for a bad watch or step."""
    from hookviz.watching.gather import RankView
    from hookviz.watching.watch import Watch

    if not isinstance(watch, (Watch, RankView)):
        raise WatchError(
            f"show_watch() needs a hookviz.Watch (from hookviz.watch(model)), got {type(watch).__name__}"
        )
    steps = watch.steps
    if not steps:
        raise WatchError(
            "the watch has no recorded step yet: train under `with hookviz.watch(model) as w:` "
            "(every backward that reaches the model is a step), then call show_watch(w)"
        )
    step = steps[-1] if step is None else step
    if isinstance(step, bool) or step not in steps:
        raise WatchError(f"step {step!r} was not kept by the watch; kept steps: {_steps_text(steps)}")
    return step


def _steps_text(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:8]))
    return f"{shown} ... {steps[-1]} ({len(steps)} steps)" if len(steps) > 8 else shown


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
    from hookviz.data.run import Run
    from hookviz.record.session import Session
    from hookviz.watching.gather import RankHistory
    from hookviz.watching.watch import Watch

    widget_options = {
        k: session_options.pop(k) for k in ("visible_budget", "vanishing_threshold") if k in session_options
    }
    if isinstance(model, Watch):
        return Widget(None, **widget_options).show_live(model, **session_options)
    if isinstance(model, Run):  # a recorded run, usually opened from a file: read-only
        return Widget(
            RecordedSession(model, baseline=args if isinstance(args, Run) else None), **widget_options
        )
    if isinstance(model, RankHistory):
        run = args if isinstance(args, Run) else model.run
        if run is None:
            raise WatchError(
                "this watch history holds gradient norms, not a graph: pass a run of the same model "
                "to draw them on, e.g. hookviz.show(history, hookviz.load('run.hookviz')), or save "
                "one with it: hookviz.save(watch, path, run=session.run())"
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
    step = _check_watch(watch, step)
    if session is None:
        raise WatchError(
            "show_watch() needs a Session of the watched model to draw its graph, e.g. "
            "hookviz.show_watch(w, hookviz.Session(model, (x,), loss_fn=loss_fn))"
        )
    widget = session if isinstance(session, Widget) else Widget(session, **widget_options)
    return widget.show_watch(watch, step)

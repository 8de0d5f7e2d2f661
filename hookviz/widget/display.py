"""Showing a run: the graph, summary, replay, log, tables, diagnosis and edits of the run on screen.

A new graph structure lets the page open its first view by its rules; a small run's details are
recorded at once, a large one's wait for the page (:mod:`hookviz.widget.details`).
"""

from __future__ import annotations

from hookviz import text
from hookviz.record.details import recorded_in_full
from hookviz.widget.details import fill_before_the_next_cell, record_details, show_tables
from hookviz.widget.diagnosis import diagnose_run, diagnosis_json
from hookviz.widget.editing import sync_edits
from hookviz.widget.graph import graph_json, structure_key
from hookviz.widget.payload import json_float
from hookviz.widget.replay import log_json, replay_json
from hookviz.widget.selection import inspect
from hookviz.widget.watch_view import show_watch_step


def show_run(widget, run) -> None:
    """Put ``run`` on screen: every traitlet that shows a run follows it."""
    baseline = widget.baseline
    widget._run_count += 1
    key = structure_key(run)
    new_structure = widget._structure != key
    widget._structure = key
    data = graph_json(run, baseline, key)
    data["run"] = widget._run_count
    _name_containers(widget, data["groups"])
    with widget.hold_sync():
        if new_structure:  # the page opens the first view of the new graph
            widget.collapsed = None
        widget.graph = data
        widget.device = run.device
        widget.summary = {
            "loss": json_float(float(run.loss)),
            "baseline_loss": json_float(float(baseline.loss)) if baseline is not None else None,
            "device": run.device,
            "run": widget._run_count,
            "forward_reused": bool(run.forward_reused),
            "nodes": len(run.nodes),
            # the line above the graph, as the page shows it
            "text": f"loss {text.number(run.loss)} (baseline {text.number(getattr(baseline, 'loss', None))})"
            f" · run {widget._run_count} on {run.device}",
        }
        widget.replay = replay_json(run)
        widget.log = log_json(run)
        refused = None
        if run.details_pending and recorded_in_full(run):  # the rule Session.run() follows too
            refused = record_details(widget, run)
        widget.details_pending = run.details_pending and refused is None
        # A large run's leaf table and chart (the page draws them below the graph, after it)
        # come when the page asks for its details: on a 20,000-Node graph they took a tenth
        # of show().
        widget._tables_pending = widget.details_pending
        if widget._tables_pending:
            widget.leaf_summary, widget.chart = [], {}
        else:
            show_tables(widget, run)
        widget._run_diagnosis = (
            diagnosis_json([], "run", pending=True, error=refused)
            if widget.details_pending or refused
            else diagnose_run(widget, run)
        )
        if widget.watch is None:
            widget.diagnosis = widget._run_diagnosis
        else:  # the graph's elements may have changed: map the step's norms onto them again
            show_watch_step(widget, widget.watch_view["step"])
        sync_edits(widget)
        if widget.selected and not widget.details_pending:  # else fill_details refreshes it
            inspect(widget, widget.selected, quiet=True)
    if widget.details_pending:
        fill_before_the_next_cell(widget)


def _name_containers(widget, groups: list[dict]) -> None:
    """Give the boxes of containers that were never called (a ``ModuleList``: no call
    recorded its type) their type from the model, when the session has one."""
    model = getattr(widget.session, "model", None)
    if model is None or all(g["type"] for g in groups):
        return
    modules = dict(model.named_modules())
    for group in groups:
        if not group["type"] and group["module"] in modules:
            group["type"] = type(modules[group["module"]]).__name__

"""View commands: the view kind, and opening and closing module boxes, which the page does by its rules.

The page owns the view (``js/src/collapse.js``, ``view_state.js``): Python sets a traitlet or
sends the page a ``view`` message, and the page's answer comes back in the traitlets.
"""

from __future__ import annotations

from hookviz.widget.failures import sendable

VIEWS = ("ops", "modules")


def set_view(widget, view: str) -> bool:
    """:meth:`hookviz.widget.widget.Widget.set_view`: show the view ``view`` ("ops" or "modules")."""
    if view not in VIEWS:
        widget._set_error("view", f"view {view!r} does not exist; use 'ops' or 'modules'")
        return False
    with widget.hold_sync():
        widget.view = view
        widget.collapsed = None
        widget._clear_errors("view")
    return True


def toggle_group(widget, module: str) -> bool:
    """:meth:`hookviz.widget.widget.Widget.toggle_group`: ask the page to open or close ``module``'s box."""
    if module not in {g["module"] for g in widget.graph.get("groups", [])}:
        widget._set_error("group", f"module {module!r} has no box in this graph")
        return False
    widget._clear_errors("group")
    _ask_page(widget, {"command": "toggle_group", "module": module})
    return True


def collapse_all(widget) -> None:
    """:meth:`hookviz.widget.widget.Widget.collapse_all`: ask the page to close every top-level box."""
    _ask_page(widget, {"command": "collapse_all"})


def expand_all(widget) -> None:
    """:meth:`hookviz.widget.widget.Widget.expand_all`: open every module box."""
    widget.collapsed = []


def _ask_page(widget, message: dict) -> None:
    """Ask the page for a view change it makes by its own rules (as lonboard's ``fly_to``);
    its answer comes back in the traitlets. Nothing happens while no page shows the widget."""
    sent = sendable({"type": "view", **message}, "view command")
    if "error" in sent:  # not sendable: logged, and shown beside the view buttons instead
        widget._set_error("view", sent["error"])
        return
    widget.send(sent)

"""Requests from the page (``model.send({"type": ..., ...})``): each validated, then dispatched to the
widget's public method of the same name; a refusal goes beside its control, a malformed request to
``errors["message"]``.
"""

from __future__ import annotations

from typing import Any

from hookviz.advice import advice
from hookviz.widget.failures import reported

_MAX_TEXT = 4096


def handle_message(widget, content: Any) -> dict:
    """:meth:`hookviz.widget.widget.Widget.handle_message`: validate and dispatch one request from
    the page; never raises."""
    kind = content.get("type") if isinstance(content, dict) else None
    try:
        ok, error = _dispatch(widget, content)
    except Exception as exc:  # a bug must not kill the widget: logged, and shown beside the page
        ok, error = False, reported(f"handling {kind!r}", exc)
    if error:
        widget._set_error("message", error)
    elif ok:
        widget._clear_errors("message")
    return {"type": "reply", "request": kind, "ok": ok, "error": error}


def _dispatch(widget, content: Any) -> tuple[bool, str | None]:
    if not isinstance(content, dict):
        return False, f"malformed message: expected an object, got {type(content).__name__}"
    kind = content.get("type")
    handlers = {
        "apply_edit": (
            ("target", "slot", "expression"),
            lambda c: widget.apply_edit(c["target"], c["slot"], c["expression"]) is not None,
        ),
        "remove_edit": (("id",), lambda c: widget.remove_edit(c["id"])),
        "reset_edits": ((), lambda c: widget.reset_edits() or True),
        "rerun": ((), lambda c: widget.rerun(c.get("device"))),
        "watch_step": ((), lambda c: widget.watch_step(c.get("step"))),
        "hide_watch": ((), lambda c: widget.hide_watch() or True),
        "watch_rank": ((), lambda c: widget.watch_rank(c.get("rank"))),
        "details": ((), lambda c: widget.fill_details()),
    }
    if kind not in handlers:
        return False, f"unknown message type {kind!r}; expected one of {sorted(handlers)}"
    if widget.session is None and kind not in ("watch_step", "hide_watch", "details"):
        return False, (
            f"{kind!r} needs a recorded run, and this widget shows a watch alone: to see the graph, "
            "show a run of the model too, e.g. "
            f"{advice('show_watch_on_graph')}"
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
                f"malformed {kind!r} message: field {field!r} must be a string, got {type(value).__name__}",
            )
        if len(value) > _MAX_TEXT:
            return (
                False,
                f"malformed {kind!r} message: field {field!r} is longer than {_MAX_TEXT} characters",
            )
    # A refused request reports beside its own control, not as a malformed message.
    return bool(handler(content)), None

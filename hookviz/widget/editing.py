"""The widget's edits: the edit list the page shows; adding, removing and resetting edits; re-running."""

from __future__ import annotations

from hookviz.errors import DeviceError, EditError, ExpressionError, HookvizError
from hookviz.widget.tree import module_label, root_type


def _edit_key(edit) -> tuple:
    return (edit.id, edit.target, str(edit.slot), edit.source)


def edits_json(edits, shown=None, root_type: str = "") -> list[dict]:
    """Active edits: ``[{id, target, label, slot, source, pending}]``; ``label`` is the target as
    the page names it (the root module ``""`` by its box: ``"Canonical (root)"``, ``root_type``
    being its class); ``pending`` when the run on screen (``shown``: its edits) was made without
    it, i.e. it takes effect at the next re-run. One edit per site: see :meth:`hookviz.Session.edit`."""
    done = None if shown is None else {_edit_key(e) for e in shown}
    return [
        {
            "id": e.id,
            "target": e.target,
            "label": module_label(e.target, root_type),
            "slot": str(e.slot),
            "source": e.source,
            "pending": done is not None and _edit_key(e) not in done,
        }
        for e in edits
    ]


def edit_state_json(edits, shown) -> dict:
    """Whether the run on screen is the one the edits would make: ``{stale, pending_targets,
    removed_targets}``; ``stale`` when an edit was added, removed or reset since that run."""
    now = {_edit_key(e): e for e in edits}
    then = {_edit_key(e): e for e in shown}
    pending = sorted({e.target for k, e in now.items() if k not in then})
    removed = sorted({e.target for k, e in then.items() if k not in now})
    return {
        "stale": bool(pending or removed),
        "pending_targets": pending,
        "removed_targets": removed,
    }


def sync_edits(widget) -> None:
    """The ``edits``, ``edit_state`` and ``code`` traitlets from the session's edits and the run shown."""
    shown = widget.run.edits
    widget.edits = edits_json(widget.session.edits, shown, root_type(widget.run))
    widget.edit_state = edit_state_json(widget.session.edits, shown)
    widget.code = widget.session.edits_as_code()


def apply_edit(widget, target: str, slot: str, expression: str) -> str | None:
    """:meth:`hookviz.widget.widget.Widget.apply_edit`: add an edit; its id, or None."""
    try:
        edit = widget.session.edit(target, slot, expression)
    except HookvizError as error:
        widget._set_error("edit", str(error))
        return None
    with widget.hold_sync():
        sync_edits(widget)
        widget._clear_errors("edit", "edits")
    return edit.id


def remove_edit(widget, edit_id: str) -> bool:
    """:meth:`hookviz.widget.widget.Widget.remove_edit`: remove one edit by id."""
    try:
        widget.session.remove_edit(edit_id)
    except HookvizError as error:
        widget._set_error("edits", str(error))
        return False
    with widget.hold_sync():
        sync_edits(widget)
        widget._clear_errors("edits")
    return True


def reset_edits(widget) -> None:
    """:meth:`hookviz.widget.widget.Widget.reset_edits`: remove every edit."""
    widget.session.clear_edits()
    with widget.hold_sync():
        sync_edits(widget)
        widget._clear_errors("edits", "edit")


def rerun(widget, device: str | None = None, forward: bool = False) -> bool:
    """:meth:`hookviz.widget.widget.Widget.rerun`: run again with the current edits; True on success."""
    device = device or widget.device
    try:
        if device not in widget.devices:
            raise DeviceError(f"device {device!r} is not available here; choose one of {widget.devices}")
        run = widget.session.run(device=device, forward=forward)
    except DeviceError as error:
        widget._set_error("device", str(error))
        return False
    except (EditError, ExpressionError) as error:
        with widget.hold_sync():
            widget._set_error("edit", str(error))
            widget._set_error("rerun", f"re-run failed, showing the last good run: {error}")
        return False
    except HookvizError as error:
        widget._set_error("rerun", f"re-run failed, showing the last good run: {error}")
        return False
    with widget.hold_sync():
        widget._show_run(run)
        widget._clear_errors("device", "rerun", "edit")
    return True

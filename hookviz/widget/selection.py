"""What the widget's selection names: select and search, and the inspector that follows the selection.

The page selects (a click, a search, a finding) and reveals; the kernel answers a selection with
the ``inspector`` traitlet (:mod:`hookviz.widget.inspector`: statistics and values, which only the
kernel has).
"""

from __future__ import annotations

from hookviz.advice import advice
from hookviz.data.run import LOSS_MODULE
from hookviz.errors import HookvizError
from hookviz.widget.inspector import module_inspector_json, node_inspector_json, watch_note
from hookviz.widget.tree import MODULE_PREFIX, ROOT_MARK, module_label, root_type


def select(widget, target: str) -> bool:
    """:meth:`hookviz.widget.widget.Widget.select`: select the node or module named ``target``."""
    found = _element(widget, target)
    if found is None:
        widget._set_error(
            "select",
            f"nothing is named {target!r}: select takes a node id (AddmmBackward0_3), a leaf "
            "(transformer.h.0.mlp.c_fc.weight), a module (transformer.h.0) or the root module "
            "by the name its box shows ('GPT2LMHeadModel (root)', or '(root)'); "
            f"{advice('search')} finds part of a name",
        )
        return False
    with widget.hold_sync():
        widget._clear_errors("select")
        if found == widget.selected:
            inspect(widget, found, quiet=False)
        widget.selected = found  # the page reveals it; the inspector follows (_on_selected)
    return True


def search(widget, query: str) -> None:
    """:meth:`hookviz.widget.widget.Widget.search`: ask the page to search for ``query``."""
    with widget.hold_sync():
        if widget.query == query:  # asked again: the page searches again
            widget.query = ""
    widget.query = query


def _element(widget, target: str) -> str | None:
    """The id the page selects for ``target``: a node id as it is, a module as
    ``"module:<name>"``, the loss (``"module:(loss)"``) as its root op; None when unknown."""
    run = widget.run
    if target in run.nodes:
        return target
    name = target.removeprefix(MODULE_PREFIX)
    if name == LOSS_MODULE:
        return run.root
    groups = {g["module"] for g in widget.graph.get("groups", [])}
    if "" in run.modules and name in _root_names(run):
        return MODULE_PREFIX
    if name in groups or name in run.modules:
        return MODULE_PREFIX + name
    return None


def _root_names(run) -> set[str]:
    """The names the page shows for the root module: ``"Canonical (root)"``, ``"(root)"`` and
    its class, ``"Canonical"``."""
    kind = root_type(run)
    return {module_label("", kind), ROOT_MARK, kind}


def inspect(widget, target: str, quiet: bool) -> bool:
    """Answer a selection with the ``inspector`` traitlet for ``target`` (a node id or
    ``"module:<name>"``; "" empties it). False when nothing is named so: ``quiet``, the inspector
    empties; else ``errors["select"]`` says why."""
    if not target:
        widget.inspector = {}
        return True
    widget.fill_details()  # the inspector shows values: record them now, and the diagnosis with them
    run = widget.run
    try:
        if target in run.nodes:
            data = node_inspector_json(run, target, widget.baseline)
        else:
            module = target.removeprefix(MODULE_PREFIX)
            if module == LOSS_MODULE:  # not a module: what loss_fn built; show its root op
                data = {**node_inspector_json(run, run.root, widget.baseline), "id": target}
            elif _container(widget, module):
                data = _container_json(widget, module)
            else:
                run.module_io(module)  # raises TargetError for an unknown name
                data = module_inspector_json(run, module, sites(widget, module), widget.baseline)
    except HookvizError as error:
        if not quiet:
            widget._set_error("select", str(error))
        else:
            widget.inspector = {}
        return False
    with widget.hold_sync():
        widget.inspector = with_watch(widget, data)
        widget._clear_errors("select")
    return True


def with_watch(widget, data: dict) -> dict:
    """``data`` (an inspector) with what the watch on screen says of it (``watch``:
    :func:`~hookviz.widget.inspector.watch_note`), or without it when no watch is shown; the
    watch view calls it again at each step it shows."""
    out = {k: v for k, v in data.items() if k != "watch"}
    if not out.get("id"):
        return out
    kind = out.get("node_kind") if out.get("node_kind") == "leaf" else "op"
    kind = "module" if out["id"].startswith(MODULE_PREFIX) else kind
    note = watch_note(widget.watch_view, out["id"], kind)
    if note is not None:
        out["watch"] = note
    return out


def _container(widget, module: str) -> bool:
    """A module box of the graph that was never called itself (a ``ModuleList``, GPT-2's
    ``transformer.h``): only its children ran."""
    return module not in {call.module for call in widget.run.calls} and any(
        g["module"] == module for g in widget.graph.get("groups", [])
    )


def _container_json(widget, module: str) -> dict:
    """The inspector of a container: what it is and which of its children ran, with the
    gradient norms of the parameters it holds (``run.leaves``)."""
    group = next(g for g in widget.graph.get("groups", []) if g["module"] == module)
    prefix = module + "."
    children = [g["module"] for g in widget.graph["groups"] if g["parent"] == group["id"]]
    parameters = {
        item["id"]: item["norm"]
        for item in widget.graph["nodes"]
        if item["kind"] != "op" and item["module"].startswith(prefix)
    }
    kind = group.get("type") or "module"
    return {
        "id": MODULE_PREFIX + module,
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


def sites(widget, target: str) -> list[str]:
    """The edit sites the session offers at ``target``; none where it names none."""
    try:
        return list(widget.session.sites(target))
    except HookvizError:
        return []

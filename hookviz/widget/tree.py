"""The module groups' names and signatures that the graph payload carries.

The page draws the module tree and decides everything about it (short names, which boxes are
open, reveal, search, identical blocks: ``js/src/names.js``, ``collapse.js`` and ``find.js``, their
one home). What it cannot know is what only the recording holds: the parameters' shapes and the
ops each module recorded. So each group gets a ``signature`` here, equal for modules that are
identical blocks.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict

from hookviz import text

GROUP_PREFIX = "group:"
MODULE_PREFIX = "module:"
ROOT_MARK = text.ROOT_MARK


def module_label(module: str, root_type: str = "") -> str:
    """The name the page shows for a module (:func:`hookviz.text.module_name`: the root module by
    its class, ``"Canonical (root)"``). ``w.select`` and the page's search take it."""
    return text.module_name(module, root_type)


def root_type(run) -> str:
    """The class name of the run's root module (``Run.root_type``)."""
    return run.root_type


def group_id(module: str) -> str:
    """The id of the compound node drawn for a module."""
    return GROUP_PREFIX + module


def parent_module(module: str) -> str | None:
    """``"a.b.c"`` -> ``"a.b"``, ``"a"`` -> None (the root's box is :mod:`hookviz.widget.graph`'s)."""
    if "." not in module:
        return None
    return module.rsplit(".", 1)[0]


def natural_key(module: str) -> tuple:
    """Sort key that puts ``h.2`` before ``h.10`` (indices compare as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in module.split("."))


def _signature(group: dict, own_ops: Counter, child_signatures: list[str]) -> str:
    """Equal for two modules of one type that recorded the same ops themselves and whose children
    are identical in pairs (identical blocks)."""
    text = "|".join(
        (
            group.get("type", ""),
            ",".join(f"{op}:{n}" for op, n in sorted(own_ops.items())),
            ",".join(sorted(child_signatures)),
        )
    )
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def mark_signatures(groups: list[dict], nodes: list[dict], leaf_shapes: dict | None = None) -> None:
    """Give each group a ``signature``: equal for identical modules, so the page can mark
    identical siblings (``h.3`` as block 4 of 6) and open them together.

    Identical: same module type, the same ops of its own, parameters of the same shapes
    (``leaf_shapes``: leaf id -> shape), so a ``Linear(64, 3)`` head is not one of the
    ``Linear(64, 64)`` layers, and children identical in pairs. Signatures are made innermost
    first, each from its children's: one hash per module, no walk up per module.
    """
    leaf_shapes = leaf_shapes or {}
    keys: dict[str, list[str]] = defaultdict(list)
    for item in nodes:
        if item["kind"] == "op":
            keys[item["module"]].append(item["op"])
        else:
            keys[item["module"]].append(f"{item['kind']}{list(leaf_shapes.get(item['id'], ()))}")
    own = {module: Counter(found) for module, found in keys.items()}  # counted in C
    children: dict[str | None, list[dict]] = defaultdict(list)
    for group in groups:
        children[group["parent"]].append(group)
    # innermost first; the root box (module "") holds the top-level ones, so it comes last
    for group in sorted(groups, key=lambda g: (g["module"] == "", -g["module"].count("."))):
        inner = [child["signature"] for child in children.get(group["id"], ())]
        group["signature"] = _signature(group, own.get(group["module"], Counter()), inner)

"""The module tree the widget draws: short names, repeated blocks, what opens first, reveal, search.

Pure functions over the ``groups`` and ``nodes`` lists of :func:`hookviz.widget.payload.graph_json`.
The expansion state is the list of collapsed modules (the ``collapsed`` traitlet): a module group
that is not listed is drawn open, unless an ancestor is collapsed. Every rule about which groups are
open lives here, and the page only draws what this list says.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict

GROUP_PREFIX = "group:"
MODULE_PREFIX = "module:"
# About this many drawn elements (op nodes, leaves and boxes) keep a first view readable when it
# is fitted into a notebook cell; the first view opens the module tree as deep as fits in it.
VISIBLE_BUDGET = 40
# A module box's children are laid out in one row that cannot wrap inside the box: the first view
# opens a box only when it holds at most this many child modules (GPT-2 small's twelve blocks stay
# one `h` box, opened by a click; a six-layer GPT-2 opens to its blocks).
ROW_BUDGET = 8


def group_id(module: str) -> str:
    """The id of the compound node drawn for a module."""
    return GROUP_PREFIX + module


def parent_module(module: str) -> str | None:
    """``"a.b.c"`` -> ``"a.b"``, ``"a"`` -> None (the root is not a group)."""
    if "." not in module:
        return None
    return module.rsplit(".", 1)[0]


def natural_key(module: str) -> tuple:
    """Sort key that puts ``h.2`` before ``h.10`` (indices compare as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in module.split("."))


def ancestors(module: str) -> list[str]:
    """The modules enclosing ``module``, outermost first, without ``module`` itself."""
    out = []
    name = parent_module(module) if module else None
    while name:
        out.append(name)
        name = parent_module(name)
    return out[::-1]


def short_name(module: str) -> str:
    """What a box shows: the last part of the path, with its list's name when the part is an index
    or sits in a list item, e.g. ``transformer.h.3`` -> ``h.3``, ``transformer.h.3.attn`` ->
    ``h.3.attn``, ``transformer.h.3.attn.c_attn`` -> ``c_attn``, ``0`` -> ``0``."""
    parts = module.split(".")
    if len(parts) == 1:
        return module
    if parts[-1].isdigit():
        return ".".join(parts[-2:])
    if parts[-2].isdigit():
        return short_name(".".join(parts[:-1])) + "." + parts[-1]
    return parts[-1]


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


def mark_repeats(groups: list[dict], nodes: list[dict], leaf_shapes: dict | None = None) -> None:
    """Give each group ``signature`` and, when siblings share it, ``repeat = {index, count}``
    (1-based index among its identical siblings), so the page can show ``h.3`` as block 4 of 6.

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
    for group in sorted(groups, key=lambda g: -g["module"].count(".")):
        inner = [child["signature"] for child in children.get(group["id"], ())]
        group["signature"] = _signature(group, own.get(group["module"], Counter()), inner)
    by_class: dict[tuple, list[dict]] = defaultdict(list)
    for group in groups:
        by_class[(group["parent"], group["signature"])].append(group)
    for members in by_class.values():
        members.sort(key=lambda g: natural_key(g["module"]))
        for index, group in enumerate(members):
            group["repeat"] = {"index": index + 1, "count": len(members)} if len(members) > 1 else None


def _children(groups: list[dict]) -> dict[str | None, list[str]]:
    children: dict[str | None, list[str]] = defaultdict(list)
    for group in groups:
        children[parent_module(group["module"])].append(group["module"])
    return children


def _open_levels(groups: list[dict], children: dict, try_open) -> None:
    """Walk the module tree level by level from the top. At each level, identical siblings (same
    parent, same signature: the six blocks of a GPT-2) form one class, and ``try_open(members,
    depth)`` says whether that class opens; the children of opened modules make the next level."""
    signature = {g["module"]: g["signature"] for g in groups}
    level, depth = sorted(children[None]), 0
    while level:
        classes: dict[tuple, list[str]] = defaultdict(list)
        for module in level:
            if children[module]:
                classes[(parent_module(module), signature[module])].append(module)
        next_level = []
        for members in classes.values():
            if try_open(members, depth):
                for module in members:
                    next_level.extend(children[module])
        level, depth = sorted(next_level), depth + 1


def default_collapsed(graph_data: dict, budget: int = VISIBLE_BUDGET) -> list[str]:
    """The modules collapsed in the first view: the module tree opened as deep as fits.

    Start with every top-level module as one box. Open boxes that hold other modules, level by
    level, while the drawn elements stay within ``budget`` and the box holds at most
    :data:`ROW_BUDGET` child modules (its row cannot wrap); identical siblings (the six blocks of a
    GPT-2) open together or not at all. Modules that hold only ops open only when the whole graph
    fits, so a small model shows its ops and a large one its blocks.
    """
    nodes, groups = graph_data["nodes"], graph_data["groups"]
    if not groups:
        return []
    if len(nodes) + len(groups) <= budget:
        return []
    children = _children(groups)
    direct = Counter(item["module"] for item in nodes)
    collapsed = set(children[None])
    count = direct.get("", 0) + len(collapsed)

    def try_open(members: list[str], depth: int) -> bool:
        nonlocal count
        added = sum(direct.get(m, 0) + len(children[m]) for m in members)
        if count + added > budget or any(len(children[m]) > ROW_BUDGET for m in members):
            return False
        count += added
        for module in members:
            collapsed.discard(module)
            collapsed.update(children[module])
        return True

    _open_levels(groups, children, try_open)
    return sorted(collapsed)


# The Module tree view (a tree diagram, one column per depth) opens levels while no column holds
# more than this many boxes: a column of 16 boxes fitted into a notebook cell keeps 8 px labels.
TREE_COLUMN_BUDGET = 16


def tree_collapsed(groups: list[dict], budget: int = TREE_COLUMN_BUDGET) -> list[str]:
    """The modules collapsed when the Module tree view opens: the tree opened level by level
    while every depth's column holds at most ``budget`` boxes; identical siblings (the six blocks
    of a GPT-2) open together or not at all. Every module that has children is listed unless
    opened (a collapsed module hides its subtree)."""
    children = _children(groups)
    collapsed = {g["module"] for g in groups if children[g["module"]]}
    column: Counter = Counter({0: len(children[None])})

    def try_open(members: list[str], depth: int) -> bool:
        added = sum(len(children[m]) for m in members)
        if column[depth + 1] + added > budget:
            return False
        column[depth + 1] += added
        collapsed.difference_update(members)
        return True

    _open_levels(groups, children, try_open)
    return sorted(collapsed)


def open_one_level(collapsed: list[str], module: str, groups: list[dict]) -> list[str]:
    """``collapsed`` with ``module`` open and its child modules shown as closed boxes."""
    state = set(collapsed)
    state.discard(module)
    state.update(_children(groups)[module])
    return sorted(state)


def reveal(collapsed: list[str], module: str, groups: list[dict], open_itself: bool) -> list[str]:
    """``collapsed`` with every module around ``module`` open (one level each), so an element of
    ``module`` is drawn; ``module`` itself too when ``open_itself`` (to show one of its ops)."""
    chain = ancestors(module) + ([module] if open_itself and module else [])
    state = list(collapsed)
    for name in chain:
        if name in state:
            state = open_one_level(state, name, groups)
    return sorted(state)


def find(query: str, graph_data: dict) -> str | None:
    """The best match of a search: a module name, op node id or leaf name containing ``query``
    (case-insensitive). An exact name wins, then a name that ends with it, then the shortest;
    modules before nodes of equal rank. Returns a module name or a node id, None when nothing
    matches."""
    needle = query.strip().lower()
    if not needle:
        return None
    candidates = [(g["module"], 0) for g in graph_data["groups"]]
    candidates += [(item["id"], 1) for item in graph_data["nodes"]]
    best = None
    for name, kind in candidates:
        lowered = name.lower()
        if needle not in lowered:
            continue
        rank = (
            lowered != needle,
            not (lowered.endswith("." + needle) or lowered == needle),
            len(name),
            kind,
            name,
        )
        if best is None or rank < best[0]:
            best = (rank, name)
    return None if best is None else best[1]

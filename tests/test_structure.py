"""The package's layers, read from the source: imports run one way, down the layers of docs/architecture.md.

Every ``import`` and ``from ... import`` of a hookviz module counts, at module level, inside a
function or under ``if TYPE_CHECKING:`` (an import for annotations is a dependency too: two modules
that name each other's types are one room), relative ones (``from . import x``, ``from .x import y``)
and calls of ``importlib.import_module("hookviz...")`` and ``__import__("hookviz...")`` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hookviz"


def _imports(path: Path, module: str | None = None) -> list[tuple[str, list[str]]]:
    """(hookviz module imported, names taken from it) for each import in ``path``.

    ``from hookviz.record import session`` counts as an import of the module ``hookviz.record.session``;
    ``from hookviz.record import Session`` as an import of the package ``hookviz.record``. A relative
    import is read from ``module``, the dotted name of the file (by default found from ``path``).
    """
    module = module or _dotted(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.split(".")[0] == "hookviz"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: ``from . import x`` is ``from <package> import x``
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "hookviz":
                continue
            names = [alias.name for alias in node.names]
            submodules = [name for name in names if _is_module(f"{base}.{name}")]
            found += [(f"{base}.{name}", []) for name in submodules]
            rest = [name for name in names if name not in submodules]
            if rest:
                found.append((base, rest))
        elif isinstance(node, ast.Call) and _imports_by_name(node):
            found.append((node.args[0].value, []))
    return found


def _imports_by_name(call: ast.Call) -> bool:
    """A call of ``importlib.import_module("hookviz...")``, ``import_module(...)`` or
    ``__import__(...)`` with a hookviz module's name spelled out."""
    name = ast.unparse(call.func)
    return (
        name in ("importlib.import_module", "import_module", "__import__")
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
        and call.args[0].value.split(".")[0] == "hookviz"
    )


def _is_module(dotted: str) -> bool:
    """A module or package of hookviz (Python source, or a folder)."""
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def _dotted(path: Path) -> str:
    """``hookviz/record/session.py`` -> ``hookviz.record.session``; a package's __init__ -> the package;
    a file outside the package -> its own name."""
    if not path.is_relative_to(PACKAGE.parent):
        return path.stem
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {_dotted(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MODULES = sorted(name for name in FILES if name != "hookviz")
EDGES = {name: _imports(FILES[name]) for name in MODULES}


def test_the_package_has_modules_to_check():
    assert len(MODULES) > 20 and "hookviz.record.session" in MODULES and "hookviz.record.forward" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_the_package_itself(module):
    # The package's __init__ imports the modules; a module that imports it back makes a cycle.
    assert not [m for m, _ in EDGES[module] if m == "hookviz"], f"{module} imports hookviz"


@pytest.mark.parametrize("module", MODULES)
def test_no_private_name_is_imported_from_another_module(module):
    private = [(m, n) for m, names in EDGES[module] for n in names if n.startswith("_")]
    assert not private, f"{module} imports private names {private}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> the modules it imports), as the path that closes
    it (``[a, b, a]``); None when there is none. Walked depth first, without recursion."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, todo = [start], [iter(sorted(graph[start] & graph.keys()))]
        state[start] = 1
        while todo:
            target = next(todo[-1], None)
            if target is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(target) == 1:
                return path[path.index(target) :] + [target]
            elif target not in state:
                state[target] = 1
                path.append(target)
                todo.append(iter(sorted(graph[target] & graph.keys())))
    return None


def test_the_import_graph_has_no_cycle():
    cycle = _cycle({m: {target for target, _ in EDGES[m]} for m in MODULES})
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_sees_a_cycle_inside_a_function_and_under_type_checking(tmp_path):
    # The rules above are only as good as the reader: a planted pair of modules that import each
    # other, one inside a function and one under TYPE_CHECKING, is a cycle.
    upper, lower = tmp_path / "upper.py", tmp_path / "lower.py"
    upper.write_text("def f():\n    from hookviz.widget.lower import helper\n")
    lower.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hookviz.widget.upper import Upper\n"
    )
    planted = {
        "hookviz.widget.upper": {t for t, _ in _imports(upper, "hookviz.widget.upper")},
        "hookviz.widget.lower": {t for t, _ in _imports(lower, "hookviz.widget.lower")},
    }
    assert planted == {
        "hookviz.widget.upper": {"hookviz.widget.lower"},
        "hookviz.widget.lower": {"hookviz.widget.upper"},
    }
    assert _cycle(planted) == ["hookviz.widget.lower", "hookviz.widget.upper", "hookviz.widget.lower"]
    assert _cycle({**planted, "hookviz.widget.lower": set()}) is None


def test_the_checker_sees_relative_imports_and_imports_by_name(tmp_path):
    # Read as if the file were hookviz/data/m.py: each form below is an import the layer rules see.
    source = tmp_path / "m.py"
    source.write_text(
        "import importlib\n"
        "from . import run\n"
        "from .tensors import json_float\n"
        "from ..widget.graph import graph_json\n"
        "def f():\n"
        "    importlib.import_module('hookviz.widget.chart')\n"
        "    __import__('hookviz.record.session')\n"
        "    importlib.import_module('json')\n"
    )
    assert sorted(_imports(source, "hookviz.data.m")) == [
        ("hookviz.data.run", []),
        ("hookviz.data.tensors", ["json_float"]),
        ("hookviz.record.session", []),
        ("hookviz.widget.chart", []),
        ("hookviz.widget.graph", ["graph_json"]),
    ]
    upward = {t for t, _ in _imports(source, "hookviz.data.m") if _layer(t) > _layer("hookviz.data.m")}
    assert upward == {"hookviz.widget.graph", "hookviz.widget.chart", "hookviz.record.session"}


# The layers, lowest first. A module may import its own layer and the layers below it, never one above:
# data is plain records, the recorder builds data, analysis and files read it, the widget draws it.
# docs/architecture.md draws the same picture.
LAYERS = [
    {"hookviz.errors", "hookviz.examples", "hookviz.text", "hookviz.colors", "hookviz.advice"},
    {"hookviz.stats"},
    {"hookviz.data"},
    {"hookviz.edits"},
    {"hookviz.analysis"},
    {"hookviz.record"},
    {"hookviz.watching"},
    {"hookviz.files"},
    {"hookviz.widget"},
    {"hookviz.integrations"},
    {"hookviz.cli", "hookviz.__main__"},
]


def _layer(module: str) -> int:
    """The index in LAYERS of the layer that holds ``module`` (a dotted name inside hookviz)."""
    for index, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return index
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS and to docs/architecture.md")


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports_only_its_own_layer_and_those_below(module):
    upward = [target for target, _ in EDGES[module] if _layer(target) > _layer(module)]
    assert not upward, f"{module} (layer {_layer(module)}) imports layers above it: {upward}"


def test_the_layer_rule_sees_an_upward_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from hookviz.widget.graph import graph_json\n")
    targets = [target for target, _ in _imports(source)]
    assert targets == ["hookviz.widget.graph"] and _layer(targets[0]) > _layer("hookviz.data.run")


def test_the_package_exports_its_public_api_only():
    import hookviz

    exported = set(hookviz.__all__)
    assert not [name for name in exported if name.startswith("_")]
    # Everything the package namespace holds beyond __all__ is a subpackage or a dunder, no helper.
    extra = {
        name
        for name in vars(hookviz)
        if not name.startswith("__") and name not in exported and not _is_module(f"hookviz.{name}")
    }
    assert not extra, f"hookviz exposes names outside __all__: {sorted(extra)}"


# The private PyTorch APIs hookviz calls live in one module, which names each and the releases
# that have it. Private: an attribute that starts with "_" reached from ``torch`` (``torch._C...``,
# ``torch.autograd.Variable._execution_engine``, ``torch.utils._pytree``), or one of the private
# methods autograd's objects have (a Node's ``_sequence_nr``). ``torch._foreach_*`` are not: the
# torch reference documents them ("Foreach Operations", https://pytorch.org/docs/stable/torch.html).
PRIVATE_HOME = "hookviz.record.torch_compat"
PRIVATE_METHODS = {"_sequence_nr", "_current_graph_task_id", "queue_callback", "_get_sequence_nr"}


def _dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name; None for anything else (a call in the chain)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__") and not part.startswith("_foreach_")


def _private_torch_uses(path: Path) -> list[str]:
    """The private PyTorch names ``path`` reaches in code (docstrings and comments do not count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            if node.attr in PRIVATE_METHODS:
                found.append(node.attr)
            parts = (_dotted_name(node) or "").split(".")
            private = [i for i, p in enumerate(parts) if i and _is_private(p)]
            if parts[0] == "torch" and private:  # the shortest private prefix: torch._C
                found.append(".".join(parts[: private[0] + 1]))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found += [f"{node.module}.{a.name}" for a in node.names if _is_private(a.name)]
            found += [node.module] if any(_is_private(p) for p in node.module.split(".")) else []
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "torch" and "._" in a.name]
    return sorted(set(found))


@pytest.mark.parametrize("module", MODULES)
def test_private_pytorch_apis_are_called_from_torch_compat_only(module):
    if module == PRIVATE_HOME:
        return
    used = _private_torch_uses(FILES[module])
    assert not used, f"{module} calls private PyTorch APIs {used}: call them through {PRIVATE_HOME}"


def test_the_private_api_check_sees_each_form(tmp_path):
    source = tmp_path / "uses.py"
    source.write_text(
        "import torch\nimport torch.utils._pytree\nfrom torch.utils import _pytree as pytree\n"
        "def f(fn):\n    torch._C._autograd._get_sequence_nr()\n    fn._sequence_nr()\n"
        "    torch.autograd.Variable._execution_engine.queue_callback(f)\n    torch.nn.Linear(1, 1)\n"
    )
    assert _private_torch_uses(source) == [
        "_get_sequence_nr",
        "_sequence_nr",
        "queue_callback",
        "torch._C",
        "torch.autograd.Variable._execution_engine",
        "torch.utils._pytree",
    ]
    assert _private_torch_uses(FILES[PRIVATE_HOME])  # the home itself does call them


# A Watch's private state has one owner: watching/watch.py. Other modules ask its owners
# (``watch.kept``, ``watch.handles``, ``watch.columns``, ``watch.backwards``) through public names.
WATCH_HOME = "hookviz.watching.watch"


def _watch_privates(path: Path) -> set[str]:
    """The private names of class ``Watch`` in ``path``: each ``self._x`` it assigns and each
    ``_method`` it defines (``__dunder__`` names are not private)."""
    tree = ast.parse(path.read_text())
    watch = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Watch")
    names = {n.name for n in watch.body if isinstance(n, ast.FunctionDef) and _is_private(n.name)}
    for node in ast.walk(watch):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and _is_private(node.attr):
                names.add(node.attr)
    return names


def _private_watch_reaches(path: Path, privates: set[str]) -> list[str]:
    """Where ``path`` reaches one of ``privates`` on anything but ``self`` (an attribute, or by
    name through ``getattr``/``setattr``/``hasattr``/``delattr``), as ``"line: name"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in privates:
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in privates
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


WATCH_PRIVATES = _watch_privates(FILES[WATCH_HOME])


@pytest.mark.parametrize("module", MODULES)
def test_no_module_but_the_watchs_own_reaches_a_private_attribute_of_a_watch(module):
    if module == WATCH_HOME:
        return
    found = _private_watch_reaches(FILES[module], WATCH_PRIVATES)
    assert not found, f"{module} reaches private attributes of a Watch: {found}; ask the owner instead"


def test_the_watch_private_check_sees_a_planted_access(tmp_path):
    assert {"_row", "_closed_numels"} <= WATCH_PRIVATES and "__init__" not in WATCH_PRIVATES
    source = tmp_path / "reaches.py"
    source.write_text(
        "class Other:\n    def f(self, watch):\n        self._row = watch._row(None)\n"
        "        return getattr(watch, '_closed_numels', None), watch.kept, self._row\n"
    )
    assert _private_watch_reaches(source, WATCH_PRIVATES) == [
        "3: watch._row",
        "4: getattr(watch, '_closed_numels', None)",
    ]

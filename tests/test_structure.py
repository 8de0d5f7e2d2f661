"""The package's layers, read from the source: imports run one way, down the layers of docs/architecture.md.

Every ``import`` and ``from ... import`` of a hookviz module counts, at module level or inside a
function, relative ones (``from . import x``, ``from .x import y``) and calls of
``importlib.import_module("hookviz...")`` and ``__import__("hookviz...")`` too, except those under
``if TYPE_CHECKING:`` (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hookviz"


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those inside an ``if TYPE_CHECKING:`` block."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _imports(path: Path, module: str | None = None) -> list[tuple[str, list[str]]]:
    """(hookviz module imported, names taken from it) for each runtime import in ``path``.

    ``from hookviz.record import session`` counts as an import of the module ``hookviz.record.session``;
    ``from hookviz.record import Session`` as an import of the package ``hookviz.record``. A relative
    import is read from ``module``, the dotted name of the file (by default found from ``path``).
    """
    module = module or _dotted(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in _runtime_nodes(ast.parse(path.read_text())):
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


def test_the_import_graph_has_no_cycle():
    graph = {m: {target for target, _ in EDGES[m]} for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module] & set(MODULES)):
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(target) :] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in MODULES:
        if module not in state:
            visit(module, [module])


def test_the_checker_sees_a_cycle_inside_a_function_and_ignores_type_checking(tmp_path):
    # The rules above are only as good as the reader: one import inside a function counts, one under
    # TYPE_CHECKING does not.
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import hookviz.data.run\n"
        "def f():\n    from hookviz.data.tensors import _x\n"
    )
    assert _imports(source) == [("hookviz.data.tensors", ["_x"])]


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
    {"hookviz.errors", "hookviz.examples", "hookviz.text", "hookviz.colors"},
    {"hookviz.stats"},
    {"hookviz.data"},
    {"hookviz.edits"},
    {"hookviz.analysis"},
    {"hookviz.record"},
    {"hookviz.watching"},
    {"hookviz.files"},
    {"hookviz.widget"},
    {"hookviz.integrations"},
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

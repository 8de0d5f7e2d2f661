"""The package's import graph stays one-way (issue 11's structure rules), read from the source.

Every ``import`` and ``from ... import`` of a hookviz module counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:`` (they never run).
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


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(hookviz module imported, names taken from it) for each runtime import in ``path``.

    ``from hookviz.record import session`` counts as an import of the module ``hookviz.record.session``;
    ``from hookviz.record import Session`` as an import of the package ``hookviz.record``.
    """
    found = []
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.split(".")[0] == "hookviz"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hookviz":
            names = [alias.name for alias in node.names]
            submodules = [name for name in names if _is_module(f"{node.module}.{name}")]
            found += [(f"{node.module}.{name}", []) for name in submodules]
            rest = [name for name in names if name not in submodules]
            if rest:
                found.append((node.module, rest))
    return found


def _is_module(dotted: str) -> bool:
    """A module or package of hookviz (Python source, or a folder)."""
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or path.is_dir()


def _dotted(path: Path) -> str:
    """``hookviz/record/session.py`` -> ``hookviz.record.session``; a package's __init__ -> the package."""
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
        "def f():\n    from hookviz.stats.engine import _x\n"
    )
    assert _imports(source) == [("hookviz.stats.engine", ["_x"])]

"""MkDocs hooks for hookviz's site (mkdocs.yml `hooks:`): notebooks, includes and name checks.

- **Notebooks**: the pages under ``notebooks/`` are the rendered copies ``docs/render_notebooks.py``
  ran and committed (``docs/rendered/``), outputs included, so a build from a clone runs nothing. A
  rendered copy whose recorded hash is not its notebook's (the notebook changed since) or that is
  missing is a warning (``--strict`` fails) and the page shows the committed notebook without
  outputs. Outputs a static page cannot show as stored are converted for the page: each hookviz
  widget becomes its saved page (made here from the kept state and this checkout's bundle) in an
  ``<iframe>``, plotly's JSON becomes the figure over the site's one copy of plotly.js.
- **Includes**: a line ``<!-- include PATH -->`` (``PATH`` from the repository root, optionally
  followed by ``shift=N`` to demote its headings by N levels) is replaced by that file, read at build
  time. ``benchmarks/results/latest`` is the newest table ``python -m benchmarks`` wrote (by the time
  in its first line), so the Performance page follows new results without an edit.
- **Names**: a page that mentions ``hookviz.<name>`` or ``from hookviz.<module> import <name>``
  where no such public name or module exists gets a warning, and so does a name of ``hookviz.__all__``
  that no reference page documents with ``::: hookviz.<name>``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import re
from pathlib import Path

import nbformat
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

logger = logging.getLogger("mkdocs.hooks.hookviz")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SITE_NOTEBOOKS = ROOT / "build" / "site-notebooks"
PAGES = "notebooks/pages"  # the saved pages of the notebooks' widgets, in the site
IFRAME = (
    '<iframe class="hookviz-example" src="{src}" title="{title}" loading="lazy" '
    'style="width: 100%; height: 900px; border: 1px solid #8884; border-radius: 4px"></iframe>'
)
PLOTLY = "application/vnd.plotly.v1+json"
PLOTLY_JS = "assets/plotly.min.js"
RESULTS = ROOT / "benchmarks" / "results"
PACKAGE = ROOT / "hookviz"

INCLUDE = re.compile(r"^<!-- include (?P<path>\S+)(?: shift=(?P<shift>\d))? -->$", re.MULTILINE)
RESULTS_HEADER = re.compile(r"^# hookviz benchmarks, (\d{4}-\d\d-\d\d \d\d:\d\d) UTC$")
FENCE = re.compile(r"^(```|~~~)")
DOCUMENTED = re.compile(r"^::: (\S+)", re.MULTILINE)
DOTTED = re.compile(r"(?<![\w./-])hookviz(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"^\s*from (hookviz(?:\.\w+)*) import (\([^)]*\)|[\w, ]+)", re.MULTILINE)

_documented: set[str] = set()


# ---------------------------------------------------------------------------------------- notebooks


def _renderer():
    """``docs/render_notebooks.py``, the one home of the rendered copies' folder, format and hash."""
    spec = importlib.util.spec_from_file_location("render_notebooks", ROOT / "docs" / "render_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _for_the_site(notebook, stem: str, to_root: str, renderer, config) -> tuple[bool, list[File]]:
    """Make the outputs a static page can show: (whether a plotly figure needs plotly.js, the saved
    pages of the widgets to add to the site).

    A hookviz widget's output refers to its saved page's state (``docs/rendered/<stem>-<k>.json.gz``):
    the page is made of it with this checkout's bundle (``hookviz.widget.export.page_html``) and
    shown in an ``<iframe>``, clickable as on the guides' examples. A plotly figure is stored as
    plotly's JSON mimetype, which nbconvert does not draw: it becomes the figure's HTML over the
    site's one copy of plotly.js. Every other output is left as the kernel wrote it.
    """
    import plotly.io

    plotted, pages = False, []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if renderer.SAVED_PAGE in data:
                from hookviz.widget.export import page_html

                saved = data[renderer.SAVED_PAGE]["page"]
                state = renderer.page_state(saved)
                uri = f"{PAGES}/{saved.split('.')[0]}.html"
                pages.append(File.generated(config, uri, content=page_html(state, f"hookviz: {stem}")))
                title = "the widget this cell drew, as a saved page: click a node or a box (edits need the notebook)"
                output["data"] = {"text/html": IFRAME.format(src=to_root + uri, title=title)}
            elif PLOTLY in data:
                figure = plotly.io.from_json(json.dumps(data[PLOTLY]))
                html = plotly.io.to_html(figure, include_plotlyjs=f"{to_root}{PLOTLY_JS}", full_html=False)
                output["data"] = {"text/html": html}
                plotted = True
    return plotted, pages


@event_priority(100)  # before mkdocs-jupyter's on_files turns .ipynb files into pages
def on_files(files, config):
    renderer = _renderer()
    plotted = False
    for source in sorted(NOTEBOOKS.glob("*.ipynb")):
        rendered = renderer.rendered_path(source)
        page = File(
            f"notebooks/{source.name}",
            src_dir=str(ROOT),  # the committed notebook, without outputs, unless the rendered copy is usable
            dest_dir=config.site_dir,
            use_directory_urls=config.use_directory_urls,
        )
        notebook = nbformat.read(rendered, as_version=4) if rendered.exists() else None
        recorded = notebook.metadata.get(renderer.METADATA, {}).get("sha256") if notebook else None
        if recorded != renderer.source_hash(nbformat.read(source, as_version=4)):
            logger.warning(
                "%s %s: run `python docs/render_notebooks.py %s` and commit docs/rendered/ "
                "(the page shows the notebook without outputs)",
                rendered.relative_to(ROOT),
                "is missing" if notebook is None else f"was rendered from an older {source.relative_to(ROOT)}",
                source.stem,
            )
        else:
            # mkdocs-jupyter writes the page to notebooks/<stem>/index.html (notebooks/<stem>.html)
            to_root = "../../" if config.use_directory_urls else "../"
            figures, pages = _for_the_site(notebook, source.stem, to_root, renderer, config)
            plotted |= figures
            for saved in pages:
                files.append(saved)
            (SITE_NOTEBOOKS / "notebooks").mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, SITE_NOTEBOOKS / "notebooks" / source.name)
            page = File(
                page.src_uri,
                src_dir=str(SITE_NOTEBOOKS),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        files.append(page)
    if plotted:
        from plotly.offline import get_plotlyjs

        files.append(File.generated(config, PLOTLY_JS, content=get_plotlyjs()))
    return files


def on_serve(server, config, builder):
    for path in (NOTEBOOKS, ROOT / "docs" / "rendered", RESULTS, ROOT / "CHANGELOG.md"):
        if path.exists():
            server.watch(str(path))
    return server


# ----------------------------------------------------------------------------------------- includes


def latest_results() -> Path:
    """The newest table ``python -m benchmarks`` wrote, by the UTC time in its first line."""
    dated = []
    for path in RESULTS.glob("*.md"):
        with path.open(encoding="utf-8") as file:
            match = RESULTS_HEADER.match(file.readline().rstrip("\n"))
        if match:
            dated.append((match.group(1), path.name, path))
    if not dated:
        raise FileNotFoundError(f"no benchmark table in {RESULTS}: run `python -m benchmarks`")
    return max(dated)[2]


def _shift_headings(text: str, levels: int) -> str:
    """Demote every ATX heading outside fenced code by ``levels``."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = "#" * levels + line
        lines.append(line)
    return "\n".join(lines) + "\n"


def _include(match: re.Match, page) -> str:
    name = match.group("path")
    try:
        path = latest_results() if name == "benchmarks/results/latest" else ROOT / name
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        logger.warning("%s: cannot include %s: %s", page.file.src_uri, name, error)
        return ""
    if name == "benchmarks/results/latest":
        text = f"*From `{path.relative_to(ROOT)}`, the newest table `python -m benchmarks` wrote.*\n\n" + text
    return _shift_headings(text, int(match.group("shift") or 0))


# -------------------------------------------------------------------------------------------- names


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines or imports at its top level (``if TYPE_CHECKING:`` blocks included)."""
    names: set[str] = set()
    stack = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend([*node.body, *node.orelse])
            stack.extend([*getattr(node, "handlers", []), *getattr(node, "finalbody", [])])
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return names


def public_names() -> list[str]:
    """``hookviz.__all__``, read from the source."""
    for node in ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError("hookviz/__init__.py has no __all__")


def _module_path(dotted: str) -> Path | None:
    path = ROOT.joinpath(*dotted.split("."))
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


def _missing(dotted: str) -> str | None:
    """The first part of ``hookviz.a.b.c`` that names neither a module nor a public name, or None."""
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        module = _module_path(".".join(parts[:depth]))
        if module is None:
            return None  # reached a class or function: its attributes are the reference's to check
        name = parts[depth]
        if _module_path(".".join(parts[: depth + 1])) is not None:
            continue
        names = set(public_names()) | {"__version__", "__all__"} if depth == 1 else _top_level_names(module)
        if name not in names:
            return ".".join(parts[: depth + 1])
    return None


def _check_names(markdown: str, page) -> None:
    mentioned = set(DOTTED.findall(markdown))
    for module, names in FROM_IMPORT.findall(markdown):
        listed = [name.split(" as ")[0].strip() for name in names.strip("()").split(",")]
        mentioned.update(f"{module}.{name}" for name in listed if name)
    for dotted in sorted(mentioned):
        missing = _missing(dotted)
        if missing is not None:
            logger.warning(
                "%s mentions %s, but %s is not a public name or module of hookviz",
                page.file.src_uri,
                dotted,
                missing,
            )


def on_page_markdown(markdown, page, config, files):
    _check_names(markdown, page)
    _documented.update(DOCUMENTED.findall(markdown))
    return INCLUDE.sub(lambda match: _include(match, page), markdown)


def on_env(env, config, files):
    # Every page's markdown has been read by now.
    undocumented = [name for name in public_names() if f"hookviz.{name}" not in _documented]
    if undocumented:
        logger.warning(
            "no reference page documents %s: add `::: hookviz.<name>` to a page in docs/reference/",
            ", ".join(f"hookviz.{name}" for name in undocumented),
        )
    _documented.clear()
    return env

"""The notebooks as the docs site shows them: run once, outputs committed, tied to their source by hash.

``python docs/render_notebooks.py [NAME ...]`` runs each notebook of ``notebooks/`` (all, or those
whose file name contains a NAME) from a copy outside the repository, as ``tests/test_notebooks.py``
does, and writes ``docs/rendered/<name>.ipynb``: the notebook with its outputs. Each hookviz widget
it drew is kept as the state of its saved page (``docs/rendered/<stem>-<k>.json.gz``, what
``Widget.save_html`` writes besides the bundle, taken in the kernel after the last cell ran, so
the widget as a reader of the notebook sees it at the end); its output becomes a reference to that
file, which the docs build (``docs/hooks/site.py``) turns into the saved page in an ``<iframe>``.
Other widgets (progress bars) keep their text. The rendered copy records the sha256 of its source's
cells (:func:`source_hash`); ``tests/test_notebooks.py`` fails when a notebook changed and its
rendered copy did not, and the docs build warns (``--strict`` fails). So the site builds from a
clone without running anything, and cannot show outputs of an older notebook.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
RENDERED = ROOT / "docs" / "rendered"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# An output that stands for a hookviz widget: {"page": "<stem>-<k>.json.gz"}, a file in RENDERED.
SAVED_PAGE = "application/vnd.hookviz.saved-page+json"
METADATA = "hookviz_rendered"

# Run in the kernel after the notebook's last cell: the saved-page state of each hookviz widget
# the notebook displayed, by model id, written to the JSON file named by __hookviz_render_out.
_DUMP = """
import json as __json
from ipywidgets.widgets.widget import _instances as __instances
from hookviz.widget.export import page_state as __page_state
from hookviz.widget.widget import Widget as __Widget
__states = {}
for __id in __hookviz_render_ids:
    __w = __instances.get(__id)
    if isinstance(__w, __Widget):
        __states[__id] = __page_state(__w)
with open(__hookviz_render_out, "w", encoding="utf-8") as __f:
    __json.dump(__states, __f, allow_nan=False, separators=(",", ":"))
"""


# where the renderer's Python keeps its packages ("/root/.pyenv/.../site-packages/"), as a warning prints it
_INSTALL_PREFIX = re.compile(r"/[^\s:'\"]*?/site-packages/")


def source_hash(notebook) -> str:
    """sha256 of a notebook's cells, their types and sources in order (outputs and metadata aside)."""
    cells = [[cell.cell_type, cell.source] for cell in notebook.cells]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()


def rendered_path(source: Path) -> Path:
    return RENDERED / source.name


def page_state(name: str) -> dict:
    """The saved-page state ``name`` (a file of RENDERED) holds."""
    return json.loads(gzip.decompress((RENDERED / name).read_bytes()).decode("utf-8"))


def _widget_ids(notebook) -> list[str]:
    ids = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            model = output.get("data", {}).get(WIDGET_VIEW)
            if model and model["model_id"] not in ids:
                ids.append(model["model_id"])
    return ids


def render(source: Path) -> Path:
    """Run ``source`` and write its rendered copy and widget states to RENDERED; returns the copy's path."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory() as folder:
        copied = Path(folder) / "notebooks"  # outside the repository, as a user's copy runs
        shutil.copytree(NOTEBOOKS, copied)
        notebook = nbformat.read(copied / source.name, as_version=4)
        client = NotebookClient(
            notebook, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(copied)}}
        )
        states_file = Path(folder) / "states.json"
        with client.setup_kernel():
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
            ids = _widget_ids(notebook)
            dump = nbformat.v4.new_code_cell(
                f"__hookviz_render_ids = {ids!r}\n__hookviz_render_out = {str(states_file)!r}\n{_DUMP}"
            )
            notebook.cells.append(dump)  # the client writes each cell's outputs back by index
            client.execute_cell(dump, len(notebook.cells) - 1, store_history=False)
            notebook.cells.pop()
        states = json.loads(states_file.read_text(encoding="utf-8"))
    RENDERED.mkdir(parents=True, exist_ok=True)
    for old in RENDERED.glob(f"{source.stem}-*.json.gz"):
        old.unlink()
    pages: dict[str, str] = {}
    for model_id in ids:
        if model_id in states:
            pages[model_id] = f"{source.stem}-{len(pages) + 1}.json.gz"
            text = json.dumps(states[model_id], allow_nan=False, separators=(",", ":"), sort_keys=True)
            # gzip (mtime 0: the same bytes for the same state): a page's state is mostly repeated keys
            (RENDERED / pages[model_id]).write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)  # when it ran: every render would differ from the last
        for output in cell.get("outputs", []):
            if "text" in output:  # a library's warning names the file that warned: not the renderer's disk
                output["text"] = _INSTALL_PREFIX.sub("site-packages/", output["text"])
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                model_id = data.pop(WIDGET_VIEW)["model_id"]
                if model_id in pages:
                    data.clear()
                    data[SAVED_PAGE] = {"page": pages[model_id]}
    notebook.metadata.pop("widgets", None)  # ipywidgets' saved state: the bundle once per widget
    notebook.metadata[METADATA] = {"source": f"notebooks/{source.name}", "sha256": source_hash(notebook)}
    target = rendered_path(source)
    nbformat.write(notebook, target)
    return target


def main(names: list[str]) -> None:
    sources = sorted(NOTEBOOKS.glob("*.ipynb"))
    chosen = [s for s in sources if not names or any(name in s.name for name in names)]
    if not chosen:
        raise SystemExit(f"no notebook in {NOTEBOOKS} matches {names}")
    for source in chosen:
        print(f"rendering {source.name} ...", flush=True)
        print(f"  wrote {render(source).relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""The teaching notebooks run top to bottom and their asserts hold; committed copies carry no outputs.

Each notebook checks its key numbers in its own cells against plain PyTorch (or numbers worked out by
hand), so running it is the test: any failing assert or error fails here with the cell that raised.
Each runs from a copy of the notebooks folder outside the repository, as a user's copy or Colab runs
it: whatever a notebook needs ships in hookviz or in the notebook itself.
The docs site shows each notebook with its outputs from the rendered copy committed in
``docs/rendered/`` (``python docs/render_notebooks.py``), which records the hash of its notebook's
cells: a notebook changed without rendering it again fails here.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
EXPECTED = [
    "00_quickstart.ipynb",
    "01_module_hooks.ipynb",
    "02_forward_hooks.ipynb",
    "03_tensor_hooks.ipynb",
    "04_saved_tensors.ipynb",
    "05_vanishing_gradients.ipynb",
    "06_distributed.ipynb",
    "07_live_training.ipynb",
    "08_frameworks.ipynb",
]


def test_the_course_is_complete():
    assert [p.name for p in PATHS] == EXPECTED


# Minutes of kernels: left out of the fast loop (-m "not e2e"); CI's full command runs them.
@pytest.mark.e2e
@pytest.mark.notebook
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs(path: Path, tmp_path: Path):
    copied = tmp_path / "notebooks"  # outside the repository: no ../examples, no ../anything
    shutil.copytree(NOTEBOOKS, copied)
    assert not copied.resolve().is_relative_to(NOTEBOOKS.parent.resolve())
    notebook = nbformat.read(copied / path.name, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=300,
        allow_errors=False,
        resources={"metadata": {"path": str(copied)}},
    )
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    # Running the notebook is the test only if its cells check something.
    checking = [cell for cell in code if "assert " in cell.source]
    assert checking, f"{path.name}: no cell asserts anything, so running it tests nothing"
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    # Every code cell ran, in order, once: none was skipped or left out of the kernel's run.
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_committed_notebook_is_clean(path: Path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    # Without a kernelspec JupyterLab opens a kernel dialog (and swallows the browser test's clicks).
    assert {k: notebook.metadata["kernelspec"][k] for k in KERNELSPEC} == KERNELSPEC
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a cell has stale outputs; clear them before committing"
            assert cell.execution_count is None, f"{path.name}: clear execution counts before committing"
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# ")


def _renderer():
    path = NOTEBOOKS.parent / "docs" / "render_notebooks.py"
    spec = importlib.util.spec_from_file_location("render_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_the_docs_show_the_notebook_as_it_is(path: Path):
    # The site's page of a notebook is its rendered copy: same cells, outputs from a run of them.
    renderer = _renderer()
    rendered = renderer.rendered_path(path)
    fix = f"run `python docs/render_notebooks.py {path.stem}` and commit docs/rendered/"
    assert rendered.exists(), f"{path.name} has no rendered copy: {fix}"
    copy = nbformat.read(rendered, as_version=4)
    source = nbformat.read(path, as_version=4)
    recorded = copy.metadata[renderer.METADATA]
    assert recorded["source"] == f"notebooks/{path.name}"
    changed = f"{path.name} changed since it was rendered: {fix}"
    assert recorded["sha256"] == renderer.source_hash(source), changed
    assert renderer.source_hash(copy) == recorded["sha256"], f"{rendered.name} was edited by hand: {fix}"
    code = [cell for cell in copy.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"{fix}: not every cell ran"
    outputs = [output for cell in code for output in cell.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    # Each widget is a saved page's state beside the copy, none a widget the page cannot draw.
    pages = [o.data[renderer.SAVED_PAGE]["page"] for o in outputs if renderer.SAVED_PAGE in o.get("data", {})]
    assert all((renderer.RENDERED / page).is_file() for page in pages), pages
    assert not [o for o in outputs if renderer.WIDGET_VIEW in o.get("data", {})]
    # No path of the machine that rendered it: a reader's site-packages is elsewhere.
    texts = [o.text for o in outputs if "text" in o]
    assert not [t for t in texts if "/site-packages/" in t], f"{fix}: an output names the renderer's disk"


def test_the_hash_sees_a_changed_cell():
    renderer = _renderer()
    notebook = nbformat.read(PATHS[0], as_version=4)
    before = renderer.source_hash(notebook)
    notebook.cells[-1].source += " "
    assert renderer.source_hash(notebook) != before


def test_the_distributed_notebook_writes_the_example_script_as_it_ships():
    # Notebook 06 carries its torchrun script (%%writefile) so that it runs from any folder; the
    # repository's examples/ddp_watch.py is the same script, for torchrun from a checkout.
    notebook = nbformat.read(NOTEBOOKS / "06_distributed.ipynb", as_version=4)
    written = [cell.source for cell in notebook.cells if cell.source.startswith("%%writefile")]
    assert len(written) == 1
    header, _, script = written[0].partition("\n")
    assert header == "%%writefile {folder}/ddp_watch.py"
    shipped = (NOTEBOOKS.parent / "examples" / "ddp_watch.py").read_text(encoding="utf-8")
    assert script.rstrip("\n") == shipped.rstrip("\n")

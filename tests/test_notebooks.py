"""The teaching notebooks run top to bottom and their asserts hold; committed copies carry no outputs.

Each notebook checks its key numbers in its own cells against plain PyTorch (or numbers worked out by
hand), so running it is the test: any failing assert or error fails here with the cell that raised.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs(path: Path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=300,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
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

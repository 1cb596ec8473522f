"""Every notebook in ``notebooks/`` runs top to bottom in a fresh kernel without a cell error.

The kernel is this interpreter (``sys.executable``, i.e. the venv's python under ``make test``):
a kernelspec pointing at it is installed into a temporary directory and found through
``JUPYTER_PATH``, so a user-level ``python3`` kernelspec for another interpreter cannot be
picked by mistake; the test also checks, from inside the kernel, that it runs in this
environment (``sys.prefix``). Each notebook runs in its own temporary working directory, with
one thread (the notebooks are sized for a 2-core CPU, and on a shared machine a second thread
costs more than it gains)."""

import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL_NAME = "glitchlens-test-python"
CELL_TIMEOUT_S = 600      # per cell; each notebook takes under 2 minutes on 2 CPU cores
CHECK_SOURCE = "import sys; print(sys.prefix)"


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 6, f"expected the six notebooks in notebooks/, found {[p.name for p in NOTEBOOKS]}"


@pytest.fixture(scope="module")
def jupyter_path(tmp_path_factory):
    """A data directory holding one kernelspec that launches ``sys.executable -m ipykernel_launcher``."""
    prefix = tmp_path_factory.mktemp("jupyter")
    kernelspec.install(kernel_name=KERNEL_NAME, prefix=str(prefix))
    return prefix / "share" / "jupyter"


def test_notebooks_have_no_outputs():
    """Notebooks are committed clean: no outputs, no execution counts."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
                 and (cell.outputs or cell.execution_count is not None)]
        assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, jupyter_path, tmp_path, monkeypatch):
    paths = [str(jupyter_path), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(paths))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")   # ipykernel's debugger warns about frozen modules

    nb = nbformat.read(path, as_version=4)
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_SOURCE))
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT_S, allow_errors=False,
                                     resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()        # raises CellExecutionError, naming the cell, on the first error
    elapsed = time.perf_counter() - start
    print(f"{path.name}: {elapsed:.1f} s")

    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    errors = [out for cell in code_cells for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{path.name}: {[e.ename + ': ' + e.evalue for e in errors]}"
    assert all(cell.execution_count is not None for cell in code_cells), f"{path.name} did not run to the end"
    assert len(nb.cells) == n_cells + 1
    prefix = "".join(out.get("text", "") for out in nb.cells[-1].outputs).strip()
    assert prefix == sys.prefix, f"the kernel ran in {prefix!r}, not in this interpreter's environment {sys.prefix!r}"

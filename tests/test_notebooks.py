"""Every notebook in ``notebooks/`` is committed executed, runs top to bottom in a fresh kernel on
this interpreter without a cell error, and gives the outputs it was committed with (after
normalising what varies between runs: durations, addresses, ids, temporary paths, progress bars;
decimal numbers within a relative 1e-3, as another CPU rounds them; images and plotly figures by
presence). How they run: ``interp.docs.notebooks``."""

import copy
import sys
import time

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
notebooks = pytest.importorskip("interp.docs.notebooks")

NOTEBOOKS = sorted(notebooks.NOTEBOOK_DIR.glob("*.ipynb"))
CHECK_SOURCE = "import sys; print(sys.prefix)"


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 8, f"expected the eight notebooks in notebooks/, found {[p.name for p in NOTEBOOKS]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed(path):
    problems = notebooks.execution_problems(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name} is not committed executed top to bottom: {problems}; {notebooks.REFRESH_HINT}"


def executed(source_cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"{i}") for i in range(len(source_cells))]
    for n, (cell, outputs) in enumerate(zip(nb.cells, source_cells), 1):
        cell.execution_count, cell.outputs = n, outputs
    return nb


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def result(data):
    return nbformat.v4.new_output("execute_result", data=data, execution_count=1)


def test_comparison_ignores_what_varies_between_runs():
    committed = executed([
        [stream("trained in 45.2 s at /tmp/glitchlens-01-ab12cd/fot: model.cfbe904a8f68a96b.safetensors\n"),
         stream("100%|##########| 150/150 [00:44<00:00, 3.36it/s]\n", "stderr")],
        [result({"text/plain": "<Model at 0x7f3a2b1c9d80>", "image/png": "AAAA"})],
    ])
    fresh = executed([
        [stream("trained in 51.0 s at /tmp/glitchlens-01-zz99yy/fot: model.b6f246530e255bd8.safetensors\n"),
         stream("100%|##########| 150/150 [00:50<00:00, 2.95it/s]\n", "stderr")],
        [result({"text/plain": "<Model at 0x7f00deadbeef>", "image/png": "BBBB"})],
    ])
    assert notebooks.output_differences(committed, fresh) == []
    assert notebooks.execution_problems(committed) == []


@pytest.mark.parametrize("change, expected", [
    (lambda nb: nb.cells[0].outputs[0].update(text="trained in 45.2 s, loss 0.31\n"), "code cell 1, output 1"),
    (lambda nb: nb.cells[1].outputs[0].data.pop("image/png"), "code cell 2, output 1"),
    (lambda nb: nb.cells[1].outputs.append(stream("more\n")), "code cell 2: 1 outputs committed, 2 now"),
])
def test_comparison_names_the_cell_that_differs(change, expected):
    committed = executed([[stream("trained in 45.2 s\n")], [result({"text/plain": "1.0", "image/png": "AAAA"})]])
    fresh = copy.deepcopy(committed)
    change(fresh)
    differences = notebooks.output_differences(committed, fresh)
    assert len(differences) == 1 and differences[0].startswith(expected)


COMMITTED_TABLE = ("input             q      k      v     forget    k+v\n"
                   "restored  7.339e-05 -0.004  0.173 -3.746e-04  1.011\n"
                   "11445 reads; largest |sum of the shares - logit difference|: 2.9e-06\n"
                   "[4, 1, 511, 511] L1H0 layer 1")


@pytest.mark.parametrize("fresh", [
    COMMITTED_TABLE,
    COMMITTED_TABLE.replace("7.339e-05", "7.338e-05").replace("1.011", "1.012"),   # the last digit, another CPU
    COMMITTED_TABLE.replace("2.9e-06", "3.4e-06"),                                 # rounding noise near 0
    COMMITTED_TABLE.replace("  0.173", " 0.1731"),                                 # a column one digit wider
])
def test_printed_numbers_agree_within_a_tolerance(fresh):
    assert notebooks.printed_agree(COMMITTED_TABLE, fresh)


@pytest.mark.parametrize("fresh", [
    COMMITTED_TABLE.replace("0.173", "0.175"),                # 1% off
    COMMITTED_TABLE.replace("1.011", "1.000"),
    COMMITTED_TABLE.replace("7.339e-05", "7.339e-03"),
    COMMITTED_TABLE.replace("11445 reads", "11446 reads"),    # counts and shapes exactly
    COMMITTED_TABLE.replace("511, 511", "511, 512"),
    COMMITTED_TABLE.replace("L1H0", "L1H1"),                  # digits in a name are text
    COMMITTED_TABLE.replace("restored", "removed"),           # a changed word
    COMMITTED_TABLE.replace(" forget", ""),
    COMMITTED_TABLE + " 1.0",                                 # one number more
])
def test_printed_texts_that_say_something_else_differ(fresh):
    assert not notebooks.printed_agree(COMMITTED_TABLE, fresh)


def test_comparison_reads_a_result_table_with_the_tolerance():
    committed = executed([[result({"text/plain": COMMITTED_TABLE})]])
    fresh = copy.deepcopy(committed)
    fresh.cells[0].outputs[0].data["text/plain"] = COMMITTED_TABLE.replace("7.339e-05", "7.338e-05")
    assert notebooks.output_differences(committed, fresh) == []
    fresh.cells[0].outputs[0].data["text/plain"] = COMMITTED_TABLE.replace("0.173", "0.175")
    assert notebooks.output_differences(committed, fresh) == [
        "code cell 1, output 1: line 2: committed 'restored  7.339e-05 -0.004  0.173 -3.746e-04  1.011', "
        "now 'restored  7.339e-05 -0.004  0.175 -3.746e-04  1.011'"]


def test_execution_problems_catch_an_unexecuted_or_reordered_notebook():
    nb = executed([[stream("a\n")], [stream("b\n")]])
    nb.cells[1].execution_count = 5
    assert "execution counts [1, 5]" in notebooks.execution_problems(nb)[0]
    nb.cells[1].execution_count = None
    assert notebooks.execution_problems(nb)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_its_outputs_are_current(path, tmp_path):
    committed = nbformat.read(path, as_version=4)
    nb = copy.deepcopy(committed)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_SOURCE))
    start = time.perf_counter()
    notebooks.execute(nb, tmp_path)        # raises CellExecutionError, naming the cell, on the first error
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")

    check = nb.cells.pop()
    prefix = "".join(out.get("text", "") for out in check.outputs).strip()
    assert prefix == sys.prefix, f"the kernel ran in {prefix!r}, not in this interpreter's environment {sys.prefix!r}"
    assert not notebooks.execution_problems(nb), f"{path.name}: {notebooks.execution_problems(nb)}"
    differences = notebooks.output_differences(committed, nb)
    assert not differences, (f"{path.name}: the committed outputs are not current:\n  " + "\n  ".join(differences)
                             + f"\n{notebooks.REFRESH_HINT}")

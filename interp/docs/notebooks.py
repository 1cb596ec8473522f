"""Execute the notebooks in ``notebooks/`` and compare their outputs with the committed ones.

The notebooks are committed with their outputs, so that a code host shows them without running
them; ``make notebooks`` (``python -m interp.docs.notebooks [PATH ...]``) executes them again and writes
the outputs back, and ``tests/test_notebooks.py`` executes them the same way and checks that the
committed outputs are current (:func:`output_differences`).

The kernel is this interpreter (``sys.executable``): a kernelspec pointing at it is written to a
temporary directory and used by name, so a user-level ``python3`` kernelspec for another
interpreter cannot be picked by mistake. Each notebook runs in its own temporary working
directory, with one thread (the notebooks are sized for a 2-core CPU, a second thread costs more
than it gains on a shared machine, and one thread keeps the numbers the same run after run).

Printed text is compared word for word, and whole numbers (counts, shapes, positions) exactly,
but decimal numbers within :data:`RTOL` (:data:`ATOL` near 0): another CPU's vector width
changes the order of float32 sums, and with it the last printed digit (``7.339e-05`` here,
``7.338e-05`` on a CPU without AVX-512).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from ipykernel import kernelspec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL_NAME = "glitchlens-python"
CELL_TIMEOUT_S = 600      # per cell; each notebook takes under 2 minutes on 2 CPU cores
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "PYDEVD_DISABLE_FILE_VALIDATION": "1"}   # ipykernel's debugger warns about frozen modules
REFRESH_HINT = "run `make notebooks` to execute the notebooks again and commit their outputs"

# What legitimately differs between two runs of the same notebook, and what stands for it.
VARYING = [
    (re.compile(r"^.*\d+%\|.*\|.*$", re.MULTILINE), "<progress bar>"),                       # tqdm
    (re.compile(r"/[^\s'\"),]*/(?:models|interp|kernels)/[^\s'\"),:]*\.py"), "<source file>"),  # a warning's, any checkout
    (re.compile(re.escape(tempfile.gettempdir()) + r"/[^\s'\"),]*"), "<temporary path>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),  # plotly div ids
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<tag>"),          # a checkpoint's fresh file names per save
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x<address>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|s|sec|seconds|min)\b"), "<duration>"),
]
TEXT_MIMETYPES = ("text/plain",)     # compared as text; other mimetypes (PNG, HTML, plotly JSON) by presence
RTOL, ATOL = 1e-3, 1e-5    # decimals: a few float32 roundings apart (ATOL: values that are rounding noise around 0)
# A number standing on its own (not part of a name like L1H0 or blocks.1.attn): an optional sign,
# digits with or without a decimal point, an optional exponent.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?!\w)")
SPACES = re.compile(r"[ \t]+")      # a column's width follows its widest number: spacing is not compared


def execute(nb: nbformat.NotebookNode, workdir: Path) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in a fresh kernel on this interpreter, in ``workdir``, in place.
    Raises ``nbclient.exceptions.CellExecutionError``, naming the cell, on the first error."""
    with tempfile.TemporaryDirectory(prefix="glitchlens-kernel-") as prefix:
        kernelspec.install(kernel_name=KERNEL_NAME, prefix=prefix)
        specs = KernelSpecManager(kernel_dirs=[str(Path(prefix, "share", "jupyter", "kernels"))])
        manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
        client = NotebookClient(nb, km=manager, timeout=CELL_TIMEOUT_S, allow_errors=False, record_timing=False,
                                coalesce_streams=True, resources={"metadata": {"path": str(workdir)}})
        client.execute(env={**os.environ, **ONE_THREAD})
    return nb


def normalise(text: str) -> str:
    for pattern, stand_in in VARYING:
        text = pattern.sub(stand_in, text)
    return text


def _numbers_agree(committed: str, fresh: str) -> bool:
    if not any(c in number for number in (committed, fresh) for c in ".eE"):
        return committed.lstrip("+") == fresh.lstrip("+")
    a, b = float(committed), float(fresh)
    return abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def printed_agree(committed: str, fresh: str) -> bool:
    """Whether two printed texts say the same: the same words and whole numbers in the same places
    (spacing aside), and decimal numbers within :data:`RTOL` of each other (:data:`ATOL` near 0)."""
    words = [SPACES.sub(" ", NUMBER.sub("#", text)) for text in (committed, fresh)]
    numbers = [NUMBER.findall(text) for text in (committed, fresh)]
    return words[0] == words[1] and all(map(_numbers_agree, *numbers))


def comparable(output: nbformat.NotebookNode) -> tuple[tuple, tuple[str, ...]]:
    """What of one output must match between runs: its type, a stream's name, which mimetypes a
    result has (compared exactly), and its printed texts (compared by :func:`printed_agree`)."""
    if output.output_type == "stream":
        return ("stream", output.name), (normalise(output.text),)
    if output.output_type == "error":
        return ("error", output.ename), (normalise(output.evalue),)
    data = output.get("data", {})
    return (output.output_type, tuple(sorted(data))), tuple(normalise(data[m]) for m in TEXT_MIMETYPES if m in data)


def outputs_agree(committed: tuple, fresh: tuple) -> bool:
    """Whether two :func:`comparable` outputs are the same output."""
    (kind, texts), (fresh_kind, fresh_texts) = committed, fresh
    return kind == fresh_kind and len(texts) == len(fresh_texts) and all(map(printed_agree, texts, fresh_texts))


def output_differences(committed: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """One line per code cell whose committed outputs differ from a fresh run's (after
    :func:`normalise`), saying how; empty when the committed outputs are current."""
    old = [cell for cell in committed.cells if cell.cell_type == "code"]
    new = [cell for cell in fresh.cells if cell.cell_type == "code"]
    if [cell.source for cell in old] != [cell.source for cell in new]:
        return ["the code cells differ"]
    differences = []
    for n, (before, after) in enumerate(zip(old, new), 1):
        was, now = [comparable(o) for o in before.outputs], [comparable(o) for o in after.outputs]
        if len(was) != len(now):
            differences.append(f"code cell {n}: {len(was)} outputs committed, {len(now)} now")
            continue
        for k, (a, b) in enumerate(zip(was, now), 1):
            if not outputs_agree(a, b):
                differences.append(f"code cell {n}, output {k}: {_first_difference(a, b)}")
    return differences


def _first_difference(committed: tuple, fresh: tuple) -> str:
    """Where two :func:`comparable` outputs part: the first printed line that does not agree, or
    the whole outputs when their kinds differ."""
    (kind, texts), (fresh_kind, fresh_texts) = committed, fresh
    if kind == fresh_kind and len(texts) == len(fresh_texts):
        for text, fresh_text in zip(texts, fresh_texts):
            lines = itertools.zip_longest(text.splitlines(), fresh_text.splitlines(), fillvalue="")
            for number, (line, fresh_line) in enumerate(lines, 1):
                if not printed_agree(line, fresh_line):
                    return f"line {number}: committed {_shortened(line.strip())!r}, now {_shortened(fresh_line.strip())!r}"
    return f"committed {_shortened(repr(committed))}, now {_shortened(repr(fresh))}"


def _shortened(text: str, width: int = 300) -> str:
    return text if len(text) <= width else text[:width] + "..."


def execution_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Why ``nb`` is not a notebook executed top to bottom in one kernel: code cells not numbered
    1..n in order, or error outputs."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    problems = [] if counts == list(range(1, len(code) + 1)) else [f"execution counts {counts}, not 1..{len(code)}"]
    problems += [f"code cell {n}: {out.ename}: {out.evalue}" for n, cell in enumerate(code, 1)
                 for out in cell.outputs if out.output_type == "error"]
    return problems


def refresh(path: Path) -> float:
    """Execute the notebook at ``path`` and write it back with its outputs; the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="glitchlens-notebook-") as workdir:
        execute(nb, Path(workdir))
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m interp.docs.notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to refresh (default: all in notebooks/)")
    paths = parser.parse_args(argv).paths or sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    for path in paths:
        print(f"{path.name}: {refresh(path):.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

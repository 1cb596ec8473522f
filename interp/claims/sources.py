"""Readers of the committed files the claims are computed from, and the sweeps' run counts.

Every number of the claims table comes from a file under ``runs/`` or ``figures/`` of the
repository (``ROOT``): a run's ``result.json``, a sweep's ``runs.csv``, a figure's CSV, or a
measurement on the specimens cached under ``runs/claims/`` (:mod:`interp.claims.measure`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

from interp.outputs import read_json

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "runs"
FIGURES = ROOT / "figures"
CACHE = RUNS / "claims"

# The H200 kernel benchmarks, oldest first: (file, what differed); the last holds the kernels as they are.
H200_KERNEL_RUNS = (("runs/gpu/bench-kernels-h200.csv", "TRA's backward with atomics; 16384 tokens a batch"),
                    ("runs/gpu/bench-kernels-h200-2.csv", "TRA's backward without atomics; 32768 tokens a batch"),
                    ("runs/gpu/bench-kernels-h200-3.csv", "the same, at Hopper's own default tiles"),
                    ("runs/gpu/bench-kernels-h200-4.csv", "zero tiles skipped by default; each kernel on its "
                                                          "specimen's inputs stretched to T (trained sparsity)"))


def inputs_of(frame) -> list[str]:
    """The kinds of inputs a ``bench kernels`` CSV measured on, in its order (files before
    ``--inputs``: random)."""
    return list(dict.fromkeys(frame["inputs"])) if "inputs" in frame else ["random"]


def missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(f"{path.relative_to(ROOT)} is not in the repository: the claims table reads it; "
                             "restore it (git checkout) or recompute it (`glitchlens claims --measure`)")


@cache
def result(sweep: str, name: str) -> dict:
    """``runs/<sweep>/runs/<name>/result.json``."""
    path = RUNS / sweep / "runs" / name / "result.json"
    if not path.exists():
        raise missing(path)
    return read_json(path, "sweep result")


def has_result(sweep: str, name: str) -> bool:
    return (RUNS / sweep / "runs" / name / "result.json").exists()


def finished(sweep: str) -> list[str]:
    """The runs of ``runs/<sweep>`` that have a ``result.json``, sorted by name."""
    return sorted(p.parent.name for p in (RUNS / sweep / "runs").glob("*/result.json"))


@cache
def csv(path: str) -> pd.DataFrame:
    """A committed CSV, ``path`` relative to the repository root."""
    file = ROOT / path
    if not file.exists():
        raise missing(file)
    return pd.read_csv(file)


def figure(stem: str) -> pd.DataFrame:
    """``figures/<stem>.csv``, the numbers behind a figure."""
    return csv(f"figures/{stem}.csv")


def clear() -> None:
    """Forget what was read, so that files written since are read again."""
    result.cache_clear()
    csv.cache_clear()


def planned_runs() -> dict[str, list[str]]:
    """Every sweep under ``runs/`` the docs quote, with the names of all its runs, finished or not."""
    from interp.studies.registry import STUDIES
    from interp.studies.reproduce import TABLE1_MODELS, run_name

    table1 = [run_name(model, seed) for seed in range(3) for model in TABLE1_MODELS]
    return {"table1-cpu": table1, "table1-10000": table1,
            **{study: list(STUDIES[study]()) for study in STUDIES}}


def sweep_counts() -> pd.DataFrame:
    """Per sweep: ``runs`` planned, ``finished`` (a ``result.json`` committed), ``unfinished``, and
    over the finished runs evaluated on held-out FFL(0.8) sequences (a flip-flop run's
    ``held_out``; the automaton's and CoPE's tasks have none): how many (``with_held_out``), the
    lowest and highest full-sequence accuracy there (``held_out_min``, ``held_out_max``, NaN
    without any) and how many learned (``learned``: at least
    :data:`interp.studies.reproduce.LEARNED`)."""
    from interp.studies.reproduce import LEARNED

    rows = []
    for sweep, names in planned_runs().items():
        done = [name for name in names if has_result(sweep, name)]
        held_out = [result(sweep, name)["held_out"]["sequence_accuracy"] for name in done
                    if "held_out" in result(sweep, name)]
        rows.append({"sweep": sweep, "runs": len(names), "finished": len(done), "unfinished": len(names) - len(done),
                     "with_held_out": len(held_out), "held_out_min": min(held_out, default=float("nan")),
                     "held_out_max": max(held_out, default=float("nan")),
                     "learned": sum(a >= LEARNED for a in held_out)})
    return pd.DataFrame(rows)

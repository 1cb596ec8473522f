"""Building and listing the pretrained checkpoints of ``models.pretrained``.

``build(name)`` runs the entry's recorded ``glitchlens train`` command in a temporary
directory, evaluates the result, and writes the entry without its optimiser state (so each
stays well under 2 MB), with the command, seed and accuracies in its metadata.

Accuracy of a flip-flop entry: the first ``EVAL_SEQUENCES`` sequences of each canonical
split (the whole ``iid`` split; a prefix of ``sparse`` and ``dense``, since the full sparse
split would dominate the build time); of a GPU entry (``Recipe.gpu``), the full splits, on the GPU. Of the automaton entry: its state predictions on
``EVAL_SEQUENCES`` fresh sequences of length 512 from ``interp.evaluate.AUTOMATON_EVAL_SEED``.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any

import torch

import models
from models.pretrained import PRETRAINED_DIR, RECIPES, recipe

EVAL_SEQUENCES = 1000


def recipe_args(name: str, steps: int | None = None) -> list[str]:
    """The entry's ``glitchlens train`` arguments (without ``--out``), optionally with fewer steps."""
    args = list(recipe(name).train_args)
    if steps is not None:
        args[args.index("--steps") + 1] = str(steps)
    return args


def automaton_accuracy(model: torch.nn.Module, n: int = EVAL_SEQUENCES) -> dict[str, Any]:
    from interp.evaluate import evaluate_automaton

    return {"automaton": evaluate_automaton(model, n)}


def flipflop_accuracy(model: torch.nn.Module, n: int = EVAL_SEQUENCES) -> dict[str, Any]:
    from interp.evaluate import evaluate_splits

    return {split: {"sequences": r.sequences, "read_accuracy": 1 - r.error_rate,
                    "sequence_accuracy": r.sequence_accuracy}
            for split, r in evaluate_splits(model, n=n).items()}


def check_run_matches(run: Path, args: list[str]) -> None:
    """Refuse a run whose model or (non-logging) training configuration differs from what
    ``glitchlens train ARGS`` would train: training is deterministic, so a run that passes
    is the checkpoint the command produces, bit for bit."""
    from interp.cli import build_parser, train_configs
    from interp.train import saved_configs

    model_cfg, train_cfg = train_configs(build_parser().parse_args(["train", *args, "--out", str(run)]))
    saved = models.read_config(run)
    if saved["training"] is None or saved["training"]["step"] != train_cfg.steps:
        raise ValueError(f"{run}: not a finished training run of {train_cfg.steps} steps")
    if saved_configs(saved) != (model_cfg, train_cfg.semantic_dict()):
        raise ValueError(f"{run}: its configuration differs from `glitchlens train {shlex.join(args)}`")


def build(name: str, steps: int | None = None, root: str | Path = PRETRAINED_DIR,
          eval_sequences: int | None = EVAL_SEQUENCES, from_run: str | Path | None = None) -> Path:
    """Train entry ``name`` with its recorded command, evaluate it and write ``root/name``.

    ``steps`` shortens the run (tests use it to prove the command still works); an entry
    built that way records the shortened command, never the recipe's. ``from_run`` adopts
    a finished run of exactly the recipe's configuration instead of training again.
    """
    args = recipe_args(name, steps)
    # Every entry was trained with one thread; another thread count sums in another order and
    # gives another checkpoint (and a one-head TRA may then not learn at all).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(name, args, Path(root), eval_sequences, from_run)
    finally:
        torch.set_num_threads(threads)


def _build(name: str, args: list[str], root: Path, eval_sequences: int | None, from_run: str | Path | None) -> Path:
    from interp.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / name
        if from_run is not None:
            run = Path(from_run)
            check_run_matches(run, args)
        else:
            status = main(["train", *args, "--out", str(run)])
            if status != 0:
                raise RuntimeError(f"`glitchlens train {shlex.join(args)}` exited with status {status}")
        model = models.load(run, device="cuda" if RECIPES[name].gpu else "cpu")
        training = models.read_config(run)["training"]
    if RECIPES[name].gpu:
        eval_sequences = None  # the full splits: on a GPU they take seconds
    automaton = training["config"]["task"] == "automaton"
    accuracy = automaton_accuracy(model, eval_sequences) if automaton else flipflop_accuracy(model, eval_sequences)
    metadata = {
        "name": name,
        "description": RECIPES[name].description,
        "command": "glitchlens train " + shlex.join(args) + " --out DIR",
        "seed": training["config"]["seed"],
        "accuracy": accuracy,
    }
    return models.save(Path(root) / name, model, training=training, metadata=metadata)


def listing(root: str | Path = PRETRAINED_DIR, names: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per recipe (or per entry in ``names``): its name, where it is, whether it is
    built, size, and accuracies."""
    rows = []
    for name in names or RECIPES:
        entry = Path(root) / name
        row: dict[str, Any] = {"name": name, "description": recipe(name).description, "path": str(entry),
                               "built": entry.exists()}
        if entry.exists():
            config = models.read_config(entry)
            row.update(config["metadata"])
            row["model"] = config["model"]["model"]
            row["size_kb"] = sum(f.stat().st_size for f in entry.iterdir()) / 1024
        rows.append(row)
    return rows


def specimens_table1(root: str | Path = PRETRAINED_DIR) -> str:
    """The built GPU specimens' full-split sequence accuracies beside the TRA paper's Table 1
    (markdown, as ``glitchlens reproduce table1`` writes it; one seed each)."""
    from interp.reproduce import markdown_table, summarise_runs

    results = [{"model": row["model"], "seed": row["seed"],
                "splits": {split: {"sequence_accuracy": r["sequence_accuracy"], "error_rate": 1 - r["read_accuracy"]}
                           for split, r in row["accuracy"].items()}}
               for row in listing(root) if row["built"] and RECIPES[row["name"]].gpu]
    if not results:
        return "no GPU specimen is built yet: make gpu-specimen NAME=tra (docs/cpu-path-and-kernels.md \"On a GPU\")\n"
    return markdown_table(summarise_runs(results))

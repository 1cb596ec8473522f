"""Building and listing the pretrained entries (``interp.studies.specimens.ENTRIES``) into the
checkpoint directories of ``models.pretrained``.

``build(name)`` trains the entry's specimen in a temporary directory, evaluates the result, and
writes the entry without its optimiser state (so each stays well under 2 MB), with its
description, the command that trains it, its seed and its accuracies in its metadata.

Accuracy of a flip-flop entry: the first ``EVAL_SEQUENCES`` sequences of each canonical
split (the whole ``iid`` split; a prefix of ``sparse`` and ``dense``, since the full sparse
split would dominate the build time); of a GPU entry (``Entry.gpu``), the full splits, on the
GPU. Of the automaton entry: its state predictions on ``EVAL_SEQUENCES`` fresh sequences of
length 512 from ``interp.evaluate.AUTOMATON_EVAL_SEED``.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import models
from interp.studies.specimens import ENTRIES, entry, specimen
from interp.training.recipes import get_recipe, model_overrides
from models import PRESETS, ModelConfig
from models.pretrained import PRETRAINED_DIR

if TYPE_CHECKING:  # building imports torch; listing does not, so that `glitchlens pretrained` answers at once
    import torch

    from interp.training.setup import TrainConfig

EVAL_SEQUENCES = 1000
SHAPE_FIELDS = ("n_layers", "n_heads", "d_model")
LENGTH_FIELDS = ("steps", "seq_len", "batch_size")


def automaton_accuracy(model: torch.nn.Module, n: int = EVAL_SEQUENCES, progress: bool = False) -> dict[str, Any]:
    from interp.evaluate import evaluate_automaton

    return {"automaton": evaluate_automaton(model, n, progress=progress)}


def flipflop_accuracy(model: torch.nn.Module, n: int = EVAL_SEQUENCES, progress: bool = False) -> dict[str, Any]:
    from interp.evaluate import evaluate_splits

    return {split: {"sequences": r.sequences, "read_accuracy": 1 - r.error_rate,
                    "sequence_accuracy": r.sequence_accuracy}
            for split, r in evaluate_splits(model, n=n, progress=progress).items()}


def check_run_matches(run: Path, model_cfg: ModelConfig, train_cfg: TrainConfig) -> None:
    """Refuse a run whose model or (non-logging) training configuration differs from these:
    training is deterministic, so a run that passes is the checkpoint they train, bit for bit."""
    from interp.training.setup import saved_configs

    saved = models.read_config(run)
    if saved["training"] is None or saved["training"]["step"] != train_cfg.steps:
        raise ValueError(f"{run}: not a finished training run of {train_cfg.steps} steps")
    saved_model, saved_training = saved_configs(saved)
    differing = [name for name, value in model_cfg.to_dict().items() if saved_model.to_dict()[name] != value]
    differing += [name for name, value in train_cfg.semantic_dict().items() if saved_training.get(name) != value]
    if differing:
        raise ValueError(f"{run}: its configuration differs from the entry's ({', '.join(differing)})")


def build(name: str, steps: int | None = None, root: str | Path = PRETRAINED_DIR,
          eval_sequences: int | None = EVAL_SEQUENCES, from_run: str | Path | None = None,
          progress: bool = False, overwrite: bool = False) -> Path:
    """Train entry ``name``'s specimen, evaluate it and write ``root/name``.

    ``steps`` shortens the run (tests use it to prove the recipe still trains); an entry
    built that way records the shortened command, never the full one. ``from_run`` adopts
    a finished run of exactly the specimen's configuration instead of training again.
    ``progress``: the training's and the evaluation's bars on stderr (``glitchlens train``'s
    and ``glitchlens eval``'s). An entry already in ``root`` (by default the installed
    package's shipped one) is replaced only with ``overwrite``; checked before any training.
    """
    import torch

    from interp.outputs import writable_dir

    target = writable_dir(root, "--root") / name
    if os.path.islink(target) or (os.path.lexists(target) and not overwrite):
        what = "a symbolic link" if os.path.islink(target) else "already built"
        shipped = " (the entry shipped in the installed package)" if Path(root) == PRETRAINED_DIR else ""
        raise ValueError(f"{target} is {what}{shipped}; pass --overwrite to replace it, or --root DIR to build "
                         "elsewhere")

    # Every entry was trained with one thread (interp.studies.specimens).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(name, steps, Path(root), eval_sequences, from_run, progress)
    finally:
        torch.set_num_threads(threads)


def _build(name: str, steps: int | None, root: Path, eval_sequences: int | None,
           from_run: str | Path | None, progress: bool) -> Path:
    from interp.training.loop import train

    spec = specimen(name, steps)
    model_cfg, train_cfg = spec.configs()
    gpu = entry(name).gpu
    device = "cuda" if gpu else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / name
        if from_run is not None:
            run = Path(from_run)
            check_run_matches(run, model_cfg, train_cfg)
        else:
            train(model_cfg, train_cfg, run, progress=progress, device=device)
        model = models.load(run, device=device)
        training = models.read_config(run)["training"]
    if gpu:
        eval_sequences = None  # the full splits: on a GPU they take seconds
    automaton = train_cfg.task == "automaton"
    accuracy = (automaton_accuracy if automaton else flipflop_accuracy)(model, eval_sequences, progress)
    metadata = {
        "name": name,
        "description": ENTRIES[name].description,
        "command": spec.command(),
        "seed": training["config"]["seed"],
        "accuracy": accuracy,
    }
    return models.save(Path(root) / name, model, training=training, metadata=metadata)


def planned_shape(name: str) -> dict[str, Any]:
    """Entry ``name``'s layers, heads, d_model and training length as its specimen trains them,
    without building its configs (which imports torch): the listing's columns for an entry not
    built yet. For the built ones they equal the recorded values (tests/test_pretrained.py)."""
    spec = ENTRIES[name].specimen
    model = {**PRESETS[spec.preset], **model_overrides(get_recipe(spec.recipe), spec.model), **spec.model_fields}
    training = {**get_recipe(spec.recipe).training, **spec.training}
    return {**{f: model[f] for f in SHAPE_FIELDS}, **{f: training[f] for f in LENGTH_FIELDS}}


def listing(root: str | Path = PRETRAINED_DIR, names: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per entry (or per entry in ``names``): its name, description, where it is,
    whether it is built, its layers, heads, d_model and training length; of a built one also
    its size and recorded metadata (command, seed, accuracies). Reads each ``config.json`` as
    recorded, without torch and without loading the weights (``models.load_pretrained`` checks
    them), so that the listing answers at once."""
    unknown = [name for name in names or [] if name not in ENTRIES]
    if unknown:  # every unknown name at once
        raise ValueError(f"unknown pretrained model {', '.join(map(repr, unknown))}; available: {', '.join(ENTRIES)}")
    rows = []
    for name in names or ENTRIES:
        directory = Path(root) / name
        defined = ENTRIES[name]
        row: dict[str, Any] = {"name": name, "description": defined.description, "path": str(directory),
                               "built": directory.exists(), "model": defined.specimen.model, **planned_shape(name)}
        if row["built"]:
            config = _recorded_config(directory)
            # recorded metadata adds fields; it never replaces one the listing computes (path, built, size, ...)
            row.update({k: v for k, v in config["metadata"].items() if k not in row and k not in ("size_kb", "beta")})
            row.update({"model": config["model"]["model"], **{f: config["model"][f] for f in SHAPE_FIELDS},
                        **{f: config["training"]["config"][f] for f in LENGTH_FIELDS}})
            row["size_kb"] = sum(f.lstat().st_size for f in directory.iterdir()) / 1024
            if row["model"] in THRESHOLD_MODELS:
                row["beta"] = recorded_betas(directory, config)
        rows.append(row)
    return rows


# Mechanisms with a threshold scale beta per layer (trela and TDA: models.attention.tda).
THRESHOLD_MODELS = ("tda", "trela")


def recorded_betas(directory: Path, config: dict[str, Any]) -> list[float]:
    """The threshold scale beta of each layer of a trela or TDA entry, read from its tensor file
    with numpy alone (the listing does not import torch)."""
    from safetensors import safe_open

    from interp.outputs import input_file

    path = directory / str((config.get("files") or {}).get("model", "model.safetensors"))
    try:
        with safe_open(input_file(path, "pretrained entry's tensor file"), framework="numpy") as f:
            layers = range(int(config["model"]["n_layers"]))
            return [float(f.get_tensor(f"blocks.{layer}.attn.beta")) for layer in layers]
    except Exception as err:   # safetensors' own error class is no ValueError
        if isinstance(err, ValueError) and str(path) in str(err):
            raise
        raise ValueError(f"{path}: not the tensor file of a threshold entry ({type(err).__name__}: {err}); rebuild "
                         f"it with `glitchlens pretrained build {directory.name}`") from None


def _recorded_config(directory: Path) -> dict[str, Any]:
    from interp.outputs import read_json

    path = directory / "config.json"
    try:
        config = read_json(path, "pretrained entry's config")
        metadata, model, training = config["metadata"], config["model"], config["training"]["config"]
        if not all(isinstance(section, dict) for section in (metadata, model, training)):
            raise TypeError("its metadata, model and training config must be objects")
        accuracy = metadata.get("accuracy")
        if not isinstance(accuracy, dict) or not all(
                isinstance(r, dict) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())
                for r in accuracy.values()):
            raise TypeError("its metadata's accuracy must map each split to finite numbers")
        missing = [f for f in ("command", "seed", "accuracy") if f not in metadata]
        missing += [f for f in ("model", *SHAPE_FIELDS) if f not in model]
        missing += [f for f in LENGTH_FIELDS if f not in training]
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a pretrained entry's config ({type(err).__name__}: {err}); "
                         f"rebuild it with `glitchlens pretrained build {directory.name}`") from None
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} recorded; rebuild it with "
                         f"`glitchlens pretrained build {directory.name}`")
    return config


def accuracy_words(split: dict[str, Any]) -> str:
    """``99.98% / 99.4%``: a split's read (the automaton's position) and full-sequence accuracy."""
    reads = split.get("read_accuracy", split.get("position_accuracy"))
    return f"{100 * reads:.2f}% / {100 * split['sequence_accuracy']:.1f}%"


# The canonical splits in the order the docs read them; other tasks' splits follow by name.
SPLIT_ORDER = ("iid", "dense", "sparse")


def specimens_markdown(root: str | Path = PRETRAINED_DIR) -> str:
    """The built entries as docs/explanation/specimens.md lists them (markdown, generated by
    ``glitchlens claims --write-docs``): name, what it is, its size on disk and the accuracies its
    build recorded (read / full-sequence, per split), so the page cannot drift from the files."""
    lines = ["| name | what | size | accuracy at build (read / full-sequence) |", "|---|---|---|---|"]
    for row in listing(root):
        if row["built"]:
            splits = sorted(row["accuracy"], key=lambda split: (SPLIT_ORDER.index(split) if split in SPLIT_ORDER
                                                                else len(SPLIT_ORDER), split))
            accuracy = "; ".join(f"{split} {accuracy_words(row['accuracy'][split])}" for split in splits)
            lines.append(f"| `{row['name']}` | {row['description']} | {row['size_kb']:.0f} KB | {accuracy} |")
    return "\n".join(lines) + "\n"


def specimens_table1(root: str | Path = PRETRAINED_DIR) -> str:
    """The built GPU specimens' full-split sequence accuracies beside the TRA paper's Table 1
    (markdown, as ``glitchlens reproduce table1`` writes it; one seed each)."""
    from interp.studies.reproduce import markdown_table, summarise_runs

    results = [{"model": row["model"], "seed": row["seed"],
                "splits": {split: {"sequence_accuracy": r["sequence_accuracy"], "error_rate": 1 - r["read_accuracy"]}
                           for split, r in row["accuracy"].items()}}
               for row in listing(root) if row["built"] and ENTRIES[row["name"]].gpu]
    if not results:
        return "no GPU specimen is built yet: make gpu-specimen NAME=tra (docs/how-to/run-on-a-gpu.md \"On a GPU\")\n"
    return markdown_table(summarise_runs(results))

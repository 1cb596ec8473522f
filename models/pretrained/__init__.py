"""Small pretrained checkpoints shipped with GlitchLens, each loadable in well under a second.

Every entry is an ordinary checkpoint directory next to this file (``config.json`` and the
safetensors file it names, no optimiser state) whose ``metadata`` records the exact
``glitchlens train`` command that produced it, its seed, and its accuracy on the canonical
splits. ``RECIPES`` below is the single source of those commands: ``glitchlens pretrained
build NAME`` runs the recipe and writes the entry (see ``interp.pretrained``).

The names and the directory load without torch (``glitchlens --help`` lists them);
``models.checkpoint`` is imported by the functions that read an entry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PRETRAINED_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Recipe:
    description: str
    train_args: tuple[str, ...]  # ``glitchlens train`` arguments, without --out
    # Trained at the papers' scale on a GPU (``make gpu-specimen``) and evaluated there on the
    # full splits; a checkout may not have built it yet.
    gpu: bool = False

    def command(self, out: str | os.PathLike) -> list[str]:
        return ["train", *self.train_args, "--out", str(out)]


def _flipflop(model: str) -> tuple[str, ...]:
    """The Table 1 ``cpu`` scale's run (``glitchlens reproduce table1``), seed 0: ``tiny`` with
    4 heads and the TRA authors' block, init and optimiser (recipe ``cpu-learning-authors``),
    T = 512, batch 16, lr 1e-3, 1000 steps. ``tests/test_pretrained.py`` checks that it is the
    configuration of ``interp.reproduce.SCALES["cpu"]``."""
    return ("--model", model, "--recipe", "cpu-learning-authors", "--preset", "tiny", "--seq-len", "512",
            "--batch-size", "16", "--steps", "1000", "--lr", "1e-3", "--seed", "0", "--quiet")


# The App. A pair was trained on the PyTorch reference, before kernels.rows existed. The two
# compute the same up to float rounding, but whether a one-head model learns hangs on its first
# steps, so its recipes name the reference to rebuild the entries bit for bit (at one torch
# thread, docs/guide.md "Determinism").
ON_THE_REFERENCE = ("--attention-impl", "reference")


def _app_a_pair(model: str) -> tuple[str, ...]:
    """The App. A pair: 2 layers x 1 head, d_model 64, trained at T = 128. One-head TRA learns or
    not depending on its initialisation (docs/learning-notes.md "Earlier measurements, before this
    recipe": seed 1 learned; seeds 0, 2, 3 did not, nor did seed 0 at d_model 128), so both members
    use the seed on which TRA learned."""
    return ("--model", model, "--preset", "tiny", "--seq-len", "128", "--batch-size", "16", "--steps", "1000",
            "--lr", "1e-3", "--seed", "1", *ON_THE_REFERENCE, "--quiet")


def _paper_scale(model: str) -> tuple[str, ...]:
    """The TRA paper's set-up (Table 1 ``paper`` scale, seed 0): ``mini``, T = 512, batch 64, lr 1e-4,
    25k steps, on the default path (the Triton kernels on CUDA)."""
    return ("--model", model, "--preset", "mini", "--seq-len", "512", "--batch-size", "64", "--steps", "25000",
            "--lr", "1e-4", "--seed", "0", "--quiet")


# The specimens of the Table 1 cpu scale, seed 0 of its sweep.
TABLE1_SPECIMENS = {"tda": "TDA", "trela": "trela (single-view threshold rectified attention)", "cope": "CoPE",
                    "diff": "Differential attention with RoPE", "rope": "softmax attention with RoPE"}

# The specimens at the papers' scale, in the order to train them (the device time may run out).
GPU_SPECIMENS = {"tra": "TRA", "fot": "FoT", "rope": "softmax attention with RoPE", "tda": "TDA", "cope": "CoPE"}

RECIPES: dict[str, Recipe] = {
    "tra-mech": Recipe("TRA, 2 layers x 1 head, d_model 64, trained at T = 128 (the TRA paper's App. A pair)",
                       _app_a_pair("tra")),
    "fot-mech": Recipe("FoT, 2 layers x 1 head, d_model 64, trained at T = 128 (the TRA paper's App. A pair)",
                       _app_a_pair("fot")),
    **{f"{model}-mech": Recipe(f"{what}, 2 layers x 4 heads, d_model 64, trained at T = 512 (Table 1 cpu scale, "
                               "seed 0)", _flipflop(model))
       for model, what in TABLE1_SPECIMENS.items()},
    "automaton-1l": Recipe("softmax attention with RoPE, 1 layer x 1 head, d_model 128, trained at T = 128 on the "
                           "flip-flop automaton simulation task (flip-flop paper Def. 1, p(bottom) = 0.5)",
                           ("--model", "rope", "--preset", "mech", "--n-layers", "1", "--task", "automaton",
                            "--p-bottom", "0.5", "--seq-len", "128", "--batch-size", "16", "--steps", "2000",
                            "--lr", "1e-3", "--seed", "0", "--quiet")),
    **{f"{model}-mini": Recipe(f"{what}, 4 layers x 4 heads, d_model 256, T = 512, batch 64, 25k steps (the TRA "
                               "paper's set-up, trained on a GPU)", _paper_scale(model), gpu=True)
       for model, what in GPU_SPECIMENS.items()},
}


def recipe(name: str) -> Recipe:
    """The recipe of entry ``name``; an unknown name is a ``CheckpointError`` naming the known ones."""
    from models.checkpoint import CheckpointError

    if name not in RECIPES:
        raise CheckpointError(f"unknown pretrained model {name!r}; available: {', '.join(RECIPES)}")
    return RECIPES[name]


def build_command(name: str) -> str:
    """The command that builds entry ``name``: the GPU specimens have their own
    (docs/cpu-path-and-kernels.md "On a GPU")."""
    return f"make gpu-specimen NAME={name}" if recipe(name).gpu else f"glitchlens pretrained build {name}"


def path(name: str) -> Path:
    """The checkpoint directory of a pretrained entry (which may not be built yet)."""
    recipe(name)
    return PRETRAINED_DIR / name


def info(name: str) -> dict[str, Any]:
    """The entry's metadata: ``command``, ``seed``, ``accuracy`` per split, ``description``."""
    from models.checkpoint import CheckpointError, read_config

    entry = path(name)
    if not entry.exists():
        raise CheckpointError(f"pretrained model {name!r} is not built in {PRETRAINED_DIR}; "
                              f"build it with `{build_command(name)}`")
    return read_config(entry)["metadata"]


def load_pretrained(name: str, device: str | torch.device = "cpu") -> torch.nn.Module:
    """A pretrained model by name (``tra-mech``, ``fot-mech``, ...), in eval mode, ready to hook."""
    from models.checkpoint import load

    info(name)
    return load(path(name), device=device)

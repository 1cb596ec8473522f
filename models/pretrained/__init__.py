"""Small pretrained checkpoints shipped with GlitchLens, each loadable in well under a second.

Every entry is an ordinary checkpoint directory next to this file (``config.json`` and the
safetensors file it names, no optimiser state) whose ``metadata`` records the exact
``glitchlens train`` command that produced it, its seed, and its accuracy on the canonical
splits. ``ENTRIES`` below names them and says what each is; how each is trained is data in
``interp.specimens``, and ``glitchlens pretrained build NAME`` trains and writes the entry
(``interp.pretrained``).

The names and the directory load without torch (``glitchlens --help`` lists them);
``models.checkpoint`` is imported by the functions that read an entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PRETRAINED_DIR = Path(__file__).parent


@dataclass(frozen=True)
class Entry:
    description: str
    # Trained at the papers' scale on a GPU (``make gpu-specimen``) and evaluated there on the
    # full splits; a checkout may not have built it yet.
    gpu: bool = False


# The specimens of the Table 1 cpu scale, seed 0 of its sweep.
TABLE1_SPECIMENS = {"tda": "TDA", "trela": "trela (single-view threshold rectified attention)", "cope": "CoPE",
                    "diff": "Differential attention with RoPE", "rope": "softmax attention with RoPE"}

# The specimens at the papers' scale, in the order to train them (the device time may run out).
GPU_SPECIMENS = {"tra": "TRA", "fot": "FoT", "rope": "softmax attention with RoPE", "tda": "TDA", "cope": "CoPE"}

ENTRIES: dict[str, Entry] = {
    "tra-mech": Entry("TRA, 2 layers x 1 head, d_model 64, trained at T = 128 (the TRA paper's App. A pair)"),
    "fot-mech": Entry("FoT, 2 layers x 1 head, d_model 64, trained at T = 128 (the TRA paper's App. A pair)"),
    **{f"{model}-app-a": Entry(f"{what}, 2 layers x 1 head, d_model 64, trained at T = 512 (the App. A pair that the "
                               "rule of `glitchlens reproduce app-a` chose: seed 0)")
       for model, what in (("tra", "TRA"), ("fot", "FoT"))},
    **{f"{model}-mech": Entry(f"{what}, 2 layers x 4 heads, d_model 64, trained at T = 512 (Table 1 cpu scale, "
                              "seed 0)")
       for model, what in TABLE1_SPECIMENS.items()},
    "tda-beta1": Entry("TDA, 2 layers x 4 heads, d_model 64, trained at T = 512 with its threshold at the paper's "
                       "beta = 1 (held at 0, ramped to 1 and held there; the run the rule of `glitchlens reproduce "
                       "tda-threshold` chose)"),
    "automaton-1l": Entry("softmax attention with RoPE, 1 layer x 1 head, d_model 128, trained at T = 128 on the "
                          "flip-flop automaton simulation task (flip-flop paper Def. 1, p(bottom) = 0.5)"),
    "automaton-1l-sharp": Entry("automaton-1l's set-up trained with the entropy attention-sharpening regulariser at "
                                "0.01 (flip-flop paper Sec. 5.2, Fig. 16b)"),
    **{f"{model}-mini": Entry(f"{what}, 4 layers x 4 heads, d_model 256, T = 512, batch 64, 25k steps (the TRA "
                              "paper's set-up, trained on a GPU)", gpu=True)
       for model, what in GPU_SPECIMENS.items()},
}


def entry(name: str) -> Entry:
    """Entry ``name``; an unknown name is a ``CheckpointError`` naming the known ones."""
    from models.checkpoint import CheckpointError

    if name not in ENTRIES:
        raise CheckpointError(f"unknown pretrained model {name!r}; available: {', '.join(ENTRIES)}")
    return ENTRIES[name]


def build_command(name: str) -> str:
    """The command that builds entry ``name``: the GPU specimens have their own
    (docs/cpu-path-and-kernels.md "On a GPU")."""
    return f"make gpu-specimen NAME={name}" if entry(name).gpu else f"glitchlens pretrained build {name}"


def path(name: str) -> Path:
    """The checkpoint directory of a pretrained entry (which may not be built yet)."""
    entry(name)
    return PRETRAINED_DIR / name


def info(name: str) -> dict[str, Any]:
    """The entry's metadata: ``command``, ``seed``, ``accuracy`` per split, ``description``."""
    from models.checkpoint import CheckpointError, read_config

    directory = path(name)
    if not directory.exists():
        raise CheckpointError(f"pretrained model {name!r} is not built in {PRETRAINED_DIR}; "
                              f"build it with `{build_command(name)}`")
    return read_config(directory)["metadata"]


def load_pretrained(name: str, device: str | torch.device = "cpu") -> torch.nn.Module:
    """A pretrained model by name (``tra-mech``, ``fot-mech``, ...), in eval mode, ready to hook;
    ``model.cfg.model_name`` is that name."""
    from models.checkpoint import load

    info(name)
    model = load(path(name), device=device)
    model.cfg.model_name = name
    return model

"""The scales of ``glitchlens reproduce table1`` (:mod:`interp.studies.reproduce` describes each):
the size preset, recipe and training budget that every model of a sweep is trained with.

Apart from the sweep, so that :mod:`interp.studies.specimens`, which names the pretrained entries
in the commands' help, reads them without importing the machinery that runs a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scale:
    preset: str
    steps: int
    lr: float
    batch_size: int
    recipe: str                 # block, init, dropout and optimiser (interp.training.recipes)
    eval_n: int | None = None   # at most this many sequences of each split and held out (None: whole splits)
    eval_every: int = 100       # steps between the quick iid checks that time learning
    seq_len: int = 512

    def training(self, seed: int) -> dict[str, Any]:
        """The TrainConfig fields of this scale's run of ``seed``, the quick checks aside."""
        return {"seq_len": self.seq_len, "batch_size": self.batch_size, "steps": self.steps, "lr": self.lr,
                "seed": seed}


SCALES = {
    "paper": Scale(preset="mini", steps=25_000, lr=1e-4, batch_size=64, recipe="authors-notebook"),
    "cpu": Scale(preset="tiny", steps=1000, lr=1e-3, batch_size=16, eval_n=10_000, recipe="cpu-learning-authors",
                 eval_every=200),
    "learning": Scale(preset="tiny", steps=1000, lr=1e-3, batch_size=16, eval_n=1000, recipe="cpu-learning",
                      eval_every=0, seq_len=128),
}

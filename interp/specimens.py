"""How each pretrained entry (``models.pretrained.ENTRIES``) is trained: ``glitchlens train``
options as data.

A :class:`Specimen` names a model, a size preset, a training recipe (``interp.recipes``) and the
fields that differ from them. :meth:`Specimen.configs` builds its ``(ModelConfig, TrainConfig)``
as ``glitchlens train`` does (``interp.recipes.run_configs``); :meth:`Specimen.command` spells
them as the ``glitchlens train`` command that trains the same, the one each entry's metadata
records and ``glitchlens pretrained`` shows (``tests/test_pretrained.py`` parses it back).

Every entry is trained with one torch thread (``interp.pretrained.build``): another thread count
sums in another order and gives another checkpoint, and a one-head TRA may then not learn at all.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from interp.recipes import run_configs
from interp.reproduce import SCALES
from models.pretrained import GPU_SPECIMENS, TABLE1_SPECIMENS, entry


@dataclass(frozen=True)
class Specimen:
    model: str
    preset: str
    training: dict[str, Any]  # TrainConfig fields beyond the recipe's, in the order the command names them
    recipe: str  # named in the command whatever the default recipe, so that the command stays true
    model_fields: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields beyond the preset's and recipe's
    # How the attention is computed: the same model up to float rounding, so the command names it last.
    attention_impl: str = "auto"

    def configs(self):
        """The ``(ModelConfig, TrainConfig)`` this specimen is trained with."""
        return run_configs(self.model, self.preset, self.recipe,
                           {**self.model_fields, "attention_impl": self.attention_impl}, self.training)

    def train_args(self) -> list[str]:
        """The ``glitchlens train`` arguments, without ``--out``, that train exactly :meth:`configs`."""
        args = ["--model", self.model, "--recipe", self.recipe, "--preset", self.preset]
        impl = {} if self.attention_impl == "auto" else {"attention_impl": self.attention_impl}
        for name, value in {**self.model_fields, **self.training, **impl}.items():
            args += _option(name, value)
        return [*args, "--quiet"]

    def command(self) -> str:
        return "glitchlens train " + shlex.join(self.train_args()) + " --out DIR"


def _option(name: str, value: Any) -> list[str]:
    """Field ``name`` set to ``value``, as ``glitchlens train`` spells it."""
    flag = "--" + name.replace("_", "-")
    if name == "attention_options":
        return [word for key, option in value.items() for word in ("--attn-opt", f"{key}={json.dumps(option)}")]
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag.removeprefix("--")]
    if value is None:
        return [flag, "none"]
    return [flag, _number(value) if isinstance(value, float) else str(value)]


def _number(value: float) -> str:
    """The shorter of ``0.001`` and ``1e-3``, the plain one on a tie; either reads back exactly."""
    plain = repr(value)
    mantissa, exponent = f"{value:e}".split("e")
    scientific = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return scientific if len(scientific) < len(plain) and float(scientific) == value else plain


def app_a_pair(model: str) -> Specimen:
    """The TRA paper's App. A pair: 2 layers x 1 head, d_model 64, trained at T = 128.

    One-head TRA learns or not depending on its initialisation (docs/learning-notes.md "Earlier
    measurements, before this recipe": seed 1 learned; seeds 0, 2, 3 did not, nor did seed 0 at
    d_model 128), so both members use the seed on which TRA learned. The pair was trained on the
    PyTorch reference, before ``kernels.rows`` existed; the two compute the same up to float
    rounding, but whether a one-head model learns hangs on its first steps, so the pair names the
    reference to rebuild the entries bit for bit (docs/guide.md "Determinism").
    """
    return Specimen(model, "tiny", {"seq_len": 128, "batch_size": 16, "steps": 1000, "lr": 1e-3, "seed": 1},
                    "llama", attention_impl="reference")


def app_a_sweep_run(model: str, seq_len: int, seed: int) -> Specimen:
    """A run of ``glitchlens reproduce app-a`` (``interp.studies``): the App. A layout (2 layers x 1
    head, d_model 64) with the ``authors-notebook`` recipe, 1000 steps at lr 1e-3, batch 16. The
    ``*-app-a`` entries are the pair the study's rule chose (seed 0 at T = 512)."""
    return Specimen(model, "tiny", {"seq_len": seq_len, "batch_size": 16, "steps": 1000, "lr": 1e-3, "seed": seed},
                    "authors-notebook")


def tda_threshold_sweep_run(seed: int, steps: int = 1500) -> Specimen:
    """A run of ``glitchlens reproduce tda-threshold`` (``interp.studies``): the cpu scale's TDA
    (``tiny``, 4 heads, ``cpu-learning-authors``, T = 512, lr 1e-3, batch 16), beta fixed at 0 for
    the first third of the steps, ramped to the paper's 1 over the second third and held there, as
    the TDA authors' code keeps it fixed at 1 (1500 steps; ``tda-threshold-long``: 3000;
    ``tda-threshold-4500``: 4500)."""
    return Specimen("tda", "tiny", {"seq_len": 512, "batch_size": 16, "steps": steps, "lr": 1e-3, "seed": seed,
                                    "beta_schedule": "ramp", "beta_final": 1.0, "beta_ramp_start": steps // 3,
                                    "beta_ramp_end": 2 * steps // 3}, "cpu-learning-authors")


def table1(model: str, scale: str) -> Specimen:
    """Seed 0 of ``glitchlens reproduce table1 --scale SCALE``'s run of ``model``: ``cpu`` for the
    ``-mech`` specimens, ``paper`` (the TRA paper's set-up, on the default path: the Triton kernels
    on CUDA) for the ``-mini`` ones."""
    sweep = SCALES[scale]
    return Specimen(model, sweep.preset, sweep.training(seed=0), recipe=sweep.recipe)


def sharpened(base: Specimen) -> Specimen:
    """``base`` trained with the entropy attention-sharpening regulariser at 0.01, the strength of
    the flip-flop paper's Fig. 20 and the weaker of ``glitchlens reproduce sharpening``'s two, on
    the base's seed. The rule was fixed before looking at which run sharpens most: the sharpened
    specimen is that run of the sweep (``automaton-1l-entropy0.01-seed0``), not the best of them."""
    return replace(base, training={**base.training, "regulariser": "entropy", "reg_coef": 0.01})


AUTOMATON_1L = Specimen("rope", "mech", {"task": "automaton", "p_bottom": 0.5, "seq_len": 128, "batch_size": 16,
                                         "steps": 2000, "lr": 1e-3, "seed": 0}, "llama", model_fields={"n_layers": 1})

SPECIMENS: dict[str, Specimen] = {
    "tra-mech": app_a_pair("tra"),
    "fot-mech": app_a_pair("fot"),
    "tra-app-a": app_a_sweep_run("tra", 512, 0),
    "fot-app-a": app_a_sweep_run("fot", 512, 0),
    **{f"{model}-mech": table1(model, "cpu") for model in TABLE1_SPECIMENS},
    # The run that interp.studies.TDA_THRESHOLD_RULE ships: seed 0 of tda-threshold-4500, the first
    # seed and study in the rule's order to learn (99.3% of the held-out sequences).
    "tda-beta1": tda_threshold_sweep_run(0, 4500),
    "automaton-1l": AUTOMATON_1L,
    "automaton-1l-sharp": sharpened(AUTOMATON_1L),
    **{f"{model}-mini": table1(model, "paper") for model in GPU_SPECIMENS},
}


def specimen(name: str, steps: int | None = None) -> Specimen:
    """How entry ``name`` is trained, optionally for fewer steps; an unknown name is a
    ``CheckpointError`` naming the known ones."""
    entry(name)
    chosen = SPECIMENS[name]
    return chosen if steps is None else replace(chosen, training={**chosen.training, "steps": steps})

"""Every pretrained entry, defined in one place: its name, what it is, and how it is trained.

:data:`ENTRIES` maps each name to an :class:`Entry`: the description that its metadata records
and ``glitchlens pretrained`` lists, the :class:`Specimen` that trains it, and whether it needs a
GPU. ``glitchlens pretrained build NAME`` trains and writes it (:mod:`interp.studies.pretrained`);
``models.pretrained`` holds only the built checkpoint directories and the loader that reads them,
and knows an entry by its directory alone, so that ``models`` never imports ``interp``.

A :class:`Specimen` names a model, a size preset, a training recipe (``interp.training.recipes``)
and the fields that differ from them; the claim studies' runs (:mod:`interp.studies.registry`) are
specimens too. :meth:`Specimen.configs` builds its ``(ModelConfig, TrainConfig)`` as ``glitchlens
train`` does (``interp.training.recipes.run_configs``); :meth:`Specimen.command` spells them as the
``glitchlens train`` command that trains the same, the one each entry's metadata records and
``glitchlens pretrained`` shows (``tests/test_pretrained.py`` parses it back).

Every entry is trained with one torch thread (``interp.studies.pretrained.build``): another thread
count sums in another order and gives another checkpoint, and a one-head TRA may then not learn at all.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from interp.studies.scales import SCALES
from interp.training.recipes import run_configs


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

    One-head TRA learns or not depending on its initialisation (docs/results/learning.md "Earlier
    measurements, before this recipe": seed 1 learned; seeds 0, 2, 3 did not, nor did seed 0 at
    d_model 128), so both members use the seed on which TRA learned. The pair was trained on the
    PyTorch reference, before ``kernels.tooling.rows`` existed; the two compute the same up to float
    rounding, but whether a one-head model learns hangs on its first steps, so the pair names the
    reference to rebuild the entries bit for bit (docs/explanation/runs-and-checkpoints.md "Determinism").
    """
    return Specimen(model, "tiny", {"seq_len": 128, "batch_size": 16, "steps": 1000, "lr": 1e-3, "seed": 1},
                    "llama", attention_impl="reference")


def app_a_sweep_run(model: str, seq_len: int, seed: int) -> Specimen:
    """A run of ``glitchlens reproduce app-a`` (``interp.studies.registry``): the App. A layout (2 layers x 1
    head, d_model 64) with the ``authors-notebook`` recipe, 1000 steps at lr 1e-3, batch 16. The
    ``*-app-a`` entries are the pair the study's rule chose (seed 0 at T = 512)."""
    return Specimen(model, "tiny", {"seq_len": seq_len, "batch_size": 16, "steps": 1000, "lr": 1e-3, "seed": seed},
                    "authors-notebook")


def tda_threshold_sweep_run(seed: int, steps: int = 1500, model: str = "tda") -> Specimen:
    """A run of ``glitchlens reproduce tda-threshold`` (``interp.studies.registry``): the cpu scale's TDA
    (``tiny``, 4 heads, ``cpu-learning-authors``, T = 512, lr 1e-3, batch 16), beta fixed at 0 for
    the first third of the steps, ramped to the paper's 1 over the second third and held there, as
    the TDA authors' code keeps it fixed at 1 (1500 steps; ``tda-threshold-long``: 3000;
    ``tda-threshold-4500``: 4500). ``model="trela"``: the single-view threshold on the same schedule
    (``trela-beta1``, the premise of the TDA paper's Theorem 4.4)."""
    return Specimen(model, "tiny", {"seq_len": 512, "batch_size": 16, "steps": steps, "lr": 1e-3, "seed": seed,
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


@dataclass(frozen=True)
class Entry:
    description: str
    specimen: Specimen
    # Built on a GPU (``make gpu-specimen``, or a campaign's ``specimens`` entry) and evaluated there
    # on the full splits, because its training is hours of a CPU core: the papers' scale, or a long
    # threshold schedule; a checkout may not have built it yet.
    gpu: bool = False


# The specimens of the Table 1 cpu scale, seed 0 of its sweep.
TABLE1_SPECIMENS = {"tda": "TDA", "trela": "trela (single-view threshold rectified attention)", "cope": "CoPE",
                    "diff": "Differential attention with RoPE", "rope": "softmax attention with RoPE"}

# The specimens at the papers' scale, in the order to train them (the device time may run out).
GPU_SPECIMENS = {"tra": "TRA", "fot": "FoT", "rope": "softmax attention with RoPE", "tda": "TDA", "cope": "CoPE"}

ENTRIES: dict[str, Entry] = {
    **{f"{model}-mech": Entry(f"{what}, 2 layers x 1 head, d_model 64, trained at T = 128 (the TRA paper's App. A "
                              "pair)", app_a_pair(model))
       for model, what in (("tra", "TRA"), ("fot", "FoT"))},
    **{f"{model}-app-a": Entry(f"{what}, 2 layers x 1 head, d_model 64, trained at T = 512 (the App. A pair that the "
                               "rule of `glitchlens reproduce app-a` chose: seed 0)", app_a_sweep_run(model, 512, 0))
       for model, what in (("tra", "TRA"), ("fot", "FoT"))},
    **{f"{model}-mech": Entry(f"{what}, 2 layers x 4 heads, d_model 64, trained at T = 512 (Table 1 cpu scale, "
                              "seed 0)", table1(model, "cpu"))
       for model, what in TABLE1_SPECIMENS.items()},
    # The run that interp.studies.registry.TDA_THRESHOLD_RULE ships: seed 0 of tda-threshold-4500, the first
    # seed and study in the rule's order to learn (99.3% of the held-out sequences).
    "tda-beta1": Entry("TDA, 2 layers x 4 heads, d_model 64, trained at T = 512 with its threshold at the paper's "
                       "beta = 1 (held at 0, ramped to 1 and held there; the run the rule of `glitchlens reproduce "
                       "tda-threshold` chose)", tda_threshold_sweep_run(0, 4500)),
    # Theorem 4.4's premise is beta >= 1 (trela-mech learned 0.13): tda-beta1's schedule and seed for trela.
    "trela-beta1": Entry("trela (single-view threshold rectified attention), 2 layers x 4 heads, d_model 64, trained "
                         "at T = 512 with its threshold at the TDA paper's beta = 1 (held at 0, ramped to 1 and held "
                         "there, as tda-beta1)", tda_threshold_sweep_run(0, 4500, "trela")),
    "automaton-1l": Entry("softmax attention with RoPE, 1 layer x 1 head, d_model 128, trained at T = 128 on the "
                          "flip-flop automaton simulation task (flip-flop paper Def. 1, p(bottom) = 0.5)",
                          AUTOMATON_1L),
    "automaton-1l-sharp": Entry("automaton-1l's set-up trained with the entropy attention-sharpening regulariser at "
                                "0.01 (flip-flop paper Sec. 5.2, Fig. 16b)", sharpened(AUTOMATON_1L)),
    **{f"{model}-mini": Entry(f"{what}, 4 layers x 4 heads, d_model 256, T = 512, batch 64, 25k steps (the TRA "
                              "paper's set-up, trained on a GPU)", table1(model, "paper"), gpu=True)
       for model, what in GPU_SPECIMENS.items()},
}


def entry(name: str) -> Entry:
    """Entry ``name``; an unknown name is a ``ValueError`` naming the known ones."""
    if name not in ENTRIES:
        raise ValueError(f"unknown pretrained model {name!r}; available: {', '.join(ENTRIES)}")
    return ENTRIES[name]


def specimen(name: str, steps: int | None = None) -> Specimen:
    """How entry ``name`` is trained, optionally for fewer steps."""
    chosen = entry(name).specimen
    return chosen if steps is None else replace(chosen, training={**chosen.training, "steps": steps})


def build_command(name: str) -> str:
    """The command that builds entry ``name``: the GPU specimens have their own
    (docs/how-to/run-on-a-gpu.md "On a GPU")."""
    return f"make gpu-specimen NAME={name}" if entry(name).gpu else f"glitchlens pretrained build {name}"

"""Training recipes as data: the block, initialisation, dropout and optimiser choices a run is made of.

A recipe is a pair of overrides, one for :class:`models.ModelConfig` and one for
:class:`interp.training.setup.TrainConfig`; ``glitchlens train --recipe NAME`` starts from it and
explicit flags still win; with no recipe named it is :data:`DEFAULT_RECIPE`, ``authors-notebook``.
``llama`` is the project's original set-up, the options' own defaults. The TRA authors'
released notebook ("TRA_FFL", MOSS submission 96) is offered in two sizes: ``authors`` is
its block, init and optimiser, the parts first found to differ; ``authors-notebook`` is
everything of the notebook that the model and training options can express. The
``authors-*`` recipes take one part each, so that a sweep over them says which part matters
(``glitchlens reproduce recipes``); ``cpu-learning-*`` add the parts to ``cpu-learning``.

What ``authors`` keeps of the notebook:

- block: the residual stream itself is normalised before each sublayer
  (``norm_placement="stream"``);
- init: ``nn.Linear``'s defaults with biases on the MLP and the attention output
  (``init="torch"``, ``linear_bias=True``; the forget projection's bias is initialised
  the same way, as ``Linear(d_model, n_heads)`` would);
- optimiser: AdamW with weight decay 0.01, no warm-up, no gradient clipping (the notebook's
  cosine schedule to 0 is ours with ``warmup=0``; betas and eps are AdamW's defaults in both).

What ``authors-notebook`` adds (``authors`` leaves these out):

- dropout of 0.01 at the notebook's three places (``authors-dropout`` alone): the embedding
  output (``embedding_dropout``), the attention logits before masking (``attention_dropout``;
  in TRA that is S' + D-bar log delta) and the MLP's hidden activation
  (``mlp_hidden_dropout``); none on the sublayer outputs, so ``dropout`` stays 0;
- weight decay on every parameter, biases and norm gains included (``decay_all_parameters``).

Left out of every recipe: the notebook's lr 1e-4, batch 64 and 25k steps (a GPU budget: the
CPU scales keep lr 1e-3, batch 16 and 500 or 1000 steps; ``reproduce --scale paper`` has
them), its 4 x 4 x 256 model (our ``mini``; the CPU scales use ``mech`` and ``tiny``), its
one pass over the 1.6M fixed sequences of ``synthseq/flipflop`` (we draw fresh FFL(0.8)
sequences per step from the same distribution), its six-token vocabulary (a padding token
that never occurs adds one logit to the loss's normaliser) and TF32 matrix products
(``set_float32_matmul_precision("high")`` with ``torch.compile``; only on GPUs that have
TF32). docs/explanation/learning-notes.md "Training recipes" lists every difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AUTHORS_BLOCK = {"norm_placement": "stream"}
AUTHORS_INIT = {"init": "torch", "linear_bias": True}
AUTHORS_OPTIMISER = {"weight_decay": 0.01, "warmup": 0, "grad_clip": None}
AUTHORS_DROPOUT = {"embedding_dropout": 0.01, "attention_dropout": 0.01, "mlp_hidden_dropout": 0.01}


@dataclass(frozen=True)
class Recipe:
    model: dict[str, Any] = field(default_factory=dict)      # ModelConfig overrides
    training: dict[str, Any] = field(default_factory=dict)   # TrainConfig overrides
    # mechanism -> attention options, for mechanisms whose own defaults do not train here
    attention_options: dict[str, dict[str, Any]] = field(default_factory=dict)


# The recipe of docs/results/learning.md "Learning on CPU": 4 heads (d_head 16 at `tiny`) instead of the
# presets' one, since with one head learning at `tiny` size depends on the seed. trela and
# TDA start from beta_init = 0 (tau = 0 until beta grows): at the paper's beta = 1 almost
# every row of these cosine-score models is empty at initialisation and passes no gradient.
CPU_LEARNING = Recipe(model={"n_heads": 4},
                      attention_options={"trela": {"beta_init": 0.0}, "tda": {"beta_init": 0.0}})
# The same with the authors' block, init and optimiser: on the two seeds where cpu-learning
# failed (TRA seed 0, CoPE seed 1) it learned (docs/results/learning.md "Learning on CPU").
CPU_LEARNING_AUTHORS = Recipe(model={**CPU_LEARNING.model, **AUTHORS_BLOCK, **AUTHORS_INIT},
                              training=AUTHORS_OPTIMISER, attention_options=CPU_LEARNING.attention_options)
# Everything of the notebook the options express: ``authors`` plus its dropout and its decay of
# every parameter.
AUTHORS_NOTEBOOK = Recipe(model={**AUTHORS_BLOCK, **AUTHORS_INIT, **AUTHORS_DROPOUT},
                          training={**AUTHORS_OPTIMISER, "decay_all_parameters": True})


RECIPES: dict[str, Recipe] = {
    "llama": Recipe(),
    "authors": Recipe(model={**AUTHORS_BLOCK, **AUTHORS_INIT}, training=AUTHORS_OPTIMISER),
    "authors-block": Recipe(model=AUTHORS_BLOCK),
    "authors-init": Recipe(model=AUTHORS_INIT),
    "authors-optimiser": Recipe(training=AUTHORS_OPTIMISER),
    "authors-dropout": Recipe(model=AUTHORS_DROPOUT),
    "authors-notebook": AUTHORS_NOTEBOOK,
    "cpu-learning": CPU_LEARNING,
    "cpu-learning-authors": CPU_LEARNING_AUTHORS,
    "cpu-learning-notebook": Recipe(model={**CPU_LEARNING.model, **AUTHORS_NOTEBOOK.model},
                                    training=AUTHORS_NOTEBOOK.training,
                                    attention_options=CPU_LEARNING.attention_options),
}


# What ``glitchlens train`` and :func:`run_configs` use when no recipe is named: the one that
# learned on the most seeds (docs/results/learning.md "The recipes, measured": at ``mech``, 11 of 15
# runs against 3 of 13 for ``llama``). ``ModelConfig`` and ``TrainConfig`` keep ``llama``'s values as
# their field defaults, so a recipe is always a set of overrides of them.
DEFAULT_RECIPE = "authors-notebook"


def model_overrides(recipe: Recipe, model: str) -> dict[str, Any]:
    """``recipe``'s ModelConfig overrides for ``model``, its attention options included."""
    if model not in recipe.attention_options:
        return recipe.model
    return {**recipe.model, "attention_options": recipe.attention_options[model]}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    return RECIPES[name]


def task_fields(train_cfg) -> dict[str, Any]:
    """The model fields a registered task other than flip-flop and the automaton sets: its vocabulary,
    and an ``n_ctx`` that covers its longest split (so that learned absolute positions reach them)."""
    if train_cfg.task in ("flipflop", "automaton"):
        return {}
    from interp.tasks import get_task

    task = get_task(train_cfg.task)
    return {"d_vocab": task.d_vocab, "n_ctx": max(train_cfg.seq_len, task.n_ctx)}


def run_configs(model: str, preset: str, recipe: str = DEFAULT_RECIPE, model_fields: dict[str, Any] | None = None,
                training: dict[str, Any] | None = None):
    """The ``(ModelConfig, TrainConfig)`` of ``model`` at size ``preset`` trained with ``recipe``:
    the given fields win over the recipe's, attention options key by key, and ``n_ctx`` follows
    the training length unless given (a task's own vocabulary and longest split: :func:`task_fields`).
    ``glitchlens train``, the sweeps and the pretrained entries all build their configs here."""
    from interp.training.setup import TrainConfig
    from models import ModelConfig

    chosen, model_fields = get_recipe(recipe), model_fields or {}
    # the training options first: a bad seq_len is named as such, not as the n_ctx it sets
    train_cfg = TrainConfig(**{**chosen.training, **(training or {})})
    recipe_model = model_overrides(chosen, model)
    attention_options = {**recipe_model.get("attention_options", {}), **model_fields.get("attention_options", {})}
    model_cfg = ModelConfig.from_preset(model, preset, **{"n_ctx": train_cfg.seq_len, **task_fields(train_cfg),
                                                          **recipe_model, **model_fields,
                                                          "attention_options": attention_options})
    return model_cfg, train_cfg


"""What the circuit tools measure: the task a model is analysed on, the positions it is scored at
and their right answers (from the task contract, :class:`interp.tasks.Task`), and the metric, a
callable of the logits as in TransformerLens's patching (conventions: :mod:`interp.circuits`).

A *metric* is any callable ``metric(logits, scored) -> [batch]``: ``logits [batch, pos, d_vocab]``
of one run, ``scored`` the :class:`Scored` rows it is asked about (each row's scored position,
its right answer, the task, and in a pair both runs' tokens). The default is :func:`margin`, the
task's margin: the right answer's logit minus the largest logit of the task's other answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.tasks import Task, get_task
from models import validate
from models.tokens import as_token_ids


@dataclass(frozen=True)
class Scored:
    """The rows a metric measures. ``tokens [batch, pos]``: what this run read; ``position
    [batch]``: each row's scored position; ``target [batch]``: the right answer's token id there
    (in a pair, the *clean* run's, so that both runs are measured in one direction); ``task``;
    ``clean``, ``corrupt``: both runs' tokens when the run belongs to a pair (else None)."""

    tokens: Tensor
    position: Tensor
    target: Tensor
    task: Task
    clean: Tensor | None = None
    corrupt: Tensor | None = None


Metric = Callable[[Tensor, Scored], Tensor]


def margin(logits: Float[Tensor, "batch pos d_vocab"], scored: Scored) -> Float[Tensor, "batch"]:
    """The task's margin at each row's scored position: the logit of ``scored.target`` minus the
    largest logit among the task's other answers (for a two-answer task such as flip-flop, the
    logit difference). Positive when the model prefers the right answer to every other answer."""
    if not isinstance(scored, Scored):
        raise TypeError(f"scored must be a circuits.Scored, got a {type(scored).__name__}")
    if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[0] != len(scored.position):
        raise ValueError(f"logits must be a [batch, pos, d_vocab] tensor with one row per scored row "
                         f"({len(scored.position)})")
    if not isinstance(scored, Scored):
        raise TypeError(f"scored must be a Scored (the rows a metric measures), got {validate.shown(scored)}")
    if not isinstance(logits, Tensor):
        raise TypeError(f"logits must be a tensor [batch, pos, d_vocab], got {validate.shown(logits)}")
    validate.array("logits", logits, "float", 3, finite=False)
    rows = torch.arange(len(scored.position), device=logits.device)
    at = logits[rows, scored.position.to(logits.device)]                      # [batch, d_vocab]
    answers = torch.tensor(scored.task.answers, device=logits.device)
    target = scored.target.to(logits.device)
    others = at[:, answers].masked_fill(answers[None, :] == target[:, None], -torch.inf)
    return at[rows, target] - others.max(-1).values


def resolve_task(model, task: Task | str | None = None) -> Task:
    """The task to analyse ``model`` on: ``task`` (a :class:`Task` or a registered name), else the
    task its checkpoint was trained on (``model.trained_task``), else flip-flop. A model whose
    vocabulary is not the task's is refused: its tokens would mean something else."""
    check_model(model)
    task = as_task(getattr(model, "trained_task", None) or "flipflop" if task is None else task)
    trained = getattr(model, "trained_task", None)
    if trained is not None and trained != task.name:
        raise ValueError(f"task: this model was trained on the {trained!r} task, not {task.name!r}; analyse it on "
                         f"its own task (task={trained!r} or none)")
    # a model that records its task may read more tokens than it has (automaton-1l: flip-flop's five)
    if model.cfg.d_vocab < task.d_vocab or (trained is None and model.cfg.d_vocab != task.d_vocab):
        raise ValueError(f"task: the {task.name!r} task has {task.d_vocab} tokens but this model reads "
                         f"{model.cfg.d_vocab}; give the task it was trained on (task=...)")
    return task


def check_model(model) -> None:
    """A ``TypeError`` unless ``model`` is a GlitchLens model (a config and its hooks)."""
    if not hasattr(getattr(model, "cfg", None), "d_vocab") or not hasattr(model, "fired_hooks"):
        raise TypeError(f"model must be a GlitchLens model (models.build_model, models.load), got "
                        f"{type(model).__name__}")


def as_task(task: Task | str) -> Task:
    """``task`` itself, or the task registered under that name; a ``TypeError`` for anything else."""
    if isinstance(task, str):
        return get_task(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be an interp.tasks.Task or a registered task name, got {type(task).__name__}")
    return task


def check_metric(task: Task, metric: Metric | None) -> Metric:
    """``metric``, or the task's :func:`margin` when None; the margin of a task with fewer than two
    answers, which has no other answer to compare with, is refused."""
    task = as_task(task)
    if metric is None:
        if len(task.answers) < 2:
            raise ValueError(f"metric: the {task.name!r} task has one answer token, so no margin (right answer "
                             "minus the best other); give a metric of your own, e.g. the answer's logit")
        return margin
    if not callable(metric):
        raise TypeError(f"metric must be a callable (logits, scored) -> [batch], got {type(metric).__name__}")
    return metric


def measure(metric: Metric, logits: Tensor, scored: Scored) -> Tensor:
    """``metric(logits, scored)`` as ``float64 [batch]``, or a ``ValueError`` naming what it gave."""
    value = metric(logits, scored)
    if not isinstance(value, Tensor) or value.shape != (len(scored.position),):
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"metric must give one value per row, a tensor [{len(scored.position)}]; it gave {shape}")
    return value.double()


def scored_rows(task: Task, tokens, position: int | None = None
                ) -> tuple[Int[Tensor, "row"], Int[Tensor, "row"], Int[Tensor, "row"]]:
    """``(seq, position, target)`` of every scored position of ``tokens [n, pos]`` (what the model
    reads), or only of the scored ones at ``position`` (an int; negative counts from the end)."""
    task = as_task(task)
    ids = token_ids_of("tokens", tokens, task.d_vocab).numpy()
    scored, targets = task.scored_answers(ids)
    if position is not None:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
            raise TypeError(f"position must be an int or None, got {type(position).__name__}")
        if not -ids.shape[1] <= position < ids.shape[1]:
            raise ValueError(f"position {position} lies outside these {ids.shape[1]} tokens")
        keep = np.zeros_like(scored)
        keep[:, position] = True
        scored = scored & keep
    seq, pos = np.nonzero(scored)
    return torch.from_numpy(seq), torch.from_numpy(pos), torch.from_numpy(targets[seq, pos])


def _targets_at(task: Task, tokens: Tensor, position: Tensor, run: str) -> Tensor:
    """The right answer's token id at ``position[b]`` of row b of ``tokens``; a position the task
    does not score there is a ``ValueError`` naming ``run``'s row."""
    scored, targets = task.scored_answers(tokens.cpu().numpy())
    rows, at = np.arange(len(position)), position.cpu().numpy()
    bad = np.flatnonzero(~scored[rows, at])
    if len(bad):
        b = int(bad[0])
        raise ValueError(f"reads: position {at[b]} of the {run} run's row {b} is not a position the {task.name!r} "
                         "task scores (Task.scored_answers)")
    return torch.from_numpy(targets[rows, at])


def _answer_index(task: Task, target: Tensor) -> np.ndarray:
    """Each target's index among ``task.answers`` (flip-flop: the bit)."""
    lookup = np.full(task.d_vocab, -1)
    lookup[list(task.answers)] = np.arange(len(task.answers))
    return lookup[target.cpu().numpy()]


def _check_frame(argument: str, frame, columns, made_by: str) -> pd.DataFrame:
    """``frame`` if it is a DataFrame holding ``columns``; a ``TypeError`` or ``ValueError``
    naming ``argument`` and the function whose frames it takes (``made_by``) otherwise."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{argument} must be a {made_by} frame (a DataFrame), got {type(frame).__name__}")
    missing = set(columns) - set(frame.columns)
    if missing:
        raise ValueError(f"{argument} is not a {made_by} frame: it lacks the columns {sorted(missing)}")
    return frame


def _check_columns(argument: str, by) -> list[str]:
    """``by`` as a list of column names, or a ``TypeError`` naming ``argument``."""
    if not isinstance(by, (list, tuple)) or not all(isinstance(column, str) for column in by):
        raise TypeError(f"{argument} must be a list of column names, got a {type(by).__name__}")
    return list(by)


def token_ids_of(argument: str, tokens, d_vocab: int) -> Tensor:
    """``as_token_ids(tokens, d_vocab)``, its error naming ``argument``."""
    try:
        return as_token_ids(tokens, d_vocab)
    except ValueError as err:
        raise ValueError(f"{argument}: {err}") from None

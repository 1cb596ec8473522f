"""``glitchlens check-task``: does a task keep the contract of :class:`interp.tasks.task.Task`?

Each check draws a few sequences of the task (from every split, and a training batch), so that a
task is checked in about a second. The checks:

- ``vocabulary``: distinct token strings, at most 256 of them; ``answers`` and ``roles`` name ids in it;
- ``determinism``: the same seed gives the same sequences, another seed others, and the training
  batch of ``(seed, step)`` is the same twice and differs from the next step's;
- ``prefix``: the first rows of a seed are the same whatever number is asked for;
- ``splits``: each split loads as ``uint8 [n, seq_len]`` with ids in the vocabulary, from seeds of
  its own; at least one is in distribution;
- ``scored positions``: ``model_io`` gives three arrays of one shape, every sequence has a scored
  position, and the target there is one of ``answers``;
- ``answers``: at up to :data:`MAX_ANSWERS` scored positions of every split, ``answer(prefix)``, a
  loop over what the model has read, equals the target ``model_io`` gives;
- ``scored answers``: a task that overrides ``scored_answers`` (a vectorised ``answer``) gives
  ``model_io``'s scored positions and targets;
- ``counterfactual``: where the task declares ``corrupt``, at up to :data:`MAX_ANSWERS` scored
  positions it returns a sequence of the same length, scored there, with another right answer;
- ``probe labels``: where the task declares ``probe_labels``, one integer label (>= -1) per input
  position, and ``probe_label`` says what it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from interp.tasks.task import Task

SEQUENCES = 4
MAX_ANSWERS = 200


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def _vocabulary(task: Task) -> str:
    vocab = task.vocab
    assert vocab and len(set(vocab)) == len(vocab) and len(vocab) <= 256 and all(isinstance(s, str) for s in vocab), \
        f"vocab must be 1 to 256 distinct strings, got {vocab!r}"
    bad = [t for t in (*task.answers, *task.roles) if not 0 <= t < len(vocab)]
    assert task.answers and not bad, f"answers and roles must be token ids below {len(vocab)}: {bad or 'no answers'}"
    return f"{len(vocab)} tokens, {len(task.answers)} possible answers"


def _determinism(task: Task) -> str:
    a, b = task.sample(SEQUENCES, task.seq_len, 1, **task.train_params), task.sample(SEQUENCES, task.seq_len, 1,
                                                                                       **task.train_params)
    assert np.array_equal(a, b), "two draws from seed 1 differ"
    assert not np.array_equal(a, task.sample(SEQUENCES, task.seq_len, 2, **task.train_params)), \
        "seeds 1 and 2 give the same sequences"
    batch = task.train_batch(SEQUENCES, 3, seed=0)
    assert np.array_equal(batch, task.train_batch(SEQUENCES, 3, seed=0)), "the training batch of (seed 0, step 3) " \
                                                                          "differs between two calls"
    assert not np.array_equal(batch, task.train_batch(SEQUENCES, 4, seed=0)), "steps 3 and 4 get the same batch"
    assert batch.shape == (SEQUENCES, task.seq_len), f"a training batch of {SEQUENCES} has shape {batch.shape}"
    return f"seeded draws and training batches repeat, at T = {task.seq_len}"


def _prefix(task: Task) -> str:
    few, more = task.sample(2, task.seq_len, 5, **task.train_params), task.sample(6, task.seq_len, 5,
                                                                                   **task.train_params)
    assert np.array_equal(few, more[:2]), "the first 2 of 6 sequences of seed 5 differ from the 2 sequences of seed 5"
    return "the first sequences of a seed do not depend on how many are drawn"


def _splits(task: Task) -> str:
    assert task.splits, "the task has no splits"
    seeds = [split.seed for split in task.splits.values()]
    assert len(set(seeds)) == len(seeds), f"splits share seeds: {seeds}"
    assert any(split.in_distribution for split in task.splits.values()), "no split is in distribution"
    for name, split in task.splits.items():
        tokens = task.load_split(name, min(SEQUENCES, split.size))
        assert tokens.dtype == np.uint8 and tokens.shape == (min(SEQUENCES, split.size), split.seq_len), \
            f"split {name}: {tokens.dtype} {tokens.shape}, expected uint8 [n, {split.seq_len}]"
        assert tokens.max() < task.d_vocab, f"split {name}: token id {tokens.max()} outside the vocabulary"
    return ", ".join(f"{name} ({'in' if s.in_distribution else 'out of'} distribution, {s.size} x T = {s.seq_len})"
                     for name, s in task.splits.items())


def _scored(task: Task) -> str:
    counts = []
    for name, split in task.splits.items():
        inputs, targets, scored = task.model_io(task.load_split(name, min(SEQUENCES, split.size)))
        assert inputs.shape == targets.shape == scored.shape and scored.dtype == bool, \
            f"split {name}: model_io gives shapes {inputs.shape}, {targets.shape}, {scored.shape} ({scored.dtype})"
        assert scored.any(axis=1).all(), f"split {name}: a sequence has no scored position"
        bad = np.setdiff1d(targets[scored], task.answers)
        assert not len(bad), f"split {name}: targets {bad.tolist()} are not among the answers"
        counts.append(f"{name} {scored.sum(axis=1).mean():g}")
    return "scored positions per sequence: " + ", ".join(counts)


def _answers(task: Task) -> str:
    checked = 0
    for name, split in task.splits.items():
        inputs, targets, scored = task.model_io(task.load_split(name, min(SEQUENCES, split.size)))
        for row, pos in list(zip(*np.nonzero(scored)))[:MAX_ANSWERS]:
            expected = task.answer([int(t) for t in inputs[row, :pos + 1]])
            assert expected == targets[row, pos], (f"split {name}, sequence {row}, position {pos}: answer() says "
                                                   f"{expected}, model_io's target is {targets[row, pos]}")
            checked += 1
    return f"{checked} targets equal answer(prefix)"


def _first_inputs(task: Task):
    """``(split name, inputs, targets, scored)`` of the first sequences of every split."""
    for name, split in task.splits.items():
        yield (name, *task.model_io(task.load_split(name, min(SEQUENCES, split.size))))


def _scored_answers(task: Task) -> str:
    if type(task).scored_answers is Task.scored_answers:
        return "not overridden: answer() gives them"
    for name, inputs, targets, scored in _first_inputs(task):
        found, answers = task.scored_answers(inputs)
        assert np.array_equal(found, scored), f"split {name}: scored_answers marks other positions than model_io"
        assert np.array_equal(answers[scored], targets[scored]), \
            f"split {name}: scored_answers gives other targets than model_io"
    return "scored_answers agrees with model_io"


def _counterfactual(task: Task) -> str:
    if not task.declares_corrupt:
        return "no corrupt(): the circuit tools pair sequences by resampling"
    checked = 0
    for name, inputs, targets, scored in _first_inputs(task):
        for row, pos in list(zip(*np.nonzero(scored)))[:MAX_ANSWERS]:
            edited = task.corrupt(inputs[row].copy(), int(pos))
            if edited is None:
                continue
            edited = np.asarray(edited)
            assert edited.shape == inputs[row].shape, (f"split {name}, sequence {row}: corrupt() gives shape "
                                                       f"{edited.shape}, not {inputs[row].shape}")
            now_scored, now = task.scored_answers(edited[None])
            assert now_scored[0, pos] and now[0, pos] != targets[row, pos], \
                f"split {name}, sequence {row}, position {pos}: corrupt() leaves the answer {targets[row, pos]}"
            checked += 1
    assert checked, "corrupt() gives None at every scored position checked"
    return f"{checked} counterfactuals change the answer"


def _probe_labels(task: Task) -> str:
    for name, inputs, _, _ in _first_inputs(task):
        labels = task.probe_labels(inputs)
        if labels is None:
            return "none declared"
        labels = np.asarray(labels)
        assert labels.shape == inputs.shape and np.issubdtype(labels.dtype, np.integer) and labels.min() >= -1, \
            f"split {name}: probe_labels gives {labels.dtype} {labels.shape}, expected integers >= -1 {inputs.shape}"
    assert task.probe_label, "probe_labels is declared but probe_label does not say what it is"
    return f"{task.probe_label}"


CHECKS: dict[str, Callable[[Task], str]] = {
    "vocabulary": _vocabulary, "determinism": _determinism, "prefix": _prefix, "splits": _splits,
    "scored positions": _scored, "answers": _answers, "scored answers": _scored_answers,
    "counterfactual": _counterfactual, "probe labels": _probe_labels,
}


def check_task(task: Task) -> list[Check]:
    """Run every check on ``task``; a check that raises fails with the error's first line."""
    results = []
    for name, check in CHECKS.items():
        try:
            results.append(Check(name, True, check(task)))
        except Exception as err:  # a task of one's own may fail in any way: report it, go on
            text = str(err).splitlines()[0] if str(err) else type(err).__name__
            results.append(Check(name, False, text))
    return results

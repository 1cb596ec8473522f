"""What a task is: the contract of :class:`Task`, the data-side counterpart of a mechanism
(:mod:`models.mechanisms`); :mod:`interp.tasks.registry` names the tasks.

A task is a subclass of :class:`Task`, whose docstring is the contract. It names

- its vocabulary (``vocab``, one string per token id, ids below 256: sequences are ``uint8``);
- its seeded generator, ``sample(n, seq_len, rng, **params) -> uint8 [n, seq_len]``, where
  row ``k`` depends only on the seed and ``k`` (the first ``m`` rows of a seed are the same
  whatever ``n >= m`` is asked for);
- what the model sees and where it is scored: ``model_io(tokens) -> (inputs, targets, scored)``,
  three ``[n, T']`` arrays. By default the model reads ``tokens[:, :-1]`` and is scored on the
  next token at the positions :meth:`Task.scored_mask` marks (flip-flop: the bit after each
  ``r``); the automaton overrides it (its targets are states, not next tokens);
- ``answer(prefix)``: the right answer after the input prefix ``prefix`` (a list of ids ending
  at a scored position), a plain loop independent of the generator, which ``check-task``
  compares with ``model_io``'s targets;
- ``answers``: the token ids an answer can be (the margin of a prediction is the logit of the
  right answer minus the best other answer's); ``is_correct(predicted, target)``: how an answer
  is counted right (default: the argmax over the whole vocabulary equals the target);
- its canonical splits (:class:`TaskSplit`: a size, a fixed seed, a length and the generator's
  parameters; in distribution or out of it) and its training distribution (``seq_len``,
  ``train_params``; ``train_size``: a fixed pool of training sequences instead of fresh ones).

Optional, for the circuit tools and the probes (a task that declares neither still gets every tool
that does not need them):

- ``corrupt(inputs, position)``: a counterfactual of one input sequence whose answer at
  ``position`` differs (flip-flop: the last written bit flipped), for patching from clean into
  corrupt; without it the tools pair each sequence with another of the same split whose answer
  at the same position differs (resample pairs, :func:`interp.circuits.resample_pairs`);
- ``probe_labels(inputs)``: a label at every input position for linear probes to read from the
  activations (flip-flop: the current bit), with ``probe_label`` saying what it is in words.

Pure numpy, like the rest of :mod:`interp.tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache, update_wrapper

import numpy as np

from interp.tasks.flipflop import check_draw_size
from models import validate

# The seed stream of a task's fixed training pool: the pool of run seed s is default_rng([s, TRAIN_POOL_STREAM]).
TRAIN_POOL_STREAM = 7_919


@dataclass(frozen=True)
class TaskSplit:
    """A canonical split: ``size`` sequences of ``seq_len`` tokens from ``Task.sample`` with the
    parameters ``params``, from its own fixed ``seed``."""

    name: str
    size: int
    seed: int
    seq_len: int
    params: Mapping = field(default_factory=dict)
    in_distribution: bool = True
    published_reads: int | None = None


class Task:
    """A task: see the module docstring for the contract. Subclasses set the class attributes
    and implement :meth:`sample`, :meth:`scored_mask` (or :meth:`model_io`) and :meth:`answer`."""

    name: str = ""
    description: str = ""
    vocab: tuple[str, ...] = ()
    answers: tuple[int, ...] = ()
    seq_len: int = 512                    # the training length
    train_params: Mapping = {}            # the generator's parameters during training
    train_size: int | None = None         # a fixed pool of this many training sequences (None: fresh draws)
    splits: Mapping[str, TaskSplit] = {}
    # token id -> role, for the heatmaps' colours (a role of interp.plots.layout.TASK_ROLE_COLOR)
    roles: Mapping[int, str] = {}
    probe_label: str = ""                 # what probe_labels gives, in words ("the current bit")

    def __init_subclass__(cls, **kwargs):
        """Every task's ``sample`` checks its caller's ``n``, ``seq_len`` and ``rng`` before the
        task's own code sees them, so that a task of one's own refuses ``sample(-2, 64, 0)`` in one
        line naming ``n`` as the built-in ones do."""
        super().__init_subclass__(**kwargs)
        if "sample" in cls.__dict__:
            cls.sample = _checked_sample(cls.__dict__["sample"])

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    @property
    def declares_corrupt(self) -> bool:
        """Whether the task declares a counterfactual (overrides :meth:`corrupt`)."""
        return type(self).corrupt is not Task.corrupt

    @property
    def n_ctx(self) -> int:
        """The longest of the training length and every split's: the context a model with learned
        absolute positions needs to be evaluated on all of them."""
        return max([self.seq_len, *(split.seq_len for split in self.splits.values())])

    def sample(self, n: int, seq_len: int, rng, **params) -> np.ndarray:
        """``n`` sequences, ``uint8 [n, seq_len]``, from ``np.random.default_rng(rng)``."""
        raise NotImplementedError

    def scored_mask(self, inputs: np.ndarray) -> np.ndarray:
        """``bool [n, T]``: the input positions whose next token is scored."""
        raise NotImplementedError

    def answer(self, prefix: list[int]) -> int:
        """The right answer after ``prefix``, which ends at a scored position."""
        raise NotImplementedError

    def model_io(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(inputs, targets, scored)``, each ``[n, T - 1]``: the model reads ``inputs`` and is
        scored on ``targets`` (the next tokens) where ``scored``."""
        inputs = tokens[:, :-1]
        return inputs, tokens[:, 1:], self.scored_mask(inputs)

    def scored_answers(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(scored bool [n, T], targets int64 [n, T])`` of the tokens the model reads (``inputs``
        as :meth:`model_io` gives them, or a prefix of them): where the model is scored and the
        right answer's token id there (-1 elsewhere). The default asks :meth:`scored_mask` where
        and :meth:`answer` what; a task may override it with a vectorised equivalent."""
        inputs = np.asarray(inputs)
        scored = np.asarray(self.scored_mask(inputs), dtype=bool)
        targets = np.full(inputs.shape, -1, dtype=np.int64)
        for row, pos in zip(*np.nonzero(scored)):
            targets[row, pos] = self.answer([int(t) for t in inputs[row, :pos + 1]])
        return scored, targets

    def corrupt(self, inputs: np.ndarray, position: int) -> np.ndarray | None:
        """Optional. A copy of one input sequence ``inputs [T]`` edited so that the right answer at
        the scored ``position`` differs, the sequence staying one the task could draw (flip-flop: the
        last written bit flipped, with the reads that repeat it); None where no such edit exists
        there. A task that does not override it declares no counterfactual: the circuit tools pair
        its sequences by resampling instead (:func:`interp.circuits.task_pairs`)."""
        raise NotImplementedError

    def probe_labels(self, inputs: np.ndarray) -> np.ndarray | None:
        """Optional. ``int64 [n, T]``: a class label in ``0..K-1`` at every position of the input
        tokens (-1 where it is undefined), what a linear probe on the activations at that position
        should be able to read (its meaning, in words: ``probe_label``). None (the default): the
        task declares no label."""
        return None

    def is_correct(self, predicted: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Whether each answer counts as right: the prediction equals the target."""
        return predicted == target

    def evidence(self, tokens: np.ndarray) -> np.ndarray | None:
        """For each position, the token position the answer there is read from (-1: none), ``[n, T]``;
        the heatmaps outline that cell. None: the task has no single such position."""
        return None

    def labels(self, tokens) -> list[str]:
        """The axis label of each token of one sequence."""
        return [self.vocab[int(t)] for t in tokens]

    def train_batch(self, batch_size: int, step: int, seed: int, seq_len: int | None = None) -> np.ndarray:
        """The training batch of ``step``, a pure function of ``(seed, step)``: fresh draws from
        ``default_rng([seed, step])``, or with ``train_size`` the rows of a fixed pool, in a new
        order every pass over it."""
        batch_size, step = validate.integer("batch_size", batch_size, 1), validate.integer("step", step, 0)
        seed = validate.integer("seed", seed, 0)
        seq_len = self.seq_len if seq_len is None else validate.integer("seq_len", seq_len, 1)
        if self.train_size is None:
            return self.sample(batch_size, seq_len, [seed, step], **self.train_params)
        pool = _train_pool(self, seed, seq_len)
        drawn = np.arange(step * batch_size, (step + 1) * batch_size)   # the rows drawn so far, in order
        passes = drawn // len(pool)
        orders = {int(p): np.random.default_rng([seed, int(p)]).permutation(len(pool)) for p in np.unique(passes)}
        return pool[[orders[int(p)][i % len(pool)] for p, i in zip(passes, drawn)]]

    def load_split(self, name: str, n: int | None = None) -> np.ndarray:
        """The first ``n`` sequences (default: all) of the canonical split ``name``."""
        if validate.text("name", name) not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {name!r}; choose one of {', '.join(self.splits)}")
        split = self.splits[name]
        n = split.size if n is None else validate.integer("n", n)
        if not 0 < n <= split.size:
            raise ValueError(f"split {name!r} of task {self.name!r} has {split.size} sequences; asked for n={n}")
        return self.sample(n, split.seq_len, split.seed, **split.params)

    def format(self, tokens) -> str:
        return " ".join(self.labels(tokens))


def _checked_sample(sample):
    """``sample`` with its arguments checked: ``n`` and ``seq_len`` integers (``n`` >= 0, ``seq_len``
    >= 1, not more tokens than one draw holds), ``rng`` a seed."""
    def checked(self, n, seq_len, rng, **params):
        check_draw_size(n, seq_len)
        if validate.integer("seq_len", seq_len) < 1:
            raise ValueError(f"seq_len must be an integer >= 1, got {seq_len}")
        return sample(self, n, seq_len, validate.seed("rng", rng), **params)

    update_wrapper(checked, sample)
    del checked.__wrapped__   # the signature shown is the task's own; the checks are not to be bypassed
    return checked


@lru_cache(maxsize=4)
def _train_pool(task: Task, seed: int, seq_len: int) -> np.ndarray:
    return task.sample(task.train_size, seq_len, [seed, TRAIN_POOL_STREAM], **task.train_params)

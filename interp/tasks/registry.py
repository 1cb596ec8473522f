"""Your own task: the data-side counterpart of :mod:`models.mechanisms`.

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

Registered under NAME, a task is what ``glitchlens data/train/eval/diagnose/hunt --task NAME``
runs, and what a checkpoint records (its training config's ``task``). Three ways to register
one, each ending in :func:`register_task`:

- in code: ``interp.tasks.register_task(MyTask())``;
- an entry point of an installed package in the group ``glitchlens.tasks``, named by the task
  (``mytask = "mypkg.tasks:MyTask"``), loaded when a name that nothing registered is looked up;
- the environment variable ``GLITCHLENS_TASKS``, comma-separated specs ``MODULE:CLASS``; the
  command line's ``--task MODULE:CLASS`` adds the spec to it (so that the runs a command starts
  find the task too) and uses the class's ``name``.

``glitchlens check-task`` (:mod:`interp.tasks.contract`) tests a task against the contract.
Pure numpy, like the rest of :mod:`interp.tasks`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points

import numpy as np

ENTRY_POINT_GROUP = "glitchlens.tasks"
ENVIRONMENT_VARIABLE = "GLITCHLENS_TASKS"
GUIDE = 'docs/guide.md "Your own task"'
NAME = re.compile(r"[a-z][a-z0-9_-]*")
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

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

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
        seq_len = seq_len or self.seq_len
        if self.train_size is None:
            return self.sample(batch_size, seq_len, [seed, step], **self.train_params)
        pool = _train_pool(self, seed, seq_len)
        drawn = np.arange(step * batch_size, (step + 1) * batch_size)   # the rows drawn so far, in order
        passes = drawn // len(pool)
        orders = {int(p): np.random.default_rng([seed, int(p)]).permutation(len(pool)) for p in np.unique(passes)}
        return pool[[orders[int(p)][i % len(pool)] for p, i in zip(passes, drawn)]]

    def load_split(self, name: str, n: int | None = None) -> np.ndarray:
        """The first ``n`` sequences (default: all) of the canonical split ``name``."""
        if name not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {name!r}; choose one of {', '.join(self.splits)}")
        split = self.splits[name]
        n = split.size if n is None else n
        if not 0 < n <= split.size:
            raise ValueError(f"split {name!r} of task {self.name!r} has {split.size} sequences; asked for n={n}")
        return self.sample(n, split.seq_len, split.seed, **split.params)

    def format(self, tokens) -> str:
        return " ".join(self.labels(tokens))


@lru_cache(maxsize=4)
def _train_pool(task: Task, seed: int, seq_len: int) -> np.ndarray:
    return task.sample(task.train_size, seq_len, [seed, TRAIN_POOL_STREAM], **task.train_params)


_TASKS: dict[str, Task] = {}
BUILT_IN = ("flipflop", "automaton", "counting", "counting-3", "counting-5", "selective-copy")
_BUILTINS_LOADED = False


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from interp.tasks import builtin, counting, selective_copy  # noqa: F401  (they register themselves)


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register_task(task: Task) -> Task:
    """Register ``task`` (an instance of a :class:`Task` subclass) under ``task.name``; returns it.
    Registering the same class again under its name replaces it (a notebook cell run twice); a
    name taken by another class is refused."""
    if isinstance(task, type):
        raise ValueError(f"register an instance of {task.__name__}, e.g. register_task({task.__name__}())")
    if not isinstance(task, Task):
        raise ValueError(f"{task!r} is not an interp.tasks.Task ({GUIDE})")
    if not isinstance(task.name, str) or not NAME.fullmatch(task.name):
        raise ValueError(f"task name {task.name!r}: use lower-case letters, digits, - and _, starting with a letter")
    if not task.vocab or len(set(task.vocab)) != len(task.vocab) or len(task.vocab) > 256:
        raise ValueError(f"task {task.name!r}: vocab must be 1 to 256 distinct strings, one per token id")
    known = _TASKS.get(task.name)
    if known is not None and class_path(type(known)) != class_path(type(task)):
        raise ValueError(f"task {task.name!r} is already registered as {class_path(type(known))}; name "
                         f"{class_path(type(task))} otherwise")
    _TASKS[task.name] = task
    return task


def load_spec(spec: str) -> str:
    """Import the :class:`Task` class ``MODULE:CLASS`` names, register an instance; returns its name."""
    from models.mechanisms import import_spec

    cls = import_spec("task", spec, spec.strip(), "a task name or MODULE:CLASS, e.g. mypkg.tasks:ParityTask")
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        qualname = spec.strip().partition(":")[2]
        raise ValueError(f"task spec {spec!r}: {qualname} is not a subclass of interp.tasks.Task ({GUIDE})")
    return register_task(cls()).name


def environment_specs() -> list[str]:
    return [spec.strip() for spec in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",") if spec.strip()]


def export(spec: str) -> None:
    """Add ``spec`` to ``GLITCHLENS_TASKS`` here, which the processes this one starts inherit."""
    specs = environment_specs()
    if spec not in specs:
        os.environ[ENVIRONMENT_VARIABLE] = ",".join([*specs, spec])


def resolve(name_or_spec: str) -> str:
    """The registered name of a task name or a ``MODULE:CLASS`` spec (imported, registered and
    exported to ``GLITCHLENS_TASKS``)."""
    if ":" in name_or_spec:
        name = load_spec(name_or_spec)
        export(name_or_spec)
        return name
    get_task(name_or_spec)
    return name_or_spec


def get_task(name: str) -> Task:
    """The task registered as ``name``, registering it first from an entry point of that name or
    from ``GLITCHLENS_TASKS``; a one-line error naming the known tasks otherwise."""
    _load_builtins()
    if name in _TASKS:
        return _TASKS[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            try:
                cls = ep.load()
            except (ImportError, AttributeError) as err:
                raise ValueError(f"task {name!r}: its entry point {ep.value} does not load ({err})") from err
            task = cls() if isinstance(cls, type) else cls
            if task.name != name:
                raise ValueError(f"task {name!r}: its entry point {ep.value} names a task called {task.name!r}")
            return register_task(task)
    for spec in environment_specs():
        load_spec(spec)
    if name in _TASKS:
        return _TASKS[name]
    raise ValueError(f"unknown task {name!r}; choose one of {', '.join(task_names())}, or register your own: "
                     f"interp.tasks.register_task(MyTask()), GLITCHLENS_TASKS=MODULE:CLASS or --task MODULE:CLASS, "
                     f"or a {ENTRY_POINT_GROUP!r} entry point ({GUIDE})")


def task_names() -> list[str]:
    """Every task known now: the registered ones and the names the entry points declare."""
    _load_builtins()
    declared = sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
    built_in = [name for name in BUILT_IN if name in _TASKS]
    return [*built_in, *(name for name in _TASKS if name not in BUILT_IN),
            *(name for name in declared if name not in _TASKS)]


def write_token_file(task: Task, tokens: np.ndarray, path) -> "os.PathLike":
    """Write ``tokens [n, T]`` of ``task`` as JSONL, one ``{"task", "tokens", "text"}`` object per
    sequence (``text``: the tokens' strings, space-separated). Flip-flop files keep their own
    format (:func:`interp.tasks.write_sequences`)."""
    import json
    from pathlib import Path

    path = Path(path)
    if path.suffix != ".jsonl":
        raise ValueError(f"{path}: sequences of the {task.name} task are written as .jsonl")
    with open(path, "w") as f:
        for row in tokens:
            f.write(json.dumps({"task": task.name, "tokens": row.tolist(), "text": task.format(row)}) + "\n")
    return path

"""Your own task, registered under a name: the data-side counterpart of :mod:`models.mechanisms`.
What a task is, its contract, is :class:`interp.tasks.task.Task`.

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
from importlib.metadata import entry_points

import numpy as np

from interp.tasks.task import Task
from models import validate

ENTRY_POINT_GROUP = "glitchlens.tasks"
ENVIRONMENT_VARIABLE = "GLITCHLENS_TASKS"
# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {ENVIRONMENT_VARIABLE: (
    "", "comma-separated MODULE:CLASS tasks to import and register before a task name is looked up; a command "
        "given a task as MODULE:CLASS adds to it, so that the processes it starts register it too")}
GUIDE = 'docs/how-to/add-a-task.md "Your own task"'
NAME = re.compile(r"[a-z][a-z0-9_-]*")
_TASKS: dict[str, Task] = {}
BUILT_IN = ("flipflop", "automaton", "counting", "counting-3", "counting-5", "selective-copy", "light-switch")
_BUILTINS_LOADED = False


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from interp.tasks import builtin, counting, light_switch, selective_copy

        for task in (*builtin.TASKS, *counting.TASKS, *selective_copy.TASKS, *light_switch.TASKS):
            register_task(task)


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def register_task(task: Task) -> Task:
    """Register ``task`` (an instance of a :class:`Task` subclass) under ``task.name``; returns it.
    Registering the same class again under its name replaces it (a notebook cell run twice); a
    name taken by another class is refused."""
    if isinstance(task, type):
        raise ValueError(f"register an instance of {task.__name__}, e.g. register_task({task.__name__}())")
    if not isinstance(task, Task):
        raise ValueError(f"task {validate.shown(task)} is not an interp.tasks.Task ({GUIDE})")
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
    validate.text("name", name)
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

    from interp.outputs import staged_file

    path = Path(path)
    if path.suffix != ".jsonl":
        raise ValueError(f"{path}: sequences of the {task.name} task are written as .jsonl")
    with staged_file(path, overwrite=True) as tmp:   # a fresh file renamed into place, never through a link
        tmp.write_text("".join(json.dumps({"task": task.name, "tokens": row.tolist(), "text": task.format(row)}) + "\n"
                               for row in tokens))
    return path

"""Every public function of ``interp.metrics``, ``interp.tasks``, ``interp.circuits`` and
``models``, and the data-taking methods of every built-in task, called with random dtypes,
shapes and values, either returns or raises a ``ValueError`` or ``TypeError`` that names one of
its arguments (or shows the argument's value, as "unknown task 'x'" does): never a numpy,
pandas or torch error from inside it that names none.

The functions are enumerated from the packages' exports, so a new one is covered without a line
here; the few that cannot be called generically are in ``SKIPPED``, each with its reason. The
exported classes are records (``ModelConfig``, whose fields have their own fuzz test in
tests/test_validation.py, ``Split``, ``TaskSplit``, ``ReadPairs``) and are not called. The
values mix nonsense (NaN, complex, bool and int8 tensors, empty maps, negative sizes, strings)
with pieces of one small consistent world (flip-flop tokens ``[2, 8]``, their maps ``[2, 1, 8,
8]``, a read table, a tiny model), so that a call gets past its first check often enough for
the later ones to be reached.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re

import jaxtyping
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interp.tasks import FlipFlopFormatError

PACKAGES = ("interp.metrics", "interp.tasks", "interp.circuits", "models")
# Called on each built-in task (interp.tasks.get_task(name).METHOD): the methods that take a
# caller's sizes, seeds and names
TASK_METHODS = ("sample", "load_split", "train_batch")
SKIPPED = {
    "interp.tasks.read_sequences": "reads a file: its checks (links, sizes, formats) are tests/test_text.py's",
    "interp.tasks.write_sequences": "writes a file: its checks are tests/test_text.py's",
    "models.save": "writes a checkpoint directory: its checks are tests/test_checkpoint.py's",
    "models.load": "reads a checkpoint directory: its checks are tests/test_checkpoint.py's and probe_hostile.py's",
    "models.read_config": "reads a checkpoint's config.json: its checks are tests/test_checkpoint.py's",
}


def public_functions() -> dict[str, object]:
    """``{qualified name: function}`` of every function the packages export, and the task methods."""
    found = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]:
            value = getattr(module, name)
            if inspect.isfunction(value) and f"{package}.{name}" not in SKIPPED:
                found[f"{package}.{name}"] = value
    from interp.tasks import get_task, task_names

    for task in task_names():
        for method in TASK_METHODS:
            found[f"get_task({task!r}).{method}"] = getattr(get_task(task), method)
    return found


FUNCTIONS = public_functions()


def world() -> dict[str, object]:
    """One small consistent set of arguments: tokens, their maps, reads, frames, a tiny model."""
    from interp.metrics import bit_carriers_in_tokens, read_table, sparsity
    from interp.tasks import sample_ffl
    from models import ModelConfig, build_model

    tokens = sample_ffl(2, 8, rng=0)
    logits = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    pattern = logits.masked_fill(~torch.ones(8, 8, dtype=torch.bool).tril(), -math.inf).softmax(-1)
    reads = read_table(tokens, tokens[:, 1:])
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=16)).eval()
    return {"tokens": tokens, "tokens_tensor": torch.from_numpy(tokens).long(), "inputs": tokens[:, :-1],
            "pattern": pattern, "maps": {0: pattern, 1: pattern}, "map_list": [pattern],
            "carriers": bit_carriers_in_tokens(tokens), "reads": reads, "glitches": reads.head(1),
            "frame": sparsity(pattern), "empty_frame": pd.DataFrame(), "model": model,
            "hook": "blocks.0.attn.hook_pattern", "hooks": ["blocks.0.attn.hook_pattern"],
            "read_positions": torch.tensor([6, 6]), "positions": [0, -1], "identity": lambda act, hook: act}


WORLD = world()
SCALARS = [-2, -1, 0, 1, 2, 3, 8, 64, 10**30, 2.5, -0.5, 0.5, 1.0, math.nan, math.inf, -math.inf, True, False, None,
           1 + 2j, "", "x", "pattern", "iid", "sparse", "tra-mech", "flipflop", "counting", "nosuch.hook", "mean",
           "layer", "value", (), [], {}, [0, 1], (2, 3), [1.5], ["layer"], ("head",), [[0, 1], [1]], object()]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int8, torch.uint8, torch.bool,
          torch.complex64]
SHAPES = [(), (0,), (3,), (2, 8), (2, 7), (2, 1, 8, 8), (1, 2, 3, 4), (2, 0, 8, 8), (0, 8), (2, 1, 8, 7)]


@st.composite
def arrays(draw):
    """A tensor or numpy array of a random dtype and shape, its values small, random or non-finite."""
    dtype, shape = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(SHAPES))
    fill = draw(st.sampled_from(["zeros", "small", "random", "nan", "inf", "negative"]))
    base = torch.randint(0, 5, shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 3))))
    values = {"zeros": base * 0, "small": base, "random": base * 0.37, "nan": base * math.nan,
              "inf": base * math.inf, "negative": -base}[fill]
    if not (dtype.is_floating_point or dtype.is_complex):
        values = torch.nan_to_num(values.double(), nan=0, posinf=127, neginf=-127)
    tensor = values.to(dtype)
    return tensor.numpy() if draw(st.booleans()) and dtype != torch.bfloat16 else tensor


VALUES = st.one_of(st.sampled_from(SCALARS), arrays(), st.sampled_from(list(WORLD.values())))
# The world's value for a parameter of this name, drawn half the time, so that a call often gets
# past its first argument's checks to the later ones
MATCHING = {"tokens": "tokens", "clean_tokens": "tokens_tensor", "corrupt_tokens": "tokens_tensor",
            "inputs": "inputs", "maps": "maps", "view_1": "maps", "view_2": "maps", "scores": "maps",
            "pattern": "pattern", "content": "pattern", "position_term": "pattern", "a": "pattern",
            "reads": "reads", "glitches": "glitches", "table": "frame", "frame": "frame", "counts": "frame",
            "sink_frame": "frame", "model": "model", "carriers": "carriers", "hook_names": "hooks",
            "name": "hook", "predicted": "tokens"}


def argument(name: str):
    """Values for the parameter ``name``: anything, or half the time the world's value of that name."""
    return st.one_of(VALUES, st.just(WORLD[MATCHING[name]])) if name in MATCHING else VALUES


def names_an_argument(message: str, arguments: dict[str, object], parameters) -> bool:
    """Whether ``message`` names a parameter, or shows the value of a string or path argument."""
    if any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9])", message) for name in parameters):
        return True
    return any(isinstance(v, (str, os.PathLike)) and (str(v) and str(v) in message or repr(str(v)) in message)
               for v in arguments.values())


@pytest.fixture(scope="module", autouse=True)
def in_a_scratch_directory(tmp_path_factory):
    """A function given a relative path writes there, not into the repository."""
    previous = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("api"))
    yield
    os.chdir(previous)


@pytest.mark.parametrize("qualified", sorted(FUNCTIONS))
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_a_public_function_returns_or_names_the_argument_it_refuses(qualified, data):
    function = FUNCTIONS[qualified]
    if inspect.isfunction(function) and data.draw(st.booleans(), label="unwrapped"):   # the body's own checks,
        # without the suite's shape checks (tests/conftest.py), as a user's program runs them
        function = inspect.unwrap(function)
    parameters = {name: p for name, p in inspect.signature(function).parameters.items()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    arguments = {}
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty or data.draw(st.booleans(), label=f"set {name}"):
            arguments[name] = data.draw(argument(name), label=name)
    try:
        function(**arguments)
    except FlipFlopFormatError:   # a text or token array that breaks the language: it names sequence and position
        pass
    except jaxtyping.TypeCheckError as err:        # the suite's shape checks: they name the parameter
        assert re.search(r"parameter .(\w+).", str(err)), str(err)[:300]
    except (ValueError, TypeError) as err:
        message = str(err)
        assert names_an_argument(message, arguments, parameters), \
            f"{qualified}: {type(err).__name__} names no argument: {message[:300]}"
        assert "\n" not in message.strip(), f"{qualified}: a message of several lines: {message[:300]}"


def test_every_package_function_is_called_or_skipped_with_a_reason():
    for qualified in SKIPPED:
        package, name = qualified.rsplit(".", 1)
        assert inspect.isfunction(getattr(importlib.import_module(package), name)), qualified
    assert len(FUNCTIONS) > 80

"""The checks of the public API's arguments, shared by ``models``, ``interp.metrics``,
``interp.tasks`` and ``interp.circuits`` (here, since ``models`` never imports ``interp``).

Each check returns the argument in the form the function computes with, or raises one line
that names the argument, says what it must be and shows what it got: a ``TypeError`` for the
wrong kind of value (a float where an integer is needed, a complex or bool tensor where a float
one is), a ``ValueError`` for the right kind with an impossible value (a negative count, a NaN,
a shape the function cannot read). A numpy, pandas or torch error from deep inside a function
names no argument; these do, before any work is done. Like the rest of ``models``' import path,
this module imports no torch: a value can only be a tensor once torch is loaded.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable, Mapping

import numpy as np

# The kinds of element an array may hold: the numpy dtype kinds each admits
KINDS = {"float": "f", "integer": "iu", "bool": "b", "real": "fiu", "any": "fiub"}
KIND_WORDS = {"float": "floating-point", "integer": "integer", "bool": "bool", "real": "real (integer or float)",
              "any": "real or bool"}


def is_tensor(value) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_array(value) -> bool:
    """Whether ``value`` is a numpy array or a torch tensor."""
    return isinstance(value, np.ndarray) or is_tensor(value)


def dtype_kind(value) -> str:
    """The numpy kind letter of an array's or a tensor's dtype: ``f``, ``i``, ``u``, ``b``, ``c``, ..."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind
    return "c" if value.is_complex() else "f" if value.is_floating_point() else "b" if value.dtype == sys.modules[
        "torch"].bool else "i"


def shown(value) -> str:
    """A short description of ``value`` for a message: an array's type, dtype and shape, else its repr."""
    if is_array(value):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    if hasattr(value, "shape") or "\n" in repr(value):   # frames, models: their repr spans lines
        return f"a {type(value).__name__}" + (f" of shape {tuple(value.shape)}" if hasattr(value, "shape") else "")
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    return f">= {low}" if low is not None else f"<= {high}" if high is not None else ""


def integer(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``[low, high]``; a bool or a float (even 2.0) is a ``TypeError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {shown(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {_bounds(low, high)}, got {value}")
    return value


def number(name: str, value, low: float | None = None, high: float | None = None, *, open_low: bool = False,
           open_high: bool = False) -> float:
    """``value`` as a finite ``float`` in ``[low, high]`` (``open_low``/``open_high``: the bound itself
    excluded); a bool, a complex or a string is a ``TypeError``, NaN and infinities a ``ValueError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {shown(value)}")
    value = float(value)
    outside = ((low is not None and (value < low or (open_low and value == low)))
               or (high is not None and (value > high or (open_high and value == high))))
    if not math.isfinite(value) or outside:
        if low is not None and high is not None:
            where = f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
        elif low is not None:
            where = f" {'>' if open_low else '>='} {low}"
        else:
            where = "" if high is None else f" {'<' if open_high else '<='} {high}"
        raise ValueError(f"{name} must be a finite number{where}, got {value}")
    return value


def text(name: str, value, choices: Iterable[str] | None = None) -> str:
    """``value``, a string (one of ``choices`` when given)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {shown(value)}")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def flag(name: str, value) -> bool:
    """``value``, a bool (not 0 or 1, which a mistyped argument often is)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def path(name: str, value):
    """``value``, a file-system path (a string or ``os.PathLike``), not empty."""
    if not isinstance(value, str) and not hasattr(value, "__fspath__"):
        raise TypeError(f"{name} must be a path (a string or os.PathLike), got {shown(value)}")
    if not str(value):
        raise ValueError(f"{name} must be a path, got an empty string")
    return value


def array(name: str, value, kind: str = "float", ndim: int | tuple[int, ...] | None = None, *,
          finite: bool = True, empty: bool = False, lists: bool = False):
    """``value``, a torch tensor or numpy array (with ``lists``, also a list or tuple, made a numpy
    array) of ``kind`` (``float``, ``integer``, ``bool``, ``real``), with ``ndim`` axes (or one of
    several), holding no NaN or infinity unless not ``finite``, and at least one entry unless
    ``empty``. Tensors stay tensors, arrays arrays."""
    if lists and isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)
        except (ValueError, TypeError):
            raise TypeError(f"{name} must be a rectangular list of numbers, got {shown(value)}") from None
    if not is_array(value):
        what = "a torch tensor, numpy array or list" if lists else "a torch tensor or numpy array"
        raise TypeError(f"{name} must be {what} of {KIND_WORDS[kind]} values, got {shown(value)}")
    if dtype_kind(value) not in KINDS[kind]:
        raise TypeError(f"{name} must hold {KIND_WORDS[kind]} values, got {shown(value)}")
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if allowed is not None and value.ndim not in allowed:
        axes = " or ".join(map(str, allowed))
        raise ValueError(f"{name} must have {axes} axes, got {shown(value)}")
    size = value.numel() if is_tensor(value) else value.size
    if not empty and not size:
        raise ValueError(f"{name} is empty ({shown(value)}); it needs at least one entry")
    if finite and dtype_kind(value) == "f" and size and not bool(
            value.isfinite().all() if is_tensor(value) else np.isfinite(value).all()):
        raise ValueError(f"{name} holds NaN or infinite values ({shown(value)}); a diverged run's values have no "
                         "meaningful result")
    return value


def integers(name: str, values, low: int | None = None, empty: bool = False) -> list[int]:
    """``values``, a sequence of integers >= ``low`` (not empty unless ``empty``), as a list; a
    string is a ``TypeError``."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of integers, got {shown(values)}")
    if is_array(values):
        values = array(name, values, "integer", (0, 1), empty=True).tolist()
        values = [values] if isinstance(values, int) else values
    values = [integer(f"{name}[{i}]", v, low) for i, v in enumerate(values)]
    if not values and not empty:
        raise ValueError(f"{name} is empty; it needs at least one integer")
    return values


def reals(name: str, values, low: float | None = None, high: float | None = None) -> list[float]:
    """``values``, a non-empty sequence of finite numbers in ``[low, high]``, as a list of the numbers
    as given (checked, not converted: an integer stays an integer, e.g. for a chart's tick labels)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of numbers, got {shown(values)}")
    if is_array(values):
        values = array(name, values, "real", (0, 1), empty=True).reshape(-1).tolist()
    values = list(values)
    for i, v in enumerate(values):
        number(f"{name}[{i}]", v, low, high)
    if not values:
        raise ValueError(f"{name} is empty; it needs at least one number")
    return values


def strings(name: str, values, empty: bool = True) -> list[str]:
    """``values``, one string or a sequence of strings (column names, hook names), as a list (not
    empty unless ``empty``)."""
    if isinstance(values, str):
        return [values]
    if isinstance(values, (bytes, Mapping)) or not isinstance(values, Iterable) or is_array(values):
        raise TypeError(f"{name} must be a string or a sequence of strings, got {shown(values)}")
    values = [text(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if not values and not empty:
        raise ValueError(f"{name} is empty; name at least one")
    return values


def seed(name: str, value):
    """``value``, what ``numpy.random.default_rng`` takes: None, an integer >= 0, a non-empty list of
    them, or a numpy ``Generator``, ``SeedSequence`` or ``BitGenerator``."""
    if value is None or isinstance(value, (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)):
        return value
    if isinstance(value, (list, tuple)) and value:
        return [integer(f"{name}[{i}]", v, 0) for i, v in enumerate(value)]
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return integer(name, value, 0)
    raise TypeError(f"{name} must be a seed (an integer >= 0, a list of them, or a numpy Generator), got "
                    f"{shown(value)}")


def device(name: str, value):
    """``value`` as a ``torch.device`` (``"cpu"``, ``"cuda:0"``, a device)."""
    import torch

    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"{name} must be a device name such as 'cpu' or 'cuda', got {shown(value)}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name} {value!r} is not a device name (cpu, cuda, cuda:0, mps)") from None


def sequence(name: str, values) -> list:
    """``values``, a list or tuple (of hooks, pairs, ...), as a list."""
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list, got {shown(values)}")
    return list(values)


def frame(name: str, value, columns: Iterable[str] = (), empty: bool = True):
    """``value``, a pandas DataFrame holding the ``columns`` (and a row, unless ``empty``)."""
    import pandas as pd

    if not isinstance(value, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame, got {shown(value)}")
    missing = [c for c in columns if c not in value.columns]
    if missing:
        raise ValueError(f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(it has {', '.join(map(str, value.columns)) or 'none'})")
    if not empty and value.empty:
        raise ValueError(f"{name} has no rows")
    return value


def model(name: str, value):
    """``value``, a GlitchLens model (a hooked ``nn.Module`` with a ``cfg``: ``build_model``,
    ``load``, ``load_pretrained``)."""
    torch = sys.modules.get("torch")
    if not (torch and isinstance(value, torch.nn.Module) and hasattr(value, "cfg") and hasattr(value, "hook_dict")):
        raise TypeError(f"{name} must be a GlitchLens model (models.build_model, models.load, "
                        f"models.load_pretrained), got {shown(value)}")
    return value


def function(name: str, value):
    """``value``, something callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {shown(value)}")
    return value

"""The shapes in the signatures: the public API states its tensors' shapes with jaxtyping, and
the suite checks them (``conftest.SHAPE_CHECKED``: every call into those modules is checked by
beartype, the axes bound across the arguments of one call)."""

import importlib
import inspect
import pkgutil
import typing

import jaxtyping
import numpy as np
import pytest
import torch

import interp.metrics
from kernels.forgetting.reference import forgetting_reference
from models.attention import REGISTRY


def mentions(hint, kinds: tuple[type, ...]) -> bool:
    """Whether ``hint`` is, or holds (in a union, a container, a callable), a class of ``kinds``."""
    if isinstance(hint, list):  # a callable's parameters
        return any(mentions(arg, kinds) for arg in hint)
    if isinstance(hint, type) and issubclass(hint, kinds):
        return True
    return any(mentions(arg, kinds) for arg in typing.get_args(hint))


def has_shapes(fn) -> bool:
    return any(mentions(hint, (jaxtyping.AbstractArray,)) for hint in typing.get_type_hints(fn).values())


def takes_no_array(fn) -> bool:
    """Every parameter annotated, and no annotation an array: a function of frames and scalars."""
    annotated = typing.get_type_hints(fn)
    return (all(name in annotated for name in inspect.signature(fn).parameters)
            and not any(mentions(hint, (torch.Tensor, np.ndarray)) for hint in annotated.values()))


def metric_functions():
    for info in pkgutil.iter_modules(interp.metrics.__path__):
        module = importlib.import_module(f"interp.metrics.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_"):
                yield f"{module.__name__}.{name}", fn


def test_every_metric_states_its_shapes():
    """Each public function of ``interp.metrics`` has a jaxtyping-annotated tensor (or array)
    among its parameters or its return, unless it takes and returns no array at all."""
    functions = dict(metric_functions())
    assert len(functions) > 40
    unshaped = [name for name, fn in functions.items() if not has_shapes(fn) and not takes_no_array(fn)]
    assert not unshaped, f"no jaxtyping shapes on {unshaped}"


@pytest.mark.parametrize("mechanism", sorted(name for name, cls in REGISTRY.items()
                                             if cls.__module__.startswith("models.attention.")))
def test_every_mechanism_states_the_shapes_of_attend(mechanism):
    attend = typing.get_type_hints(REGISTRY[mechanism].attend)
    unshaped = [name for name in ("q", "k", "v", "x", "positions", "return")
                if not mentions(attend[name], (jaxtyping.AbstractArray,))]
    assert not unshaped, f"{REGISTRY[mechanism].__qualname__}.attend has no jaxtyping shapes on {unshaped}"


@pytest.mark.parametrize("op", ["cope", "forgetting", "threshold", "tra"])
def test_every_kernel_reference_states_its_shapes(op):
    module = importlib.import_module(f"kernels.{op}.reference")
    references = [fn for name, fn in inspect.getmembers(module, inspect.isfunction) if name.endswith("_reference")]
    assert references
    unshaped = [fn.__name__ for fn in references if not has_shapes(fn)]
    assert not unshaped, f"no jaxtyping shapes on {unshaped} of {module.__name__}"


def test_a_metric_given_the_wrong_shape_fails_naming_the_axis():
    """The views of one head count each: the check binds ``head`` across both arguments."""
    with pytest.raises(jaxtyping.TypeCheckError, match="head=2") as err:
        interp.metrics.cross_view_correlation({0: torch.rand(1, 2, 4, 4)}, {0: torch.rand(1, 3, 4, 4)})
    assert "view_2" in str(err.value)


def test_a_kernel_reference_given_the_wrong_shape_fails_naming_the_axis():
    q = torch.randn(1, 5, 2, 4)
    with pytest.raises(jaxtyping.TypeCheckError, match="pos=5") as err:
        forgetting_reference(q, q, q, torch.zeros(1, 2, 6))
    assert "log_f" in str(err.value) and "batch head pos" in str(err.value)

"""Your own attention mechanism: register a class under a name, and find it again in a fresh process.

A mechanism is a subclass of :class:`models.attention.Attention`, whose docstring is the contract:
``attend(q, k, v, x, positions=None)`` maps ``q, k, v`` ``[batch, pos, head, d_head]`` (and the
block input ``x``) to ``z`` ``[batch, pos, head, d_head]``, passing its score matrix, its logits and
the weights it applies to ``v`` through ``hook_attn_scores``, ``hook_attn_logits`` and
``hook_pattern`` (``[batch, head, query_pos, key_pos]``); any ``HookPoint`` attribute of its own,
named ``hook_*``, is a hook like the others. Registered under NAME, the mechanism is a model name
like ``tra``: ``ModelConfig(model=NAME)``, ``glitchlens train --model NAME``, and every tool that
loads the checkpoint. ``glitchlens check-mechanism`` (:mod:`interp.conformance`) tests a class
against the contract.

Three ways to register one, each ending in :func:`register_mechanism`:

- in code: ``models.register_mechanism("sigmoid", SigmoidAttention)``;
- an entry point of an installed package in the group ``glitchlens.mechanisms``, named by the
  mechanism (``sigmoid = "mypkg.attention:SigmoidAttention"`` under
  ``[project.entry-points."glitchlens.mechanisms"]``), imported when a config first names it;
- the environment variable ``GLITCHLENS_MECHANISMS``, comma-separated specs ``[NAME=]MODULE:CLASS``,
  imported when a name that nothing registered is looked up, and by the command line when it
  starts; ``glitchlens COMMAND --mechanism SPEC`` adds a spec to it, so that the processes the
  command starts (the runs of a sweep) find the mechanism too. Without ``NAME=`` the name is the
  class's, lower-cased, less a trailing ``Attention`` (``SigmoidAttention``: ``sigmoid``).

Nothing else imports code. A checkpoint of a registered mechanism records its name and class
(``config.json``'s ``"mechanism"``); loading it where the mechanism is not registered is an error
that names both and says how to register it: the class it records is never imported.

This module imports no torch until a mechanism is registered, so that the command line's
``--help`` can list the names the entry points declare.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from typing import Any

# name -> (attention mechanism in models.attention.REGISTRY, residual position embedding,
#          default attention options). ``lstm`` has no attention. A mechanism of one's own adds
#          its name here when it is registered (:func:`register_mechanism`).
MODEL_FAMILIES: dict[str, tuple[str | None, str, dict[str, Any]]] = {
    "nope": ("softmax", "none", {}),
    "ape": ("softmax", "learned", {}),
    "label": ("softmax", "label", {}),
    "rel": ("softmax", "none", {"bias": "rel"}),
    "alibi": ("softmax", "none", {"bias": "alibi"}),
    "rope": ("softmax", "none", {"rope": True}),
    "shaw": ("shaw", "none", {}),
    "tra": ("tra", "none", {}),
    "fot": ("fot", "none", {}),
    "cope": ("cope", "none", {}),
    "diff": ("diff", "none", {}),
    "tda": ("tda", "none", {}),
    "trela": ("trela", "none", {}),
    "lstm": (None, "none", {}),
}

ENTRY_POINT_GROUP = "glitchlens.mechanisms"
ENVIRONMENT_VARIABLE = "GLITCHLENS_MECHANISMS"
# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {ENVIRONMENT_VARIABLE: (
    "", "comma-separated [NAME=]MODULE:CLASS attention mechanisms to import and register before a model name is "
        "looked up; `glitchlens --mechanism` adds to it, so that the processes a command starts register them too")}
GUIDE = 'docs/how-to/add-a-mechanism.md "Your own mechanism"'
# Names become run directories and comma-separated lists on the command line.
NAME = re.compile(r"[a-z][a-z0-9_]*")

_PLUGINS: dict[str, type] = {}   # name -> class, of the mechanisms registered through this module


def class_path(cls: type) -> str:
    """``MODULE:CLASS``, the spec that imports ``cls`` again (``__main__:...`` for a class
    defined in a notebook or a script)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register_mechanism(name: str, cls: type) -> type:
    """Make the attention class ``cls`` the model ``name``: its mechanism, no position embedding
    in the residual stream, the defaults of ``cls.Options``. Returns ``cls``.

    Registering a class again under its name does nothing, and so does a redefinition of it (a
    class of the same ``MODULE:CLASS``, as a notebook cell run twice makes), which replaces it.
    A name that is taken, or that is not lower-case letters, digits and ``_``, is refused, and
    so is a class that is not an :class:`models.attention.Attention` with an ``attend`` and a
    dataclass of options."""
    from models import validate
    from models.attention.base import REGISTRY, Attention, register

    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"mechanism name {validate.shown(name)}: use lower-case letters, digits and _, starting "
                         "with a letter")
    if not (isinstance(cls, type) and issubclass(cls, Attention)):
        raise ValueError(f"{name}: cls {validate.shown(cls)} is not a subclass of models.attention.Attention; a "
                         f"mechanism subclasses it and implements attend(q, k, v, x, positions=None) ({GUIDE})")
    if cls.attend is Attention.attend:
        raise ValueError(f"{name}: {class_path(cls)} does not implement attend(q, k, v, x, positions=None), which "
                         "maps q, k, v [batch, pos, head, d_head] to z [batch, pos, head, d_head]")
    if not dataclasses.is_dataclass(cls.Options):
        raise ValueError(f"{name}: {class_path(cls)}.Options must be a dataclass of the mechanism's options")
    known = _PLUGINS.get(name)
    if known is None and (name in MODEL_FAMILIES or name in REGISTRY):
        raise ValueError(f"{name!r} is a built-in model or mechanism of GlitchLens; register yours under another name")
    if known is not None and class_path(known) != class_path(cls):
        raise ValueError(f"mechanism {name!r} is already registered as {class_path(known)}; register "
                         f"{class_path(cls)} under another name")
    taken = [other for other, plugin in _PLUGINS.items() if plugin is cls and other != name]
    if taken:
        raise ValueError(f"{class_path(cls)} is already registered as {taken[0]!r}; a class has one name")
    register(name, replace=True)(cls)
    _PLUGINS[name] = cls
    MODEL_FAMILIES[name] = (name, "none", {})
    return cls


def built_in_names() -> list[str]:
    """The model names the project ships: :data:`MODEL_FAMILIES` without the plugins registered since."""
    return [name for name in MODEL_FAMILIES if name not in _PLUGINS]


def plugin_class(name: str) -> type | None:
    """The class registered under ``name`` through :func:`register_mechanism` (None for a
    built-in or unknown name)."""
    return _PLUGINS.get(name)


def default_name(cls_name: str) -> str:
    """The name a spec without ``NAME=`` registers a class under: ``SigmoidAttention``: ``sigmoid``."""
    lowered = cls_name.lower()
    return lowered.removesuffix("attention") or lowered


def import_spec(kind: str, spec: str, target: str, example: str):
    """The object ``target`` (``MODULE:QUALNAME``) names, for the ``kind`` spec ``spec`` (a
    mechanism's, a task's); whatever goes wrong, a missing module, a syntax error or the module's
    own code failing or exiting, is a one-line ``ValueError`` naming the spec."""
    module_name, colon, qualname = target.partition(":")
    if not colon or not module_name or not qualname:
        raise ValueError(f"{kind} spec {spec!r}: expected {example}")
    try:
        found = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except ImportError as err:
        raise ValueError(f"{kind} spec {spec!r}: cannot import {module_name} ({err}); is it installed or on "
                         "PYTHONPATH?") from err
    except AttributeError:
        raise ValueError(f"{kind} spec {spec!r}: module {module_name} has no {qualname}") from None
    except (Exception, SystemExit) as err:   # a syntax error, or the module's own code failing (or exiting)
        raise ValueError(f"{kind} spec {spec!r}: importing {module_name} failed ({type(err).__name__}: "
                         f"{err})") from None
    return found


def load_spec(spec: str) -> str:
    """Import the class that ``spec`` (``[NAME=]MODULE:CLASS``) names and register it; returns
    its name. A class its module already registered keeps that name unless ``NAME=`` says
    otherwise."""
    name, _, target = spec.strip().rpartition("=")
    cls = import_spec("mechanism", spec, target,
                      "MODULE:CLASS or NAME=MODULE:CLASS, e.g. mypkg.attention:SigmoidAttention")
    qualname = target.partition(":")[2]
    registered = next((other for other, plugin in _PLUGINS.items() if plugin is cls), None)
    name = name or registered or default_name(getattr(cls, "__name__", qualname))
    if registered != name:
        register_mechanism(name, cls)
    return name


def environment_specs() -> list[str]:
    """The specs in ``GLITCHLENS_MECHANISMS``."""
    return [spec.strip() for spec in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",") if spec.strip()]


def load_environment() -> list[str]:
    """Register every mechanism ``GLITCHLENS_MECHANISMS`` names; returns their names."""
    return [load_spec(spec) for spec in environment_specs()]


def export(spec: str) -> None:
    """Add ``spec`` to ``GLITCHLENS_MECHANISMS`` in this process's environment, which the
    processes it starts inherit."""
    specs = environment_specs()
    if spec not in specs:
        os.environ[ENVIRONMENT_VARIABLE] = ",".join([*specs, spec])


def entry_point_names() -> list[str]:
    """The names the installed packages' ``glitchlens.mechanisms`` entry points declare
    (read from their metadata; nothing is imported)."""
    from importlib.metadata import entry_points   # here: it costs glitchlens --help a third of its start

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def find_mechanism(name: str) -> bool:
    """Whether ``name`` is a model name, registering it first from the entry point of that name
    or from ``GLITCHLENS_MECHANISMS`` when that is where it is."""
    if name in MODEL_FAMILIES:
        return True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            try:
                cls = ep.load()
            except (ImportError, AttributeError) as err:
                raise ValueError(f"mechanism {name!r}: its entry point {ep.value} (group {ENTRY_POINT_GROUP}) does "
                                 f"not load ({err})") from err
            register_mechanism(name, cls)
            return True
    load_environment()
    return name in MODEL_FAMILIES


def model_names() -> list[str]:
    """Every model name known now: the built-in ones, the registered mechanisms, and the names
    the entry points declare."""
    return [*MODEL_FAMILIES, *(name for name in entry_point_names() if name not in MODEL_FAMILIES)]


def how_to_register(name: str, spec: str = "MODULE:CLASS") -> str:
    """The ways to register a mechanism ``name`` whose class ``spec`` names."""
    return (f"register it: models.register_mechanism({name!r}, cls) in code, GLITCHLENS_MECHANISMS={spec} or "
            f"`glitchlens COMMAND --mechanism {spec}`, or a {ENTRY_POINT_GROUP!r} entry point named {name!r} ({GUIDE})")


def unknown_model(name: str) -> str:
    """The error for a model name that nothing registers."""
    return f"unknown model {name!r}; choose one of {', '.join(model_names())}, or {how_to_register(name)}"


def checkpoint_record(attention: str | None) -> dict[str, str] | None:
    """What a checkpoint records of a registered mechanism (None for a built-in one)."""
    cls = _PLUGINS.get(attention) if attention else None
    return None if cls is None else {"name": attention, "class": class_path(cls)}


def missing_from_checkpoint(record: dict[str, str]) -> str:
    """Why a checkpoint of the mechanism ``record`` names cannot load, and what to do."""
    name, path = record.get("name"), record.get("class", "MODULE:CLASS")
    if path.startswith("__main__:"):
        where = (f"its class {path.split(':', 1)[1]} was defined in a notebook or a script: run that definition "
                 f"and models.register_mechanism({name!r}, cls) before loading")
    else:
        where = how_to_register(name, f"{name}={path}")
    return (f"it was trained with the attention mechanism {name!r} (class {path}), which is not registered here; "
            f"{where}. GlitchLens never imports the class a checkpoint names by itself")


def registered_class_mismatch(model: object, record: object) -> str | None:
    """Why a checkpoint of ``model`` recording the mechanism ``record`` (``config.json``'s
    ``"mechanism"``, or None) must not load here: its model is a mechanism registered here
    under another class (another class's code would run on its weights), or records none. None
    when they agree, and for built-in models."""
    cls = _PLUGINS.get(model) if isinstance(model, str) else None
    if cls is None:
        return None
    recorded = record.get("class") if isinstance(record, dict) else None
    if recorded == class_path(cls):
        return None
    return (f"it was trained with the mechanism {model!r} of class {recorded or '(none recorded)'}, but {model!r} "
            f"is registered here as {class_path(cls)}: register the class it was trained with under that name")

"""What a model is: configs, the hooked backbone, attention mechanisms, checkpoints.
``register_mechanism`` makes an attention class of one's own a model (``models.mechanisms``).

``models`` never imports ``interp``. The configuration loads without torch; the checkpoint
functions, ``load_pretrained`` and the submodules that need torch are imported on first
use, so that ``glitchlens --help`` (which reads the model names and presets) starts at once.
"""

from importlib import import_module

from models.config import PRESETS, ModelConfig
from models.mechanisms import MODEL_FAMILIES

MODEL_NAMES = tuple(MODEL_FAMILIES)

# name -> the module that defines it, imported when the name is first read
_DEFINED_IN = {name: module for module, names in {
    "models.checkpoint": ("CheckpointError", "build_model", "load", "read_config", "save"),
    "models.pretrained": ("load_pretrained",),
    "models.mechanisms": ("register_mechanism",),
}.items() for name in names}
# reachable as ``models.X`` after a bare ``import models`` (``models.pretrained.info(...)``)
_SUBMODULES = ("checkpoint", "mechanisms", "pretrained")

__all__ = ["MODEL_FAMILIES", "MODEL_NAMES", "PRESETS", "ModelConfig", *_DEFINED_IN]


def __getattr__(name: str):
    if name in _DEFINED_IN:
        value = getattr(import_module(_DEFINED_IN[name]), name)
    elif name in _SUBMODULES:
        value = import_module(f"models.{name}")
    else:
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    globals()[name] = value
    return value

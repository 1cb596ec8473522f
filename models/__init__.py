"""What a model is: configs, the hooked backbone, attention mechanisms, checkpoints.

``models`` never imports ``interp``.
"""

from models.checkpoint import CheckpointError, build_model, load, read_config, save
from models.config import MODEL_FAMILIES, PRESETS, ModelConfig
from models.pretrained import load_pretrained

MODEL_NAMES = tuple(MODEL_FAMILIES)

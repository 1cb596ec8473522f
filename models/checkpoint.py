"""Checkpoints: a directory of ``config.json``, ``model.safetensors`` and, for resumable
training runs, ``training_state.safetensors``. Written atomically; loaded without ever
unpickling anything.

``config.json``::

    {"format": "glitchlens-checkpoint", "format_version": 1,
     "model": {...ModelConfig...}, "training": {...} | null, "metadata": {...}}
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from models.config import ModelConfig

FORMAT = "glitchlens-checkpoint"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
STATE_FILE = "training_state.safetensors"


class CheckpointError(ValueError):
    """A path that is not a loadable GlitchLens checkpoint; the message says why and what to do."""


def build_model(cfg: ModelConfig) -> torch.nn.Module:
    """The hooked model a config describes (the transformer, or the LSTM skyline)."""
    if cfg.model == "lstm":
        from models.lstm import LSTMModel

        return LSTMModel(cfg)
    from models.backbone import GlitchLensTransformer

    return GlitchLensTransformer(cfg)


def save(
    path: str | os.PathLike,
    model: torch.nn.Module,
    training: dict[str, Any] | None = None,
    training_state: dict[str, torch.Tensor] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory atomically: everything goes to a temporary sibling
    directory first, which then replaces ``path`` by rename, so an interrupted save
    never leaves a half-written checkpoint under ``path``. Other files already in
    ``path`` (a training log, a report) are carried over."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, tmp / MODEL_FILE)
        if training_state is not None:
            save_file({k: v.detach().cpu().contiguous() for k, v in training_state.items()}, tmp / STATE_FILE)
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model": model.cfg.to_dict(),
            "training": training,
            "metadata": metadata or {},
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = None
        if path.exists():
            for extra in path.iterdir():
                if extra.name not in (CONFIG_FILE, MODEL_FILE, STATE_FILE):
                    os.replace(extra, tmp / extra.name)
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed and checked ``config.json`` of a checkpoint directory."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not path.is_dir():
        hint = " It looks like a pickle; GlitchLens never unpickles files, since that can run code." \
            if _looks_pickled(path) else ""
        raise CheckpointError(
            f"{path} is a file, not a GlitchLens checkpoint directory (config.json + model.safetensors).{hint}")
    config_file = path / CONFIG_FILE
    if not config_file.exists():
        raise CheckpointError(f"{path}: no {CONFIG_FILE}; this is not a GlitchLens checkpoint "
                              "(train one with `glitchlens train ... --out DIR`)")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_file}: not valid JSON ({err}); the file is corrupt or truncated") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{config_file}: not a GlitchLens config (missing \"format\": \"{FORMAT}\"); "
                              "the directory belongs to another tool")
    if config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{config_file}: format version {config.get('format_version')} is not supported "
                              f"(this GlitchLens reads version {FORMAT_VERSION})")
    return config


def _looks_pickled(path: Path) -> bool:
    """A pickle starts with the PROTO opcode (0x80) and ``torch.save`` writes a zip ("PK").
    A safetensors file starts with its 8-byte header length, which may begin with any byte,
    and then its JSON header: a file with ``{`` at offset 8 is never called a pickle."""
    with open(path, "rb") as f:
        head = f.read(9)
    if head[8:9] == b"{":
        return False
    return head[:1] == b"\x80" or head[:2] == b"PK"


def _load_tensors(file: Path) -> dict[str, torch.Tensor]:
    if not file.exists():
        raise CheckpointError(f"{file}: missing; the checkpoint is incomplete")
    if _looks_pickled(file):
        raise CheckpointError(f"{file}: this is a pickle, not safetensors; GlitchLens refuses to unpickle "
                              "files since that can run arbitrary code")
    try:
        return load_file(file)
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{file}: unreadable safetensors file ({err}); it is truncated or corrupt") from None


def load(path: str | os.PathLike, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Load a checkpoint's model, ready for ``run_with_cache`` / ``run_with_hooks`` (eval mode).

    The tensors must match the config exactly (same names and shapes); otherwise the error
    lists the differences.
    """
    path = Path(path)
    config = read_config(path)
    try:
        cfg = ModelConfig.from_dict(config["model"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path / CONFIG_FILE}: invalid model config ({err})") from None
    model = build_model(cfg)
    tensors = _load_tensors(path / MODEL_FILE)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(tensors) if expected[k].shape != tensors[k].shape)
    if missing or unexpected or wrong_shape:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if wrong_shape:
            details.append("shape mismatch " + ", ".join(
                f"{k}: config {tuple(expected[k].shape)} vs file {tuple(tensors[k].shape)}" for k in wrong_shape[:5]))
        raise CheckpointError(f"{path}: config.json does not match model.safetensors ({'; '.join(details)})")
    model.load_state_dict(tensors)
    return model.to(device).eval()


def load_training_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    return _load_tensors(Path(path) / STATE_FILE)

"""Checkpoints: a directory holding ``config.json`` and the safetensors files it names, the
model and, for resumable training runs, the optimiser state. Loaded without ever unpickling
anything.

Saving is atomic at every instant, for concurrent readers and across crashes (kill -9
included): each save writes its tensors under fresh names (``model.<tag>.safetensors``) beside
the old ones and fsyncs them; only then does a new ``config.json``, which names them, replace
the old one by rename(2). Whoever reads ``config.json`` therefore finds either the old
checkpoint or the new one, complete, under the same directory name. Afterwards the files the
old config named are deleted; a reader that read the old config and then finds its file gone
reads ``config.json`` again and gets the new checkpoint. Nothing else in the directory (a
training log, notes, a report) is moved or deleted. One writer per directory at a time.

``config.json``::

    {"format": "glitchlens-checkpoint", "format_version": 3,
     "files": {"model": "model.<tag>.safetensors", "training_state": "training_state.<tag>.safetensors"},
     "model": {...ModelConfig...}, "training": {...} | null, "metadata": {...}}

and, for a mechanism of one's own (``models.mechanisms``), ``"mechanism": {"name": ..., "class":
"MODULE:CLASS"}``: reading the tensors where that name is not registered is an error saying how
to register it, and so is a name registered here under another class (naming both); the class is
never imported from here.

Each tensor file of version 3 records, in its safetensors header (``__metadata__``), what wrote
it: ``role`` (``model`` or ``training_state``), ``architecture`` (the model name and every
config field that shapes the network, as JSON) and ``sha256``, a digest of its tensors (names,
dtypes, shapes and bytes; :func:`tensor_digest`), and, for a training run, ``task``, the task it
trained on. Loading refuses a file whose digest differs
(damaged data), whose architecture is not the one ``config.json`` describes (one model's
weights beside another's config), or whose task is not the one ``config.json`` records (an
edited ``task``), naming both sides. The tensors themselves are what version 2
wrote. A version-3 ``config.json`` holds every model-config field; one missing was removed by
hand and is an error naming it.

``config.json`` binds its parts: ``"sha256"`` maps each tensor file it names to the SHA-256 of
the file's bytes, checked when the file is read, so another run's file of the same architecture
copied under this checkpoint's name is refused (configs written before the field was added load
without the check). A ``"mechanism"`` record on a built-in model, or on another model than its
own, is refused. Every file is read through :func:`models.files.read_bytes` (a regular file of a
sane size, JSON of a sane depth). A save lists what it writes in the folder's manifest
(:data:`models.files.MANIFEST`) before writing it; the leftovers of an interrupted save that it
deletes are the ones listed there, and the manifest's own temporary files
(:data:`models.files.MANIFEST_TEMP`, which no list can name), never a user's file that merely has
the shape of a checkpoint's names.

Versions 1 (no ``files``; fixed names ``model.safetensors`` and ``training_state.safetensors``)
and 2 are still read, without the record (they have none), their missing model-config fields at
the defaults, which are what the code that wrote them did; the next save replaces them with
version 3. A tensor file that has a record is checked against it whatever ``format_version``
says (a version edited down never skips the checksum), and a version that is not one of these
integers (``true``, ``"3"``, 4) is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import secrets
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as dump_safetensors

from models import files as disk
from models import validate
from models.config import ModelConfig
from models.mechanisms import (checkpoint_record, find_mechanism, missing_from_checkpoint, plugin_class,
                               registered_class_mismatch)

FORMAT = "glitchlens-checkpoint"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
CONFIG_FILE = "config.json"
MODEL, TRAINING_STATE = "model", "training_state"
# Version 1's fixed names, which are also the roles' stems in version 2's tagged names.
V1_FILES = {MODEL: "model.safetensors", TRAINING_STATE: "training_state.safetensors"}
# What a save writes: tagged tensor files and the temporary config. Only names of this shape,
# not named by the current config, are ever deleted (leftovers of an interrupted save).
_OWN_FILE = re.compile(r"(model|training_state)\.[0-9a-f]{16}\.safetensors|\.config\.json\.[0-9a-f]{16}\.tmp")
# The model-config fields that shape the network, recorded in each tensor file of version 3.
ARCHITECTURE_FIELDS = ("model", "n_layers", "n_heads", "d_model", "d_mlp", "d_vocab", "n_ctx", "label_range",
                       "lstm_hidden", "attention_options", "norm_placement", "linear_bias")
# The first format version whose every save records a model-config field; fields not named here
# were recorded from version 1 on. From that version on a missing field is an error; older
# checkpoints predate it and take its default, the behaviour of the code that wrote them.
_RECORDED_SINCE = {name: 3 for name in ("norm_placement", "init", "linear_bias", "embedding_dropout",
                                        "attention_dropout", "mlp_hidden_dropout")}
_DERIVED_FIELDS = ("attention", "pos_embed")  # follow from ``model``; never read back
# A reader retries this often when saves keep replacing the files it was about to read.
_READ_ATTEMPTS = 20


class CheckpointError(ValueError):
    """A path that is not a loadable GlitchLens checkpoint; the message says why and what to do."""


def build_model(cfg: ModelConfig) -> torch.nn.Module:
    """The hooked model a config describes (the transformer, or the LSTM skyline)."""
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg must be a models.ModelConfig (ModelConfig.from_preset(...)), got {validate.shown(cfg)}")
    if cfg.model == "lstm":
        from models.lstm import LSTMModel

        return LSTMModel(cfg)
    from models.backbone import GlitchLensTransformer

    return GlitchLensTransformer(cfg)


def _write_synced(file: Path, data: bytes) -> None:
    with open(file, "xb") as f:  # "x": a tag collision must fail, never overwrite
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (the directory entry itself is data)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor, in name order: its name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def architecture(cfg: ModelConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that shape the network its tensors belong to."""
    return {name: getattr(cfg, name) for name in ARCHITECTURE_FIELDS}


def _tensor_bytes(tensors: dict[str, torch.Tensor], role: str, cfg: ModelConfig, task: str | None) -> bytes:
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    record = {"format": FORMAT, "role": role, "architecture": json.dumps(architecture(cfg), sort_keys=True),
              "sha256": tensor_digest(tensors), **({"task": task} if task else {})}
    return dump_safetensors(tensors, metadata=record)


def save(
    path: str | os.PathLike,
    model: torch.nn.Module,
    training: dict[str, Any] | None = None,
    training_state: dict[str, torch.Tensor] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint into directory ``path`` (created if needed), atomically: see the
    module docstring. Other files in ``path`` are left alone."""
    path, model = Path(validate.path("path", path)), validate.model("model", model)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file; a checkpoint is a directory: choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CheckpointError(f"cannot create checkpoint directory {path}: {err.strerror}") from None
    old = _named_files(path)
    tag = secrets.token_hex(8)
    files = {MODEL: f"{MODEL}.{tag}.safetensors"}
    if training_state is not None:
        files[TRAINING_STATE] = f"{TRAINING_STATE}.{tag}.safetensors"
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "files": files,
        "model": model.cfg.to_dict(),
        "training": training,
        "metadata": metadata or {},
    }
    mechanism = checkpoint_record(model.cfg.attention)
    if mechanism is not None:
        config["mechanism"] = mechanism
    tmp_config = path / f".{CONFIG_FILE}.{tag}.tmp"
    written = [path / name for name in files.values()] + [tmp_config]
    contents = {MODEL: _tensor_bytes(model.state_dict(), MODEL, model.cfg, trained_task(config))}
    if training_state is not None:
        contents[TRAINING_STATE] = _tensor_bytes(training_state, TRAINING_STATE, model.cfg, trained_task(config))
    config["sha256"] = {files[role]: hashlib.sha256(data).hexdigest() for role, data in contents.items()}
    try:
        # listed before they exist: a save killed midway leaves files the next save knows are its own
        disk.record(path, [file.name for file in written] + [CONFIG_FILE])
        for role, data in contents.items():
            _write_synced(path / files[role], data)
        _write_synced(tmp_config, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode())
        os.replace(tmp_config, path / CONFIG_FILE)  # the switch: one atomic rename
    except BaseException as err:
        # Remove only what this save wrote, and only if its switch did not happen: an
        # interrupt can land between the rename and the end of this block.
        if files[MODEL] not in _named_files(path):
            for file in written:
                file.unlink(missing_ok=True)
        if isinstance(err, (OSError, ValueError)) and not isinstance(err, CheckpointError):
            raise CheckpointError(f"cannot write checkpoint {path}: {err}; the previous checkpoint, "
                                  "if any, is unchanged") from None
        raise
    _fsync_dir(path)
    keep, ours = set(files.values()), disk.written(path)
    # the replaced checkpoint's parts (named by its config), and tensors of saves killed before
    # their switch (listed in the manifest); never a file a hand-edited config names
    gone = {name for name in old - keep if _OWN_FILE.fullmatch(name) or name in V1_FILES.values()}
    gone |= {name for name in ours - keep if _OWN_FILE.fullmatch(name)}
    # and the manifest's temporary files of saves killed while they wrote it: one writer per
    # directory, so no other save is writing one now
    stale = {file.name for file in path.iterdir() if disk.MANIFEST_TEMP.fullmatch(file.name)}
    for name in gone | stale:
        (path / name).unlink(missing_ok=True)
    disk.record(path, [], gone | {tmp_config.name})
    return path


def _named_files(path: Path) -> set[str]:
    """The tensor files the checkpoint in ``path`` consists of now (none if there is none).
    A ``config.json`` that is not a readable GlitchLens config is someone else's: refuse to
    replace it."""
    if not (path / CONFIG_FILE).exists():
        return set()
    try:
        return set(tensor_files(read_config(path)).values())
    except CheckpointError as err:
        raise CheckpointError(f"{err}; refusing to save over it: choose another directory") from None


def tensor_files(config: dict[str, Any]) -> dict[str, str]:
    """Role (``"model"``, ``"training_state"``) -> file name, of a checkpoint's config."""
    return config.get("files", V1_FILES)


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed and checked ``config.json`` of a checkpoint directory."""
    path = Path(validate.path("path", path))
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    if not path.is_dir():
        try:
            head = disk.read_bytes(path, "checkpoint", disk.MAX_JSON_BYTES)[:9]
        except ValueError:
            head = b""
        hint = " It looks like a pickle; GlitchLens never unpickles files, since that can run code." \
            if _looks_pickled(head) else ""
        raise CheckpointError(
            f"{path} is a file, not a GlitchLens checkpoint directory (config.json + safetensors).{hint}")
    config_file = path / CONFIG_FILE
    if not os.path.lexists(config_file):
        raise CheckpointError(f"{path}: no {CONFIG_FILE}; this is not a GlitchLens checkpoint "
                              "(train one with `glitchlens train ... --out DIR`)")
    try:
        config = disk.read_json(config_file, "checkpoint config")
    except ValueError as err:
        raise CheckpointError(f"{err}; the file is corrupt, truncated or not ours") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{config_file}: not a GlitchLens config (missing \"format\": \"{FORMAT}\"); "
                              "the directory belongs to another tool")
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise CheckpointError(f"{config_file}: format version {config.get('format_version')} is not supported "
                              f"(this GlitchLens reads versions {', '.join(map(str, READABLE_VERSIONS))})")
    training = config.get("training")
    if (not isinstance(config.get("model"), dict) or not isinstance(config.get("metadata"), dict)
            or not (training is None or isinstance(training, dict) and {"config", "step"} <= set(training))):
        raise CheckpointError(f"{config_file}: needs \"model\" (an object), \"training\" (null or an object "
                              "with \"config\" and \"step\") and \"metadata\"; the file was edited or is damaged")
    files = tensor_files(config)
    if (not isinstance(files, dict) or MODEL not in files
            or not all(isinstance(f, str) and f and Path(f).name == f for f in files.values())):
        raise CheckpointError(f"{config_file}: \"files\" must map \"model\" to a file name in the directory")
    foreign = {role: name for role, name in files.items()
               if not (role in V1_FILES and re.fullmatch(rf"{role}\.[0-9a-f]{{16}}\.safetensors", name))}
    if "files" in config and foreign:
        raise CheckpointError(f"{config_file}: \"files\" names {foreign}, which GlitchLens never writes (it writes "
                              "model.<16 hex digits>.safetensors and training_state.<...>.safetensors); the file "
                              "was edited")
    digests = config.get("sha256")
    if digests is not None and not (isinstance(digests, dict) and set(digests) == set(files.values()) and all(
            isinstance(d, str) and re.fullmatch(r"[0-9a-f]{64}", d) for d in digests.values())):
        raise CheckpointError(f"{config_file}: \"sha256\" must map each file that \"files\" names to its SHA-256 "
                              "digest; the file was edited")
    step = training["step"] if training else 0
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        raise CheckpointError(f"{config_file}: the training step must be an integer >= 0, got {step!r}; the file "
                              "was edited or is damaged")
    return config


def _looks_pickled(head: bytes) -> bool:
    """A pickle starts with the PROTO opcode (0x80) and ``torch.save`` writes a zip ("PK").
    A safetensors file starts with its 8-byte header length, which may begin with any byte,
    and then its JSON header: a file with ``{`` at offset 8 is never called a pickle."""
    if head[8:9] == b"{":
        return False
    return head[:1] == b"\x80" or head[:2] == b"PK"


def _parse_tensors(file: Path, data: bytes, role: str, version: int) -> dict[str, torch.Tensor]:
    """The tensors of ``data``, checked against the file's record of its role and its digest
    from format version 3 on, and whatever the version says when the file has a digest (a
    ``config.json`` edited down to an older version never skips the check)."""
    if _looks_pickled(data[:9]):
        raise CheckpointError(f"{file}: this is a pickle, not safetensors; GlitchLens refuses to unpickle "
                              "files since that can run arbitrary code")
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{file}: unreadable safetensors file ({err}); it is truncated or corrupt") from None
    record = tensor_record(data)
    if version < 3 and "sha256" not in record:
        return tensors
    if record.get("format") != FORMAT or record.get("role") != role or not {"architecture", "sha256"} <= set(record):
        raise CheckpointError(f"{file}: no GlitchLens record of what wrote it (role {role!r} and a checksum, which "
                              f"every file of a format version {version} checkpoint has); it was replaced by "
                              "another file")
    if tensor_digest(tensors) != record["sha256"]:
        raise CheckpointError(f"{file}: its tensors do not match their checksum (sha256 {record['sha256'][:12]}...); "
                              "the file is damaged: restore it or train again")
    return tensors


def tensor_record(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header (empty if it has none)."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]).get("__metadata__") or {}


def _recorded_architecture(file: Path, data: bytes) -> dict[str, Any]:
    try:
        recorded = json.loads(tensor_record(data)["architecture"])
    except json.JSONDecodeError:
        recorded = None
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{file}: its record of the architecture that wrote it is not a JSON object; the file "
                              "was edited")
    return recorded


def read_checkpoint(path: str | os.PathLike, role: str = MODEL) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` and the tensors of one of its files (``"model"`` or
    ``"training_state"``), both of the same save even while another process saves there.

    The file is read whole into memory, so a save that deletes it afterwards cannot touch
    what was read; if it is gone before it is read and ``config.json`` has changed since,
    a newer save has replaced it: read again.
    """
    path = Path(path)
    for _ in range(_READ_ATTEMPTS):
        config = read_config(path)
        record = config.get("mechanism")
        if isinstance(record, dict) and not find_mechanism(str(record.get("name"))):
            raise CheckpointError(f"{path}: {missing_from_checkpoint(record)}")
        mismatch = registered_class_mismatch(config["model"].get("model"), record)
        if mismatch:
            raise CheckpointError(f"{path}: {mismatch}")
        if record is not None and (not isinstance(record, dict) or plugin_class(str(record.get("name"))) is None
                                   or record.get("name") != config["model"].get("model")):
            raise CheckpointError(f"{path}: config.json records the mechanism {record!r} for the model "
                                  f"{config['model'].get('model')!r}, a built-in one or another mechanism, which "
                                  "GlitchLens never writes; the file was edited: remove its \"mechanism\"")
        name = tensor_files(config).get(role)
        if name is None:
            raise CheckpointError(f"{path}: this checkpoint has no {role.replace('_', ' ')} "
                                  "(it was not saved by a resumable training run)")
        file = path / name
        try:
            data = disk.read_bytes(file, "checkpoint tensor file")
        except ValueError as err:
            if os.path.lexists(file):
                raise CheckpointError(str(err)) from None
            if read_config(path) != config:   # a newer save replaced it, before or while it was opened
                continue
            raise CheckpointError(f"{file}: missing; the checkpoint is incomplete") from None
        tensors = _parse_tensors(file, data, role, config["format_version"])
        if config["format_version"] >= 3 or "architecture" in tensor_record(data):
            _check_architecture(file, _recorded_architecture(file, data), model_config(config, path))
        recorded_task = tensor_record(data).get("task")
        if recorded_task is not None and recorded_task != trained_task(config):
            raise CheckpointError(f"{path}: config.json records the task {trained_task(config)!r}, but its tensors "
                                  f"were trained on {recorded_task!r}; config.json was edited: restore its task")
        # last: a damaged file is refused above with what is wrong with it; a sound file of
        # another run (another save's digest) only here
        digest = (config.get("sha256") or {}).get(name)
        if digest is not None and hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError(f"{file}: not the file this checkpoint's config.json names (its SHA-256 differs "
                                  "from the one recorded there): another run's file was put in its place; restore "
                                  "this checkpoint's own file")
        return config, tensors
    raise CheckpointError(f"{path}: replaced {_READ_ATTEMPTS} times while being read; try again")


def model_config(config: dict[str, Any], path: str | os.PathLike) -> ModelConfig:
    """The :class:`ModelConfig` of a checkpoint's parsed ``config.json`` (``path``: its
    directory, for messages). A field that the checkpoint's format version always records and
    that is missing is an error naming it; older versions take the defaults of fields added since."""
    data, version = config["model"], config["format_version"]
    missing = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in data and f.name not in
               _DERIVED_FIELDS and _RECORDED_SINCE.get(f.name, 1) <= version]
    if missing:
        raise CheckpointError(f"{Path(path) / CONFIG_FILE}: the model config lacks {missing}, which every format "
                              f"version {version} checkpoint records; the file was edited: restore the field")
    try:
        return ModelConfig.from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{Path(path) / CONFIG_FILE}: invalid model config ({err})") from None


def _check_architecture(file: Path, recorded: dict[str, Any], cfg: ModelConfig) -> None:
    described = json.loads(json.dumps(architecture(cfg)))  # as recorded: tuples are lists
    differ = [name for name in ARCHITECTURE_FIELDS if recorded.get(name) != described[name]]
    if differ:
        raise CheckpointError(
            f"{file.parent}: config.json does not match its tensor file: the tensors were written by "
            + ", ".join(f"{k}={recorded.get(k)!r}" for k in differ) + f" and config.json describes "
            + ", ".join(f"{k}={described[k]!r}" for k in differ)
            + " (one checkpoint's tensors beside another's config): put back the matching pair")


def load(path: str | os.PathLike, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Load a checkpoint's model, ready for ``run_with_cache`` / ``run_with_hooks`` (eval mode).

    The tensors must match the config exactly (same names, shapes, floating-point dtypes, and
    from format version 3 on the architecture and checksum recorded with them); otherwise the
    error lists the differences, the sizes (layers, widths) before the model is built.
    Parameters holding NaN or Inf load, with a warning.
    """
    path, device = Path(validate.path("path", path)), validate.device("device", device)
    config, tensors = read_checkpoint(path)
    cfg = model_config(config, path)
    sizes = {name: size for name, size in _sizes(tensors).items() if getattr(cfg, name) != size}
    if sizes:  # found before a model of the config's sizes is built
        raise CheckpointError(f"{path}: config.json does not match its tensor file (" + ", ".join(
            f"config {name}={getattr(cfg, name)} vs file {size}" for name, size in sizes.items()) + ")")
    model = build_model(cfg)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(tensors) if expected[k].shape != tensors[k].shape)
    wrong_dtype = sorted(k for k in set(expected) & set(tensors)
                         if expected[k].is_floating_point() and not tensors[k].is_floating_point())
    if missing or unexpected or wrong_shape or wrong_dtype:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if wrong_shape:
            details.append("shape mismatch " + ", ".join(
                f"{k}: config {tuple(expected[k].shape)} vs file {tuple(tensors[k].shape)}" for k in wrong_shape[:5]))
        if wrong_dtype:
            details.append("not floating point " + ", ".join(
                f"{k}: file {tensors[k].dtype}" for k in wrong_dtype[:5]))
        raise CheckpointError(f"{path}: config.json does not match its tensor file ({'; '.join(details)})")
    non_finite = non_finite_tensors(tensors)
    if non_finite:
        warnings.warn(f"{path}: parameters {non_finite[:3]} hold NaN or Inf; the run that saved this "
                      "checkpoint diverged, and the model's outputs are meaningless", RuntimeWarning, stacklevel=2)
    model.load_state_dict(tensors)
    model.trained_task = trained_task(config)   # what the evaluation checks the model against
    return on_device(model, device).eval()


def trained_task(config: dict[str, Any]) -> str | None:
    """The task a checkpoint's training run trained on (None: saved outside training)."""
    training = config.get("training")
    if not isinstance(training, dict) or not isinstance(training.get("config"), dict):
        return None
    return training["config"].get("task", "flipflop")


def _sizes(tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """The sizes that make a model large (layers, widths), as the tensors have them."""
    sizes = {}
    embedding, mlp = tensors.get("W_E"), tensors.get("blocks.0.mlp.W_in")
    if embedding is not None and embedding.ndim == 2:
        sizes["d_vocab"], sizes["d_model"] = embedding.shape
    blocks = {int(m.group(1)) for name in tensors if (m := re.match(r"blocks\.(\d+)\.", name))}
    if blocks:
        sizes["n_layers"] = max(blocks) + 1
    if mlp is not None and mlp.ndim == 2:
        sizes["d_mlp"] = mlp.shape[1]
    return sizes


def on_device(model: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    """``model`` moved to ``device``, or a ValueError naming the device when it cannot be used."""
    try:
        return model.to(device)
    except (RuntimeError, AssertionError) as err:  # e.g. device "cuda" on a machine without CUDA
        raise ValueError(f"device {str(device)!r} is not usable here ({err}); use --device cpu") from None


def non_finite_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding a NaN or an Inf."""
    return [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]


def load_training_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    return read_checkpoint(path, TRAINING_STATE)[1]

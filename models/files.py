"""The one checked reader, and the list of what GlitchLens wrote in a folder.

They live here, below ``interp/``, because checkpoints (``models.checkpoint``) read and write
through them as every command does; :mod:`interp.outputs`, the staged writer, re-exports them.

Reading: :func:`read_bytes` (and :func:`read_json` on it) admits a regular file of a sane size
only, so that a FIFO, a device (``/dev/zero``, or a link to it) or a huge sparse file is refused
at once instead of hanging or exhausting memory; JSON nested deeper than :data:`MAX_JSON_DEPTH`
is refused before it is parsed (Python's parser would recurse until ``RecursionError``). Each
refusal is a ``ValueError`` of one line naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

MANIFEST = ".glitchlens-outputs.json"
# The temporary file :func:`record` writes the list into (``tempfile.mkstemp``'s 8 characters);
# a writer killed before its rename leaves one, which no list can name (it would list itself).
MANIFEST_TEMP = re.compile(re.escape(MANIFEST) + r"\.[a-z0-9_]{8}\.tmp")
MAX_INPUT_BYTES = 4 << 30        # data, weights: far above any file GlitchLens writes
MAX_JSON_BYTES = 64 << 20        # config.json, result.json, captions.json, the manifest
MAX_JSON_DEPTH = 64              # GlitchLens's own JSON nests a handful of levels
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def input_file(path: str | os.PathLike, what: str = "input", max_bytes: int = MAX_INPUT_BYTES) -> Path:
    """``path`` if it is a regular file of at most ``max_bytes``, else a ValueError naming
    ``what`` and the path: missing, a directory, a FIFO, device or socket (which would block or
    never end), or too large to read into memory."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{what} {path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{what} {path}: {err.strerror}") from None
    _check_kind(path, info, what, max_bytes)
    return path


def _check_kind(path: Path, info: os.stat_result, what: str, max_bytes: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{what} {path} is a directory; give a file")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what} {path} is not a regular file (a FIFO, device or socket); give a file")
    if info.st_size > max_bytes:
        raise ValueError(f"{what} {path} holds {info.st_size:,} bytes, more than the {max_bytes:,} "
                         f"(models.files) read from such a file; is it the right file?")


def read_bytes(path: str | os.PathLike, what: str = "input", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``, checked as :func:`input_file` checks it on the open file itself: a
    FIFO put in its place after a check cannot block (the open does not wait for a writer)."""
    path = input_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ValueError(f"{what} {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        _check_kind(path, os.fstat(fd), what, max_bytes)
        os.set_blocking(fd, True)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {path} grew past {max_bytes:,} bytes while being read; is it the right file?")
    return data


def json_depth(data: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest (brackets inside strings
    do not count)."""
    import numpy as np   # here: the CLI's parser imports this module, and --help should not wait for numpy

    brackets = np.frombuffer(_JSON_STRING.sub(b'""', data), dtype=np.uint8)
    steps = np.select([np.isin(brackets, list(b"[{")), np.isin(brackets, list(b"]}"))], [1, -1], 0)
    return int(np.cumsum(steps).max(initial=0))


def parse_json(data: bytes, path: str | os.PathLike, what: str = "JSON file") -> object:
    """The JSON value in ``data`` (read from ``path``), or a one-line ValueError naming the file:
    not UTF-8, not JSON, or nested deeper than :data:`MAX_JSON_DEPTH`."""
    if json_depth(data) > MAX_JSON_DEPTH:
        raise ValueError(f"{what} {path}: JSON nested deeper than {MAX_JSON_DEPTH} levels (models.files."
                         "MAX_JSON_DEPTH), which GlitchLens never writes; the file was edited or is not ours")
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{what} {path}: not valid JSON ({err})") from None


def read_json(path: str | os.PathLike, what: str = "JSON file", max_bytes: int = MAX_JSON_BYTES) -> object:
    """The JSON value in ``path``, read by :func:`read_bytes` and parsed by :func:`parse_json`."""
    return parse_json(read_bytes(path, what, max_bytes), path, what)


def written(out: Path) -> set[str]:
    """The paths (relative to ``out``, with ``/``) that :data:`MANIFEST` says GlitchLens wrote."""
    path = Path(out) / MANIFEST
    if not os.path.lexists(path):
        return set()
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link; remove it (it lists what glitchlens wrote in {out})")
    data = read_json(path, "output list")
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError(f"{path}: not a glitchlens output list; remove it (it lists what glitchlens wrote in {out})")
    return {name for name in data["files"] if isinstance(name, str)}


def new_file(folder: Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """A new, empty file in ``folder`` that no one else has opened (``tempfile.mkstemp``: never a
    link), with the permissions a plain ``open`` would give it: ``(fd, path)``, to rename into place."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, path


def record(out: Path, names: Iterable[str], gone: Iterable[str] = ()) -> None:
    """Add ``names`` (relative to ``out``) to :data:`MANIFEST`, and drop ``gone`` (files the
    writer deleted), atomically."""
    out = Path(out)
    files = sorted((written(out) | {str(name) for name in names}) - {str(name) for name in gone})
    fd, tmp = new_file(out, f"{MANIFEST}.", ".tmp")   # a name of the shape MANIFEST_TEMP
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"written_by": "glitchlens", "files": files}, f, indent=1)
        os.replace(tmp, out / MANIFEST)
    finally:
        Path(tmp).unlink(missing_ok=True)

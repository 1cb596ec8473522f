"""The files a command reads and writes, checked before any work starts.

Reading, one function for every file (:func:`read_bytes`, and :func:`read_json` on it, from
:mod:`models.files`): a regular file of a sane size only, so that a FIFO, a device
(``/dev/zero``) or a huge sparse file is refused at once instead of hanging or exhausting memory,
and JSON no deeper than :data:`MAX_JSON_DEPTH`; a refusal is one line naming the file.

Writing, one rule for every command (docs/explanation/runs-and-checkpoints.md "What commands write"): a command writes
only inside its ``--out``, only the files it names, never through a symbolic link, and never
over a file it did not write itself unless ``overwrite``. What it wrote is listed in
:data:`MANIFEST` in ``--out``; a file is the command's own when that list names it. Outputs are
written into a fresh directory inside ``--out`` (:func:`staged`) and then renamed into place:
a rename replaces a directory entry and never follows a link, and a failure halfway leaves
``--out`` as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

# The one reader and the manifest live below interp/, where checkpoints read and write too.
from models.files import (MANIFEST, MAX_INPUT_BYTES, MAX_JSON_BYTES, MAX_JSON_DEPTH, input_file,  # noqa: F401
                          new_file, parse_json, read_bytes, read_json, record, written)

STAGE_PREFIX = ".glitchlens-staging-"   # the folders outputs are written into before they move into place


def writable_dir(out: str | os.PathLike, option: str = "--out") -> Path:
    """``out`` as a directory that exists and takes files (created if needed), or a ValueError
    naming ``option`` and what is wrong: an empty name (which would mean the current
    directory), a file, a symbolic link to nothing, no permission."""
    if not str(out).strip():
        raise ValueError(f"{option} is empty; name a directory (\".\" for the current one)")
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise ValueError(f"{option} {out} is a symbolic link to nothing ({os.readlink(out)}); remove it or give "
                         "another directory")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option} {out} is a file; give a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise ValueError(f"{option} {out} is not writable ({err.strerror}); choose another directory") from None
    return out


def check_free(out: Path, names: Iterable[str], overwrite: bool = False, option: str = "--out") -> None:
    """Refuse, naming the first, any of ``names`` (relative to ``out``) that exists in ``out`` and
    is not the command's own (a symbolic link never is), unless ``overwrite``; and any path
    whose folders leave ``out`` through a link or a file."""
    names = [str(name) for name in names]
    ours = written(out) if names else set()
    for name in names:
        inside(out, name, option)
        path = out / name
        if not overwrite and os.path.lexists(path) and (path.is_symlink() or name not in ours):
            kind = "a symbolic link" if path.is_symlink() else "a file glitchlens did not write"
            raise ValueError(f"{path} exists and is {kind}; pass --overwrite to replace it, or choose another "
                             f"{option}")


def inside(out: Path, name: str, option: str = "--out") -> Path:
    """``out / name`` after checking that ``name`` is relative, without ``..``, and that each
    folder on its way exists as a real folder (not a link) or not at yet."""
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts or not parts:
        raise ValueError(f"{name}: not a name inside {option} {out}")
    folder = out
    for part in parts[:-1]:
        folder = folder / part
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            raise ValueError(f"{folder} is a symbolic link or a file, not a folder of {option} {out}; remove it "
                             "or choose another")
    return out / name


@contextmanager
def staged(out: str | os.PathLike, overwrite: bool = False, names: Iterable[str] = (),
           option: str = "--out") -> Iterator[Path]:
    """A fresh folder inside ``out`` to write a command's files into; when the block ends
    without an error they are renamed into ``out`` and listed in :data:`MANIFEST`.

    ``names``: the files the command will surely write, checked (:func:`check_free`) before the
    block, that is, before minutes of work. Each file the block wrote is checked again before
    anything moves; if one would replace a file not the command's own, nothing moves and the
    error names the folder that keeps the results."""
    out = writable_dir(out, option)
    check_free(out, names, overwrite, option)
    stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=out))
    keep = False
    try:
        yield stage
        # the stage's own list (a writer of one file, staged_file, records there) is not an output:
        # moved, it would replace --out's list with one that lacks the files recorded below
        files = sorted(path.relative_to(stage).as_posix() for path in stage.rglob("*") if not path.is_dir())
        files = [name for name in files if name != MANIFEST]
        try:
            check_free(out, files, overwrite, option)
        except ValueError as err:
            keep = True
            raise ValueError(f"{err} (nothing was moved: the results are in {stage})") from None
        try:
            move_in(stage, out, files, option)
        except (OSError, ValueError) as err:   # a full disk, a folder replaced by a link meanwhile
            keep = True
            reason = err.strerror if isinstance(err, OSError) else err
            raise ValueError(f"moving the results into {option} {out} failed ({reason}); the files not moved "
                             f"are in {stage}") from None
    finally:
        if not keep:
            shutil.rmtree(stage, ignore_errors=True)


@contextmanager
def staged_file(path: str | os.PathLike, overwrite: bool = False, option: str = "--out") -> Iterator[Path]:
    """A fresh file beside ``path`` to write one output into (``--out FILE``, a run's
    ``result.json``); when the block ends without an error it is renamed to ``path`` and listed
    in the :data:`MANIFEST` of its folder, the rules of :func:`staged` for one file: refused,
    before the block and again before the rename, if ``path`` is a link, or a file glitchlens
    did not write, unless ``overwrite``; the rename replaces a link, never writes through it."""
    path = Path(path)
    folder = writable_dir(path.parent, option)
    check_free(folder, [path.name], overwrite, option)
    stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=folder))
    try:
        yield stage / path.name
        check_free(folder, [path.name], overwrite, option)   # a link or a file planted meanwhile
        record(folder, [path.name])
        os.replace(stage / path.name, path)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def move_in(stage: Path, out: Path, files: list[str], option: str = "--out") -> None:
    """Rename ``files`` from ``stage`` into ``out`` and list them in :data:`MANIFEST`. The
    manifest names every file before the first rename, so a failure halfway (a full disk, a
    folder that turned into a link) leaves no file moved and unlisted; the files it replaced
    were the command's own or ``overwrite`` allowed it."""
    record(out, files)
    for name in files:
        target = inside(out, name, option)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / name, target)   # replaces an entry, never writes through a link


def linked_folders(out: Path, depth: int = 3) -> list[Path]:
    """Symbolic links to folders within ``depth`` levels of ``out``: what is written below one
    (a sweep's runs) would land outside ``out``."""
    found = []
    for folder, subfolders, _ in os.walk(out):   # never follows a link
        level = len(Path(folder).relative_to(out).parts)
        found += [Path(folder) / name for name in subfolders if (Path(folder) / name).is_symlink()]
        if level + 1 >= depth:
            subfolders.clear()
    return found


def moved(files: dict[str, Path], stage: Path, out: str | os.PathLike) -> dict[str, Path]:
    """``files`` written in ``stage`` at the paths :func:`staged` moves them to in ``out``."""
    return {key: Path(out) / Path(path).relative_to(stage) for key, path in files.items()}


def open_append(path: Path):
    """``path`` opened to append text (created if missing), refusing a symbolic link and anything
    but a regular file (a FIFO would block)."""
    try:   # O_NONBLOCK: a FIFO put there after the check below fails at once instead of blocking
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if os.path.islink(path):
            raise ValueError(f"{path} is a symbolic link; remove it (glitchlens never writes through one)") from None
        raise ValueError(f"{path}: cannot append to it ({err.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path} is not a regular file; remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", buffering=1)   # line-buffered: each record reaches the file as written

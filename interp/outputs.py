"""Output directories, checked before any work starts: a run that would fail to write its
results after minutes of work is refused at once instead."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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

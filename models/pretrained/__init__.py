"""The pretrained checkpoints shipped with GlitchLens, and the loader that reads them (each loads
in well under a second).

Every entry is an ordinary checkpoint directory next to this file (``config.json`` and the
safetensors file it names, no optimiser state) whose ``metadata`` records what it is, the exact
``glitchlens train`` command that produced it, its seed, and its accuracy on the canonical
splits. What each entry is and how it is trained is defined in one place,
``interp.studies.specimens.ENTRIES``, and ``glitchlens pretrained build NAME`` writes it; this
package knows an entry only by its directory here, so that ``models`` never imports ``interp``.

The directory and the names of the built entries are known without torch (``glitchlens --help``
lists them); ``models.checkpoint`` is imported by the functions that read an entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PRETRAINED_DIR = Path(__file__).parent


def built() -> list[str]:
    """The names of the entries built here (a directory holding a ``config.json``), sorted."""
    return sorted(directory.name for directory in PRETRAINED_DIR.iterdir() if (directory / "config.json").is_file())


def path(name: str) -> Path:
    """The checkpoint directory of entry ``name`` (which may not be built yet); a name that is not
    one directory's name (empty, ``..``, with a separator) is a ``CheckpointError``."""
    from models.checkpoint import CheckpointError

    if name in ("", ".", "..") or Path(name).name != name:
        raise CheckpointError(f"{name!r} is not the name of a pretrained model")
    return PRETRAINED_DIR / name


def info(name: str) -> dict[str, Any]:
    """The entry's metadata: ``command``, ``seed``, ``accuracy`` per split, ``description``."""
    from models.checkpoint import CheckpointError, read_config

    directory = path(name)
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"no pretrained model {name!r} is built in {PRETRAINED_DIR} (built: "
                              f"{', '.join(built()) or 'none'}); `glitchlens pretrained` lists every entry and "
                              "`glitchlens pretrained build NAME` builds one")
    return read_config(directory)["metadata"]


def load_pretrained(name: str, device: str | torch.device = "cpu") -> torch.nn.Module:
    """A pretrained model by name (``tra-mech``, ``fot-mech``, ...), in eval mode, ready to hook;
    ``model.cfg.model_name`` is that name."""
    from models import validate
    from models.checkpoint import load

    info(validate.text("name", name))
    model = load(path(name), device=device)
    model.cfg.model_name = name
    return model

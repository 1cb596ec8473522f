"""Text shared by the generated reference pages (:mod:`interp.docs.reference`): where they live,
and docstrings, table cells, links and anchors as Markdown."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "reference"
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def relative_link(path: Path, page: Path) -> str:
    """The relative link from ``page`` (a path relative to :data:`OUT`) to ``path``, POSIX-style."""
    return Path(os.path.relpath(path, (OUT / page).parent)).as_posix()


def markdown(doc: str | None) -> str:
    """A docstring dedented, its reST inline code (````x````) as Markdown's (```x```)."""
    return re.sub(r"``(.+?)``", r"`\1`", inspect.cleandoc(doc or ""), flags=re.S)


def first_paragraph(doc: str | None) -> str:
    return " ".join(markdown(doc).split("\n\n")[0].split())


def table_cell(text: str) -> str:
    """``text`` on one line, its pipes escaped, for a Markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def portable(text: str) -> str:
    """A rendered default without what depends on the machine: memory addresses, and the
    repository's or the home directory's absolute path."""
    text = ADDRESS.sub("", text)
    return text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".").replace(str(Path.home()), "~")



def anchor(title: str) -> str:
    """The anchor a code host gives a heading (as ``tests/test_docs.py``'s ``slug``)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


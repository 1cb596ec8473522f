"""The reference pages under ``docs/reference/``, generated from the code (``make docs``):

- ``api/<package>.md``, one per package of ``models/``, ``interp/`` and ``kernels/`` (every
  directory with an ``__init__.py``, found by walking): the package docstring, then each public
  module of the package (its direct ``.py`` children, a name without a leading underscore) with
  its docstring's first paragraph, and each public function and class the module defines, with
  its signature (annotations as written) and docstring, linked to its source file. A class lists
  the public methods it defines itself. A module that fails to import is an error, never skipped.
- ``cli.md``: every ``glitchlens`` command with its usage and every option's help, read from
  :func:`interp.cli.build_parser` (nothing runs).
- ``hooks.md``: every hook point that fires, from ``fired_hooks()`` and one ``run_with_cache`` on
  a tiny model of every built-in model name, with its shape in named axes and the first words the
  declaring class's docstring (or its module's) says after the hook's name.
- ``environment.md``: the environment variables, from the ``ENVIRONMENT_VARIABLES`` dict of each
  module that reads one (``{name: (default, meaning)}``, read from the source), and the make
  variables of the Makefile; then the numerical tolerances: every module-level constant of
  ``models/``, ``interp/``, ``kernels/`` and ``tests/`` whose name holds ``TOLERANCE``, ``RTOL``
  or ``ATOL``, with the comment on its line or just above it as its meaning.
- ``index.md``: links to all of them.

The output depends on the code alone: sorted, no dates, no absolute paths (a default under the
repository or the home directory is written relative to it), no memory addresses.
``python -m interp.docs.reference`` writes the pages; ``--check`` writes nothing and exits 1,
naming each page that differs from what the code generates (or that the code no longer
generates).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The pages by what they are generated from; the names the tests and tools use are reachable from here.
from interp.docs.api_pages import api_page, packages, signature_text  # noqa: F401
from interp.docs.command_pages import cli_page, hooks_page
from interp.docs.environment_page import environment_page, tolerances, undeclared_environment_reads  # noqa: F401
from interp.docs.markdown import OUT, ROOT  # noqa: F401


def index_page(names: list[str]) -> str:
    api = [name for name in names if name.startswith("api/")]
    lines = ["# Reference", "",
             "Generated from the code by `make docs` (`python -m interp.docs.reference`; `--check` names the pages "
             "that are out of date); back to the [documentation](../index.md).", "",
             "- [Commands](cli.md): every `glitchlens` command and its options",
             "- [Hook points](hooks.md): every hook, its shape and the models that fire it",
             "- [Environment variables and tolerances](environment.md)", "", "## API", "",
             *(f"- [`{Path(name).stem}`]({name})" for name in sorted(api, key=lambda name: Path(name).stem))]
    return "\n".join(lines) + "\n"


def generate() -> dict[str, str]:
    """``{path under docs/reference/: text}`` of every page."""
    pages = {f"api/{package}.md": api_page(package) for package in packages()}
    pages.update({"cli.md": cli_page(), "hooks.md": hooks_page(), "environment.md": environment_page()})
    pages["index.md"] = index_page(sorted(pages))
    return dict(sorted(pages.items()))


def stale_pages(pages: dict[str, str], out: Path = OUT) -> list[str]:
    """The pages under ``out`` that differ from ``pages``, are missing, or are no longer generated."""
    on_disk = {path.relative_to(out).as_posix() for path in out.rglob("*.md")} if out.exists() else set()
    return sorted(name for name in set(pages) | on_disk
                  if name not in pages or name not in on_disk or (out / name).read_text() != pages[name])


def write(pages: dict[str, str], out: Path = OUT) -> None:
    """Write ``pages`` under ``out`` and remove the pages no longer generated."""
    for name in stale_pages(pages, out):
        path = out / name
        if name in pages:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(pages[name])
        else:
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interp.docs.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming the pages that differ from what the code generates")
    args = parser.parse_args(argv)
    pages = generate()
    stale = stale_pages(pages)
    if args.check:
        for name in stale:
            print(f"docs/reference/{name} is out of date: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    write(pages)
    print(f"{len(pages)} pages in docs/reference/, {len(stale)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())


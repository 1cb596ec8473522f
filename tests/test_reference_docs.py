"""The generated reference (``docs/reference/``, :mod:`interp.docs.reference`) is what the code
generates now, has a page for every package, links only to files and headings that exist, and
its checks can fail: a stale, missing or leftover page, an environment variable read without
being declared, a tolerance without the comment that says what it bounds."""

import re
from pathlib import Path

import pytest
from jaxtyping import Float
from test_docs import broken_links
from torch import Tensor

from interp.docs import reference


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference.generate()


def test_the_pages_are_current(pages):
    assert reference.stale_pages(pages) == [], "run `make docs` (python -m interp.docs.reference)"


def test_every_package_has_a_page_in_the_index(pages):
    packages = reference.packages()
    assert {"models", "interp.metrics", "kernels.tra"} <= set(packages)
    assert [package for package in packages if f"api/{package}.md" not in pages] == []
    assert [package for package in packages if f"(api/{package}.md)" not in pages["index.md"]] == []


@pytest.mark.parametrize("path", sorted(reference.OUT.rglob("*.md")), ids=lambda p: str(p.relative_to(reference.OUT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_every_environment_variable_read_is_declared():
    assert reference.undeclared_environment_reads() == []


def test_every_tolerance_says_what_it_bounds():
    found = reference.tolerances()
    assert {"KERNEL_OUTPUT_TOLERANCE", "RTOL", "ATOL"} <= {tolerance["name"] for tolerance in found}
    assert [tolerance["name"] for tolerance in found if not tolerance["meaning"]] == []


# A row of the hook table: hook, shape, the models that fire it (a note in parentheses after them), meaning.
HOOK_ROW = re.compile(r"^\| `(?P<hook>[^`]+)` \| `[^`]+` \| (?P<models>[^|(]*?)(?: \(.*\))? \| (?P<meaning>.*) \|$")


def test_every_fired_hook_has_a_meaning_of_its_own(pages):
    rows = [match.groupdict() for line in pages["hooks.md"].splitlines() if (match := HOOK_ROW.match(line))]
    assert {"hook_embed", "blocks.{l}.attn.hook_q", "blocks.{l}.attn.hook_result"} <= {row["hook"] for row in rows}
    assert [row["hook"] for row in rows if not row["meaning"].strip()] == []
    # Within a model, hooks of different names (ln1's and ln2's hook_scale are one name) never share a meaning.
    names_by_meaning: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        for model in row["models"].split(", "):
            names_by_meaning.setdefault((model, row["meaning"]), set()).add(row["hook"].rpartition(".")[2])
    assert {key: names for key, names in names_by_meaning.items() if len(names) > 1} == {}


# The checks must be able to fail.

def test_a_stale_missing_or_leftover_page_is_named(tmp_path):
    pages = {"index.md": "# Reference\n", "api/a.md": "# a\n", "api/b.md": "# b\n"}
    reference.write(pages, tmp_path)
    assert reference.stale_pages(pages, tmp_path) == []
    (tmp_path / "api" / "a.md").write_text("# a, edited by hand\n")
    (tmp_path / "api" / "b.md").unlink()
    (tmp_path / "api" / "gone.md").write_text("# a package that no longer exists\n")
    assert reference.stale_pages(pages, tmp_path) == ["api/a.md", "api/b.md", "api/gone.md"]
    reference.write(pages, tmp_path)
    assert reference.stale_pages(pages, tmp_path) == [] and not (tmp_path / "api" / "gone.md").exists()


def test_an_undeclared_variable_and_an_unexplained_tolerance_are_reported(tmp_path):
    declaring, reading = tmp_path / "declaring.py", tmp_path / "reading.py"
    environ, getenv = "os.environ", "os.getenv"     # spelt apart, so that this file reads no variable itself
    declaring.write_text('NAME = "KNOWN"\nENVIRONMENT_VARIABLES = {NAME: ("1", "a known switch")}\n'
                         'FAST_TOLERANCE = 1e-3  # what the fast path may add\n')
    reading.write_text(f'import os\n{environ}.get("KNOWN")\n{getenv}("UNKNOWN", "0")\n{environ}["SET"] = "1"\n\n'
                       'LOOSE_RTOL = 1e-2\n')
    problems = reference.undeclared_environment_reads([declaring, reading])
    assert len(problems) == 1 and "UNKNOWN is read" in problems[0], problems
    found = {tolerance["name"]: tolerance for tolerance in reference.tolerances([declaring, reading])}
    assert found["FAST_TOLERANCE"]["meaning"] == "what the fast path may add"
    assert found["LOOSE_RTOL"]["meaning"] == "" and found["LOOSE_RTOL"]["value"] == "1e-2"


def test_signatures_keep_annotations_as_written_and_defaults_portable():
    # len, not print: Ray's progress bars replace builtins.print for the rest of a process
    def scaled(x: Float[Tensor, "batch pos"], root: "Path" = reference.ROOT / "runs", *, fn=len) -> "Tensor":
        return x

    assert reference.signature_text(scaled, "scaled") == (
        "scaled(x: Float[Tensor, \"batch pos\"], root: Path = PosixPath('runs'), *, fn=<built-in function len>) "
        "-> Tensor")


def test_the_command_page_is_the_same_with_a_plugin_registered(monkeypatch):
    """A mechanism registered earlier in the process (a plugin test, a notebook) does not enter the reference."""
    from interp.docs.command_pages import cli_page
    from models import mechanisms

    before = cli_page()
    monkeypatch.setitem(mechanisms._PLUGINS, "registered_here", object)
    monkeypatch.setitem(mechanisms.MODEL_FAMILIES, "registered_here", (None, "none", {}))
    assert "registered_here" not in mechanisms.built_in_names()
    assert cli_page() == before

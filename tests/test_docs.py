"""The documentation holds together: the README and ``docs/*.md`` link only to files and headings
that exist, every section the code cites by name (a README or docs file followed by a quoted
heading) exists in that file, every document has a table of contents and is listed in the README,
and the README keeps the two quick-start commands CI relies on.

The checks are plain functions of text, so the tests at the bottom also feed them broken
documents and require the breakage to be reported."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
QUICK_START = (
    "make demo   # set up .venv, train a tiny FoT model (~1 min on 2 CPU cores), evaluate it, write a diagnostic report",
    "make test   # set up .venv, run the whole test suite",
)
# Where the code cites documentation sections by name.
CODE_GLOBS = ("interp/**/*.py", "models/**/*.py", "kernels/**/*.py", "tests/**/*.py", "notebooks/*.ipynb",
              "Makefile", ".ci/run", "pyproject.toml")

LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# README "Section", docs/guide.md "Section", README, "Section"; quotes may be escaped (in a string).
SECTION_REFERENCE = re.compile(r'(?P<file>README(?:\.md)?|docs/[\w.-]+\.md),?\s+\\?"(?P<section>[^"\\]+)\\?"')


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the Markdown outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, re.sub(r"`[^`]*`", "", line)))
    return lines


def headings(text: str) -> list[tuple[int, str]]:
    """``(level, title)`` of every Markdown heading outside code blocks."""
    found = []
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def slug(title: str) -> str:
    """The anchor a code host gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated title gets ``-1``, ``-2``, ... as on the code hosts."""
    seen: dict[str, int] = {}
    result = set()
    for _, title in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of Markdown file ``path`` whose file, or whose ``#anchor`` heading, is missing."""
    text = path.read_text()
    problems = []
    for number, line in prose_lines(text):
        for match in LINK.finditer(line):
            target = match.group("target")
            if re.match(r"[a-z][a-z0-9+.-]*:", target):        # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: [{match.group('text')}]({target})"
            if not linked.exists():
                problems.append(f"{where}: no file {file_part}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
                problems.append(f"{where}: no heading with anchor #{anchor} in {linked.relative_to(root)}")
    return problems


def code_texts() -> list[tuple[str, str]]:
    """``(name, text)`` of every file that may cite a documentation section; notebooks as their cells'
    sources."""
    texts = []
    for pattern in CODE_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if path.name == Path(__file__).name or not path.is_file():
                continue
            text = path.read_text()
            if path.suffix == ".ipynb":
                text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
            texts.append((str(path.relative_to(ROOT)), text))
    return texts


def section_names(text: str) -> set[str]:
    """The names a heading may be cited by: its title, and its title without a closing parenthesis
    (``TRA beside FoT`` for ``TRA beside FoT (the TRA paper's App. A)``)."""
    titles = {title for _, title in headings(text)}
    return titles | {re.sub(r"\s*\([^()]*\)$", "", title) for title in titles}


def missing_sections(texts: list[tuple[str, str]], root: Path = ROOT) -> list[str]:
    """Every section reference in ``texts`` naming a file, or a heading of that file, that does not exist."""
    problems = []
    for name, text in texts:
        for match in SECTION_REFERENCE.finditer(" ".join(text.split())):
            file = "README.md" if match.group("file").startswith("README") else match.group("file")
            section = match.group("section")
            path = root / file
            if not path.exists():
                problems.append(f"{name}: {file} does not exist (cited for {section!r})")
            elif section not in section_names(path.read_text()):
                problems.append(f"{name}: {file} has no heading {section!r}")
    return problems


def test_the_docs_exist():
    names = {path.name for path in DOCS}
    assert {"results.md", "guide.md", "cpu-path-and-kernels.md", "learning-notes.md"} <= names, names


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_code_cites_only_sections_that_exist():
    texts = code_texts()
    assert any(SECTION_REFERENCE.search(text) for _, text in texts), "no section reference found: is the pattern right?"
    assert missing_sections(texts) == []


def test_readme_keeps_the_quick_start_commands():
    lines = README.read_text().splitlines()
    for command in QUICK_START:
        assert command in lines, f"README.md lost the quick-start line {command!r}"


def test_readme_says_how_to_call_the_command_after_set_up():
    """Set-up puts ``glitchlens`` in .venv/bin, not on the PATH: the quick start says so before
    the first command that calls it."""
    quick_start = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    for way in (".venv/bin/glitchlens", "source .venv/bin/activate"):
        assert way in quick_start, f"README.md's Quick start does not say {way!r}"
    first_call = README.read_text().index("glitchlens diagnose")
    assert README.read_text().index("source .venv/bin/activate") < first_call


def test_readme_lists_every_doc():
    linked = {match.group("target").partition("#")[0] for _, line in prose_lines(README.read_text())
              for match in LINK.finditer(line)}
    assert [path.name for path in DOCS if f"docs/{path.name}" not in linked] == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_each_doc_has_its_contents_and_a_way_back(path):
    text = path.read_text()
    sections = [title for level, title in headings(text) if level == 2 and title != "Contents"]
    assert headings(text)[0][0] == 1, f"{path.name} does not open with a title"
    assert "Contents" in [title for _, title in headings(text)], f"{path.name} has no table of contents"
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    missing = [title for title in sections if f"](#{slug(title)})" not in contents]
    assert missing == [], f"{path.name}: sections missing from its contents: {missing}"
    assert "](../README.md)" in text, f"{path.name} does not link back to the README"


# The checks must be able to fail.

def test_a_broken_link_or_anchor_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A section: with punctuation\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n[ok](other.md#a-section-with-punctuation) [self](#doc)\n"
                   "[gone](missing.md) [bad anchor](other.md#no-such-section)\n"
                   "```\n[in code](ignored.md)\n```\n`[inline](ignored.md)`\n")
    problems = broken_links(doc, root=tmp_path)
    assert len(problems) == 2, problems
    assert "no file missing.md" in problems[0] and "#no-such-section" in problems[1]


def test_a_missing_section_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Title\n\n## Quick start\n")
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Models (and presets)\n")
    texts = [("a.py", 'see README "Quick start" and docs/guide.md "Models"'),
             ("b.py", 'help="(README \\"Gone\\")"'),
             ("c.ipynb", 'measured in docs/guide.md\n"Training"'),
             ("d.py", 'docs/missing.md "Models"')]
    problems = missing_sections(texts, root=tmp_path)
    assert len(problems) == 3, problems
    assert "'Gone'" in problems[0] and "'Training'" in problems[1] and "does not exist" in problems[2]


def test_slugs_follow_the_code_hosts():
    assert slug("TRA beside FoT (the TRA paper's App. A)") == "tra-beside-fot-the-tra-papers-app-a"
    assert slug("Circuits: where the bit travels") == "circuits-where-the-bit-travels"
    assert slug("5. The hooks") == "5-the-hooks"
    assert anchors("# A\n\n## A\n") == {"a", "a-1"}


def test_the_readme_tour_runs_as_written(tmp_path, monkeypatch):
    """The Python blocks of "A 5-minute tour", in order, in a fresh directory: what they write goes
    under runs/ there, nothing into the directory itself."""
    tour = README.read_text().split("## A 5-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", tour, flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert (tmp_path / "runs" / "tour" / "tra-mech-L1.html").stat().st_size > 0

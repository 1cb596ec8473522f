"""The documentation holds together: the README and every page under ``docs/`` link only to files and
headings that exist, every section the code cites by name (a README or docs file followed by a
quoted heading) exists in that file, every page has a table of contents and a way back and is
reached from the README through docs/index.md, the README keeps the two quick-start commands CI
relies on and carries no date or wall-clock time outside what the quick start prints, and the
5-minute tour runs as written.

The checks are plain functions of text, so the tests at the bottom also feed them broken
documents and require the breakage to be reported."""

import json
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
TOURS = (README, ROOT / "docs" / "tutorials.md")
# The reference is generated from the code (docs/reference/index.md says by what), with its own layout.
REFERENCE = ROOT / "docs" / "reference"
QUICK_START = (
    "make demo   # set up .venv, train a tiny FoT model, evaluate it, write a diagnostic report",
    "make test   # set up .venv, run the whole test suite",
)
# Where the code cites documentation sections by name.
CODE_GLOBS = ("interp/**/*.py", "models/**/*.py", "kernels/**/*.py", "tests/**/*.py", "notebooks/*.ipynb",
              "Makefile", ".ci/run", "pyproject.toml")

LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# README "Section", docs/how-to/add-a-task.md "Section", README, "Section"; quotes may be escaped (in a string).
SECTION_REFERENCE = re.compile(r'(?P<file>README(?:\.md)?|docs/[\w./-]+\.md),?\s+\\?"(?P<section>[^"\\]+)\\?"')
# A date, or a duration in seconds, minutes or hours ("56 s", "2 min", "1.5 h", "a few seconds").
DATE_OR_TIME = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d+(?:\.\d+)?\s?(?:ms|s|min|h)\b"
                          r"|(?<!-)\b(?:seconds?|minutes?|hours?)\b")


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


def linked_files(path: Path) -> set[Path]:
    """The existing files that Markdown file ``path`` links to, resolved."""
    found = set()
    for _, line in prose_lines(path.read_text()):
        for match in LINK.finditer(line):
            target = match.group("target")
            file_part = target.partition("#")[0]
            if file_part and not re.match(r"[a-z][a-z0-9+.-]*:", target):
                linked = (path.parent / file_part).resolve()
                if linked.is_file():
                    found.add(linked)
    return found


def reachable(start: Path) -> set[Path]:
    """Every Markdown file reached from ``start`` by following links from Markdown file to Markdown file."""
    seen, todo = {start.resolve()}, [start.resolve()]
    while todo:
        for linked in linked_files(todo.pop()):
            if linked.suffix == ".md" and linked not in seen:
                seen.add(linked)
                todo.append(linked)
    return seen


def dates_and_times(text: str, allowed: str = "") -> list[str]:
    """Every date or duration in the prose and code of ``text``, outside the paragraph that starts with
    ``allowed`` (what the quick start prints)."""
    problems = []
    for paragraph in text.split("\n\n"):
        if allowed and paragraph.startswith(allowed):
            continue
        problems += [f"{match.group(0)!r} in {paragraph.strip()[:60]!r}" for match in DATE_OR_TIME.finditer(paragraph)]
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
    pages = {str(path.relative_to(ROOT / "docs")) for path in DOCS}
    kinds = {"index.md", "tutorials.md", "reference/index.md",
             *(f"how-to/{name}.md" for name in ("train-a-model", "diagnose-a-checkpoint", "add-a-mechanism",
                                                 "add-a-task", "sweep-on-ray", "run-on-a-gpu",
                                                 "diagnose-a-transformerlens-model", "port-transformerlens-code")),
             *(f"explanation/{name}.md" for name in ("tasks", "mechanisms", "metrics", "hooks-and-transformerlens",
                                                      "kernels-and-cpu-path", "learning-notes")),
             *(f"results/{name}.md" for name in ("claims", "benchmarks", "learning", "test-suite"))}
    assert kinds <= pages, sorted(kinds - pages)
    assert (ROOT / "CHANGELOG.md").is_file()



def test_the_train_how_to_lists_every_built_in_task():
    from interp.tasks.registry import BUILT_IN

    listed = re.search(r"`--task \{([\w,-]+)\}`", (ROOT / "docs/how-to/train-a-model.md").read_text()).group(1)
    assert listed.split(",") == list(BUILT_IN)


def test_the_specimen_lists_name_every_shipped_specimen():
    """The README names every shipped model, and the hooks page every one whose blocks renormalise the stream."""
    from models import pretrained, read_config

    readme = README.read_text()
    assert [name for name in pretrained.built() if f"`{name}`" not in readme] == []
    hooks = (ROOT / "docs/explanation/hooks-and-transformerlens.md").read_text()
    listed = re.search(r"\(the shipped\n?((?:`[\w-]+`,?\s*(?:and\s*)?)+)\)", hooks).group(1)
    stream = sorted(name for name in pretrained.built()
                    if read_config(pretrained.path(name))["model"].get("norm_placement") == "stream")
    assert sorted(re.findall(r"`([\w-]+)`", listed)) == stream


@pytest.mark.slow
@pytest.mark.integration
def test_the_tutorials_diagnosis_numbers_are_what_the_command_prints(tmp_path, capsys):
    """Step 4 of the tour: every number it quotes from `glitchlens diagnose tra-mech`, from that command's JSON."""
    from interp.cli import main

    step = (ROOT / "docs/tutorials.md").read_text().split("### 4. Diagnose it")[1].split("###")[0]
    text = " ".join(step.split())
    quoted = re.search(r"no error in the ([\d,]+) `iid` reads, (\d+) in the ([\d,]+) `dense` ones \(([\d.]+)% of "
                       r"those sequences right\), a bit-carrier argmax rate of ([\d.]+) in layer 1 and a last-write "
                       r"\(exact-write\) argmax rate of ([\d.]+)", text).groups()
    assert main(["diagnose", "tra-mech", "--lengths", "512", "--out", str(tmp_path), "--json", "--quiet"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    iid, dense = metrics["evaluation"]["iid"], metrics["evaluation"]["dense"]
    carrier = metrics["bit_carrier"]["per_layer"][1]["argmax_rate"]
    last_write = metrics["last_write"]["per_layer"][1]["argmax_rate"]
    assert iid["read_errors"] == 0
    assert quoted == (f"{iid['reads']:,}", str(dense["read_errors"]), f"{dense['reads']:,}",
                      f"{100 * dense['sequence_accuracy']:.1f}", f"{carrier:g}", f"{last_write:.2f}")


def test_the_add_a_task_example_keeps_the_contract():
    """The how-to's complete task, run as written: every check-task check passes, it scores several
    positions per sequence and has an out-of-distribution split."""
    from interp.tasks.contract import check_task

    section = (ROOT / "docs/how-to/add-a-task.md").read_text().split("## A task with several scored positions")[1]
    namespace = {}
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), namespace)
    task = namespace["AskedParityTask"]()
    assert [check.name for check in check_task(task) if not check.passed] == []
    assert task.scored_mask(task.load_split("iid", 8)).sum(1).min() > 1
    assert not task.splits["long"].in_distribution


def test_every_tool_runs_on_the_add_a_task_example_as_the_how_to_shows(tmp_path, monkeypatch):
    """The how-to's task and its Python walk through every tool, run as written on a tiny untrained
    model of that task saved where the how-to's checkpoint is (its outputs under tmp_path)."""
    import models
    from interp.tasks import registry

    text = (ROOT / "docs/how-to/add-a-task.md").read_text()
    task_code, tools_code = (re.search(r"```python\n(.*?)```", text.split(heading)[1], re.S).group(1)
                             for heading in ("## A task with several scored positions", "## Every tool on your task"))
    namespace = {}
    exec(task_code, namespace)
    saved = dict(registry._TASKS)
    try:
        task = registry.register_task(namespace["AskedParityTask"]())
        torch.manual_seed(0)
        model = models.build_model(models.ModelConfig.from_preset("rope", "tiny", n_heads=2, d_vocab=task.d_vocab,
                                                                  n_ctx=task.n_ctx))
        models.save(tmp_path / "runs/asked-parity", model, training={"config": {"task": task.name}, "step": 0})
        monkeypatch.chdir(tmp_path)
        exec(tools_code, namespace)
    finally:
        registry._TASKS.clear()
        registry._TASKS.update(saved)
    diagnosis, explanation = namespace["diagnosis"], namespace["explanation"]
    assert diagnosis.metrics["task"] == "asked-parity" and diagnosis.files["browser"].is_file()
    assert len(diagnosis.metrics["probes"]) == 3 and explanation.summary["split"] == "long"
    dla, patched = namespace["dla"], namespace["patched"]
    assert set(dla.component) >= {"embed", "L0H0", "L1 MLP"} and patched.restored.notna().any()


@pytest.mark.parametrize("path", [README, ROOT / "CHANGELOG.md", *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
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


def test_the_index_reaches_every_doc():
    """The README links docs/index.md, and every page under docs/ is reached from there."""
    assert INDEX.resolve() in linked_files(README)
    assert [str(path.relative_to(ROOT)) for path in DOCS if path.resolve() not in reachable(INDEX)] == []


def test_the_readme_has_no_date_or_time():
    """Measurements live in docs/results/ with their machine and date, history in CHANGELOG.md; only
    what the quick start prints may give a number of its own."""
    assert dates_and_times(README.read_text(), allowed="What `make demo` prints") == []


@pytest.mark.parametrize("path", [p for p in DOCS if p != INDEX and REFERENCE not in p.parents],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_each_doc_has_its_contents_and_a_way_back(path):
    text = path.read_text()
    sections = [title for level, title in headings(text) if level == 2 and title != "Contents"]
    assert headings(text)[0][0] == 1, f"{path.name} does not open with a title"
    assert "Contents" in [title for _, title in headings(text)], f"{path.name} has no table of contents"
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    missing = [title for title in sections if f"](#{slug(title)})" not in contents]
    assert missing == [], f"{path.name}: sections missing from its contents: {missing}"
    assert linked_files(path) & {README.resolve(), INDEX.resolve()}, \
        f"{path.name} links back to neither docs/index.md nor the README"


@pytest.mark.parametrize("path", [p for p in DOCS if REFERENCE in p.parents], ids=lambda p: str(p.relative_to(ROOT)))
def test_each_reference_page_leads_back_to_the_docs(path):
    assert INDEX.resolve() in reachable(path), f"{path.relative_to(ROOT)}: no way back to docs/index.md"


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


def test_an_unreached_doc_and_a_dated_line_are_reported(tmp_path):
    (tmp_path / "index.md").write_text("# Index\n\n[a](a.md)\n")
    (tmp_path / "a.md").write_text("# A\n\n[back](index.md) [b](sub/b.md)\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B\n")
    (tmp_path / "orphan.md").write_text("# Orphan\n\n[index](index.md)\n")
    assert {p.name for p in reachable(tmp_path / "index.md")} == {"index.md", "a.md", "b.md"}
    text = ("Intro.\n\nTrained in 56 s (2026-11-24).\n\n```bash\nmake demo   # ~1 min on 2 cores\n```\n\n"
            "What it prints: 300 steps in 40 s.\n\nA few seconds.")
    problems = dates_and_times(text, allowed="What it prints")
    assert len(problems) == 4, problems
    assert "'56 s'" in problems[0] and "'2026-11-24'" in problems[1] and "'1 min'" in problems[2]


def test_slugs_follow_the_code_hosts():
    assert slug("TRA beside FoT (the TRA paper's App. A)") == "tra-beside-fot-the-tra-papers-app-a"
    assert slug("Circuits: where the bit travels") == "circuits-where-the-bit-travels"
    assert slug("5. The hooks") == "5-the-hooks"
    assert anchors("# A\n\n## A\n") == {"a", "a-1"}


@pytest.mark.parametrize("path", TOURS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_tour_runs_as_written(path, tmp_path, monkeypatch):
    """The Python blocks of "A 5-minute tour" (the README's short one, the tutorial's full one), in
    order, in a fresh directory: what they write goes under runs/ there, nothing into the directory itself."""
    tour = path.read_text().split("## A 5-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", tour, flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, path.name, "exec"), namespace)
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    assert (tmp_path / "runs" / "tour" / "tra-mech-L1.html").stat().st_size > 0

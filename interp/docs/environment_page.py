"""The environment page of the reference, ``docs/reference/environment.md``: the environment variables
each module declares, the Makefile's variables and the numerical tolerances, read from the source
(:mod:`interp.docs.reference`)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from interp.docs.api_pages import PACKAGE_ROOTS
from interp.docs.markdown import ROOT, relative_link, table_cell

# Where environment variables are declared and tolerances stated: the library and its tests.
SCANNED_ROOTS = (*PACKAGE_ROOTS, "tests")
BOUND_NAME = re.compile(r"(^|_)(TOLERANCES?|RTOL|ATOL)(_|$)")
# A read of an environment variable: os.environ's get, setdefault or [], or os.getenv, of a string or a constant.
ENVIRONMENT_READ = re.compile(r"""(?:os\.environ(?:\.get|\.setdefault)?|getenv)\s*[(\[]\s*(\w+|"[^"]*"|'[^']*')""")
MAKE_VARIABLE = re.compile(r"^(\w+)\s*\?=\s*(.*)$")


def shown_path(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def scanned_files() -> list[Path]:
    return sorted(path for root in SCANNED_ROOTS for path in (ROOT / root).rglob("*.py")
                  if "__pycache__" not in path.parts)


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def string_constants(tree: ast.Module) -> dict[str, str]:
    """The module-level ``NAME = "text"`` assignments of ``tree``."""
    return {node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def declared_environment(path: Path) -> dict[str, tuple[str, str]]:
    """The module's ``ENVIRONMENT_VARIABLES`` dict, ``{name: (default, meaning)}``; a key may be a
    module-level string constant."""
    tree = parsed(path)
    constants = string_constants(tree)
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and getattr(
                node.targets[0] if isinstance(node, ast.Assign) else node.target, "id", None) == "ENVIRONMENT_VARIABLES":
            declared = {}
            for key, value in zip(node.value.keys, node.value.values):
                name = constants[key.id] if isinstance(key, ast.Name) else ast.literal_eval(key)
                declared[name] = ast.literal_eval(value)
            return declared
    return {}


def environment_reads(path: Path) -> list[str]:
    """The names of the environment variables the source of ``path`` reads (an assignment to an
    item of ``os.environ`` is not a read; a name another module holds, ``registry.NAME``, is that
    module's)."""
    constants = string_constants(parsed(path))
    names = []
    text = path.read_text()
    for match in ENVIRONMENT_READ.finditer(text):
        token = match.group(1)
        if re.match(r"\s*\]\s*=[^=]", text[match.end():]) or re.match(r"\.\w", text[match.end():]):
            continue
        names.append(token[1:-1] if token[0] in "\"'" else constants.get(token, token))
    return names


def declared_environment_variables(files: list[Path]) -> dict[str, tuple[str, str, list[Path]]]:
    """``{name: (default, meaning, the modules declaring it)}`` over ``files``."""
    variables: dict[str, tuple[str, str, list[Path]]] = {}
    for path in files:
        for name, (default, meaning) in declared_environment(path).items():
            variables.setdefault(name, (default, meaning, []))[2].append(path)
    return dict(sorted(variables.items()))


def undeclared_environment_reads(files: list[Path] | None = None) -> list[str]:
    """Every environment variable one of ``files`` (default: the scanned files) reads that none
    of them declares in its ``ENVIRONMENT_VARIABLES``."""
    files = scanned_files() if files is None else files
    declared = declared_environment_variables(files)
    return [f"{shown_path(path)}: {name} is read but no module declares it in ENVIRONMENT_VARIABLES"
            for path in files for name in sorted(set(environment_reads(path))) if name not in declared]


def comments_by_line(source: str) -> dict[int, str]:
    return {token.start[0]: token.string.lstrip("#").strip()
            for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT}


def tolerances(files: list[Path] | None = None) -> list[dict]:
    """Every module-level tolerance constant of ``files`` (default: the scanned files): ``path``,
    ``name``, ``value`` (its source text) and ``meaning`` (the comment on its line, or the
    comments just above it)."""
    found = []
    for path in scanned_files() if files is None else files:
        source = path.read_text()
        comments = None
        for node in parsed(path).body:
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            pairs = list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(
                value, ast.Tuple) else [(target, value)]
            pairs = [(name, value) for name, value in pairs
                     if isinstance(name, ast.Name) and BOUND_NAME.search(name.id)]
            if not pairs:
                continue
            comments = comments if comments is not None else comments_by_line(source)
            meaning = comments.get(node.end_lineno) or comments.get(node.lineno)
            if not meaning:
                above, line = [], node.lineno - 1
                while line in comments and source.splitlines()[line - 1].lstrip().startswith("#"):
                    above.insert(0, comments[line])
                    line -= 1
                meaning = " ".join(above)
            for name, value in pairs:
                found.append({"path": path, "name": name.id, "value": ast.get_source_segment(source, value),
                              "meaning": meaning})
    return found


def make_variables() -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2).strip()) for line in (ROOT / "Makefile").read_text().splitlines()
            if (match := MAKE_VARIABLE.match(line))]


def environment_page() -> str:
    page = Path("environment.md")
    lines = ["# Environment variables and tolerances", "",
             "Generated by `make docs`; back to the [reference index](index.md).", "", "## Contents", "",
             "- [Environment variables](#environment-variables)", "- [Make variables](#make-variables)",
             "- [Tolerances](#tolerances)", "", "## Environment variables", "",
             "Each is declared in the `ENVIRONMENT_VARIABLES` dict (`{name: (default, meaning)}`) of a module that reads "
             "it; a test fails on a read of a variable that no module declares.", "",
             "| variable | default | meaning | declared in |", "| --- | --- | --- | --- |"]
    for name, (default, meaning, paths) in declared_environment_variables(scanned_files()).items():
        where = ", ".join(f"[{path.relative_to(ROOT)}]({relative_link(path, page)})" for path in paths)
        lines.append(f"| `{name}` | {table_cell(default) or '(unset)'} | {table_cell(meaning)} | {where} |")
    lines += ["", "## Make variables", "",
              f"The `?=` variables of the [Makefile]({relative_link(ROOT / 'Makefile', page)}): "
              "`make VARIABLE=value` or the environment overrides each (the Makefile's comments say what they do).", "",
              "| variable | default |", "| --- | --- |"]
    lines += [f"| `{name}` | {f'`{table_cell(default)}`' if default else '(empty)'} |" for name, default in make_variables()]
    lines += ["", "## Tolerances", "",
              "Every module-level constant whose name holds `TOLERANCE`, `RTOL` or `ATOL`, with the comment that "
              "states what it bounds.", "", "| constant | value | meaning | defined in |", "| --- | --- | --- | --- |"]
    for found in sorted(tolerances(), key=lambda found: (str(found["path"]), found["name"])):
        path = found["path"]
        lines.append(f"| `{found['name']}` | `{table_cell(found['value'])}` | {table_cell(found['meaning'])} | "
                     f"[{path.relative_to(ROOT)}]({relative_link(path, page)}) |")
    return "\n".join(lines) + "\n"


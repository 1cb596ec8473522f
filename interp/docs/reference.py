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
import ast
import functools
import importlib
import inspect
import io
import os
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "reference"
PACKAGE_ROOTS = ("models", "interp", "kernels")
# Where environment variables are declared and tolerances stated: the library and its tests.
SCANNED_ROOTS = (*PACKAGE_ROOTS, "tests")
BOUND_NAME = re.compile(r"(^|_)(TOLERANCES?|RTOL|ATOL)(_|$)")
# A read of an environment variable: os.environ's get, setdefault or [], or os.getenv, of a string or a constant.
ENVIRONMENT_READ = re.compile(r"""(?:os\.environ(?:\.get|\.setdefault)?|getenv)\s*[(\[]\s*(\w+|"[^"]*"|'[^']*')""")
MAKE_VARIABLE = re.compile(r"^(\w+)\s*\?=\s*(.*)$")
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# The axis names of the hook shapes: sizes the tiny models do not share with one another.
HOOK_BATCH, HOOK_POSITIONS = 3, 11


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


# --- API pages ---------------------------------------------------------------------------------

def packages() -> list[str]:
    """Every package under :data:`PACKAGE_ROOTS`, dotted, sorted."""
    return sorted(".".join(init.parent.relative_to(ROOT).parts)
                  for root in PACKAGE_ROOTS for init in (ROOT / root).rglob("__init__.py")
                  if "__pycache__" not in init.parts)


def package_modules(package: str) -> list[str]:
    """The package and its public modules (direct ``.py`` children without a leading underscore)."""
    folder = ROOT.joinpath(*package.split("."))
    return [package, *(f"{package}.{path.stem}" for path in sorted(folder.glob("*.py"))
                       if not path.stem.startswith("_"))]


def source_path(module) -> Path:
    return Path(inspect.getsourcefile(module)).resolve()


def annotation_text(annotation) -> str:
    """An annotation as written: the string itself under ``from __future__ import annotations``,
    otherwise its name without the ``typing.``/``jaxtyping.`` prefixes."""
    text = annotation if isinstance(annotation, str) else \
        re.sub(r"\b(?:typing|jaxtyping)\.", "", inspect.formatannotation(annotation))
    return text if '"' in text else text.replace("'", '"')     # Python's repr and unparsing quote with '


class Written(str):
    """Text that a signature prints as it is: an annotation as written, a portable default."""

    def __repr__(self) -> str:
        return str(self)


def default_text(value) -> str:
    """A default as the code spells it where its repr depends on the process: the standard
    streams (which a test runner replaces) by name, any other value's repr made portable."""
    for name in ("stdout", "stderr"):
        if value is getattr(sys, name) or value is getattr(sys, f"__{name}__"):
            return f"sys.{name}"
    return portable(repr(value))


def signature_text(obj, name: str) -> str:
    """``name(parameters) -> return`` with annotations as written and portable defaults."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):     # a builtin or a class without an inspectable __init__
        return f"{name}(...)"
    empty = inspect.Parameter.empty
    parameters = [parameter.replace(
        annotation=empty if parameter.annotation is empty else Written(annotation_text(parameter.annotation)),
        default=empty if parameter.default is empty else Written(default_text(parameter.default)))
        for parameter in signature.parameters.values()]
    returned = signature.return_annotation
    written = signature.replace(parameters=parameters,
                                return_annotation=returned if returned is empty else Written(annotation_text(returned)))
    return f"{name}{written}".removesuffix(" -> None") if inspect.isclass(obj) else f"{name}{written}"


def public_members(module) -> list[tuple[str, object]]:
    """The functions and classes ``module`` defines (not those it imports), in source order;
    ``__all__`` narrows them where the module declares it."""
    names = getattr(module, "__all__", None)
    members = [(name, obj) for name, obj in vars(module).items()
               if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
               and obj.__module__ == module.__name__ and (names is None or name in names)]
    return sorted(members, key=lambda member: source_line(member[1]))


def source_line(obj) -> int:
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return 0


def class_methods(cls) -> list[tuple[str, object]]:
    """The public methods and properties ``cls`` defines itself, in source order."""
    found = []
    for name, attribute in vars(cls).items():
        if name.startswith("_"):
            continue
        function = attribute.__func__ if isinstance(attribute, (staticmethod, classmethod)) else attribute
        if inspect.isfunction(function) or isinstance(attribute, property):
            found.append((name, attribute))
    return sorted(found, key=lambda member: source_line(member[1].fget if isinstance(member[1], property)
                                                        else getattr(member[1], "__func__", member[1])))


def docstring_block(doc: str | None) -> list[str]:
    """A docstring as Markdown: dedented, in a quote so that its own ``#`` never becomes a heading."""
    text = markdown(doc)
    return [f"> {line}".rstrip() for line in text.splitlines()] + [""] if text else []


def member_entry(name: str, obj, link: str) -> list[str]:
    kind = "class" if inspect.isclass(obj) else "def"
    lines = [f"#### `{name}`", "", f"[source]({link})", "", "```python",
             f"{kind} {signature_text(obj, name)}", "```", "", *docstring_block(obj.__doc__)]
    if inspect.isclass(obj):
        for method_name, method in class_methods(obj):
            if isinstance(method, property):
                lines += [f"- `{name}.{method_name}` (property)"
                          + (f": {first_paragraph(method.__doc__)}" if method.__doc__ else "")]
                continue
            function = getattr(method, "__func__", method)
            summary = first_paragraph(function.__doc__)
            lines.append(f"- `{signature_text(function, f'{name}.{method_name}')}`" + (f": {summary}" if summary else ""))
        lines += [""] if lines[-1] else []
    return lines


def api_page(package: str) -> str:
    page = Path("api") / f"{package}.md"
    lines = [f"# `{package}`", "", "Generated from the docstrings by `make docs` "
             "(`python -m interp.docs.reference`); back to the [reference index](../index.md).", "",
             markdown(importlib.import_module(package).__doc__), ""]
    subpackages = [name for name in packages() if name.rpartition(".")[0] == package]
    if subpackages:
        lines += ["Subpackages: " + ", ".join(f"[`{name}`]({name}.md)" for name in subpackages) + ".", ""]
    modules = package_modules(package)
    lines += ["## Modules", ""]
    for name in modules:
        summary = first_paragraph(importlib.import_module(name).__doc__)
        lines.append(f"- [`{name}`](#{anchor(name)})" + (f": {summary}" if summary else ""))
    lines.append("")
    for name in modules:
        module = importlib.import_module(name)
        link = relative_link(source_path(module), page)
        lines += [f"## {name}", "", f"[source]({link})", ""]
        if name != package:
            lines += docstring_block(module.__doc__)
        for member_name, obj in public_members(module):
            lines += member_entry(member_name, obj, link)
    return "\n".join(lines).rstrip() + "\n"


def anchor(title: str) -> str:
    """The anchor a code host gives a heading (as ``tests/test_docs.py``'s ``slug``)."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


# --- CLI -----------------------------------------------------------------------------------------

def cli_page() -> str:
    from interp.cli import build_parser

    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    lines = ["# `glitchlens` commands", "",
             "Generated from `interp.cli.build_parser` by `make docs`; back to the [reference index](index.md). "
             "`glitchlens COMMAND --help` prints the same.", "", first_paragraph(parser.description), "",
             "## Contents", "", *(f"- [{name}](#{anchor(f'glitchlens {name}')})" for name in subparsers.choices), ""]
    for name, command in subparsers.choices.items():
        command.prog = f"glitchlens {name}"
        lines += [f"## glitchlens {name}", "", table_cell(command.description), "", "```",
                  portable(" ".join(command.format_usage().split()).removeprefix("usage: ")), "```", "",
                  "| argument | default | help |", "| --- | --- | --- |"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest}`"
            if action.choices is not None and not isinstance(action.choices, dict):
                flags += " {" + ", ".join(map(str, action.choices)) + "}"
            unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
            default = "required" if action.required else "" if unset else f"`{portable(str(action.default))}`"
            lines.append(f"| {flags} | {default} | {table_cell(action.help or '')} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- Hooks ---------------------------------------------------------------------------------------

def built_in_model_names() -> list[str]:
    from models import mechanisms
    from models.mechanisms import MODEL_FAMILIES

    return [name for name in MODEL_FAMILIES if mechanisms.plugin_class(name) is None]


@functools.cache
def tiny_model(name: str):
    """A tiny untrained model of ``name`` with two heads (the LSTM as its preset has it)."""
    import torch

    from models import ModelConfig, build_model

    options = {} if name == "lstm" else {"n_heads": 2}
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return build_model(ModelConfig.from_preset(name, "tiny", **options)).eval()


def axis_names(model) -> dict[int, str]:
    """The name of each size a tiny model's activations have; sizes two axes share are refused,
    so that a shape is never named wrongly."""
    cfg = model.cfg
    named = {"batch": HOOK_BATCH, "pos": HOOK_POSITIONS, "d_model": cfg.d_model, "d_vocab": cfg.d_vocab}
    if hasattr(model, "blocks"):
        named.update({"head": cfg.n_heads, "d_head": cfg.d_head, "d_mlp": cfg.d_mlp})
    sizes = {size: name for name, size in named.items()}
    if len(sizes) != len(named):
        raise ValueError(f"the tiny {cfg.model} model has two axes of one size: {named}")
    return sizes


def shape_text(shape, sizes: dict[int, str]) -> str:
    names = [sizes.get(size, str(size)) for size in shape]
    if names[-2:] == ["pos", "pos"]:
        names[-2:] = ["query_pos", "key_pos"]
    return "[" + ", ".join(names) + "]"


def hook_pattern(name: str) -> str:
    return re.sub(r"^blocks\.\d+\.", "blocks.{l}.", name)


def hook_meaning(model, name: str) -> str:
    """What the docstrings say of hook ``name``: the words after ````hook_x```` up to the next hook
    or the end of the clause, in the first docstring that names it, from the most basic class of
    the project's that the hook's module is an instance of (the common hooks' meaning) to its own
    class, each class's docstring before its module's. Shapes in the words are left out: the
    table has its own column."""
    owner_name, _, hook = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    classes = [cls for cls in reversed(type(owner).__mro__) if cls.__module__.split(".")[0] in PACKAGE_ROOTS]
    for cls in classes:
        for doc in (cls.__doc__, sys.modules[cls.__module__].__doc__):
            for paragraph in re.split(r"\n\s*\n|\n\s*- ", inspect.cleandoc(doc or "")):
                text = " ".join(re.sub(r"``\[[^\]]*\]``", "", paragraph).split())
                match = re.search(rf"``{hook}``((?:, ``\w+``)*:)?", text)
                words = match and clause(words_after(text[match.end():]))
                if words:
                    return words
    return ""


def words_after(text: str) -> str:
    """``text`` up to the end of its clause: a ``;`` or a sentence's ``.``, a parenthesis closing
    one opened before it, or the next hook named outside parentheses (other than as
    "TransformerLens's ``hook_x``")."""
    depth = 0
    for index, character in enumerate(text):
        depth += {"(": 1, ")": -1}.get(character, 0)
        rest, before = text[index:], text[:index]
        if depth < 0 or depth == 0 and (
                rest.startswith("``hook_") and not before.endswith("'s ")
                or re.match(r"[;.](\s|$)", rest) and not re.search(r"\b(eq|Sec|App|e\.g|i\.e)$", before)):
            return before
    return text


def clause(text: str) -> str:
    """``text`` without a leading verb, a dangling conjunction or an unmatched parenthesis, its
    inline code in single backticks."""
    text = re.sub(r"^(?:is|are|holds?)\s+", "", text.strip(" ,:"))
    text = re.sub(r"(?:[\s,(]+(?:and|or|also|the same|all))+[\s,(]*$|^(?:all|and)$", "", text).strip(" ,(")
    for opening, closing in (("(", ")"), (")", "(")):
        while text.count(opening) > text.count(closing):
            index = text.index(opening) if opening == "(" else text.rindex(opening)
            text = text[:index] + text[index + 1:]
    text = re.sub(r",\s*\(", " (", re.sub(r"\s+,", ",", re.sub(r",\s*,", ",", text)))
    return text.replace("``", "`").strip(" ,:")


def hooks_page() -> str:
    import torch

    rows: dict[tuple[str, str, str], dict] = {}
    silent: dict[str, list[str]] = {}
    for name in built_in_model_names():
        model = tiny_model(name)
        tokens = torch.arange(HOOK_BATCH * HOOK_POSITIONS).reshape(HOOK_BATCH, HOOK_POSITIONS) % model.cfg.d_vocab
        sizes = axis_names(model)
        fired = set(model.fired_hooks())
        with torch.no_grad():
            if hasattr(model, "set_use_attn_result"):
                model.set_use_attn_result(True)
            _, cache = model.run_with_cache(tokens)
            if hasattr(model, "set_use_attn_result"):
                model.set_use_attn_result(False)
        for hook, activation in cache.cache_dict.items():
            key = (hook_pattern(hook), shape_text(activation.shape, sizes), hook_meaning(model, hook))
            row = rows.setdefault(key, {"models": [], "switched": False})
            if name not in row["models"]:
                row["models"].append(name)
            row["switched"] |= hook not in fired
        for hook in model.hook_dict:
            if hook not in cache.cache_dict and name not in silent.setdefault(hook_pattern(hook), []):
                silent[hook_pattern(hook)].append(name)
    lines = ["# Hook points", "",
             "Generated by `make docs` from `fired_hooks()` and one `run_with_cache` on a tiny model of every built-in "
             "model name (two heads; the LSTM as its preset has it); back to the [reference index](index.md). "
             "`{l}` is the layer. Shapes name the axes: `batch`, `pos` (`query_pos`, `key_pos` for a map), `head`, "
             "`d_head`, `d_model` (the LSTM's hidden size), `d_mlp`, `d_vocab`. The meaning is the first words that the "
             "docstring of the class declaring the hook (or its module's) says after its name.", "",
             "| hook | shape | models that fire it | meaning |", "| --- | --- | --- | --- |"]
    for (hook, shape, meaning), row in sorted(rows.items()):
        models = ", ".join(row["models"])
        if row["switched"]:
            models += " (after `model.set_use_attn_result(True)`)"
        lines.append(f"| `{hook}` | `{shape}` | {models} | {table_cell(meaning)} |")
    lines += ["", "Hook points these models have but never call (`model.fired_hooks()` leaves them out, and a cache "
                  "asked for one says so):", ""]
    lines += [f"- `{hook}`: {', '.join(models)}" for hook, models in sorted(silent.items())]
    return "\n".join(lines) + "\n"


# --- Environment variables and tolerances --------------------------------------------------------

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
    lines += [f"| `{name}` | `{table_cell(default)}` |" for name, default in make_variables()]
    lines += ["", "## Tolerances", "",
              "Every module-level constant whose name holds `TOLERANCE`, `RTOL` or `ATOL`, with the comment that "
              "states what it bounds.", "", "| constant | value | meaning | defined in |", "| --- | --- | --- | --- |"]
    for found in sorted(tolerances(), key=lambda found: (str(found["path"]), found["name"])):
        path = found["path"]
        lines.append(f"| `{found['name']}` | `{table_cell(found['value'])}` | {table_cell(found['meaning'])} | "
                     f"[{path.relative_to(ROOT)}]({relative_link(path, page)}) |")
    return "\n".join(lines) + "\n"


# --- The pages -----------------------------------------------------------------------------------

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

"""The API pages of the reference, ``docs/reference/api/<package>.md`` (:mod:`interp.docs.reference`
says what each holds), from the docstrings and signatures of the packages' public members."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

from interp.docs.markdown import ROOT, anchor, first_paragraph, markdown, portable, relative_link

PACKAGE_ROOTS = ("models", "interp", "kernels")


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


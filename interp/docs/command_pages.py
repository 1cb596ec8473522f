"""The command and hook pages of the reference, ``docs/reference/cli.md`` (from the argument parser)
and ``docs/reference/hooks.md`` (from a run of a tiny model of every built-in name); see
:mod:`interp.docs.reference`."""

from __future__ import annotations

import argparse
import functools
import inspect
import re
import sys

from interp.docs.api_pages import PACKAGE_ROOTS
from interp.docs.markdown import anchor, first_paragraph, portable, table_cell

# The axis names of the hook shapes: sizes the tiny models do not share with one another.
HOOK_BATCH, HOOK_POSITIONS = 3, 11


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

    from models.mechanisms import built_in_names

    rows: dict[tuple[str, str, str], dict] = {}
    silent: dict[str, list[str]] = {}
    for name in built_in_names():
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


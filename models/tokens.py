"""What a model takes as input: the one check of token ids, shared by every model's embedding,
the strings the ids stand for (each task's vocabulary, by the task's name) and the tokenizer that
turns text into ids through a vocabulary."""

from __future__ import annotations

import sys

import numpy as np
import torch

# The flip-flop language's token strings by id, in the public dataset's mapping: the letters
# of ``interp.tasks.VOCAB``, repeated here because ``models`` never imports ``interp`` (a test
# checks that the two agree). The models' ``to_tokens`` / ``to_str_tokens`` read them.
FLIPFLOP_VOCAB = ("w", "r", "i", "0", "1")

# The vocabularies of the two tasks whose trained models ship (``interp.tasks``'s, repeated here
# as above), by the task name a checkpoint records.
TASK_VOCABS: dict[str, tuple[str, ...]] = {"flipflop": FLIPFLOP_VOCAB, "automaton": ("0", "1", "_")}


def task_vocab(task: str | None) -> tuple[str, ...]:
    """The vocabulary of the task named ``task``, so that a model reads text through the task it
    was trained on: flip-flop's for None (a model built here), one of :data:`TASK_VOCABS`, or that
    of a task ``interp.tasks`` knows when that package is loaded (``models`` never imports it:
    it asks the registry only if something else did); otherwise a one-line error."""
    if task is None:
        return FLIPFLOP_VOCAB
    if task in TASK_VOCABS:
        return TASK_VOCABS[task]
    registry = sys.modules.get("interp.tasks.registry")
    if registry is None:
        raise ValueError(f"the model was trained on the task {task!r}, whose vocabulary is not known here: "
                         f"import interp.tasks (which registers it) or assign model.vocab")
    return tuple(registry.get_task(task).vocab)


def tokenize(text: str, vocab: tuple[str, ...]) -> list[int]:
    """The ids of ``text`` read as tokens of ``vocab``: at each position the longest token that
    matches, spaces between tokens skipped unless a space is itself a token. So ``"w1r1"`` is four
    flip-flop tokens and ``"x=0 x++"`` two counting ones. A ``ValueError`` names the first
    position that no token matches."""
    ids = {token: index for index, token in enumerate(vocab)}
    longest = max(map(len, vocab))
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos] == " " and " " not in ids:
            pos += 1
            continue
        match = next((text[pos:pos + n] for n in range(longest, 0, -1) if text[pos:pos + n] in ids), None)
        if match is None:
            raise ValueError(f"{text[pos]!r} at position {pos} of {text!r} is not a token; "
                             f"the vocabulary is {' '.join(vocab)}")
        tokens.append(ids[match])
        pos += len(match)
    return tokens


def detokenize(ids: list[int], vocab: tuple[str, ...]) -> str:
    """The text of ``ids``: the tokens joined, by a space where some token is longer than one
    character (so that :func:`tokenize` reads it back)."""
    return ("" if max(map(len, vocab)) == 1 else " ").join(vocab[token] for token in ids)


def as_token_ids(tokens: torch.Tensor | np.ndarray, d_vocab: int, name: str = "tokens") -> torch.Tensor:
    """``[batch, pos]`` token ids as ``int64``, or a ``ValueError`` saying what is wrong with the
    argument ``name``.

    Any integer dtype is taken: ``uint8`` is what ``load_split`` returns, and indexing with a
    ``uint8`` tensor would silently select rows by *mask* instead. Floats and bools are
    refused rather than rounded. Empty inputs (no sequences, or T = 0) are valid.
    """
    if isinstance(tokens, np.ndarray):
        try:
            tokens = torch.from_numpy(tokens)
        except TypeError:   # strings, objects: no tensor holds them
            raise ValueError(f"{name}: token ids must be integers, got dtype {tokens.dtype}") from None
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(tokens).__name__}")
    if tokens.ndim != 2:
        raise ValueError(f"{name} must be [batch, pos], got shape {tuple(tokens.shape)}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name}: token ids must be integers, got {tokens.dtype}")
    # under a torch.func transform (the seeds of ``interp.training.batched``) the values cannot be
    # read; the caller checks the batches before the transform
    if tokens.numel() and not torch._C._functorch.is_functorch_wrapped_tensor(tokens) and (
            tokens.min() < 0 or tokens.max() >= d_vocab):
        raise ValueError(f"{name}: token ids must lie in [0, {d_vocab}); got {tokens.min()}..{tokens.max()}")
    return tokens.long()

"""Reads and their answers: where the right bit of each read comes from, and the logit
difference that measures how much the model prefers it (conventions: :mod:`interp.circuits`)."""

from __future__ import annotations

import numpy as np
import torch

from interp.circuits.metrics import token_ids_of
from interp.evaluate import scored_lengths
from interp.tasks import D_VOCAB, ONE, READ, ZERO, last_write_positions


def read_answers(tokens, reads, rows=None) -> tuple[torch.Tensor, torch.Tensor]:
    """For the read at ``reads[b]`` of sequence ``rows[b]`` (default: row b): the position of
    its most recent ``w`` and the bit (0/1) that write stored, both ``[len(reads)]``. A
    position that is not an ``r``, or an ``r`` with no write before it, is a ``ValueError``."""
    ids = token_ids_of("tokens", tokens, D_VOCAB).numpy()
    at = _positions("reads", reads)
    rows = np.arange(len(at)) if rows is None else _positions("rows", rows)
    if len(rows) != len(at):
        raise ValueError(f"rows: {len(rows)} rows for {len(at)} reads; give one row per read")
    if ((at < 0) | (at >= ids.shape[1])).any() or ((rows < 0) | (rows >= len(ids))).any():
        raise ValueError(f"reads, rows: positions must lie in [0, {ids.shape[1]}) and rows in [0, {len(ids)})")
    not_read = np.flatnonzero((ids[rows, at] != READ) | (at % 2 == 1))
    if len(not_read):
        b = int(not_read[0])
        raise ValueError(f"reads: sequence {rows[b]}, position {at[b]} holds token {ids[rows[b], at[b]]}, "
                         f"not an r instruction (id {READ}) at an even position")
    write = last_write_positions(ids)[rows, at]
    if (write < 0).any():
        b = int(np.argmax(write < 0))
        raise ValueError(f"reads: sequence {rows[b]}, the read at {at[b]} has no w before it, so no right answer")
    return torch.from_numpy(write), torch.from_numpy(ids[rows, write + 1].astype(np.int64) - ZERO)


def _positions(argument: str, values) -> np.ndarray:
    """``values`` as a 1-D integer array, or a ``TypeError``/``ValueError`` naming ``argument``."""
    if not isinstance(values, (torch.Tensor, np.ndarray, list, tuple)):
        raise TypeError(f"{argument} must be a tensor, array or list of positions, got a {type(values).__name__}")
    try:
        array = np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{argument} must hold integer positions ({type(err).__name__})") from None
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise ValueError(f"{argument} must be a 1-D list of integer positions, got {array.dtype} {array.shape}")
    return array.astype(np.int64)


def logit_difference(logits: torch.Tensor, reads: torch.Tensor, bit: torch.Tensor) -> torch.Tensor:
    """``logits [batch, pos, d_vocab]`` -> ``[batch]``: logit of ``bit`` minus logit of the
    other bit at each row's read."""
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[-1] != D_VOCAB:
        raise ValueError(f"logits must be a flip-flop model's [batch, pos, {D_VOCAB}] tensor")
    reads, bit = torch.from_numpy(_positions("reads", reads)), torch.from_numpy(_positions("bit", bit))
    if not len(reads) == len(bit) == len(logits):
        raise ValueError(f"reads and bit must hold one entry per row of logits ({len(logits)})")
    if ((reads < 0) | (reads >= logits.shape[1])).any() or ((bit < 0) | (bit > 1)).any():
        raise ValueError(f"reads must lie in [0, {logits.shape[1]}) and bit in {{0, 1}}")
    at = logits[torch.arange(len(reads), device=logits.device), reads.to(logits.device)]
    bit = bit.to(logits.device)[:, None]
    return (at.gather(1, ZERO + bit) - at.gather(1, ONE - bit))[:, 0].double()


def reads_up_to(model, tokens: torch.Tensor, reads: torch.Tensor) -> torch.Tensor:
    """``tokens`` cut after the latest read: the models are causal, so the later tokens change
    no prediction at these reads (Label positions excepted, see ``scored_lengths``)."""
    mask = np.zeros(tuple(tokens.shape), dtype=bool)
    mask[np.arange(len(reads)), reads.cpu().numpy()] = True
    return tokens[:, :int(scored_lengths(model, tokens.cpu().numpy(), mask).max())]

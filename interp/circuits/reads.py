"""Reads and their answers: where the right bit of each read comes from, and the logit
difference that measures how much the model prefers it (conventions: :mod:`interp.circuits`)."""

from __future__ import annotations

import numpy as np
import torch

from interp.evaluate import scored_lengths
from interp.tasks import ONE, READ, ZERO, last_write_positions


def read_answers(tokens, reads, rows=None) -> tuple[torch.Tensor, torch.Tensor]:
    """For the read at ``reads[b]`` of sequence ``rows[b]`` (default: row b): the position of
    its most recent ``w`` and the bit (0/1) that write stored, both ``[len(reads)]``. A
    position that is not an ``r``, or an ``r`` with no write before it, is a ``ValueError``."""
    ids = torch.as_tensor(tokens).cpu().numpy()
    at = torch.as_tensor(reads).cpu().numpy()
    rows = np.arange(len(at)) if rows is None else torch.as_tensor(rows).cpu().numpy()
    if ((at < 0) | (at >= ids.shape[1])).any():
        raise ValueError(f"read positions {at.tolist()} must lie in [0, {ids.shape[1]})")
    not_read = np.flatnonzero((ids[rows, at] != READ) | (at % 2 == 1))
    if len(not_read):
        b = int(not_read[0])
        raise ValueError(f"sequence {rows[b]}: position {at[b]} holds token {ids[rows[b], at[b]]}, "
                         f"not an r instruction (id {READ}) at an even position")
    write = last_write_positions(ids)[rows, at]
    if (write < 0).any():
        b = int(np.argmax(write < 0))
        raise ValueError(f"sequence {rows[b]}: the read at {at[b]} has no w before it, so no right answer")
    return torch.from_numpy(write), torch.from_numpy(ids[rows, write + 1].astype(np.int64) - ZERO)


def logit_difference(logits: torch.Tensor, reads: torch.Tensor, bit: torch.Tensor) -> torch.Tensor:
    """``logits [batch, pos, d_vocab]`` -> ``[batch]``: logit of ``bit`` minus logit of the
    other bit at each row's read."""
    at = logits[torch.arange(len(reads), device=logits.device), reads.to(logits.device)]
    bit = bit.to(logits.device)[:, None]
    return (at.gather(1, ZERO + bit) - at.gather(1, ONE - bit))[:, 0].double()


def reads_up_to(model, tokens: torch.Tensor, reads: torch.Tensor) -> torch.Tensor:
    """``tokens`` cut after the latest read: the models are causal, so the later tokens change
    no prediction at these reads (Label positions excepted, see ``scored_lengths``)."""
    mask = np.zeros(tuple(tokens.shape), dtype=bool)
    mask[np.arange(len(reads)), reads.cpu().numpy()] = True
    return tokens[:, :int(scored_lengths(model, tokens.cpu().numpy(), mask).max())]

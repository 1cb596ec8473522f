"""(clean, corrupt) pairs of runs of the same read that differ in a few tokens: the bit
flipped (what carries the bit) or a distractor edited away (what carries a glitch); conventions:
:mod:`interp.circuits`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from interp.circuits.reads import logit_difference, read_answers, reads_up_to
from interp.tasks import D_VOCAB, IGNORE, ONE, READ, ZERO, last_write_positions, read_mask
from models.tokens import as_token_ids


@dataclass
class ReadPairs:
    """Two runs of the same reads that differ in a few tokens.

    ``clean``, ``corrupt``: ``[pair, pos]`` token ids the model reads; ``read``: ``[pair]``
    position of the ``r`` whose prediction is compared; ``info``: one row per pair (``pair``,
    ``seq`` and ``position`` of the read it came from, ``write_pos``, ``answer`` of the clean
    run, ``edit``: what differs, ``edit_pos``: the first position that differs); ``unpaired``:
    the reads no partner was found for, with the reason.
    """

    clean: torch.Tensor
    corrupt: torch.Tensor
    read: torch.Tensor
    info: pd.DataFrame
    unpaired: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __len__(self) -> int:
        return len(self.read)


def _selected_reads(tokens: np.ndarray, reads: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    if reads is None:
        return np.nonzero(read_mask(tokens))
    missing = {"seq", "position"} - set(reads.columns)
    if missing:
        raise ValueError(f"reads needs the columns seq and position (a read_table frame); missing {sorted(missing)}")
    return np.array(reads.seq, dtype=np.int64), np.array(reads.position, dtype=np.int64)


def bit_flip_pairs(tokens, reads: pd.DataFrame | None = None) -> ReadPairs:
    """For each read: clean = its sequence, corrupt = the same sequence had its last write
    stored the other bit. So the corrupt run's right answer is the other bit, and patching
    from clean into corrupt asks *which activations carry the bit* to the read.

    The write's bit is flipped together with the bit of every ``r`` that reads that write (a
    read repeats it), so the corrupt sequence is a valid flip-flop sequence whose every read
    is right: flipping the write alone would leave the reads between it and this one
    contradicting it, and the model may copy from those. Nothing else changes. A read with
    no write before it has no bit to flip and is skipped.

    ``tokens``: ``[n, pos]`` ids; ``reads``: rows with ``seq`` and ``position`` (e.g. the
    correct rows of ``read_table``); default every read.
    """
    ids = as_token_ids(tokens, D_VOCAB).numpy()
    seq, position = _selected_reads(ids, reads)
    write = last_write_positions(ids)[seq, position]
    pairs = np.flatnonzero(write >= 0)
    seq, position, write = seq[pairs], position[pairs], write[pairs]
    clean = ids[seq]
    corrupt = clean.copy()
    same_write = last_write_positions(clean) == write[:, None]
    copies = np.zeros_like(same_write)
    copies[:, 1:] = same_write[:, :-1] & read_mask(clean)[:, :-1]        # the bit after each such read
    flip = copies | (np.arange(clean.shape[1]) == write[:, None] + 1)
    corrupt[flip] = ZERO + ONE - corrupt[flip]
    info = pd.DataFrame({"pair": np.arange(len(seq)), "seq": seq, "position": position, "write_pos": write,
                         "answer": clean[np.arange(len(seq)), write + 1] - ZERO, "edit": "flip the last write's bit",
                         "edit_pos": write + 1})
    return ReadPairs(torch.from_numpy(clean), torch.from_numpy(corrupt), torch.from_numpy(position), info)


def _single_edits(sequence: np.ndarray, write: int, read: int, bit: int) -> list[tuple[int, int, int, str]]:
    """Every change of one instruction pair strictly between the last write and the read that
    keeps the sequence valid and the answer ``bit``: ``(position, instruction, bit, text)``."""
    edits = []
    for pos in range(write + 2, read, 2):
        instruction, own_bit = int(sequence[pos]), int(sequence[pos + 1]) - ZERO
        if instruction == IGNORE:
            edits += [(pos, IGNORE, 1 - own_bit, f"i{own_bit} -> i{1 - own_bit} at {pos}"),
                      (pos, READ, bit, f"i{own_bit} -> r{bit} at {pos}")]
        elif instruction == READ:
            edits += [(pos, IGNORE, b, f"r{bit} -> i{b} at {pos}") for b in (0, 1)]
    return edits


@torch.no_grad()
def glitch_pairs(model, tokens, glitches: pd.DataFrame) -> ReadPairs:
    """For each glitch (a read the model gets wrong): corrupt = its sequence, clean = the
    closest sequence with the same answer that the model reads right.

    "Closest" is one edited instruction pair strictly between the read's last write and the
    read: an ``i`` whose bit is flipped, an ``i b`` turned into ``r`` (its bit then repeats the
    write), or an ``r`` turned into ``i 0`` / ``i 1``. Each keeps the sequence valid and the
    answer unchanged, so the two runs differ only in what distracts the model, and patching
    from clean into corrupt asks *which activations carry the glitch*. Of the edits after
    which the model's argmax at the read is the right bit, the one with the largest logit
    difference is kept (the clearest contrast). Edits before the last write (an older
    write's bit, say) are not searched; a glitch that no edit fixes goes to ``unpaired``.

    ``tokens``: ``[n, pos]`` ids; ``glitches``: rows with ``seq`` and ``position`` (e.g.
    ``glitch_table``).
    """
    ids = as_token_ids(tokens, model.cfg.d_vocab).numpy()
    found, unpaired = [], []
    for s, p in zip(*_selected_reads(ids, glitches)):
        write, bit = (int(x[0]) for x in read_answers(ids, [p], rows=[s]))
        edits = _single_edits(ids[s], write, p, bit)
        if not edits:
            unpaired.append({"seq": s, "position": p, "reason": "no instruction between the write and the read"})
            continue
        candidates = np.repeat(ids[s:s + 1], len(edits), axis=0)
        for row, (pos, instruction, new_bit, _) in enumerate(edits):
            candidates[row, pos:pos + 2] = instruction, ZERO + new_bit
        reads = torch.full((len(edits),), p)
        logits = model(reads_up_to(model, torch.from_numpy(candidates), reads).to(model.cfg.device))
        difference = logit_difference(logits, reads, torch.full((len(edits),), bit)).cpu()
        right = logits[:, p].argmax(-1).cpu() == ZERO + bit
        if not right.any():
            unpaired.append({"seq": s, "position": p, "reason": f"none of {len(edits)} single edits is read right"})
            continue
        best = int(torch.where(right, difference, -torch.inf).argmax())
        edit_pos, _, _, edit = edits[best]
        info = {"seq": s, "position": p, "write_pos": write, "answer": bit, "edit": edit, "edit_pos": edit_pos}
        found.append((candidates[best], ids[s], p, info))
    if not found:
        raise ValueError(f"no partner found for any of the {len(unpaired)} glitches: "
                         + "; ".join(f"seq {u['seq']} read {u['position']}: {u['reason']}" for u in unpaired))
    clean, corrupt, read, info = zip(*found)
    return ReadPairs(torch.from_numpy(np.stack(clean)), torch.from_numpy(np.stack(corrupt)), torch.tensor(read),
                     pd.DataFrame(info).rename_axis("pair").reset_index(), pd.DataFrame(unpaired))

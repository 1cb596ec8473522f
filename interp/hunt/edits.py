"""The edits of the guided search: each turns a valid flip-flop sequence into another."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interp.tasks import ONE, READ, WRITE, ZERO, last_write_positions, sample_ffl

MAX_BLOCK = 64       # pairs one edit overwrites or jumps at most (a sparse gap in one or two edits)


def with_reads_recomputed(pairs: np.ndarray) -> np.ndarray:
    """``[P, 2]`` (instruction, bit) pairs whose first instruction is ``w`` -> tokens ``[2P]``
    in which every read's bit is the bit of the most recent write, as the language's rule says."""
    tokens = pairs.reshape(-1).copy()
    reads = np.flatnonzero((tokens == READ) & (np.arange(len(tokens)) % 2 == 0))
    tokens[reads + 1] = tokens[last_write_positions(tokens)[reads] + 1]
    return tokens


def _block_size(rng: np.random.Generator, most: int) -> int:
    """A number of pairs, log-uniform in [1, MAX_BLOCK] (single pairs as often as long runs),
    at most ``most``."""
    return min(most, int(2 ** rng.uniform(0, np.log2(MAX_BLOCK + 1))))


def sampled_pairs(rng: np.random.Generator, n: int, p_i: float) -> np.ndarray:
    """``[n, 2]`` pairs whose instructions follow FFL(p_i) (their read bits are fixed later):
    the middle of one ``sample_ffl`` draw, whose first and last pairs are forced."""
    return sample_ffl(1, 2 * n + 4, p_i, rng)[0, 2:-2].reshape(n, 2)


@dataclass(frozen=True)
class Edits:
    """The edits of the guided search, on ``[P, 2]`` (instruction, bit) pairs. None touches the
    first pair (the write every sequence starts with) or turns the last pair into anything but
    a read; :meth:`apply` recomputes the reads' bits after them, so every result is a valid
    flip-flop sequence.

    Only :meth:`lengthen` changes the length, by ``step`` pairs up to ``max_pairs``:
    distractors overwrite pairs rather than being inserted, so the failing sequences fall into
    a few lengths, each a file that ``glitchlens eval --data`` reads. ``p_i``: the distribution
    that :meth:`lengthen` continues a sequence with.
    """

    p_i: float
    step: int
    max_pairs: int

    def flip_write_bit(self, pairs, rng):
        """Flip the bit of one write (the reads that repeat it change with it)."""
        pairs = pairs.copy()
        write = rng.choice(np.flatnonzero(pairs[:, 0] == WRITE))
        pairs[write, 1] = ZERO + ONE - pairs[write, 1]
        return pairs

    def change_instruction(self, pairs, rng):
        """Turn one instruction between the first and the last into one of the other two."""
        pairs = pairs.copy()
        if len(pairs) > 2:
            at = rng.integers(1, len(pairs) - 1)
            pairs[at, 0] = (pairs[at, 0] + rng.integers(1, 3)) % 3
        return pairs

    def _overwrite(self, pairs, rng, p_i: float):
        """A run of pairs between the first and the last replaced by pairs of FFL(p_i)."""
        pairs = pairs.copy()
        if len(pairs) > 2:
            size = _block_size(rng, len(pairs) - 2)
            at = rng.integers(1, len(pairs) - size)
            pairs[at:at + size] = sampled_pairs(rng, size, p_i)
        return pairs

    def denser_ignores(self, pairs, rng):
        """Sparse-like distractors: a run of ignores, which also drops the writes it covers."""
        return self._overwrite(pairs, rng, 1.0)

    def denser_operations(self, pairs, rng):
        """Dense-like distractors: a run of writes and reads, even odds."""
        return self._overwrite(pairs, rng, 0.0)

    def move_write_back(self, pairs, rng):
        """Move the last write of one read earlier, further from the read but still after the
        write before it (so it stays the read's last write); the pairs it jumps shift one later."""
        read = rng.choice(np.flatnonzero(pairs[:, 0] == READ))
        writes = np.flatnonzero(pairs[:, 0] == WRITE)
        writes = writes[writes < read]
        if len(writes) < 2 or writes[-1] - writes[-2] < 2:
            return pairs
        write = writes[-1]
        to = write - _block_size(rng, write - writes[-2] - 1)
        return np.insert(np.delete(pairs, write, axis=0), to, pairs[write], axis=0)

    def lengthen(self, pairs, rng):
        """Continue the sequence by ``step`` pairs of FFL(p_i) (fewer at ``max_pairs``), its
        final read moved to the new end."""
        block = sampled_pairs(rng, min(self.step, self.max_pairs - len(pairs)), self.p_i)
        return np.insert(pairs, len(pairs) - 1, block, axis=0)

    def apply(self, tokens: np.ndarray, rng: np.random.Generator, n_edits: int) -> np.ndarray:
        """``tokens [T]`` after ``n_edits`` edits drawn uniformly from ``EDIT_NAMES`` (without
        :meth:`lengthen` once the sequence has ``max_pairs`` pairs)."""
        pairs = tokens.reshape(-1, 2)
        for _ in range(n_edits):
            fits = [edit for edit in EDIT_NAMES if edit != "lengthen" or len(pairs) < self.max_pairs]
            pairs = getattr(self, fits[rng.integers(len(fits))])(pairs, rng)
        return with_reads_recomputed(pairs)


EDIT_NAMES = ("flip_write_bit", "change_instruction", "denser_ignores", "denser_operations", "move_write_back",
              "lengthen")

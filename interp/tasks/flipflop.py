"""The flip-flop language FFL(T, p) (Liu et al., "Exposing Attention Glitches", Sec. 3.1).

A flip-flop string is T tokens of alternating (instruction, bit) pairs. The first
instruction is ``w``, the last is ``r``, the others are i.i.d. from (p_w, p_r, p_i).
Bits after ``w`` and ``i`` are uniform; the bit after ``r`` equals the bit of the most
recent ``w``. ``FFL(p_i)`` is shorthand for p_w = p_r = (1 - p_i) / 2.

Sequences are ``uint8`` arrays of token ids in the public dataset's mapping
(``w``=0, ``r``=1, ``i``=2, ``0``=3, ``1``=4); ``uint8`` keeps the 10^5-sequence sparse
split at 51 MB instead of 400 MB.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models import validate

WRITE, READ, IGNORE, ZERO, ONE = 0, 1, 2, 3, 4
# The most tokens one draw holds (n x seq_len; 256 MiB as uint8, with 768 MiB of temporaries), so
# that a mistyped size is refused with its limit instead of failing in numpy's allocator. The
# 10^5-sequence sparse split is 5.1 x 10^7 tokens.
MAX_TOKENS = 1 << 28
VOCAB = ("w", "r", "i", "0", "1")
D_VOCAB = len(VOCAB)


def instruction_probs(p_i: float) -> tuple[float, float, float]:
    """(p_w, p_r, p_i) of FFL(p_i): writes and reads share the non-ignore mass equally."""
    p_i = validate.number("p_i", p_i, 0, 1)
    return ((1.0 - p_i) / 2, (1.0 - p_i) / 2, p_i)


def sample_ffl(
    n: int,
    seq_len: int = 512,
    p_i: float | np.ndarray = 0.8,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Draw ``n`` sequences from FFL(seq_len, p_i), vectorised over the whole batch.

    ``p_i`` is a scalar or an array of shape ``[n]`` (one distribution per sequence, used
    by the long-tailed mixture). Returns ``uint8 [n, seq_len]``.

    All randomness comes from a single ``[n, pairs]`` draw of 32-bit integers, so row ``k``
    depends only on the seed and ``k``: the first ``m`` sequences of a seed are the
    same whatever ``n >= m`` is asked for (``-n`` takes a prefix of a canonical split).
    """
    if validate.integer("seq_len", seq_len) < 4 or seq_len % 2:
        raise ValueError(f"seq_len must be an even number >= 4, got {seq_len}")
    check_draw_size(n, seq_len)
    if validate.is_array(p_i) or isinstance(p_i, (list, tuple)):
        probabilities = np.asarray(validate.array("p_i", p_i, "real", (0, 1), lists=True, empty=True), np.float64)
        if probabilities.ndim and probabilities.shape != (n,):
            raise ValueError(f"p_i must be one number or one per sequence, [{n}], got shape {probabilities.shape}")
    else:
        probabilities = np.float64(validate.number("p_i", p_i))
    if not np.all((probabilities >= 0) & (probabilities <= 1)):
        raise ValueError(f"p_i must lie in [0, 1], got {p_i}")
    rng = np.random.default_rng(validate.seed("rng", rng))
    pairs = seq_len // 2
    p_w = ((1.0 - np.broadcast_to(probabilities, (n,))) / 2)[:, None]

    # One 32-bit draw per pair: the low bit is the data bit, the upper 31 bits a uniform
    # for the instruction (WRITE=0 below p_w, READ=1 below 2 p_w, IGNORE=2 above).
    draws = rng.integers(0, 2**32, size=(n, pairs), dtype=np.uint32)
    bits = (draws & 1).astype(np.uint8)
    u_instr = draws >> 1
    write_below = np.round(p_w * 2**31).astype(np.uint32)
    read_below = np.round(2 * p_w * 2**31).astype(np.uint32)
    instr = (u_instr >= write_below).astype(np.uint8) + (u_instr >= read_below)
    instr[:, 0] = WRITE
    instr[:, -1] = READ

    # Index of the most recent write at or before each pair: a running max of write indices.
    write_idx = np.where(instr == WRITE, np.arange(pairs, dtype=np.int32), 0)
    last_write = np.maximum.accumulate(write_idx, axis=1)
    bits = np.where(instr == READ, bits[np.arange(n)[:, None], last_write], bits)

    tokens = np.empty((n, seq_len), dtype=np.uint8)
    tokens[:, 0::2] = instr
    tokens[:, 1::2] = bits + ZERO
    return tokens


def check_draw_size(n: int, seq_len: int, what: str = "sequences") -> None:
    """Refuse ``n`` sequences of ``seq_len`` tokens when they exceed :data:`MAX_TOKENS` (or when
    either is not an integer >= 0)."""
    n, seq_len, what = validate.integer("n", n, 0), validate.integer("seq_len", seq_len, 0), validate.text("what", what)
    if n * seq_len > MAX_TOKENS:
        raise ValueError(f"{n:,} {what} of {seq_len:,} tokens are {n * seq_len:,} tokens, more than the "
                         f"{MAX_TOKENS:,} (interp.tasks.MAX_TOKENS) one draw holds: ask for fewer or shorter ones "
                         "(n, seq_len)")


def sample_mixture(
    n: int,
    seq_len: int = 512,
    p_is: tuple[float, ...] = (0.8, 0.98, 0.1),
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """The long-tailed training mixture (App. B.3): each sequence picks its p_i uniformly."""
    p_is = validate.reals("p_is", p_is, 0, 1)
    check_draw_size(n, validate.integer("seq_len", seq_len))
    rng = np.random.default_rng(validate.seed("rng", rng))
    choice = rng.integers(0, len(p_is), size=n)
    return sample_ffl(n, seq_len, np.asarray(p_is)[choice], rng)


@dataclass(frozen=True)
class Split:
    """A canonical split: FFL(p_i) at T = 512, from its own fixed seed."""

    name: str
    p_i: float
    size: int
    seed: int
    published_reads: int | None = None


SPLITS: dict[str, Split] = {
    "iid": Split("iid", 0.8, 1_000, 51_001, published_reads=26_508),
    "sparse": Split("sparse", 0.98, 100_000, 51_002, published_reads=353_875),
    "dense": Split("dense", 0.1, 3_000, 51_003, published_reads=345_781),
}
TRAIN_P_I = 0.8
CANONICAL_SEQ_LEN = 512


def split_size(name: str, n: int | None = None) -> int:
    """How many sequences of canonical split ``name`` the first ``n`` are (default: all): a
    ValueError for an unknown split or an ``n`` it does not have, before any work."""
    if validate.text("name", name) not in SPLITS:
        raise ValueError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    size = SPLITS[name].size
    n = size if n is None else validate.integer("n", n)
    if not 0 < n <= size:
        raise ValueError(f"split {name!r} has {size} sequences; asked for n={n}")
    return n


def load_split(name: str, n: int | None = None, seq_len: int = CANONICAL_SEQ_LEN) -> np.ndarray:
    """The first ``n`` sequences (default: all) of a canonical evaluation split."""
    n = split_size(name, n)
    return sample_ffl(n, seq_len, SPLITS[name].p_i, SPLITS[name].seed)


# The seed of held-out FFL(0.8) sequences at any length: no canonical split uses it, and
# training batches come from default_rng([seed, step]), a different stream for every seed.
HELD_OUT_SEED = 987_654


def held_out(n: int, seq_len: int) -> np.ndarray:
    """``n`` sequences of the training distribution FFL(0.8) at ``seq_len`` that no run trains on:
    whether a model learned the task at its training length, apart from extrapolation."""
    return sample_ffl(n, seq_len, TRAIN_P_I, HELD_OUT_SEED)


def train_batch(
    batch_size: int, step: int, seed: int, seq_len: int = CANONICAL_SEQ_LEN, mixture: bool = False
) -> np.ndarray:
    """The fresh training batch of ``step``: a pure function of (seed, step), so resuming
    a run at any step sees exactly the data an uninterrupted run would have seen."""
    batch_size = validate.integer("batch_size", batch_size, 0)
    step, seed = validate.integer("step", step, 0), validate.integer("seed", seed, 0)
    rng = np.random.default_rng([seed, step])
    if validate.flag("mixture", mixture):
        return sample_mixture(batch_size, seq_len, rng=rng)
    return sample_ffl(batch_size, seq_len, TRAIN_P_I, rng)


def read_mask(tokens: np.ndarray) -> np.ndarray:
    """True at each ``r`` instruction: the positions whose next token is scored."""
    tokens = token_ids(tokens)
    mask = np.zeros(tokens.shape, dtype=bool)
    mask[..., 0::2] = tokens[..., 0::2] == READ
    return mask


def token_ids(tokens) -> np.ndarray:
    """``tokens``, integer ids ``[..., T]`` (an array, a tensor or a list), or a one-line error."""
    return validate.array("tokens", tokens, "integer", (1, 2, 3), lists=True, empty=True)


def count_reads(tokens: np.ndarray) -> int:
    return int(read_mask(tokens).sum())


def last_write_positions(tokens: np.ndarray) -> np.ndarray:
    """For every position t, the token index of the most recent ``w`` at or before t
    (``-1`` before the first write). Shape as ``tokens``."""
    tokens = token_ids(tokens)
    pos = np.arange(tokens.shape[-1])
    is_write = (tokens == WRITE) & (pos % 2 == 0)
    idx = np.where(is_write, pos, -1)
    return np.maximum.accumulate(idx, axis=-1)


def flip_last_write(tokens: np.ndarray, write: np.ndarray) -> np.ndarray:
    """Copies of ``tokens [n, T]`` in which the write at ``write [n]`` (a ``w``'s position in each
    row) stores the other bit, and so does every ``r`` that reads that write (a read repeats its
    write's bit): each row stays a valid flip-flop sequence whose reads are all right, and nothing
    else changes."""
    tokens, write = np.asarray(tokens), np.asarray(write)
    same_write = last_write_positions(tokens) == write[:, None]
    copies = np.zeros_like(same_write)
    copies[:, 1:] = same_write[:, :-1] & read_mask(tokens)[:, :-1]        # the bit after each such read
    flip = copies | (np.arange(tokens.shape[1]) == write[:, None] + 1)
    flipped = tokens.copy()
    flipped[flip] = ZERO + ONE - flipped[flip]
    return flipped


def current_bits(tokens: np.ndarray) -> np.ndarray:
    """For every position t, the bit (0/1) of the latest ``w`` whose bit sits at or before t: what
    the flip-flop's memory holds after reading up to t (-1 before the first write's bit)."""
    tokens = np.asarray(tokens)
    pos = np.arange(tokens.shape[-1])
    previous = np.concatenate([np.full(tokens.shape[:-1] + (1,), -1), tokens[..., :-1]], axis=-1)
    is_write_bit = (pos % 2 == 1) & (previous == WRITE)
    last = np.maximum.accumulate(np.where(is_write_bit, pos, -1), axis=-1)
    return np.where(last >= 0, np.take_along_axis(tokens, np.maximum(last, 0), axis=-1).astype(np.int64) - ZERO, -1)

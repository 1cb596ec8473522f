"""The wrong reads of a set of sequences: their error types, and the verification that counts
only the reads an evaluation of the hunt's files gets wrong.

Error types (:func:`classify_errors`): a *regime* and a *source* joined by ``/``, and
``/long`` after them when the read is at or past the model's training length (``cfg.n_ctx``),
where the failure may be one of extrapolation (shrinking keeps the read there):

- regime ``sparse``: the last write is at least ``LONG_GAP`` tokens before the read (the
  flip-flop paper's sparse glitches: the write drowns among ignores; a long gap crowded by
  reads counts here, the write it must reach being still far); ``dense``: a shorter gap, and
  at least ``CROWDED`` of the ``CROWD_WINDOW`` instructions before the read are writes or
  reads (the paper's dense glitches: recent operations compete with the last write); under
  FFL(0.8) each of the two happens at about 1 read in 140. ``plain``: neither, an error on a
  read whose surroundings are common in the training distribution.
- source ``stale``: an earlier write (before the last one) stored the wrong answer, so the
  model may have retrieved an outdated write; the row gives the distance back to the most
  recent such write (``stale_gap``); ``unsourced``: every earlier write stored the right bit,
  the wrong bit comes from nowhere in the sequence; ``not-a-bit``: the argmax is an instruction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from interp.evaluate import BATCH_SIZE, ReadPredictions, predict_reads
from interp.tasks import IGNORE, ONE, WRITE, ZERO, last_write_positions

LONG_GAP = 96        # tokens from the last write to the read: sparse; under FFL(0.8), P = 0.9^47 = 0.0071
CROWD_WINDOW = 16    # instructions before a read in which operations are counted
CROWDED = 8          # writes or reads among them: dense; under FFL(0.8), P(Binomial(16, 0.2) >= 8) = 0.0070
ERROR_COLUMNS = ("seq", "position", "write_pos", "gap", "operations_nearby", "stale_gap", "answer", "predicted",
                 "margin", "regime", "source", "long", "type")


def has_wrong_read(reads: ReadPredictions, n: int) -> np.ndarray:
    """``[n]`` bool: the sequence has at least one wrong read."""
    return np.bincount(reads.sequence[~reads.correct], minlength=n) > 0


def classify_errors(tokens: np.ndarray, reads: ReadPredictions, train_len: int | None = None) -> pd.DataFrame:
    """One row per wrong read of ``reads`` (``predict_reads`` on ``tokens [n, T]``) and its error
    type (module docstring); ``train_len``: the position from which a read is ``long`` (None:
    none is). Columns (``ERROR_COLUMNS``): ``seq``, ``position`` (of the ``r``), ``write_pos``
    (its last write), ``gap`` (position - write_pos, in tokens), ``operations_nearby`` (writes
    and reads among the ``CROWD_WINDOW`` instructions before it), ``stale_gap`` (position minus
    the most recent write that stored the wrong bit; -1 if none did), ``answer`` and
    ``predicted`` (letters), ``margin``, ``regime``, ``source``, ``long`` and ``type``."""
    wrong = ~reads.correct
    seq, position, predicted = reads.sequence[wrong], reads.position[wrong], reads.predicted[wrong]
    pos = np.arange(tokens.shape[1])
    instruction = pos % 2 == 0
    write_pos = last_write_positions(tokens)[seq, position]
    before = np.cumsum(instruction & (tokens != IGNORE), axis=1)   # operations at or before each position
    window_start = position - 2 * CROWD_WINDOW - 1
    nearby = before[seq, position - 1] - np.where(window_start >= 0, before[seq, np.maximum(window_start, 0)], 0)
    # the most recent write of each bit at or before each position; the last write stored the
    # right bit, so the most recent one of the wrong bit is older
    stored = np.concatenate([tokens[:, 1:], tokens[:, -1:]], axis=1)
    is_write = instruction & (tokens == WRITE)
    last_of_bit = np.stack([np.maximum.accumulate(np.where(is_write & (stored == ZERO + b), pos, -1), axis=1)
                            for b in (0, 1)])
    is_bit = (predicted == ZERO) | (predicted == ONE)
    stale = np.where(is_bit, last_of_bit[np.clip(predicted - ZERO, 0, 1), seq, position], -1)
    gap = position - write_pos
    long = position >= (np.inf if train_len is None else train_len)
    regime = np.select([gap >= LONG_GAP, nearby >= CROWDED], ["sparse", "dense"], "plain")
    source = np.where(~is_bit, "not-a-bit", np.where(stale >= 0, "stale", "unsourced"))
    letters = np.array(["w", "r", "i", "0", "1"])
    return pd.DataFrame({
        "seq": seq, "position": position, "write_pos": write_pos, "gap": gap, "operations_nearby": nearby,
        "stale_gap": np.where(stale >= 0, position - stale, -1), "answer": letters[reads.target[wrong]],
        "predicted": letters[predicted], "margin": reads.margin[wrong], "regime": regime, "source": source,
        "long": long, "type": [f"{r}/{s}{'/long' if past else ''}" for r, s, past in zip(regime, source, long)]})


def training_length(model) -> int | None:
    """The length ``model`` was trained at (``cfg.n_ctx``), None for a model without one."""
    return getattr(model.cfg, "n_ctx", None)


def verify(model, sequences: list[np.ndarray], batch_size: int = BATCH_SIZE) -> tuple[list[np.ndarray], pd.DataFrame]:
    """The sequences that :func:`~interp.evaluate.predict_reads` gets wrong when they are scored
    as ``glitchlens eval --data`` scores a file of them: grouped by length, each group in its
    order, at ``batch_size``. Returns them (shortest first, the order of the files
    :func:`write_hunt` writes) and :func:`classify_errors` of their wrong reads, ``seq``
    indexing that list."""
    kept, frames = [], []
    for length in sorted({len(s) for s in sequences}):
        group = np.stack([s for s in sequences if len(s) == length])
        reads = predict_reads(model, group, batch_size)
        failing = np.flatnonzero(has_wrong_read(reads, len(group)))
        errors = classify_errors(group, reads, training_length(model))
        frames.append(errors.assign(seq=len(kept) + np.searchsorted(failing, errors.seq), length=length))
        kept += list(group[failing])
    return kept, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*ERROR_COLUMNS, "length"])

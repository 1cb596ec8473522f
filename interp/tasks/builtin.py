"""Flip-flop and the automaton as :class:`interp.tasks.task.Task`\\ s: thin wrappers over
:mod:`interp.tasks.flipflop` and :mod:`interp.tasks.automaton`, whose generators, canonical splits
(seeds, sizes, published read counts) and read masks they call unchanged."""

from __future__ import annotations

import numpy as np

from interp.tasks.automaton import AUTOMATON_VOCAB, BOTTOM, SIGMA_0, SIGMA_1, automaton_states, sample_automaton
from interp.tasks.flipflop import (
    CANONICAL_SEQ_LEN, ONE, READ, SPLITS, TRAIN_P_I, VOCAB, WRITE, ZERO, current_bits, flip_last_write,
    last_write_positions, load_split, read_mask, sample_ffl,
)
from interp.tasks.task import Task, TaskSplit

# The seed of the automaton's evaluation sequences (``glitchlens eval`` of an automaton checkpoint).
AUTOMATON_EVAL_SEED = 52001


class FlipFlopTask(Task):
    """The flip-flop language FFL(T, p_i) (Liu et al., Sec. 3.1): predict the bit after each ``r``,
    which is the bit of the most recent ``w``. Splits: iid FFL(0.8), sparse FFL(0.98), dense FFL(0.1)."""

    name = "flipflop"
    description = "flip-flop language: recall the last written bit at each read (Liu et al. Sec. 3.1)"
    vocab = VOCAB
    answers = (ZERO, ONE)
    seq_len = CANONICAL_SEQ_LEN
    train_params = {"p_i": TRAIN_P_I}
    splits = {name: TaskSplit(name, s.size, s.seed, CANONICAL_SEQ_LEN, {"p_i": s.p_i}, name == "iid",
                              s.published_reads) for name, s in SPLITS.items()}
    roles = {WRITE: "write", READ: "read"}
    probe_label = "the current bit: the bit of the latest w read so far"

    def sample(self, n, seq_len, rng, p_i=TRAIN_P_I):
        return sample_ffl(n, seq_len, p_i, rng)

    def scored_mask(self, inputs):
        return read_mask(inputs)

    def scored_answers(self, inputs):
        """Every ``r`` with a write before it; its answer is that write's bit token."""
        inputs = np.asarray(inputs)
        write = last_write_positions(inputs)
        scored = read_mask(inputs) & (write >= 0)
        bit = np.take_along_axis(inputs, np.where(scored, write + 1, 0), axis=-1).astype(np.int64)
        return scored, np.where(scored, bit, -1)

    def corrupt(self, inputs, position):
        """The last write before ``position`` stores the other bit (and so do the reads of it)."""
        write = int(last_write_positions(np.asarray(inputs))[position])
        return None if write < 0 else flip_last_write(np.asarray(inputs)[None], np.array([write]))[0]

    def probe_labels(self, inputs):
        return current_bits(inputs)

    def answer(self, prefix):
        writes = [pos for pos in range(0, len(prefix) - 1, 2) if prefix[pos] == WRITE]
        return int(prefix[writes[-1] + 1])

    def evidence(self, tokens):
        return np.where(read_mask(tokens), last_write_positions(tokens), -1)

    def load_split(self, name, n=None):
        return load_split(name, n)


class AutomatonTask(Task):
    """The flip-flop automaton (Liu et al., Def. 1): inputs sigma_0, sigma_1, bottom; the target at
    every position is the state after it (the last written bit). Not a next-token task: the model
    reads the whole input and is scored at every position."""

    name = "automaton"
    description = "flip-flop automaton: the state after every input (Liu et al. Def. 1)"
    vocab = AUTOMATON_VOCAB
    answers = (SIGMA_0, SIGMA_1)
    seq_len = CANONICAL_SEQ_LEN
    train_params = {"p_bottom": 0.5}
    splits = {"fresh": TaskSplit("fresh", 1000, AUTOMATON_EVAL_SEED, CANONICAL_SEQ_LEN, {"p_bottom": 0.5})}
    roles = {SIGMA_0: "write", SIGMA_1: "read"}
    probe_label = "the state: the last written bit"

    def sample(self, n, seq_len, rng, p_bottom=0.5):
        return sample_automaton(n, seq_len, p_bottom, rng)[0]

    def model_io(self, tokens):
        return tokens, automaton_states(tokens), np.ones(tokens.shape, dtype=bool)

    def scored_answers(self, inputs):
        inputs = np.asarray(inputs)
        return np.ones(inputs.shape, dtype=bool), automaton_states(inputs).astype(np.int64)

    def corrupt(self, inputs, position):
        """The last write at or before ``position`` writes the other bit: one input symbol changed."""
        inputs = np.asarray(inputs)
        writes = np.flatnonzero(inputs[:position + 1] != BOTTOM)
        if not len(writes):
            return None
        flipped = inputs.copy()
        flipped[writes[-1]] = SIGMA_1 - flipped[writes[-1]] + SIGMA_0
        return flipped

    def probe_labels(self, inputs):
        return automaton_states(np.asarray(inputs)).astype(np.int64)

    def answer(self, prefix):
        return int(next(x for x in reversed(prefix) if x != BOTTOM))

    def evidence(self, tokens):
        pos = np.arange(tokens.shape[-1])
        return np.maximum.accumulate(np.where(tokens != BOTTOM, pos, -1), axis=-1)


TASKS = (FlipFlopTask(), AutomatonTask())   # registered by interp.tasks.registry

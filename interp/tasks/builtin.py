"""Flip-flop and the automaton as :class:`interp.tasks.task.Task`\\ s: thin wrappers over
:mod:`interp.tasks.flipflop` and :mod:`interp.tasks.automaton`, whose generators, canonical splits
(seeds, sizes, published read counts) and read masks they call unchanged."""

from __future__ import annotations

import numpy as np

from interp.tasks.automaton import AUTOMATON_VOCAB, BOTTOM, SIGMA_0, SIGMA_1, automaton_states, sample_automaton
from interp.tasks.flipflop import (
    CANONICAL_SEQ_LEN, ONE, READ, SPLITS, TRAIN_P_I, VOCAB, WRITE, ZERO, last_write_positions, load_split, read_mask,
    sample_ffl,
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

    def sample(self, n, seq_len, rng, p_i=TRAIN_P_I):
        return sample_ffl(n, seq_len, p_i, rng)

    def scored_mask(self, inputs):
        return read_mask(inputs)

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

    def sample(self, n, seq_len, rng, p_bottom=0.5):
        return sample_automaton(n, seq_len, p_bottom, rng)[0]

    def model_io(self, tokens):
        return tokens, automaton_states(tokens), np.ones(tokens.shape, dtype=bool)

    def answer(self, prefix):
        return int(next(x for x in reversed(prefix) if x != BOTTOM))

    def evidence(self, tokens):
        pos = np.arange(tokens.shape[-1])
        return np.maximum.accumulate(np.where(tokens != BOTTOM, pos, -1), axis=-1)


TASKS = (FlipFlopTask(), AutomatonTask())   # registered by interp.tasks.registry

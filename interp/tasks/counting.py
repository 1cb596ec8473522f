"""The counting task (Golovneva et al., "Contextual Position Encoding", Sec. 5.3, Tables 3-4 and 9).

A sequence is a run of operations on ``n_vars`` variables, each drawn with the paper's weights:
``set`` a variable to 0 (w_set = 1), increment it (w_incr = 7), or do nothing (w_pass = 50, or 100
and 10 for the out-of-distribution splits that lengthen and shorten the relevant context), and
ends with ``print v`` followed by the value of ``v``: the number of ``v ++`` since the last
``v = 0``. The paper's tasks are 1, 3 and 5 variables (registered as ``counting``,
``counting-3``, ``counting-5``); its out-of-distribution test (Table 4) is on 1 variable.

Choices where the paper is silent, all here:

- Tokens: one token per operation (``pass``, ``a=0``, ``a++``, ...), ``print a`` one token, and
  the values ``0`` to ``10`` one token each; the 27-token vocabulary covers 5 variables, the
  same for every variant. A sequence of ``seq_len`` tokens is ``seq_len - 2`` operations, the
  print and the value: at the canonical 512 tokens, 510 operations ("up to 512 operations").
- Every variable is set to 0 by the first ``n_vars`` operations (in order a, b, ...), so that
  every print has a defined answer; the variable of each later operation and of the print is
  uniform.
- Values are capped at 10 ("we limit the maximum numerical value to be 10") by turning an
  increment of a variable already at 10 into a ``pass``.
- Only the final print is scored (one answer per sequence), as in the paper's description.
- Training draws from a fixed pool of 10,000 sequences per seed (the paper's "10K sequences for
  training"); the test splits are 1,000 sequences each (the paper does not give their size):
  ``iid`` (w_pass 50), ``long`` (w_pass 100) and ``short`` (w_pass 10).
"""

from __future__ import annotations

import numpy as np

from interp.tasks.flipflop import check_draw_size
from interp.tasks.task import Task, TaskSplit

VARIABLES = ("a", "b", "c", "d", "e")
MAX_VALUE = 10
PASS = 0
SET, INCR, PRINT, VALUE = 1, 1 + len(VARIABLES), 1 + 2 * len(VARIABLES), 1 + 3 * len(VARIABLES)  # first id of each
COUNTING_VOCAB = ("pass", *(f"{v}=0" for v in VARIABLES), *(f"{v}++" for v in VARIABLES),
                  *(f"print {v}" for v in VARIABLES), *(str(k) for k in range(MAX_VALUE + 1)))
W_SET, W_INCR, W_PASS = 1, 7, 50
SEQ_LEN = 512


class CountingTask(Task):
    """Counting with ``n_vars`` variables (CoPE Sec. 5.3); see the module docstring."""

    description = "CoPE counting: the value of a variable after set / ++ / pass operations (CoPE Sec. 5.3)"
    vocab = COUNTING_VOCAB
    answers = tuple(range(VALUE, VALUE + MAX_VALUE + 1))
    seq_len = SEQ_LEN
    train_params = {"w_pass": W_PASS}
    train_size = 10_000
    roles = {PASS: "pass", **{SET + v: "set" for v in range(len(VARIABLES))},
             **{INCR + v: "incr" for v in range(len(VARIABLES))}, **{PRINT + v: "print" for v in range(len(VARIABLES))}}

    def __init__(self, n_vars: int = 1):
        if not 1 <= n_vars <= len(VARIABLES):
            raise ValueError(f"n_vars must be 1 to {len(VARIABLES)}, got {n_vars}")
        self.n_vars = n_vars
        self.name = "counting" if n_vars == 1 else f"counting-{n_vars}"
        self.splits = {name: TaskSplit(name, 1000, seed, SEQ_LEN, {"w_pass": w_pass}, name == "iid")
                       for name, seed, w_pass in (("iid", 53_001, W_PASS), ("long", 53_002, 100),
                                                  ("short", 53_003, 10))}

    def sample(self, n, seq_len, rng, w_pass=W_PASS):
        """``uint8 [n, seq_len]``: one ``[n, seq_len, 2]`` draw of uniforms (operation, variable), so
        that row ``k`` depends only on the seed and ``k``."""
        n_ops = seq_len - 2
        if n_ops < self.n_vars:
            raise ValueError(f"seq_len {seq_len}: counting with {self.n_vars} variables needs at least "
                             f"{self.n_vars + 2} tokens")
        if not w_pass >= 0:
            raise ValueError(f"w_pass must be a number >= 0, got {w_pass}")
        check_draw_size(n, seq_len)
        uniforms = np.random.default_rng(rng).random((n, seq_len, 2))
        total = W_SET + W_INCR + w_pass
        op = np.where(uniforms[:, :n_ops, 0] < W_SET / total, SET,
                      np.where(uniforms[:, :n_ops, 0] < (W_SET + W_INCR) / total, INCR, PASS))
        var = np.minimum((uniforms[..., 1] * self.n_vars).astype(np.int64), self.n_vars - 1)
        op[:, :self.n_vars] = SET
        var[:, :self.n_vars] = np.arange(self.n_vars)
        value = np.zeros((n, self.n_vars), dtype=np.int64)
        for v in range(self.n_vars):
            is_set, is_incr = (op == SET) & (var[:, :n_ops] == v), (op == INCR) & (var[:, :n_ops] == v)
            increments = np.cumsum(is_incr, axis=1)
            since_set = increments - np.maximum.accumulate(np.where(is_set, increments, 0), axis=1)
            op[is_incr & (since_set > MAX_VALUE)] = PASS
            value[:, v] = np.minimum(since_set[:, -1], MAX_VALUE)
        tokens = np.where(op == PASS, PASS, op + var[:, :n_ops])
        printed = var[:, -1]
        return np.concatenate([tokens, (PRINT + printed)[:, None], (VALUE + value[np.arange(n), printed])[:, None]],
                              axis=1).astype(np.uint8)

    probe_label = "the count so far: the value of the printed variable (of a, before the print)"

    def scored_mask(self, inputs):
        return (inputs >= PRINT) & (inputs < VALUE)

    def corrupt(self, inputs, position):
        """One counted token changed: the printed variable's last ``++`` since its ``= 0`` becomes a
        ``pass`` (the count drops by one), or, with none to remove, a ``pass`` after the ``= 0``
        becomes a ``++`` (the count rises to one)."""
        inputs = np.asarray(inputs)
        variable = int(inputs[position]) - PRINT
        sets = np.flatnonzero(inputs[:position] == SET + variable)
        if not len(sets):
            return None
        since = sets[-1] + 1
        increments = since + np.flatnonzero(inputs[since:position] == INCR + variable)
        passes = since + np.flatnonzero(inputs[since:position] == PASS)
        edited = inputs.copy()
        if len(increments):
            edited[increments[-1]] = PASS
        elif len(passes):
            edited[passes[-1]] = INCR + variable
        else:
            return None
        return edited

    def probe_labels(self, inputs):
        inputs = np.asarray(inputs)
        last = inputs[:, -1:].astype(np.int64)
        variable = np.where((last >= PRINT) & (last < VALUE), last - PRINT, 0)
        is_set, is_incr = inputs == SET + variable, inputs == INCR + variable
        increments = np.cumsum(is_incr, axis=1)
        since_set = increments - np.maximum.accumulate(np.where(is_set, increments, 0), axis=1)
        return np.where(np.cumsum(is_set, axis=1) > 0, np.minimum(since_set, MAX_VALUE), -1)

    def answer(self, prefix):
        values = {}
        for token in prefix[:-1]:
            if SET <= token < INCR:
                values[token - SET] = 0
            elif INCR <= token < PRINT:
                values[token - INCR] += 1
        return VALUE + values[prefix[-1] - PRINT]

    def evidence(self, tokens):
        """At each print, the position of the printed variable's last ``set``."""
        tokens = np.asarray(tokens)
        found = np.full(tokens.shape, -1)
        for row, pos in zip(*np.nonzero(self.scored_mask(tokens))):
            sets = np.flatnonzero(tokens[row, :pos] == SET + tokens[row, pos] - PRINT)
            found[row, pos] = sets[-1] if len(sets) else -1
        return found


TASKS = tuple(CountingTask(n_vars) for n_vars in (1, 3, 5))   # registered by interp.tasks.registry

"""Simulating the flip-flop automaton (Liu et al., Def. 1 and Sec. 5.3).

Inputs are sigma_0 (write 0), sigma_1 (write 1) and bottom (do nothing); the target at
every position is the automaton's state after reading the input there. Token ids:
``sigma_0``=0, ``sigma_1``=1, ``bottom``=2, and the state q is predicted as token q, so
the same backbone (vocabulary 3) reads inputs and writes states.

The paper leaves the state before the first write open; here the first input is
always a write, so every target is defined.
"""

from __future__ import annotations

import numpy as np

from interp.tasks.flipflop import check_draw_size
from models import validate

SIGMA_0, SIGMA_1, BOTTOM = 0, 1, 2
AUTOMATON_VOCAB = ("0", "1", "_")
D_VOCAB_AUTOMATON = len(AUTOMATON_VOCAB)


def sample_automaton(
    n: int, seq_len: int, p_bottom: float = 0.5, rng: np.random.Generator | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` input sequences and their state sequences, both ``uint8 [n, seq_len]``.

    Each input after the first is bottom with probability ``p_bottom``, else a write of
    a uniform bit. Row ``k`` depends only on the seed and ``k`` (prefix-stable).
    """
    p_bottom = validate.number("p_bottom", p_bottom, 0, 1)
    if validate.integer("seq_len", seq_len) < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    check_draw_size(n, seq_len)
    rng = np.random.default_rng(validate.seed("rng", rng))
    uniforms = rng.random((n, seq_len, 2))
    is_write = uniforms[..., 0] >= p_bottom
    is_write[:, 0] = True
    bits = (uniforms[..., 1] < 0.5).astype(np.uint8)
    inputs = np.where(is_write, bits, BOTTOM).astype(np.uint8)
    last_write = np.maximum.accumulate(np.where(is_write, np.arange(seq_len), 0), axis=1)
    states = np.take_along_axis(bits, last_write, axis=1)
    return inputs, states


def automaton_states(inputs: np.ndarray) -> np.ndarray:
    """The state sequence of given inputs (the transition function applied left to right)."""
    inputs = np.asarray(validate.array("inputs", inputs, "integer", (1, 2, 3), lists=True))
    if inputs[..., 0].max(initial=0) > SIGMA_1:
        raise ValueError("inputs: the first input must be a write (sigma_0 or sigma_1)")
    is_write = inputs != BOTTOM
    last_write = np.maximum.accumulate(np.where(is_write, np.arange(inputs.shape[-1]), 0), axis=-1)
    return np.take_along_axis(inputs, last_write, axis=-1)

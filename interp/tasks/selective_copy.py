"""The selective copy task (Gu and Dao, 2023; as in Golovneva et al., "Contextual Position
Encoding", Sec. 5.2, Tables 2 and 10).

A sequence holds 256 content tokens scattered among blanks, a separator, and then the content
tokens again in order, without the blanks: the model copies every non-blank token, one per
position after the separator (at the separator it predicts the first). The paper's vocabulary
has 16 tokens and its output 256; training and the in-distribution split have 256 blanks, the
out-of-distribution splits ``dense`` 128 and ``sparse`` 512.

Choices where the paper is silent, all here:

- The 16 tokens are 14 content letters ``A``-``N``, the blank ``_`` and the separator ``|``.
- The blanks' positions are uniform among the input's ``256 + blanks`` positions and the
  content tokens uniform over the 14 letters, independently.
- A sequence of ``seq_len`` tokens is ``seq_len - 257`` input positions, the separator and the
  256 answers (769 tokens in training, 641 dense, 1025 sparse); every one of the 256 answers is
  scored. The error rate is over answers, the sequence accuracy over whole copies; the paper
  does not say which of the two its "test error" is.
- Training draws fresh sequences every step; each split is 1,000 sequences (sizes not given).
"""

from __future__ import annotations

import numpy as np

from interp.tasks.flipflop import check_draw_size
from interp.tasks.task import Task, TaskSplit

N_LETTERS = 14
BLANK, SEPARATOR = N_LETTERS, N_LETTERS + 1
SELECTIVE_COPY_VOCAB = (*(chr(ord("A") + k) for k in range(N_LETTERS)), "_", "|")
N_CONTENT = 256


def copy_length(n_blanks: int, n_content: int = N_CONTENT) -> int:
    """Tokens in a sequence with ``n_blanks`` blanks: the input, the separator and the copy."""
    return 2 * n_content + n_blanks + 1


class SelectiveCopyTask(Task):
    """Selective copy (CoPE Sec. 5.2); see the module docstring."""

    name = "selective-copy"
    description = "selective copy: copy the non-blank tokens, skipping blanks (CoPE Sec. 5.2)"
    vocab = SELECTIVE_COPY_VOCAB
    answers = tuple(range(N_LETTERS))
    seq_len = copy_length(256)
    splits = {name: TaskSplit(name, 1000, seed, copy_length(blanks), {}, name == "iid")
              for name, seed, blanks in (("iid", 54_001, 256), ("dense", 54_002, 128), ("sparse", 54_003, 512))}
    roles = {BLANK: "blank", SEPARATOR: "separator"}
    probe_label = "the next letter to copy (from the separator on)"

    def __init__(self, n_content: int = N_CONTENT):
        self.n_content = n_content

    def sample(self, n, seq_len, rng):
        """``uint8 [n, seq_len]`` from one ``[n, seq_len - 1]`` draw of uniforms (the blanks'
        ranks, then the letters), so that row ``k`` depends only on the seed and ``k``."""
        n_input = seq_len - 1 - self.n_content
        n_blanks = n_input - self.n_content
        if n_blanks < 0:
            raise ValueError(f"seq_len {seq_len}: selective copy of {self.n_content} tokens needs at least "
                             f"{copy_length(0, self.n_content)} tokens")
        check_draw_size(n, seq_len)
        uniforms = np.random.default_rng(rng).random((n, n_input + self.n_content))
        letters = (uniforms[:, n_input:] * N_LETTERS).astype(np.uint8)
        is_blank = np.argsort(np.argsort(uniforms[:, :n_input], axis=1), axis=1) < n_blanks
        tokens = np.full((n, seq_len), SEPARATOR, dtype=np.uint8)
        tokens[:, :n_input][is_blank] = BLANK
        tokens[:, :n_input][~is_blank] = letters.ravel()   # row-major: each row's letters in order
        tokens[:, n_input + 1:] = letters
        return tokens

    def scored_mask(self, inputs):
        return np.maximum.accumulate(inputs == SEPARATOR, axis=-1)

    def answer(self, prefix):
        separator = prefix.index(SEPARATOR)
        return [t for t in prefix[:separator] if t != BLANK][len(prefix) - 1 - separator]

    def scored_answers(self, inputs):
        """From the separator on, while letters are left to copy: the letter :meth:`evidence` points at."""
        source = self.evidence(inputs)
        scored = np.asarray(self.scored_mask(inputs), dtype=bool) & (source >= 0)
        letters = np.take_along_axis(np.asarray(inputs), np.maximum(source, 0), axis=-1).astype(np.int64)
        return scored, np.where(scored, letters, -1)

    def corrupt(self, inputs, position):
        """One copied token changed: the letter copied at ``position`` becomes the next letter of the
        alphabet, in the input and in the copy after it."""
        source = int(self.evidence(np.asarray(inputs)[None])[0, position])
        if source < 0:
            return None
        edited = np.array(inputs, copy=True)
        letter = (int(edited[source]) + 1) % N_LETTERS
        edited[source] = letter
        if position + 1 < len(edited):
            edited[position + 1] = letter
        return edited

    def probe_labels(self, inputs):
        return self.scored_answers(inputs)[1]

    def evidence(self, tokens):
        """At each position from the separator on, the input position of the letter it copies next."""
        tokens = np.asarray(tokens)
        found = np.full(tokens.shape, -1)
        for row in range(tokens.shape[0]):
            separator = int(np.argmax(tokens[row] == SEPARATOR))
            sources = np.flatnonzero(tokens[row, :separator] != BLANK)
            k = np.arange(tokens.shape[1] - separator)
            found[row, separator:] = np.where(k < len(sources), sources[np.minimum(k, len(sources) - 1)], -1)
        return found


TASKS = (SelectiveCopyTask(),)   # registered by interp.tasks.registry

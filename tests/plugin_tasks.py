"""Tasks written outside GlitchLens, as a researcher's own file would be: the running parity of a
bit string, which keeps the contract of ``interp.tasks.Task``, and a copy of it whose answers
disagree with its sequences, which ``glitchlens check-task`` must refuse. Imported by the tests as
``plugin_tasks`` (``tests/`` on the path), never registered on import."""

import numpy as np

from interp.tasks import Task, TaskSplit

ZERO, ONE, ASK = 0, 1, 2


class ParityTask(Task):
    """Bits, then ``?`` and the parity of the bits so far: ``0 1 1 ? 0`` (the last token is scored).
    Out of distribution: longer strings."""

    name = "parity"
    description = "the parity of a bit string"
    vocab = ("0", "1", "?")
    answers = (ZERO, ONE)
    seq_len = 10
    splits = {"iid": TaskSplit("iid", 64, 101, 10), "long": TaskSplit("long", 64, 102, 18, in_distribution=False)}
    roles = {ASK: "print"}
    probe_label = "the parity of the bits so far"

    def sample(self, n, seq_len, rng):
        bits = np.random.default_rng(rng).integers(0, 2, (n, seq_len - 2), dtype=np.uint8)
        parity = (bits.sum(axis=1) % 2).astype(np.uint8)
        return np.concatenate([bits, np.full((n, 1), ASK, np.uint8), parity[:, None]], axis=1)

    def scored_mask(self, inputs):
        return inputs == ASK

    def answer(self, prefix):
        return sum(prefix[:-1]) % 2

    def probe_labels(self, inputs):   # no corrupt(): the circuit tools pair its sequences by resampling
        return np.cumsum(np.asarray(inputs) == ONE, axis=1) % 2


class WrongParityTask(ParityTask):
    """Parity whose ``answer`` is the opposite bit: its targets are inconsistent with its sequences."""

    name = "wrong-parity"

    def answer(self, prefix):
        return 1 - super().answer(prefix)

"""The light switch: the flip-flop language written in English, as the flip-flop paper's App. B.2.1 ("R3")
puts it to pretrained language models. Each token is one sentence:

- a write: "Alice turns the light on." / "Alice turns the light off.";
- an ignore: "Bob eats a banana." / "Bob eats an apple." (the ignored bit);
- a read: "The light is turned on." / "The light is turned off.", the state of the last write.

Sequences are FFL(p_i = 0.8) (:func:`interp.tasks.sample_ffl`), one sentence per instruction and its bit:
they start with a write and end with a read. The model is scored on each read, which must state the last
write's bit. A language model reads the text (:meth:`LightSwitchTask.prompt`): a length-16 demonstration
first, then the sequence, its last sentence cut to "The light is turned", and the protocol compares the
model's weight on " on" and " off" (``interp.diagnose.transformerlens.light_switch_accuracy``); the paper
draws 500 sequences per length. Choices the paper leaves open: sentences are joined by one space, the
demonstration is drawn afresh for each sequence, and p_i is the flip-flop training distribution's 0.8.
"""

from __future__ import annotations

import numpy as np

from interp.tasks.flipflop import READ, TRAIN_P_I, WRITE, ZERO, sample_ffl
from interp.tasks.task import Task, TaskSplit

# Token id = 2 * instruction + bit, the instruction's id in the flip-flop vocabulary (w 0, r 1, i 2).
SENTENCES = ("Alice turns the light off.", "Alice turns the light on.",
             "The light is turned off.", "The light is turned on.",
             "Bob eats a banana.", "Bob eats an apple.")
READ_PROMPT = "The light is turned"
STATE_WORDS = (" off", " on")            # what follows READ_PROMPT, by bit
DEMONSTRATION_LENGTH = 16                # sentences in the demonstration (App. B.2.1)
LENGTHS = (16, 32, 64, 128)              # the canonical splits' lengths, in sentences
SEQUENCES_PER_LENGTH = 500               # App. B.2.1: "Each point on the plot considers 500 sequences"


class LightSwitchTask(Task):
    """The flip-flop language as English sentences (module docstring)."""

    name = "light-switch"
    description = ("the flip-flop language as English sentences (Alice turns the light on/off, Bob eats a banana/"
                   "an apple, The light is turned on/off): the flip-flop paper's test of pretrained language models")
    vocab = SENTENCES
    answers = (2 * READ, 2 * READ + 1)
    seq_len = DEMONSTRATION_LENGTH
    train_params = {"p_i": TRAIN_P_I}
    splits = {f"length-{length}": TaskSplit(f"length-{length}", SEQUENCES_PER_LENGTH, 57_000 + length, length,
                                            {"p_i": TRAIN_P_I}, in_distribution=length == DEMONSTRATION_LENGTH)
              for length in LENGTHS}
    roles = {0: "write", 1: "write", 2: "read", 3: "read", 4: "ignore", 5: "ignore"}

    def sample(self, n: int, seq_len: int, rng, p_i: float = TRAIN_P_I) -> np.ndarray:
        """``uint8 [n, seq_len]`` sentences: FFL(p_i) of ``seq_len`` instructions, each with its bit."""
        if seq_len < 2:
            raise ValueError(f"a light-switch sequence needs a write and a read: seq_len >= 2, got {seq_len}")
        flipflop = sample_ffl(n, 2 * seq_len, p_i, rng)
        return (2 * flipflop[:, 0::2] + (flipflop[:, 1::2] - ZERO)).astype(np.uint8)

    def model_io(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model reads every sentence but the last and is scored where the next one is a read."""
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        return inputs, targets, targets // 2 == READ

    def answer(self, prefix: list[int]) -> int:
        """The read stating the last write's bit."""
        last_write = next(token for token in reversed(prefix) if token // 2 == WRITE)
        return 2 * READ + last_write % 2

    def prompt(self, demonstration: np.ndarray, sequence: np.ndarray) -> tuple[str, int]:
        """The text a language model reads and the bit it should state next: the demonstration's
        sentences, then ``sequence``'s with its last (a read) cut to :data:`READ_PROMPT`."""
        if sequence[-1] // 2 != READ:
            raise ValueError("a light-switch sequence to prompt with ends with a read")
        text = " ".join(SENTENCES[t] for t in (*demonstration, *sequence[:-1]))
        return f"{text} {READ_PROMPT}", int(sequence[-1]) % 2


TASKS = (LightSwitchTask(),)

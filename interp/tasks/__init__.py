"""Tasks: the flip-flop language, its canonical splits, text I/O, the automaton task, and the task
registry (:mod:`interp.tasks.registry`) through which they, CoPE's selective copy and counting, and a
task of one's own are named.

Pure numpy; nothing here imports torch.
"""

from interp.tasks.automaton import (
    BOTTOM, D_VOCAB_AUTOMATON, SIGMA_0, SIGMA_1, automaton_states, sample_automaton,
)
from interp.tasks.flipflop import (
    CANONICAL_SEQ_LEN, D_VOCAB, MAX_TOKENS, TRAIN_P_I, IGNORE, ONE, READ, SPLITS, VOCAB, WRITE, ZERO, Split,
    check_draw_size, count_reads, held_out, instruction_probs, last_write_positions, load_split, read_mask,
    sample_ffl, sample_mixture, train_batch,
)
from interp.tasks.text import (
    FlipFlopFormatError, format_sequence, parse_sequence, parse_sequences,
    check_tokens, read_sequences, validate, write_sequences,
)
from interp.tasks.registry import get_task, register_task, task_names
from interp.tasks.task import Task, TaskSplit

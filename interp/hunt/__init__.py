"""``glitchlens hunt``: search for flip-flop sequences a model gets wrong, and compare the search
with random sampling at an equal budget of sequences scored.

``edits``: the edits of the guided search; ``errors``: the error types of wrong reads and their
verification; ``search``: the methods and :func:`hunt`, which runs them (the method is described
there); ``report``: the tables and files of a hunt.
"""

from interp.hunt.edits import EDIT_NAMES, MAX_BLOCK, Edits, sampled_pairs, with_reads_recomputed
from interp.hunt.errors import (
    CROWD_WINDOW, CROWDED, ERROR_COLUMNS, LONG_GAP, classify_errors, has_wrong_read, training_length, verify,
)
from interp.hunt.report import OVERVIEW_COLUMNS, OVERVIEW_NOTE, abbreviated, overview_rows, shortest_rows, write_hunt
from interp.hunt.search import (
    LENGTH_STEPS, SHRINK_SHARE, HuntResult, MethodResult, Proposals, finish, guided_search, hunt, longest_input,
    lowest_margins, padded, random_sampling, shrink,
)

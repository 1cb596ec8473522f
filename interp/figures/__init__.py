"""``glitchlens figures``: the papers' mechanistic figures, reproduced on the pretrained models.

Every figure function takes ``load(name) -> model`` (:func:`models.load_pretrained` by
default; tests pass small random models), runs the models it needs with hooks on a few
fixed sequences, computes with :mod:`interp.metrics`, and returns :class:`PaperFigure`
records: a file stem, a caption naming the paper figure it reproduces, ``draw(backend)``,
which draws it with :mod:`interp.plots`, and ``data``, the numbers behind it; its title is
``TITLES[stem]``. The caption is ``CAPTIONS[stem](data)``: written from the numbers of the CSV
alone (settings such as the sequences run are columns of it), so that every claim in it is
one the CSV shows; ``tests/test_captions.py`` writes each committed caption again from its CSV. :func:`make_figures` writes each record as ``STEM.png`` (matplotlib),
``STEM.html`` (plotly, a page with the title and the caption; the pages share one
``plotly.min.js`` in the directory and open offline) and ``STEM.csv``, then ``captions.json``
(``{stem: caption}``) and ``index.md`` (every figure with its title and caption).

The figures are grouped by paper, one module each (``tra``, ``tda``, ``flipflop``, ``cope``,
``table1``), and ``anatomy`` for the glitch anatomy; each figure function files itself under its
name with ``@register`` and each caption with ``@caption``, and ``common`` holds what they share
and the writing. The specimens are named in ``common`` alone (``TDA_BETA1``, ``ROPE``, ...): the TDA
figures take their model from ``TDA_BETA1``, so redrawing them on another specimen is one edit.

Figures (``name``: file stems, the paper figure reproduced):

- ``tra_vs_fot``: ``01_tra_vs_fot_attention``, TRA paper Fig. 1-3 (App. A).
- ``tda_diagnostics``: ``02a_tda_sparsity``, ``02b_tda_max_weight``, ``02c_sink_ratio_vs_length``,
  TDA paper Fig. 1a-c.
- ``tda_inhibition``: ``03_tda_inhibition``, TDA paper Fig. 2.
- ``survivors``: ``04_survivors_vs_length``, TDA paper Fig. 4 (App. B.2).
- ``cross_view``: ``05_cross_view_correlation``, TDA paper Fig. 5 (App. B.3).
- ``logit_tails``: ``06_logit_tails``, TDA paper Table 7 (App. B.1).
- ``automaton``: ``07_automaton_attention``, flip-flop paper Fig. 5c-d and 16a-b: automaton-1l
  beside automaton-1l-sharp, its set-up with the entropy sharpening term.
- ``glitch_lengths``: ``08_glitch_dependency_lengths``, flip-flop paper Fig. 12 (right).
- ``drift``: ``09a_drift_last_write``, ``09b_drift_automaton``, flip-flop paper Fig. 14.
- ``glitch_anatomy``: ``12a_glitch_attention``, ``12b_glitch_logit_split``: where the final layer
  looks at each wrong read of the glitching specimens, and which logit term (content or
  position) let a key without the bit win, for RoPE, FoT and TRA.
- ``cope_gates``: ``10_cope_gates_positions``, CoPE paper Fig. 6.
- ``table1``: ``11_table1_accuracy``, TRA paper Table 1, from a ``glitchlens reproduce table1`` CSV.

Choices:

- Sequences are fixed. Flip-flop inputs come from the ``iid`` split's generator at every
  length (``load_split("iid", n, seq_len=T)``: FFL(0.8) from a fixed seed, as in
  ``glitchlens diagnose``), or the ``sparse`` split for the glitch histogram; constructed
  sequences draw their random bits from ``SEED``. Models run without gradients, so the same
  command gives the same numbers (and, with the div id fixed, the same HTML).
- Heatmaps of a 512-token sequence show ``WINDOW_TOKENS`` tokens: the window (among the first
  ``N_CANDIDATES`` iid sequences) that shows the most reads together with their last write
  (:func:`read_rich_window`).
- Metrics at one length use ``N_SEQUENCES`` sequences of T = 512, the training length of the
  Table 1 specimens (the App. A pair, tra-mech and fot-mech, was trained at T = 128); the
  survivor sweep over ``LENGTHS`` uses ``N_SWEEP_SEQUENCES`` per length (a map at T = 2048 is
  16 MB). The figures drawn with an interval (02c, 05, 09a) take each of ``N_SAMPLES``
  sequences as a sample: mean and 95% t interval of the mean; shares (reads right, glitch
  destinations) carry 95% Wilson intervals.
- Fig. 14's own probe is the automaton: ``09b`` runs automaton-1l and automaton-1l-sharp on the
  paper's input (two early writes, then bottoms), here to T = 2048, 16x their training length of 128;
  ``09a`` carries it to the flip-flop language for rope-mech (trained at T = 512) and tra-mech
  (trained at T = 128), as one read pushed back by inserted ignores (``N_SAMPLES`` sequences per
  length, their bits drawn from seeds ``SEED`` on), and follows the write's bit wherever each
  model moved it (the bit-carrier probe), at the final layer's best head.
- Surviving keys: the non-zero entries of TDA's ``hook_pattern`` (the differential weights
  applied to V, as ``glitchlens diagnose`` counts them) and of TRA's ``hook_mask`` (M, the
  keys its threshold keeps; its softmax could underflow some of them to 0).
"""

from interp.figures import tra, tda, flipflop, anatomy, cope, table1  # noqa: F401  (each registers its figures: drawing order)
from interp.figures.common import CAPTIONS, FIGURES, TITLES, PaperFigure, make_figures, write_figure  # noqa: F401

FIGURE_NAMES = tuple(FIGURES)

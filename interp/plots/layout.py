"""The parts a figure is described with, the same for both backends: colours, a heatmap's token
axis, panels, colour scales and grid size, and a chart axis' scale, ticks and range.

Heatmap sizing is in screen pixels (matplotlib draws the same layout at ``MPL_PX_PER_INCH``):
a panel grows with the tokens shown so that a cell stays visible and hoverable, up to what fits
on a screen (:func:`panel_px`); its tick labels are then thinned to what its side can hold
without overlap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.colors
import torch

from interp.metrics import automaton_write_positions
from interp.tasks.automaton import AUTOMATON_VOCAB, SIGMA_0, SIGMA_1
from interp.tasks.flipflop import READ, VOCAB, WRITE, last_write_positions

ZERO_COLOR, HIDDEN_COLOR, TEXT_COLOR = "#000000", "#d9d9d9", "#333333"
ROLE_COLOR = {WRITE: "#d95f02", READ: "#1f78b4"}
AUTOMATON_WRITE_COLOR = {SIGMA_0: ROLE_COLOR[WRITE], SIGMA_1: ROLE_COLOR[READ]}   # the flip-flop paper's Fig. 5
WRONG_COLOR, IDEAL_COLOR = "#e31a1c", "#00e5ff"
# (matplotlib name, plotly scale): the same colours in both backends.
SEQUENTIAL = ("YlOrRd", plotly.colors.sequential.YlOrRd)
DIVERGING = ("RdBu_r", plotly.colors.diverging.RdBu[::-1])
CELL_PX = 6
PANEL_PX = (400, 900)
TICK_FONT_PX = 9
TICK_SPACING_PX = 10
MPL_PX_PER_INCH, MPL_PT_PER_PX = 100, 0.72
MAX_LOG_TICKS = 12


@dataclass
class TokenAxis:
    """The token positions shown on both axes of a heatmap, and how they are labelled."""

    positions: np.ndarray                # shown token positions
    names: list[str]                     # a unique hover name per shown token, e.g. "14:r (r1)"
    ticks: list[int]                     # indices into positions that carry a tick label
    tick_text: list[str]
    tick_color: list[str]
    marks: list[tuple[int, int, bool]]   # (query index, key index, wrong) of each read's ideal cell

    @property
    def mark_colors(self) -> list[str]:
        """The outline of each read's ideal cell: cyan, red for a wrong read."""
        return [WRONG_COLOR if wrong else IDEAL_COLOR for _, _, wrong in self.marks]


def panel_px(n_shown: int) -> int:
    """The side in pixels of a heatmap panel showing ``n_shown`` tokens."""
    return int(np.clip(n_shown * CELL_PX, *PANEL_PX))


def token_axis(n: int, tokens=None, labels: Sequence[str] | None = None, wrong: Iterable[int] = (),
               window: tuple[int, int] | None = None, stride: int = 1, max_ticks: int | None = None) -> TokenAxis:
    """Label the positions ``window[0]:window[1]:stride`` of an ``n``-token sequence.

    ``tokens``: the flip-flop token ids of the sequence (pair labels, roles, read marks);
    otherwise ``labels`` (one string per token) or the bare positions. ``wrong``: token
    positions of wrong reads. Tick labels are thinned to what a panel of :func:`panel_px`
    holds, and to at most ``max_ticks``.
    """
    start, stop = window if window is not None else (0, n)
    if not 0 <= start < stop <= n or stride < 1:
        raise ValueError(f"window {window} / stride {stride} do not fit a sequence of {n} tokens")
    wrong = {int(t) for t in wrong}
    if tokens is not None:
        tokens = np.asarray(torch.as_tensor(tokens).cpu()).astype(np.int64)
        if tokens.shape != (n,):
            raise ValueError(f"tokens must be one sequence of {n} ids, got shape {tokens.shape}")
        symbols = [VOCAB[t] for t in tokens]
        text = [symbols[t] + symbols[t + 1] if t % 2 == 0 and t + 1 < n else symbols[t] for t in range(n)]
        names = [f"{t}:{symbols[t]} ({text[t - t % 2]})" for t in range(n)]
        color = [ROLE_COLOR.get(tokens[t], TEXT_COLOR) if t % 2 == 0 else TEXT_COLOR for t in range(n)]
        labelled = np.arange(n) % 2 == 0
    else:
        text = list(labels) if labels is not None else [str(t) for t in range(n)]
        if len(text) != n:
            raise ValueError(f"{len(text)} labels for {n} tokens")
        names = [f"{t}:{label}" for t, label in enumerate(text)]
        color = [TEXT_COLOR] * n
        labelled = np.ones(n, dtype=bool)
    color = [WRONG_COLOR if t in wrong else c for t, c in enumerate(color)]
    positions = np.arange(start, stop, stride)
    ticks = [i for i, t in enumerate(positions) if labelled[t]] or list(range(len(positions)))
    fitting = panel_px(len(positions)) // TICK_SPACING_PX
    step = math.ceil(len(ticks) / max(1, min(fitting, max_ticks or fitting)))
    ticks = ticks[::step]
    # Thinned ticks skip tokens, so each says where it stands.
    tick_text = [text[t] if step == 1 or text[t] == str(t) else f"{t}:{text[t]}" for t in positions[ticks]]
    return TokenAxis(positions, [names[t] for t in positions], ticks, tick_text, [color[positions[i]] for i in ticks],
                     [] if tokens is None else _read_marks(tokens, positions, wrong))


def _read_marks(tokens: np.ndarray, positions: np.ndarray, wrong: set[int]) -> list[tuple[int, int, bool]]:
    index = {int(t): i for i, t in enumerate(positions)}
    last_write = last_write_positions(tokens)
    return [(index[t], index[int(last_write[t])], t in wrong) for t in index
            if t % 2 == 0 and tokens[t] == READ and int(last_write[t]) in index]


def automaton_axis(inputs, wrong: Iterable[int] = (), window: tuple[int, int] | None = None, stride: int = 1,
                   max_ticks: int | None = None) -> TokenAxis:
    """:func:`token_axis` of one flip-flop automaton input sequence ``[T]``: labels ``0`` / ``1``
    (the writes, orange / blue) and ``_`` (bottom); every position is a prediction, so each one's
    ideal cell (its most recent write) is marked, red where ``wrong`` (its labels too)."""
    inputs = np.asarray(torch.as_tensor(inputs).cpu()).astype(np.int64)
    axis = token_axis(len(inputs), labels=[AUTOMATON_VOCAB[x] for x in inputs], wrong=wrong, window=window,
                      stride=stride, max_ticks=max_ticks)
    wrong = {int(t) for t in wrong}
    axis.tick_color = [WRONG_COLOR if t in wrong else AUTOMATON_WRITE_COLOR.get(inputs[t], TEXT_COLOR)
                       for t in axis.positions[axis.ticks]]
    index = {int(t): i for i, t in enumerate(axis.positions)}
    last_write = automaton_write_positions(inputs)
    axis.marks = [(i, index[int(last_write[t])], t in wrong) for t, i in index.items() if int(last_write[t]) in index]
    return axis


# The colour of each role a task gives its tokens (interp.tasks.Task.roles); other tokens are TEXT_COLOR.
TASK_ROLE_COLOR = {"write": ROLE_COLOR[WRITE], "read": ROLE_COLOR[READ], "set": ROLE_COLOR[WRITE],
                   "incr": "#33a02c", "print": ROLE_COLOR[READ], "pass": "#a6a6a6", "blank": "#a6a6a6",
                   "separator": ROLE_COLOR[READ]}


def task_axis(task, tokens, wrong: Iterable[int] = (), window: tuple[int, int] | None = None, stride: int = 1,
              max_ticks: int | None = None) -> TokenAxis:
    """:func:`token_axis` of one sequence ``[T]`` of a registered task (:class:`interp.tasks.Task`):
    each token labelled by the task's vocabulary and coloured by its role (:data:`TASK_ROLE_COLOR`:
    counting's ``set`` orange, ``++`` green, ``print`` blue, ``pass`` grey; selective copy's blanks
    grey, the separator blue), wrong answers red; where the task names the position an answer is
    read from (``Task.evidence``: the last ``set`` of the printed variable, the letter being copied),
    that cell of each scored position is outlined, cyan or red where ``wrong``. Flip-flop tokens keep
    their own pair labels (:func:`token_axis` with ``tokens``)."""
    tokens = np.asarray(torch.as_tensor(tokens).cpu()).astype(np.int64)
    if task.name == "flipflop":
        return token_axis(len(tokens), tokens, wrong=wrong, window=window, stride=stride, max_ticks=max_ticks)
    if task.name == "automaton":
        return automaton_axis(tokens, wrong, window, stride, max_ticks)
    axis = token_axis(len(tokens), labels=task.labels(tokens), wrong=wrong, window=window, stride=stride,
                      max_ticks=max_ticks)
    wrong = {int(t) for t in wrong}
    axis.tick_color = [WRONG_COLOR if t in wrong else TASK_ROLE_COLOR.get(task.roles.get(tokens[t], ""), TEXT_COLOR)
                       for t in axis.positions[axis.ticks]]
    evidence = task.evidence(tokens[None])
    scored = task.model_io(tokens[None])[2][0] if evidence is not None else None
    if evidence is not None:
        index = {int(t): i for i, t in enumerate(axis.positions)}
        axis.marks = [(i, index[int(evidence[0, t])], t in wrong) for t, i in index.items()
                      if t < len(scored) and scored[t] and int(evidence[0, t]) in index]
    return axis


@dataclass
class Panel:
    """One heatmap, cut to the axis' positions: ``values`` is NaN wherever the cell is drawn in
    a fixed colour (``zero``: exact zeros with j <= i; ``hidden``: j > i). ``axis`` labels and
    marks it: panels of one grid show the same positions, but two models' panels mark their own
    wrong predictions."""

    title: str
    values: np.ndarray
    zero: np.ndarray
    hidden: np.ndarray
    signed: bool
    axis: TokenAxis

    @classmethod
    def of(cls, title: str, m, axis: TokenAxis, causal: bool, signed: bool | None) -> Panel:
        """The ``[query_pos, key_pos]`` map ``m`` cut to ``axis``' positions; ``signed=None``: whether a
        shown entry is negative."""
        m = torch.as_tensor(m).detach().double().cpu().numpy()
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"panel {title!r}: expected one [query_pos, key_pos] map, got shape {m.shape}")
        p = axis.positions
        sub = m[np.ix_(p, p)]
        hidden = p[None, :] > p[:, None] if causal else np.zeros(sub.shape, dtype=bool)
        zero = (sub == 0) & ~hidden
        signed = bool((sub[~hidden] < 0).any()) if signed is None else signed
        return cls(title, np.where(hidden | zero, np.nan, sub), zero, hidden, signed, axis)


@dataclass
class ColourScale:
    """One colour range and one colour bar for the panels drawn on it: [0, max] for non-negative
    maps, [-max|.|, max|.|] (centred at 0) once any of them is signed. The colour bar goes
    beside the last of ``panels``."""

    panels: list[int]
    lo: float
    hi: float
    signed: bool

    @property
    def colours(self) -> tuple[str, list]:
        return DIVERGING if self.signed else SEQUENTIAL


def colour_scales(panels: list[Panel], ncols: int, shared: bool | str) -> list[ColourScale]:
    """The colour scales of a grid, row-major: one per panel (``shared=False``), one for all
    (``True``), one per row (``"rows"``: a side-by-side comparison) or per column (``"columns"``:
    one kind of map per column)."""
    if shared not in (False, True, "rows", "columns"):
        raise ValueError(f"shared_scale must be False, True, 'rows' or 'columns', got {shared!r}")
    n = len(panels)
    groups = {False: [[i] for i in range(n)], True: [list(range(n))],
              "rows": [list(range(i, min(i + ncols, n))) for i in range(0, n, ncols)],
              "columns": [list(range(c, n, ncols)) for c in range(min(ncols, n))]}
    scales = []
    for group in groups[shared]:
        finite = np.abs(np.concatenate([panels[i].values[np.isfinite(panels[i].values)] for i in group]))
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        signed = any(panels[i].signed for i in group)
        scales.append(ColourScale(group, -top if signed else 0.0, top, signed))
    return scales


@dataclass
class GridSize:
    """Pixel layout of a grid of square :func:`panel_px` heatmap panels (plotly draws it in
    pixels, matplotlib at ``MPL_PX_PER_INCH``): room between columns for the tick labels, and
    for a colour bar where each panel or column has its own."""

    side: int
    width: int
    height: int
    gap_x: int
    gap_y: int
    margin: dict

    @classmethod
    def of(cls, n_panels: int, ncols: int, n_shown: int, shared: bool | str) -> GridSize:
        nrows = math.ceil(n_panels / ncols)
        side, gap_x, gap_y = panel_px(n_shown), 140 if shared in (False, "columns") else 80, 100
        margin = dict(l=70, r=110, t=50, b=70)
        return cls(side, margin["l"] + margin["r"] + ncols * side + (ncols - 1) * gap_x,
                   margin["t"] + margin["b"] + nrows * side + (nrows - 1) * gap_y, gap_x, gap_y, margin)

    @property
    def plot_width(self) -> int:
        return self.width - self.margin["l"] - self.margin["r"]

    @property
    def plot_height(self) -> int:
        return self.height - self.margin["t"] - self.margin["b"]


def log_ticks(values: Iterable[float], measured: bool = False) -> tuple[list[float], tuple[float, float] | None]:
    """Ticks for a log axis over ``values``, and the range that shows them (None: the data's).

    ``measured`` values (the lengths a sweep ran at) are their own ticks when there are at most
    ``MAX_LOG_TICKS``; otherwise the ticks are the 1-2-5 steps (powers of 10 where those are
    too many) from the step at or below the smallest value to the step at or above the largest,
    and the axis spans those two: every value lies within one step of a tick.
    """
    positive = np.unique([v for v in map(float, values) if math.isfinite(v) and v > 0])
    if not positive.size:
        return [], None
    if measured and len(positive) <= MAX_LOG_TICKS:
        return positive.tolist(), None
    lo, hi = positive[0], positive[-1]
    decades = range(math.floor(math.log10(lo)), math.floor(math.log10(hi)) + 2)
    for mantissas in ((1, 2, 5), (1,)):
        steps = [m * 10.0 ** e for e in decades for m in mantissas]
        ends = (max(v for v in steps if v <= lo), min(v for v in steps if v >= hi))
        ticks = [v for v in steps if ends[0] <= v <= ends[1]]
        if len(ticks) <= MAX_LOG_TICKS:
            return ticks, ends
    every = math.ceil((len(ticks) - 1) / (MAX_LOG_TICKS - 1))
    return ticks[::every] if (len(ticks) - 1) % every == 0 else [*ticks[::every], ticks[-1]], ends


@dataclass
class AxisStyle:
    """How a chart axis reads. A log axis is labelled at :func:`log_ticks`, written in full
    (plotly would label its minor ticks 2, 3, 5). A linear axis of values (not the measured x)
    that are never negative (counts, rates, weights) starts at 0, and shows 0 to 1 when every
    value is 0 (rather than a band around 0). A category axis (bars) keeps ``categories`` in
    their order, its labels ``slanted`` where long ones would collide (plotly slants colliding
    labels by itself)."""

    label: str | None
    log: bool = False
    ticks: list[float] | None = None
    range: tuple[float, float] | None = None
    from_zero: bool = False
    categories: list | None = None
    slanted: bool = False

    @classmethod
    def of(cls, values: Iterable[float], label: str, log: bool = False, measured: bool = False) -> AxisStyle:
        values = np.asarray(list(values), dtype=float)
        values = values[np.isfinite(values)]
        if log:
            return cls(label, True, *log_ticks(values, measured))
        if measured or (values.size and values.min() < 0):
            return cls(label)
        return cls(label, from_zero=True, range=None if values.size and values.max() > 0 else (0.0, 1.0))

    @property
    def tick_text(self) -> list[str]:
        return [f"{v:g}" for v in self.ticks or []]

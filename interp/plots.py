"""Heatmaps of ``[query_pos, key_pos]`` maps and charts of the metric frames.

Every plot has two backends with the same arguments: ``plotly`` (interactive; hover shows
the query token, the key token and the value) and ``matplotlib`` (static PNG/PDF, drawn on
an Agg canvas without pyplot, so importing this module never changes a notebook's backend).
Plots take tensors, arrays and frames, never models.

Colours: exact zeros black, as in the TRA paper's App. A figures; entries j > i (never
attended) light grey; non-negative maps on a sequential scale that starts at pale yellow
(so a tiny weight never passes for a zero); signed maps (differential patterns, D-bar,
biases) on a blue-white-red scale centred at 0. Flip-flop axes are labelled by instruction
pair (``w1``, ``i0``, ``r1``) at each instruction token: writes orange, reads blue, wrong
reads red; each read's ideal cell (query = the read, key = its most recent ``w``, the
pattern of the flip-flop paper's Fig. 5c) is outlined in cyan, or red for a wrong read.

Layout, the same in both backends, so that a figure reads without its code: a heatmap panel
grows with the tokens it shows (:func:`panel_px`) and thins its tick labels to what fits;
panels meant to be compared share one colour scale and one colour bar (``shared_scale``);
a chart's log axis is labelled at the lengths measured, a rate or count axis starts at 0
(:class:`AxisStyle`); a trace is named in words and a legend has no title
(:func:`series_traces`); an HTML page has the figure's title and caption (:func:`html_page`).
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
import plotly.io as pio
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from interp.metrics import Maps, automaton_write_positions, by_layer, summarise
from interp.tasks.automaton import AUTOMATON_VOCAB, SIGMA_0, SIGMA_1
from interp.tasks.flipflop import READ, VOCAB, WRITE, last_write_positions

ZERO_COLOR, HIDDEN_COLOR, TEXT_COLOR = "#000000", "#d9d9d9", "#333333"
ROLE_COLOR = {WRITE: "#d95f02", READ: "#1f78b4"}
AUTOMATON_WRITE_COLOR = {SIGMA_0: ROLE_COLOR[WRITE], SIGMA_1: ROLE_COLOR[READ]}   # the flip-flop paper's Fig. 5
WRONG_COLOR, IDEAL_COLOR = "#e31a1c", "#00e5ff"
# (matplotlib name, plotly scale): the same colours in both backends.
SEQUENTIAL = ("YlOrRd", plotly.colors.sequential.YlOrRd)
DIVERGING = ("RdBu_r", plotly.colors.diverging.RdBu[::-1])
HOVER = "query %{y}<br>key %{x}<br>value %{z:.4g}<extra></extra>"
# Heatmap sizing, in screen pixels (matplotlib draws the same layout at 100 px to the inch):
# a panel grows with the tokens shown so that a cell stays visible and hoverable, up to what
# fits on a screen; tick labels are then thinned to what its side can hold without overlap.
CELL_PX = 6
PANEL_PX = (400, 900)
TICK_FONT_PX = 9
TICK_SPACING_PX = 10
MPL_PX_PER_INCH, MPL_PT_PER_PX = 100, 0.72


@dataclass
class TokenAxis:
    """The token positions shown on both axes of a heatmap, and how they are labelled."""

    positions: np.ndarray                # shown token positions
    names: list[str]                     # a unique hover name per shown token, e.g. "14:r (r1)"
    ticks: list[int]                     # indices into positions that carry a tick label
    tick_text: list[str]
    tick_color: list[str]
    marks: list[tuple[int, int, bool]]   # (query index, key index, wrong) of each read's ideal cell


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


@dataclass
class Panel:
    """One heatmap, cut to the axis' positions: ``values`` is NaN wherever the cell is drawn in
    a fixed colour (``zero``: exact zeros with j <= i; ``hidden``: j > i)."""

    title: str
    values: np.ndarray
    zero: np.ndarray
    hidden: np.ndarray
    signed: bool

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
        return cls(title, np.where(hidden | zero, np.nan, sub), zero, hidden, signed)


@dataclass
class ColourScale:
    """One colour range and one colour bar for the panels drawn on it: [0, max] for non-negative
    maps, [-max|.|, max|.|] (centred at 0) once any of them is signed."""

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


def plotly_ticks(axis: TokenAxis) -> dict:
    """Category-axis settings that label ``axis``' tick tokens in their role colours."""
    return dict(type="category", tickmode="array", showgrid=False, tickfont=dict(size=TICK_FONT_PX),
                tickvals=[axis.names[i] for i in axis.ticks],
                ticktext=[f'<span style="color:{c}">{t}</span>' for t, c in zip(axis.tick_text, axis.tick_color)])


def plotly_panel_traces(panel: Panel, axis: TokenAxis, scale: ColourScale, colorbar: dict | None,
                        cell_px: float) -> list:
    """The traces of one heatmap panel on category axes of ``axis.names``: its exact zeros in
    black, its values on ``scale`` (with ``colorbar``, or none), each read's ideal cell outlined."""
    grid = dict(x=axis.names, y=axis.names, hoverongaps=False, hovertemplate=HOVER)
    traces = [go.Heatmap(z=np.where(panel.zero, 0.0, np.nan).astype(panel.values.dtype), colorscale=[[0, ZERO_COLOR], [1, ZERO_COLOR]],
                         showscale=False, name="exact zero", **grid),
              go.Heatmap(z=panel.values, colorscale=scale.colours[1], zmin=scale.lo, zmax=scale.hi, name=panel.title,
                         showscale=colorbar is not None, colorbar=colorbar, **grid)]
    if axis.marks:
        q, k, bad = zip(*axis.marks)
        traces.append(go.Scatter(
            x=[axis.names[i] for i in k], y=[axis.names[i] for i in q], mode="markers", name="last write",
            marker=dict(symbol="square-open", size=min(16, max(6, cell_px)),
                        color=[WRONG_COLOR if b else IDEAL_COLOR for b in bad], line=dict(width=2)),
            hovertext=[f"read {axis.names[a]}{' (wrong)' if b else ''}<br>last write {axis.names[c]}"
                       for a, c, b in axis.marks], hoverinfo="text"))
    return traces


def _plotly_grid(panels: list[Panel], axis: TokenAxis, ncols: int, shared: bool | str) -> go.Figure:
    nrows = math.ceil(len(panels) / ncols)
    n_shown = len(axis.positions)
    size = GridSize.of(len(panels), ncols, n_shown, shared)
    fig = make_subplots(nrows, ncols, subplot_titles=[p.title for p in panels],
                        horizontal_spacing=size.gap_x / size.plot_width, vertical_spacing=size.gap_y / size.plot_height)
    ticks = plotly_ticks(axis)
    domains = [fig.get_subplot(n // ncols + 1, n % ncols + 1) for n in range(len(panels))]
    colorbars, scale_of = {}, {}
    for scale in colour_scales(panels, ncols, shared):
        # The scale's one colour bar: right of its panels, from their top, as tall as one of them
        # (one bar down a tall column would put most of its ticks off screen).
        x1 = max(domains[i].xaxis.domain[1] for i in scale.panels)
        top = max(domains[i].yaxis.domain[1] for i in scale.panels)
        colorbars[scale.panels[-1]] = dict(x=x1 + 8 / size.plot_width, xanchor="left", y=top, yanchor="top",
                                           len=size.side / size.plot_height, thickness=10)
        scale_of |= dict.fromkeys(scale.panels, scale)
    for n, panel in enumerate(panels):
        row, col = n // ncols + 1, n % ncols + 1
        for trace in plotly_panel_traces(panel, axis, scale_of[n], colorbars.get(n), size.side / n_shown):
            fig.add_trace(trace, row, col)
        # Fixed ranges: markers would otherwise pad the autorange with an empty band.
        fig.update_xaxes(title_text="key", range=[-0.5, n_shown - 0.5], row=row, col=col, **ticks)
        fig.update_yaxes(title_text="query", range=[n_shown - 0.5, -0.5], row=row, col=col, **ticks)
    fig.update_layout(width=size.width, height=size.height, plot_bgcolor=HIDDEN_COLOR, showlegend=False,
                      margin=size.margin)
    return fig


class StaticFigure(Figure):
    """A matplotlib figure on its own Agg canvas that shows itself as a PNG in a notebook, with or
    without ``%matplotlib inline`` (IPython formats a bare ``Figure`` as text otherwise)."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=MPL_PX_PER_INCH)
        return buffer.getvalue()


def static_figure(figsize: tuple[float, float]) -> StaticFigure:
    """A constrained-layout :class:`StaticFigure` of ``figsize`` inches, drawn without pyplot."""
    fig = StaticFigure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _check_backend(backend: str) -> None:
    if backend not in ("plotly", "matplotlib"):
        raise ValueError(f"backend must be 'plotly' or 'matplotlib', got {backend!r}")


def _matplotlib_grid(panels: list[Panel], axis: TokenAxis, ncols: int, shared: bool | str) -> Figure:
    nrows = math.ceil(len(panels) / ncols)
    size = GridSize.of(len(panels), ncols, len(axis.positions), shared)
    fig = static_figure((size.width / MPL_PX_PER_INCH, size.height / MPL_PX_PER_INCH))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    font = TICK_FONT_PX * MPL_PT_PER_PX
    mark_area = min(12.0, MPL_PT_PER_PX * size.side / len(axis.positions)) ** 2
    for scale in colour_scales(panels, ncols, shared):
        cmap, norm = matplotlib.colormaps[scale.colours[0]], Normalize(scale.lo, scale.hi)
        fig.colorbar(ScalarMappable(norm, cmap), ax=[axes[i] for i in scale.panels], shrink=0.85)
        for n in scale.panels:
            panel, ax = panels[n], axes[n]
            rgba = cmap(norm(np.nan_to_num(panel.values)))
            rgba[panel.zero] = to_rgba(ZERO_COLOR)
            rgba[panel.hidden] = to_rgba(HIDDEN_COLOR)
            ax.imshow(rgba, interpolation="nearest")
    for ax, panel in zip(axes, panels):
        ax.set_title(panel.title)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_xticks(axis.ticks, axis.tick_text, rotation=90, fontsize=font, fontfamily="monospace")
        ax.set_yticks(axis.ticks, axis.tick_text, fontsize=font, fontfamily="monospace")
        for label, color in [*zip(ax.get_xticklabels(), axis.tick_color), *zip(ax.get_yticklabels(), axis.tick_color)]:
            label.set_color(color)
        if axis.marks:
            q, k, bad = zip(*axis.marks)
            ax.scatter(k, q, s=mark_area, marker="s", facecolors="none", linewidths=1.2,
                       edgecolors=[WRONG_COLOR if b else IDEAL_COLOR for b in bad])
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    return fig


def heatmap_grid(panels: Mapping[str, torch.Tensor], tokens=None, *, labels: Sequence[str] | None = None,
                 wrong: Iterable[int] = (), window: tuple[int, int] | None = None, stride: int = 1,
                 causal: bool = True, signed: bool | None = None, shared_scale: bool | str = False,
                 ncols: int | None = None, max_ticks: int | None = None, backend: str = "plotly"):
    """A grid of ``[query_pos, key_pos]`` maps of one sequence, ``{title: map}``, row-major.

    ``tokens``/``labels``/``wrong``/``window``/``stride``/``max_ticks``: see :func:`token_axis`
    (a window keeps long sequences readable: ``window=(448, 512)`` or ``stride=8``).
    ``causal``: grey out j > i (False for maps defined everywhere). ``signed``: force the
    diverging scale (default: when the shown entries have a negative value). ``shared_scale``:
    one colour range and colour bar for all panels (``True``: maps of one kind, e.g. all heads'
    patterns), per row (``"rows"``: panels compared side by side) or per column (``"columns"``:
    one kind of map per column); a shared range is diverging when any of its panels is signed.
    Each panel is :func:`panel_px` pixels square.
    """
    _check_backend(backend)
    if not panels:
        raise ValueError("no maps to plot")
    shapes = {tuple(torch.as_tensor(m).shape) for m in panels.values()}
    if len(shapes) != 1:
        raise ValueError(f"the maps differ in shape: {sorted(shapes)}")
    axis = token_axis(shapes.pop()[-1], tokens, labels, wrong, window, stride, max_ticks)
    return _render_grid(panels, axis, causal, signed, ncols, shared_scale, backend)


def _render_grid(panels: Mapping[str, torch.Tensor], axis: TokenAxis, causal: bool, signed: bool | None,
                 ncols: int | None, shared_scale: bool | str, backend: str):
    built = [Panel.of(title, m, axis, causal, signed) for title, m in panels.items()]
    render = _plotly_grid if backend == "plotly" else _matplotlib_grid
    return render(built, axis, ncols or min(len(built), 4), shared_scale)


def heatmap(m, tokens=None, *, title: str = "", **options):
    """One ``[query_pos, key_pos]`` map (pattern, S, S', M, D-bar, gates, a view, a bias);
    options as :func:`heatmap_grid`."""
    return heatmap_grid({title: m}, tokens, ncols=1, **options)


def automaton_heatmap_grid(panels: Mapping[str, torch.Tensor], inputs, *, wrong: Iterable[int] = (),
                           window: tuple[int, int] | None = None, stride: int = 1, max_ticks: int | None = None,
                           backend: str = "plotly"):
    """:func:`heatmap_grid` for one flip-flop automaton input sequence ``[T]`` (sigma_0 / sigma_1 /
    bottom = 0 / 1 / 2; flip-flop paper Fig. 5, 14, 16): axes labelled ``0`` / ``1`` (the writes,
    orange / blue) and ``_`` (bottom); every position is a prediction, so each one's ideal cell
    (query = the position, key = its most recent write, Fig. 5c) is outlined in cyan, or red
    where ``wrong`` says the prediction there is wrong (its labels are red too). All panels
    share one colour scale."""
    _check_backend(backend)
    inputs = np.asarray(torch.as_tensor(inputs).cpu()).astype(np.int64)
    axis = token_axis(len(inputs), labels=[AUTOMATON_VOCAB[x] for x in inputs], wrong=wrong, window=window,
                      stride=stride, max_ticks=max_ticks)
    wrong = {int(t) for t in wrong}
    axis.tick_color = [WRONG_COLOR if t in wrong else AUTOMATON_WRITE_COLOR.get(inputs[t], TEXT_COLOR)
                       for t in axis.positions[axis.ticks]]
    index = {int(t): i for i, t in enumerate(axis.positions)}
    last_write = automaton_write_positions(inputs)
    axis.marks = [(i, index[int(last_write[t])], t in wrong) for t, i in index.items() if int(last_write[t]) in index]
    return _render_grid(panels, axis, True, None, None, True, backend)


def layer_head_panels(maps: Maps, seq: int = 0, prefix: str = "") -> dict[str, torch.Tensor]:
    """``{"L{layer} H{head}": map}`` of sequence ``seq`` from ``[batch, head, q, k]`` maps."""
    return {f"{prefix}L{layer} H{head}": a[seq, head] for layer, a in by_layer(maps).items()
            for head in range(a.shape[1])}


def attention_grid(maps: Maps, tokens=None, *, seq: int = 0, **options):
    """All layers (rows) x heads (columns) of one sequence, on one colour scale by default."""
    n_heads = next(iter(by_layer(maps).values())).shape[1]
    options = {"shared_scale": True, "ncols": n_heads, **options}
    return heatmap_grid(layer_head_panels(maps, seq), tokens, **options)


def compare(panels_a: Mapping[str, torch.Tensor], panels_b: Mapping[str, torch.Tensor], tokens=None, *,
            names: tuple[str, str] = ("A", "B"), **options):
    """Two models on the same sequence side by side (TRA vs FoT, TRA paper App. A): row r shows
    the r-th map of each model, both on one colour scale (``shared_scale="rows"`` unless given)."""
    if len(panels_a) != len(panels_b):
        raise ValueError(f"{names[0]} has {len(panels_a)} maps and {names[1]} {len(panels_b)}; pair them up")
    rows = {}
    for (title_a, a), (title_b, b) in zip(panels_a.items(), panels_b.items()):
        rows[f"{names[0]}: {title_a}"] = a
        rows[f"{names[1]}: {title_b}"] = b
    return heatmap_grid(rows, tokens, ncols=2, **{"shared_scale": "rows", **options})


MAX_LOG_TICKS = 12


def log_ticks(values: Iterable[float], measured: bool = False) -> tuple[list[float], tuple[float, float] | None]:
    """Ticks for a log axis over ``values``, and the range that shows them (None: the data's).

    ``measured`` values (the lengths a sweep ran at) are their own ticks when there are at most
    ``MAX_LOG_TICKS``; otherwise the ticks are the 1-2-5 steps within the values (powers of 10
    where those are too many), or the two steps around them when fewer than two fall inside.
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
        inside = [v for v in steps if lo <= v <= hi]
        if len(inside) < 2:
            around = [max(v for v in steps if v <= lo), min(v for v in steps if v >= hi)]
            return around, (around[0], around[1])
        if len(inside) <= MAX_LOG_TICKS:
            return inside, None
    return inside[::math.ceil(len(inside) / MAX_LOG_TICKS)], None


@dataclass
class AxisStyle:
    """How a chart axis reads, the same in both backends. A log axis is labelled at
    :func:`log_ticks`, written in full (plotly would label its minor ticks 2, 3, 5). A linear
    axis of values (not the measured x) that are never negative (counts, rates, weights)
    starts at 0, and shows 0 to 1 when every value is 0 (rather than a band around 0)."""

    label: str
    log: bool = False
    ticks: list[float] | None = None
    range: tuple[float, float] | None = None
    from_zero: bool = False

    @classmethod
    def of(cls, values: Iterable[float], label: str, log: bool = False, measured: bool = False) -> AxisStyle:
        values = np.asarray(list(values), dtype=float)
        values = values[np.isfinite(values)]
        if log:
            return cls(label, True, *log_ticks(values, measured))
        if measured or (values.size and values.min() < 0):
            return cls(label)
        return cls(label, from_zero=True, range=None if values.size and values.max() > 0 else (0.0, 1.0))

    def plotly(self) -> dict:
        style = dict(title_text=self.label)
        if self.log:
            style["type"] = "log"
        if self.ticks:
            style |= dict(tickmode="array", tickvals=self.ticks, ticktext=[f"{v:g}" for v in self.ticks])
        if self.range:
            style["range"] = [math.log10(v) for v in self.range] if self.log else list(self.range)
        if self.from_zero:
            style["rangemode"] = "tozero"
        return style

    def matplotlib(self, ax, which: str) -> None:
        """Apply to ``ax``'s ``which`` (``"x"``/``"y"``) axis, after plotting: a scale resets the ticks."""
        axis, limits = (ax.xaxis, ax.set_xlim) if which == "x" else (ax.yaxis, ax.set_ylim)
        axis.set_label_text(self.label)
        if self.log:
            (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        if self.ticks:
            axis.set_ticks(self.ticks, [f"{v:g}" for v in self.ticks])
            axis.set_minor_locator(NullLocator())
        if self.range:
            limits(*self.range)
        elif self.from_zero:
            limits(0, None)


def series_traces(data: pd.DataFrame, series: str | None) -> list[tuple[str | None, pd.DataFrame]]:
    """``(trace name, rows)`` per value of ``series`` in sorted order: the value itself
    (``"rope-mech L0 H0"``, ``"all reads"``), or ``"layer 0"`` for a number, which alone
    says nothing. Without a series: one unnamed trace."""
    if series is None:
        return [(None, data)]
    word = series.replace("_", " ") if pd.api.types.is_numeric_dtype(data[series]) else None
    return [(f"{word} {value:g}" if word else str(value), rows)
            for value, rows in data.groupby(series, sort=True, observed=True)]


def chart(frame: pd.DataFrame, x: str, y: str = "value", *, series: str | None = None, kind: str = "line",
          reference: tuple[Sequence, Sequence, str] | None = None, title: str = "", xlabel: str | None = None,
          ylabel: str | None = None, log_x: bool = False, log_y: bool = False, backend: str = "plotly"):
    """A line or grouped-bar chart of a tidy frame, one trace per value of ``series`` (named as
    :func:`series_traces` says; the legend has no title), with an optional dashed
    ``reference`` = (xs, ys, label) (the uniform baseline, the Gaussian tail, linear growth).
    The x values are sorted; an ordered ``pd.Categorical`` keeps its own order. The axes read
    as :class:`AxisStyle` says: a log x axis is labelled at the x values themselves."""
    _check_backend(backend)
    if kind not in ("line", "bar"):
        raise ValueError(f"kind must be 'line' or 'bar', got {kind!r}")
    data = frame.sort_values([x] + ([series] if series else []))
    traces = series_traces(data, series)
    reference_x, reference_y = (list(reference[0]), list(reference[1])) if reference else ([], [])
    xlabel, ylabel = xlabel or x.replace("_", " "), ylabel or y.replace("_", " ")
    xaxis = (AxisStyle.of([*data[x], *reference_x], xlabel, log_x, measured=True) if kind == "line"
             else AxisStyle(xlabel))
    yaxis = AxisStyle.of([*data[y], *reference_y], ylabel, log_y)
    categories = list(dict.fromkeys(data[x]))          # sorted above, categories in their order
    markers = len(categories) <= 32     # dots on short lines; a long one (per position) stays a line
    if backend == "plotly":
        fig = go.Figure()
        for name, rows in traces:
            hover = f"{xlabel} %{{x}}<br>{ylabel} %{{y:.4g}}<extra>{name or ''}</extra>"
            # On an axis from 0, markers go over the axes (in matplotlib too): a value at 0 shows whole.
            trace = (go.Scatter(mode="lines+markers" if markers else "lines", cliponaxis=not yaxis.from_zero)
                     if kind == "line" else go.Bar())
            fig.add_trace(trace.update(x=rows[x].tolist(), y=rows[y].tolist(), name=name, hovertemplate=hover))
        if reference:
            fig.add_trace(go.Scatter(x=reference_x, y=reference_y, name=reference[2], mode="lines+markers",
                                     line=dict(dash="dash", color="black")))
        fig.update_xaxes(**xaxis.plotly())
        if kind == "bar":
            fig.update_xaxes(type="category", categoryorder="array", categoryarray=categories)
        fig.update_yaxes(**yaxis.plotly())
        fig.update_layout(title=title, barmode="group", showlegend=bool(series or reference))
        return fig
    fig = static_figure((6.4, 4.0))
    ax = fig.subplots()
    ax.set_title(title)
    if kind == "line":
        for name, rows in traces:
            ax.plot(rows[x], rows[y], marker="o" if markers else None, label=name, clip_on=not yaxis.from_zero)
        place = reference_x
    else:
        where = {c: i for i, c in enumerate(categories)}
        width = 0.8 / len(traces)
        for n, (name, rows) in enumerate(traces):
            offset = (n - (len(traces) - 1) / 2) * width
            ax.bar([where[v] + offset for v in rows[x]], rows[y], width, label=name)
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
        place = [where[v] for v in reference_x]
    if reference:
        ax.plot(place, reference_y, "k--", marker="_", markersize=14, label=reference[2])
    xaxis.matplotlib(ax, "x")
    yaxis.matplotlib(ax, "y")
    if series or reference:
        ax.legend(fontsize=8)
    return fig


def _rows(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = frame[frame.metric == metric]
    if rows.empty:
        raise ValueError(f"the frame has no {metric!r} rows (metrics: {sorted(frame.metric.unique())})")
    return rows


def _series(frame: pd.DataFrame, series: str | None) -> str | None:
    return series if series in frame.columns else None


def sparsity_chart(frame: pd.DataFrame, series: str = "map", backend: str = "plotly"):
    """Exact-zero sparsity per layer (TDA Fig. 1a), mean over heads, from :func:`sparsity` frames."""
    data = summarise(_rows(frame, "sparsity"))
    return chart(data, "layer", series=_series(data, series), kind="bar", title="Sparsity (exact zeros)",
                 ylabel="fraction of causal entries = 0", backend=backend)


def max_abs_chart(frame: pd.DataFrame, series: str = "map", backend: str = "plotly"):
    """Largest |weight| per layer for the pattern and each view (TDA Fig. 1b)."""
    data = summarise(_rows(frame, "max_abs_weight"), how="max")
    return chart(data, "layer", series=_series(data, series), kind="bar", title="Max |attention weight|",
                 ylabel="max |a_ij|", backend=backend)


def sink_ratio_chart(frame: pd.DataFrame, key_pos: int = 0, series: str = "model", backend: str = "plotly"):
    """gSinkRatio of one key position (mean over layers and heads) against context length
    (TDA Fig. 1c), from :func:`sink_ratio` frames at several lengths; 1 = uniform."""
    rows = _rows(frame, "gsink_ratio")
    data = summarise(rows[rows.key_pos == key_pos], over=("layer", "head"))
    lengths = sorted(data.seq_len.unique())
    return chart(data, "seq_len", series=_series(data, series), reference=(lengths, [1.0] * len(lengths), "uniform"),
                 title=f"gSinkRatio at key position {key_pos}", xlabel="context length", ylabel="gSinkRatio",
                 log_x=True, backend=backend)


def survivor_chart(frame: pd.DataFrame, series: str = "layer", backend: str = "plotly"):
    """Mean surviving keys per query against context length (TDA Fig. 4), from
    :func:`survivor_scaling` (or concatenated :func:`survivor_counts`) frames, with linear growth."""
    data = _rows(frame, "survivors")
    data = summarise(data) if "head" in data.columns else data
    lengths = np.array(sorted(data.seq_len.unique()), dtype=float)
    start = data[data.seq_len == lengths[0]].value.mean()
    return chart(data, "seq_len", series=_series(data, series),
                 reference=(lengths, start * lengths / lengths[0], "linear O(n)"), title="Surviving keys per query",
                 xlabel="context length", ylabel="mean survivors", log_x=True, log_y=True, backend=backend)


def dispersion_chart(frame: pd.DataFrame, series: str = "layer", backend: str = "plotly"):
    """Dispersion ratio E[H(a_i)] / log |S(i)| against |S(i)| (TDA Sec. 3), mean over heads,
    from a :func:`dispersion` frame; 1 = as dispersed as uniform attention."""
    data = summarise(_rows(frame, "dispersion_ratio")).dropna(subset=["value"])
    data = data.assign(context=data.query_pos + 1)
    ends = [data.context.min(), data.context.max()]
    return chart(data, "context", series=_series(data, series), reference=(ends, [1.0, 1.0], "uniform"),
                 title="Dispersion ratio", xlabel="|S(i)| (keys visible to the query)",
                 ylabel="E[H(a_i)] / log |S(i)|", log_x=True, backend=backend)


def tail_chart(frame: pd.DataFrame, series: str = "layer", backend: str = "plotly"):
    """P(|s| > k sigma) of the raw logits per layer next to N(0, 1) (TDA Table 7)."""
    data = _rows(frame, "tail_probability")
    gaussian = data.drop_duplicates("k").sort_values("k")
    return chart(data, "k", series=_series(data, series), kind="bar",
                 reference=(list(gaussian.k), list(gaussian.gaussian), "N(0, 1)"), title="Tail probabilities of logits",
                 xlabel="k", ylabel="P(|s| > k sigma)", log_y=True, backend=backend)


def correlation_chart(frame: pd.DataFrame, series: str = "map", backend: str = "plotly"):
    """Mean cross-view Pearson correlation per layer (TDA Fig. 5); constant views are skipped."""
    data = summarise(_rows(frame, "cross_view_correlation"))
    return chart(data, "layer", series=_series(data, series), kind="bar", title="Cross-view correlation",
                 ylabel="Pearson r", backend=backend)


def error_rate_chart(rates: pd.DataFrame, x: str = "dependency_length", series: str = "model",
                     backend: str = "plotly"):
    """Error rate against dependency length (flip-flop paper Fig. 12 right), from
    :func:`interp.metrics.error_rate_by_dependency`."""
    return chart(rates, x, "error_rate", series=_series(rates, series), title="Errors by dependency length",
                 xlabel=x.replace("_", " "), ylabel="error rate", log_x=bool((rates[x] > 0).all()), backend=backend)


def table1_chart(table: pd.DataFrame, splits: Sequence[str] = ("iid", "dense", "sparse"), backend: str = "plotly"):
    """Full-sequence accuracy per model, ours (mean +- std over seeds) beside the TRA paper's
    (Table 1), one panel per split, from a ``glitchlens reproduce table1`` table (columns
    ``model, split, accuracy_mean, accuracy_std, paper_accuracy_mean, paper_accuracy_std``).
    A model the paper does not report has no paper bar; a single seed has no error bar."""
    _check_backend(backend)
    models = list(dict.fromkeys(table.model))
    present = [s for s in splits if s in set(table.split)]
    if not present:
        raise ValueError(f"the table has none of the splits {list(splits)}: {sorted(set(table.split))}")
    splits = present
    sources = [("ours", "accuracy_mean", "accuracy_std", "#1f78b4"),
               ("paper", "paper_accuracy_mean", "paper_accuracy_std", "#b2b2b2")]

    def column(split, name):
        rows = table[table.split == split].set_index("model").reindex(models)
        return rows[name].to_numpy(dtype=float)

    if backend == "plotly":
        fig = make_subplots(len(splits), 1, shared_xaxes=True, subplot_titles=splits, vertical_spacing=0.08)
        for row, split in enumerate(splits, 1):
            for label, mean, std, color in sources:
                fig.add_trace(go.Bar(x=models, y=column(split, mean), name=label, marker_color=color,
                                     error_y=dict(array=np.nan_to_num(column(split, std))), showlegend=row == 1),
                              row, 1)
            fig.update_yaxes(title_text="accuracy (%)", range=[0, 110], row=row, col=1)
        fig.update_layout(barmode="group", height=220 + 230 * len(splits), width=160 + 70 * len(models),
                          title="Full-sequence accuracy (TRA paper Table 1)")
        return fig
    fig = static_figure((1.6 + 0.6 * len(models), 1.2 + 2.2 * len(splits)))
    axes = fig.subplots(len(splits), 1, sharex=True, squeeze=False)[:, 0]
    where = np.arange(len(models))
    for ax, split in zip(axes, splits):
        for n, (label, mean, std, color) in enumerate(sources):
            ax.bar(where + (n - 0.5) * 0.4, column(split, mean), 0.4, yerr=np.nan_to_num(column(split, std)),
                   color=color, label=label, capsize=2)
        ax.set(title=split, ylabel="accuracy (%)", ylim=(0, 110))
    axes[-1].set_xticks(where, models, rotation=45)
    fig.suptitle("Full-sequence accuracy (TRA paper Table 1)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper right", fontsize=8)
    return fig


def in_given_order(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``frame`` with ``column`` an ordered categorical in the order its values first appear,
    so that :func:`chart` keeps it (components in the model's order, not alphabetical)."""
    order = list(dict.fromkeys(frame[column]))
    return frame.assign(**{column: pd.Categorical(frame[column], categories=order, ordered=True)})


def dla_chart(summary: pd.DataFrame, series: str | None = None, backend: str = "plotly"):
    """Mean direct logit attribution per component, in the model's order, from
    :func:`interp.circuits.dla_summary` (one bar group per value of ``series``, e.g. correct
    reads against glitches). Bars add up to the mean logit difference of their series."""
    data = in_given_order(summary, "component")
    return chart(data, "component", "attribution", series=_series(data, series), kind="bar",
                 title="Direct logit attribution at the reads", ylabel="logit(right bit) - logit(other bit)",
                 backend=backend)


def patching_heatmap(summary: pd.DataFrame, x: str = "offset", y: str = "component", value: str = "restored",
                     title: str = "Fraction of the logit difference restored", xlabel: str | None = None,
                     backend: str = "plotly"):
    """A ``y`` x ``x`` grid of ``value`` from :func:`interp.circuits.patching_summary` (component
    x position, or sender x receiver input), rows and columns in the order they first appear,
    on the diverging scale centred at 0 and at least +-1, each cell labelled with its value."""
    _check_backend(backend)
    table = summary.pivot_table(index=y, columns=x, values=value, sort=False)
    table = table.loc[list(dict.fromkeys(summary[y])), list(dict.fromkeys(summary[x]))]
    values = table.to_numpy(dtype=float)
    top = max(1.0, float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0)
    columns, rows = [str(c) for c in table.columns], [str(r) for r in table.index]
    text = np.where(np.isfinite(values), np.char.mod("%.2f", np.nan_to_num(values)), "")
    xlabel = xlabel or x.replace("_", " ")
    if backend == "plotly":
        fig = go.Figure(go.Heatmap(z=values, x=columns, y=rows, colorscale=DIVERGING[1], zmid=0, zmin=-top, zmax=top,
                                   text=text, texttemplate="%{text}", hoverongaps=False,
                                   hovertemplate=f"{y} %{{y}}<br>{x} %{{x}}<br>{value} %{{z:.3f}}<extra></extra>"))
        fig.update_xaxes(type="category", title_text=xlabel)
        fig.update_yaxes(type="category", autorange="reversed", title_text=y)
        fig.update_layout(title=title, width=220 + 48 * len(columns), height=160 + 30 * len(rows))
        return fig
    labels = max(len(label) for label in rows)         # the y tick labels take room too
    width = max(1.6 + 0.08 * labels + 0.55 * len(columns), 0.1 * len(title))
    fig = static_figure((width, 1.4 + 0.36 * len(rows)))
    ax = fig.subplots()
    cmap, norm = matplotlib.colormaps[DIVERGING[0]], Normalize(-top, top)
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for (i, j), label in np.ndenumerate(text):
        ax.text(j, i, label, ha="center", va="center", fontsize=7,
                color="white" if np.isfinite(values[i, j]) and abs(values[i, j]) > 0.6 * top else TEXT_COLOR)
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), rows)
    ax.set(title=title, xlabel=xlabel, ylabel=y)
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax, shrink=0.85)
    return fig


CHART_HEIGHT_PX = 600     # a page's figure without a height of its own (plotly would draw 450)
PAGE_STYLE = ("body { font-family: system-ui, sans-serif; color: #222; margin: 16px 24px; } "
              "p.caption { color: #444; max-width: 900px; line-height: 1.45; }")


def html_page(fig: go.Figure, title: str, caption: str = "", include_plotlyjs: bool | str = True,
              div_id: str | None = None) -> str:
    """A page of one plotly figure: ``title`` as the page's <title> and its heading, the
    ``caption`` paragraph under it, then the figure. ``include_plotlyjs`` as plotly's
    ``to_html`` (``"directory"``: a ``plotly.min.js`` beside the page)."""
    figure = fig.to_html(include_plotlyjs=include_plotlyjs, full_html=False, div_id=div_id,
                         default_height=f"{CHART_HEIGHT_PX}px")
    text = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{PAGE_STYLE}</style></head>\n<body>\n<h1>{html.escape(title)}</h1>\n{text}\n{figure}\n'
            '</body>\n</html>\n')


def save(fig, path, *, title: str | None = None, caption: str = "", shared_plotlyjs: bool = False,
         div_id: str | None = None) -> Path:
    """Write a figure: plotly to an ``.html`` page (:func:`html_page`; the title defaults to the
    figure's, else the file name) or ``.json``; matplotlib to ``.png``/``.pdf``/``.svg``. A page
    opens offline: plotly.js is inline, or with ``shared_plotlyjs`` one ``plotly.min.js``
    beside the pages of a folder."""
    path = Path(path)
    if isinstance(fig, go.Figure):
        if path.suffix == ".html":
            title = title or fig.layout.title.text or path.stem
            path.write_text(html_page(fig, title, caption, "directory" if shared_plotlyjs else True, div_id),
                            encoding="utf-8")
            bundle = path.parent / "plotly.min.js"
            if shared_plotlyjs and not bundle.exists():
                bundle.write_text(get_plotlyjs(), encoding="utf-8")
        elif path.suffix == ".json":
            fig.write_json(path)
        else:
            raise ValueError(f"plotly figures save as .html or .json, not {path.suffix!r}; "
                             "draw static images with backend='matplotlib'")
    else:
        fig.savefig(path, dpi=150)
    return path


def to_html(fig, include_plotlyjs: bool = True) -> str:
    """An HTML fragment for a report: a plotly figure as a ``div`` (with plotly.js inline when
    ``include_plotlyjs``: once per page is enough), a matplotlib figure as an inline PNG."""
    if isinstance(fig, go.Figure):
        return fig.to_html(include_plotlyjs=include_plotlyjs, full_html=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return f'<img alt="figure" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


@dataclass
class InlineFigure:
    """A plotly figure in a notebook with a static PNG of the same data beside it, in one output:
    a frontend that runs JavaScript (JupyterLab, VS Code) draws the interactive figure, and a
    page that does not (a code host's notebook view, nbconvert's HTML) shows the image. The
    output holds the figure's JSON, not plotly.js, which the frontend brings."""

    interactive: go.Figure
    static: StaticFigure

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        title = self.interactive.layout.title.text or "figure"
        return {**pio.renderers["plotly_mimetype"].to_mimebundle(self.interactive.to_dict()),
                "image/png": base64.b64encode(self.static._repr_png_()).decode("ascii"),
                "text/plain": f"<interactive figure: {title}>"}


def inline(plot, *args, **options) -> InlineFigure:
    """``plot(*args, **options)`` (any plot of this module) drawn by both backends, for a notebook
    output that is interactive where it can be and a PNG elsewhere."""
    return InlineFigure(plot(*args, backend="plotly", **options), plot(*args, backend="matplotlib", **options))

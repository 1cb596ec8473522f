"""An interactive attention head viewer for notebooks and HTML pages (CircuitsVis-style), drawn
by plotly alone: its controls are plotly's own dropdown and slider, so it needs no widget
server and works offline and in a static HTML export.

One panel shows one head's ``[query_pos, key_pos]`` map of one sequence, drawn as
:func:`interp.plots.heatmap` draws it (token labels, exact zeros black, future keys grey, each
read's last write outlined; hover: query token, key token, positions, weight). The dropdown
picks the layer and head, the slider the sequence. Plotly controls cannot read each other's
state, so the two must change different things for every combination to be reachable: the
dropdown switches which head's traces are visible, and the sequences lie one after another
along both axes, the slider moving the axes' range onto one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from interp.metrics import Maps, by_layer, cache_maps
from interp.tasks import get_task
from interp.plots.layout import HIDDEN_COLOR, GridSize, Panel, colour_scales, task_axis, token_axis
from interp.plots.render_plotly import panel_traces, token_ticks

# Room above the panel for the dropdown and below it for the slider, in pixels.
CONTROLS_TOP_PX, CONTROLS_BOTTOM_PX = 50, 90


def _choose(name: str, wanted: Sequence[int] | None, available: Sequence[int]) -> list[int]:
    if wanted is None:
        return list(available)
    missing = [i for i in wanted if i not in available]
    if missing or not wanted:
        raise ValueError(f"{name} {missing or list(wanted)} not in the maps: they have {name} "
                         f"{list(available)}")
    return [int(i) for i in wanted]


def head_viewer(maps: Maps, tokens=None, *, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
                seqs: Sequence[int] | None = None, hook: str = "pattern", window: tuple[int, int] | None = None,
                stride: int = 1, causal: bool = True, signed: bool | None = None, max_ticks: int | None = None,
                title: str = "Attention by head", task=None) -> go.Figure:
    """One attention head at a time, chosen by layer and head (dropdown) and sequence (slider).

    ``maps``: ``{layer: [batch, head, T, T]}`` (any :data:`interp.metrics.Maps`), or a cache, from
    which the ``hook`` maps are taken (``"pattern"``, ``"attn_scores"``, ``"dbar"``, ...).
    ``tokens``: the ``[batch, T]`` token ids the maps were computed on (labels and read marks;
    without them the axes show positions), of flip-flop or of ``task`` (a registered
    :class:`~interp.tasks.Task` or its name: its own tokens, roles and evidence cells,
    :func:`interp.plots.layout.task_axis`). ``layers``/``heads``/``seqs``: what to offer
    (default: all). ``window``/``stride``/``max_ticks``/``causal``/``signed``: as
    :func:`interp.plots.heatmap_grid`. Every panel is on one colour scale, diverging and centred
    on 0 when any shown map is signed (Diff, TDA, D-bar).
    """
    if hasattr(maps, "keys") and any(isinstance(key, str) for key in maps.keys()):
        maps = cache_maps(maps, hook)
    maps = by_layer(maps)
    layers = _choose("layers", layers, sorted(maps))
    batch, n_heads, _, n = maps[layers[0]].shape
    heads = _choose("heads", heads, range(n_heads))
    seqs = _choose("sequences", seqs, range(batch))
    if tokens is not None:
        tokens = torch.as_tensor(tokens)
        if tokens.shape != (batch, n):
            raise ValueError(f"tokens must be [batch, T] = [{batch}, {n}] like the maps, got {tuple(tokens.shape)}")

    # The sequences lie one after another on the axes, so each needs its own category names.
    if task is not None and tokens is None:
        raise ValueError("task names what the tokens mean: give the tokens too")
    task = get_task(task) if isinstance(task, str) else task
    axes = []
    for s in seqs:
        axis = (task_axis(task, tokens[s], window=window, stride=stride, max_ticks=max_ticks) if task is not None else
                token_axis(n, None if tokens is None else tokens[s], window=window, stride=stride, max_ticks=max_ticks))
        axes.append(dataclasses.replace(axis, names=[f"seq {s} · {name}" for name in axis.names]))
    panels = {(layer, head, i): Panel.of(f"L{layer} H{head}", maps[layer][s, head], axes[i], causal, signed)
              for layer in layers for head in heads for i, s in enumerate(seqs)}
    scale, = colour_scales(list(panels.values()), 1, shared=True)
    n_shown = len(axes[0].positions)
    size = GridSize.of(1, 1, n_shown, shared=True)
    colorbar = dict(x=1 + 8 / size.plot_width, xanchor="left", y=1, yanchor="top", thickness=10)

    fig = go.Figure()
    shown_by = []            # the (layer, head) each trace belongs to; None: shown for every head
    for (layer, head, i), panel in panels.items():
        # float32 halves the figure's JSON; hover shows 4 significant digits anyway.
        panel = dataclasses.replace(panel, values=panel.values.astype(np.float32))
        zero, values, *marks = panel_traces(panel, scale, colorbar if i == 0 else None, size.side / n_shown)
        for trace in (zero, values):
            fig.add_trace(trace.update(meta=dict(layer=layer, head=head, seq=seqs[i]),
                                       visible=(layer, head) == (layers[0], heads[0])))
            shown_by.append((layer, head))
        if (layer, head) == (layers[0], heads[0]):     # a read's last write does not depend on the head
            for trace in marks:
                fig.add_trace(trace.update(meta=dict(seq=seqs[i])))
                shown_by.append(None)

    head_menu = dict(type="dropdown", x=0, xanchor="left", y=1, yanchor="bottom", pad=dict(b=8), active=0,
                     buttons=[dict(label=f"layer {layer}, head {head}", method="restyle",
                                   args=[{"visible": [owner in (None, (layer, head)) for owner in shown_by]}])
                              for layer in layers for head in heads])
    seq_slider = dict(active=0, currentvalue=dict(prefix="sequence "), pad=dict(t=60), len=1,
                      steps=[dict(label=str(s), method="relayout", args=[_ranges(i, n_shown)])
                             for i, s in enumerate(seqs)])
    ticks = token_ticks(dataclasses.replace(
        axes[0], names=[name for axis in axes for name in axis.names],
        ticks=[i * n_shown + t for i, axis in enumerate(axes) for t in axis.ticks],
        tick_text=[text for axis in axes for text in axis.tick_text],
        tick_color=[color for axis in axes for color in axis.tick_color]))
    categories = dict(categoryorder="array", categoryarray=[name for axis in axes for name in axis.names])
    fig.update_xaxes(title_text="key", **ticks, **categories)
    fig.update_yaxes(title_text="query", **ticks, **categories)
    margin = {**size.margin, "t": size.margin["t"] + CONTROLS_TOP_PX, "b": size.margin["b"] + CONTROLS_BOTTOM_PX}
    fig.update_xaxes(range=_ranges(0, n_shown)["xaxis.range"])
    fig.update_yaxes(range=_ranges(0, n_shown)["yaxis.range"])
    fig.update_layout(width=size.width, height=size.height + CONTROLS_TOP_PX + CONTROLS_BOTTOM_PX,
                      margin=margin, plot_bgcolor=HIDDEN_COLOR, showlegend=False, updatemenus=[head_menu],
                      sliders=[seq_slider], title=dict(text=title, x=0.5, xanchor="center"))
    return fig


def _ranges(i: int, n_shown: int) -> dict:
    """Axis ranges that show the ``i``-th sequence's block (queries top to bottom)."""
    lo, hi = i * n_shown - 0.5, (i + 1) * n_shown - 0.5
    return {"xaxis.range": [lo, hi], "yaxis.range": [hi, lo]}

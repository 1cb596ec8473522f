"""Heatmaps: grids of ``[query_pos, key_pos]`` maps of one sequence, and tables of values by
name. Each function describes its figure once (:mod:`interp.plots.describe`) and draws it with
``backend`` (``"plotly"`` or ``"matplotlib"``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from interp.metrics import Maps, by_layer
from interp.plots.describe import FigureSize, HeatmapGrid, ValueGrid
from interp.plots.layout import ColourScale, automaton_axis, task_axis, token_axis
from interp.plots.render import draw


def heatmap_grid(panels: Mapping[str, torch.Tensor], tokens=None, *, labels: Sequence[str] | None = None,
                 wrong: Iterable[int] = (), window: tuple[int, int] | None = None, stride: int = 1,
                 causal: bool = True, signed: bool | None = None, shared_scale: bool | str = False,
                 ncols: int | None = None, max_ticks: int | None = None,
                 value_label: str | tuple[str, ...] = "attention weight", backend: str = "plotly"):
    """A grid of ``[query_pos, key_pos]`` maps of one sequence, ``{title: map}``, row-major.

    ``tokens``/``labels``/``wrong``/``window``/``stride``/``max_ticks``: see
    :func:`interp.plots.layout.token_axis` (a window keeps long sequences readable:
    ``window=(448, 512)`` or ``stride=8``). ``causal``: grey out j > i (False for maps defined
    everywhere). ``signed``: force the diverging scale (default: when the shown entries have a
    negative value). ``shared_scale``: one colour range and colour bar for all panels (``True``:
    maps of one kind, e.g. all heads' patterns), per row (``"rows"``: panels compared side by
    side) or per column (``"columns"``: one kind of map per column); a shared range is diverging
    when any of its panels is signed. ``value_label``: what the colour bars measure (the maps'
    hook, say; a tuple: one name per colour scale). Each panel is
    :func:`interp.plots.layout.panel_px` pixels square.
    """
    if not panels:
        raise ValueError("no maps to plot")
    shapes = {tuple(torch.as_tensor(m).shape) for m in panels.values()}
    if len(shapes) != 1:
        raise ValueError(f"the maps differ in shape: {sorted(shapes)}")
    axis = token_axis(shapes.pop()[-1], tokens, labels, wrong, window, stride, max_ticks)
    return draw(HeatmapGrid.of(panels, axis, causal, signed, ncols, shared_scale, value_label), backend)


def heatmap(m, tokens=None, *, title: str = "", **options):
    """One ``[query_pos, key_pos]`` map (pattern, S, S', M, D-bar, gates, a view, a bias);
    options as :func:`heatmap_grid`."""
    return heatmap_grid({title: m}, tokens, ncols=1, **options)


def automaton_heatmap_grid(panels: Mapping[str, torch.Tensor], inputs, *,
                           wrong: Iterable[int] | Mapping[str, Iterable[int]] = (),
                           window: tuple[int, int] | None = None, stride: int = 1, max_ticks: int | None = None,
                           backend: str = "plotly"):
    """:func:`heatmap_grid` for one flip-flop automaton input sequence ``[T]`` (sigma_0 / sigma_1 /
    bottom = 0 / 1 / 2; flip-flop paper Fig. 5, 14, 16): axes labelled ``0`` / ``1`` (the writes,
    orange / blue) and ``_`` (bottom); every position is a prediction, so each one's ideal cell
    (query = the position, key = its most recent write, Fig. 5c) is outlined in cyan, or red
    where ``wrong`` says the prediction there is wrong (its labels are red too); ``{title:
    positions}`` gives each panel its own (two models on one input). All panels share one colour
    scale."""
    wrong_of = wrong if isinstance(wrong, Mapping) else dict.fromkeys(panels, wrong)
    axes = {title: automaton_axis(inputs, wrong_of[title], window, stride, max_ticks) for title in panels}
    return draw(HeatmapGrid.of(panels, axes, shared_scale=True), backend)


def task_heatmap_grid(panels: Mapping[str, torch.Tensor], task, tokens, *, wrong: Iterable[int] = (),
                      window: tuple[int, int] | None = None, stride: int = 1, max_ticks: int | None = None,
                      backend: str = "plotly"):
    """:func:`heatmap_grid` for one input sequence ``[T]`` of a registered task (``interp.tasks.get_task``):
    axes labelled and coloured by the task's tokens and roles, each scored position's evidence
    cell outlined (:func:`interp.plots.layout.task_axis`). All panels share one colour scale."""
    axis = task_axis(task, tokens, wrong, window, stride, max_ticks)
    return draw(HeatmapGrid.of(panels, axis, shared_scale=True), backend)


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


def patching_heatmap(summary: pd.DataFrame, x: str = "offset", y: str = "component", value: str = "restored",
                     title: str = "Fraction of the logit difference restored", xlabel: str | None = None,
                     backend: str = "plotly"):
    """A ``y`` x ``x`` grid of ``value`` from :func:`interp.circuits.patching_summary` (component
    x position, or sender x receiver input), rows and columns in the order they first appear,
    on the diverging scale centred at 0 and at least +-1, each cell labelled with its value; an
    ``x`` of ``<NA>`` (every position patched at once) is the column ``all``."""
    summary = summary.assign(**{x: summary[x].astype(object).where(summary[x].notna(), "all")})
    table = summary.pivot_table(index=y, columns=x, values=value, sort=False)
    table = table.loc[list(dict.fromkeys(summary[y])), list(dict.fromkeys(summary[x]))]
    values = table.to_numpy(dtype=float)
    top = max(1.0, float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0)
    columns, rows = [str(c) for c in table.columns], [str(r) for r in table.index]
    text = np.where(np.isfinite(values), np.char.mod("%.2f", np.nan_to_num(values)), "")
    labels = max(len(label) for label in rows)         # the y tick labels take room too
    size = FigureSize((220 + 48 * len(columns), 160 + 30 * len(rows)),
                      (max(1.6 + 0.08 * labels + 0.55 * len(columns), 0.1 * len(title)), 1.4 + 0.36 * len(rows)))
    grid = ValueGrid(values, text, rows, columns, ColourScale([0], -top, top, signed=True), title,
                     xlabel or x.replace("_", " "), y, (y, x, value), size)
    return draw(grid, backend)

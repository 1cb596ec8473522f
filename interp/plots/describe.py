"""What a figure shows, for either backend to draw (:func:`interp.plots.render.draw`): every
choice of data, layout, ticks, colours and names is made here, so the two backends draw the
same figure. Three kinds: a :class:`HeatmapGrid` of ``[query_pos, key_pos]`` maps, a
:class:`Chart` of lines and bars, a :class:`ValueGrid` of labelled cells."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from interp.plots.layout import TEXT_COLOR, AxisStyle, ColourScale, GridSize, Panel, TokenAxis, colour_scales


@dataclass
class HeatmapGrid:
    """Square heatmap panels of one sequence, row-major, ``ncols`` to a row, keys across and
    queries down the token ``axis``; each colour scale has one colour bar."""

    panels: list[Panel]
    axis: TokenAxis
    ncols: int
    scales: list[ColourScale]
    size: GridSize
    xlabel: str = "key"
    ylabel: str = "query"
    value_label: str | tuple[str, ...] = "attention weight"

    def scale_label(self, n: int) -> str:
        """What colour scale ``n`` measures: ``value_label``, or its ``n``-th entry (one per scale)."""
        return self.value_label if isinstance(self.value_label, str) else self.value_label[n]

    @classmethod
    def of(cls, maps: Mapping[str, torch.Tensor], axis: TokenAxis | Mapping[str, TokenAxis], causal: bool = True,
           signed: bool | None = None, ncols: int | None = None, shared_scale: bool | str = False,
           value_label: str | tuple[str, ...] = "attention weight") -> HeatmapGrid:
        """``{title: [query_pos, key_pos] map}`` cut to ``axis`` (see :func:`interp.plots.heatmap_grid`),
        or to ``axis[title]``, one axis per panel over the same positions; ``value_label`` names what
        the colour bars measure (one name, or one per colour scale)."""
        axes = axis if isinstance(axis, Mapping) else dict.fromkeys(maps, axis)
        if len({tuple(a.positions) for a in axes.values()}) != 1:
            raise ValueError("the panels' axes show different positions; one grid shows one window")
        panels = [Panel.of(title, m, axes[title], causal, signed) for title, m in maps.items()]
        axis = panels[0].axis
        ncols = ncols or min(len(panels), 4)
        return cls(panels, axis, ncols, colour_scales(panels, ncols, shared_scale),
                   GridSize.of(len(panels), ncols, len(axis.positions), shared_scale), value_label=value_label)

    @property
    def nrows(self) -> int:
        return math.ceil(len(self.panels) / self.ncols)

    @property
    def cell_px(self) -> float:
        return self.size.side / len(self.axis.positions)


@dataclass
class Series:
    """One trace of a chart: a ``"line"`` (with ``markers`` on its points; ``clip=False`` lets a
    marker at an axis' edge show whole), a group of ``"bar"`` (one per x category, with
    ``error`` bars), or a dashed black ``"reference"`` line. ``low`` and ``high``: an interval
    around each y (a 95% interval, say), a shaded band around a line, an error bar on a bar.
    ``colour=None``: the backend's next colour. ``hover``: hovering names the point by the axis
    labels. ``legend``: listed there."""

    name: str | None
    x: list
    y: list | np.ndarray
    kind: str = "line"
    markers: bool = True
    clip: bool = True
    error: np.ndarray | None = None
    colour: str | None = None
    hover: bool = True
    legend: bool = True
    low: list | None = None
    high: list | None = None


@dataclass
class ChartPanel:
    """One pair of axes of a chart and the series on them; bars in a panel stand side by side
    in each category of its x axis."""

    series: list[Series]
    xaxis: AxisStyle
    yaxis: AxisStyle
    title: str = ""

    @property
    def bars(self) -> list[Series]:
        return [s for s in self.series if s.kind == "bar"]


@dataclass
class FigureSize:
    """A figure's size on screen (pixels; None: the page's default) and on paper (inches)."""

    screen: tuple[int, int] | None
    paper: tuple[float, float]


@dataclass
class Chart:
    """Panels one above the other, with x shared when ``shared_x``. One panel shows ``title``
    above its axes; several show it above the figure, each with its own title, and one legend
    (the first panel's series) for all. ``legend=False``: no legend; ``legend_above``: the legend
    in rows across the top of the axes (where a ``y_range`` left room), not where it fits best."""

    panels: list[ChartPanel]
    title: str
    legend: bool
    size: FigureSize = field(default_factory=lambda: FigureSize(None, (6.4, 4.0)))
    shared_x: bool = False
    legend_above: bool = False


@dataclass
class ValueGrid:
    """A table of ``values`` (rows x columns, by name), each cell coloured on ``scale`` and
    labelled with ``text``. ``names``: what a row, a column and a value are, for hover.
    ``text_colour``: each label's colour, white on the darkest cells (plotly picks the same
    contrast by itself)."""

    values: np.ndarray
    text: np.ndarray
    rows: list[str]
    columns: list[str]
    scale: ColourScale
    title: str
    xlabel: str
    ylabel: str
    names: tuple[str, str, str]
    size: FigureSize

    @property
    def text_colour(self) -> np.ndarray:
        dark = np.isfinite(self.values) & (np.abs(np.nan_to_num(self.values)) > 0.6 * self.scale.hi)
        return np.where(dark, "white", TEXT_COLOR)

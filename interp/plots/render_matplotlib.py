"""Draw a figure description (:mod:`interp.plots.describe`) with matplotlib: a static figure
(PNG/PDF) on an Agg canvas without pyplot, so drawing never changes a notebook's backend."""

from __future__ import annotations

import io

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from interp.plots.describe import Chart, ChartPanel, HeatmapGrid, ValueGrid
from interp.plots.layout import (
    HIDDEN_COLOR, MPL_PT_PER_PX, MPL_PX_PER_INCH, TICK_FONT_PX, ZERO_COLOR, AxisStyle,
)


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


def heatmap_grid(grid: HeatmapGrid) -> StaticFigure:
    size = grid.size
    fig = static_figure((size.width / MPL_PX_PER_INCH, size.height / MPL_PX_PER_INCH))
    axes = fig.subplots(grid.nrows, grid.ncols, squeeze=False).ravel()
    font = TICK_FONT_PX * MPL_PT_PER_PX
    mark_area = min(12.0, MPL_PT_PER_PX * grid.cell_px) ** 2
    for n_scale, scale in enumerate(grid.scales):
        cmap, norm = matplotlib.colormaps[scale.colours[0]], Normalize(scale.lo, scale.hi)
        fig.colorbar(ScalarMappable(norm, cmap), ax=[axes[i] for i in scale.panels], shrink=0.85,
                     label=grid.scale_label(n_scale))
        for n in scale.panels:
            panel, ax = grid.panels[n], axes[n]
            rgba = cmap(norm(np.nan_to_num(panel.values)))
            rgba[panel.zero] = to_rgba(ZERO_COLOR)
            rgba[panel.hidden] = to_rgba(HIDDEN_COLOR)
            ax.imshow(rgba, interpolation="nearest")
    for ax, panel in zip(axes, grid.panels):
        axis = panel.axis
        ax.set_title(panel.title)
        ax.set_xlabel(grid.xlabel)
        ax.set_ylabel(grid.ylabel)
        ax.set_xticks(axis.ticks, axis.tick_text, rotation=90, fontsize=font, fontfamily="monospace")
        ax.set_yticks(axis.ticks, axis.tick_text, fontsize=font, fontfamily="monospace")
        for label, color in [*zip(ax.get_xticklabels(), axis.tick_color), *zip(ax.get_yticklabels(), axis.tick_color)]:
            label.set_color(color)
        if axis.marks:
            q, k, _ = zip(*axis.marks)
            ax.scatter(k, q, s=mark_area, marker="s", facecolors="none", linewidths=1.2, edgecolors=axis.mark_colors)
    for ax in axes[len(grid.panels):]:
        ax.set_axis_off()
    return fig


def apply_axis(ax, which: str, style: AxisStyle) -> None:
    """Apply ``style`` to ``ax``'s ``which`` (``"x"``/``"y"``) axis, after plotting: a scale resets the ticks."""
    axis, limits = (ax.xaxis, ax.set_xlim) if which == "x" else (ax.yaxis, ax.set_ylim)
    if style.label is not None:
        axis.set_label_text(style.label)
    if style.log:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    if style.ticks:
        axis.set_ticks(style.ticks, style.tick_text)
        axis.set_minor_locator(NullLocator())
    if style.categories is not None:
        # a slanted label ends at its tick, not centred on it (where it would sit beside the next)
        axis.set_ticks(range(len(style.categories)), [str(c) for c in style.categories],
                       **(dict(rotation=45, ha="right", rotation_mode="anchor") if style.slanted else {}))
    if style.range:
        limits(*style.range)
    elif style.from_zero:
        limits(0, None)


def draw_panel(ax, panel: ChartPanel) -> None:
    """The series of ``panel`` on ``ax``: bars side by side at the x categories' positions."""
    place = {c: i for i, c in enumerate(panel.xaxis.categories or [])}
    width = 0.8 / max(1, len(panel.bars))
    for series in panel.series:
        x = [place[v] for v in series.x] if place else series.x
        interval = series.low is not None and series.high is not None
        if series.kind == "line":
            line, = ax.plot(x, series.y, marker="o" if series.markers else None, label=series.name,
                            clip_on=series.clip, color=series.colour)
            if interval:
                ax.fill_between(x, series.low, series.high, color=line.get_color(), alpha=0.2, linewidth=0)
        elif series.kind == "bar":
            offset = (panel.bars.index(series) - (len(panel.bars) - 1) / 2) * width
            error = (np.vstack([np.subtract(series.y, series.low), np.subtract(series.high, series.y)]).clip(min=0)
                     if interval else series.error)
            ax.bar([p + offset for p in x], series.y, width, yerr=error, color=series.colour,
                   label=series.name, capsize=2)
        else:
            ax.plot(x, series.y, "k--", marker="_", markersize=14, label=series.name)


def chart(description: Chart) -> StaticFigure:
    panels = description.panels
    fig = static_figure(description.size.paper)
    axes = fig.subplots(len(panels), 1, sharex=description.shared_x, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels):
        ax.set_title(panel.title if len(panels) > 1 else description.title)
        draw_panel(ax, panel)
        apply_axis(ax, "x", panel.xaxis)
        apply_axis(ax, "y", panel.yaxis)
    if len(panels) > 1:
        fig.suptitle(description.title)
        if description.legend:
            fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper right", fontsize=8)
    elif description.legend:
        axes[0].legend(fontsize=8, **(dict(loc="upper center", ncols=3) if description.legend_above else {}))
    return fig


def value_grid(grid: ValueGrid) -> StaticFigure:
    fig = static_figure(grid.size.paper)
    ax = fig.subplots()
    cmap, norm = matplotlib.colormaps[grid.scale.colours[0]], Normalize(grid.scale.lo, grid.scale.hi)
    ax.imshow(np.ma.masked_invalid(grid.values), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    for (i, j), label in np.ndenumerate(grid.text):
        ax.text(j, i, label, ha="center", va="center", fontsize=7, color=grid.text_colour[i, j])
    ax.set_xticks(range(len(grid.columns)), grid.columns)
    ax.set_yticks(range(len(grid.rows)), grid.rows)
    ax.set(xlabel=grid.xlabel, ylabel=grid.ylabel)
    fig.suptitle(grid.title)    # over the whole figure, colour bar included: over the axes alone it was cut off
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax, shrink=0.85, label=grid.names[2])
    return fig


def render(description: HeatmapGrid | Chart | ValueGrid) -> StaticFigure:
    return {HeatmapGrid: heatmap_grid, Chart: chart, ValueGrid: value_grid}[type(description)](description)

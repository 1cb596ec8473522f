"""Draw a figure description (:mod:`interp.plots.describe`) with plotly: interactive, hover
names the query and key tokens and the value of a heatmap cell, or the point of a chart."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.plots.describe import Chart, ChartPanel, HeatmapGrid, Series, ValueGrid
from interp.plots.layout import HIDDEN_COLOR, TICK_FONT_PX, ZERO_COLOR, AxisStyle, ColourScale, Panel, TokenAxis

HOVER = "query %{y}<br>key %{x}<br>value %{z:.4g}<extra></extra>"


def token_ticks(axis: TokenAxis) -> dict:
    """Category-axis settings that label ``axis``' tick tokens in their role colours."""
    return dict(type="category", tickmode="array", showgrid=False, tickfont=dict(size=TICK_FONT_PX),
                tickvals=[axis.names[i] for i in axis.ticks],
                ticktext=[f'<span style="color:{c}">{t}</span>' for t, c in zip(axis.tick_text, axis.tick_color)])


def panel_traces(panel: Panel, scale: ColourScale, colorbar: dict | None, cell_px: float) -> list:
    """The traces of one heatmap panel on category axes of its axis' names: its exact zeros in
    black, its values on ``scale`` (with ``colorbar``, or none), each read's ideal cell outlined."""
    axis = panel.axis
    grid = dict(x=axis.names, y=axis.names, hoverongaps=False, hovertemplate=HOVER)
    zeros = np.where(panel.zero, 0.0, np.nan).astype(panel.values.dtype)
    traces = [go.Heatmap(z=zeros, colorscale=[[0, ZERO_COLOR], [1, ZERO_COLOR]], showscale=False, name="exact zero",
                         **grid),
              go.Heatmap(z=panel.values, colorscale=scale.colours[1], zmin=scale.lo, zmax=scale.hi, name=panel.title,
                         showscale=colorbar is not None, colorbar=colorbar, **grid)]
    if axis.marks:
        q, k, _ = zip(*axis.marks)
        traces.append(go.Scatter(
            x=[axis.names[i] for i in k], y=[axis.names[i] for i in q], mode="markers", name="last write",
            marker=dict(symbol="square-open", size=min(16, max(6, cell_px)), color=axis.mark_colors,
                        line=dict(width=2)),
            hovertext=[f"read {axis.names[a]}{' (wrong)' if b else ''}<br>last write {axis.names[c]}"
                       for a, c, b in axis.marks], hoverinfo="text"))
    return traces


def heatmap_grid(grid: HeatmapGrid) -> go.Figure:
    size, ncols, n_shown = grid.size, grid.ncols, len(grid.axis.positions)
    fig = make_subplots(grid.nrows, ncols, subplot_titles=[p.title for p in grid.panels],
                        horizontal_spacing=size.gap_x / size.plot_width, vertical_spacing=size.gap_y / size.plot_height)
    domains = [fig.get_subplot(n // ncols + 1, n % ncols + 1) for n in range(len(grid.panels))]
    colorbars, scale_of = {}, {}
    for n_scale, scale in enumerate(grid.scales):
        # The scale's one colour bar: right of its panels, from their top, as tall as one of them
        # (one bar down a tall column would put most of its ticks off screen).
        x1 = max(domains[i].xaxis.domain[1] for i in scale.panels)
        top = max(domains[i].yaxis.domain[1] for i in scale.panels)
        colorbars[scale.panels[-1]] = dict(x=x1 + 8 / size.plot_width, xanchor="left", y=top, yanchor="top",
                                           len=size.side / size.plot_height, thickness=10,
                                           title=dict(text=grid.scale_label(n_scale), side="right"))
        scale_of |= dict.fromkeys(scale.panels, scale)
    for n, panel in enumerate(grid.panels):
        row, col = n // ncols + 1, n % ncols + 1
        for trace in panel_traces(panel, scale_of[n], colorbars.get(n), grid.cell_px):
            fig.add_trace(trace, row, col)
        ticks = token_ticks(panel.axis)
        # Fixed ranges: markers would otherwise pad the autorange with an empty band.
        fig.update_xaxes(title_text=grid.xlabel, range=[-0.5, n_shown - 0.5], row=row, col=col, **ticks)
        fig.update_yaxes(title_text=grid.ylabel, range=[n_shown - 0.5, -0.5], row=row, col=col, **ticks)
    fig.update_layout(width=size.width, height=size.height, plot_bgcolor=HIDDEN_COLOR, showlegend=False,
                      margin=size.margin)
    return fig


def axis_settings(style: AxisStyle) -> dict:
    """``style`` as the keywords of ``update_xaxes``/``update_yaxes``."""
    settings = {} if style.label is None else dict(title_text=style.label)
    if style.log:
        settings["type"] = "log"
    if style.ticks:
        settings |= dict(tickmode="array", tickvals=style.ticks, ticktext=style.tick_text)
    if style.range:
        settings["range"] = [math.log10(v) for v in style.range] if style.log else list(style.range)
    if style.from_zero:
        settings["rangemode"] = "tozero"
    if style.categories is not None:
        settings |= dict(type="category", categoryorder="array", categoryarray=style.categories)
    return settings


def series_trace(series: Series, panel: ChartPanel):
    if series.kind == "reference":
        return go.Scatter(x=series.x, y=series.y, name=series.name, mode="lines+markers",
                          line=dict(dash="dash", color="black"))
    # On an axis from 0, markers go over the axes: a value at 0 shows whole.
    trace = (go.Scatter(mode="lines+markers" if series.markers else "lines", cliponaxis=series.clip)
             if series.kind == "line" else go.Bar())
    trace.update(x=series.x, y=series.y, name=series.name)
    if series.hover:
        trace.update(hovertemplate=f"{panel.xaxis.label} %{{x}}<br>{panel.yaxis.label} %{{y:.4g}}"
                                   f"<extra>{series.name or ''}</extra>")
    if series.colour:
        trace.update(marker_color=series.colour)
    if series.error is not None:
        trace.update(error_y=dict(array=series.error))
    if series.kind == "bar" and series.low is not None and series.high is not None:
        trace.update(error_y=dict(type="data", symmetric=False, array=np.subtract(series.high, series.y),
                                  arrayminus=np.subtract(series.y, series.low)))
    if not series.legend:
        trace.update(showlegend=False)
    return trace


def band_trace(series: Series) -> go.Scatter:
    """The shaded interval of a line, ``low`` to ``high``, one closed shape in the line's colour."""
    colour = series.colour or "#888888"
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return go.Scatter(x=[*series.x, *series.x[::-1]], y=[*series.high, *series.low[::-1]], fill="toself",
                      fillcolor=f"rgba({red}, {green}, {blue}, 0.2)", line=dict(width=0), hoverinfo="skip",
                      showlegend=False, name=f"{series.name} interval")


def chart(description: Chart) -> go.Figure:
    panels = description.panels
    if len(panels) == 1:
        fig, where = go.Figure(), [{}]
    else:
        fig = make_subplots(len(panels), 1, shared_xaxes=description.shared_x,
                            subplot_titles=[p.title for p in panels], vertical_spacing=0.08)
        where = [dict(row=row, col=1) for row in range(1, len(panels) + 1)]
    for panel, place in zip(panels, where):
        for series in panel.series:
            if series.kind == "line" and series.low is not None and series.high is not None:
                fig.add_trace(band_trace(series), **place)
            fig.add_trace(series_trace(series, panel), **place)
        fig.update_xaxes(**axis_settings(panel.xaxis), **place)
        fig.update_yaxes(**axis_settings(panel.yaxis), **place)
    fig.update_layout(title=description.title, barmode="group", showlegend=description.legend)
    if description.legend_above:
        fig.update_layout(legend=dict(orientation="h", x=0.5, xanchor="center", y=1.0, yanchor="top"))
    if description.size.screen:
        fig.update_layout(width=description.size.screen[0], height=description.size.screen[1])
    return fig


def value_grid(grid: ValueGrid) -> go.Figure:
    row, column, value = grid.names
    fig = go.Figure(go.Heatmap(z=grid.values, x=grid.columns, y=grid.rows, colorscale=grid.scale.colours[1], zmid=0,
                               zmin=grid.scale.lo, zmax=grid.scale.hi, text=grid.text, texttemplate="%{text}",
                               colorbar=dict(title=dict(text=value, side="right")),
                               hoverongaps=False,
                               hovertemplate=f"{row} %{{y}}<br>{column} %{{x}}<br>{value} %{{z:.3f}}<extra></extra>"))
    fig.update_xaxes(type="category", title_text=grid.xlabel)
    fig.update_yaxes(type="category", autorange="reversed", title_text=grid.ylabel)
    fig.update_layout(title=grid.title, width=grid.size.screen[0], height=grid.size.screen[1])
    return fig


def render(description: HeatmapGrid | Chart | ValueGrid) -> go.Figure:
    return {HeatmapGrid: heatmap_grid, Chart: chart, ValueGrid: value_grid}[type(description)](description)

"""One entry point to the backends: a figure description drawn by plotly or matplotlib."""

from __future__ import annotations

from interp.plots import render_matplotlib, render_plotly
from interp.plots.describe import Chart, HeatmapGrid, ValueGrid

RENDERERS = {"plotly": render_plotly.render, "matplotlib": render_matplotlib.render}


def draw(description: HeatmapGrid | Chart | ValueGrid, backend: str):
    """``description`` as a plotly ``go.Figure`` (``backend="plotly"``) or a matplotlib
    :class:`~interp.plots.render_matplotlib.StaticFigure` (``"matplotlib"``)."""
    if backend not in RENDERERS:
        raise ValueError(f"backend must be 'plotly' or 'matplotlib', got {backend!r}")
    return RENDERERS[backend](description)

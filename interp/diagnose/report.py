"""report.html: one self-contained page of titled sections, each a text on how to read it and
its figures (plotly) and tables.

The page fits a window 1400 px wide: every figure wider than :data:`REPORT_WIDTH_PX` is drawn
narrower (its panels stay square), and every label is at least :data:`MIN_FONT_PX` high. It
stays small: plotly.js (4.8 MB) and every figure's data travel as one gzip stream, base64 in
the page (about 2 MB in all; the maps' repeated exact zeros compress well), which the page
unpacks with the browser's ``DecompressionStream`` and draws. Nothing is fetched: the page
opens offline.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from interp import plots
from interp.plots.layout import GridSize

REPORT_WIDTH_PX = 1300   # the content's width: a 1400 px window less the page's padding and a scroll bar
MIN_FONT_PX = 10         # the smallest label
TICK_SPACING_PX = 18     # between the token labels of a heatmap's axis (MIN_FONT_PX high, rotated across)


@dataclass
class Section:
    """One part of report.html: a title, what it shows and how to read it, then its figures
    and tables (HTML fragments), or the reason it was skipped."""

    title: str
    text: str
    body: list[str] = field(default_factory=list)
    skipped: str | None = None


def table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", classes="table", border=0)


STYLE = f"""
body {{ font-family: system-ui, sans-serif; color: #222; margin: 0 auto; max-width: {REPORT_WIDTH_PX}px;
       padding: 0 24px 48px; }}
h1 {{ font-size: 1.6em; margin-top: 28px; }}
h2 {{ border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 40px; }}
p.what {{ color: #444; max-width: 900px; line-height: 1.45; }} p.skipped {{ color: #a0522d; font-style: italic; }}
.meta {{ color: #555; font-size: 0.92em; overflow-wrap: anywhere; }}
code {{ background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }}
table.table {{ border-collapse: collapse; font-size: 0.9em; margin: 8px 0 16px; }}
table.table th, table.table td {{ border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }}
nav {{ line-height: 1.8; }} nav a {{ margin-right: 14px; white-space: nowrap; }} .figure {{ margin: 8px 0 20px; }}
.unpacking {{ color: #777; font-style: italic; }}
"""

# Unpacks the figures and plotly.js (see the module docstring), then draws each figure in its div.
LOADER = """
(async () => {
  const packed = document.getElementById("report-payload").textContent.trim();
  const bytes = Uint8Array.from(atob(packed), c => c.charCodeAt(0));
  const source = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  (0, eval)(source);
  for (const [id, figure] of Object.entries(window.reportFigures)) {
    const div = document.getElementById(id);
    div.textContent = "";
    await Plotly.newPlot(div, figure.data, figure.layout, {displaylogo: false});
  }
  document.documentElement.dataset.figures = "drawn";
})().catch(error => {
  for (const div of document.querySelectorAll(".unpacking"))
    div.textContent = "This browser could not unpack the figures (" + error + "); `glitchlens diagnose " +
      "--png` also writes the main ones as PNG files beside report.html.";
  throw error;
});
"""


def render_html(title: str, meta: list[str], sections: list[Section], figures: dict[str, dict]) -> str:
    """One self-contained page; ``figures``: the plotly figures (as dicts) the sections' divs
    name (:class:`Figures`), packed with plotly.js at the end of the page."""
    nav = " ".join(f'<a href="#s{i}">{html.escape(s.title)}</a>' for i, s in enumerate(sections))
    parts = []
    for i, s in enumerate(sections):
        body = (f'<p class="skipped">Skipped: {html.escape(s.skipped)}</p>' if s.skipped
                else "".join(f'<div class="figure">{b}</div>' for b in s.body))
        parts.append(f'<section id="s{i}"><h2>{html.escape(s.title)}</h2><p class="what">{s.text}</p>{body}</section>')
    source = get_plotlyjs() + "\nwindow.reportFigures = " + json.dumps(figures, separators=(",", ":")) + ";\n"
    payload = base64.b64encode(gzip.compress(source.encode(), compresslevel=6, mtime=0)).decode("ascii")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{STYLE}</style></head><body>'
            f'<h1>{html.escape(title)}</h1>{"".join(f"<p class=meta>{m}</p>" for m in meta)}<nav>{nav}</nav>'
            f'{"".join(parts)}<script type="application/octet-stream" id="report-payload">{payload}</script>'
            f'<script>{LOADER}</script></body></html>')


def fit_width(fig: go.Figure, width: int = REPORT_WIDTH_PX) -> go.Figure:
    """``fig`` at most ``width`` pixels wide. The panels (its axes' domains) shrink by one factor
    across and down, so square panels stay square; the margins and the gaps between panels,
    where the tick labels and colour bars are, keep their pixels."""
    if fig.layout.width is None or fig.layout.width <= width:
        return fig
    margin = fig.layout.margin
    left, right, top, bottom = (getattr(margin, side) or 0 for side in ("l", "r", "t", "b"))
    plot_w, plot_h = fig.layout.width - left - right, fig.layout.height - top - bottom
    columns = sorted({tuple(axis.domain or (0, 1)) for axis in fig.select_xaxes()})
    rows = sorted({tuple(axis.domain or (0, 1)) for axis in fig.select_yaxes()})
    panels_w = sum(hi - lo for lo, hi in columns) * plot_w
    scale = (width - left - right - (plot_w - panels_w)) / panels_w
    if scale <= 0.2:  # gaps that alone fill the width: no room for panels
        raise ValueError(f"a figure {fig.layout.width} px wide does not fit {width} px")
    x, new_w = _shrink(columns, plot_w, scale)
    y, new_h = _shrink(rows, plot_h, scale)
    fig.for_each_xaxis(lambda axis: axis.update(domain=[x(v) for v in axis.domain or (0, 1)]))
    fig.for_each_yaxis(lambda axis: axis.update(domain=[y(v) for v in axis.domain or (0, 1)]))
    fig.for_each_annotation(lambda note: note.update(x=x(note.x), y=y(note.y)),
                            selector=lambda note: note.xref == "paper" and note.yref == "paper")
    for trace in fig.data:
        bar = trace.colorbar if "colorbar" in trace else None
        if bar is not None and bar.x is not None and bar.y is not None:
            length = bar.len if bar.len is not None else 1
            low = bar.y - length if bar.yanchor == "top" else bar.y
            bar.update(x=x(bar.x), y=y(bar.y), len=y(low + length) - y(low))
    return fig.update_layout(width=width, height=round(new_h + top + bottom))


def _shrink(domains: list[tuple[float, float]], size: float, scale: float):
    """The map of paper coordinates (fractions of ``size`` pixels) that shrinks ``domains`` by
    ``scale`` and keeps the pixels between them, and the new size."""
    edges = sorted({v for domain in domains for v in domain} | {0.0, 1.0})
    inside = [any(lo <= a and b <= hi for lo, hi in domains) for a, b in zip(edges, edges[1:])]
    new = [0.0]
    for (a, b), panel in zip(zip(edges, edges[1:]), inside):
        new.append(new[-1] + (b - a) * size * (scale if panel else 1))

    def to_new(value: float) -> float:
        if not 0 <= value <= 1:  # in a margin: the pixels from the plotting area stay
            return (value * size if value < 0 else new[-1] + (value - 1) * size) / new[-1]
        i = min(int(np.searchsorted(edges, value, side="right")) - 1, len(edges) - 2)
        return (new[i] + (value - edges[i]) * size * (scale if inside[i] else 1)) / new[-1]

    return to_new, new[-1]


def fitted_ticks(n_panels: int, ncols: int, n_shown: int, shared: bool | str) -> int:
    """How many tick labels a panel of a :func:`interp.plots.heatmap_grid` of ``n_shown`` tokens
    holds once :func:`fit_width` has drawn the grid to the page's width: one per
    :data:`TICK_SPACING_PX` of its side."""
    size = GridSize.of(n_panels, ncols, n_shown, shared)
    panels_w = ncols * size.side
    room = REPORT_WIDTH_PX - size.margin["l"] - size.margin["r"] - (size.plot_width - panels_w)
    side = size.side * min(1.0, room / panels_w)
    return max(2, int(side // TICK_SPACING_PX))


def readable(fig: go.Figure, size: int = MIN_FONT_PX) -> go.Figure:
    """Every tick label, colour bar and annotation of ``fig`` at least ``size`` pixels high."""
    def at_least(font) -> dict:
        return {"size": max(font.size or size, size)}

    fig.for_each_xaxis(lambda axis: axis.update(tickfont=at_least(axis.tickfont)))
    fig.for_each_yaxis(lambda axis: axis.update(tickfont=at_least(axis.tickfont)))
    fig.for_each_annotation(lambda note: note.update(font=at_least(note.font)))
    for trace in fig.data:
        if "colorbar" in trace:
            trace.colorbar.tickfont = at_least(trace.colorbar.tickfont)
    return fig


@dataclass
class Figures:
    """Draws the report's plots: ``figures(make, png)`` is a div for ``make(backend)``'s plotly
    figure (fitted to the page, kept in ``specs`` for :func:`render_html`), with its matplotlib
    twin saved as ``out_dir / png`` (recorded in ``files``) when named and ``pngs`` is set
    (asked for: matplotlib draws again figures the report already shows, at a cost to every diagnosis)."""

    out_dir: Path
    files: dict[str, Path]
    pngs: bool
    specs: dict[str, dict] = field(default_factory=dict)

    def __call__(self, make: Callable, png: str | None = None) -> str:
        if png and self.pngs:
            self.files[png.removesuffix(".png")] = plots.save(make("matplotlib"), self.out_dir / png)
        fig = readable(fit_width(make("plotly")))
        for trace in fig.select_traces(selector=dict(type="heatmap")):  # float32, as computed: half the bytes
            trace.z = np.asarray(trace.z, dtype=np.float32)
        div_id = f"figure{len(self.specs)}"
        self.specs[div_id] = json.loads(fig.to_json())
        width = f"width: {fig.layout.width}px; " if fig.layout.width else ""
        height = fig.layout.height or plots.CHART_HEIGHT_PX
        return (f'<div class="plotly-graph-div" id="{div_id}" style="{width}height: {height}px">'
                '<p class="unpacking">unpacking the figure...</p></div>')

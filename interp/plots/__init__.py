"""Heatmaps of ``[query_pos, key_pos]`` maps and charts of the metric frames.

Every plot is described once, backend-neutral (:mod:`interp.plots.describe`, from the parts in
:mod:`interp.plots.layout`), and drawn by either backend with the same arguments:
``backend="plotly"`` (interactive; hover shows the query token, the key token and the value;
:mod:`interp.plots.render_plotly`) or ``"matplotlib"`` (static PNG/PDF, drawn on an Agg canvas
without pyplot, so drawing never changes a notebook's backend;
:mod:`interp.plots.render_matplotlib`). Plots take tensors, arrays and frames, never models:
:mod:`interp.plots.heatmaps` and :mod:`interp.plots.charts`; :mod:`interp.plots.output` writes
them to pages, files and notebook outputs.

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

from interp.plots.charts import (
    chart, chart_panel, correlation_chart, dispersion_chart, dla_chart, error_rate_chart, in_given_order,
    max_abs_chart, series_traces, sink_ratio_chart, sparsity_chart, stacked_chart, survivor_chart, table1_chart,
    tail_chart,
)
from interp.plots.heatmaps import (
    attention_grid, automaton_heatmap_grid, compare, heatmap, heatmap_grid, layer_head_panels, patching_heatmap,
    task_heatmap_grid,
)
from interp.plots.layout import (
    AUTOMATON_WRITE_COLOR, CELL_PX, DIVERGING, HIDDEN_COLOR, IDEAL_COLOR, MAX_LOG_TICKS, MPL_PT_PER_PX,
    MPL_PX_PER_INCH, PANEL_PX, ROLE_COLOR, SEQUENTIAL, TEXT_COLOR, TICK_FONT_PX, TICK_SPACING_PX, WRONG_COLOR,
    ZERO_COLOR, AxisStyle, ColourScale, GridSize, Panel, TokenAxis, colour_scales, log_ticks, panel_px, token_axis,
    TASK_ROLE_COLOR, task_axis,
)
from interp.plots.output import CHART_HEIGHT_PX, InlineFigure, html_page, inline, save, to_html
from interp.plots.render import draw
from interp.plots.render_matplotlib import StaticFigure, static_figure

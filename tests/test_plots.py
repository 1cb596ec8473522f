"""Plots draw what they are given: masked data, token labels, marks, colours, files."""

import io
import re
import warnings

import matplotlib.image
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from matplotlib.colors import to_rgba

from interp import plots
from interp.metrics import error_rate_by_dependency, read_table, sink_ratio, sparsity, tail_probabilities
from interp.plots.describe import Chart, ChartPanel, HeatmapGrid, Series
from interp.tasks.text import parse_sequence
from support import plot_gallery

TEXT = "w1i0i1r1w0r0i1r0"      # reads at 6 (last write 0), 10 and 14 (last write 8)
PAIRS = ["w1", "i0", "i1", "r1", "w0", "r0", "i1", "r0"]
T = len(TEXT)
TOKENS = parse_sequence(TEXT)
GREY, BLACK = to_rgba(plots.HIDDEN_COLOR), (0.0, 0.0, 0.0, 1.0)


def sample_map(signed=False, seed=0):
    """A causal map with exact zeros on the diagonal and in column 3, junk above the diagonal."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(T, T, generator=g) + 0.05
    if signed:
        m = m - 0.6
    m.diagonal().zero_()
    m[:, 3] = 0.0
    return m + torch.ones(T, T).triu(1) * 7.0


def uniform_map(n, heads=2):
    return (torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]).expand(1, heads, n, n)


def expected_values(m, idx):
    sub = m.numpy()[np.ix_(idx, idx)].astype(float)
    visible = idx[:, None] >= idx[None, :]
    return np.where(visible & (sub != 0), sub, np.nan), visible & (sub == 0)


def plain(ticktext):
    return [re.sub(r"<[^>]+>", "", t) for t in ticktext]


def test_plotly_heatmap_data_labels_and_hover():
    m = sample_map()
    fig = plots.heatmap(m, TOKENS, title="pattern", wrong=[14])
    zeros, main, marks = fig.data
    values, zero = expected_values(m, np.arange(T))
    np.testing.assert_array_equal(np.asarray(main.z, dtype=float), values)
    np.testing.assert_array_equal(~np.isnan(np.asarray(zeros.z, dtype=float)), zero)
    assert np.nanmax(np.asarray(zeros.z, dtype=float)) == 0.0
    assert {c for _, c in zeros.colorscale} == {"#000000"} and zeros.showscale is False
    assert list(main.x) == list(main.y) and main.x[6] == "6:r (r1)" and main.x[7] == "7:1 (r1)"
    assert main.zmin == 0.0 and main.zmax == pytest.approx(values[~np.isnan(values)].max())
    for text in ("query %{y}", "key %{x}", "value %{z"):
        assert text in main.hovertemplate and text in zeros.hovertemplate
    xaxis = fig.layout.xaxis
    assert plain(xaxis.ticktext) == PAIRS and list(xaxis.tickvals) == [main.x[t] for t in range(0, T, 2)]
    assert plots.ROLE_COLOR[0] in xaxis.ticktext[0] and plots.WRONG_COLOR in xaxis.ticktext[7]
    assert plots.ROLE_COLOR[1] in xaxis.ticktext[3]
    assert list(fig.layout.yaxis.range) == [T - 0.5, -0.5]        # query 0 at the top
    # Each read's ideal cell: (query = read, key = last write), red for the wrong read at 14.
    assert list(zip(marks.y, marks.x)) == [(main.x[6], main.x[0]), (main.x[10], main.x[8]), (main.x[14], main.x[8])]
    assert list(marks.marker.color) == [plots.IDEAL_COLOR, plots.IDEAL_COLOR, plots.WRONG_COLOR]


def test_signed_maps_use_a_diverging_scale_centred_at_zero():
    m = sample_map(signed=True)
    main = plots.heatmap(m, TOKENS).data[1]
    top = np.nanmax(np.abs(expected_values(m, np.arange(T))[0]))
    assert main.zmin == pytest.approx(-top) and main.zmax == pytest.approx(top)
    assert main.colorscale[0][1] == plots.DIVERGING[1][0] and main.colorscale[-1][1] == plots.DIVERGING[1][-1]
    unsigned = plots.heatmap(sample_map().abs(), TOKENS).data[1]
    assert unsigned.colorscale[0][1] == plots.SEQUENTIAL[1][0]
    forced = plots.heatmap(sample_map().abs(), TOKENS, signed=True).data[1]
    assert forced.zmin == -forced.zmax


def test_window_and_stride_cut_long_sequences():
    n = 64
    tokens = parse_sequence(TEXT * 4)
    m = torch.rand(n, n).tril()
    fig = plots.heatmap(m, tokens, window=(20, 36))
    idx = np.arange(20, 36)
    np.testing.assert_array_equal(np.asarray(fig.data[1].z, dtype=float), expected_values(m, idx)[0])
    assert fig.data[1].x[0] == "20:i (i1)" and fig.data[1].x[1] == "21:1 (i1)"
    strided = plots.heatmap(m, tokens, stride=4)
    np.testing.assert_array_equal(np.asarray(strided.data[1].z, dtype=float), expected_values(m, np.arange(0, n, 4))[0])
    thinned = plots.heatmap(torch.rand(512, 512), max_ticks=32).layout.xaxis
    assert len(thinned.tickvals) == 32 and plain(thinned.ticktext)[:2] == ["0", "16"]
    thinned = plots.heatmap(torch.rand(512, 512), parse_sequence(TEXT * 32), max_ticks=32).layout.xaxis
    assert len(thinned.tickvals) == 32 and plain(thinned.ticktext)[:3] == ["0:w1", "16:w1", "32:w1"]
    with pytest.raises(ValueError, match="window"):
        plots.heatmap(m, tokens, window=(40, 80))


def test_matplotlib_heatmap_draws_zeros_black_and_writes_files(tmp_path):
    m = sample_map()
    fig = plots.heatmap(m, TOKENS, wrong=[14], backend="matplotlib")
    ax = fig.axes[0]
    rgba = np.asarray(ax.images[0].get_array())
    values, zero = expected_values(m, np.arange(T))
    hidden = np.triu(np.ones((T, T), dtype=bool), 1)
    assert (rgba[zero] == BLACK).all() and (rgba[hidden] == GREY).all()
    assert not (rgba[~zero & ~hidden][:, :3] == 0).all(-1).any()      # only zeros are black
    assert [t.get_text() for t in ax.get_xticklabels()] == PAIRS
    colours = [t.get_color() for t in ax.get_yticklabels()]
    assert colours[0] == plots.ROLE_COLOR[0] and colours[7] == plots.WRONG_COLOR
    # The rendered pixel at the centre of an exact-zero cell (query 9, key 3) is black.
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())
    x, y = ax.transData.transform((3, 9))
    assert tuple(pixels[int(pixels.shape[0] - y), int(x)]) == (0, 0, 0, 255)
    png, pdf = plots.save(fig, tmp_path / "map.png"), plots.save(fig, tmp_path / "map.pdf")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:4] == b"%PDF"
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 300 and image.shape[1] > 300 and image[..., :3].std() > 0.1


def test_grid_of_layers_and_heads_and_side_by_side_comparison():
    maps = {0: torch.stack([sample_map(seed=1), sample_map(seed=2)])[None].repeat(2, 1, 1, 1),
            1: torch.stack([sample_map(seed=3), 3 * sample_map(seed=4)])[None].repeat(2, 1, 1, 1)}
    grid = plots.attention_grid(maps, TOKENS, seq=1)
    heatmaps = [t for t in grid.data if isinstance(t, go.Heatmap) and t.name != "exact zero"]
    assert [a.text for a in grid.layout.annotations] == ["L0 H0", "L0 H1", "L1 H0", "L1 H1"]
    assert [h.showscale for h in heatmaps] == [False, False, False, True]
    assert len({h.zmax for h in heatmaps}) == 1        # one colour scale across the grid
    np.testing.assert_array_equal(np.asarray(heatmaps[3].z, dtype=float),
                                  expected_values(3 * sample_map(seed=4), np.arange(T))[0])
    static = plots.attention_grid(maps, TOKENS, backend="matplotlib")
    assert len([ax for ax in static.axes if ax.images]) == 4
    side = plots.compare({"pattern": maps[1][0, 0], "D_bar": -maps[1][0, 1]},
                         {"pattern": maps[0][0, 0], "D_bar": maps[0][0, 1]}, TOKENS, names=("TRA", "FoT"))
    assert [a.text for a in side.layout.annotations] == ["TRA: pattern", "FoT: pattern", "TRA: D_bar", "FoT: D_bar"]
    mains = [t for t in side.data if isinstance(t, go.Heatmap) and t.name != "exact zero"]
    assert [h.zmin < 0 for h in mains] == [False, False, True, True], "a row with a signed map is signed"
    with pytest.raises(ValueError, match="differ in shape"):
        plots.heatmap_grid({"a": torch.rand(4, 4), "b": torch.rand(5, 5)})


def test_html_is_self_contained(tmp_path):
    fig = plots.heatmap(sample_map(), TOKENS)
    html = plots.save(fig, tmp_path / "map.html").read_text()
    assert len(html) > 1_000_000 and "Plotly.newPlot" in html
    assert not re.search(r"<script[^>]*\bsrc=", html)     # plotly.js inline: opens offline
    fragment = plots.to_html(plots.heatmap(sample_map(), TOKENS, backend="matplotlib"))
    assert fragment.startswith('<img alt="figure" src="data:image/png;base64,iVBOR')
    with pytest.raises(ValueError, match="matplotlib"):
        plots.save(fig, tmp_path / "map.png")


def test_metric_charts_show_the_frames(tmp_path):
    uniform = uniform_map(T)
    sparse = uniform * (torch.rand(1, 2, T, T) > 0.5)
    frame = pd.concat([sparsity({0: uniform, 1: sparse}), sparsity({0: sparse, 1: sparse}, name="view_1")])
    bars = plots.sparsity_chart(frame)
    assert [t.name for t in bars.data] == ["pattern", "view_1"]
    expected = frame[frame["map"] == "view_1"].groupby("layer").value.mean()
    np.testing.assert_allclose(bars.data[1].y, expected)
    assert plots.save(plots.sparsity_chart(frame, backend="matplotlib"), tmp_path / "sparsity.png").stat().st_size > 5000

    sinks = pd.concat([sink_ratio(uniform_map(n)) for n in (4, 8, 16)]).assign(model="uniform")
    line = plots.sink_ratio_chart(sinks)
    assert list(line.data[0].x) == [4, 8, 16] and np.allclose(line.data[0].y, 1.0)
    assert line.data[-1].name == "uniform"

    tails = tail_probabilities({0: torch.randn(1, 2, 64, 64), 1: torch.randn(1, 2, 64, 64)})
    chart = plots.tail_chart(tails)
    assert chart.data[-1].name == "N(0, 1)" and np.allclose(chart.data[-1].y, [0.0455, 0.0027, 6.33e-5], rtol=0.01)
    static = plots.tail_chart(tails, backend="matplotlib").axes[0]
    assert static.get_yscale() == "log" and [t.get_text() for t in static.get_xticklabels()] == ["2", "3", "4"]

    tokens = np.stack([parse_sequence(TEXT)] * 3)
    predicted = np.roll(tokens, -1, axis=1)
    predicted[1, 14] = 4
    rates = error_rate_by_dependency(read_table(tokens, predicted))
    errors = plots.error_rate_chart(rates)
    assert list(errors.data[0].x) == [2, 6] and list(errors.data[0].y) == [0.0, 1 / 6]
    with pytest.raises(ValueError, match="no 'survivors' rows"):
        plots.survivor_chart(frame)


# --- readable figures: what each one looks like, on the figure objects ----------------------------

RAW_COLUMNS = ("model_layer", "layer_scores", "seq_len", "dependency_length", "reads")


def main_heatmaps(fig) -> list[go.Heatmap]:
    return [t for t in fig.data if isinstance(t, go.Heatmap) and t.name != "exact zero"]


def panel_side(fig) -> tuple[float, float]:
    """Width and height in pixels of a plotly grid's first panel."""
    layout, margin = fig.layout, fig.layout.margin
    (x0, x1), (y0, y1) = layout.xaxis.domain, layout.yaxis.domain
    return (x1 - x0) * (layout.width - margin.l - margin.r), (y1 - y0) * (layout.height - margin.t - margin.b)


@pytest.mark.parametrize("n", [16, 64, 128, 512])
def test_heatmaps_grow_with_their_tokens_and_keep_tick_labels_apart(n):
    fig = plots.heatmap(torch.rand(n, n).tril(), parse_sequence(TEXT * (n // T)))
    width, height = panel_side(fig)
    expected = np.clip(n * plots.CELL_PX, *plots.PANEL_PX)
    assert width == pytest.approx(expected, abs=1) and height == pytest.approx(expected, abs=1)
    names = list(fig.data[1].x)
    shown = [names.index(v) for v in fig.layout.xaxis.tickvals]
    assert np.diff(shown).min() * width / n >= plots.TICK_SPACING_PX       # labels never overlap
    if n <= 128:     # the report's 128-token window: 6 px a token, every instruction pair labelled
        assert shown == list(range(0, n, 2))
    static = plots.heatmap(torch.rand(n, n).tril(), parse_sequence(TEXT * (n // T)), backend="matplotlib")
    assert tuple(static.get_size_inches() * plots.MPL_PX_PER_INCH) == pytest.approx((fig.layout.width, fig.layout.height))
    assert list(static.axes[0].get_xticks()) == shown


def test_log_axes_are_labelled_at_the_lengths_measured():
    lengths = [128, 256, 512, 1024, 2048]
    sinks = pd.DataFrame({"metric": "gsink_ratio", "key_pos": 0, "layer": 0, "head": 0, "map": "pattern",
                          "seq_len": lengths, "value": [0.9, 1.0, 1.1, 1.2, 1.3], "model": "rope-mech"})
    xaxis = plots.sink_ratio_chart(sinks).layout.xaxis
    assert xaxis.type == "log" and list(xaxis.tickvals) == lengths
    assert list(xaxis.ticktext) == ["128", "256", "512", "1024", "2048"]
    static = plots.sink_ratio_chart(sinks, backend="matplotlib").axes[0]
    assert list(static.get_xticks()) == lengths and [t.get_text() for t in static.get_xticklabels()][0] == "128"
    assert len(static.xaxis.get_minorticklocs()) == 0
    # Many values, or values on a log y axis: 1-2-5 steps, written out.
    # ... from the step at or below the smallest value to the step at or above the largest.
    assert plots.log_ticks(range(1, 513), measured=True) == ([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
                                                             (1, 1000))
    assert plots.log_ticks([3.1, 4.5]) == ([2, 5], (2, 5))                 # too narrow: the steps around it
    ticks, ends = plots.log_ticks([1e-5, 0.5, 0.0])                        # too many 1-2-5 steps: decades
    assert ticks == pytest.approx([1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1]) and ends == pytest.approx((1e-5, 1))
    survivors = pd.DataFrame({"metric": "survivors", "layer": 0, "map": "pattern", "seq_len": lengths,
                              "value": np.array(lengths) / 3})
    assert list(plots.survivor_chart(survivors).layout.yaxis.ticktext) == ["20", "50", "100", "200", "500", "1000"]
    # A 0 on a log axis (a layer with no survivor) is left out, not drawn off to minus infinity.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.survivor_chart(survivors.assign(value=[0.0, 1, 2, 3, 4]), backend="matplotlib").savefig(io.BytesIO())


def test_value_axes_start_at_zero_and_no_errors_read_as_zero():
    tokens = np.stack([parse_sequence(TEXT)] * 3)
    right = np.roll(tokens, -1, axis=1)
    none_wrong = error_rate_by_dependency(read_table(tokens, right))
    yaxis = plots.error_rate_chart(none_wrong).layout.yaxis
    assert yaxis.rangemode == "tozero" and list(yaxis.range) == [0, 1]          # not -1..1
    assert plots.error_rate_chart(none_wrong, backend="matplotlib").axes[0].get_ylim() == (0, 1)
    right[1, 14] = 4
    some_wrong = error_rate_by_dependency(read_table(tokens, right))
    yaxis = plots.error_rate_chart(some_wrong).layout.yaxis
    assert yaxis.rangemode == "tozero" and yaxis.range is None
    assert plots.error_rate_chart(some_wrong, backend="matplotlib").axes[0].get_ylim()[0] == 0
    signed = pd.DataFrame({"layer": [0, 1], "value": [-0.2, 0.3]})
    assert plots.chart(signed, "layer", kind="bar").layout.yaxis.rangemode is None


def test_legends_name_every_trace_in_words():
    for name, fig in plot_gallery().items():
        assert not fig.layout.legend.title.text, f"{name}: a legend title"
        if fig.layout.showlegend is False:
            continue
        labels = [t.name for t in fig.data if isinstance(t, (go.Scatter, go.Bar)) and t.showlegend is not False]
        assert all(labels), f"{name}: a trace without a name"
        for label in labels:
            assert not label.isdigit() and not any(c in label for c in RAW_COLUMNS), f"{name}: trace {label!r}"
    reads = pd.DataFrame({"bin": [0, 16, 0, 16], "share": [0.6, 0.4, 0.2, 0.8],
                          "reads": ["all reads", "all reads", "wrong reads", "wrong reads"]})
    by_head = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "value": [0.1, 0.2, 0.3, 0.4]})
    for frame, x, y, series, names in ((reads, "bin", "share", "reads", ["all reads", "wrong reads"]),
                                       (by_head, "layer", "value", "head", ["head 0", "head 1"])):
        assert [t.name for t in plots.chart(frame, x, y, series=series, kind="bar").data] == names
        legend = plots.chart(frame, x, y, series=series, kind="bar", backend="matplotlib").axes[0].get_legend()
        assert [t.get_text() for t in legend.get_texts()] == names and legend.get_title().get_text() == ""


def test_panels_compared_side_by_side_share_one_colour_scale():
    a, b = {"pattern": sample_map(seed=1)}, {"pattern": 3 * sample_map(seed=2)}
    side = plots.compare(a, b, TOKENS, names=("TRA", "FoT"))
    left, right = main_heatmaps(side)
    assert (left.zmin, left.zmax) == (right.zmin, right.zmax) and [left.showscale, right.showscale] == [False, True]
    static = plots.compare(a, b, TOKENS, names=("TRA", "FoT"), backend="matplotlib")
    assert len(static.axes) == 2 + 1, "one colour bar"
    # One scale per kind of map, shared down its column: gates with gates, positions with positions.
    panels = {"L0 gates": sample_map(seed=3), "L0 positions": 10 * sample_map(seed=4),
              "L1 gates": sample_map(seed=5), "L1 positions": 20 * sample_map(seed=6)}
    columns = main_heatmaps(plots.heatmap_grid(panels, TOKENS, ncols=2, shared_scale="columns"))
    assert columns[0].zmax == columns[2].zmax < columns[1].zmax == columns[3].zmax
    assert [h.showscale for h in columns] == [False, False, True, True]
    with pytest.raises(ValueError, match="shared_scale"):
        plots.heatmap_grid(panels, TOKENS, shared_scale="diagonal")


def test_html_pages_carry_a_title_and_a_caption(tmp_path):
    chart = plots.sparsity_chart(sparsity({0: uniform_map(T)}))
    page = plots.save(chart, tmp_path / "sparsity.html", caption="Zeros <per> layer & head.").read_text()
    assert "<title>Sparsity (exact zeros)</title>" in page and "<h1>Sparsity (exact zeros)</h1>" in page
    assert '<p class="caption">Zeros &lt;per&gt; layer &amp; head.</p>' in page
    untitled = plots.save(plots.heatmap(sample_map(), TOKENS), tmp_path / "pattern.html", shared_plotlyjs=True)
    assert "<title>pattern</title>" in untitled.read_text() and 'src="plotly.min.js"' in untitled.read_text()
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000



def test_one_description_is_drawn_alike_by_either_backend():
    grid = HeatmapGrid.of({"a": sample_map(), "b": sample_map(signed=True)}, plots.token_axis(T, TOKENS, wrong=[14]))
    interactive, static = plots.draw(grid, "plotly"), plots.draw(grid, "matplotlib")
    assert [a.text for a in interactive.layout.annotations] == [ax.get_title() for ax in static.axes[:2]]
    assert plain(interactive.layout.xaxis.ticktext) == [t.get_text() for t in static.axes[0].get_xticklabels()]
    marks = next(t for t in interactive.data if t.name == "last write")
    assert list(marks.marker.color) == grid.axis.mark_colors
    assert [tuple(c) for c in static.axes[0].collections[0].get_edgecolors()] == list(map(to_rgba, marks.marker.color))
    lengths = [16, 64, 256]
    xaxis = plots.AxisStyle.of(lengths, "length", log=True, measured=True)
    chart = Chart([ChartPanel([Series("model", lengths, [0.1, 0.2, 0.4])], xaxis, plots.AxisStyle.of([0.4], "share"))],
                  "title", legend=True)
    interactive, static = plots.draw(chart, "plotly"), plots.draw(chart, "matplotlib")
    assert list(interactive.layout.xaxis.tickvals) == list(static.axes[0].get_xticks()) == lengths
    assert [t.name for t in interactive.data] == [t.get_text() for t in static.axes[0].get_legend().get_texts()]
    with pytest.raises(ValueError, match="backend"):
        plots.draw(chart, "svg")

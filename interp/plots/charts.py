"""Charts of tidy frames: a line or bar :func:`chart`, the metric charts built on it (the TDA
paper's figures, error rates, attributions) and the Table 1 accuracy bars. Each function
describes its figure once (:mod:`interp.plots.describe`) and draws it with ``backend``
(``"plotly"`` or ``"matplotlib"``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from interp.metrics import summarise
from interp.plots.describe import Chart, ChartPanel, FigureSize, Series
from interp.plots.layout import AxisStyle
from interp.plots.render import draw

# Bar labels longer than this in all (two characters of space each) would collide on a chart.
SLANT_AT_CHARACTERS = 80
# The traces' colours where they are set rather than left to the backend (matplotlib's tab10).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


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
          reference: tuple[Sequence, Sequence, str] | None = None, interval: tuple[str, str] | None = None,
          title: str = "", xlabel: str | None = None, ylabel: str | None = None, log_x: bool = False,
          log_y: bool = False, y_range: tuple[float, float] | None = None, legend_above: bool = False,
          backend: str = "plotly"):
    """A line or grouped-bar chart of a tidy frame, one trace per value of ``series`` (named as
    :func:`series_traces` says; the legend has no title), with an optional dashed
    ``reference`` = (xs, ys, label) (the uniform baseline, the Gaussian tail, linear growth).
    ``interval`` = (low column, high column): each y's interval (a 95% interval, say), a band
    around a line in its colour, an error bar on a bar. ``y_range``: the y axis' span (room above
    the bars for the legend, say); ``legend_above``: the legend in rows across the top. Bar labels
    that would collide are slanted.
    The x values are sorted; an ordered ``pd.Categorical`` keeps its own order. The axes read
    as :class:`~interp.plots.layout.AxisStyle` says: a log x axis is labelled at the x values
    themselves. Lines have dots on their points where there are at most 32 (a long line, one
    point per position, stays a line)."""
    panel = chart_panel(frame, x, y, series=series, kind=kind, reference=reference, interval=interval, xlabel=xlabel,
                        ylabel=ylabel, log_x=log_x, log_y=log_y, y_range=y_range)
    return draw(Chart([panel], title, legend=bool(series or reference), legend_above=legend_above), backend)


def chart_panel(frame: pd.DataFrame, x: str, y: str = "value", *, series: str | None = None, kind: str = "line",
                reference: tuple[Sequence, Sequence, str] | None = None, interval: tuple[str, str] | None = None,
                xlabel: str | None = None, ylabel: str | None = None, log_x: bool = False, log_y: bool = False,
                y_range: tuple[float, float] | None = None, title: str = "") -> ChartPanel:
    """One panel of :func:`chart` (its arguments), for :func:`stacked_chart` to draw with others."""
    if kind not in ("line", "bar"):
        raise ValueError(f"kind must be 'line' or 'bar', got {kind!r}")
    data = frame.sort_values([x] + ([series] if series else []))
    reference_x, reference_y = (list(reference[0]), list(reference[1])) if reference else ([], [])
    xlabel, ylabel = xlabel or x.replace("_", " "), ylabel or y.replace("_", " ")
    categories = list(dict.fromkeys(data[x]))          # sorted above, categories in their order
    xaxis = (AxisStyle.of([*data[x], *reference_x], xlabel, log_x, measured=True) if kind == "line"
             else AxisStyle(xlabel, categories=categories,
                            slanted=sum(len(str(c)) + 2 for c in categories) > SLANT_AT_CHARACTERS))
    bounds = [*data[interval[0]], *data[interval[1]]] if interval else []
    yaxis = AxisStyle.of([*data[y], *reference_y, *bounds], ylabel, log_y)
    if y_range:
        yaxis.range = y_range
    markers = len(categories) <= 32
    traces = [Series(name, rows[x].tolist(), rows[y].tolist(), kind, markers, clip=not yaxis.from_zero,
                     # a band must have its line's colour, so both backends are told it
                     colour=PALETTE[n % len(PALETTE)] if interval else None,
                     low=rows[interval[0]].tolist() if interval else None,
                     high=rows[interval[1]].tolist() if interval else None)
              for n, (name, rows) in enumerate(series_traces(data, series))]
    if reference:
        traces.append(Series(reference[2], reference_x, reference_y, "reference", hover=False))
    return ChartPanel(traces, xaxis, yaxis, title=title)


def stacked_chart(panels: Sequence[ChartPanel], title: str, backend: str = "plotly"):
    """:func:`chart_panel` panels one above the other, each with its own title and y axis, sharing
    the x axis; every panel's series in the legend (a series in two panels, once)."""
    seen = set()
    for panel in panels:
        for trace in panel.series:
            trace.legend, seen = trace.name not in seen, seen | {trace.name}
    size = FigureSize((720, 160 + 260 * len(panels)), (6.4, 1.2 + 2.6 * len(panels)))
    return draw(Chart(list(panels), title, legend=True, size=size, shared_x=True), backend)


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
    """P(|s - mean| > k sigma) of the raw logits per layer next to N(0, 1) (TDA Table 7), from
    :func:`~interp.metrics.tail_probabilities` frames."""
    data = _rows(frame, "tail_probability")
    gaussian = data.drop_duplicates("k").sort_values("k")
    return chart(data, "k", series=_series(data, series), kind="bar",
                 reference=(list(gaussian.k), list(gaussian.gaussian), "N(0, 1)"), title="Tail probabilities of logits",
                 xlabel="k", ylabel="P(|s - mean| > k sigma)", log_y=True, backend=backend)


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
    models = list(dict.fromkeys(table.model))
    present = [s for s in splits if s in set(table.split)]
    if not present:
        raise ValueError(f"the table has none of the splits {list(splits)}: {sorted(set(table.split))}")
    sources = [("ours", "accuracy_mean", "accuracy_std", "#1f78b4"),
               ("paper", "paper_accuracy_mean", "paper_accuracy_std", "#b2b2b2")]

    def panel(split: str, first: bool) -> ChartPanel:
        rows = table[table.split == split].set_index("model").reindex(models)
        bars = [Series(label, models, rows[mean].to_numpy(dtype=float), "bar", error=np.nan_to_num(
                    rows[std].to_numpy(dtype=float)), colour=colour, hover=False, legend=first)
                for label, mean, std, colour in sources]
        return ChartPanel(bars, AxisStyle(None, categories=models, slanted=True),
                          AxisStyle("accuracy (%)", range=(0, 110)), title=split)

    size = FigureSize((160 + 70 * len(models), 220 + 230 * len(present)),
                      (1.6 + 0.6 * len(models), 1.2 + 2.2 * len(present)))
    return draw(Chart([panel(split, n == 0) for n, split in enumerate(present)],
                      "Full-sequence accuracy (TRA paper Table 1)", legend=True, size=size, shared_x=True), backend)


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

"""The TDA paper's figures (Fig. 1a-c, 2, 4, 5, Table 7) on the TDA specimen at the paper's
beta = 1 (``TDA_BETA1``), beside rope-mech and tra-mech."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

import models
from interp import plots
from models.attention.rope import apply_rope
from interp.figures.common import (
    FLIPFLOP_SPECIMENS, LENGTHS, N_SAMPLES, N_SEQUENCES, N_SWEEP_SEQUENCES, ROPE, TDA_BETA1, TRA, Loader,
    PaperFigure, caption, heatmap_sequence, length_ends, mean_words, one, paper_figure,
    per_sequence, progress_bar, register, shown_window,
)
from interp.metrics import (
    capture_maps, cross_view_correlation, growth_exponent, inhibition, last_row_dispersion, max_abs_weight,
    mean_interval,
    peak_cooccurrence, raw_logits, sink_ratio, sparsity, summarise, survivor_counts, survivor_growth,
    tail_probabilities, wilson_interval,
)
from interp.tasks import CANONICAL_SEQ_LEN, load_split

VIEWS = {"view_1": "view 1 (excitatory)", "view_2": "view 2 (inhibitory)", "pattern": "differential"}
# The lengths of the first-token sink (02c): 100 sequences each; at T = 2048 one TDA sequence
# alone costs 6 s of CPU.
SINK_LENGTHS = (64, 128, 256, 512, 1024)
# Two peaks closer than this are the same weight (the differential map is view 1 minus lambda
# view 2 in float32: where view 2 is 0 it is view 1's entry to the bit).
SAME_PEAK = 1e-6
# The paper's Fig. 1b: the differential map's peaks are "substantially smaller than either
# individual view", so a peak is lowered when it is below both views'.
PEAK_RELATIONS = ("equal to view 1's", "below both views'", "between the views'", "above both views'")
# The maps whose survivors 04 counts: TRA's twice, the keys its threshold keeps and those with a weight.
SURVIVOR_MAPS = ((TDA_BETA1, "pattern"), (TRA, "mask"), (TRA, "pattern"))
PAPER_CROSS_VIEW = {"trained": 0.1231, "untrained": 0.0752}
# Table 7's P(|s| > 4 sigma): the smallest and largest of its six layers
PAPER_TAIL_K4 = (0.0003, 0.0181)


def sample_words(data: pd.DataFrame) -> str:
    """``4 iid sequences of T = 512`` from the columns ``n_sequences`` and ``seq_len``."""
    return f"{one(data, 'n_sequences')} iid sequences of T = {one(data, 'seq_len')}"


@caption("02a_tda_sparsity")
def caption_sparsity(data: pd.DataFrame) -> str:
    per_layer = summarise(data[["layer", "head", "metric", "value", "map"]])
    ranges = "; ".join(f"{label}: " + "-".join(dict.fromkeys(f"{100 * v:.0f}" for v in (rows.value.min(),
                                                                                          rows.value.max()))) + "%"
                       for label, rows in per_layer.groupby("map", sort=False))
    return (f"TDA paper Fig. 1a: sparsity (fraction of causal entries exactly 0) per layer of {one(data, 'model')}'s "
            "two rectified views (hook_view_1, hook_view_2) and its differential map (hook_pattern), on "
            f"{sample_words(data)}; mean over heads. Per layer, {ranges} (the paper: > 99%).")


def peak_relations(data: pd.DataFrame) -> pd.DataFrame:
    """Per layer and head, from :func:`max_abs_weight` rows of the three maps (``map`` labelled
    as :data:`VIEWS`): the three peaks and the differential peak's relation to the views', one of
    :data:`PEAK_RELATIONS` (equal within ``SAME_PEAK``). A differential peak between the views' is
    most often an inhibitory entry, -lambda times view 2's peak."""
    data = data[data.metric == "max_abs_weight"]
    peaks = data.pivot_table(index=["layer", "head"], columns="map", values="value").reset_index()
    differential, view_1, view_2 = peaks[VIEWS["pattern"]], peaks[VIEWS["view_1"]], peaks[VIEWS["view_2"]]
    peaks["relation"] = np.select([(differential - view_1).abs() <= SAME_PEAK,
                                   differential < np.minimum(view_1, view_2),
                                   differential < np.maximum(view_1, view_2)],
                                  list(PEAK_RELATIONS[:3]), default=PEAK_RELATIONS[3])
    return peaks


def share_with_interval(count: float, n: float, digits: int = 1) -> str:
    """``count / n`` in percent with its 95% Wilson interval: ``1.3% (0.8-2.1%)``."""
    low, high = wilson_interval(count, n)
    return f"{100 * count / n:.{digits}f}% ({100 * low:.{digits}f}-{100 * high:.{digits}f}%)"


def cooccurrence_words(data: pd.DataFrame) -> str:
    """The :func:`~interp.metrics.peak_cooccurrence` rows of 02b in words: how often view 2 weighs
    view 1's peak key, per head, and what that leaves the difference to cancel."""
    shares = data[data.metric == "view_2_at_view_1_peak"].dropna(subset=["value"])
    if shares.empty:
        return "View 1 has no non-zero weight in any row: there is no excitatory peak to cancel."
    top = shares.loc[shares.value.idxmax()]
    weighed = (shares.value * shares.n_rows).round()
    pooled, top_count = int(weighed.sum()), int(round(top.value * top.n_rows))
    return (f"At view 1's peak (its largest weight in a row), view 2 is non-zero in {shares.value.min():.1%} to "
            f"{shares.value.max():.1%} of the rows with an excitatory weight per head (over the {len(shares)} heads "
            f"{pooled} of {int(shares.n_rows.sum())} rows, {share_with_interval(pooled, shares.n_rows.sum())}; the "
            f"most in layer {top.layer} head {top['head']}, {top_count} of {int(top.n_rows)} rows, "
            f"{share_with_interval(top_count, top.n_rows)}): only there can "
            f"inhibition lower a peak, so in every head at least {1 - shares.value.max():.1%} of the row peaks pass "
            "through the difference unchanged.")


@caption("02b_tda_max_weight")
def caption_max_weight(data: pd.DataFrame) -> str:
    relations = peak_relations(data).relation.value_counts()
    n_heads = int(relations.sum())
    below = int(relations.get(PEAK_RELATIONS[1], 0))
    counts = ", ".join(f"{relation} in {int(relations.get(relation, 0))}" for relation in PEAK_RELATIONS)
    verdict = (f"Inhibition lowers the peak below both views' in {below} of {n_heads} heads, as the paper's Fig. 1b "
               "has it." if below else
               "In no head is the differential peak below both views', where the paper's Fig. 1b has it smaller "
               "than either.")
    return (f"TDA paper Fig. 1b: the largest |weight| per layer of {one(data, 'model')}'s view 1, view 2 and "
            f"differential map on {sample_words(data)} (top), and per head the share of rows where view 2 is non-zero "
            f"at view 1's peak key (bottom). Of the {n_heads} heads, the differential map's peak is {counts}. "
            f"{verdict} {cooccurrence_words(data)}")


@caption("02c_sink_ratio_vs_length")
def caption_sink_ratio(data: pd.DataFrame) -> str:
    ends = [f"{name} (trained at T = {one(rows, 'trained_seq_len')}) {mean_words(first)} at T = {first.seq_len} and "
            f"{mean_words(last)} at T = {last.seq_len}" for name, rows, first, last in length_ends(data)]
    return ("TDA paper Fig. 1c: gSinkRatio(1), the weight on the first token relative to uniform attention (1, "
            "dashed), mean over layers and heads, against context length for "
            f"{' and '.join(dict.fromkeys(data.model))}; mean over {int(data.n.min())} FFL(0.8) sequences per "
            f"length, band and brackets the 95% t interval of the mean. {'; '.join(ends)}.")


def peak_chart(data: pd.DataFrame, backend: str):
    """02b: the largest |weight| per layer of each map, above the share of rows where view 2
    weighs view 1's peak key, per layer and head."""
    peaks = summarise(data[data.metric == "max_abs_weight"], how="max")
    shares = data[data.metric == "view_2_at_view_1_peak"]
    return plots.stacked_chart([
        plots.chart_panel(peaks, "layer", series="map", kind="bar", ylabel="max |a_ij|",
                          title="largest |weight| per layer"),
        plots.chart_panel(shares.assign(head="head " + shares["head"].astype(str)), "layer", series="head", kind="bar",
                          ylabel="share of rows", title="view 2 non-zero at view 1's peak key")],
        "Peaks of TDA's views and differential map", backend=backend)


@register("tda_diagnostics", {
    "02a_tda_sparsity": "Exact zeros per layer in TDA's views and differential map (TDA paper Fig. 1a)",
    "02b_tda_max_weight": "Largest attention weight per layer in TDA's views and differential map (TDA paper Fig. 1b)",
    "02c_sink_ratio_vs_length": "First-token sink against context length, TDA and RoPE (TDA paper Fig. 1c)",
})
def figure_tda_diagnostics(load: Loader, lengths: Sequence[int] = SINK_LENGTHS,
                           n_samples: int = N_SAMPLES) -> list[PaperFigure]:
    """TDA paper Fig. 1a-c: sparsity and max |weight| per layer of the TDA specimen's views and
    differential map, and gSinkRatio(1) against context length, TDA vs rope-mech, with the 95%
    interval of the mean over ``n_samples`` sequences per length."""
    _, maps = capture_maps(load(TDA_BETA1), load_split("iid", N_SEQUENCES), list(VIEWS))
    setting = dict(model=TDA_BETA1, n_sequences=N_SEQUENCES)
    zeros = pd.concat([sparsity(maps[hook], label) for hook, label in VIEWS.items()], ignore_index=True)
    peaks = pd.concat([max_abs_weight(maps[hook], label) for hook, label in VIEWS.items()]
                      + [peak_cooccurrence(maps["view_1"], maps["view_2"])], ignore_index=True)

    def sink(maps, name):
        ratio = sink_ratio(maps["pattern"], key_pos=[0])
        return summarise(ratio[ratio.metric == "gsink_ratio"], over=("layer", "head"))

    samples = per_sequence(load, {TDA_BETA1: ["pattern"], ROPE: ["pattern"]}, lengths, n_samples, sink)
    sinks = mean_interval(samples, ["model", "seq_len"], "value")
    sinks["trained_seq_len"] = sinks.model.map(lambda name: load(name).cfg.n_ctx)
    return [
        paper_figure("02a_tda_sparsity", zeros.assign(**setting), lambda b: plots.sparsity_chart(zeros, backend=b)),
        paper_figure("02b_tda_max_weight", peaks.assign(**setting), lambda b: peak_chart(peaks, b)),
        paper_figure("02c_sink_ratio_vs_length", sinks,
                     lambda b: plots.chart(sinks, "seq_len", "mean", series="model", interval=("mean_low", "mean_high"),
                                           reference=(list(lengths), [1.0] * len(lengths), "uniform"),
                                           title="gSinkRatio at key position 0", xlabel="context length",
                                           ylabel="gSinkRatio (mean, 95% CI)", log_x=True, backend=b)),
    ]


@caption("03_tda_inhibition")
def caption_inhibition(data: pd.DataFrame) -> str:
    shown = data[data.shown].set_index("metric").value
    layer, head = one(data[data.shown], "layer"), one(data[data.shown], "head")
    return (f"TDA paper Fig. 2: inhibition in {one(data, 'model')}. The two rectified views and the signed "
            f"differential map (hook_pattern) of layer {layer} head {head}, the head with the most negative entries "
            f"({shown['inhibitory_fraction']:.1%} of causal entries, {shown['inhibitory_mass']:.1%} of its |weight|; "
            f"lambda = {one(data, 'shown_lambda'):.2f}), on {shown_window(data)}. Inhibition (negative) is blue, "
            "excitation (positive) red, exact zeros black; writes orange, reads blue on the axes.")


@register("tda_inhibition", {
    "03_tda_inhibition": "Inhibition in TDA: two views and their signed difference (TDA paper Fig. 2)",
})
def figure_tda_inhibition(load: Loader) -> list[PaperFigure]:
    """TDA paper Fig. 2: the signed differential map of the TDA specimen's most inhibitory head."""
    tokens, window, seq = heatmap_sequence()
    _, maps = capture_maps(load(TDA_BETA1), tokens, [*VIEWS, "lambda"])
    data = inhibition(maps["pattern"])
    # The head with the most negative entries: a share of |weight| would favour a near-dead head.
    fractions = data[data.metric == "inhibitory_fraction"].sort_values(["layer", "head"])
    pick = fractions.sort_values("value", ascending=False, kind="stable").iloc[0]
    layer, head = int(pick["layer"]), int(pick["head"])
    lam = float(maps["lambda"][layer][0, head])
    panels = {f"view 1 (L{layer} H{head})": maps["view_1"][layer][0, head],
              "view 2": maps["view_2"][layer][0, head],
              f"differential = view 1 - {lam:.2f} view 2": maps["pattern"][layer][0, head]}
    data = data.assign(shown=(data.layer == layer) & (data["head"] == head), shown_lambda=lam, model=TDA_BETA1,
                       shown_seq=seq, window_start=window[0], window_stop=window[1])
    return [paper_figure("03_tda_inhibition", data,
                         lambda b: plots.heatmap_grid(panels, tokens[0], window=window, signed=True, shared_scale=True,
                                                      ncols=3, value_label="signed weight", backend=b))]


@caption("04_survivors_vs_length")
def caption_survivors(data: pd.DataFrame) -> str:
    longest = data[data.seq_len == data.seq_len.max()]
    exponents = growth_exponent(data, ["model_layer"]).set_index("model_layer").exponent
    growth = "; ".join(f"{r.model_layer} x{r.growth:.2f} (exponent {exponents[r.model_layer]:.2f})"
                       for r in longest.itertuples())
    return (f"TDA paper Fig. 4 (App. B.2): mean surviving keys per query against context length, per layer, for "
            f"{', '.join(dict.fromkeys(data['map']))}: on hook_pattern the keys with a non-zero weight (what "
            "`glitchlens diagnose` counts), on TRA's hook_mask the keys its threshold keeps (its softmax underflows "
            "kept keys far back to exactly 0, so fewer have a weight), on "
            f"{one(data, 'n_sequences')} FFL(0.8) sequences per length; dashed: linear O(n) growth. "
            f"Growth factor from T = {data.seq_len.min()} to {data.seq_len.max()} "
            f"(x{longest.linear_reference.iloc[0]:g}), and growth exponent (the slope of log survivors against log "
            f"T over every length: 1 linear, 0 flat; `glitchlens diagnose` reports it as survivor_exponent): "
            f"{growth}.")


@register("survivors", {"04_survivors_vs_length": "Surviving keys per query against context length (TDA paper Fig. 4)"})
def figure_survivors(load: Loader, lengths: Sequence[int] = LENGTHS, n: int = N_SWEEP_SEQUENCES) -> list[PaperFigure]:
    """TDA paper Fig. 4: surviving keys per query against context length, per layer, over the
    first ``n`` iid sequences of each length."""
    # a few sequences at a time (the maps at T = 2048 are 16 MB a sequence); every sequence of a
    # length has as many queries, so the mean over sequences is the mean over all their queries
    counts = pd.concat([per_sequence(load, {name: [hook]}, lengths, n,
                                     lambda maps, name, hook=hook: survivor_counts(maps[hook], name=f"{name} {hook}"))
                        for name, hook in SURVIVOR_MAPS], ignore_index=True)
    counts = counts.groupby(["layer", "head", "metric", "map", "seq_len"], as_index=False)["value"].mean()
    data = survivor_growth(counts).assign(n_sequences=n)
    data["model_layer"] = data["map"] + " L" + data.layer.astype(str)
    return [paper_figure("04_survivors_vs_length", data,
                         lambda b: plots.survivor_chart(data, series="model_layer", backend=b))]


@caption("05_cross_view_correlation")
def caption_cross_view(data: pd.DataFrame) -> str:
    per_model = {label: rows for label, rows in data.groupby("model", sort=False)}
    layers = "; ".join(f"{label} " + ", ".join(f"L{r.layer} {r.mean:.3g} ({r.mean_low:.3g} to {r.mean_high:.3g})"
                                               if r.n else f"L{r.layer} undefined (every view constant)"
                                               for r in rows.itertuples())
                       for label, rows in per_model.items())
    constant = ", ".join(f"{int(rows.constant_views.sum())} {label}" for label, rows in per_model.items())
    return (f"TDA paper Fig. 5 (App. B.3): Pearson correlation between the two views' weights (hook_view_1, "
            f"hook_view_2) over causal entries, per layer (mean over heads), for trained {one(data, 'specimen')} and "
            f"an untrained model of the same config (seed 0); mean over {int(data.n.min())} iid sequences of T = "
            f"{one(data, 'seq_len')}, error bars the 95% t interval of the mean. {layers} (the paper, mean over "
            f"layers: trained {PAPER_CROSS_VIEW['trained']}, untrained {PAPER_CROSS_VIEW['untrained']}). Head and "
            f"sequence pairs with a constant (e.g. all-zero) view have no correlation and are left out: {constant}.")


@register("cross_view", {
    "05_cross_view_correlation": "Correlation of TDA's two views, trained and untrained (TDA paper Fig. 5)",
})
def figure_cross_view(load: Loader, n_samples: int = N_SAMPLES) -> list[PaperFigure]:
    """TDA paper Fig. 5: cross-view correlation per layer, the TDA specimen against the same
    config freshly initialised (seed 0), each sequence of ``n_samples`` a sample."""
    trained = load(TDA_BETA1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        untrained = models.build_model(trained.cfg).eval()
    variants = {"trained": trained, "untrained": untrained}

    def correlation(maps, label):
        return cross_view_correlation(maps["view_1"], maps["view_2"])

    samples = per_sequence(variants.__getitem__, {label: ["view_1", "view_2"] for label in variants},
                           [CANONICAL_SEQ_LEN], n_samples, correlation)
    per_layer = samples.groupby(["model", "layer", "seq"], sort=False).agg(
        value=("value", "mean"), constant_views=("constant_view", "sum")).reset_index()
    data = mean_interval(per_layer, ["model", "layer"], "value").merge(
        per_layer.groupby(["model", "layer"]).constant_views.sum().reset_index(), on=["model", "layer"])
    data = data.assign(specimen=TDA_BETA1, seq_len=CANONICAL_SEQ_LEN)
    return [paper_figure("05_cross_view_correlation", data,
                         lambda b: plots.chart(data, "layer", "mean", series="model", kind="bar",
                                               interval=("mean_low", "mean_high"), title="Cross-view correlation",
                                               ylabel="Pearson r (mean, 95% CI)", backend=b))]


# The raw logits of each view: its queries and keys before the L2 normalisation (TDA_BETA1's s are cosines).
LOGIT_VIEWS = {"view 1": ("q", "k"), "view 2": ("q2", "k2")}


def view_raw_logits(model, maps: dict[str, dict[int, torch.Tensor]], layer: int, view: str) -> torch.Tensor:
    """:func:`~interp.metrics.raw_logits` of one view of one layer from the captured ``hook_q``,
    ``hook_k`` (``hook_q2``, ``hook_k2``), rotated as the layer rotates them before normalising."""
    q, k = (maps[hook][layer] for hook in LOGIT_VIEWS[view])
    if model.blocks[layer].attn.options.rope:
        q, k = apply_rope(q), apply_rope(k)
    return raw_logits(q, k)


def times(ratio: float) -> str:
    """A ratio to a reference in words: ``x0.93``, ``x7.2``, ``x144``."""
    return f"x{ratio:.2g}" if ratio < 10 else f"x{ratio:.0f}"


@caption("06_logit_tails")
def caption_logit_tails(data: pd.DataFrame) -> str:
    def rate(row: pd.Series) -> str:
        return f"{row.value:.2g} ({row.low:.2g}-{row.high:.2g})"

    per_k = "; ".join(f"k = {k:g}: {rate(rows.loc[rows.value.idxmin()])} to {rate(rows.loc[rows.value.idxmax()])}, "
                      f"{times(rows.value.min() / rows.gaussian.iloc[0])} to {times(rows.value.max() / rows.gaussian.iloc[0])}"
                      f" N(0, 1)'s {rows.gaussian.iloc[0]:.2g}" for k, rows in data.groupby("k"))
    return (f"TDA paper Table 7 (App. B.1): empirical P(|s - mean| > k sigma) of {one(data, 'model')}'s raw logits "
            "s_ij = q_i . k_j / sqrt(d) per layer and view (hook_q, hook_k and hook_q2, hook_k2, rotated by RoPE, "
            "before the L2 normalisation that makes TDA's scores cosines; mean and sigma per layer and view over "
            f"the causal entries), on {one(data, 'n_sequences')} iid sequences of T = {one(data, 'seq_len')}, beside "
            f"N(0, 1) (dashed). Over the {data.groupby(['layer', 'map']).ngroups} layer-views of "
            f"{int(data.n_entries.min()):,} causal entries each (95% t intervals over the {one(data, 'n_sequences')} "
            f"sequences, each sequence's rate one draw), {per_k} (the paper's "
            f"layers at k = 4: {PAPER_TAIL_K4[0]:g} to {PAPER_TAIL_K4[1]:g}). The CSV is the table: one row per layer, view and k.")


# Sequences of Table 7's tails: the interval is over sequences (the entries of one are not
# independent draws), so more of them than the other figures' N_SEQUENCES.
N_TAIL_SEQUENCES = 16


@register("logit_tails", {"06_logit_tails": "Tails of TDA's raw attention logits against a Gaussian (TDA paper Table 7)"})
def figure_logit_tails(load: Loader, ks: Sequence[float] = (2, 3, 4)) -> list[PaperFigure]:
    """TDA paper Table 7: P(|s - mean| > k sigma) of the TDA specimen's raw logits per layer and view."""
    model = load(TDA_BETA1)
    _, maps = capture_maps(model, load_split("iid", N_TAIL_SEQUENCES),
                           [hook for pair in LOGIT_VIEWS.values() for hook in pair])
    data = pd.concat([tail_probabilities({layer: view_raw_logits(model, maps, layer, view)}, ks, name=view)
                      for view in LOGIT_VIEWS for layer in sorted(maps["q"])],
                     ignore_index=True).assign(model=TDA_BETA1, n_sequences=N_TAIL_SEQUENCES)
    data["layer_view"] = "L" + data.layer.astype(str) + " " + data["map"]
    return [paper_figure("06_logit_tails", data, lambda b: plots.tail_chart(data, series="layer_view", backend=b))]


@caption("13_non_dispersion")
def caption_non_dispersion(data: pd.DataFrame) -> str:
    per_model = summarise(data[data.metric == "last_row_dispersion"], over=("layer", "head"))
    ends = "; ".join(f"{name} {first.value:.2g} to {last.value:.2g}" for name, _, first, last in length_ends(per_model))
    return ("TDA paper Theorem 4.4 and Corollary 4.7 (non-dispersion, Sec. 3): E[H(a_i)] / log i, the effective "
            "entropy of the last row of hook_pattern (all i = T keys visible; |weights| normalised to 1, an all-zero "
            "row counted as entropy 0) over its maximum, mean over the sequences, layers and heads, against context "
            f"length for every flip-flop specimen, on {one(data, 'n_sequences')} iid sequences per length. It tends to "
            "1 for a dispersive mechanism (uniform attention: 1, dashed) and to 0 for a non-dispersive one, as the "
            f"theorems claim for trela and TDA. From T = {data.seq_len.min()} to {data.seq_len.max()}: {ends}. The CSV "
            "has each layer and head, and the share of all-zero last rows (zero_row_fraction).")


@register("non_dispersion", {"13_non_dispersion": "Dispersion of attention against context length, every specimen "
                                                   "(TDA paper Theorem 4.4, Corollary 4.7)"})
def figure_non_dispersion(load: Loader, lengths: Sequence[int] = LENGTHS, names: Sequence[str] = FLIPFLOP_SPECIMENS,
                          n: int = N_SEQUENCES) -> list[PaperFigure]:
    """TDA paper Theorem 4.4 / Corollary 4.7: :func:`~interp.metrics.last_row_dispersion` of every
    flip-flop specimen at each of ``lengths``, mean over ``n`` iid sequences run one at a time,
    one layer's maps alive at a time."""
    frames = []
    for name in names:
        model = load(name)
        for T in progress_bar(lengths, f"{name}: dispersion over lengths"):
            tokens = load_split("iid", n, seq_len=T)
            for seq in range(n):
                capture_maps(model, tokens[seq:seq + 1], ["pattern"], consume=lambda layer, maps: frames.append(
                    last_row_dispersion({layer: maps["pattern"]}).assign(model=name)))
    keys = ["model", "layer", "head", "metric", "seq_len"]
    data = pd.concat(frames, ignore_index=True).groupby(keys, sort=False).value.mean().reset_index()
    data = data.assign(n_sequences=n)
    curves = summarise(data[data.metric == "last_row_dispersion"], over=("layer", "head"))
    return [paper_figure("13_non_dispersion", data, lambda b: plots.chart(
        curves, "seq_len", series="model", reference=(list(lengths), [1.0] * len(lengths), "uniform (dispersive)"),
        title="Dispersion of the last row against context length", xlabel="context length T (keys visible to the row)",
        ylabel="E[H(a_T)] / log T", log_x=True, y_range=(0, 1.5), legend_above=True, backend=b))]

"""The TDA paper's figures (Fig. 1a-c, 2, 4, 5, Table 7) on tda-mech, beside rope-mech and tra-mech."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

import models
from interp import plots
from interp.figures.common import (
    LENGTHS, N_SEQUENCES, N_SWEEP_SEQUENCES, ROPE, TDA, TRA, Loader, PaperFigure, across_lengths, heatmap_sequence,
    register,
)
from interp.metrics import (
    capture_maps, cross_view_correlation, inhibition, max_abs_weight, sink_ratio, sparsity, survivor_counts,
    survivor_growth, tail_probabilities,
)
from interp.tasks import CANONICAL_SEQ_LEN, load_split

VIEWS = {"view_1": "view 1 (excitatory)", "view_2": "view 2 (inhibitory)", "pattern": "differential"}


@register("tda_diagnostics", {
    "02a_tda_sparsity": "Exact zeros per layer in TDA's views and differential map (TDA paper Fig. 1a)",
    "02b_tda_max_weight": "Largest attention weight per layer in TDA's views and differential map (TDA paper Fig. 1b)",
    "02c_sink_ratio_vs_length": "First-token sink against context length, TDA and RoPE (TDA paper Fig. 1c)",
})
def figure_tda_diagnostics(load: Loader, lengths: Sequence[int] = LENGTHS) -> list[PaperFigure]:
    """TDA paper Fig. 1a-c: sparsity and max |weight| per layer of tda-mech's views and
    differential map, and gSinkRatio(1) against context length, tda-mech vs rope-mech."""
    _, maps = capture_maps(load(TDA), load_split("iid", N_SEQUENCES), list(VIEWS))
    zeros = pd.concat([sparsity(maps[hook], label) for hook, label in VIEWS.items()], ignore_index=True)
    peaks = pd.concat([max_abs_weight(maps[hook], label) for hook, label in VIEWS.items()], ignore_index=True)
    sinks = across_lengths(load, {TDA: "pattern", ROPE: "pattern"}, lengths, N_SWEEP_SEQUENCES,
                           lambda m, name: sink_ratio(m, key_pos=[0]).assign(model=name))
    at = f"{N_SEQUENCES} iid sequences of T = {CANONICAL_SEQ_LEN}"
    ratio = sinks[sinks.metric == "gsink_ratio"].groupby(["model", "seq_len"]).value.mean()
    trend = "; ".join(f"{name} {ratio[name].iloc[0]:.2f} at T = {ratio[name].index[0]} and {ratio[name].iloc[-1]:.2f} "
                      f"at T = {ratio[name].index[-1]}" for name in (TDA, ROPE))
    return [
        PaperFigure("02a_tda_sparsity",
                    f"TDA paper Fig. 1a: sparsity (fraction of causal entries exactly 0) per layer of {TDA}'s two "
                    f"rectified views (hook_view_1, hook_view_2) and its differential map (hook_pattern), on {at}; "
                    "mean over heads.",
                    lambda b: plots.sparsity_chart(zeros, backend=b), zeros),
        PaperFigure("02b_tda_max_weight",
                    f"TDA paper Fig. 1b: the largest |weight| per layer of {TDA}'s view 1, view 2 and differential "
                    f"map on {at}. Where the differential peak is below the views', inhibition cancels "
                    "common-mode exceedances.",
                    lambda b: plots.max_abs_chart(peaks, backend=b), peaks),
        PaperFigure("02c_sink_ratio_vs_length",
                    f"TDA paper Fig. 1c: gSinkRatio(1), the weight on the first token relative to uniform attention "
                    f"(1, dashed), mean over layers and heads, against context length for {TDA} and {ROPE} "
                    f"(softmax); {N_SWEEP_SEQUENCES} FFL(0.8) sequences per length, trained at T = "
                    f"{CANONICAL_SEQ_LEN}. {trend}.",
                    lambda b: plots.sink_ratio_chart(sinks, key_pos=0, backend=b), sinks),
    ]


@register("tda_inhibition", {
    "03_tda_inhibition": "Inhibition in TDA: two views and their signed difference (TDA paper Fig. 2)",
})
def figure_tda_inhibition(load: Loader) -> list[PaperFigure]:
    """TDA paper Fig. 2: the signed differential map of tda-mech's most inhibitory head."""
    tokens, window, shown_text = heatmap_sequence()
    _, maps = capture_maps(load(TDA), tokens, [*VIEWS, "lambda"])
    data = inhibition(maps["pattern"])
    # The head with the most negative entries: a share of |weight| would favour a near-dead head.
    fractions = data[data.metric == "inhibitory_fraction"].sort_values(["layer", "head"])
    pick = fractions.sort_values("value", ascending=False, kind="stable").iloc[0]
    layer, head, fraction = int(pick["layer"]), int(pick["head"]), pick["value"]
    lam = float(maps["lambda"][layer][0, head])
    panels = {f"view 1 (L{layer} H{head})": maps["view_1"][layer][0, head],
              "view 2": maps["view_2"][layer][0, head],
              f"differential = view 1 - {lam:.2f} view 2": maps["pattern"][layer][0, head]}
    shown = (data.layer == layer) & (data["head"] == head)
    share = data[shown & (data.metric == "inhibitory_mass")].value.iloc[0]
    caption = (f"TDA paper Fig. 2: inhibition in {TDA}. The two rectified views and the signed differential map "
               f"(hook_pattern) of layer {layer} head {head}, the head with the most negative entries "
               f"({fraction:.1%} of causal entries, {share:.1%} of its |weight|; lambda = {lam:.2f}), on "
               f"{shown_text}. Inhibition (negative) is blue, excitation (positive) red, exact zeros "
               "black; writes orange, reads blue on the axes.")
    return [PaperFigure("03_tda_inhibition", caption,
                        lambda b: plots.heatmap_grid(panels, tokens[0], window=window, signed=True, shared_scale=True,
                                                     ncols=3, backend=b),
                        data.assign(shown=shown))]


@register("survivors", {"04_survivors_vs_length": "Surviving keys per query against context length (TDA paper Fig. 4)"})
def figure_survivors(load: Loader, lengths: Sequence[int] = LENGTHS) -> list[PaperFigure]:
    """TDA paper Fig. 4: surviving keys per query against context length, per layer."""
    counts = across_lengths(load, {TDA: "pattern", TRA: "mask"}, lengths, N_SWEEP_SEQUENCES,
                            lambda m, name: survivor_counts(m, name=name))
    data = survivor_growth(counts)
    data["model_layer"] = data["map"] + " L" + data.layer.astype(str)
    longest = data[data.seq_len == data.seq_len.max()]
    growth = "; ".join(f"{r.model_layer} x{r.growth:.2f}" for r in longest.itertuples())
    caption = (f"TDA paper Fig. 4 (App. B.2): mean surviving (non-zero) keys per query against context length, per "
               f"layer, for {TDA} (hook_pattern) and {TRA} (hook_mask, the keys its threshold keeps), on "
               f"{N_SWEEP_SEQUENCES} FFL(0.8) sequences per length; dashed: linear O(n) growth. From T = "
               f"{data.seq_len.min()} to {data.seq_len.max()} (x{longest.linear_reference.iloc[0]:g}) the survivors "
               f"grew {growth}.")
    return [PaperFigure("04_survivors_vs_length", caption,
                        lambda b: plots.survivor_chart(data, series="model_layer", backend=b), data)]


@register("cross_view", {
    "05_cross_view_correlation": "Correlation of TDA's two views, trained and untrained (TDA paper Fig. 5)",
})
def figure_cross_view(load: Loader) -> list[PaperFigure]:
    """TDA paper Fig. 5: cross-view correlation per layer, trained tda-mech vs the same config
    freshly initialised (seed 0)."""
    trained = load(TDA)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        untrained = models.build_model(trained.cfg).eval()
    tokens = load_split("iid", N_SEQUENCES)
    frames = []
    for label, model in (("trained", trained), ("untrained", untrained)):
        _, maps = capture_maps(model, tokens, ["view_1", "view_2"])
        frames.append(cross_view_correlation(maps["view_1"], maps["view_2"]).assign(model=label))
    data = pd.concat(frames, ignore_index=True)
    means = {label: "undefined" if np.isnan(r) else f"{r:.3g}"
             for label, r in data.groupby("model").value.mean().items()}
    constant = data.groupby("model").constant_view.sum()
    caption = (f"TDA paper Fig. 5 (App. B.3): Pearson correlation between the two views' weights (hook_view_1, "
               f"hook_view_2) over causal entries, per layer, for trained {TDA} and an untrained model of the same "
               f"config (seed 0), on {N_SEQUENCES} iid sequences. Mean over layers: trained {means['trained']}, "
               f"untrained {means['untrained']} (the paper: 0.1231 and 0.0752). Heads with a constant (e.g. "
               f"all-zero) view have no correlation and no bar: {int(constant['trained'])} trained, "
               f"{int(constant['untrained'])} untrained.")
    return [PaperFigure("05_cross_view_correlation", caption,
                        lambda b: plots.correlation_chart(data, series="model", backend=b), data)]


@register("logit_tails", {"06_logit_tails": "Tails of TDA's attention logits against a Gaussian (TDA paper Table 7)"})
def figure_logit_tails(load: Loader, ks: Sequence[float] = (2, 3, 4)) -> list[PaperFigure]:
    """TDA paper Table 7: P(|s| > k sigma) of tda-mech's raw logits per layer and view."""
    _, maps = capture_maps(load(TDA), load_split("iid", N_SEQUENCES), ["scores_1", "scores_2"])
    data = pd.concat([tail_probabilities(maps[hook], ks, name=hook) for hook in ("scores_1", "scores_2")],
                     ignore_index=True)
    data["layer_scores"] = "L" + data.layer.astype(str) + " " + data["map"]
    top = data[data.k == max(ks)]
    caption = (f"TDA paper Table 7 (App. B.1): empirical P(|s| > k sigma) of {TDA}'s raw logits per layer, for both "
               "views (hook_scores_1, hook_scores_2: cosines of the L2-normalised q and k, our TDA's s; sigma the "
               f"layer's standard deviation over causal entries), on {N_SEQUENCES} iid sequences, beside N(0, 1) "
               f"(dashed). At k = {max(ks):g}: {top.value.min():.2g} to {top.value.max():.2g} against "
               f"{top.gaussian.iloc[0]:.2g}. The CSV is the table: one row per layer, view and k.")
    return [PaperFigure("06_logit_tails", caption,
                        lambda b: plots.tail_chart(data, series="layer_scores", backend=b), data)]

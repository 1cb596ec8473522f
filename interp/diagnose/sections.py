"""The sections of report.html, in reading order: the evaluation, the heatmaps, then one section
per family of metrics, each with a text on what it shows and how to read it (the papers' terms
and figures)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from interp import plots
from interp.diagnose.report import Figures, Section, fitted_ticks, table_html
from interp.diagnose.run import LengthRun
from interp.diagnose.summary import metric_rows
from interp.metrics import survivor_growth


def specimen_name(metrics: dict) -> str:
    """The name a report goes by: its checkpoint directory's (``tda-mech``)."""
    return Path(metrics["checkpoint"]).resolve().name


def report_sections(metrics: dict, frame: pd.DataFrame, glitches: pd.DataFrame, rates: pd.DataFrame,
                    probe: LengthRun | None, figures: Figures) -> list[Section]:
    """The report's sections, in reading order."""
    evaluation = Section(
        "Evaluation",
        "Glitch rate (wrong reads / reads) and sequence accuracy on the first sequences of each canonical split: "
        "<b>iid</b> FFL(0.8), <b>sparse</b> FFL(0.98) (long dependencies), <b>dense</b> FFL(0.1). The 95% upper "
        "bound is Clopper-Pearson. The chart shows where the glitches are: error rate against the token distance "
        "from each read to its last write (flip-flop paper Fig. 12 right).",
        [table_html(pd.DataFrame(metrics["evaluation"].values())),
         figures(lambda b: plots.error_rate_chart(rates, series="split", backend=b), "error_by_dependency.png"),
         f"<p>{len(glitches)} glitches; the first {min(len(glitches), 20)} (all in glitches.csv):</p>"
         + table_html(glitches.head(20))])
    if metrics["linear_probes"] is not None:
        probes = metrics["linear_probes"]
        evaluation.body.append(
            f"<p>Linear probes of {probes['label']}, on the residual stream before each block and after the last "
            f"(layer L: the stream entering block L), fitted on four of every five of {probes['sequences']} iid "
            "sequences and scored on the fifth: held-out accuracy, its 95% Wilson interval (low, high), and the "
            "accuracy of always answering the commonest bit (baseline). All in probes.csv.</p>"
            + table_html(pd.DataFrame(probes["per_layer"])[["layer", "accuracy", "low", "high", "baseline",
                                                              "test_rows"]]))
    # what does not apply opens the report, so that no part is missing without its reason in view
    lengths_skipped = (metrics["lengths"] or {}).get("skipped", {})   # no lengths run without attention
    skipped = [(f"length {T}", r) for T, r in lengths_skipped.items()] + list(metrics["skipped"].items())
    top = [Section("Skipped", "Parts of the diagnosis that do not apply to this model, and why.",
                   [table_html(pd.DataFrame(skipped, columns=["part", "reason"]))])] if skipped else []
    if probe is None:
        return [*top, evaluation, Section("Attention", "Attention maps and the TDA paper's metrics.",
                                          skipped=metrics["skipped"]["maps"])]
    return [*top, evaluation, *heatmap_sections(metrics, probe, figures), *metric_sections(metrics, frame, figures)]


def heatmap_sections(metrics: dict, probe: LengthRun, figures: Figures) -> list[Section]:
    """The final layer's maps (interactive, and a PNG) and every layer's pattern (static)."""
    T, seq, window, wrong = (metrics["heatmap"][k] for k in ("length", "sequence", "window", "wrong_reads"))
    tokens, window = probe.tokens[seq], tuple(window)
    last_layer = max(probe.maps)
    n_heads = probe.maps[last_layer]["pattern"].shape[1]
    final = {f"H{h} {name}": a[seq, h] for h in range(n_heads) for name, a in probe.maps[last_layer].items()}
    # One column per map when there are views (each map on its own scale, shared by the heads), else the heads.
    ncols, shared = (len(metrics["maps"]), "columns") if len(metrics["maps"]) > 1 else (min(n_heads, 2), True)
    patterns = {layer: maps["pattern"] for layer, maps in probe.maps.items()}
    shown = window[1] - window[0]
    return [
        Section(
            f"Final-layer attention, one sequence (T={T})",
            f"Layer {last_layer} on cached sequence {seq}, tokens {window[0]}-{window[1] - 1} (the sequence with the "
            "most wrong reads; the window ends just after its first). Axes are labelled by instruction pair: writes "
            "orange, reads blue, <b>wrong reads red</b>. Each read's ideal cell (query = the read, key = its most "
            "recent write) is outlined in cyan, or red when the read was wrong. Exact zeros are black, future keys "
            "grey; signed maps use a diverging scale. Hover for the tokens and the value.",
            [figures(lambda b: plots.heatmap_grid(final, tokens, wrong=wrong, window=window, ncols=ncols,
                                                  shared_scale=shared, backend=b,
                                                  max_ticks=fitted_ticks(len(final), ncols, shown, shared)),
                     "attention_final_layer.png")]),
        Section(
            "All layers and heads",
            "The pattern of every layer (rows) and head (columns) on the same sequence and window, on one colour "
            "scale.",
            [figures(lambda b: plots.attention_grid(patterns, tokens, seq=seq, window=window, wrong=wrong,
                                                    max_ticks=fitted_ticks(len(patterns) * n_heads, n_heads, shown,
                                                                           True), backend=b))]),
    ]


def metric_sections(metrics: dict, frame: pd.DataFrame, figures: Figures) -> list[Section]:
    """One section per family of metrics: charts at the probe length, or against length."""
    T = metrics["lengths"]["probe"]
    at_probe = frame[frame.seq_len == T]
    key, eps = metrics["settings"]["sink_keys"][0], metrics["settings"]["sink_eps"]
    name = specimen_name(metrics)
    sinks = pd.DataFrame([{"T": int(t), **{f"gSinkRatio({k})": v for k, v in keys.items()},
                           **{f"Sink^{eps}({k})": v for k, v in metrics["sink_eps"][t].items()}}
                          for t, keys in metrics["gsink_ratio"].items()])
    survivors = survivor_growth(metric_rows(frame[frame["map"] == "pattern"], "survivors"))

    def optional(field, make):
        return {"skipped": metrics["skipped"][field]} if metrics[field] is None else {"body": [figures(make)]}

    return [
        Section(
            "Sparsity and surviving keys",
            "Sparsity: the fraction of causal entries (key j &le; query i) that are exactly 0 (TDA paper App. E.1), "
            f"at T={T}. A softmax gives no exact zeros except where float32 underflows (weights below about "
            "1e-45, e.g. behind a strong recency bias). Survivors: the mean number of non-zero keys per query. "
            "A dispersive mechanism keeps every key, so its survivors grow like the dashed O(n) line; one that stays sparse at "
            "length grows far slower (TDA paper App. B.2, Fig. 4).",
            [figures(lambda b: plots.sparsity_chart(at_probe, backend=b), "sparsity.png"),
             figures(lambda b: plots.survivor_chart(survivors, backend=b), "survivors.png")]),
        Section(
            "Attention sinks",
            "gSinkRatio(k): the l1-normalised |weight| on key k relative to what a uniform map would put there, "
            "averaged over layers and heads (TDA paper Sec. 3). 1 = no sink; a sink grows with the context. "
            f"Sink^eps: the fraction of heads whose mean mass on key k exceeds eps = {eps}. Keys are 0-indexed "
            "(the paper's gSinkRatio(1) is key 0).",
            [figures(lambda b: plots.sink_ratio_chart(metric_rows(frame, "gsink_ratio").assign(model=name),
                                                      key_pos=key, backend=b),
                     "sink_ratio.png"), table_html(sinks)]),
        Section(
            f"Effective entropy and dispersion (T={T})",
            "H(a_i) of the l1-normalised |weights| of each query, divided by log |S(i)|, the entropy of uniform "
            "attention over the visible keys (TDA paper Sec. 3): near 1 the head spreads over everything "
            "(dispersion), near 0 it focuses. All-zero rows are left out and counted in metrics.json.",
            [figures(lambda b: plots.dispersion_chart(at_probe[at_probe.query_pos.notna()], backend=b))]),
        Section(
            f"Weight magnitudes (T={T})",
            "The largest |a_ij| per layer, for the pattern and each view (TDA paper Fig. 1b).",
            [figures(lambda b: plots.max_abs_chart(at_probe, backend=b))]),
        Section(
            f"Cross-view correlation (T={T})",
            "Pearson correlation of the two views' weights over causal entries, per layer (TDA paper App. B.3, "
            "Fig. 5); layers with a constant view are left out.",
            **optional("cross_view_correlation", lambda b: plots.correlation_chart(at_probe, backend=b))),
        Section(
            f"Tails of the attention logits (T={T})",
            "P(|s| &gt; k sigma) of the raw scores (hook_attn_scores) per layer next to a Gaussian (TDA paper "
            "App. B.1, Table 7): heavy tails mean a few keys win by a wide margin.",
            **optional("tail_probabilities", lambda b: plots.tail_chart(at_probe, backend=b))),
        Section(
            f"Retrieval probes (T={T})",
            "For every read, does the head put its largest weight on a position that holds the read's last-write "
            "bit? At layer 0 those are the write's bit token and the bits after the reads since it; at a later "
            "layer also every position where a head of an earlier layer put at least "
            f"{metrics['bit_carrier']['min_share']:g} of its weight on such a position, so the probe follows the "
            "bit wherever the model moved it. The retrieval head of a correct model scores near 1. The exact-write "
            "probe (second table) counts only the write's own two tokens, the ideal one-layer head of the flip-flop "
            "paper (Fig. 5c): a layer that reads the bit from where an earlier layer copied it scores low there "
            "and still retrieves.",
            [figures(lambda b: plots.chart(metric_rows(frame, "bit_carrier_argmax_rate"), "layer", series="head",
                                           kind="bar", title="Reads whose argmax holds the last write's bit",
                                           ylabel="fraction of reads", backend=b)),
             "<p>Bit-carrier probe, best head per layer:</p>" + table_html(pd.DataFrame(
                 metrics["bit_carrier"]["per_layer"])),
             "<p>Exact-write probe (the write's own tokens only), best head per layer:</p>" + table_html(pd.DataFrame(
                 metrics["last_write"]["per_layer"]))]),
    ]

"""``glitchlens figures``: the papers' mechanistic figures, reproduced on the pretrained models.

Every figure function takes ``load(name) -> model`` (:func:`models.load_pretrained` by
default; tests pass small random models), runs the models it needs with hooks on a few
fixed sequences, computes with :mod:`interp.metrics`, and returns :class:`PaperFigure`
records: a file stem, a caption naming the paper figure it reproduces, ``draw(backend)``,
which draws it with :mod:`interp.plots`, and ``data``, the numbers behind it; its title is
``TITLES[stem]``. :func:`make_figures` writes each record as ``STEM.png`` (matplotlib),
``STEM.html`` (plotly, a page with the title and the caption; the pages share one
``plotly.min.js`` in the directory and open offline) and ``STEM.csv``, then ``captions.json``
(``{stem: caption}``) and ``index.md`` (every figure with its title and caption).

Figures (``name``: file stems, the paper figure reproduced):

- ``tra_vs_fot``: ``01_tra_vs_fot_attention``, TRA paper Fig. 1-3 (App. A).
- ``tda_diagnostics``: ``02a_tda_sparsity``, ``02b_tda_max_weight``, ``02c_sink_ratio_vs_length``,
  TDA paper Fig. 1a-c.
- ``tda_inhibition``: ``03_tda_inhibition``, TDA paper Fig. 2.
- ``survivors``: ``04_survivors_vs_length``, TDA paper Fig. 4 (App. B.2).
- ``cross_view``: ``05_cross_view_correlation``, TDA paper Fig. 5 (App. B.3).
- ``logit_tails``: ``06_logit_tails``, TDA paper Table 7 (App. B.1).
- ``automaton``: ``07_automaton_attention``, flip-flop paper Fig. 5c-d and 16.
- ``glitch_lengths``: ``08_glitch_dependency_lengths``, flip-flop paper Fig. 12 (right).
- ``drift``: ``09a_drift_last_write``, ``09b_drift_automaton``, flip-flop paper Fig. 14.
- ``cope_gates``: ``10_cope_gates_positions``, CoPE paper Fig. 6.
- ``table1``: ``11_table1_accuracy``, TRA paper Table 1, from a ``glitchlens reproduce table1`` CSV.

Choices:

- Sequences are fixed. Flip-flop inputs come from the ``iid`` split's generator at every
  length (``load_split("iid", n, seq_len=T)``: FFL(0.8) from a fixed seed, as in
  ``glitchlens diagnose``), or the ``sparse`` split for the glitch histogram; constructed
  sequences draw their random bits from ``SEED``. Models run without gradients, so the same
  command gives the same numbers (and, with the div id fixed, the same HTML).
- Heatmaps of a 512-token sequence show ``WINDOW_TOKENS`` tokens: the window (among the first
  ``N_CANDIDATES`` iid sequences) that shows the most reads together with their last write
  (:func:`read_rich_window`).
- Metrics at one length use ``N_SEQUENCES`` sequences of T = 512, the training length of the
  Table 1 specimens (the App. A pair, tra-mech and fot-mech, was trained at T = 128); the
  sweeps over ``LENGTHS`` use ``N_SWEEP_SEQUENCES`` per length (a map at T = 2048 is 16 MB).
- Fig. 14's own probe is the automaton: ``09b`` runs automaton-1l on the paper's input (two
  early writes, then bottoms), here to T = 2048, 16x automaton-1l's training length of 128;
  ``09a`` carries it to the flip-flop language for rope-mech (trained at T = 512) and tra-mech
  (trained at T = 128), as one read pushed back by inserted ignores, and follows the write's bit
  wherever each model moved it (the bit-carrier probe): tra-mech's final layer reads the bit two
  tokens after the write, where its layer 0 copied it, and puts almost nothing on the write itself.
- Surviving keys: the non-zero entries of TDA's ``hook_pattern`` (the differential weights
  applied to V, as ``glitchlens diagnose`` counts them) and of TRA's ``hook_mask`` (M, the
  keys its threshold keeps; its softmax could underflow some of them to 0).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import models
from interp import plots
from interp.diagnose import DEFAULT_LENGTHS, evaluate_reads, heatmap_window
from interp.metrics import (
    MIN_CARRIER_SHARE, Maps, automaton_write_attention, bit_carrier_attention, cache_maps, cross_view_correlation,
    error_rate_by_dependency, inhibition, last_write_attention, max_abs_weight, mean_by_key_token, read_table,
    sink_ratio, sparsity, survivor_counts, survivor_growth, tail_probabilities,
)
from interp.tasks import (
    BOTTOM, CANONICAL_SEQ_LEN, IGNORE, READ, SIGMA_0, SIGMA_1, WRITE, ZERO, automaton_states, last_write_positions,
    load_split, read_mask, sample_automaton,
)
from interp.tasks.automaton import AUTOMATON_VOCAB

TRA, FOT, TDA, COPE, ROPE, AUTOMATON = "tra-mech", "fot-mech", "tda-mech", "cope-mech", "rope-mech", "automaton-1l"
SEED = 0
WINDOW_TOKENS = 80
N_CANDIDATES = 8
N_SEQUENCES = 4
N_SWEEP_SEQUENCES = 2
LENGTHS = DEFAULT_LENGTHS
DRIFT_LENGTHS = (64, 128, 256, 512, 768, 1024, 1536, 2048)
GLITCH_SEQUENCES = 2000
GLITCH_BIN = 16                  # ignores per histogram bin
AUTOMATON_P_BOTTOM = 0.5         # automaton-1l's training distribution
AUTOMATON_SECOND_WRITE = 32      # a multiple of the drift heatmap's stride, so its column is shown
VIEWS = {"view_1": "view 1 (excitatory)", "view_2": "view 2 (inhibitory)", "pattern": "differential"}

Loader = Callable[[str], torch.nn.Module]

# What each figure shows, in a line: the heading of its page and of its entry in index.md. Its
# caption, computed with the figure, says what was run and what came out.
TITLES = {
    "01_tra_vs_fot_attention": "TRA beside FoT: final-layer attention (TRA paper Fig. 1-3)",
    "02a_tda_sparsity": "Exact zeros per layer in TDA's views and differential map (TDA paper Fig. 1a)",
    "02b_tda_max_weight": "Largest attention weight per layer in TDA's views and differential map (TDA paper Fig. 1b)",
    "02c_sink_ratio_vs_length": "First-token sink against context length, TDA and RoPE (TDA paper Fig. 1c)",
    "03_tda_inhibition": "Inhibition in TDA: two views and their signed difference (TDA paper Fig. 2)",
    "04_survivors_vs_length": "Surviving keys per query against context length (TDA paper Fig. 4)",
    "05_cross_view_correlation": "Correlation of TDA's two views, trained and untrained (TDA paper Fig. 5)",
    "06_logit_tails": "Tails of TDA's attention logits against a Gaussian (TDA paper Table 7)",
    "07_automaton_attention": "Attention on the flip-flop automaton (flip-flop paper Fig. 5c-d, 16)",
    "08_glitch_dependency_lengths": "Dependency lengths of the wrong reads (flip-flop paper Fig. 12, right)",
    "09a_drift_last_write": "Attention drift past the training length, flip-flop language (flip-flop paper Fig. 14)",
    "09b_drift_automaton": "Attention drift past the training length, automaton (flip-flop paper Fig. 14b)",
    "10_cope_gates_positions": "CoPE's gates and contextual positions (CoPE paper Fig. 6)",
    "11_table1_accuracy": "Full-sequence accuracy per model beside the paper's (TRA paper Table 1)",
}


class MissingHookError(ValueError):
    """A figure needs an attention hook that the model does not have (or never calls)."""


@dataclass
class PaperFigure:
    """One figure: ``draw(backend)`` builds it with :mod:`interp.plots` (``"plotly"`` or
    ``"matplotlib"``); ``data`` holds the numbers it shows, written as ``STEM.csv``."""

    stem: str
    caption: str
    draw: Callable[[str], object]
    data: pd.DataFrame

    @property
    def title(self) -> str:
        return TITLES[self.stem]


# --- running models -------------------------------------------------------------------------

@torch.no_grad()
def run_maps(model, tokens: np.ndarray, hooks: Sequence[str], model_name: str
             ) -> tuple[torch.Tensor, dict[str, dict[int, torch.Tensor]]]:
    """Run ``model`` on ``tokens`` ``[batch, T]``, caching ``blocks.*.attn.hook_{name}`` for each
    name in ``hooks``. Returns the logits ``[batch, T, d_vocab]`` and ``{name: {layer: tensor}}``
    (maps are ``[batch, head, query_pos, key_pos]``), on the CPU."""
    wanted = {f"hook_{name}" for name in hooks}
    device = next(model.parameters()).device
    logits, cache = model.run_with_cache(
        torch.as_tensor(tokens.astype(np.int64), device=device),
        names_filter=lambda hook: ".attn." in hook and hook.rsplit(".", 1)[-1] in wanted)
    maps = {}
    for name in hooks:
        try:
            maps[name] = {layer: m.cpu() for layer, m in cache_maps(cache, name).items()}
        except KeyError:
            raise MissingHookError(f"{model_name} ({model.cfg.model}) has no blocks.*.attn.hook_{name}, "
                                   "which this figure needs") from None
    return logits.cpu(), maps


def read_rich_window(tokens: np.ndarray, size: int = WINDOW_TOKENS) -> tuple[int, tuple[int, int]]:
    """The sequence and ``(start, stop)`` of the ``size``-token window (starting at an
    instruction) that shows the most reads together with their last write, ties to the first:
    where a heatmap of ``tokens`` ``[n, T]`` shows the most retrievals."""
    T = tokens.shape[1]
    size = min(T, size - size % 2)
    reads, last_write = read_mask(tokens), last_write_positions(tokens)
    starts = range(0, T - size + 1, 2)
    shown = np.stack([(reads[:, s:s + size] & (last_write[:, s:s + size] >= s)).sum(1) for s in starts], 1)
    seq, start = np.unravel_index(shown.argmax(), shown.shape)
    return int(seq), (starts[start], starts[start] + size)


def read_probe(maps: Maps, tokens: np.ndarray, logits: torch.Tensor) -> pd.DataFrame:
    """:func:`~interp.metrics.last_write_attention` of every read, with the model's answer
    (``dependency_length``, ``true_bit``, ``pred_bit``, ``correct`` of :func:`read_table`)."""
    reads = read_table(tokens, logits.argmax(-1))
    answers = reads[["seq", "position", "dependency_length", "true_bit", "pred_bit", "correct"]]
    return last_write_attention(maps, tokens).merge(answers, on=["seq", "position"])


def final_layer(maps: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """``{last layer: its map}`` of ``{layer: map}``."""
    layer = max(maps)
    return {layer: maps[layer]}


def across_lengths(load: Loader, hooks: Mapping[str, str], lengths: Sequence[int], n: int,
                   measure: Callable[[dict[int, torch.Tensor], str], pd.DataFrame]) -> pd.DataFrame:
    """``measure(maps, model_name)`` of each model's ``hooks[model_name]`` maps on the first ``n``
    FFL(0.8) sequences at each length, concatenated (one length's maps alive at a time)."""
    frames = []
    for name, hook in hooks.items():
        model = load(name)
        for T in lengths:
            _, maps = run_maps(model, load_split("iid", n, seq_len=T), [hook], name)
            frames.append(measure(maps[hook], name))
    return pd.concat(frames, ignore_index=True)


def heatmap_sequence() -> tuple[np.ndarray, tuple[int, int], str]:
    """The iid sequence ``[1, T]`` and window the flip-flop heatmaps show (:func:`read_rich_window`
    over the first ``N_CANDIDATES``), and the words that name them in a caption."""
    tokens = load_split("iid", N_CANDIDATES)
    seq, window = read_rich_window(tokens)
    return tokens[seq:seq + 1], window, f"iid sequence {seq}, tokens {window[0]}-{window[1] - 1}"


# --- the figures ----------------------------------------------------------------------------

def figure_tra_vs_fot(load: Loader) -> list[PaperFigure]:
    """TRA paper Fig. 1-3: the final layer of tra-mech beside fot-mech on one iid window."""
    tokens, window, shown_text = heatmap_sequence()
    panels, probes = [], []
    for name in (TRA, FOT):
        logits, maps = run_maps(load(name), tokens, ["pattern"], name)
        final = final_layer(maps["pattern"])
        panels.append(plots.layer_head_panels(final))
        probes.append(read_probe(final, tokens, logits).assign(model=name))
    data = pd.concat(probes, ignore_index=True)
    data = data[(data.position >= window[0]) & (data.write_pos >= window[0]) & (data.position < window[1])]
    summary = "; ".join(f"{name} answers {int(rows.correct.sum())} of {len(rows)} right and puts a mean "
                        f"{rows.weight.mean():.2f} of its weight on the last write"
                        for name, rows in data.groupby("model", sort=False))
    caption = (f"TRA paper Fig. 1-3 (App. A): final-layer attention (hook_pattern) of {TRA} (left) and {FOT} (right) "
               f"on {shown_text}. Exact zeros are black (keys TRA's threshold removed), future keys "
               "grey; writes orange, reads blue, each read's last write outlined in cyan. On the reads shown, "
               f"{summary}.")
    return [PaperFigure("01_tra_vs_fot_attention", caption,
                        lambda b: plots.compare(*panels, tokens[0], names=("TRA", "FoT"), window=window, backend=b),
                        data)]


def figure_tda_diagnostics(load: Loader, lengths: Sequence[int] = LENGTHS) -> list[PaperFigure]:
    """TDA paper Fig. 1a-c: sparsity and max |weight| per layer of tda-mech's views and
    differential map, and gSinkRatio(1) against context length, tda-mech vs rope-mech."""
    _, maps = run_maps(load(TDA), load_split("iid", N_SEQUENCES), list(VIEWS), TDA)
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


def figure_tda_inhibition(load: Loader) -> list[PaperFigure]:
    """TDA paper Fig. 2: the signed differential map of tda-mech's most inhibitory head."""
    tokens, window, shown_text = heatmap_sequence()
    _, maps = run_maps(load(TDA), tokens, [*VIEWS, "lambda"], TDA)
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
        _, maps = run_maps(model, tokens, ["view_1", "view_2"], f"{TDA} ({label})")
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


def figure_logit_tails(load: Loader, ks: Sequence[float] = (2, 3, 4)) -> list[PaperFigure]:
    """TDA paper Table 7: P(|s| > k sigma) of tda-mech's raw logits per layer and view."""
    _, maps = run_maps(load(TDA), load_split("iid", N_SEQUENCES), ["scores_1", "scores_2"], TDA)
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


def figure_automaton(load: Loader, size: int = 40) -> list[PaperFigure]:
    """Flip-flop paper Fig. 5c-d / 16: automaton-1l's attention on the automaton sequence
    (of ``N_CANDIDATES``) where it predicts the most states wrong."""
    inputs, states = sample_automaton(N_CANDIDATES, CANONICAL_SEQ_LEN, AUTOMATON_P_BOTTOM, rng=SEED)
    logits, maps = run_maps(load(AUTOMATON), inputs, ["pattern"], AUTOMATON)
    predicted = logits.argmax(-1).numpy()
    wrong = predicted != states
    seq = int(wrong.sum(1).argmax())
    errors = np.flatnonzero(wrong[seq]).tolist()
    window = heatmap_window(CANONICAL_SEQ_LEN, errors, size)
    final = {layer: m[seq:seq + 1] for layer, m in final_layer(maps["pattern"]).items()}
    data = automaton_write_attention(final, inputs[seq:seq + 1])
    data = data.assign(input=np.array(AUTOMATON_VOCAB)[inputs[seq][data.position]], state=states[seq][data.position],
                       predicted=predicted[seq][data.position], correct=~wrong[seq][data.position])
    data = data[(data.position >= window[0]) & (data.position < window[1])].assign(seq=seq)
    caption = (f"Flip-flop paper Fig. 5c-d / 16: attention of {AUTOMATON} (1 layer, 1 head, RoPE) on the flip-flop "
               f"automaton, p(bottom) = {AUTOMATON_P_BOTTOM}, sequence {seq} of {N_CANDIDATES} (the one with the most "
               f"wrong state predictions: {len(errors)} of {CANONICAL_SEQ_LEN}), positions {window[0]}-"
               f"{window[1] - 1}. "
               "Axis labels: 0 and 1 are the writes sigma_0 (orange) and sigma_1 (blue), _ is bottom. Each row's "
               "most recent write, where the ideal head of Fig. 5c puts all its weight, is outlined in cyan, or red "
               "where the state predicted there is wrong (its labels red too). In this window that key has the row's "
               f"largest weight at {data.is_argmax.mean():.0%} of positions (mean weight {data.weight.mean():.2f}).")
    return [PaperFigure("07_automaton_attention", caption,
                        lambda b: plots.automaton_heatmap_grid(plots.layer_head_panels(final), inputs[seq],
                                                               wrong=errors, window=window, backend=b),
                        data)]


def dependency_histogram(reads: pd.DataFrame, width: int = GLITCH_BIN) -> pd.DataFrame:
    """From a :func:`read_table` frame: per bin of ``width`` ignores since the last ``w`` or ``r``
    (the flip-flop paper's dependency length, Fig. 12 right), the reads and wrong reads, the
    error rate, and each bin's share of all reads and of all wrong reads (NaN without any)."""
    edges = np.arange(0, int(reads.ignores_since.max()) + 1 + width, width)
    table = error_rate_by_dependency(reads, by="ignores_since", bins=edges)
    errors = table.n_errors.sum()
    return table.assign(share_of_reads=table.n_reads / table.n_reads.sum(),
                        share_of_errors=table.n_errors / errors if errors else np.nan)


def glitch_lengths_figure(reads: pd.DataFrame, model_name: str, split: str) -> PaperFigure:
    """The histogram of :func:`dependency_histogram` for all reads vs the wrong ones; a model
    with no wrong read gets the all-reads bars and a title that says so."""
    table = dependency_histogram(reads)
    bars = pd.concat([table.assign(reads="all reads", share=table.share_of_reads),
                      table.assign(reads="wrong reads", share=table.share_of_errors)]).dropna(subset=["share"])
    n_reads, n_errors = int(table.n_reads.sum()), int(table.n_errors.sum())
    title = (f"{model_name}, {split}: {n_errors} wrong of {n_reads} reads" if n_errors else
             f"{model_name}, {split}: no wrong read among {n_reads} reads")
    n_sequences = reads.seq.nunique()
    caption = (f"Flip-flop paper Fig. 12 (right): dependency lengths (ignore instructions since the last read or "
               f"write) of the wrong answers of {model_name} on the first {n_sequences} sequences of the {split} "
               f"split, beside those of all reads, in bins of {GLITCH_BIN}. "
               + (f"{n_errors} of {n_reads} reads are wrong. Wrong reads spread like all reads mean errors at every "
                  "length (the paper's 'errors are diverse'); a shift to the right means long dependencies fail more."
                  if n_errors else f"No read of the {n_reads} is wrong: there is no error to histogram."))
    return PaperFigure("08_glitch_dependency_lengths", caption,
                       lambda b: plots.chart(bars, "ignores_since", "share", series="reads", kind="bar", title=title,
                                             xlabel=f"ignores since the last w or r (bin start, width {GLITCH_BIN})",
                                             ylabel="share of reads", backend=b),
                       table)


def figure_glitch_lengths(load: Loader, n: int = GLITCH_SEQUENCES, split: str = "sparse") -> list[PaperFigure]:
    """Flip-flop paper Fig. 12 (right) for rope-mech on the first ``n`` sequences of ``split``."""
    _, reads = evaluate_reads(load(ROPE), [split], n, batch_size=64)
    return [glitch_lengths_figure(reads, ROPE, split)]


def drift_sequences(lengths: Sequence[int], seed: int = SEED) -> list[np.ndarray]:
    """One flip-flop sequence ``[1, T]`` per length: ``w b``, ignores ``i x``, then ``r b``. The
    ignored bits are the same at every length, so each sequence is a shorter one with more
    ignores inserted before its read; the read's only write is always T - 2 tokens back."""
    if any(T < 4 or T % 2 for T in lengths):
        raise ValueError(f"lengths must be even and >= 4, got {list(lengths)}")
    bits = np.random.default_rng(seed).integers(ZERO, ZERO + 2, size=max(lengths) // 2, dtype=np.uint8)
    sequences = []
    for T in lengths:
        tokens = np.full(T, IGNORE, dtype=np.uint8)
        tokens[1::2] = bits[:T // 2]
        tokens[0], tokens[-2], tokens[-1] = WRITE, READ, bits[0]
        sequences.append(tokens[None])
    return sequences


def last_write_drift(load: Loader, names: Sequence[str] = (ROPE, TRA),
                     lengths: Sequence[int] = DRIFT_LENGTHS) -> pd.DataFrame:
    """:func:`read_probe` of the single read of each :func:`drift_sequences` sequence, per model,
    layer and head, with the bit-carrier probe's ``carrier_weight``, ``carrier_is_argmax`` and
    ``n_carriers`` (:func:`~interp.metrics.bit_carrier_attention`) and columns ``model``,
    ``seq_len`` and ``model_layer``."""
    frames = []
    keys = ["layer", "seq", "head", "position", "write_pos"]
    for name in names:
        model = load(name)
        for tokens in drift_sequences(lengths):
            logits, maps = run_maps(model, tokens, ["pattern"], name)
            carriers = bit_carrier_attention(maps["pattern"], tokens).rename(columns={"is_argmax": "carrier_is_argmax"})
            frames.append(read_probe(maps["pattern"], tokens, logits).merge(carriers, on=keys)
                          .assign(model=name, seq_len=tokens.shape[1]))
    data = pd.concat(frames, ignore_index=True)
    data["model_layer"] = data.model + " L" + data.layer.astype(str) + " H" + data["head"].astype(str)
    return data


def automaton_drift_inputs(T: int) -> np.ndarray:
    """The flip-flop paper's Fig. 14b input ``[1, T]``: sigma_0, bottoms, sigma_1 at
    ``AUTOMATON_SECOND_WRITE``, then bottoms to the end."""
    if T <= AUTOMATON_SECOND_WRITE:
        raise ValueError(f"the automaton drift input needs T > {AUTOMATON_SECOND_WRITE}, got {T}")
    inputs = np.full((1, T), BOTTOM, dtype=np.uint8)
    inputs[0, 0], inputs[0, AUTOMATON_SECOND_WRITE] = SIGMA_0, SIGMA_1
    return inputs


def last_write_drift_figure(load: Loader, lengths: Sequence[int]) -> PaperFigure:
    """Fig. 14 on the flip-flop language: the weight a read puts on the positions holding its
    write's bit as inserted ignores push the write back, rope-mech vs tra-mech."""
    drift = last_write_drift(load, lengths=lengths)
    final = drift[drift.layer == drift.groupby("model").layer.transform("max")]
    # one row per length: the best head's weights (the heads share the read, so its correctness)
    per_length = final.groupby(["model", "seq_len"], sort=False).agg(
        carrier=("carrier_weight", "max"), weight=("weight", "max"), correct=("correct", "first"))
    ends = "; ".join(f"{name}: best head {rows.carrier.iloc[0]:.2f} at T = {min(lengths)}, {rows.carrier.iloc[-1]:.2f} "
                     f"at T = {max(lengths)} (on the write itself at most {rows.weight.max():.2f}), answer right at "
                     f"{int(rows.correct.sum())} of {len(rows)} lengths"
                     for name, rows in per_length.groupby(level="model", sort=False))
    caption = (
        f"Flip-flop paper Fig. 14, on the flip-flop language: one read whose only write is the first token, pushed "
        f"T - 2 tokens back by inserting ignore instructions (i0/i1, fixed bits) before it, T = {min(lengths)} to "
        f"{max(lengths)} (trained at T = {load(ROPE).cfg.n_ctx} and {load(TRA).cfg.n_ctx}). The weight each layer's "
        f"head puts, at the read, on the positions that hold the write's bit at that layer's input (the bit-carrier "
        f"probe: the bit token, and every position whose attention in an earlier layer put at least "
        f"{MIN_CARRIER_SHARE:g} of its weight on such a position), for {ROPE} (softmax + RoPE) and {TRA}; 1 (dashed) "
        f"is the ideal head. Final layer: {ends}. The weight on the write's own two tokens is in the CSV (weight).")
    return PaperFigure("09a_drift_last_write", caption,
                       lambda b: plots.chart(drift, "seq_len", "carrier_weight", series="model_layer",
                                             reference=(list(lengths), [1.0] * len(lengths), "ideal"),
                                             title="Weight on the write's bit at the read, wherever it is",
                                             xlabel="context length T (the write is T - 2 tokens back)",
                                             ylabel="weight on positions holding the bit", log_x=True, backend=b),
                       drift)


def automaton_drift_figure(load: Loader, T: int, stride: int) -> PaperFigure:
    """Fig. 14b itself: automaton-1l's attention on :func:`automaton_drift_inputs` of length
    ``T``, one position in ``stride`` shown."""
    inputs = automaton_drift_inputs(T)
    model = load(AUTOMATON)
    trained_length = model.cfg.n_ctx
    logits, maps = run_maps(model, inputs, ["pattern"], AUTOMATON)
    wrong = np.flatnonzero(logits.argmax(-1).numpy()[0] != automaton_states(inputs)[0]).tolist()
    pattern = final_layer(maps["pattern"])
    probe = automaton_write_attention(pattern, inputs).assign(correct=lambda f: ~f.position.isin(wrong))
    trained = probe.position < trained_length
    caption = (
        f"Flip-flop paper Fig. 14b: {AUTOMATON} (trained at T = {trained_length}) on sigma_0, "
        f"bottom x {AUTOMATON_SECOND_WRITE - 1}, sigma_1, bottom x {T - AUTOMATON_SECOND_WRITE - 1} (T = {T}), one "
        f"position in {stride} shown, as in the paper (rows and columns). Every row from position "
        f"{AUTOMATON_SECOND_WRITE} on should put its weight on column {AUTOMATON_SECOND_WRITE}, the most recent write "
        "(outlined: cyan, or red where the state predicted is wrong). "
        f"The mean weight on the most recent write is {probe.weight[trained].mean():.2f} at positions below "
        f"{trained_length}" + (f" and {probe.weight[~trained].mean():.2f} beyond" if T > trained_length else "")
        + f"; {len(wrong)} wrong state predictions" + (f", the first at position {wrong[0]} (red)." if wrong else "."))
    return PaperFigure("09b_drift_automaton", caption,
                       lambda b: plots.automaton_heatmap_grid(plots.layer_head_panels(pattern), inputs[0], wrong=wrong,
                                                              stride=stride, backend=b),
                       probe)


def figure_drift(load: Loader, lengths: Sequence[int] = DRIFT_LENGTHS, stride: int = 32) -> list[PaperFigure]:
    """Flip-flop paper Fig. 14: attention drift past the training length, on the flip-flop
    language (rope-mech vs tra-mech) and as in the paper (automaton-1l at the longest length)."""
    return [last_write_drift_figure(load, lengths), automaton_drift_figure(load, max(lengths), stride)]


def figure_cope_gates(load: Loader) -> list[PaperFigure]:
    """CoPE paper Fig. 6: cope-mech's gates and contextual positions on one iid window."""
    tokens, window, shown_text = heatmap_sequence()
    _, maps = run_maps(load(COPE), tokens, ["gates", "positions"], COPE)
    panels = {f"L{layer} H{head} {kind}": maps[kind][layer][0, head]
              for layer, gates in maps["gates"].items() for head in range(gates.shape[1])
              for kind in ("gates", "positions")}
    data = mean_by_key_token(maps["gates"], tokens, name="gates")
    counted = (data.sort_values("value", ascending=False, kind="stable").groupby(["layer", "head"]).head(1)
               .sort_values(["layer", "head"]))
    most = "; ".join(f"L{r.layer} H{r.head}: {r.key_token} ({r.value:.2f})" for r in counted.itertuples())
    caption = (f"CoPE paper Fig. 6: {COPE}'s gate values g_ij = sigmoid(q_i . k_j) (hook_gates; left) and contextual "
               "positions p_ij = sum of the gates from key j to query i (hook_positions; right), every layer, on "
               f"{shown_text}. A gate near 1 counts the key as one position. The key token with the "
               f"highest mean gate, per layer and head (all means in the CSV): {most}.")
    return [PaperFigure("10_cope_gates_positions", caption,
                        lambda b: plots.heatmap_grid(panels, tokens[0], window=window, ncols=2, shared_scale="columns",
                                                     backend=b), data)]


TABLE1_COLUMNS = ("model", "split", "seeds", "accuracy_mean", "accuracy_std", "paper_accuracy_mean",
                  "paper_accuracy_std")


def figure_table1(csv: str | Path) -> list[PaperFigure]:
    """TRA paper Table 1 as grouped bars, from the ``table1.csv`` of ``glitchlens reproduce table1``."""
    table = pd.read_csv(csv)
    missing = [c for c in TABLE1_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{csv} lacks the columns {missing} of a `glitchlens reproduce table1` table")
    fewest, most = table.seeds.min(), table.seeds.max()
    seeds = f"{fewest}" if fewest == most else f"{fewest}-{most}"
    caption = (f"TRA paper Table 1: full-sequence accuracy (%, every read of a sequence right) per model on the iid, "
               f"dense and sparse splits, ours (blue, mean +- std over {seeds} seed{'s' if most > 1 else ''}, from "
               f"{Path(csv).name}) beside "
               "the paper's (grey, mean +- std over 4 seeds; none for the models it does not report).")
    return [PaperFigure("11_table1_accuracy", caption, lambda b: plots.table1_chart(table, backend=b), table)]


FIGURES: dict[str, Callable[[Loader], list[PaperFigure]]] = {
    "tra_vs_fot": figure_tra_vs_fot,
    "tda_diagnostics": figure_tda_diagnostics,
    "tda_inhibition": figure_tda_inhibition,
    "survivors": figure_survivors,
    "cross_view": figure_cross_view,
    "logit_tails": figure_logit_tails,
    "automaton": figure_automaton,
    "glitch_lengths": figure_glitch_lengths,
    "drift": figure_drift,
    "cope_gates": figure_cope_gates,
}
FIGURE_NAMES = (*FIGURES, "table1")


# --- writing --------------------------------------------------------------------------------

def write_figure(figure: PaperFigure, out: Path) -> list[Path]:
    """``STEM.png``, ``STEM.html`` and ``STEM.csv`` of one figure in ``out``."""
    png = plots.save(figure.draw("matplotlib"), out / f"{figure.stem}.png")
    # One plotly.min.js beside the pages rather than 3.5 MB inlined in each; a fixed div id
    # (plotly's default is a random uuid) keeps the page identical from run to run.
    html = plots.save(figure.draw("plotly"), out / f"{figure.stem}.html", title=figure.title, caption=figure.caption,
                      shared_plotlyjs=True, div_id=figure.stem)
    csv = out / f"{figure.stem}.csv"
    figure.data.to_csv(csv, index=False)
    return [png, html, csv]


def write_index(out: Path, captions: Mapping[str, str]) -> Path:
    """``index.md``: every figure's title, PNG and caption, and links to its HTML and CSV."""
    lines = ["# GlitchLens figures", "",
             "Written by `glitchlens figures` (`interp/figures.py`) from the pretrained models "
             "(`models.load_pretrained`). Each figure is a PNG, an interactive page (`.html`, opens offline) and "
             "the numbers behind it (`.csv`).", ""]
    for stem, caption in captions.items():
        lines += [f"## {stem}: {TITLES[stem]}", "", f"![{stem}]({stem}.png)", "", caption, "",
                  f"[interactive]({stem}.html) · [data]({stem}.csv)", ""]
    path = out / "index.md"
    path.write_text("\n".join(lines))
    return path


def make_figures(out: str | Path, names: Sequence[str] | None = None, load: Loader | None = None,
                 table1_csv: str | Path | None = None, log: Callable[[str], None] = print) -> dict[str, list[Path]]:
    """Draw the figures ``names`` (default: all of :data:`FIGURE_NAMES`) into ``out`` and
    return ``{stem: [png, html, csv]}``. ``load(name)``: the model loader (default
    :func:`models.load_pretrained`; each model is loaded once). ``table1`` is skipped, with a
    message, when ``table1_csv`` is not given or does not exist. ``captions.json`` and
    ``index.md`` cover every figure in ``out``, so ``names`` can redraw a few of them."""
    names = list(FIGURE_NAMES) if names is None else list(names)
    unknown = sorted(set(names) - set(FIGURE_NAMES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; choose from {', '.join(FIGURE_NAMES)}")
    load = functools.cache(load or models.load_pretrained)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    captions_file = out / "captions.json"
    captions = json.loads(captions_file.read_text()) if captions_file.exists() else {}
    written = {}
    for name in names:
        start = time.perf_counter()
        if name == "table1":
            if table1_csv is None or not Path(table1_csv).exists():
                log("table1: skipped, " + ("no --table1 CSV given" if table1_csv is None else f"{table1_csv} not found")
                    + " (write one with `glitchlens reproduce table1`)")
                continue
            figures = figure_table1(table1_csv)
        else:
            figures = FIGURES[name](load)
        for figure in figures:
            written[figure.stem] = write_figure(figure, out)
            captions[figure.stem] = figure.caption
        log(f"{name}: {', '.join(f.stem for f in figures)} ({time.perf_counter() - start:.1f} s)")
    captions = {stem: captions[stem] for stem in sorted(captions) if (out / f"{stem}.png").exists()}
    captions_file.write_text(json.dumps(captions, indent=2) + "\n")
    write_index(out, captions)
    return written

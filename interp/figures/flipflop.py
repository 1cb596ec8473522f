"""The flip-flop paper's figures (Fig. 5c-d / 16, 12, 14): automaton-1l's attention, the dependency
lengths of rope-mech's glitches, and attention drift past the training length."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from interp import plots
from interp.evaluate import evaluate_reads
from interp.figures.common import (
    AUTOMATON, N_CANDIDATES, ROPE, SEED, TRA, Loader, PaperFigure, final_layer, read_probe, register,
)
from interp.metrics import (
    MIN_CARRIER_SHARE, automaton_write_attention, bit_carrier_attention, capture_maps, error_rate_by_dependency,
    heatmap_window,
)
from interp.tasks import (
    BOTTOM, CANONICAL_SEQ_LEN, IGNORE, READ, SIGMA_0, SIGMA_1, WRITE, ZERO, automaton_states, sample_automaton,
)
from interp.tasks.automaton import AUTOMATON_VOCAB

DRIFT_LENGTHS = (64, 128, 256, 512, 768, 1024, 1536, 2048)
GLITCH_SEQUENCES = 2000
GLITCH_BIN = 16                  # ignores per histogram bin
AUTOMATON_P_BOTTOM = 0.5         # automaton-1l's training distribution
AUTOMATON_SECOND_WRITE = 32      # a multiple of the drift heatmap's stride, so its column is shown


@register("automaton", {
    "07_automaton_attention": "Attention on the flip-flop automaton (flip-flop paper Fig. 5c-d, 16)",
})
def figure_automaton(load: Loader, size: int = 40) -> list[PaperFigure]:
    """Flip-flop paper Fig. 5c-d / 16: automaton-1l's attention on the automaton sequence
    (of ``N_CANDIDATES``) where it predicts the most states wrong."""
    inputs, states = sample_automaton(N_CANDIDATES, CANONICAL_SEQ_LEN, AUTOMATON_P_BOTTOM, rng=SEED)
    logits, maps = capture_maps(load(AUTOMATON), inputs, ["pattern"])
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


@register("glitch_lengths", {
    "08_glitch_dependency_lengths": "Dependency lengths of the wrong reads (flip-flop paper Fig. 12, right)",
})
def figure_glitch_lengths(load: Loader, n: int = GLITCH_SEQUENCES, split: str = "sparse") -> list[PaperFigure]:
    """Flip-flop paper Fig. 12 (right) for rope-mech on the first ``n`` sequences of ``split``."""
    _, reads = evaluate_reads(load(ROPE), [split], n)
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
            logits, maps = capture_maps(model, tokens, ["pattern"])
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
    logits, maps = capture_maps(model, inputs, ["pattern"])
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


@register("drift", {
    "09a_drift_last_write": "Attention drift past the training length, flip-flop language (flip-flop paper Fig. 14)",
    "09b_drift_automaton": "Attention drift past the training length, automaton (flip-flop paper Fig. 14b)",
})
def figure_drift(load: Loader, lengths: Sequence[int] = DRIFT_LENGTHS, stride: int = 32) -> list[PaperFigure]:
    """Flip-flop paper Fig. 14: attention drift past the training length, on the flip-flop
    language (rope-mech vs tra-mech) and as in the paper (automaton-1l at the longest length)."""
    return [last_write_drift_figure(load, lengths), automaton_drift_figure(load, max(lengths), stride)]

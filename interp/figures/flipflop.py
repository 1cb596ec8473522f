"""The flip-flop paper's figures (Fig. 5c-d / 16, 12, 14): automaton-1l's attention, the dependency
lengths of rope-mech's glitches, and attention drift past the training length."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from interp import plots
from interp.evaluate import evaluate_reads
from interp.figures.common import (
    AUTOMATON, AUTOMATON_SHARP, N_CANDIDATES, N_SAMPLES, ROPE, SEED, TRA, Loader, PaperFigure, caption, final_layer,
    length_ends, mean_words, one, paper_figure, percent, progress_bar, read_probe, register,
)
from interp.metrics import (
    MIN_CARRIER_SHARE, automaton_write_attention, bit_carrier_attention, capture_maps, error_rate_by_dependency,
    heatmap_window, mean_interval, wilson_interval,
)
from interp.studies.registry import SHARP
from interp.tasks import (
    BOTTOM, CANONICAL_SEQ_LEN, IGNORE, READ, SIGMA_0, SIGMA_1, WRITE, ZERO, automaton_states, sample_automaton,
)
from interp.tasks.automaton import AUTOMATON_VOCAB

DRIFT_LENGTHS = (64, 128, 256, 512, 1024, 2048)
GLITCH_SEQUENCES = 2000
GLITCH_BIN = 16                  # ignores per histogram bin
LONG_IGNORES = 64                # the dependencies counted as long in 08's trend
AUTOMATON_P_BOTTOM = 0.5         # automaton-1l's training distribution
AUTOMATON_SECOND_WRITE = 32      # a multiple of the drift heatmap's stride, so its column is shown


AUTOMATON_PAIR = (AUTOMATON, AUTOMATON_SHARP)   # unsharpened and sharpened, side by side (Fig. 16a-b)


def model_words(rows: pd.DataFrame) -> str:
    """One automaton model's rows of 07 in words: its wrong predictions in the sequence, and how
    its head weighs each position's most recent write in the window."""
    weight = rows.weight.dropna()
    elsewhere = rows[~rows.is_argmax.astype(bool) & (rows.write_pos >= 0)]
    on_writes = elsewhere[elsewhere.position == elsewhere.write_pos]   # whose state is their own symbol
    targets = ", ".join(f"{n} on a {'bottom' if symbol == '_' else f'write of {symbol}'}"
                        for symbol, n in on_writes.argmax_input.value_counts().sort_index().items())
    return (f"{one(rows, 'model')} predicts {one(rows, 'n_wrong')} of the {one(rows, 'seq_len')} states wrong; in "
            f"this window the most recent write has the row's largest weight at {rows.is_argmax.sum()} of the "
            f"{len(rows)} positions ({rows.is_argmax.mean():.0%}), >= {SHARP} of it at {(weight >= SHARP).sum()} of "
            f"{len(weight)} ({(weight >= SHARP).mean():.0%}; mean weight {weight.mean():.2f})"
            + (f"; of the {len(elsewhere)} positions where the largest weight is elsewhere, {len(on_writes)} are "
               f"writes, whose state is their own symbol ({targets})" if len(elsewhere) else ""))


@caption("07_automaton_attention")
def caption_automaton(data: pd.DataFrame) -> str:
    per_model = [model_words(rows) for _, rows in data.groupby("model", sort=False)]
    return (f"Flip-flop paper Fig. 16a-b: attention of one-layer one-head RoPE models unregularised and trained "
            f"with the entropy sharpening regulariser, on the flip-flop automaton, p(bottom) = "
            f"{one(data, 'p_bottom')}, sequence {one(data, 'seq')} of {one(data, 'n_candidates')} "
            + ("(the one where the two models together predict the most states wrong)" if data.n_wrong.any() else
               f"(neither model predicts a state wrong in any of the {one(data, 'n_candidates')}; the first is "
               "shown)")
            + f", positions {data.position.min()}-{data.position.max()}. "
            "Axis labels: 0 and 1 are the writes sigma_0 (orange) and sigma_1 (blue), _ is bottom. Each row's "
            "most recent write, where the ideal head of Fig. 5c puts all its weight, is outlined in cyan, or red "
            "where that model's predicted state is wrong (its labels red too). " + "; ".join(per_model) + ".")


@register("automaton", {
    "07_automaton_attention": "Attention on the flip-flop automaton, unsharpened and sharpened (flip-flop paper "
                              "Fig. 5c-d, 16)",
})
def figure_automaton(load: Loader, size: int = 40) -> list[PaperFigure]:
    """Flip-flop paper Fig. 16a-b: automaton-1l's and automaton-1l-sharp's attention on the one
    automaton sequence (of ``N_CANDIDATES``) where the two predict the most states wrong."""
    inputs, states = sample_automaton(N_CANDIDATES, CANONICAL_SEQ_LEN, AUTOMATON_P_BOTTOM, rng=SEED)
    runs = {}
    for name in AUTOMATON_PAIR:
        logits, maps = capture_maps(load(name), inputs, ["pattern"])
        runs[name] = (logits.argmax(-1).numpy(), final_layer(maps["pattern"]))
    wrong = {name: predicted != states for name, (predicted, _) in runs.items()}
    seq = int(sum(wrong.values()).sum(1).argmax())
    errors = {name: np.flatnonzero(w[seq]).tolist() for name, w in wrong.items()}
    window = heatmap_window(CANONICAL_SEQ_LEN, sorted({p for e in errors.values() for p in e}), size)
    frames, panels, wrong_of = [], {}, {}
    for name, (predicted, maps) in runs.items():
        final = {layer: m[seq:seq + 1] for layer, m in maps.items()}
        shown = plots.layer_head_panels(final, prefix=f"{name} ")
        panels |= shown
        wrong_of |= dict.fromkeys(shown, errors[name])
        data = automaton_write_attention(final, inputs[seq:seq + 1])
        argmax_pos = next(iter(final.values()))[0].argmax(-1).numpy()          # [head, query_pos]
        symbols = np.array(AUTOMATON_VOCAB)[inputs[seq]]
        data = data.assign(input=symbols[data.position], state=states[seq][data.position],
                           predicted=predicted[seq][data.position], correct=~wrong[name][seq][data.position],
                           write_input=symbols[data.write_pos], argmax_pos=argmax_pos[data["head"], data.position],
                           argmax_input=lambda f: symbols[f.argmax_pos])
        frames.append(data[(data.position >= window[0]) & (data.position < window[1])].assign(
            model=name, n_wrong=len(errors[name])))
    data = pd.concat(frames, ignore_index=True).assign(seq=seq, p_bottom=AUTOMATON_P_BOTTOM,
                                                       n_candidates=N_CANDIDATES, seq_len=CANONICAL_SEQ_LEN)
    return [paper_figure("07_automaton_attention", data,
                         lambda b: plots.automaton_heatmap_grid(panels, inputs[seq], wrong=wrong_of, window=window,
                                                                backend=b))]


def dependency_histogram(reads: pd.DataFrame, width: int = GLITCH_BIN) -> pd.DataFrame:
    """From a :func:`read_table` frame: per bin of ``width`` ignores since the last ``w`` or ``r``
    (the flip-flop paper's dependency length, Fig. 12 right), the reads and wrong reads, the
    error rate with its 95% Wilson interval (``error_rate_low``, ``error_rate_high``), and each
    bin's share of all reads and of all wrong reads (NaN without any)."""
    edges = np.arange(0, int(reads.ignores_since.max()) + 1 + width, width)
    table = error_rate_by_dependency(reads, by="ignores_since", bins=edges)
    errors = table.n_errors.sum()
    low, high = wilson_interval(table.n_errors, table.n_reads)
    return table.assign(error_rate_low=low, error_rate_high=high, share_of_reads=table.n_reads / table.n_reads.sum(),
                        share_of_errors=table.n_errors / errors if errors else np.nan)


def dependency_trend(table: pd.DataFrame, long: int = LONG_IGNORES) -> dict[str, tuple[int, int]]:
    """``{"short": (errors, reads), "long": (errors, reads)}`` of a :func:`dependency_histogram`:
    the first bin (the shortest dependencies) against every bin from ``long`` ignores on."""
    first, far = table[table.ignores_since == table.ignores_since.min()], table[table.ignores_since >= long]
    return {"short": (int(first.n_errors.sum()), int(first.n_reads.sum())),
            "long": (int(far.n_errors.sum()), int(far.n_reads.sum()))}


def trend_words(table: pd.DataFrame, width: int) -> str:
    """The dependency-length trend of a :func:`dependency_histogram` in words: the error rates of
    the shortest and the longest dependencies with their intervals, and which is higher where the
    intervals do not overlap."""
    trend = dependency_trend(table)
    (short_errors, short_reads), (long_errors, long_reads) = trend["short"], trend["long"]
    if not long_reads:
        return f"No read has {LONG_IGNORES} or more ignores since the last w or r: there is no long-dependency rate."
    (short_low, long_low), (short_high, long_high) = wilson_interval([short_errors, long_errors],
                                                                     [short_reads, long_reads])
    short_rate, long_rate = short_errors / short_reads, long_errors / long_reads
    verdict = ("long dependencies fail more often" if long_low > short_high else
               "long dependencies fail less often" if long_high < short_low else
               "the two rates are not distinguishable at this n")
    return (f"Error rate at 0-{width - 1} ignores {percent(short_rate, short_low, short_high)} of {short_reads} reads; "
            f"at {LONG_IGNORES} or more {percent(long_rate, long_low, long_high)} of {long_reads}: {verdict}.")


def spread_words(table: pd.DataFrame, width: int) -> str:
    """How the wrong reads of a :func:`dependency_histogram` spread over its bins, in words: the
    bins that hold one, the largest bin's share, and the share at ``LONG_IGNORES`` or more."""
    wrong = table[table.n_errors > 0]
    top = table.loc[table.share_of_errors.idxmax()]
    long = table[table.ignores_since >= LONG_IGNORES].n_errors.sum() / table.n_errors.sum()
    return (f"The wrong reads fall in {len(wrong)} of the {len(table)} bins that hold a read, at most "
            f"{top.share_of_errors:.1%} in one ({top.ignores_since}-{top.ignores_since + width - 1} ignores; all reads "
            f"put {top.share_of_reads:.1%} there), {long:.1%} at {LONG_IGNORES} or more ignores.")


@caption("08_glitch_dependency_lengths")
def caption_glitch_lengths(data: pd.DataFrame) -> str:
    width = one(data, "bin_width")
    n_reads, n_errors = int(data.n_reads.sum()), int(data.n_errors.sum())
    return (f"Flip-flop paper Fig. 12 (right): how the wrong answers of {one(data, 'model')} on the first "
            f"{one(data, 'n_sequences')} sequences of the {one(data, 'split')} split spread over dependency lengths "
            f"(ignore instructions since the last read or write), in bins of {width}. Top: each bin's share of all "
            "wrong reads (the paper's histogram), beside its share of all reads; bottom: each bin's error rate "
            "(wrong reads / reads in the bin) with its 95% Wilson interval. "
            + (f"{n_errors} of {n_reads} reads are wrong. {spread_words(data, width)} {trend_words(data, width)} "
               "(95% Wilson intervals, the reads taken as independent.)"
               if n_errors else f"No read of the {n_reads} is wrong: there is no error to histogram."))


def glitch_lengths_figure(reads: pd.DataFrame, model_name: str, split: str) -> PaperFigure:
    """Fig. 12 (right) from a :func:`read_table` frame: the share of the wrong reads per bin of
    :func:`dependency_histogram` beside that of all reads, above the error rate per bin; a model
    with no wrong read gets the all-reads bars and a title that says so."""
    table = dependency_histogram(reads).assign(model=model_name, split=split, n_sequences=reads.seq.nunique(),
                                               bin_width=GLITCH_BIN)
    bars = pd.concat([table.assign(reads="wrong reads", share=table.share_of_errors),
                      table.assign(reads="all reads", share=table.share_of_reads)]).dropna(subset=["share"])
    n_reads, n_errors = int(table.n_reads.sum()), int(table.n_errors.sum())
    title = (f"{model_name}, {split}: {n_errors} wrong of {n_reads} reads" if n_errors else
             f"{model_name}, {split}: no wrong read among {n_reads} reads")
    xlabel = f"ignores since the last w or r (bin start, width {GLITCH_BIN})"

    def draw(backend):
        shares = plots.chart_panel(bars, "ignores_since", "share", series="reads", kind="bar", xlabel=xlabel,
                                   ylabel="share of the reads", title="share of the wrong reads (and of all reads) per bin")
        rates = plots.chart_panel(table.assign(reads="error rate"), "ignores_since", "error_rate", series="reads",
                                  kind="bar", interval=("error_rate_low", "error_rate_high"), xlabel=xlabel,
                                  ylabel="wrong / reads in bin", title="error rate per bin (95% Wilson interval)")
        return plots.stacked_chart([shares, rates], title, backend=backend)

    return paper_figure("08_glitch_dependency_lengths", table, draw)


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
    ignores inserted before its read; the read's only write is always T - 2 tokens back.
    ``seed`` draws the bits (the written one included)."""
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


def last_write_drift(load: Loader, names: Sequence[str] = (ROPE, TRA), lengths: Sequence[int] = DRIFT_LENGTHS,
                     n: int = N_SAMPLES, batch_size: int = 4) -> pd.DataFrame:
    """:func:`read_probe` of the single read of :func:`drift_sequences` with seeds ``SEED`` to
    ``SEED + n - 1`` (``seq``), per model, length, layer and head, with the bit-carrier probe's
    ``carrier_weight``, ``carrier_is_argmax`` and ``n_carriers``
    (:func:`~interp.metrics.bit_carrier_attention`) and columns ``model`` and ``seq_len``."""
    frames = []
    keys = ["layer", "seq", "head", "position", "write_pos"]
    sequences = [drift_sequences(lengths, SEED + s) for s in range(n)]
    for name in names:
        model = load(name)
        for i, T in enumerate(progress_bar(lengths, f"{name}: drift over lengths")):
            tokens = np.concatenate([sequences[s][i] for s in range(n)])
            for start in range(0, n, batch_size):
                batch = tokens[start:start + batch_size]
                logits, maps = capture_maps(model, batch, ["pattern"])
                carriers = bit_carrier_attention(maps["pattern"], batch).rename(columns={"is_argmax": "carrier_is_argmax"})
                frames.append(read_probe(maps["pattern"], batch, logits).merge(carriers, on=keys)
                              .assign(model=name, seq_len=T, seq=lambda f: f.seq + start))
    return pd.concat(frames, ignore_index=True)


def drift_summary(drift: pd.DataFrame) -> pd.DataFrame:
    """Per model and length, from :func:`last_write_drift`, at the final layer: the mean over
    sequences of the best head's ``carrier_weight`` (the head that puts the most weight on the
    bit; 95% t interval ``mean_low``, ``mean_high``; ``n`` sequences), of its weight on the write's
    own two tokens (``write_weight``), and the share of reads answered right (``right``, of
    ``n``, 95% Wilson interval ``right_low``, ``right_high``)."""
    final = drift[drift.layer == drift.groupby("model").layer.transform("max")]
    best = final.groupby(["model", "seq_len", "seq"], sort=False).agg(
        carrier=("carrier_weight", "max"), weight=("weight", "max"), correct=("correct", "first")).reset_index()
    table = mean_interval(best, ["model", "seq_len"], "carrier")
    extra = best.groupby(["model", "seq_len"]).agg(write_weight=("weight", "mean"), n_right=("correct", "sum"))
    table = table.merge(extra.reset_index(), on=["model", "seq_len"])
    table["right"] = table.n_right / table.n
    table["right_low"], table["right_high"] = wilson_interval(table.n_right, table.n)
    return table


def lost_words(rows: pd.DataFrame) -> str:
    """The lengths of :func:`drift_summary` rows where the mean weight on the bit is below 1/2."""
    lost = rows.seq_len[rows["mean"] < 0.5].tolist()
    return f"below 1/2 at T = {', '.join(map(str, lost))}" if lost else "never below 1/2"


@caption("09a_drift_last_write")
def caption_drift(data: pd.DataFrame) -> str:
    ends = [f"{name} (trained at T = {one(rows, 'trained_seq_len')}): {mean_words(first)} at T = {first.seq_len}, "
            f"{mean_words(last)} at T = {last.seq_len}, " + lost_words(rows) + " (on the write's own tokens at most "
            f"{rows.write_weight.max():.2f} on average); reads right "
            f"{percent(first.right, first.right_low, first.right_high)} at T = {first.seq_len}, "
            f"{percent(last.right, last.right_low, last.right_high)} at T = {last.seq_len}"
            for name, rows, first, last in length_ends(data)]
    return (
        f"Flip-flop paper Fig. 14, on the flip-flop language: one read whose only write is the first token, pushed "
        f"T - 2 tokens back by inserting ignore instructions (i0/i1) before it, T = {data.seq_len.min()} to "
        f"{data.seq_len.max()}, {int(data.n.min())} sequences per length (their bits drawn from seeds "
        f"{SEED}-{SEED + int(data.n.max()) - 1}; one trained seed of each model is shipped). At the read, the final "
        "layer's best head's weight on the positions that hold the write's bit at that layer's input (the "
        "bit-carrier probe: the bit token, and every position whose attention in an earlier layer put at least "
        f"{MIN_CARRIER_SHARE:g} of its weight on such a position); mean over the sequences, band the 95% t interval "
        f"of the mean; 1 (dashed) is the ideal head. {'; '.join(ends)}. Per length, the CSV has the weight on the "
        "write's own two tokens (write_weight) and the reads right with their 95% Wilson interval.")


def last_write_drift_figure(load: Loader, lengths: Sequence[int], n: int) -> PaperFigure:
    """Fig. 14 on the flip-flop language: the weight a read puts on the positions holding its
    write's bit as inserted ignores push the write back, rope-mech vs tra-mech, over ``n``
    sequences per length."""
    data = drift_summary(last_write_drift(load, lengths=lengths, n=n))
    return drift_chart(data.assign(trained_seq_len=data.model.map(lambda name: load(name).cfg.n_ctx)))


def drift_chart(data: pd.DataFrame) -> PaperFigure:
    """09a from its data (:func:`drift_summary` with ``trained_seq_len``), its CSV as written."""
    lengths = sorted(data.seq_len.unique())
    return paper_figure("09a_drift_last_write", data,
                        lambda b: plots.chart(data, "seq_len", "mean", series="model",
                                              interval=("mean_low", "mean_high"),
                                              reference=(lengths, [1.0] * len(lengths), "ideal"),
                                              title="Final layer's weight on the write's bit at the read",
                                              xlabel="context length T (the write is T - 2 tokens back)",
                                              ylabel="best head's weight on the bit (mean, 95% CI)", log_x=True,
                                              backend=b))


def automaton_drift_inputs(T: int) -> np.ndarray:
    """The flip-flop paper's Fig. 14b input ``[1, T]``: sigma_0, bottoms, sigma_1 at
    ``AUTOMATON_SECOND_WRITE``, then bottoms to the end."""
    if T <= AUTOMATON_SECOND_WRITE:
        raise ValueError(f"the automaton drift input needs T > {AUTOMATON_SECOND_WRITE}, got {T}")
    inputs = np.full((1, T), BOTTOM, dtype=np.uint8)
    inputs[0, 0], inputs[0, AUTOMATON_SECOND_WRITE] = SIGMA_0, SIGMA_1
    return inputs


def drift_words(rows: pd.DataFrame) -> str:
    """One automaton model's rows of 09b in words: its mean weight on the most recent write
    within and beyond its training length, and its wrong predictions."""
    trained_length, T = one(rows, "trained_seq_len"), one(rows, "seq_len")
    trained = rows.position < trained_length
    wrong = rows.position[~rows.correct.astype(bool)].tolist()
    return (f"{one(rows, 'model')}: mean weight on it {rows.weight[trained].mean():.2f} at positions below "
            f"{trained_length}" + (f" and {rows.weight[~trained].mean():.2f} beyond" if T > trained_length else "")
            + f", {len(wrong)} wrong state predictions" + (f", the first at position {wrong[0]} (red)" if wrong else ""))


@caption("09b_drift_automaton")
def caption_automaton_drift(data: pd.DataFrame) -> str:
    T, trained_length, second, stride = (one(data, c) for c in ("seq_len", "trained_seq_len", "second_write",
                                                                "stride"))
    return (
        f"Flip-flop paper Fig. 14b: one-layer one-head RoPE models (trained at T = {trained_length}), unregularised "
        f"and sharpened, on sigma_0, bottom x {second - 1}, sigma_1, bottom x {T - second - 1} (T = {T}), one "
        f"position in {stride} shown, as in the paper (rows and columns). Every row from position "
        f"{second} on should put its weight on column {second}, the most recent write "
        "(outlined: cyan, or red where that model's predicted state is wrong). "
        + "; ".join(drift_words(rows) for _, rows in data.groupby("model", sort=False)) + ".")


def automaton_drift_figure(load: Loader, T: int, stride: int) -> PaperFigure:
    """Fig. 14b itself: automaton-1l's and automaton-1l-sharp's attention on
    :func:`automaton_drift_inputs` of length ``T``, one position in ``stride`` shown."""
    inputs = automaton_drift_inputs(T)
    frames, panels, wrong_of = [], {}, {}
    for name in AUTOMATON_PAIR:
        model = load(name)
        logits, maps = capture_maps(model, inputs, ["pattern"])
        wrong = np.flatnonzero(logits.argmax(-1).numpy()[0] != automaton_states(inputs)[0]).tolist()
        pattern = final_layer(maps["pattern"])
        shown = plots.layer_head_panels(pattern, prefix=f"{name} ")
        panels |= shown
        wrong_of |= dict.fromkeys(shown, wrong)
        frames.append(automaton_write_attention(pattern, inputs).assign(
            correct=lambda f, wrong=wrong: ~f.position.isin(wrong), model=name, trained_seq_len=model.cfg.n_ctx))
    probe = pd.concat(frames, ignore_index=True).assign(seq_len=T, second_write=AUTOMATON_SECOND_WRITE,
                                                         stride=stride)
    return paper_figure("09b_drift_automaton", probe,
                        lambda b: plots.automaton_heatmap_grid(panels, inputs[0], wrong=wrong_of, stride=stride,
                                                               backend=b))


@register("drift", {
    "09a_drift_last_write": "Attention drift past the training length, flip-flop language (flip-flop paper Fig. 14)",
    "09b_drift_automaton": "Attention drift past the training length, automaton (flip-flop paper Fig. 14b)",
})
def figure_drift(load: Loader, lengths: Sequence[int] = DRIFT_LENGTHS, stride: int = 32,
                 n: int = N_SAMPLES) -> list[PaperFigure]:
    """Flip-flop paper Fig. 14: attention drift past the training length, on the flip-flop
    language (rope-mech vs tra-mech, ``n`` sequences per length) and as in the paper
    (automaton-1l at the longest length)."""
    return [last_write_drift_figure(load, lengths, n), automaton_drift_figure(load, max(lengths), stride)]

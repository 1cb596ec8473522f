"""The numbers of a diagnosis: ``metrics.json``, ``metrics.csv`` and the table the CLI prints.

``metrics.json`` fields, all always present; ``"<T>"`` is a context length, ``map`` is
``pattern`` (the weights applied to V) or a view (``view_1``, ``view_2``), and a
``{"overall": x, "per_layer": [..]}`` pair is the mean over layers and heads and the mean
over heads per layer (the max for ``max_abs_weight``). NaN is written as null.

- ``checkpoint``: the checkpoint path; ``model``: the model name; ``config``: its ModelConfig.
- ``threshold_beta``: the threshold scale beta of each layer of a trela or TDA model (tau_i =
  beta sqrt(2 log((i + 1) / kappa) / d_head)), layer 0 first; null for other mechanisms.
- ``settings``: the arguments of this run (splits, n, lengths, n_cache_sequences, ...).
- ``evaluation``: ``{split: {split, sequences, reads, read_errors, error_rate,
  error_rate_upper95, sequence_accuracy}}``.
- ``glitches``: ``{"total": int, "by_split": {split: int}}``, the rows of glitches.csv.
- ``error_by_dependency``: ``[{split, dependency_length, n_reads, n_errors, error_rate}]``.
- ``linear_probes``: ``{"label", "split", "sequences", "per_layer": [{hook, layer, position, label,
  train_rows, test_rows, classes, accuracy, low, high, baseline}]}``: a linear probe of the current
  bit (flip-flop's probe label) on the residual stream before each block and after the last, fitted
  on four of every five iid sequences and scored on the fifth (held-out accuracy, its 95% Wilson
  interval, and the accuracy of always answering the commonest bit: :mod:`interp.metrics.store`).
- ``lengths``: ``{"run": [T], "probe": T, "skipped": {"<T>": reason}}``.
- ``maps``: the maps measured, ``["pattern", "view_1", ...]``.
- ``sparsity``, ``survivors``, ``max_abs_weight``: ``{map: {"<T>": {"overall", "per_layer"}}}``
  (views at the probe length only).
- ``effective_entropy``, ``dispersion_ratio``, ``zero_row_fraction``: the same, for ``pattern``.
- ``gsink_ratio``, ``sink_eps``: ``{"<T>": {"<key_pos>": value}}``, gSinkRatio averaged over
  layers and heads, and the fraction of heads whose mean mass on the key exceeds
  ``settings.sink_eps`` (key positions 0-indexed: the paper's gSinkRatio(1) is key 0).
- ``survivor_scaling``: ``{"<T>": {"survivors", "growth", "linear_reference"}}``: the
  pattern's survivors per query (mean over layers), and their growth factor and a linear O(n)
  growth relative to the shortest run length (a factor that depends on the lengths run).
- ``survivor_exponent``: ``{"overall", "per_layer"}``: the slope of log survivors against log T
  over the run lengths (:func:`interp.metrics.growth_exponent`; 1 linear, 0 flat), per layer and
  its mean: the number figure 04 of ``glitchlens figures`` reports, whatever the lengths.
- ``cross_view_correlation``: ``{"<T>": {"overall", "per_layer", "constant_views"}}``.
- ``tail_probabilities``: ``{"<T>": {"<k>": {"overall", "per_layer", "gaussian"}}}``.
- ``bit_carrier``: ``{"length", "min_share", "per_layer": [{layer, head, argmax_rate, weight}]}``,
  the head of each layer that most often puts its largest weight on a position holding the read's
  last-write bit at that layer's input (:func:`interp.metrics.bit_carrier_attention`: the write's
  bit, the bits of the reads since, and the positions earlier layers copied it to), and its mean
  weight there. The retrieval head of a correct model scores near 1 however it routes the bit.
- ``last_write``: the same for the write's own two tokens only (the exact-write probe,
  :func:`interp.metrics.last_write_attention`); low for a layer that reads the bit from where an
  earlier layer moved it, so a low value alone does not mean the model failed to retrieve.
- ``heatmap``: ``{"length", "sequence", "window", "wrong_reads"}`` of the heatmap.
- ``skipped``: ``{field or "views": one-line reason}``, for every field that is null.
- ``files``: ``{kind: file name in out_dir}``; ``timings_s``: ``{stage: seconds}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from interp.diagnose.run import LengthRun
from interp.metrics import (
    MIN_CARRIER_SHARE, bit_carrier_summary, growth_exponent, heatmap_window, last_write_summary, read_table, sink_eps,
    summarise, survivor_growth,
)

FRAME_COLUMNS = ["layer", "head", "metric", "value", "map", "seq_len"]
INTEGER_COLUMNS = ("layer", "head", "seq_len", "key_pos", "query_pos", "dependency_length", "n_reads", "n_errors",
                   "n_entries")
ATTENTION_FIELDS = (
    "lengths", "maps", "sparsity", "survivors", "max_abs_weight", "effective_entropy", "dispersion_ratio",
    "zero_row_fraction", "gsink_ratio", "sink_eps", "survivor_scaling", "survivor_exponent", "cross_view_correlation",
    "tail_probabilities", "bit_carrier", "last_write", "heatmap",
)
FIELDS = ("checkpoint", "model", "config", "threshold_beta", "settings", "evaluation", "glitches",
          "error_by_dependency", "linear_probes", *ATTENTION_FIELDS, "skipped", "files", "timings_s")


@dataclass
class Diagnosis:
    """What :func:`diagnose` wrote: ``metrics`` is metrics.json, ``frame`` metrics.csv,
    ``glitches`` glitches.csv; ``files`` maps each kind to its path."""

    out_dir: Path
    metrics: dict
    frame: pd.DataFrame
    glitches: pd.DataFrame
    files: dict[str, Path]

    def summary_rows(self) -> list[tuple[str, str, str]]:
        """``(quantity, value, detail)`` rows for a terminal table."""
        m = self.metrics
        rows = [(f"error rate, {name}", f"{r['error_rate']:.2e}",
                 f"{r['read_errors']}/{r['reads']} reads wrong, {100 * r['sequence_accuracy']:.1f}% sequences right")
                for name, r in m["evaluation"].items()]
        rows.append(("glitches", str(m["glitches"]["total"]), "rows of glitches.csv"))
        if m["linear_probes"] is not None:
            best = max(m["linear_probes"]["per_layer"], key=lambda r: r["accuracy"])
            rows.append((f"linear probe of {m['linear_probes']['label'].split(':')[0]}", _num(best["accuracy"]),
                         f"held-out accuracy at layer {best['layer']} ({_num(best['low'])}-{_num(best['high'])}; "
                         f"always the commonest: {_num(best['baseline'])})"))
        if m["threshold_beta"] is not None:
            rows.append(("threshold beta", _num(min(m["threshold_beta"])),
                         "smallest layer's; per layer " + ", ".join(_num(b) for b in m["threshold_beta"])))
        if m["maps"] is None:
            return rows + [("attention metrics", "skipped", m["skipped"]["maps"])]
        T, longest = str(m["lengths"]["probe"]), str(max(m["lengths"]["run"]))
        key = str(m["settings"]["sink_keys"][0])
        at = {metric: m[metric]["pattern"][T] for metric in
              ("survivors", "effective_entropy", "dispersion_ratio", "max_abs_weight")}
        growth = m["survivor_scaling"][longest]
        rows += [(f"sparsity, {name} (T={T})", _num(m["sparsity"][name][T]["overall"]), _layers(m["sparsity"][name][T]))
                 for name in m["maps"]]
        rows += [
            ("survivors per query (keys with a non-zero weight)", _num(at["survivors"]["overall"]),
             f"dense would be {(int(T) + 1) / 2:g}; {_layers(at['survivors'])}"),
            (f"survivor growth factor, T={min(m['lengths']['run'])} to {longest}", _num(growth["growth"]),
             f"linear would be {_num(growth['linear_reference'])}"),
            ("survivor growth exponent", _num(m["survivor_exponent"]["overall"]),
             f"log-log slope over T; 1 = linear, 0 = flat; {_layers(m['survivor_exponent'])}"),
            ("effective entropy (nats)", _num(at["effective_entropy"]["overall"]), _layers(at["effective_entropy"])),
            ("dispersion ratio", _num(at["dispersion_ratio"]["overall"]), "1 = uniform, 0 = one key"),
            (f"gSinkRatio, key {key}", _num(m["gsink_ratio"][T][key]),
             f"1 = no sink; Sink^{m['settings']['sink_eps']} {_num(m['sink_eps'][T][key])}"),
            ("max |a|", _num(at["max_abs_weight"]["overall"]),
             ", ".join(f"{name} {_num(m['max_abs_weight'][name][T]['overall'])}" for name in m["maps"][1:])),
        ]
        if m["cross_view_correlation"] is not None:
            r = m["cross_view_correlation"][T]
            rows.append(("cross-view correlation", _num(r["overall"]), _layers(r)))
        if m["tail_probabilities"] is not None:
            k, tail = max(m["tail_probabilities"][T].items(), key=lambda item: float(item[0]))
            rows.append((f"P(|s| > {k} sigma)", _num(tail["overall"]), f"Gaussian {tail['gaussian']:.3g}"))
        for field, quantity, detail in (
                ("bit_carrier", "bit-carrier argmax rate", "on positions holding the last write's bit"),
                ("last_write", "last-write argmax rate", "on the write's own tokens only")):
            best = m[field]["per_layer"]
            rows.append((quantity, _num(max(r["argmax_rate"] for r in best)),
                         f"{detail}; best head per layer: "
                         + ", ".join(f"L{r['layer']}H{r['head']} {_num(r['argmax_rate'])}" for r in best)))
        rows += [(f"length {T}", "skipped", reason) for T, reason in m["lengths"]["skipped"].items()]
        return rows + [(name, "skipped", reason) for name, reason in m["skipped"].items()]


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _layers(entry: dict) -> str:
    return ", ".join(f"L{layer} {_num(v)}" for layer, v in enumerate(entry["per_layer"]))


def _key(x) -> str:
    """A JSON key for a length, key position or k: ``2``, not ``2.0`` (``k`` is a float column)."""
    return str(int(x)) if float(x).is_integer() else str(x)


# --- metrics.json -------------------------------------------------------------------------

def metric_rows(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows of one metric, without the columns only other metrics use."""
    return frame[frame.metric == metric].dropna(axis=1, how="all")


def _overall_and_layers(rows: pd.DataFrame, how: str = "mean") -> dict:
    per_head = [column for column in ("head",) if column in rows]  # a per-layer metric (tails) has no heads
    return {"overall": rows.value.agg(how),
            "per_layer": summarise(rows, over=per_head, how=how).sort_values("layer").value.tolist()}


def per_map(frame: pd.DataFrame, metric: str, how: str = "mean") -> dict:
    """``{map: {"<T>": {"overall", "per_layer"}}}`` of a per-head metric."""
    out: dict = {}
    for (name, T), rows in metric_rows(frame, metric).groupby(["map", "seq_len"]):
        out.setdefault(name, {})[_key(T)] = _overall_and_layers(rows, how)
    return out


def per_key(rows: pd.DataFrame) -> dict:
    """``{"<T>": {"<key_pos>": value}}`` of frames already reduced over layers and heads."""
    return {_key(T): {_key(k): v for k, v in zip(at.key_pos, at.value)} for T, at in rows.groupby("seq_len")}


def attention_summary(frame: pd.DataFrame, sink_threshold: float) -> dict:
    """The attention fields of metrics.json from the tidy frame."""
    scaling = survivor_growth(metric_rows(frame[frame["map"] == "pattern"], "survivors"))
    tails = metric_rows(frame, "tail_probability")
    correlations = metric_rows(frame, "cross_view_correlation")
    return {
        "sparsity": per_map(frame, "sparsity"),
        "survivors": per_map(frame, "survivors"),
        "max_abs_weight": per_map(frame, "max_abs_weight", how="max"),
        **{metric: per_map(frame[frame.query_pos.isna()], metric)
           for metric in ("effective_entropy", "dispersion_ratio", "zero_row_fraction")},
        "gsink_ratio": per_key(summarise(metric_rows(frame, "gsink_ratio"), over=("layer", "head"))),
        "sink_eps": per_key(sink_eps(metric_rows(frame, "key_mass"), sink_threshold)),
        "survivor_scaling": {_key(T): {"survivors": at.value.mean(), "growth": at.growth.mean(),
                                       "linear_reference": at.linear_reference.iloc[0]}
                             for T, at in scaling.groupby("seq_len")},
        "survivor_exponent": _overall_and_layers(growth_exponent(scaling, ["layer"]).rename(
            columns={"exponent": "value"})),
        "cross_view_correlation": None if correlations.empty else {
            _key(T): {**_overall_and_layers(at), "constant_views": int(at.constant_view.sum())}
            for T, at in correlations.groupby("seq_len")},
        "tail_probabilities": {
            _key(T): {_key(k): {"overall": g.value.mean(), "per_layer": g.sort_values("layer").value.tolist(),
                              "gaussian": g.gaussian.iloc[0]} for k, g in at.groupby("k")}
            for T, at in tails.groupby("seq_len")} if not tails.empty else None,
    }


def best_heads(frame: pd.DataFrame, probe: str) -> list[dict]:
    """Per layer, the head with the highest ``{probe}_argmax_rate`` in the tidy frame (ties: the
    larger ``{probe}_weight``)."""
    rate, weight = f"{probe}_argmax_rate", f"{probe}_weight"
    table = (frame[frame.metric.isin([rate, weight])]
             .pivot_table(index=["layer", "head"], columns="metric", values="value").reset_index())
    table = table.sort_values(["layer", rate, weight], ascending=[True, False, False])
    return [{"layer": int(r["layer"]), "head": int(r["head"]), "argmax_rate": r[rate], "weight": r[weight]}
            for _, r in table.groupby("layer").head(1).iterrows()]


def attention_fields(model_name: str, names: list[str], frame: pd.DataFrame, runs: dict[int, LengthRun],
                     probe_length: int, skipped_lengths: dict[int, str], settings: dict) -> dict:
    """The attention fields of metrics.json, the heatmap's choice of sequence and window, and
    ``skipped`` for the parts this mechanism does not have."""
    probe = runs[probe_length]
    wrong = read_table(probe.tokens, probe.predicted)
    wrong = wrong[~wrong.correct]
    seq = int(np.bincount(wrong.seq, minlength=len(probe.tokens)).argmax())
    wrong_reads = sorted(wrong.position[wrong.seq == seq].tolist())
    maps = [name for name in names if name != "attn_scores"]
    fields = {
        **attention_summary(frame, settings["sink_eps"]),
        "lengths": {"run": list(runs), "probe": probe_length,
                    "skipped": {_key(T): r for T, r in skipped_lengths.items()}},
        "maps": maps,
        "bit_carrier": {"length": probe_length, "min_share": MIN_CARRIER_SHARE,
                        "per_layer": best_heads(frame, "bit_carrier")},
        "last_write": {"length": probe_length, "per_layer": best_heads(frame, "last_write")},
        "heatmap": {"length": probe_length, "sequence": seq, "wrong_reads": wrong_reads,
                    "window": list(heatmap_window(probe_length, wrong_reads, settings["heatmap_tokens"]))},
    }
    skipped = {}
    if len(maps) == 1:
        skipped["views"] = f"{model_name} has a single attention map (no blocks.*.attn.hook_view_*)"
    if fields["cross_view_correlation"] is None:
        skipped["cross_view_correlation"] = skipped.get("views") or (
            f"{model_name} has one view ({', '.join(maps[1:])}); a correlation needs view_1 and view_2")
    if fields["tail_probabilities"] is None:
        skipped["tail_probabilities"] = f"{model_name} never calls hook_attn_scores"
    return fields | {"skipped": skipped}


def plain(x):
    """JSON-ready: numpy scalars to Python, NaN to None, recursively."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# --- metrics.csv --------------------------------------------------------------------------

def tidy_frame(runs: dict[int, LengthRun], probe_length: int | None, rates: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv: every run's metric rows, the two probes' summaries and the error rates."""
    frames = [f for run in runs.values() for f in run.frames]
    if probe_length is not None:
        probe = runs[probe_length]
        frames += [summary(pd.concat(tables)).assign(map="pattern", seq_len=probe_length) for summary, tables in
                   ((bit_carrier_summary, probe.bit_carrier), (last_write_summary, probe.last_write))]
    frames.append(rates.assign(metric="error_rate", value=rates.error_rate).drop(columns="error_rate"))
    frame = pd.concat(frames, ignore_index=True)
    frame = frame.reindex(columns=[*FRAME_COLUMNS, *frame.columns.drop(FRAME_COLUMNS, errors="ignore")])
    # Integer columns that other metrics leave empty: nullable ints, not floats (layer "0", not "0.0").
    return frame.astype({c: "Int64" for c in INTEGER_COLUMNS if c in frame.columns})


def require_finite(model, checkpoint_path, what: str):
    """``model``, if every parameter is finite; else a ValueError naming the first that is not:
    its outputs, and so the ``what`` of them, would be NaN."""
    from models.checkpoint import non_finite_tensors

    bad = non_finite_tensors(model.state_dict())
    if bad:
        raise ValueError(f"{checkpoint_path}: parameter {bad[0]}{f' and {len(bad) - 1} more' if len(bad) > 1 else ''} "
                         f"holds NaN or infinite values, so the {what} would be NaN: give a checkpoint of a run "
                         "that did not diverge")
    return model

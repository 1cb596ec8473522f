"""``glitchlens diagnose``: one checkpoint in, one self-contained report of its attention out.

Pure orchestration of :mod:`interp.evaluate`, :mod:`interp.metrics` and :mod:`interp.plots`:

1. Evaluate on the canonical splits (the first ``n`` sequences of each), keeping every read:
   the glitch table (every wrong read) and the error rate by dependency length.
2. Run the model on the first ``n_cache_sequences`` sequences of FFL(0.8) (the iid split's
   generator) at each length in ``lengths``, with hooks on every layer's
   ``blocks.{l}.attn.hook_pattern`` (and, at the probe length, ``hook_attn_scores`` and
   ``hook_view_*`` where the mechanism has them). Each layer's maps are reduced to metric
   rows as soon as that layer has produced them all, so at most one layer's
   ``[batch, head, T, T]`` maps are alive (every layer of a ``mini`` model at T = 2048 would
   take gigabytes).
3. Draw the plots and write the files.

Choices:

- The *probe length* is the run length closest to 512, the canonical length (ties: the
  shorter). What the papers follow across lengths is measured at every length: the
  pattern's sparsity, survivors, max |a|, entropy and sinks (TDA Fig. 1c, Fig. 4). What
  they report at one length is measured at the probe length only: the views, the
  cross-view correlation, the logit tails (TDA Fig. 1a-b, Fig. 5, Table 7), the dispersion
  curve, the two retrieval probes and the heatmaps. At T = 2048 those would cost more than
  the forward pass.
- A length the model cannot take (APE beyond ``n_ctx``) makes its forward raise
  ``ValueError``; that length is skipped with the error's first line as the reason.
- The heatmap shows the final layer of the cached sequence with the most wrong reads, in a
  window of ``heatmap_tokens`` tokens ending just after its first wrong read (or the last
  tokens when it has none): a 512 x 512 map is an unreadable blur.
- Error rate by dependency length uses the token distance from the read to its last write,
  in power-of-two bins (lower edge reported).

Files written to ``out_dir``: ``report.html`` (one file, plotly.js inline once, opens
offline), ``metrics.json``, ``metrics.csv`` (the tidy frame of :mod:`interp.metrics`:
columns ``layer, head, metric, value, map, seq_len`` plus metric-specific ones; rows with
a ``query_pos`` are the dispersion curve at the probe length, mean over heads; rows with a
``split`` are the error rates by dependency length), ``glitches.csv`` (one row per wrong
read: ``split, seq, position, write_pos, dependency_length, ignores_since, n_writes,
true_bit, pred_bit``) and PNGs of the key plots.

``metrics.json`` fields, all always present; ``"<T>"`` is a context length, ``map`` is
``pattern`` (the weights applied to V) or a view (``view_1``, ``view_2``), and a
``{"overall": x, "per_layer": [..]}`` pair is the mean over layers and heads and the mean
over heads per layer (the max for ``max_abs_weight``). NaN is written as null.

- ``checkpoint``: the checkpoint path; ``model``: the model name; ``config``: its ModelConfig.
- ``settings``: the arguments of this run (splits, n, lengths, n_cache_sequences, ...).
- ``evaluation``: ``{split: {split, sequences, reads, read_errors, error_rate,
  error_rate_upper95, sequence_accuracy}}``.
- ``glitches``: ``{"total": int, "by_split": {split: int}}``, the rows of glitches.csv.
- ``error_by_dependency``: ``[{split, dependency_length, n_reads, n_errors, error_rate}]``.
- ``lengths``: ``{"run": [T], "probe": T, "skipped": {"<T>": reason}}``.
- ``maps``: the maps measured, ``["pattern", "view_1", ...]``.
- ``sparsity``, ``survivors``, ``max_abs_weight``: ``{map: {"<T>": {"overall", "per_layer"}}}``
  (views at the probe length only).
- ``effective_entropy``, ``dispersion_ratio``, ``zero_row_fraction``: the same, for ``pattern``.
- ``gsink_ratio``, ``sink_eps``: ``{"<T>": {"<key_pos>": value}}``, gSinkRatio averaged over
  layers and heads, and the fraction of heads whose mean mass on the key exceeds
  ``settings.sink_eps`` (key positions 0-indexed: the paper's gSinkRatio(1) is key 0).
- ``survivor_scaling``: ``{"<T>": {"survivors", "growth", "linear_reference"}}``: the
  pattern's survivors per query (mean over layers), and their growth and a linear O(n)
  growth relative to the shortest run length.
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

import html
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from plotly.offline import get_plotlyjs

from interp import plots
from interp.evaluate import checkpoint_task, predict_reads, summarize
from interp.metrics import (
    MIN_CARRIER_SHARE, bit_carrier_attention, bit_carrier_summary, bit_carriers_in_tokens, cross_view_correlation,
    dispersion, entropy_summary, error_rate_by_dependency, last_write_attention, last_write_summary, max_abs_weight,
    propagate_bit_carriers, read_table, sink_eps, sink_ratio, sparsity, summarise, survivor_counts, survivor_growth,
    tail_probabilities,
)
from interp.tasks import CANONICAL_SEQ_LEN, SPLITS, load_split

DEFAULT_LENGTHS = (128, 256, 512, 1024, 2048)
FRAME_COLUMNS = ["layer", "head", "metric", "value", "map", "seq_len"]
INTEGER_COLUMNS = ("layer", "head", "seq_len", "key_pos", "query_pos", "dependency_length", "n_reads", "n_errors",
                   "n_entries")
ATTENTION_HOOK = re.compile(r"blocks\.(\d+)\.attn\.hook_(pattern|attn_scores|view_\d+)")
ATTENTION_FIELDS = (
    "lengths", "maps", "sparsity", "survivors", "max_abs_weight", "effective_entropy", "dispersion_ratio",
    "zero_row_fraction", "gsink_ratio", "sink_eps", "survivor_scaling", "cross_view_correlation",
    "tail_probabilities", "bit_carrier", "last_write", "heatmap",
)
FIELDS = ("checkpoint", "model", "config", "settings", "evaluation", "glitches", "error_by_dependency",
          *ATTENTION_FIELDS, "skipped", "files", "timings_s")


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
            ("survivors per query", _num(at["survivors"]["overall"]),
             f"dense would be {(int(T) + 1) / 2:g}; {_layers(at['survivors'])}"),
            (f"survivor growth, T={min(m['lengths']['run'])} to {longest}", _num(growth["growth"]),
             f"linear would be {_num(growth['linear_reference'])}"),
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


# --- evaluation ---------------------------------------------------------------------------

def evaluate_reads(model, splits: Sequence[str], n: int | None, batch_size: int):
    """Each split's :class:`~interp.evaluate.SplitResult` and one :func:`read_table` of all
    their reads (with a ``split`` column), from a single pass over the first ``n`` sequences."""
    results, tables = {}, []
    for name in splits:
        tokens = load_split(name, None if n is None else min(n, SPLITS[name].size))
        reads = predict_reads(model, tokens, batch_size)
        results[name] = summarize(name, len(tokens), reads)
        predicted = np.full(tokens.shape, -1)    # read_table only looks at the reads
        predicted[reads.sequence, reads.position] = reads.predicted
        tables.append(read_table(tokens, predicted).assign(split=name))
    return results, pd.concat(tables, ignore_index=True)


def errors_by_dependency(reads: pd.DataFrame) -> pd.DataFrame:
    """Error rate per split in power-of-two bins of the dependency length (>= 2 tokens)."""
    edges = 2 ** np.arange(1, int(np.log2(max(int(reads.dependency_length.max()), 2))) + 2)
    return pd.concat([error_rate_by_dependency(r, bins=edges).assign(split=s)
                      for s, r in reads.groupby("split", sort=False)], ignore_index=True)


# --- attention runs -----------------------------------------------------------------------

def attention_hooks(model) -> tuple[list[int], list[str]]:
    """The layers and the map names (``pattern``, ``attn_scores``, ``view_1``, ...) of the
    model's attention hooks; no layers for a model without attention."""
    found = [m for name in model.hook_dict if (m := ATTENTION_HOOK.fullmatch(name))]
    names = sorted({m[2] for m in found}, key=lambda s: (s != "pattern", s != "attn_scores", s))
    return sorted({int(m[1]) for m in found}), names


@torch.no_grad()
def run_layers(model, tokens: np.ndarray, layers: list[int], names: list[str],
               consume: Callable[[int, dict[str, torch.Tensor]], None]) -> torch.Tensor:
    """Run ``model`` on ``tokens`` ``[batch, T]``, calling ``consume(layer, {name: map})`` as
    soon as a layer has produced all its maps; returns the logits. A hook a mechanism never
    calls cannot hold a layer back: what is left is handed over after the forward pass."""
    pending: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)

    def hook(x, hook):
        layer, name = ATTENTION_HOOK.fullmatch(hook.name).groups()
        pending[int(layer)][name] = x.detach()
        if len(pending[int(layer)]) == len(names):
            consume(int(layer), pending.pop(int(layer)))

    device = next(model.parameters()).device
    hooks = [(f"blocks.{layer}.attn.hook_{name}", hook) for layer in layers for name in names]
    logits = model.run_with_hooks(torch.as_tensor(tokens.astype(np.int64), device=device), fwd_hooks=hooks)
    for layer in sorted(pending):
        consume(layer, pending.pop(layer))
    return logits


@dataclass
class LengthRun:
    """The metric rows of one run length, and at the probe length what the probe needs."""

    tokens: np.ndarray
    frames: list[pd.DataFrame] = field(default_factory=list)
    bit_carrier: list[pd.DataFrame] = field(default_factory=list)
    last_write: list[pd.DataFrame] = field(default_factory=list)
    maps: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)   # {layer: {pattern, views}}
    predicted: np.ndarray | None = None


def measure(model, tokens: np.ndarray, layers: list[int], names: list[str], sink_keys: Sequence[int],
            probe: bool) -> LengthRun:
    """The pattern's metrics that the papers follow across lengths (sparsity, survivors, max
    |a|, entropy, sinks); at the probe length also those they report at one length (the
    views' sparsity, survivors and max |a|, cross-view correlation, logit tails), the
    dispersion curve, the two retrieval probes, and the maps for the heatmaps. Other lengths hook
    the pattern alone: at T = 2048 the rest would cost more than the forward pass. Layers arrive
    in order, so the bit carriers at each layer's input follow from the layer before."""
    run = LengthRun(tokens)
    views = [name for name in names if name.startswith("view_")]
    carriers = {layers[0]: bit_carriers_in_tokens(tokens)} if probe else {}

    def consume(layer, maps):
        pattern = {layer: maps["pattern"]}
        run.frames += [sparsity(pattern), survivor_counts(pattern), max_abs_weight(pattern),
                       entropy_summary(pattern), sink_ratio(pattern, sink_keys)]
        if not probe:
            return
        for view in views:
            run.frames += [f({layer: maps[view]}, name=view) for f in (sparsity, survivor_counts, max_abs_weight)]
        if {"view_1", "view_2"} <= set(maps):
            run.frames.append(cross_view_correlation({layer: maps["view_1"]}, {layer: maps["view_2"]}))
        if "attn_scores" in maps:
            run.frames.append(tail_probabilities({layer: maps["attn_scores"]}))
        run.frames.append(summarise(dispersion(pattern)))
        run.bit_carrier.append(bit_carrier_attention(pattern, tokens, carriers={layer: carriers[layer]}))
        carriers[layer + 1] = propagate_bit_carriers(maps["pattern"], tokens, carriers.pop(layer))
        run.last_write.append(last_write_attention(pattern, tokens))
        run.maps[layer] = {name: maps[name] for name in ["pattern", *views]}

    logits = run_layers(model, tokens, layers, names if probe else ["pattern"], consume)
    if probe:
        run.predicted = logits.argmax(-1).cpu().numpy()
    return run


def run_lengths(model, layers: list[int], names: list[str], lengths: Sequence[int], n_cache_sequences: int,
                sink_keys: Sequence[int]):
    """Measure at every length the model can take, the one closest to 512 first (it becomes the
    probe length). Returns ``({T: LengthRun}, probe length or None, {T: reason skipped})``."""
    runs, skipped, probe_length = {}, {}, None
    for T in sorted(set(lengths), key=lambda T: (abs(T - CANONICAL_SEQ_LEN), T)):
        try:
            tokens = load_split("iid", n_cache_sequences, seq_len=T)
            runs[T] = measure(model, tokens, layers, names, sink_keys, probe=probe_length is None)
        except ValueError as err:
            skipped[T] = str(err).splitlines()[0]
            continue
        probe_length = probe_length or T
    return dict(sorted(runs.items())), probe_length, dict(sorted(skipped.items()))


# --- metrics.json -------------------------------------------------------------------------

def _rows(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows of one metric, without the columns only other metrics use."""
    return frame[frame.metric == metric].dropna(axis=1, how="all")


def _overall_and_layers(rows: pd.DataFrame, how: str = "mean") -> dict:
    return {"overall": rows.value.agg(how), "per_layer": summarise(rows, how=how).sort_values("layer").value.tolist()}


def per_map(frame: pd.DataFrame, metric: str, how: str = "mean") -> dict:
    """``{map: {"<T>": {"overall", "per_layer"}}}`` of a per-head metric."""
    out: dict = {}
    for (name, T), rows in _rows(frame, metric).groupby(["map", "seq_len"]):
        out.setdefault(name, {})[_key(T)] = _overall_and_layers(rows, how)
    return out


def per_key(rows: pd.DataFrame) -> dict:
    """``{"<T>": {"<key_pos>": value}}`` of frames already reduced over layers and heads."""
    return {_key(T): {_key(k): v for k, v in zip(at.key_pos, at.value)} for T, at in rows.groupby("seq_len")}


def attention_summary(frame: pd.DataFrame, sink_threshold: float) -> dict:
    """The attention fields of metrics.json from the tidy frame."""
    scaling = survivor_growth(_rows(frame[frame["map"] == "pattern"], "survivors"))
    tails = _rows(frame, "tail_probability")
    correlations = _rows(frame, "cross_view_correlation")
    return {
        "sparsity": per_map(frame, "sparsity"),
        "survivors": per_map(frame, "survivors"),
        "max_abs_weight": per_map(frame, "max_abs_weight", how="max"),
        **{metric: per_map(frame[frame.query_pos.isna()], metric)
           for metric in ("effective_entropy", "dispersion_ratio", "zero_row_fraction")},
        "gsink_ratio": per_key(summarise(_rows(frame, "gsink_ratio"), over=("layer", "head"))),
        "sink_eps": per_key(sink_eps(_rows(frame, "key_mass"), sink_threshold)),
        "survivor_scaling": {_key(T): {"survivors": at.value.mean(), "growth": at.growth.mean(),
                                       "linear_reference": at.linear_reference.iloc[0]}
                             for T, at in scaling.groupby("seq_len")},
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


# --- the report ---------------------------------------------------------------------------

@dataclass
class Section:
    """One part of report.html: a title, what it shows and how to read it, then its figures
    and tables (HTML fragments), or the reason it was skipped."""

    title: str
    text: str
    body: list[str] = field(default_factory=list)
    skipped: str | None = None


def heatmap_window(T: int, wrong: list[int], size: int) -> tuple[int, int]:
    """``size`` tokens (even) ending just after the first wrong read, or the last ones."""
    size = min(T, size - size % 2)
    stop = min(T, max(size, min(wrong) + 2)) if wrong else T
    return stop - size, stop


def table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", classes="table", border=0)


STYLE = """
body { font-family: system-ui, sans-serif; color: #222; margin: 0 auto; max-width: 1600px; padding: 0 24px 48px; }
h1 { font-size: 1.6em; margin-top: 28px; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 40px; }
p.what { color: #444; max-width: 900px; line-height: 1.45; } p.skipped { color: #a0522d; font-style: italic; }
.meta { color: #555; font-size: 0.92em; } code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
table.table { border-collapse: collapse; font-size: 0.9em; margin: 8px 0 16px; }
table.table th, table.table td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
nav a { margin-right: 14px; } img { max-width: 100%; } .figure { overflow-x: auto; margin: 8px 0 20px; }
"""


def render_html(title: str, meta: list[str], sections: list[Section]) -> str:
    """One self-contained page: plotly.js inline once in the head, every figure after it."""
    nav = " ".join(f'<a href="#s{i}">{html.escape(s.title)}</a>' for i, s in enumerate(sections))
    parts = []
    for i, s in enumerate(sections):
        body = (f'<p class="skipped">Skipped: {html.escape(s.skipped)}</p>' if s.skipped
                else "".join(f'<div class="figure">{b}</div>' for b in s.body))
        parts.append(f'<section id="s{i}"><h2>{html.escape(s.title)}</h2><p class="what">{s.text}</p>{body}</section>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{STYLE}</style><script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f'<h1>{html.escape(title)}</h1>{"".join(f"<p class=meta>{m}</p>" for m in meta)}<nav>{nav}</nav>'
            f'{"".join(parts)}</body></html>')


@dataclass
class Figures:
    """Draws the report's plots: ``figures(make, png)`` is ``make(backend)``'s plotly figure as
    HTML, with its matplotlib twin saved as ``out_dir / png`` (recorded in ``files``) when named."""

    out_dir: Path
    files: dict[str, Path]

    def __call__(self, make: Callable, png: str | None = None) -> str:
        if png:
            self.files[png.removesuffix(".png")] = plots.save(make("matplotlib"), self.out_dir / png)
        return plots.to_html(make("plotly"), include_plotlyjs=False)


# --- diagnose -----------------------------------------------------------------------------

def diagnose(checkpoint_path, out_dir, splits: Sequence[str] = ("iid", "sparse", "dense"), n: int | None = 32,
             lengths: Sequence[int] = DEFAULT_LENGTHS, n_cache_sequences: int = 2, sink_keys: Sequence[int] = (0, 1, 2, 3),
             sink_threshold: float = 0.3, heatmap_tokens: int = 128, batch_size: int = 16,
             device: str = "cpu") -> Diagnosis:
    """Diagnose a checkpoint and write report.html, metrics.json, metrics.csv, glitches.csv
    and PNGs into ``out_dir`` (see the module docstring). ``n``: sequences per split (None:
    all). The defaults keep a ``mini`` checkpoint under a minute on a 2-core CPU."""
    from models import load, read_config

    if checkpoint_task(read_config(checkpoint_path)) == "automaton":
        raise ValueError(f"{checkpoint_path} was trained on the automaton task; diagnose reads flip-flop splits. "
                         f"`glitchlens eval {checkpoint_path}` scores it on automaton sequences")
    settings = {"splits": list(splits), "n": n, "lengths": list(lengths), "n_cache_sequences": n_cache_sequences,
                "sink_keys": list(sink_keys), "sink_eps": sink_threshold, "heatmap_tokens": heatmap_tokens,
                "batch_size": batch_size, "device": device}
    timings, clock = {}, [time.perf_counter()]

    def lap(stage):
        clock.append(time.perf_counter())
        timings[stage] = clock[-1] - clock[-2]

    model = load(checkpoint_path, device=device)
    lap("load")
    evaluation, reads = evaluate_reads(model, splits, n, batch_size)
    rates = errors_by_dependency(reads)
    glitches = reads[~reads.correct].drop(columns="correct")
    glitches = glitches[["split", *glitches.columns.drop("split")]].reset_index(drop=True)
    lap("evaluate")
    layers, names = attention_hooks(model)
    runs, probe_length, skipped_lengths = (run_lengths(model, layers, names, lengths, n_cache_sequences, sink_keys)
                                           if layers else ({}, None, {}))
    lap("attention")

    probe = runs.get(probe_length)
    frame = tidy_frame(runs, probe_length, rates)
    metrics = {
        "checkpoint": str(checkpoint_path), "model": model.cfg.model, "config": model.cfg.to_dict(),
        "settings": settings, "evaluation": {name: r.to_dict() for name, r in evaluation.items()},
        "glitches": {"total": len(glitches), "by_split": {s: int((glitches.split == s).sum()) for s in splits}},
        "error_by_dependency": rates[["split", "dependency_length", "n_reads", "n_errors", "error_rate"]]
        .to_dict("records"),
        **dict.fromkeys(ATTENTION_FIELDS), "skipped": {},
    }
    if probe is None:
        reason = (f"{model.cfg.model} has no attention layers (no blocks.*.attn.hook_pattern)" if not layers else
                  "no requested length could be run: " + "; ".join(f"{T}: {r}" for T, r in skipped_lengths.items()))
        metrics["skipped"] = dict.fromkeys(ATTENTION_FIELDS, reason)
    else:
        metrics |= attention_fields(model.cfg.model, names, frame, runs, probe_length, skipped_lengths, settings)
    lap("metrics")
    files = write_outputs(Path(out_dir), metrics, frame, glitches, rates, probe)
    lap("report")
    metrics["timings_s"] = {**timings, "total": clock[-1] - clock[0]}
    files["metrics_json"].write_text(json.dumps(plain(metrics), indent=2, allow_nan=False) + "\n")
    return Diagnosis(Path(out_dir), plain(metrics), frame, glitches, files)


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


def write_outputs(out_dir: Path, metrics: dict, frame: pd.DataFrame, glitches: pd.DataFrame, rates: pd.DataFrame,
                  probe: LengthRun | None) -> dict[str, Path]:
    """report.html, the CSVs and the PNGs; records every file (metrics.json, written last by
    the caller, included) in ``metrics["files"]``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    sections = report_sections(metrics, frame, glitches, rates, probe, Figures(out_dir, files))
    files |= {"metrics_csv": out_dir / "metrics.csv", "glitches_csv": out_dir / "glitches.csv",
              "report": out_dir / "report.html", "metrics_json": out_dir / "metrics.json"}
    frame.to_csv(files["metrics_csv"], index=False)
    glitches.to_csv(files["glitches_csv"], index=False)
    metrics["files"] = {kind: path.name for kind, path in files.items()}
    settings, config = metrics["settings"], metrics["config"]
    meta = [f"checkpoint <code>{html.escape(metrics['checkpoint'])}</code>",
            "config: " + ", ".join(f"{k}={config[k]}" for k in ("n_layers", "n_heads", "d_model", "n_ctx", "attention",
                                                               "pos_embed", "attention_options")),
            f"evaluated on the first {settings['n']} sequences of each split; attention measured on "
            f"{settings['n_cache_sequences']} FFL(0.8) sequences per length; files: "
            + ", ".join(sorted(metrics["files"].values()))]
    files["report"].write_text(render_html(f"GlitchLens diagnosis: {metrics['model']}", meta, sections))
    return files


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
    if probe is None:
        return [evaluation, Section("Attention", "Attention maps and the TDA paper's metrics.",
                                    skipped=metrics["skipped"]["maps"])]
    sections = [evaluation, *heatmap_sections(metrics, probe, figures), *metric_sections(metrics, frame, figures)]
    skipped = [(f"length {T}", r) for T, r in metrics["lengths"]["skipped"].items()] + list(metrics["skipped"].items())
    if skipped:
        sections.append(Section("Skipped", "Parts of the diagnosis that do not apply to this model.",
                                [table_html(pd.DataFrame(skipped, columns=["part", "reason"]))]))
    return sections


def heatmap_sections(metrics: dict, probe: LengthRun, figures: Figures) -> list[Section]:
    """The final layer's maps (interactive, and a PNG) and every layer's pattern (static)."""
    T, seq, window, wrong = (metrics["heatmap"][k] for k in ("length", "sequence", "window", "wrong_reads"))
    tokens, window = probe.tokens[seq], tuple(window)
    last_layer = max(probe.maps)
    n_heads = probe.maps[last_layer]["pattern"].shape[1]
    final = {f"H{h} {name}": a[seq, h] for h in range(n_heads) for name, a in probe.maps[last_layer].items()}
    # One column per map when there are views (each map on its own scale, shared by the heads), else the heads.
    ncols, shared = (len(metrics["maps"]), "columns") if len(metrics["maps"]) > 1 else (min(n_heads, 2), True)
    all_layers = plots.attention_grid({layer: maps["pattern"] for layer, maps in probe.maps.items()}, tokens, seq=seq,
                                      window=window, wrong=wrong, max_ticks=16, backend="matplotlib")
    return [
        Section(
            f"Final-layer attention, one sequence (T={T})",
            f"Layer {last_layer} on cached sequence {seq}, tokens {window[0]}-{window[1] - 1} (the sequence with the "
            "most wrong reads; the window ends just after its first). Axes are labelled by instruction pair: writes "
            "orange, reads blue, <b>wrong reads red</b>. Each read's ideal cell (query = the read, key = its most "
            "recent write) is outlined in cyan, or red when the read was wrong. Exact zeros are black, future keys "
            "grey; signed maps use a diverging scale. Hover for the tokens and the value.",
            [figures(lambda b: plots.heatmap_grid(final, tokens, wrong=wrong, window=window, ncols=ncols,
                                                  shared_scale=shared, backend=b),
                     "attention_final_layer.png")]),
        Section(
            "All layers and heads (static)",
            "The pattern of every layer (rows) and head (columns) on the same sequence and window, on one colour "
            "scale (an embedded PNG: a grid this size is too heavy to keep interactive).",
            [plots.to_html(all_layers)]),
    ]


def metric_sections(metrics: dict, frame: pd.DataFrame, figures: Figures) -> list[Section]:
    """One section per family of metrics: charts at the probe length, or against length."""
    T = metrics["lengths"]["probe"]
    at_probe = frame[frame.seq_len == T]
    key, eps = metrics["settings"]["sink_keys"][0], metrics["settings"]["sink_eps"]
    sinks = pd.DataFrame([{"T": int(t), **{f"gSinkRatio({k})": v for k, v in keys.items()},
                           **{f"Sink^{eps}({k})": v for k, v in metrics["sink_eps"][t].items()}}
                          for t, keys in metrics["gsink_ratio"].items()])
    survivors = survivor_growth(_rows(frame[frame["map"] == "pattern"], "survivors"))

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
            [figures(lambda b: plots.sink_ratio_chart(_rows(frame, "gsink_ratio"), key_pos=key, backend=b),
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
            [figures(lambda b: plots.chart(_rows(frame, "bit_carrier_argmax_rate"), "layer", series="head", kind="bar",
                                           title="Reads whose argmax holds the last write's bit",
                                           ylabel="fraction of reads", backend=b)),
             "<p>Bit-carrier probe, best head per layer:</p>" + table_html(pd.DataFrame(
                 metrics["bit_carrier"]["per_layer"])),
             "<p>Exact-write probe (the write's own tokens only), best head per layer:</p>" + table_html(pd.DataFrame(
                 metrics["last_write"]["per_layer"]))]),
    ]

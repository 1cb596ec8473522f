"""Running a checkpoint for its diagnosis: the error rate by dependency length, and the attention
metrics at each context length, reduced layer by layer as the maps stream out of the forward pass
(:func:`interp.metrics.capture_maps`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from interp.metrics import (
    bit_carrier_attention, bit_carriers_in_tokens, capture_maps, cross_view_correlation, dispersion, entropy_summary,
    error_rate_by_dependency, last_write_attention, max_abs_weight, propagate_bit_carriers, sink_ratio, sparsity,
    summarise, survivor_counts, tail_probabilities,
)
from interp.tasks import CANONICAL_SEQ_LEN, load_split

ATTENTION_HOOK = re.compile(r"blocks\.(\d+)\.attn\.hook_(pattern|attn_scores|view_\d+)")


def errors_by_dependency(reads: pd.DataFrame) -> pd.DataFrame:
    """Error rate per split in power-of-two bins of the dependency length (>= 2 tokens)."""
    edges = 2 ** np.arange(1, int(np.log2(max(int(reads.dependency_length.max()), 2))) + 2)
    return pd.concat([error_rate_by_dependency(r, bins=edges).assign(split=s)
                      for s, r in reads.groupby("split", sort=False)], ignore_index=True)


def attention_hooks(model) -> tuple[list[int], list[str]]:
    """The layers and the map names (``pattern``, ``attn_scores``, ``view_1``, ...) of the
    model's attention hooks; no layers for a model without attention."""
    found = [m for name in model.hook_dict if (m := ATTENTION_HOOK.fullmatch(name))]
    names = sorted({m[2] for m in found}, key=lambda s: (s != "pattern", s != "attn_scores", s))
    return sorted({int(m[1]) for m in found}), names


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
            probe: bool, bar=None) -> LengthRun:
    """The pattern's metrics that the papers follow across lengths (sparsity, survivors, max
    |a|, entropy, sinks); at the probe length also those they report at one length (the
    views' sparsity, survivors and max |a|, cross-view correlation, logit tails), the
    dispersion curve, the two retrieval probes, and the maps for the heatmaps. Other lengths hook
    the pattern alone: at T = 2048 the rest would cost more than the forward pass. Layers arrive
    in order, so the bit carriers at each layer's input follow from the layer before. ``bar``
    (a tqdm bar, or None) advances by one as each layer is measured."""
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

    def consume_and_count(layer, maps):
        consume(layer, maps)
        if bar is not None:
            bar.update()

    logits, _ = capture_maps(model, tokens, names if probe else ["pattern"], consume_and_count)
    if probe:
        run.predicted = logits.argmax(-1).numpy()
    return run


def run_lengths(model, layers: list[int], names: list[str], lengths: Sequence[int], n_cache_sequences: int,
                sink_keys: Sequence[int], bar=None):
    """Measure at every length the model can take, the one closest to 512 first (it becomes the
    probe length). Returns ``({T: LengthRun}, probe length or None, {T: reason skipped})``.
    ``bar``: a tqdm bar (or None) that says which length runs and counts its layers; a skipped
    length counts as done."""
    runs, skipped, probe_length = {}, {}, None
    for T in sorted(set(lengths), key=lambda T: (abs(T - CANONICAL_SEQ_LEN), T)):
        counted = bar.n if bar is not None else 0
        try:
            if bar is not None:
                bar.set_postfix_str(f"attention at T={T}")
            tokens = load_split("iid", n_cache_sequences, seq_len=T)
            runs[T] = measure(model, tokens, layers, names, sink_keys, probe=probe_length is None, bar=bar)
        except ValueError as err:
            skipped[T] = str(err).splitlines()[0]
            if bar is not None:
                bar.update(counted + len(layers) - bar.n)
            continue
        probe_length = probe_length or T
    return dict(sorted(runs.items())), probe_length, dict(sorted(skipped.items()))


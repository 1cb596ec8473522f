"""The TDA paper's Theorems 4.3 and 4.6 measured on flip-flop, where the irrelevant keys are known.

Theorem 4.3: a threshold view keeps ``E[S_i] <= kappa`` spurious survivors per row, where
``S_i`` counts the noise keys ``j in N(i)`` with ``s_ij > tau_i``. Theorem 4.6: the two views of
TDA share ``E[C_i] <= kappa^2 / (i + 1)`` of them, ``C_i`` counting the noise keys above the
threshold in both. Both rest on assumptions about the scores of noise keys (sub-Gaussian,
independent across views) that a trained model need not meet; here they are counted.

On flip-flop the query is a read (position ``i`` holds ``r``; the model predicts the next bit
there) and the noise keys ``N(i)`` are the instruction tokens ``i`` and ``r`` strictly before
it that do not hold the read's bit at the layer's input: such a token carries no bit, so a key
there is never what a read needs. (The bits that follow them are left out of ``N(i)``: a model
may park a copy of the written bit on them.) A model may also route the bit through an
instruction token (``tra-mech``'s layer 0 copies it into the ``i`` after the write): an ``i`` or
``r`` after the read's last write that holds the bit (the bit-carrier probe of
:mod:`interp.metrics.probes`) is a *carrier key*, and its survivors are counted apart
(``S_carrier``), not as spurious. A key *survives* a view when its rectified weight
``(s_ij - tau_i)_+^p`` is positive, i.e. ``s_ij > tau_i``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Iterable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Integer
from torch import nn

from interp.metrics.attention import Map
from interp.metrics.capture import capture_maps
from interp.metrics.probes import Carriers, Tokens, bit_carriers, bit_carriers_in_tokens
from interp.tasks import IGNORE, READ, last_write_positions, read_mask, sample_ffl

Maps = dict[int, Map]


def noise_keys(tokens: Integer[np.ndarray, "batch pos"]) -> Bool[np.ndarray, "batch pos"]:
    """``[batch, T]`` bool: the instruction tokens ``i`` and ``r``, the keys no read needs."""
    positions = np.arange(tokens.shape[1])
    return (positions % 2 == 0) & np.isin(tokens, (IGNORE, READ))


def spurious_survivors(view_1: Maps, tokens: Tokens, view_2: Maps | None = None,
                       carriers: dict[int, Carriers] | None = None) -> pd.DataFrame:
    """For every read and head of every layer: ``S``, the noise keys before the read that survive
    view 1 (Theorem 4.3's ``S_i``), and with ``view_2`` also ``S_2`` (the same in view 2) and
    ``C``, those surviving both views (Theorem 4.6's ``C_i``); ``S_carrier``, the carrier keys
    (``i``/``r`` tokens holding the read's bit) that survive view 1, which are no noise. Maps
    ``[batch, head, query_pos, key_pos]`` per layer (``hook_view_1``, ``hook_view_2``);
    ``carriers``: ``{layer: [n, T] bool}`` of :func:`~interp.metrics.bit_carriers` on the
    model's ``hook_pattern`` (default: the tokens' own, :func:`bit_carriers_in_tokens`, which
    never holds an instruction token: every ``i``/``r`` key is then noise). Columns ``layer,
    seq, head, position, noise`` and ``carrier_keys`` (the numbers of each before the read),
    ``S``, ``S_carrier`` (, ``S_2``, ``C``)."""
    tokens = np.asarray(tokens)
    seq, position = np.nonzero(read_mask(tokens))
    instruction = torch.as_tensor(noise_keys(tokens))
    key_pos = torch.arange(tokens.shape[1])[None, :]
    before = key_pos < torch.as_tensor(position)[:, None]                                  # [read, key_pos]
    since_write = key_pos >= torch.as_tensor(last_write_positions(tokens)[seq, position])[:, None]
    s, q = torch.as_tensor(seq), torch.as_tensor(position)
    parts = []
    for layer, a in view_1.items():
        held = torch.as_tensor(carriers[layer] if carriers is not None else bit_carriers_in_tokens(tokens))
        carrier = (instruction[s] & before & held[s] & since_write)[:, None, :]           # [read, 1, key_pos]
        keys = (instruction[s] & before)[:, None, :] & ~carrier
        survive_1 = a[s, :, q, :] > 0                                              # [read, head, key_pos]
        counts = {"S": (survive_1 & keys).sum(-1), "S_carrier": (survive_1 & carrier).sum(-1)}
        if view_2 is not None:
            survive_2 = view_2[layer][s, :, q, :] > 0
            counts |= {"S_2": (survive_2 & keys).sum(-1), "C": (survive_1 & survive_2 & keys).sum(-1)}
        n_reads, n_heads = counts["S"].shape
        parts.append(pd.DataFrame({
            "layer": layer, "seq": np.repeat(seq, n_heads), "head": np.tile(np.arange(n_heads), n_reads),
            "position": np.repeat(position, n_heads), "noise": np.repeat(keys.sum(-1)[:, 0].numpy(), n_heads),
            "carrier_keys": np.repeat(carrier.sum(-1)[:, 0].numpy(), n_heads),
            **{name: c.reshape(-1).numpy() for name, c in counts.items()}}))
    return pd.concat(parts, ignore_index=True)


@contextmanager
def threshold_kappa(model: nn.Module, kappa: float):
    """Every threshold layer of ``model`` evaluated with ``kappa`` (eq. 1's expected number of
    spurious survivors), restored afterwards; the weights are untouched."""
    from models.attention.tda import ThresholdAttention

    layers = [m for m in model.modules() if isinstance(m, ThresholdAttention)]
    if not layers:
        raise ValueError(f"the {model.cfg.model} model has no threshold layer (trela or tda) to set kappa on")
    saved = [layer.options for layer in layers]
    try:
        for layer in layers:
            layer.options = replace(layer.options, kappa=kappa)
        yield model
    finally:
        for layer, options in zip(layers, saved):
            layer.options = options


def survivor_theorems(model: nn.Module, lengths: Iterable[int] = (128, 256, 512, 1024, 2048),
                      kappas: Iterable[float] = (0.25, 1.0, 4.0), reads: int = 400, seed: int = 0,
                      batch_tokens: int = 4096) -> pd.DataFrame:
    """Theorems 4.3 and 4.6 on ``model`` (trela or TDA): for each length T and kappa, FFL(0.8)
    sequences of length T (a fixed draw per T, at least ``reads`` reads in all), and per layer
    the mean over reads and heads of ``S`` (and ``C`` for TDA) with a 95% normal interval, beside
    the theorems' bounds ``kappa`` and the mean over reads of ``kappa^2 / (i + 1)``, and of the
    carrier-key survivors ``S_carrier`` (the bit's route, not noise; the carriers follow the
    model's ``hook_pattern``). Columns ``layer, T, kappa, reads, S_mean, S_low, S_high, S_bound,
    S_carrier_mean`` (, ``C_mean, C_low, C_high, C_bound``)."""
    two_views = model.cfg.model == "tda"
    rows = []
    for T in lengths:
        n = max(1, -(-reads // max(1, int(T * 0.1 / 2))))   # FFL(0.8): 10% of the instructions are reads
        tokens = sample_ffl(n, T, 0.8, rng=np.random.default_rng([seed, T]))[:, :-1]
        for kappa in kappas:
            tables = []
            with threshold_kappa(model, kappa):
                step = max(1, batch_tokens // T)
                for lo in range(0, n, step):
                    batch = tokens[lo:lo + step]
                    maps = capture_maps(model, batch, ["pattern", "view_1", "view_2"] if two_views
                                        else ["pattern", "view_1"])[1]
                    carriers = bit_carriers(maps["pattern"], batch)
                    tables.append(spurious_survivors(maps["view_1"], batch, maps.get("view_2"), carriers).assign(
                        seq=lambda f, lo=lo: f.seq + lo))
            table = pd.concat(tables, ignore_index=True)
            for layer, at in table.groupby("layer"):
                row = {"layer": layer, "T": T, "kappa": kappa, "reads": int(len(at) / at["head"].nunique())}
                row |= _mean_interval(at.S, "S") | {"S_bound": kappa, "S_carrier_mean": float(at.S_carrier.mean())}
                if two_views:
                    row |= _mean_interval(at.C, "C") | {"C_bound": float((kappa ** 2 / (at.position + 1)).mean())}
                rows.append(row)
    return pd.DataFrame(rows)


def _mean_interval(values: pd.Series, name: str) -> dict[str, float]:
    """The mean of ``values`` and its 95% normal interval (reads and heads taken as independent)."""
    mean = float(values.mean())
    half = 1.96 * float(values.std(ddof=1)) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return {f"{name}_mean": mean, f"{name}_low": mean - half, f"{name}_high": mean + half}

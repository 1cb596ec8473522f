"""Flip-flop probes: what each read retrieved, where the model glitched, and where the
heads looked (Liu et al., "Exposing Attention Glitches", Fig. 5, 12 right, 14).

Inputs are flip-flop token ids ``[n, T]`` (``w``=0, ``r``=1, ``i``=2, ``0``=3, ``1``=4) and the
model's predicted next-token ids ``[n, T]`` (``logits.argmax(-1)``); only the entries at
read instructions are used: the prediction made at an ``r`` is the model's answer for the
bit that follows it. :func:`automaton_write_attention` takes automaton inputs instead
(``sigma_0``=0, ``sigma_1``=1, ``bottom``=2), where every position is a prediction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp.metrics.attention import Maps, by_layer, metric_frame, causal
from interp.tasks.automaton import BOTTOM
from interp.tasks.flipflop import IGNORE, ONE, VOCAB, WRITE, ZERO, last_write_positions, read_mask


def _ids(x, name: str) -> np.ndarray:
    x = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be [n, T], got shape {x.shape}")
    return x.astype(np.int64)


def read_table(tokens, predicted) -> pd.DataFrame:
    """One row per read of an evaluation: ``seq``, ``position`` (token index of the ``r``),
    ``write_pos`` (token index of the most recent ``w``), ``dependency_length`` =
    position - write_pos in tokens (2 x the number of instructions from the write to the
    read), ``ignores_since`` (the ``i`` instructions since the last ``w`` or ``r``: the
    dependency length of the flip-flop paper's Fig. 12 right), ``n_writes`` (writes so far),
    ``true_bit``, ``pred_bit`` (-1 when the model predicted a non-bit token) and ``correct``.

    ``tokens [n, T]`` are whole sequences (the answer after the last ``r`` included);
    ``predicted [n, T - 1]`` is the model's argmax on ``tokens[:, :-1]`` (a ``[n, T]`` array
    is accepted too; its last column is never a read).
    """
    tokens, predicted = _ids(tokens, "tokens"), _ids(predicted, "predicted")
    if predicted.shape == (tokens.shape[0], tokens.shape[1] - 1):
        predicted = np.pad(predicted, ((0, 0), (0, 1)), constant_values=-1)
    if tokens.shape != predicted.shape:
        raise ValueError(f"predicted {predicted.shape} must be [n, T - 1] for tokens {tokens.shape} "
                         "(the model's argmax on tokens[:, :-1])")
    pos = np.arange(tokens.shape[1])
    instruction = pos % 2 == 0
    is_write = instruction & (tokens == WRITE)
    # The last w or r strictly before each read: the running max up to the previous instruction.
    operation = np.where(instruction & (tokens != IGNORE), pos, -1)
    last_operation = np.concatenate(
        [np.full((len(tokens), 2), -1), np.maximum.accumulate(operation, axis=1)[:, :-2]], axis=1)
    seq, position = np.nonzero(read_mask(tokens))
    write_pos = last_write_positions(tokens)[seq, position]
    pred = predicted[seq, position]
    true_bit = tokens[seq, position + 1] - ZERO
    pred_bit = np.where((pred == ZERO) | (pred == ONE), pred - ZERO, -1)
    return pd.DataFrame({
        "seq": seq, "position": position, "write_pos": write_pos,
        "dependency_length": position - write_pos,
        "ignores_since": (position - last_operation[seq, position]) // 2 - 1,
        "n_writes": np.cumsum(is_write, axis=1)[seq, position],
        "true_bit": true_bit, "pred_bit": pred_bit, "correct": pred_bit == true_bit,
    })


def glitch_table(tokens, predicted) -> pd.DataFrame:
    """The wrong reads of :func:`read_table`: every glitch of an evaluation, one per row."""
    reads = read_table(tokens, predicted)
    return reads[~reads.correct].reset_index(drop=True)


def error_rate_by_dependency(reads: pd.DataFrame, by: str = "dependency_length",
                             bins: Sequence[int] | None = None) -> pd.DataFrame:
    """Error rate as a function of the dependency length (flip-flop paper Fig. 12 right),
    from a :func:`read_table` frame. Columns ``by`` (the length, or a bin's lower edge),
    ``n_reads``, ``n_errors``, ``error_rate`` = n_errors / n_reads. ``bins``: increasing
    edges; bin b holds lengths in [bins[b], bins[b + 1]); lengths outside are dropped.
    """
    key = reads[by]
    if bins is not None:
        edges = np.asarray(bins)
        index = np.searchsorted(edges, key, side="right") - 1
        inside = (index >= 0) & (index < len(edges) - 1)
        reads, key = reads[inside], pd.Series(edges[index[inside]], index=reads.index[inside], name=by)
    grouped = (~reads.correct).groupby(key)
    table = pd.DataFrame({"n_reads": grouped.size(), "n_errors": grouped.sum()}).reset_index()
    table["error_rate"] = table.n_errors / table.n_reads
    return table


def last_write_attention(maps: Maps, tokens) -> pd.DataFrame:
    """For every read and head: the weight the head puts on the most recent write, at the read's
    query position (where the next bit is predicted). The "ideal" head of the flip-flop
    paper's Fig. 5c puts all of it there. Columns ``layer, seq, head, position, write_pos``,
    ``weight_instr`` = A[position, write_pos], ``weight_bit`` = A[position, write_pos + 1],
    ``weight`` (their sum) and ``is_argmax``: the head's largest weight in that row lies on
    one of the two write tokens, strictly above every other key (so a uniform row is False).
    Weights are signed for differential maps; the argmax is of the signed weight, the most
    excitatory key.
    """
    tokens = _ids(tokens, "tokens")
    seq, position = np.nonzero(read_mask(tokens))
    write_pos = last_write_positions(tokens)[seq, position]
    s, q, w = (torch.as_tensor(x) for x in (seq, position, write_pos))
    parts = []
    for layer, a in by_layer(maps).items():
        if a.shape[0] != tokens.shape[0] or a.shape[-1] != tokens.shape[1]:
            raise ValueError(f"layer {layer}: map {tuple(a.shape)} does not match tokens {tokens.shape}")
        rows = a[s.to(a.device), :, q.to(a.device), :].float().cpu()     # [read, head, key_pos]
        rows = rows.masked_fill(~causal(a.shape[-1])[q][:, None, :], float("-inf"))
        on_write = rows.gather(-1, torch.stack([w, w + 1], -1)[:, None, :].expand(-1, a.shape[1], -1))
        others = rows.scatter(-1, torch.stack([w, w + 1], -1)[:, None, :].expand(-1, a.shape[1], -1),
                              float("-inf")).amax(-1)
        n_reads, n_heads = on_write.shape[:2]
        parts.append(pd.DataFrame({
            "layer": layer, "seq": np.repeat(seq, n_heads), "head": np.tile(np.arange(n_heads), n_reads),
            "position": np.repeat(position, n_heads), "write_pos": np.repeat(write_pos, n_heads),
            "weight_instr": on_write[..., 0].reshape(-1).numpy(), "weight_bit": on_write[..., 1].reshape(-1).numpy(),
            "weight": on_write.sum(-1).reshape(-1).numpy(),
            "is_argmax": (on_write.amax(-1) > others).reshape(-1).numpy(),
        }))
    return pd.concat(parts, ignore_index=True)


def last_write_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per layer and head, from :func:`last_write_attention`: ``last_write_weight`` (mean weight
    on the last write) and ``last_write_argmax_rate`` (fraction of reads where it is the argmax)."""
    grouped = table.groupby(["layer", "head"])
    frames = [grouped[column].mean().rename("value").reset_index().assign(metric=metric)
              for column, metric in (("weight", "last_write_weight"), ("is_argmax", "last_write_argmax_rate"))]
    return pd.concat(frames, ignore_index=True)[["layer", "head", "metric", "value"]]


def automaton_write_positions(inputs) -> np.ndarray:
    """For automaton inputs ``[..., T]``, the index of the most recent write (sigma_0 or sigma_1)
    at or before each position, ``-1`` before the first: the key the ideal head attends to."""
    inputs = np.asarray(inputs)
    pos = np.arange(inputs.shape[-1])
    return np.maximum.accumulate(np.where(inputs != BOTTOM, pos, -1), axis=-1)


def automaton_write_attention(maps: Maps, inputs) -> pd.DataFrame:
    """Flip-flop automaton (Def. 1): for every position and head, the weight on the most recent
    write (sigma_0 or sigma_1) at or before it, where the ideal 1-layer head of the flip-flop
    paper's Fig. 5c / 16b puts all of it. Columns ``layer, seq, head, position, write_pos``,
    ``weight`` = A[position, write_pos] and ``is_argmax`` (that key's weight is strictly above
    every other key's). Positions before the first write have ``write_pos`` -1, weight NaN.
    """
    inputs = _ids(inputs, "inputs")
    pos = np.arange(inputs.shape[1])
    write_pos = automaton_write_positions(inputs)
    key = torch.as_tensor(write_pos.clip(min=0))[:, None, :, None]              # [n, 1, T, 1]
    parts = []
    for layer, a in by_layer(maps).items():
        if a.shape[0] != inputs.shape[0] or a.shape[-1] != inputs.shape[1]:
            raise ValueError(f"layer {layer}: map {tuple(a.shape)} does not match inputs {inputs.shape}")
        rows = a.float().cpu().masked_fill(~causal(a.shape[-1]), float("-inf"))
        index = key.expand(-1, a.shape[1], -1, -1)
        weight = rows.gather(-1, index)[..., 0]                                   # [n, head, T]
        others = rows.scatter(-1, index, float("-inf")).amax(-1)
        weight = weight.masked_fill(torch.as_tensor(write_pos < 0)[:, None, :], float("nan"))
        n, n_heads, T = weight.shape
        parts.append(pd.DataFrame({
            "layer": layer, "seq": np.repeat(np.arange(n), n_heads * T),
            "head": np.tile(np.repeat(np.arange(n_heads), T), n), "position": np.tile(pos, n * n_heads),
            "write_pos": np.repeat(write_pos, n_heads, axis=0).ravel(),
            "weight": weight.reshape(-1).numpy(), "is_argmax": (weight > others).reshape(-1).numpy(),
        }))
    return pd.concat(parts, ignore_index=True)


def mean_by_key_token(maps: Maps, tokens, name: str = "pattern") -> pd.DataFrame:
    """The mean of a map over the causal entries whose key is each flip-flop token (``w``, ``r``,
    ``i``, ``0``, ``1``), per layer and head: which tokens a head attends to, or which tokens a
    CoPE head counts when the map is its gates (CoPE paper Fig. 6). Column ``key_token``; NaN
    for a token absent from the batch."""
    tokens = torch.as_tensor(_ids(tokens, "tokens"))
    parts = []
    for token, symbol in enumerate(VOCAB):
        def stats(a, keys=tokens == token):
            if keys.shape != (a.shape[0], a.shape[-1]):
                raise ValueError(f"map {tuple(a.shape)} does not match tokens {tuple(tokens.shape)}")
            entries = causal(a.shape[-1], a.device) & keys.to(a.device)[:, None, None, :]   # [n, 1, T, T]
            return {"mean_by_key_token": (a.double() * entries).sum((0, 2, 3)) / entries.sum()}

        parts.append(metric_frame(maps, name, stats).assign(key_token=symbol))
    return pd.concat(parts, ignore_index=True)

"""Flip-flop probes: what each read retrieved, where the model glitched, and where the
heads looked (Liu et al., "Exposing Attention Glitches", Fig. 5, 12 right, 14).

Two probes of where a read's heads look. :func:`bit_carrier_attention` follows the last
write's bit wherever the model has moved it (the positions that hold it at each layer's
input, :func:`bit_carriers`); :func:`last_write_attention` looks at the write's own two tokens
only, so it calls a layer that reads the bit from a position an earlier layer copied it to
blind (``tra-mech``'s final layer, 256 iid sequences: argmax rate 0.11 there, 1.00 on the
carriers).

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
from jaxtyping import Bool, Float, Int, Integer
from torch import Tensor

from interp.metrics.attention import Map, Maps, by_layer, causal, checked_map, metric_frame
from interp.tasks.automaton import BOTTOM
from interp.tasks.flipflop import D_VOCAB, IGNORE, ONE, VOCAB, WRITE, ZERO, last_write_positions, read_mask
from interp.tasks.text import FlipFlopFormatError, check_tokens
from models import validate

# The share of a head's weight that moves the bit into a position (propagate_bit_carriers). The final
# layers of tra-mech and fot-mech score the same for any share from 0.02 to 0.2 (256 iid sequences); above
# that TRA's carriers holding 0.22 of the bit drop out, and the lower the share, the more a dispersed
# softmax spreads carriers everywhere (rope-mech, 70% right: 0.18 at 0.1, 0.35 at 0.02).
MIN_CARRIER_SHARE = 0.1

# Token ids of whole sequences; Predictions: the model's argmax, one position fewer (or as many)
Tokens = Integer[np.ndarray, "batch pos"] | Integer[Tensor, "batch pos"]
Predictions = Integer[np.ndarray, "batch _pos"] | Integer[Tensor, "batch _pos"]
# The positions that hold their last write's bit (bit_carriers)
Carriers = Bool[np.ndarray, "batch pos"]


def _ids(x, name: str) -> np.ndarray:
    """Token ids ``[n, T]`` (an integer array or tensor, not empty) as ``int64``."""
    x = validate.array(name, x, "integer", 2)
    return np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x).astype(np.int64)


def _carriers(carriers, tokens: np.ndarray, name: str = "carriers") -> Carriers:
    """``carriers``, a bool array ``[n, T]`` shaped as ``tokens``."""
    carriers = np.asarray(validate.array(name, carriers, "bool", 2))
    if carriers.shape != tokens.shape:
        raise ValueError(f"{name} {carriers.shape} must be shaped as tokens {tokens.shape}")
    return carriers


def _share(name: str, value) -> float:
    return validate.number(name, value, 0, 1)


def read_table(tokens: Tokens, predicted: Predictions) -> pd.DataFrame:
    """One row per read of an evaluation: ``seq``, ``position`` (token index of the ``r``),
    ``write_pos`` (token index of the most recent ``w``), ``dependency_length`` =
    position - write_pos in tokens (2 x the number of instructions from the write to the
    read), ``ignores_since`` (the ``i`` instructions since the last ``w`` or ``r``: the
    dependency length of the flip-flop paper's Fig. 12 right), ``n_writes`` (writes so far),
    ``true_bit``, ``pred_bit`` (-1 when the model predicted a non-bit token) and ``correct``.

    ``tokens [n, T]`` are whole sequences (the answer after the last ``r`` included);
    ``predicted [n, T - 1]`` is the model's argmax on ``tokens[:, :-1]`` (a ``[n, T]`` array
    is accepted too; its last column is never a read).

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Sec. 3.1 (a read returns the bit of the
    most recent write; a wrong one is an attention glitch) and Fig. 12 right (its dependency length:
    the ignores since the last write or read); on the token ids and the model's argmax of the logits
    at each ``r``.
    """
    tokens, predicted = _ids(tokens, "tokens"), _ids(predicted, "predicted")
    outside = (tokens < 0) | (tokens >= D_VOCAB)
    if outside.any():  # such a sequence has no reads to score: refused, rather than its reads dropped
        seq, pos = np.argwhere(outside)[0]
        raise ValueError(f"tokens: id {tokens[seq, pos]} at sequence {seq}, position {pos} is not in the flip-flop "
                         f"vocabulary 0..{D_VOCAB - 1}")
    try:  # a read that contradicts its last write would score a right answer as a glitch
        check_tokens(tokens)
    except FlipFlopFormatError as err:
        raise ValueError(f"tokens: {err} (only flip-flop sequences, each ending in a read, are scored)") from None
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


def glitch_table(tokens: Tokens, predicted: Predictions) -> pd.DataFrame:
    """The wrong reads of :func:`read_table`: every glitch of an evaluation, one per row.

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Sec. 1 (an attention glitch is a wrong
    read); on :func:`read_table`'s rows.
    """
    reads = read_table(tokens, predicted)
    return reads[~reads.correct].reset_index(drop=True)


def error_rate_by_dependency(reads: pd.DataFrame, by: str = "dependency_length",
                             bins: Sequence[int] | Integer[np.ndarray, "edge"] | None = None) -> pd.DataFrame:
    """Error rate as a function of the dependency length (flip-flop paper Fig. 12 right),
    from a :func:`read_table` frame. Columns ``by`` (the length, or a bin's lower edge),
    ``n_reads``, ``n_errors``, ``error_rate`` = n_errors / n_reads. ``bins``: increasing
    edges; bin b holds lengths in [bins[b], bins[b + 1]); lengths outside are dropped.

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Fig. 12 right and App. B.4: the paper shows
    how the wrong answers spread over dependency lengths; this is the rate per length shown beside
    it (``interp.figures.flipflop.dependency_histogram`` holds both); on :func:`read_table`'s rows.
    """
    key = validate.frame("reads", reads, (validate.text("by", by), "correct"))[by]
    if bins is not None:
        edges = np.asarray(validate.array("bins", bins, "real", 1, lists=True))
        if len(edges) < 2 or (np.diff(edges) <= 0).any():
            raise ValueError(f"bins must be at least two increasing edges, got {edges.tolist()[:6]}")
        index = np.searchsorted(edges, key, side="right") - 1
        inside = (index >= 0) & (index < len(edges) - 1)
        reads, key = reads[inside], pd.Series(edges[index[inside]], index=reads.index[inside], name=by)
    grouped = (~reads.correct).groupby(key)
    table = pd.DataFrame({"n_reads": grouped.size(), "n_errors": grouped.sum()}).reset_index()
    table["error_rate"] = table.n_errors / table.n_reads
    return table


def last_write_attention(maps: Maps, tokens: Tokens) -> pd.DataFrame:
    """The exact-write probe. For every read and head: the weight the head puts on the most recent
    write's own two tokens, at the read's query position (where the next bit is predicted). The
    "ideal" one-layer head of the flip-flop paper's Fig. 5c puts all of it there; a deeper model
    may read the bit elsewhere, from a position an earlier layer copied it to, which this probe
    does not see (:func:`bit_carrier_attention` does). Columns ``layer, seq, head, position,
    write_pos``, ``weight_instr`` = A[position, write_pos], ``weight_bit`` = A[position, write_pos + 1],
    ``weight`` (their sum) and ``is_argmax``: the head's largest weight in that row lies on
    one of the two write tokens, strictly above every other key (so a uniform row is False).
    Weights are signed for differential maps; the argmax is of the signed weight, the most
    excitatory key.

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Fig. 5c and 16b (the ideal 1-layer head
    attends to the most recent write); on ``hook_pattern`` (or a view) ``[batch, head, query_pos,
    key_pos]``, at the reads' rows.
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
    on the write's own tokens) and ``last_write_argmax_rate`` (fraction of reads where they hold
    the argmax).

    A helper, no paper quantity of its own: per-head means of :func:`last_write_attention`.
    """
    return _per_head_means(table, {"weight": "last_write_weight", "is_argmax": "last_write_argmax_rate"})


def off_target_peak(a: Map, tokens: Tokens) -> Float[Tensor, "read"]:
    """The "high-magnitude noise" of one layer's map at each read: the largest share of a head's
    |weight| that one key other than the read's target, the last write, takes::

        noise_r = max_h max_{j <= i_r, j not in {w_r, w_r + 1}} |A^h_{b_r i_r j}| / sum_{j' <= i_r} |A^h_{b_r i_r j'}|

    with ``i_r`` the read's position in sequence ``b_r`` and ``w_r`` its last write
    (:func:`interp.tasks.last_write_positions`). Reads in the order of
    ``np.nonzero(read_mask(tokens))`` (by sequence, then position). Choices: the target is the
    write's two tokens, instruction and bit, as :func:`last_write_attention` counts the write (a
    head that reads the write may weigh either); every other causal key is noise, the read's own
    position and any token an earlier layer copied the bit to included, so a deeper model that
    routes the bit elsewhere (:func:`bit_carriers`) scores that route as noise. The maximum over
    heads makes it a per-layer statistic, as the paper's Fig. 1b peak is. The share, not the raw
    weight: trela's and TDA's rows are not normalised to sum to 1 and the head's output is normalised
    afterwards (``Norm`` in Sec. 4.2), so a row's scale changes nothing the model computes, and raw
    weights would compare two models' thresholds rather than their noise. A row with no weight at
    all (nothing survived the threshold) has no noise: 0.

    Source: TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 4.2, l. 162: "a single view thresholded
    map can still admit occasional high-magnitude noise", which the differential map (eq. of
    Sec. 4.2, Delta a = a^(1) - lambda a^(2)) is to suppress; on ``hook_pattern`` ``[batch, head,
    query_pos, key_pos]`` (trela's (s - tau)_+^p, TDA's signed Delta a), at the reads' rows.
    """
    tokens, a = _ids(tokens, "tokens"), checked_map("a", a, 4)
    if a.shape[0] != tokens.shape[0] or a.shape[-1] != tokens.shape[1]:
        raise ValueError(f"a {tuple(a.shape)} must be [batch, head, T, T] for tokens {tokens.shape}")
    seq, position = np.nonzero(read_mask(tokens))
    write_pos = last_write_positions(tokens)[seq, position]
    if (write_pos < 0).any():
        first = int(np.argmax(write_pos < 0))
        raise ValueError(f"tokens: the read at sequence {seq[first]}, position {position[first]} has no write before "
                         "it, so no target key; pass flip-flop sequences, which start with w")
    s, q, w = (torch.as_tensor(x, device=a.device) for x in (seq, position, write_pos))
    key_pos = torch.arange(a.shape[-1], device=a.device)
    noise = (key_pos <= q[:, None]) & (key_pos != w[:, None]) & (key_pos != w[:, None] + 1)    # [read, key_pos]
    rows = a[s, :, q, :].float().abs().masked_fill(key_pos > q[:, None, None], 0.0)          # [read, head, key_pos]
    shares = rows / rows.sum(-1, keepdim=True).clamp_min(torch.finfo(rows.dtype).tiny)
    return shares.masked_fill(~noise[:, None, :], 0.0).amax((1, 2))


def _per_head_means(table: pd.DataFrame, metrics: dict[str, str]) -> pd.DataFrame:
    """Tidy rows ``layer, head, metric, value``: the mean of each column of a per-read ``table``
    over its reads, under the metric name ``metrics[column]``."""
    grouped = validate.frame("table", table, ("layer", "head", *metrics)).groupby(["layer", "head"])
    frames = [grouped[column].mean().rename("value").reset_index().assign(metric=metric)
              for column, metric in metrics.items()]
    return pd.concat(frames, ignore_index=True)[["layer", "head", "metric", "value"]]


def bit_carriers_in_tokens(tokens: Tokens) -> Carriers:
    """``[n, T]`` bool: the tokens that are the bit of their position's most recent write: the
    bit after that ``w``, and the bit after each ``r`` since (a read's bit repeats it). What
    holds the last write's bit at the input of layer 0. The ``w`` itself never does: under
    causal attention it cannot see the bit that follows it, at any layer.

    The project's probe (no paper equation; flip-flop paper (``002_cbc1a16af32b4280.txt``) Sec. 3.1
    defines the bit a read returns); on the token ids.
    """
    tokens = _ids(tokens, "tokens")
    write_pos = last_write_positions(tokens)
    after_read = np.zeros(tokens.shape, dtype=bool)
    after_read[:, 1:] = read_mask(tokens)[:, :-1]
    return (write_pos >= 0) & ((np.arange(tokens.shape[1]) == write_pos + 1) | after_read)


def _segment(tokens: Integer[np.ndarray, "batch pos"]) -> Bool[Tensor, "batch query_pos key_pos"]:
    """``[n, query_pos, key_pos]`` bool: keys from the query's most recent write up to the query,
    the only keys that can hold that write's bit (older ones hold older bits)."""
    pos = torch.arange(tokens.shape[1])
    write_pos = torch.as_tensor(last_write_positions(tokens))
    return (pos[None, None, :] >= write_pos[:, :, None]) & (write_pos[:, :, None] >= 0) & causal(len(pos))


def propagate_bit_carriers(pattern: Map, tokens: Tokens, carriers: Carriers,
                           min_share: float = MIN_CARRIER_SHARE) -> Carriers:
    """The carriers at the next layer's input: ``carriers`` ``[n, T]`` (those at this layer's
    input), plus every position where some head of ``pattern`` ``[batch, head, query_pos,
    key_pos]`` puts at least ``min_share`` of its excitatory (positive) weight on carriers of the
    position's own last write. A share, not a majority or the argmax: a position that mixes the
    bit with others still holds it (tra-mech's layer 0 gives an ignore four tokens after a write
    0.22 of its weight on the write's bit and 0.48 on the newer bit between them, and its final
    layer reads from such positions). Inhibitory weights of differential maps move no bit and
    are left out; a row with no positive weight moves nothing. Positions keep what they hold:
    the residual stream carries it on.

    The project's probe (no paper equation; flip-flop paper (``002_cbc1a16af32b4280.txt``) Fig. 5a-b
    shows deeper heads reading elsewhere than the write); on one layer's ``hook_pattern``.
    """
    tokens, pattern = _ids(tokens, "tokens"), checked_map("pattern", pattern, 4)
    carriers, min_share = _carriers(carriers, tokens), _share("min_share", min_share)
    if pattern.shape[0] != tokens.shape[0] or pattern.shape[-1] != tokens.shape[1]:
        raise ValueError(f"pattern {tuple(pattern.shape)} must be [batch, head, T, T] for tokens {tokens.shape}")
    on_carrier = (_segment(tokens) & torch.as_tensor(carriers)[:, None, :]).to(pattern.device)
    excitatory = pattern.float().clamp(min=0).masked_fill(~causal(tokens.shape[1], pattern.device), 0.0)
    to_carriers = torch.einsum("bhqk,bqk->bhq", excitatory, on_carrier.float())
    takes = ((to_carriers >= min_share * excitatory.sum(-1)) & (to_carriers > 0)).any(1)
    return carriers | takes.cpu().numpy()


def bit_carriers(maps: Maps, tokens: Tokens, min_share: float = MIN_CARRIER_SHARE) -> dict[int, Carriers]:
    """``{layer: [n, T] bool}``: the positions that hold their last write's bit at the input of
    each layer. Layer 0: :func:`bit_carriers_in_tokens`. Layer l > 0: those of layer l - 1 and
    the positions layer l - 1 moved the bit into (:func:`propagate_bit_carriers`), so the set
    follows the model's own attention. ``maps`` must hold every layer from 0 (the patterns,
    ``[batch, head, query_pos, key_pos]``).

    The project's probe (no paper equation); on ``hook_pattern`` of every layer from 0.
    """
    layers, tokens, min_share = by_layer(maps), _ids(tokens, "tokens"), _share("min_share", min_share)
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"the carriers of a layer depend on every layer below it: need the maps of layers "
                         f"0..{max(layers)}, got {sorted(layers)}")
    carriers, found = bit_carriers_in_tokens(tokens), {}
    for layer in sorted(layers):
        found[layer] = carriers
        carriers = propagate_bit_carriers(layers[layer], tokens, carriers, min_share)
    return found


def bit_carrier_attention(maps: Maps, tokens: Tokens, carriers: dict[int, Carriers] | None = None,
                          min_share: float = MIN_CARRIER_SHARE) -> pd.DataFrame:
    """The bit-carrier probe. For every read and head: how much the head attends to positions
    that hold the read's last-write bit at that layer's input (:func:`bit_carriers`), at the
    read's query position. Columns ``layer, seq, head, position, write_pos``, ``carrier_weight``
    (the weight on those positions; signed for differential maps), ``is_argmax`` (the head's
    largest weight lies on one of them, strictly above every other key; an all-zero row is
    False) and ``n_carriers`` (how many the read could attend to). A head that retrieves the
    bit scores 1 however many layers it took to get there.

    ``carriers``: ``{layer: [n, T]}`` for every layer of ``maps``, computed from ``maps``
    when None (which then must hold every layer from 0). ``maps`` are ``[batch, head,
    query_pos, key_pos]``; ``tokens`` ``[n, T]`` are what the model read.

    The project's probe, flip-flop paper (``002_cbc1a16af32b4280.txt``) Fig. 5c's ideal head carried
    to models of several layers; on ``hook_pattern`` (or a view), at the reads' rows.
    """
    tokens, layers, min_share = _ids(tokens, "tokens"), by_layer(maps), _share("min_share", min_share)
    if carriers is None:
        carriers = bit_carriers(layers, tokens, min_share)
    elif not isinstance(carriers, dict) or not set(layers) <= set(carriers):
        raise ValueError(f"carriers must be a dict {{layer: [n, T] bool}} for every layer of maps ({sorted(layers)}), "
                         f"got {validate.shown(carriers)}")
    else:
        carriers = {layer: _carriers(carriers[layer], tokens, f"carriers[{layer}]") for layer in layers}
    seq, position = np.nonzero(read_mask(tokens))
    write_pos = last_write_positions(tokens)[seq, position]
    segment = _segment(tokens)[seq, position]                                # [read, key_pos]
    parts = []
    for layer, a in layers.items():
        if a.shape[0] != tokens.shape[0] or a.shape[-1] != tokens.shape[1]:
            raise ValueError(f"layer {layer}: map {tuple(a.shape)} does not match tokens {tokens.shape}")
        on = (segment & torch.as_tensor(carriers[layer])[seq])[:, None, :]   # [read, 1, key_pos]
        rows = a[torch.as_tensor(seq).to(a.device), :, torch.as_tensor(position).to(a.device), :].float().cpu()
        rows = rows.masked_fill(~causal(a.shape[-1])[position][:, None, :], float("-inf"))
        weight = rows.masked_fill(~on, 0.0).sum(-1)
        is_argmax = rows.masked_fill(~on, float("-inf")).amax(-1) > rows.masked_fill(on, float("-inf")).amax(-1)
        n_reads, n_heads = weight.shape
        parts.append(pd.DataFrame({
            "layer": layer, "seq": np.repeat(seq, n_heads), "head": np.tile(np.arange(n_heads), n_reads),
            "position": np.repeat(position, n_heads), "write_pos": np.repeat(write_pos, n_heads),
            "carrier_weight": weight.reshape(-1).numpy(), "is_argmax": is_argmax.reshape(-1).numpy(),
            "n_carriers": np.repeat(on.sum(-1).reshape(-1).numpy(), n_heads),
        }))
    return pd.concat(parts, ignore_index=True)


def bit_carrier_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per layer and head, from :func:`bit_carrier_attention`: ``bit_carrier_weight`` (mean
    weight on the positions holding the last write's bit) and ``bit_carrier_argmax_rate``
    (fraction of reads whose largest weight lies on one of them).

    A helper, no paper quantity of its own: per-head means of :func:`bit_carrier_attention`.
    """
    return _per_head_means(table, {"carrier_weight": "bit_carrier_weight", "is_argmax": "bit_carrier_argmax_rate"})


def automaton_write_positions(inputs) -> Int[np.ndarray, "*batch pos"]:
    """For automaton inputs ``[..., T]``, the index of the most recent write (sigma_0 or sigma_1)
    at or before each position, ``-1`` before the first: the key the ideal head attends to.

    A helper of :func:`automaton_write_attention` (flip-flop paper (``002_cbc1a16af32b4280.txt``)
    Def. 1: the state is the last write's symbol); on automaton input ids.
    """
    inputs = np.asarray(validate.array("inputs", inputs, "integer", (1, 2, 3, 4), lists=True))
    pos = np.arange(inputs.shape[-1])
    return np.maximum.accumulate(np.where(inputs != BOTTOM, pos, -1), axis=-1)


def automaton_write_attention(maps: Maps, inputs: Tokens) -> pd.DataFrame:
    """Flip-flop automaton (Def. 1): for every position and head, the weight on the most recent
    write (sigma_0 or sigma_1) at or before it, where the ideal 1-layer head of the flip-flop
    paper's Fig. 5c / 16b puts all of it. Columns ``layer, seq, head, position, write_pos``,
    ``weight`` = A[position, write_pos] and ``is_argmax`` (that key's weight is strictly above
    every other key's). Positions before the first write have ``write_pos`` -1, weight NaN.

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Def. 1, Fig. 5c and 16b; on
    ``hook_pattern`` of a model run on automaton inputs.
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


def sharp_share(table: pd.DataFrame, threshold: float = 0.99) -> pd.DataFrame:
    """From a :func:`last_write_attention` or :func:`automaton_write_attention` table: per layer,
    the share of reads (positions, for the automaton) at which some head puts at least
    ``threshold`` of its weight on the most recent write, the hard attention the flip-flop
    paper's sharpening regularisers promote (Sec. 5.2, R8). Positions before any write are left
    out. Columns ``layer, n, sharp, share``.

    Source: flip-flop paper (``002_cbc1a16af32b4280.txt``) Sec. 5.2 (R8); on the probe tables'
    weights (``hook_pattern``).
    """
    threshold = _share("threshold", threshold)
    table = validate.frame("table", table, ("layer", "seq", "position", "weight")).dropna(subset=["weight"])
    best = table.groupby(["layer", "seq", "position"]).weight.max()
    sharp = (best >= threshold).groupby(level="layer")
    return pd.DataFrame({"n": sharp.size(), "sharp": sharp.sum()}).reset_index().assign(
        share=lambda f: f.sharp / f.n)


def mean_by_key_token(maps: Maps, tokens: Tokens, name: str = "pattern") -> pd.DataFrame:
    """The mean of a map over the causal entries whose key is each flip-flop token (``w``, ``r``,
    ``i``, ``0``, ``1``), per layer and head: which tokens a head attends to, or which tokens a
    CoPE head counts when the map is its gates (CoPE paper Fig. 6). Column ``key_token``; NaN
    for a token absent from the batch.

    Source: CoPE paper (``004_48497b25c7e609ea.txt``) Fig. 6 (the gates per key token); on
    ``hook_gates`` (CoPE) or ``hook_pattern``.
    """
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

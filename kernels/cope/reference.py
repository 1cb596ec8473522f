"""Contextual Position Encoding (CoPE paper Sec. 4 and App. B, eq. 3-9) in plain PyTorch: the
spec that ``kernels.cope.rows`` is tested against, and what ``models.attention.cope`` runs, with
its hooks, whenever a hook, dropout or separate gate keys need the full ``[query, key]`` matrices.
The choices where the paper is loose are documented there."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_products,
                            suffix_sum, through, upcast)


def interpolate(q: Float[Tensor, "batch query_pos head d_head"], p: Float[Tensor, "batch head query_pos key_pos"],
                pos_emb: Float[Tensor, "p_max d_head"]) -> Float[Tensor, "batch head query_pos key_pos"]:
    """z_i[p_ij] ``[batch, head, query_pos, key_pos]`` from q, positions p and the position
    embeddings ``pos_emb [p_max, d_head]`` (eq. 7-8)."""
    z_int = torch.einsum("bqhd,pd->bhqp", upcast(q), upcast(pos_emb))  # eq. 7
    p_floor, p_ceil = p.floor(), p.ceil()
    w = p - p_floor
    return z_int.gather(-1, p_ceil.long()) * w + z_int.gather(-1, p_floor.long()) * (1 - w)  # eq. 8


def cope_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                   v: Float[Tensor, "batch pos head d_head"],
                   pos_emb: Float[Tensor, "p_max d_head"], k_gate: Float[Tensor, "batch pos head d_head"] | None = None,
                   hooks: Hooks = NO_HOOKS, drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """``q, k, v [batch, pos, head, d_head]`` and ``pos_emb [p_max, d_head]`` -> ``z``; the gates
    come from ``k_gate`` when given (``sep_keys``), else from S. Every ``[query, key]`` tensor
    passes through the hook of its name (``models.attention.cope``)."""
    mask = causal_mask(q.shape[1], k.shape[1], q.device)
    S = through(hooks, "hook_attn_scores", scaled_products(q, k))
    # App. B reuses S, so an edit of hook_attn_scores also moves the gates
    gate_logits = S if k_gate is None else scaled_products(q, k_gate)
    g = through(hooks, "hook_gates", torch.where(mask, torch.sigmoid(gate_logits), 0.0))  # eq. 3
    p = through(hooks, "hook_positions", suffix_sum(g).clamp(max=pos_emb.shape[0] - 1))  # eq. 4
    z = through(hooks, "hook_pos_logits", interpolate(q, p, pos_emb))  # eq. 7-8
    logits = through(hooks, "hook_attn_logits", drop_logits(S + z).masked_fill(~mask, MASK_FILL))
    A = through(hooks, "hook_pattern", torch.softmax(logits, dim=-1))  # eq. 9
    return apply_pattern(A, v)

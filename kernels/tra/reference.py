"""Threshold Relative Attention (TRA paper, Sec. 2, eq. 1-12) in plain PyTorch: the spec that
``kernels.tra.rows`` and ``kernels.tra.triton`` are tested against, and what
``models.attention.tra`` runs, with its hooks, whenever a hook or dropout needs the full
``[query, key]`` matrices."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_scores,
                            suffix_sum, through, upcast)


def contextual_distance(M: Float[Tensor, "*batch query_pos key_pos"]) -> Float[Tensor, "*batch query_pos key_pos"]:
    """D-bar (eq. 6-7): ``D_bar_ij = sum_{k >= j} M_ik``, shown as 0 where ``M_ij = 0``.

    ``M [..., query_pos, key_pos]`` (0/1 floats, future keys already 0) -> same shape. The
    count includes key j itself, so the nearest surviving key is at distance 1 (eq. 7).
    D-bar is piecewise constant in the scores: no gradient flows through it.
    """
    return suffix_sum(M) * M


def tra_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                  v: Float[Tensor, "batch pos head d_head"],
                  log_delta: Float[Tensor, "batch head pos"], hooks: Hooks = NO_HOOKS,
                  drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """``q, k, v [batch, pos, head, d_head]`` (q, k already normalised or rotated) and
    ``log_delta [batch, head, pos]`` -> ``z [batch, pos, head, d_head]``, every ``[query, key]``
    tensor in float32 and passed through the hook of its name (``models.attention.tra``
    lists them); ``drop_logits`` is the attention dropout, applied to the logits before the
    removed keys are filled."""
    n_pos = q.shape[1]
    S = through(hooks, "hook_attn_scores", scaled_scores(q, k))  # eq. 1
    S_thr = through(hooks, "hook_thresholded", F.relu(S))  # eq. 3
    M = through(hooks, "hook_mask", ((S_thr > 0) & causal_mask(n_pos, n_pos, q.device)).to(S.dtype))  # eq. 4
    D_bar = through(hooks, "hook_dbar", contextual_distance(M))  # eq. 6-7
    log_decay = through(hooks, "hook_log_decay", D_bar * upcast(log_delta)[..., None])  # eq. 9, in log space
    removed = M == 0
    A_bar = through(hooks, "hook_attn_logits",
                    drop_logits(S_thr + log_decay).masked_fill(removed, MASK_FILL))  # eq. 10-11
    # eq. 12; zeroing the removed keys also empties the rows with no surviving key
    A = through(hooks, "hook_pattern", torch.softmax(A_bar, dim=-1).masked_fill(removed, 0.0))
    return apply_pattern(A, v)

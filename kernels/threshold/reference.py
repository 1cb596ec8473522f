"""Threshold rectified attention (``trela``) and threshold differential attention (``tda``),
TDA paper Sec. 4.1-4.2, in plain PyTorch: the spec that ``kernels.threshold.rows`` and
``kernels.threshold.triton`` are tested against, and what ``models.attention.tda`` runs, with
its hooks, whenever a hook or dropout needs the full ``[query, key]`` matrices.

Both return ``sum_j pattern_ij v_j`` BEFORE the per-head output RMSNorm (the part a fused
kernel computes), in v's dtype; the model applies the norm. q and k come RoPE'd and
L2-normalised, so a score is a cosine with no further scale: the threshold tau carries the
1/sqrt(d) (eq. 1, :func:`kernels.tooling.common.threshold`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, causal_mask, check_map_size, no_dropout, threshold, through,
                            upcast)

# beta and lambda: one per layer, or one per head
PerHead = Float[Tensor, ""] | Float[Tensor, "head"]


def unscaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """s_ij = <q~_i, k~_j> ``[batch, head, query_pos, key_pos]`` in float32."""
    check_map_size(q, k)
    return upcast(torch.einsum("bqhd,bkhd->bhqk", q, k))


def thresholded(S, tau, mask, drop_logits) -> torch.Tensor:
    """s_ij - tau_i for j <= i, future keys at ``MASK_FILL``: what :func:`rectify` reads
    (through the attention dropout, in training: a dropped key gets weight 0)."""
    return drop_logits(S - tau[..., None]).masked_fill(~mask, MASK_FILL)


def rectify(thresholded: torch.Tensor, p: float) -> torch.Tensor:
    """a_ij = (s_ij - tau_i)_+^p, exactly 0 for future keys (at the fill)."""
    return F.relu(thresholded) ** p


def aggregate(pattern: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """sum_j pattern_ij v_j in float32, returned in v's dtype."""
    return torch.einsum("bhqk,bkhd->bqhd", pattern, upcast(v)).to(v.dtype)


def tau_of(q, beta, kappa, hooks: Hooks) -> torch.Tensor:
    """tau ``[batch, head, query_pos]`` (eq. 1) for q's shape, through ``hook_threshold``."""
    B, T, H, D = q.shape
    return through(hooks, "hook_threshold", threshold(T, D, beta, kappa).expand(B, H, T))


def threshold_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                        v: Float[Tensor, "batch pos head d_head"], beta: PerHead, kappa=1.0, p: float = 2.0,
                        hooks: Hooks = NO_HOOKS, drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """trela (Sec. 4.1): ``sum_j (s_ij - tau_i)_+^p v_j`` from unit ``q, k [batch, pos, head,
    d_head]``, v and beta (a tensor: one per layer, or one per head)."""
    mask = causal_mask(q.shape[1], k.shape[1], q.device)
    tau = tau_of(q, beta, kappa, hooks)  # eq. 1
    S = through(hooks, "hook_attn_scores", through(hooks, "hook_scores_1", unscaled_scores(q, k)))
    logits = through(hooks, "hook_attn_logits", thresholded(S, tau, mask, drop_logits))
    A = through(hooks, "hook_pattern", through(hooks, "hook_view_1", rectify(logits, p)))
    return aggregate(A, v)


def differential_threshold_reference(q1: Float[Tensor, "batch pos head d_head"],
                                     k1: Float[Tensor, "batch pos head d_head"],
                                     q2: Float[Tensor, "batch pos head d_head"],
                                     k2: Float[Tensor, "batch pos head d_head"],
                                     v: Float[Tensor, "batch pos head d_head"], beta: PerHead, lam: PerHead,
                                     kappa=1.0, p: float = 2.0, hooks: Hooks = NO_HOOKS,
                                     drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """TDA (Sec. 4.2): ``sum_j (a1_ij - lam a2_ij) v_j``, the two views sharing tau, p and V,
    with ``lam`` the inhibition strength (a tensor: one per layer, or one per head)."""
    mask = causal_mask(q1.shape[1], k1.shape[1], q1.device)
    tau = tau_of(q1, beta, kappa, hooks)  # eq. 1
    S1 = through(hooks, "hook_attn_scores", through(hooks, "hook_scores_1", unscaled_scores(q1, k1)))
    S2 = through(hooks, "hook_scores_2", unscaled_scores(q2, k2))
    logits_1 = through(hooks, "hook_attn_logits", thresholded(S1, tau, mask, drop_logits))
    A1 = through(hooks, "hook_view_1", rectify(logits_1, p))
    A2 = through(hooks, "hook_view_2", rectify(thresholded(S2, tau, mask, drop_logits), p))
    lam = through(hooks, "hook_lambda", lam.expand(q1.shape[0], q1.shape[2]))
    A = through(hooks, "hook_pattern", A1 - lam[..., None, None] * A2)  # Delta a, Sec. 4.2
    return aggregate(A, v)

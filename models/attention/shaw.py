"""Relative position representations (Shaw et al., 2018): the CoPE paper's "Relative PE" (its eq. 1).

A learned vector per relative distance is added to the keys, and optionally to the values:

    e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_head)                 (Shaw et al. eq. 4; CoPE paper eq. 1)
    a_ij = softmax_j(e_ij) over the keys j <= i
    z_i  = sum_j a_ij (v_j + a^V_ij)                             (Shaw et al. eq. 3; a^V only with ``values``)
    a^K_ij = w^K[clip(i - j, K)],  a^V_ij = w^V[clip(i - j, K)],  clip(x, K) = min(x, K)

Shaw et al. index the table by ``j - i`` clipped to ``[-K, K]``; a causal model sees only
``j <= i``, so ``i - j`` in ``[0, K]`` (the CoPE paper's ``e[i - j]``) names the same half of
it. ``K`` (``max_distance``) defaults to ``n_ctx - 1``: every distance of the training length has
a vector of its own, as the CoPE paper's Relative PE, and longer distances share the last one (its
"relative-capped"). The tables ``w^K, w^V [K + 1, d_head]`` are shared by the heads of a layer
(Shaw et al. Sec. 3.3) and start at zero (CoPE's position table does too), so an untrained layer
is plain softmax attention.

Unlike the T5-style scalar bias of ``rel`` (one number per head and distance), the positional
term ``q_i . a^K_ij`` depends on the query: a token can ask for a distance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.tooling.common import MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_products, through
from models.attention.base import Attention, register
from models.attention.softmax import sdpa_attention


@dataclass
class ShawOptions:
    max_distance: int | None = None   # K, the clipping distance; None: n_ctx - 1
    values: bool = False              # also add a^V_ij to the values


def clipped_distance(n_pos: int, max_distance: int, device=None) -> Int[Tensor, "query_pos key_pos"]:
    """``clip(i - j, K) = min(i - j, K)`` for the keys ``j <= i``, 0 on the future keys (masked later)."""
    pos = torch.arange(n_pos, device=device)
    return (pos[:, None] - pos[None, :]).clamp(min=0, max=max_distance)


def relative_logits(q: Float[Tensor, "batch pos head d_head"], w_k: Float[Tensor, "distance d_head"]
                    ) -> Float[Tensor, "batch head query_pos key_pos"]:
    """The positional term of e_ij, ``q_i . a^K_ij / sqrt(d_head)``: each query against each row of
    ``w^K`` once (``[batch, head, query, K + 1]``), then read at every pair's clipped distance."""
    n_pos, d_head = q.shape[1], q.shape[-1]
    by_distance = torch.einsum("bqhd,rd->bhqr", q.float(), w_k.float()) / d_head ** 0.5
    distance = clipped_distance(n_pos, w_k.shape[0] - 1, q.device)
    return by_distance.gather(-1, distance.expand(*by_distance.shape[:2], n_pos, n_pos))


def shaw_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                   v: Float[Tensor, "batch pos head d_head"], D: Float[Tensor, "batch head query_pos key_pos"],
                   w_v: Float[Tensor, "distance d_head"] | None = None, hooks: Hooks = NO_HOOKS,
                   drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """The equations of the module docstring, from ``q, k, v`` and ``D = q_i . a^K_ij / sqrt(d)``
    (:func:`relative_logits`); ``w_v`` the value table (None: no a^V)."""
    n_pos = q.shape[1]
    mask = causal_mask(n_pos, n_pos, q.device)
    S = through(hooks, "hook_attn_scores", scaled_products(q, k))                      # q_i k_j^T / sqrt(d)
    e = through(hooks, "hook_attn_logits", drop_logits(S + D).masked_fill(~mask, MASK_FILL))  # e_ij
    a = through(hooks, "hook_pattern", torch.softmax(e, dim=-1))                        # a_ij
    z = apply_pattern(a, v)                                                            # sum_j a_ij v_j
    if w_v is not None:
        a_v = w_v[clipped_distance(n_pos, w_v.shape[0] - 1, q.device)]                   # a^V_ij [q, k, d]
        z = z + torch.einsum("bhqk,qkd->bqhd", a.to(v.dtype), a_v.to(v.dtype))          # + sum_j a_ij a^V_ij
    return z


@register("shaw")
class ShawAttention(Attention):
    """Extra hook: ``hook_pos_logits`` (``q_i . a^K_ij / sqrt(d_head)``, ``[batch, head, query_pos,
    key_pos]``, as CoPE's ``q_i . e[p_ij]``). ``hook_attn_scores`` is the content term alone,
    ``hook_attn_logits`` e_ij (future keys at the fill), ``hook_pattern`` a_ij. Without ``values``
    and without hooks inside the core, the softmax runs through PyTorch's fused attention with the
    positional term as its additive mask (``sdpa``)."""

    Options = ShawOptions
    IMPLEMENTATIONS = {"reference": shaw_reference, "sdpa": sdpa_attention}
    # The positional term is computed before the core, so the fused path passes it through its hook too.
    OUTER_HOOKS = Attention.OUTER_HOOKS | {"hook_pos_logits"}

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        K = cfg.n_ctx - 1 if self.options.max_distance is None else self.options.max_distance
        if not isinstance(K, int) or K < 1:
            raise ValueError(f"shaw needs max_distance >= 1 (or none for n_ctx - 1), got {K!r}")
        self.w_k = nn.Parameter(torch.zeros(K + 1, cfg.d_head))
        if self.options.values:
            self.w_v = nn.Parameter(torch.zeros(K + 1, cfg.d_head))
            self.IMPLEMENTATIONS = {"reference": shaw_reference}   # a^V needs the weights a_ij themselves
        self.hook_pos_logits = HookPoint()

    def core_options(self) -> dict:
        return {"w_v": self.w_v} if self.options.values else {}

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        D = self.hook_pos_logits(relative_logits(q, self.w_k))
        return self.core(self.implementation(q.device), positions)(q, k, v, D)

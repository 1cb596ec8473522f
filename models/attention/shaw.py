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

from kernels.tooling import native
from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_products,
                                    through, upcast)
from kernels.tooling.rows import mask_future_, needs_grad, softmax_rows
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


def distance_logits(q: Float[Tensor, "batch pos head d_head"], w_k: Float[Tensor, "distance d_head"]
                    ) -> Float[Tensor, "batch head query_pos distance"]:
    """``q_i . w^K_r / sqrt(d_head)``: each query against each row of ``w^K`` once, in at least float32."""
    return torch.einsum("bqhd,rd->bhqr", upcast(q), upcast(w_k)) / q.shape[-1] ** 0.5


def relative_logits(q: Float[Tensor, "batch pos head d_head"], w_k: Float[Tensor, "distance d_head"]
                    ) -> Float[Tensor, "batch head query_pos key_pos"]:
    """The positional term of e_ij, ``q_i . a^K_ij / sqrt(d_head)``: :func:`distance_logits` read
    at every pair's clipped distance."""
    n_pos, by_distance = q.shape[1], distance_logits(q, w_k)
    distance = clipped_distance(n_pos, w_k.shape[0] - 1, q.device)
    return by_distance.gather(-1, distance.expand(*by_distance.shape[:2], n_pos, n_pos))


class ShawRule:
    """Shaw's logits ``S_ij + q_i . a^K_ij / sqrt(d)`` for the CPU path's blocks of query rows
    (:class:`kernels.tooling.rows.SoftmaxRowsFunction`), read off ``inputs = (by_distance [bh, pos,
    K + 1],)`` (:func:`distance_logits`) at each pair's clipped distance: no ``[query, key]`` map
    beyond a block's, where the fused attention takes the whole positional term as its mask and
    computes its gradient over every pair, future ones included."""

    BATCHED = (True,)

    @staticmethod
    def distances(rows: slice, n_keys: int, n_dist: int, like: torch.Tensor) -> torch.Tensor:
        """``[bh, rows, keys]`` ``min(i - j, K)`` of a block (0 on future keys, which are masked)."""
        i = torch.arange(rows.start, rows.stop, device=like.device)[:, None]
        distance = (i - torch.arange(n_keys, device=like.device)).clamp_(0, n_dist - 1)
        return distance.expand(like.shape[0], *distance.shape)

    @staticmethod
    def logits(S, rows, by_distance):
        distance = ShawRule.distances(rows, S.shape[-1], by_distance.shape[-1], S)
        return mask_future_(S.add_(by_distance[:, rows].gather(-1, distance)), rows, MASK_FILL), None, None

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        distance = ShawRule.distances(rows, dL.shape[-1], inputs[0].shape[-1], dL)
        grads[0][:, rows].scatter_add_(-1, distance, dL)
        return dL


class NativeShawRule:
    """:class:`ShawRule` in training on the CPU in float32, each block's logits and their gradient
    in one pass of a C kernel (:func:`kernels.tooling.native.shaw_logits_`), without the index maps."""

    BATCHED = (True,)

    @staticmethod
    def logits(S, rows, by_distance):
        return native.shaw_logits_(S, by_distance, rows.start), None, None

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        native.shaw_backward(dL, rows.start, grads[0])
        return dL


def shaw_rows(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
              v: Float[Tensor, "batch pos head d_head"], by_distance: Float[Tensor, "batch head pos distance"]
              ) -> Float[Tensor, "batch pos head d_head"]:
    """:func:`shaw_reference`'s ``z`` without ``w_v``, from :func:`distance_logits`, through the CPU
    path's blocks (:class:`NativeShawRule` where it runs, else :class:`ShawRule`): training's path."""
    rows_by_distance = by_distance.to(upcast(q).dtype).reshape(-1, *by_distance.shape[2:]).contiguous()
    rule = NativeShawRule if native.trainable(q, rows_by_distance) else ShawRule
    return softmax_rows(rule, q, k, v, rows_by_distance)


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
    positional term as its additive mask (``sdpa``), and in training on the CPU (gradients wanted,
    nothing on ``hook_pos_logits``) through the CPU path's blocks of rows (:func:`shaw_rows`)."""

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
        impl = self.implementation(q.device)
        if (impl == "sdpa" and positions is None and q.device.type == "cpu" and needs_grad(q, k, v, self.w_k)
                and not self.hook_pos_logits.has_hooks()):   # training on the CPU
            return shaw_rows(q, k, v, distance_logits(q, self.w_k))
        D = self.hook_pos_logits(relative_logits(q, self.w_k))
        return self.core(impl, positions)(q, k, v, D)

"""Causal softmax attention and its positional variants: NoPE, REL, ALiBi, RoPE.

APE and Label encode position in the residual stream (see ``models.backbone``) and use
this mechanism unchanged. ``A = softmax(S + D)`` (TRA paper, eq. 1-2) with D the
positional bias of the variant (zero for NoPE, APE, Label and RoPE).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.tooling import native
from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_products,
                            through, upcast)
from kernels.tooling.rows import at_rows, mask_future_, needs_grad, past_keys, softmax_rows
from models.attention.base import Attention, register


@dataclass
class SoftmaxOptions:
    bias: str = "none"   # "none" | "rel" | "alibi"
    rope: bool = False


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The geometric head slopes of Press et al. (2021): 2^(-8 h / n_heads), h = 1..n_heads."""
    return torch.tensor([2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)])


def softmax_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                      v: Float[Tensor, "batch pos head d_head"],
                      D: Float[Tensor, "batch head query_pos key_pos"] | None = None, hooks: Hooks = NO_HOOKS,
                      drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """``A = softmax(S + D)`` (eq. 1-2) applied to v, from ``q, k, v [batch, pos, head, d_head]``
    and the positional bias ``D [batch, head, query_pos, key_pos]`` (None: no bias); S, the
    logits and A through the hooks of their names."""
    n_pos = q.shape[1]
    mask = causal_mask(n_pos, n_pos, q.device)
    S = through(hooks, "hook_attn_scores", scaled_products(q, k))  # eq. 1
    logits = through(hooks, "hook_attn_logits", drop_logits(S if D is None else S + D).masked_fill(~mask, MASK_FILL))
    A = through(hooks, "hook_pattern", torch.softmax(logits, dim=-1))  # eq. 2
    return apply_pattern(A, v)


def sdpa_attention(q, k, v, D=None, positions=None) -> torch.Tensor:
    """:func:`softmax_reference`'s ``z`` through PyTorch's ``scaled_dot_product_attention``;
    with query ``positions [batch, n]`` only those queries' rows (``[batch, n, head, d]``)."""
    n_pos = q.shape[1]
    if positions is None and D is None:  # no bias to add: the kernel skips the future blocks itself
        z = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return z.transpose(1, 2)
    if positions is None:
        allowed = causal_mask(n_pos, n_pos, q.device)
    else:
        q, allowed = at_rows(q, positions), past_keys(positions, n_pos)
        D = None if D is None else at_rows(D.transpose(1, 2), positions).transpose(1, 2)
    mask = allowed if D is None else D.masked_fill(~allowed, float("-inf")).to(q.dtype)
    z = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return z.transpose(1, 2)


class BiasRule:
    """REL's and ALiBi's logits ``S + D`` for the CPU path's blocks of query rows
    (:class:`kernels.tooling.rows.SoftmaxRowsFunction`), ``inputs = (D [head, pos, pos],)``, one
    bias for every sequence; its gradient summed over the sequences."""

    BATCHED = (False,)

    @staticmethod
    def logits(S, rows, D):
        S.unflatten(0, (-1, D.shape[0])).add_(D[:, rows, :S.shape[-1]])
        return mask_future_(S, rows, MASK_FILL), None, None

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        grads[0][:, rows, :dL.shape[-1]] += dL.unflatten(0, (-1, inputs[0].shape[0])).sum(0)
        return dL


def rows_attention(q, k, v, D=None, positions=None) -> torch.Tensor:
    """The CPU path: :func:`softmax_reference`'s ``z`` through the fused C kernel
    (:func:`kernels.tooling.native.softmax_attention`) where it can run (no bias, built, CPU, no
    gradient wanted); in training with a bias shared by the sequences (REL, ALiBi: D expanded over
    the batch) through the blocks of rows (:class:`BiasRule`), where the fused attention computes
    dense maps, and for REL the bias's gradient over every pair; else :func:`sdpa_attention`."""
    if D is None and native.usable(q, k, v):
        return native.softmax_attention(q, k, v, positions)
    if D is not None and positions is None and D.stride(0) == 0 and needs_grad(q, k, v, D):
        return softmax_rows(BiasRule, q, k, v, upcast(D[0]))
    return sdpa_attention(q, k, v, D, positions)


@register("softmax")
class SoftmaxAttention(Attention):
    """Causal softmax attention.

    REL: a learned scalar per head and distance ``i - j`` (T5-style, initialised to 0);
    distances of ``n_ctx - 1`` or more share the last bucket. ALiBi: ``-slope_h (i - j)``.
    Extra hook: ``hook_pos_bias`` (the bias D, ``[batch, head, query_pos, key_pos]``) for REL/ALiBi;
    ``hook_attn_logits`` is S + D with the future keys at the fill.

    Without hooks on the scores or pattern the product runs through
    ``scaled_dot_product_attention`` (softmax's fast path, whatever the device), or on the CPU
    without gradients and without a bias through the fused C kernel (:mod:`kernels.tooling.native`,
    the ``rows`` path, which ``auto`` picks there), and on the CPU in training with REL's or ALiBi's
    bias through the blocks of rows (:class:`BiasRule`); with them, or
    with ``attention_impl="reference"``, S and A are computed explicitly so the hooks see (and
    may edit) what the model uses. So is it while attention dropout acts: SDPA's ``dropout_p``
    drops weights after the softmax, not the logits.
    """

    ROTARY_HOOKS = True

    Options = SoftmaxOptions
    IMPLEMENTATIONS = {"reference": softmax_reference, "sdpa": sdpa_attention, "rows": rows_attention}

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        if self.options.bias not in ("none", "rel", "alibi"):
            raise ValueError(f"softmax bias must be 'none', 'rel' or 'alibi', got {self.options.bias!r}")
        if self.options.bias == "rel":
            self.rel_bias = nn.Parameter(torch.zeros(cfg.n_heads, cfg.n_ctx))
        if self.options.bias == "alibi":
            self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)
        self.hook_pos_bias = HookPoint()

    def position_bias(self, batch: int, n_pos: int, device) -> torch.Tensor | None:
        """D ``[batch, head, query_pos, key_pos]`` (float32), or None for a bias-free variant."""
        if self.options.bias == "none":
            return None
        pos = torch.arange(n_pos, device=device)
        distance = (pos[:, None] - pos[None, :]).clamp(min=0)
        if self.options.bias == "rel":
            D = upcast(self.rel_bias)[:, distance.clamp(max=self.cfg.n_ctx - 1)]
        else:
            D = -self.slopes[:, None, None] * distance.float()
        return self.hook_pos_bias(D.expand(batch, -1, -1, -1))

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        impl = self.implementation(v.device)
        if self.options.rope:
            rotation = self.rotation_in_kernel(impl, positions, q, k, v) if self.options.bias == "none" else None
            if rotation is not None:
                return native.softmax_attention(q, k, v, positions, rotation)
            q, k = self.rotate_qk(q, k)
        D = self.position_bias(q.shape[0], q.shape[1], q.device)
        return self.core(impl, positions)(q, k, v, D)

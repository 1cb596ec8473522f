"""Differential attention (Ye et al., 2025, "Differential Transformer"), the TRA paper's
``Diff`` baseline, with RoPE.

Each head computes two causal softmax maps from two halves of its query and key and
subtracts them, ``A = A^(1) - lambda A^(2)``, then RMS-normalises its output.

How heads map onto the official code (``MultiheadDiffAttn``): every one of our
``n_heads`` heads is ONE differential head. Its ``d_head`` query (and key) columns are
split in two halves of ``d_head / 2``: the first half is view 1, the second view 2. The
value, ``z`` and ``W_O`` keep the TransformerLens shapes ``[head, d_model, d_head]`` /
``[head, d_head, d_model]``. In the official notation this is ``num_heads = n_heads``
and ``head_dim = d_head / 2`` (value dim ``2 * head_dim = d_head``), i.e. exactly the
official layer for a Transformer of ``2 * n_heads`` heads; the parameter count equals a
softmax layer of the same ``d_model``. We prefer this to "half as many heads" because it
also works for ``n_heads = 1`` (the ``tiny`` and ``mech`` presets) and keeps every hook
in the shapes the rest of the toolkit expects. ``d_head`` must be divisible by 4 (RoPE
rotates each view's ``d_head / 2`` dimensions in pairs).

Without a gradient wanted and without a hook inside the attention core the CPU runs the fused C
kernel (:func:`kernels.tooling.native.diff_attention`, the ``rows`` path); in training the CPU runs
both views in blocks of query rows (:class:`DiffRowsFunction`); on other devices, or without a C
compiler, each view runs through ``scaled_dot_product_attention`` and the two outputs are
subtracted, ``A^(1) V - lambda A^(2) V`` (:func:`sdpa_attention`), whose backward is SDPA's own,
which keeps no ``[query, key]`` map. Every hooked run, attention dropout and
``attention_impl="reference"`` in training compute the maps explicitly (:func:`diff_reference`);
the Table 1 runs were trained on that reference (another path's backward changes the float
rounding: ``attention_impl="reference"`` trains them as they were).

Compared with the official ``MultiheadDiffAttn`` (``Diff-Transformer/multihead_diffattn.py`` of
github.com/microsoft/unilm), which we follow in: the head split above, the view scale
``head_dim^-0.5`` (our ``1/sqrt(d_head / 2)``), ``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) +
lambda_init`` with the four vectors N(0, 0.1^2) shared by a layer's heads, ``lambda_init = 0.8 -
0.6 exp(-0.3 depth)`` with ``depth`` the 0-based layer index, softmax in float32, the output
RMSNorm with eps 1e-5 times ``(1 - lambda_init)``, no biases on the q/k/v projections. At
initialisation lambda is ``lambda_init`` up to the small products of the vectors, in both.

Deviations from the authors' code:

- The per-head output norm has no affine weight (the official ``subln`` has one, initialised
  to 1): a per-dimension scale right before ``W_O`` is absorbed by ``W_O``.
- RoPE layout: the official code rotates adjacent pairs (``apply_rotary_emb(...,
  interleaved=True)``), ours pairs dimension i with i + d/2 ("rotate half",
  ``models.attention.rope``), within each view's ``d_head / 2`` dimensions in both. The two are
  the same rotations up to a fixed permutation of each view's q and k columns, so the models
  they can express, and their distribution at initialisation, are the same. The official
  layer takes its rotary tables from outside; ours uses base 10000.
- Masked keys get the finite ``MASK_FILL`` where the official code adds -inf (after
  ``nan_to_num`` of the scores): the same weights.
- The official layer leaves its projections at ``nn.Linear``'s defaults (its training code
  may initialise them again); ours follow ``cfg.init``.
- The official layer has no dropout; ``cfg.attention_dropout`` (off by default) drops each
  view's logits independently (``models.attention.base``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from transformer_lens.hook_points import HookPoint

from kernels.tooling import native
from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, check_map_size, no_dropout,
                                    scaled_products, through, upcast)
from kernels.tooling.rows import (at_rows, heads_first, heads_last, mask_future_, needs_grad, past_keys, row_blocks,
                                  softmax_weights)
from models.attention.base import Attention, register, rms_normalise
from models.attention.rope import apply_rope

OUTPUT_NORM_EPS = 1e-5  # the official subln's eps


def lambda_init_fn(layer: int) -> float:
    """lambda_init = 0.8 - 0.6 exp(-0.3 l) for the 0-based layer index l (Ye et al.; official code)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def diff_reference(q1: Float[Tensor, "batch pos head d_view"], k1: Float[Tensor, "batch pos head d_view"],
                   q2: Float[Tensor, "batch pos head d_view"], k2: Float[Tensor, "batch pos head d_view"],
                   v: Float[Tensor, "batch pos head d_head"], lam: Float[Tensor, ""], hooks: Hooks = NO_HOOKS,
                   drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """``(A^(1) - lambda A^(2)) V`` (eq. 1) from each view's (rotated) q and k ``[batch, pos,
    head, d_head / 2]``, ``v [batch, pos, head, d_head]`` and ``lam`` (one per layer), every map
    through the hook of its name."""
    mask = causal_mask(q1.shape[1], k1.shape[1], q1.device)
    S1 = through(hooks, "hook_attn_scores", through(hooks, "hook_scores_1", scaled_products(q1, k1)))
    S2 = through(hooks, "hook_scores_2", scaled_products(q2, k2))
    logits_1 = through(hooks, "hook_attn_logits", drop_logits(S1).masked_fill(~mask, MASK_FILL))
    A1 = through(hooks, "hook_view_1", torch.softmax(logits_1, dim=-1))  # Ye et al. eq. 1
    A2 = through(hooks, "hook_view_2", torch.softmax(drop_logits(S2).masked_fill(~mask, MASK_FILL), dim=-1))
    lam = through(hooks, "hook_lambda", lam.expand(q1.shape[0], q1.shape[2]))  # eq. 2
    A = through(hooks, "hook_pattern", A1 - lam[..., None, None] * A2)  # eq. 1
    return apply_pattern(A, v)


def view_output(q, k, v, positions=None) -> torch.Tensor:
    """One view's ``softmax(S) V`` ``[batch, pos, head, d_head]`` in float32, through
    ``scaled_dot_product_attention`` (causal, scale 1/sqrt(d_view)): no ``[query, key]``
    tensor is kept. q and k are zero-padded to v's width, which leaves S unchanged: PyTorch's
    fused CPU kernel needs one head size for all three (otherwise it falls back to the explicit maps).
    With query ``positions [batch, n]``, only those queries' rows."""
    d_view, width = q.shape[-1], v.shape[-1] - q.shape[-1]
    allowed = None if positions is None else past_keys(positions, k.shape[1])
    q = q if positions is None else at_rows(q, positions)
    q, k = (F.pad(t, (0, width)) for t in (q, k))
    q, k, v = (upcast(t).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None,
                                          scale=d_view ** -0.5).transpose(1, 2)


def sdpa_attention(q1, k1, q2, k2, v, lam, positions=None) -> torch.Tensor:
    """:func:`diff_reference`'s ``z`` as ``A^(1) V - lambda A^(2) V`` (by linearity), each view
    through :func:`view_output` (at query ``positions [batch, n]`` only, if given)."""
    lam = lam.expand(v.shape[0], v.shape[2])[:, None, :, None]  # [batch, 1, head, 1] to scale z
    return (view_output(q1, k1, v, positions) - lam * view_output(q2, k2, v, positions)).to(v.dtype)  # eq. 1


class DiffRowsFunction(torch.autograd.Function):
    """``(lam, q, k, v) -> (A^(1) - lam A^(2)) v`` in the CPU path's blocks of query rows
    (:mod:`kernels.tooling.rows`), q and k the two views stacked ``[2, bh, pos, d_view]`` (q
    scaled): each block's scores of both views in one product at the views' own width, and ONE
    product with v for the signed weights, where two calls of the fused attention each multiply
    q and k padded to v's width and each apply their own weights to v. Backward by hand: a view's
    logits get ``c A (dA - sum_j A dA)`` (c = 1, -lam), lambda ``-sum A^(2) dA``."""

    @staticmethod
    def forward(ctx, lam, q, k, v):
        z, lam_value = torch.empty_like(v), float(lam)
        ctx.blocks = []
        for rows in row_blocks(v.shape[1]):
            S = torch.bmm(q[:, :, rows].flatten(0, 1), k[:, :, :rows.stop].flatten(0, 1).transpose(1, 2))
            A = softmax_weights(mask_future_(S, rows, MASK_FILL), None).unflatten(0, (2, -1))
            z[:, rows] = torch.bmm(torch.add(A[0], A[1], alpha=-lam_value), v[:, :rows.stop])
            ctx.blocks.append((rows, A))
        ctx.save_for_backward(lam, q, k, v)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        lam, q, k, v = ctx.saved_tensors
        dq, dk, dv, d_lam = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(lam)
        coefficients = torch.stack([torch.ones_like(lam), -lam])[:, None, None, None]
        for rows, A in ctx.blocks:
            keys = slice(0, rows.stop)
            dA = torch.bmm(dz[:, rows], v[:, keys].transpose(1, 2))
            dv[:, keys] += torch.bmm(torch.add(A[0], A[1], alpha=-float(lam)).transpose(1, 2), dz[:, rows])
            dL = A * dA                                   # [2, bh, rows, keys]
            row_terms = dL.sum(-1, keepdim=True)          # sum_j A dA, per view and row
            d_lam -= row_terms[1].sum()
            dS = dL.sub_(A * row_terms).mul_(coefficients).flatten(0, 1)
            dq[:, :, rows] = torch.bmm(dS, k[:, :, keys].flatten(0, 1)).unflatten(0, (2, -1))
            dk[:, :, keys] += torch.bmm(dS.transpose(1, 2), q[:, :, rows].flatten(0, 1)).unflatten(0, (2, -1))
        return d_lam, dq, dk, dv


def views_first(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Two views ``[batch, pos, head, d]`` -> ``[2, batch * head, pos, d]`` in at least float32, one copy."""
    both = upcast(torch.stack([a, b]))
    return both.transpose(2, 3).reshape(2, -1, *both.shape[2:3], both.shape[-1])


def rows_training(q1, k1, q2, k2, v, lam) -> torch.Tensor:
    """:func:`diff_reference`'s ``z`` with gradients on the CPU path (:class:`DiffRowsFunction`)."""
    with torch.autocast(v.device.type, enabled=False):
        check_map_size(q1, k1)
        v_rows = heads_first(v)
        z = DiffRowsFunction.apply(lam.to(v_rows.dtype), views_first(q1, q2) * q1.shape[-1] ** -0.5,
                                   views_first(k1, k2), v_rows)
    return heads_last(z, v)


def rows_attention(q1, k1, q2, k2, v, lam, positions=None) -> torch.Tensor:
    """The CPU path: :func:`diff_reference`'s ``z`` through the fused C kernel
    (:func:`kernels.tooling.native.diff_attention`) where it can run (built, CPU, no gradient wanted);
    with gradients (training) through :func:`rows_training`; else :func:`sdpa_attention`."""
    if native.usable(q1, k1, q2, k2, v, lam):
        return native.diff_attention(q1, k1, q2, k2, v, float(lam), positions)
    if positions is None and needs_grad(q1, k1, q2, k2, v, lam):
        return rows_training(q1, k1, q2, k2, v, lam)
    return sdpa_attention(q1, k1, q2, k2, v, lam, positions)


@dataclass
class DiffOptions:
    rope: bool = True


@register("diff")
class DiffAttention(Attention):
    """Extra hooks, ``[batch, head, query_pos, key_pos]`` unless stated:

    - ``hook_scores_1``: view 1's scores ``Q_1 K_1^T / sqrt(d_head / 2)`` (Ye et al. eq. 1;
      the same tensor as ``hook_attn_scores``)
    - ``hook_scores_2``: view 2's scores ``Q_2 K_2^T / sqrt(d_head / 2)`` (eq. 1)
    - ``hook_view_1``: A^(1), the softmax of view 1's scores (eq. 1)
    - ``hook_view_2``: A^(2), the softmax of view 2's scores (eq. 1)
    - ``hook_lambda``: lambda (eq. 2), ``[batch, head]``, one value per layer expanded so that
      every hook has a batch axis

    ``hook_attn_logits`` is view 1's scores with the future keys at the fill, ``hook_pattern``
    the signed ``A^(1) - lambda A^(2)``, and ``hook_z`` the head output RMS-normalised and
    scaled by ``(1 - lambda_init)`` (eq. 3).

    lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, with one set of vectors
    ``lambda_q1, lambda_k1, lambda_q2, lambda_k2`` ``[d_head / 2]`` per layer, shared by
    its heads and initialised N(0, 0.1^2), as in the official code.
    """

    Options = DiffOptions
    IMPLEMENTATIONS = {"reference": diff_reference, "sdpa": sdpa_attention, "rows": rows_attention}
    TL_PATTERN_HOOK = "hook_view_1"  # hook_pattern is the signed difference of the views

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        if self.d_head % 4:
            raise ValueError(f"diff splits each head into two RoPE'd views: d_head={self.d_head} "
                             "must be divisible by 4")
        self.d_view = self.d_head // 2
        self.lambda_init = lambda_init_fn(layer)
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.d_view) * 0.1) for _ in range(4))
        self.hook_scores_1 = HookPoint()
        self.hook_scores_2 = HookPoint()
        self.hook_view_1 = HookPoint()
        self.hook_view_2 = HookPoint()
        self.hook_lambda = HookPoint()

    def score_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """View 1's columns of ``W_Q`` and ``W_K``: ``hook_attn_scores`` is view 1's S."""
        return self.W_Q[..., :self.d_view], self.W_K[..., :self.d_view]

    def rotate(self, t: torch.Tensor) -> torch.Tensor:
        """One view's q or k ``[batch, pos, head, d_view]``, RoPE'd when the option is on."""
        return apply_rope(t) if self.options.rope else t

    def lam(self) -> torch.Tensor:
        """lambda (eq. 2), one value per layer."""
        return (torch.exp(self.lambda_q1 @ self.lambda_k1) - torch.exp(self.lambda_q2 @ self.lambda_k2)
                + self.lambda_init)

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        impl = self.implementation(v.device)
        (q1, q2), (k1, k2) = q.chunk(2, dim=-1), k.chunk(2, dim=-1)
        rotation = self.rotation_in_kernel(impl, positions, q1, k1, v) if self.options.rope else None
        if rotation is not None:
            z = native.diff_attention(q1, k1, q2, k2, v, float(self.lam()), positions, rotation)
        else:
            q1, q2, k1, k2 = (self.rotate(t) for t in (q1, q2, k1, k2))
            z = self.core(impl, positions)(q1, k1, q2, k2, v, self.lam())
        # eq. 3: the fixed (1 - lambda_init) factor aligns gradient scale with a softmax Transformer
        return rms_normalise(z, OUTPUT_NORM_EPS) * (1 - self.lambda_init)

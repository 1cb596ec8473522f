"""Forgetting attention (FoT, Lin et al. 2025): causal softmax with a data-dependent decay, as
a streaming kernel exact against :func:`kernels.forgetting.reference.forgetting_reference`.

``forgetting_attention(q, k, v, log_f) -> z``

- q, k, v: ``[batch, pos, head, d_head]``, float32 / bfloat16 / float16, any strides.
- log_f: ``[batch, head, pos]``, log f_t = logsigmoid(w^T x_t + b) <= 0 (cast to float32).
- z: ``[batch, pos, head, d_head]`` in v's dtype; logits, softmax and accumulation in float32.

With c = cumsum(log_f) in float32 (so D_ij = c_i - c_j = sum_{l=j+1..i} log f_l, zero on
the diagonal), ``logits_ij = q_i . k_j / sqrt(d_head) + D_ij`` for j <= i and
``z_i = sum_j softmax_j(logits_ij) v_j``.

The cumulative sum stays in PyTorch, so autograd turns the kernel's gradient for c into
the one for log_f (a reversed cumulative sum). The kernel's dc_i = sum_j dL_ij - sum_i' dL_i'i,
with dL = dlogits: the first sum comes from the query side of D, the second from the key side.
Backward is FlashAttention-2's: one kernel per query tile for dQ, the query-side sum and
FlashAttention-2's delta_i = dO_i . z_i, then one per key tile for dK, dV and the key-side sum,
both recomputing P from q, k and the saved log-sum-exp. Key tiles after a query tile's diagonal
are never loaded.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.tooling.tiles import (causal_tile, check_heads, head_base, key_tile_meta, key_tile_products, load_row, load_tile,
                           online_softmax_step, per_position, program_tile, row_dot, rows_base, softmax_finish,
                           softmax_forward, softmax_tile_grad, store_row, store_tile)


@triton.jit
def _logits(qk, c_i, c_j, offs_m, offs_n, T, scale):
    """``[BLOCK_M, BLOCK_N]`` float32 logits from the products ``qk = q k^T``, -inf for future
    keys and padding rows."""
    return tl.where(causal_tile(offs_m, offs_n, T), qk * scale + (c_i[:, None] - c_j[None, :]), float("-inf"))


@triton.jit
def _fwd(Q, K, V, C, Z, LSE, sq, sk, sv, sz, T, H, scale,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K, V, C = head_base(K, b, h, sk), head_base(V, b, h, sv), rows_base(C, bh, T)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    c_i = load_row(C, offs_m, T)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = load_tile(K, offs_n, T, sk, D)
        v = load_tile(V, offs_n, T, sv, D)
        logits = _logits(tl.dot(q, tl.trans(k), input_precision=PREC), c_i, load_row(C, offs_n, T), offs_m, offs_n,
                         T, scale)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, logits, v, PREC)
    z, lse = softmax_finish(m_i, l_i, acc)
    store_tile(head_base(Z, b, h, sz), offs_m, T, sz, z, D)
    store_row(rows_base(LSE, bh, T), offs_m, T, lse)


@triton.jit
def _bwd_dkdv(Q, K, V, C, DO, LSE, DELTA, DK, DV, DC_KEY, sq, sk, sv, so, sg, T, H, scale,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    """One key tile: dK, dV (both with strides ``sg``) and sum_i dL_ij."""
    b, h, bh, offs_n = program_tile(H, BLOCK_N)
    Q, K, V, DO = head_base(Q, b, h, sq), head_base(K, b, h, sk), head_base(V, b, h, sv), head_base(DO, b, h, so)
    C, LSE, DELTA = rows_base(C, bh, T), rows_base(LSE, bh, T), rows_base(DELTA, bh, T)
    k = load_tile(K, offs_n, T, sk, D)
    v = load_tile(V, offs_n, T, sv, D)
    c_j = load_row(C, offs_n, T)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    dc_key = tl.zeros([BLOCK_N], tl.float32)
    for start_m in range((tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M, T, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = load_tile(Q, offs_m, T, sq, D)
        do = load_tile(DO, offs_m, T, so, D)
        logits = _logits(key_tile_products(q, k, Q, K, offs_m, offs_n, T, sq, sk, D, PREC), load_row(C, offs_m, T),
                         c_j, offs_m, offs_n, T, scale)
        P = tl.exp(logits - load_row(LSE, offs_m, T)[:, None])
        dL = softmax_tile_grad(P, key_tile_products(do, v, DO, V, offs_m, offs_n, T, so, sv, D, PREC),
                               load_row(DELTA, offs_m, T))
        dv += tl.dot(tl.trans(P).to(do.dtype), do, input_precision=PREC)
        dk += tl.dot(tl.trans(dL).to(q.dtype), q, input_precision=PREC)
        dc_key += tl.sum(dL, axis=0)
    store_tile(head_base(DK, b, h, sg), offs_n, T, sg, dk * scale, D)
    store_tile(head_base(DV, b, h, sg), offs_n, T, sg, dv, D)
    store_row(rows_base(DC_KEY, bh, T), offs_n, T, dc_key)


@triton.jit
def _bwd_dq(Q, K, V, C, Z, DO, LSE, DELTA, DQ, DC_QUERY, sq, sk, sv, sz, so, sg, T, H, scale,
            D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    """One query tile: dQ (strides ``sg``), sum_j dL_ij, and FlashAttention-2's delta_i = dO_i . z_i
    (stored for :func:`_bwd_dkdv`, which runs after it)."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K, V, C = head_base(K, b, h, sk), head_base(V, b, h, sv), rows_base(C, bh, T)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    do = load_tile(head_base(DO, b, h, so), offs_m, T, so, D)
    c_i = load_row(C, offs_m, T)
    lse = load_row(rows_base(LSE, bh, T), offs_m, T)
    delta = row_dot(do, load_tile(head_base(Z, b, h, sz), offs_m, T, sz, D))
    store_row(rows_base(DELTA, bh, T), offs_m, T, delta)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    dc_query = tl.zeros([BLOCK_M], tl.float32)
    for start_n in range(0, tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = load_tile(K, offs_n, T, sk, D)
        v = load_tile(V, offs_n, T, sv, D)
        P = tl.exp(_logits(tl.dot(q, tl.trans(k), input_precision=PREC), c_i, load_row(C, offs_n, T), offs_m, offs_n,
                           T, scale) - lse[:, None])
        dL = softmax_tile_grad(P, tl.dot(do, tl.trans(v), input_precision=PREC), delta)
        dq += tl.dot(dL.to(k.dtype), k, input_precision=PREC)
        dc_query += tl.sum(dL, axis=1)
    store_tile(head_base(DQ, b, h, sg), offs_m, T, sg, dq * scale, D)
    store_row(rows_base(DC_QUERY, bh, T), offs_m, T, dc_query)


class ForgettingAttentionFunction(torch.autograd.Function):
    """``(q, k, v, c, block_m, block_n) -> z`` with c = cumsum(log_f) ``[batch, head, pos]``
    float32 contiguous; see the module docstring. Saves q, k, v, c, z and the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, c, block_m, block_n):
        return softmax_forward(ctx, "fot", _fwd, q, k, v, c, block_m, block_n)

    @staticmethod
    def backward(ctx, dz):
        q, k, v, c, z, lse = ctx.saved_tensors
        B, T, H, D = q.shape
        meta = ctx.meta
        dq, dk, dv = (torch.empty((B, T, H, D), dtype=q.dtype, device=q.device) for _ in range(3))
        delta, dc_key, dc_query = (torch.empty((B, H, T), dtype=torch.float32, device=q.device) for _ in range(3))
        scale = 1.0 / math.sqrt(D)
        strides = (q.stride(), k.stride(), v.stride())
        _bwd_dq[(triton.cdiv(T, meta["BLOCK_M"]), B * H)](q, k, v, c, z, dz, lse, delta, dq, dc_query, *strides,
                                                          z.stride(), dz.stride(), dq.stride(), T, H, scale, **meta)
        _bwd_dkdv[(triton.cdiv(T, meta["BLOCK_N"]), B * H)](q, k, v, c, dz, lse, delta, dk, dv, dc_key, *strides,
                                                            dz.stride(), dq.stride(), T, H, scale,
                                                            **key_tile_meta(meta))
        return dq, dk, dv, dc_query - dc_key, None, None


def forgetting_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_f: torch.Tensor,
                         block_m: int | None = None, block_n: int | None = None) -> torch.Tensor:
    """Causal softmax attention with the forget-gate decay D_ij = sum_{l=j+1..i} log f_l.

    Shapes and semantics in the module docstring; ``block_m``/``block_n`` override the tile
    sizes (powers of two >= 16)."""
    B, T, H, _ = check_heads(q, k, v)
    c = torch.cumsum(per_position(log_f, B, H, T, "log_f"), dim=-1)
    return ForgettingAttentionFunction.apply(q, k, v, c, block_m, block_n)

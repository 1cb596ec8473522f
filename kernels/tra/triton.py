"""Threshold Relative Attention (TRA paper, Sec. 2, eq. 1-12) as a streaming kernel, exact
against :func:`kernels.tra.reference.tra_reference`.

``tra_attention(q, k, v, log_delta) -> z``

- q, k, v: ``[batch, pos, head, d_head]``, float32 / bfloat16 / float16, any strides. q and
  k are used as given: the caller applies the per-head RMS normalisation (``qk_norm``) or RoPE.
- log_delta: ``[batch, head, pos]``, log delta_i = logsigmoid(W_f x_i + b) <= 0 (cast to float32).
- z: ``[batch, pos, head, d_head]`` in v's dtype; logits, softmax and accumulation in float32.

Semantics, per query i: ``S = q.k / sqrt(d_head)`` (eq. 1), the survivors are the keys
j <= i with S_ij > 0 (eq. 3-4), ``D_bar_ij`` = the number of survivors j' with j <= j' <= i
(eq. 6, key j itself included), logits ``S_ij + D_bar_ij log delta_i`` over the survivors
only (eq. 10-11), softmax (eq. 12). A row with no survivor outputs exactly 0.

Each query tile walks its key tiles from the diagonal towards position 0 (future tiles are
never loaded), carrying every row's count of survivors already seen to the right, so D-bar
is exact across tile boundaries: inside a tile it is that count plus a right-to-left
cumulative sum of M.

Gradients for q, k, v and log_delta. M and D-bar are piecewise constant in the scores and
pass no gradient; a key that does not survive gets none (ReLU's gradient at 0 taken as 0),
exactly as the reference's autograd. Backward recomputes the tiles from q, k, v and the
saved log-sum-exp with the same walk (the carried count needs it), so one program per query
tile also produces the dK, dV contributions of every key tile it visits and adds them with
float32 atomics: memory stays linear in T, but dK and dV are summed in a nondeterministic
order (differences at float32 rounding level).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.tiles import (causal_tile, check_heads, head_base, load_row, load_tile, online_softmax_step, per_position,
                           program_tile, rows_base, softmax_delta, softmax_finish, softmax_forward, softmax_tile_grad,
                           store_row, store_tile, tile_needed, tile_ptrs, tra_backward_meta)


@triton.jit
def _tile_logits(q, k, log_delta, count, offs_m, offs_n, T, scale, PREC: tl.constexpr):
    """One tile of eq. 1-11 given ``count``, each row's survivors right of the tile:
    logits (-inf where M = 0), M and D-bar."""
    S = tl.dot(q, tl.trans(k), input_precision=PREC) * scale                            # eq. 1
    M = ((S > 0) & causal_tile(offs_m, offs_n, T)).to(tl.int32)                         # eq. 3-4
    D_bar = count[:, None] + tl.cumsum(M, axis=1, reverse=True)                         # eq. 6
    logits = tl.where(M > 0, S + D_bar.to(tl.float32) * log_delta[:, None], float("-inf"))  # eq. 10-11
    return logits, M, D_bar


@triton.jit
def _last_key_tile(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, T):
    """Index of the key tile holding this query tile's last row (its diagonal tile)."""
    return (tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T) - 1) // BLOCK_N


@triton.jit
def _fwd(Q, K, V, LD, Z, LSE, sq, sk, sv, sz, T, H, scale,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
         SKIP_ZERO_TILES: tl.constexpr):
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K, V = head_base(K, b, h, sk), head_base(V, b, h, sv)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    log_delta = load_row(rows_base(LD, bh, T), offs_m, T)
    count = tl.zeros([BLOCK_M], tl.int32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    last = _last_key_tile(BLOCK_M, BLOCK_N, T)
    for step in range(0, last + 1):
        offs_n = (last - step) * BLOCK_N + tl.arange(0, BLOCK_N)
        logits, M, _ = _tile_logits(q, load_tile(K, offs_n, T, sk, D), log_delta, count, offs_m, offs_n, T, scale,
                                    PREC)
        count += tl.sum(M, axis=1)
        if tile_needed(M, SKIP_ZERO_TILES):  # a tile without survivors leaves the softmax state unchanged
            v = load_tile(V, offs_n, T, sv, D)
            m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, logits, v, PREC)           # eq. 12
    z, lse = softmax_finish(m_i, l_i, acc)
    store_tile(head_base(Z, b, h, sz), offs_m, T, sz, z, D)
    store_row(rows_base(LSE, bh, T), offs_m, T, lse)


@triton.jit
def _bwd(Q, K, V, LD, DO, LSE, DELTA, DQ, DK, DV, DLD, sq, sk, sv, so, sg, T, H, scale,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    """One query tile: dQ and dlog_delta stored, dK and dV (float32, all three with strides
    ``sg``) accumulated atomically."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K, V, DK, DV = head_base(K, b, h, sk), head_base(V, b, h, sv), head_base(DK, b, h, sg), head_base(DV, b, h, sg)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    do = load_tile(head_base(DO, b, h, so), offs_m, T, so, D)
    log_delta = load_row(rows_base(LD, bh, T), offs_m, T)
    lse = load_row(rows_base(LSE, bh, T), offs_m, T)
    delta = load_row(rows_base(DELTA, bh, T), offs_m, T)
    count = tl.zeros([BLOCK_M], tl.int32)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    d_log_delta = tl.zeros([BLOCK_M], tl.float32)
    last = _last_key_tile(BLOCK_M, BLOCK_N, T)
    for step in range(0, last + 1):
        offs_n = (last - step) * BLOCK_N + tl.arange(0, BLOCK_N)
        k = load_tile(K, offs_n, T, sk, D)
        v = load_tile(V, offs_n, T, sv, D)
        logits, M, D_bar = _tile_logits(q, k, log_delta, count, offs_m, offs_n, T, scale, PREC)
        count += tl.sum(M, axis=1)
        P = tl.exp(logits - lse[:, None])
        dL = softmax_tile_grad(P, tl.dot(do, tl.trans(v), input_precision=PREC), delta)
        d_log_delta += tl.sum(dL * D_bar.to(tl.float32), axis=1)
        dq += tl.dot(dL.to(k.dtype), k, input_precision=PREC)
        key_rows = offs_n[:, None] < T
        tl.atomic_add(tile_ptrs(DK, offs_n, sg, D), tl.dot(tl.trans(dL).to(q.dtype), q, input_precision=PREC) * scale,
                      mask=key_rows)
        tl.atomic_add(tile_ptrs(DV, offs_n, sg, D), tl.dot(tl.trans(P).to(do.dtype), do, input_precision=PREC),
                      mask=key_rows)
    store_tile(head_base(DQ, b, h, sg), offs_m, T, sg, dq * scale, D)
    store_row(rows_base(DLD, bh, T), offs_m, T, d_log_delta)


class TRAAttentionFunction(torch.autograd.Function):
    """``(q, k, v, log_delta, block_m, block_n, skip_zero_tiles) -> z`` with log_delta
    ``[batch, head, pos]`` float32 contiguous; see the module docstring. Saves q, k, v,
    log_delta, z and the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, log_delta, block_m, block_n, skip_zero_tiles):
        return softmax_forward(ctx, _fwd, q, k, v, log_delta, block_m, block_n, SKIP_ZERO_TILES=skip_zero_tiles)

    @staticmethod
    def backward(ctx, dz):
        q, k, v, log_delta, z, lse = ctx.saved_tensors
        B, T, H, D = q.shape
        dq, dk, dv = (torch.zeros((B, T, H, D), dtype=torch.float32, device=q.device) for _ in range(3))
        d_log_delta = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
        _bwd[(triton.cdiv(T, ctx.meta["BLOCK_M"]), B * H)](
            q, k, v, log_delta, dz, lse, softmax_delta(dz, z), dq, dk, dv, d_log_delta,
            q.stride(), k.stride(), v.stride(), dz.stride(), dq.stride(), T, H, 1.0 / math.sqrt(D),
            **tra_backward_meta(ctx.meta))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_log_delta, None, None, None


def tra_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_delta: torch.Tensor,
                  block_m: int | None = None, block_n: int | None = None,
                  skip_zero_tiles: bool = False) -> torch.Tensor:
    """Threshold Relative Attention ``z`` from q, k, v and the forget gate's log.

    Shapes and semantics in the module docstring. ``block_m``/``block_n`` override the tile
    sizes (powers of two >= 16); ``skip_zero_tiles`` skips the V load and P V product of
    key tiles without a survivor in the forward pass (exact; whether it pays depends on
    the sparsity, see ``kernels.bench.zero_tile_fraction``)."""
    B, T, H, _ = check_heads(q, k, v)
    return TRAAttentionFunction.apply(q, k, v, per_position(log_delta, B, H, T, "log_delta"), block_m, block_n,
                                      skip_zero_tiles)

"""Threshold rectified attention (``trela``) and threshold differential attention (``tda``),
TDA paper Sec. 4 and App. C, as streaming kernels, exact against ``kernels.threshold.reference``.

``threshold_attention(q, k, v, beta, kappa=1.0, p=2.0) -> z``
``differential_threshold_attention(q1, k1, q2, k2, v, beta, lam, kappa=1.0, p=2.0) -> z``

- q*, k*, v: ``[batch, pos, head, d_head]``, float32 / bfloat16 / float16, any strides; q and
  k are used as given (the models pass them RoPE'd and L2-normalised).
- beta, lam: Python floats or float tensors, scalar (one per layer, as the models) or ``[head]``;
  kappa: float or scalar tensor; p >= 1 a float (1 and 2 are exact products, other values
  go through exp2/log2). None of them is read back to the host.
- z: ``[batch, pos, head, d_head]`` in v's dtype, accumulated in float32. It is the sum
  BEFORE the per-head output RMSNorm, which the caller applies.

Semantics, per query i (0-based): ``s_ij = <q_i, k_j>`` with no 1/sqrt(d) (the threshold
carries it), ``tau_i = beta sqrt(2 max(log((i + 1) / kappa), 0) / d_head)`` (eq. 1, the log
clamped at 0 so tau is never NaN for kappa > 1), ``a_ij = (s_ij - tau_i)_+^p`` for j <= i and
exactly 0 for j > i whatever the sign of beta, ``z_i = sum_j a_ij v_j``: no softmax, no
normalisation. The differential form uses ``a1 - lam a2`` (both views with the same tau and
p) in a single P V product, loading V once.

Gradients for every q, k, v, for lam (``-sum_ij dA_ij a2_ij``) and, through tau, for beta
(the kernel returns ``dtau_i = -sum_j ds_ij`` summed over the views; tau itself is computed
by PyTorch, :func:`kernels.tooling.common.threshold`, so a kappa tensor that requires grad gets one
too, with its caveat that sqrt's derivative is infinite where the clamped log is 0). At s_ij = tau_i exactly the
rectifier's gradient is taken as 0, as in PyTorch's ReLU.
Backward is FlashAttention-2's two-kernel split (one program per key tile for dK and dV,
one per query tile for dQ, dtau and dlam), recomputing the tiles from q, k and tau; there
is no log-sum-exp to save.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.tooling.common import threshold
from kernels.tooling.tiles import (causal_tile, check_heads, head_base, key_tile_meta, key_tile_products, launch_meta, load_row,
                           load_tile, program_tile, rows_base, store_row, store_tile, tile_needed)


@triton.jit
def _excess(s, tau, causal):
    """``r = (s_ij - tau_i)_+`` of one tile from its scores ``s = q k^T`` (0 off the causal
    support): a view's weights and their derivatives are functions of r that vanish where it
    does, so a tile whose r is all zero (in every view) adds exactly nothing anywhere."""
    return tl.maximum(tl.where(causal, s - tau[:, None], 0.0), 0.0)


@triton.jit
def _view(r, POWER: tl.constexpr):
    """One view's weights ``a = r^p`` and ``da/ds`` from its rectified scores (:func:`_excess`)."""
    if POWER == 1.0:
        return r, (r > 0).to(tl.float32)
    elif POWER == 2.0:
        return r * r, 2.0 * r
    else:
        r_pos = tl.where(r > 0, r, 1.0)  # keeps log2 and the division finite where a = 0
        a = tl.where(r > 0, tl.exp2(POWER * tl.log2(r_pos)), 0.0)
        return a, tl.where(r > 0, POWER * a / r_pos, 0.0)


@triton.jit
def _view_rows(X1, X2, pos, T, s1, s2, D: tl.constexpr, TWO_VIEWS: tl.constexpr):
    """Rows ``pos`` of a q (or k) of each view, from head-offset pointers; with one view the
    first stands in for the second (never read)."""
    x1 = load_tile(X1, pos, T, s1, D)
    if TWO_VIEWS:
        return x1, load_tile(X2, pos, T, s2, D)
    else:
        return x1, x1


@triton.jit
def _fwd(Q1, K1, Q2, K2, V, TAU, LAM, Z, sq1, sk1, sq2, sk2, sv, sz, T, H,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
         TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    lam = tl.load(LAM + bh)
    q1, q2 = _view_rows(head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), offs_m, T, sq1, sq2, D, TWO_VIEWS)
    tau = load_row(rows_base(TAU, bh, T), offs_m, T)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        causal = causal_tile(offs_m, offs_n, T)
        r1 = _excess(tl.dot(q1, tl.trans(load_tile(K1, offs_n, T, sk1, D)), input_precision=PREC), tau, causal)
        if TWO_VIEWS:
            r2 = _excess(tl.dot(q2, tl.trans(load_tile(K2, offs_n, T, sk2, D)), input_precision=PREC), tau, causal)
        else:
            r2 = r1
        if tile_needed(r1 + r2, SKIP_ZERO_TILES):
            w = _view(r1, POWER)[0]
            if TWO_VIEWS:
                w -= lam * _view(r2, POWER)[0]
            v = load_tile(V, offs_n, T, sv, D)
            acc += tl.dot(w.to(v.dtype), v, input_precision=PREC)
    store_tile(head_base(Z, b, h, sz), offs_m, T, sz, acc, D)


@triton.jit
def _views(s1, s2, tau, causal, POWER: tl.constexpr, TWO_VIEWS: tl.constexpr):
    """Both views of one tile and their derivatives, ``a1, g1, a2, g2`` (with one view, s2 is not
    read and the second pair is the first), and ``support``: non-negative, and zero exactly where
    every one of them is, so that a tile whose support is all zero adds exactly nothing to any
    gradient. (The backward computes the views before its test, unlike the forward: testing the
    rectified scores first kept more tiles live and spilled in the dK/dV kernels at Hopper's
    default tiles.)"""
    a1, g1 = _view(_excess(s1, tau, causal), POWER)
    if TWO_VIEWS:
        a2, g2 = _view(_excess(s2, tau, causal), POWER)
        return a1, g1, a2, g2, a1 + g1 + a2 + g2
    else:
        return a1, g1, a1, g1, a1 + g1


@triton.jit
def _tile_grads(a1, g1, a2, g2, dA, lam, TWO_VIEWS: tl.constexpr):
    """One tile's applied weights w, score gradients ds1 (and ds2) and dA * a2 (lam's gradient
    density) from its views (:func:`_views`) and dA = dO V^T. With one view, ds2 and dA * a2 are
    returned as ds1 and never used."""
    ds1 = dA * g1
    if TWO_VIEWS:
        return a1 - lam * a2, ds1, -lam * dA * g2, dA * a2
    else:
        return a1, ds1, ds1, ds1


@triton.jit
def _bwd_dkdv(Q1, K1, Q2, K2, V, TAU, LAM, DO, DK1, DK2, DV, sq1, sk1, sq2, sk2, sv, so, sg, T, H,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
              TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One key tile: dK1 (dK2) and dV, all with strides ``sg``. With ``SKIP_ZERO_TILES``, a query
    tile where both views and their derivatives are zero loads no dO and runs no product but the
    scores."""
    b, h, bh, offs_n = program_tile(H, BLOCK_N)
    Q1, Q2, DO, TAU = head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), head_base(DO, b, h, so), rows_base(TAU, bh, T)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    lam = tl.load(LAM + bh)
    k1, k2 = _view_rows(K1, K2, offs_n, T, sk1, sk2, D, TWO_VIEWS)
    v = load_tile(V, offs_n, T, sv, D)
    dk1 = tl.zeros([BLOCK_N, D], tl.float32)
    dk2 = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    for start_m in range((tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M, T, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q1, q2 = _view_rows(Q1, Q2, offs_m, T, sq1, sq2, D, TWO_VIEWS)
        s1 = key_tile_products(q1, k1, Q1, K1, offs_m, offs_n, T, sq1, sk1, D, PREC)
        s2 = key_tile_products(q2, k2, Q2, K2, offs_m, offs_n, T, sq2, sk2, D, PREC) if TWO_VIEWS else s1
        a1, g1, a2, g2, support = _views(s1, s2, load_row(TAU, offs_m, T), causal_tile(offs_m, offs_n, T), POWER,
                                         TWO_VIEWS)
        if tile_needed(support, SKIP_ZERO_TILES):
            do = load_tile(DO, offs_m, T, so, D)
            w, ds1, ds2, _ = _tile_grads(a1, g1, a2, g2, key_tile_products(do, v, DO, V, offs_m, offs_n, T, so, sv, D,
                                                                           PREC), lam, TWO_VIEWS)
            dv += tl.dot(tl.trans(w).to(do.dtype), do, input_precision=PREC)
            dk1 += tl.dot(tl.trans(ds1).to(q1.dtype), q1, input_precision=PREC)
            if TWO_VIEWS:
                dk2 += tl.dot(tl.trans(ds2).to(q2.dtype), q2, input_precision=PREC)
    store_tile(head_base(DK1, b, h, sg), offs_n, T, sg, dk1, D)
    store_tile(head_base(DV, b, h, sg), offs_n, T, sg, dv, D)
    if TWO_VIEWS:
        store_tile(head_base(DK2, b, h, sg), offs_n, T, sg, dk2, D)


@triton.jit
def _bwd_dq(Q1, K1, Q2, K2, V, TAU, LAM, DO, DQ1, DQ2, DTAU, DLAM, sq1, sk1, sq2, sk2, sv, so, sg, T, H,
            D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
            TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One query tile: dQ1 (dQ2) with strides ``sg``, dtau_i and the per-row part of dlam. With
    ``SKIP_ZERO_TILES``, a key tile where both views and their derivatives are zero loads no V
    and runs no product but the scores."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    lam = tl.load(LAM + bh)
    q1, q2 = _view_rows(head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), offs_m, T, sq1, sq2, D, TWO_VIEWS)
    do = load_tile(head_base(DO, b, h, so), offs_m, T, so, D)
    tau = load_row(rows_base(TAU, bh, T), offs_m, T)
    dq1 = tl.zeros([BLOCK_M, D], tl.float32)
    dq2 = tl.zeros([BLOCK_M, D], tl.float32)
    dtau = tl.zeros([BLOCK_M], tl.float32)
    dlam = tl.zeros([BLOCK_M], tl.float32)
    for start_n in range(0, tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k1, k2 = _view_rows(K1, K2, offs_n, T, sk1, sk2, D, TWO_VIEWS)
        s1 = tl.dot(q1, tl.trans(k1), input_precision=PREC)
        s2 = tl.dot(q2, tl.trans(k2), input_precision=PREC) if TWO_VIEWS else s1
        a1, g1, a2, g2, support = _views(s1, s2, tau, causal_tile(offs_m, offs_n, T), POWER, TWO_VIEWS)
        if tile_needed(support, SKIP_ZERO_TILES):
            dA = tl.dot(do, tl.trans(load_tile(V, offs_n, T, sv, D)), input_precision=PREC)
            _, ds1, ds2, dA_a2 = _tile_grads(a1, g1, a2, g2, dA, lam, TWO_VIEWS)
            dq1 += tl.dot(ds1.to(k1.dtype), k1, input_precision=PREC)
            dtau -= tl.sum(ds1, axis=1)
            if TWO_VIEWS:
                dq2 += tl.dot(ds2.to(k2.dtype), k2, input_precision=PREC)
                dtau -= tl.sum(ds2, axis=1)
                dlam -= tl.sum(dA_a2, axis=1)
    store_tile(head_base(DQ1, b, h, sg), offs_m, T, sg, dq1, D)
    store_row(rows_base(DTAU, bh, T), offs_m, T, dtau)
    if TWO_VIEWS:
        store_tile(head_base(DQ2, b, h, sg), offs_m, T, sg, dq2, D)
        store_row(rows_base(DLAM, bh, T), offs_m, T, dlam)


class ThresholdAttentionFunction(torch.autograd.Function):
    """``(q1, k1, q2, k2, v, tau, lam, p, block_m, block_n, skip_zero_tiles) -> z``; tau
    ``[batch, head, pos]`` and lam ``[batch, head]`` float32 contiguous. One view when q2 is
    None (then k2 and lam are None too); see the module docstring."""

    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, tau, lam, p, block_m, block_n, skip_zero_tiles):
        two = q2 is not None
        B, T, H, D = q1.shape
        q2, k2, lam = (q2, k2, lam) if two else (q1, k1, tau)  # stand-ins for a second view, never used
        meta = dict(POWER=p, TWO_VIEWS=two,
                    **launch_meta(v.dtype, D, block_m, block_n, v.device, "tda" if two else "trela"))
        z = torch.empty((B, T, H, D), dtype=v.dtype, device=v.device)
        _fwd[(triton.cdiv(T, meta["BLOCK_M"]), B * H)](
            q1, k1, q2, k2, v, tau, lam, z, q1.stride(), k1.stride(), q2.stride(), k2.stride(), v.stride(), z.stride(),
            T, H, SKIP_ZERO_TILES=skip_zero_tiles is not False, **meta)
        ctx.save_for_backward(q1, k1, q2, k2, v, tau, lam)
        ctx.meta = {**meta, "SKIP_ZERO_TILES": skip_zero_tiles is True}
        return z

    @staticmethod
    def backward(ctx, dz):
        q1, k1, q2, k2, v, tau, lam = ctx.saved_tensors
        B, T, H, D = q1.shape
        meta, two = ctx.meta, ctx.meta["TWO_VIEWS"]
        dq1, dk1, dv = (torch.empty((B, T, H, D), dtype=v.dtype, device=v.device) for _ in range(3))
        dtau = torch.empty((B, H, T), dtype=torch.float32, device=v.device)
        # with one view, the first view's buffers stand in for the second's (never written)
        dq2, dk2, dlam = ((torch.empty_like(dq1), torch.empty_like(dk1), torch.empty_like(dtau)) if two
                          else (dq1, dk1, dtau))
        strides = (q1.stride(), k1.stride(), q2.stride(), k2.stride(), v.stride(), dz.stride(), dq1.stride(), T, H)
        _bwd_dkdv[(triton.cdiv(T, meta["BLOCK_N"]), B * H)](q1, k1, q2, k2, v, tau, lam, dz, dk1, dk2, dv,
                                                            *strides, **key_tile_meta(meta))
        _bwd_dq[(triton.cdiv(T, meta["BLOCK_M"]), B * H)](q1, k1, q2, k2, v, tau, lam, dz, dq1, dq2, dtau, dlam,
                                                          *strides, **meta)
        if not two:
            return dq1, dk1, None, None, dv, dtau, None, None, None, None, None
        return dq1, dk1, dq2, dk2, dv, dtau, dlam.sum(-1), None, None, None, None


def _tau(B: int, T: int, H: int, D: int, beta, kappa, device) -> torch.Tensor:
    """tau (eq. 1) as the contiguous float32 ``[batch, head, pos]`` the kernels read."""
    beta = torch.as_tensor(beta, dtype=torch.float32, device=device)
    return torch.broadcast_to(threshold(T, D, beta, kappa), (B, H, T)).contiguous()


def _check_power(p: float) -> float:
    if not p >= 1:
        raise ValueError(f"the power p must be >= 1, got {p}")
    return float(p)


def threshold_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta, kappa=1.0, p: float = 2.0,
                        block_m: int | None = None, block_n: int | None = None,
                        skip_zero_tiles: bool | None = None) -> torch.Tensor:
    """Threshold rectified attention (``trela``): ``sum_j a_ij v_j`` before the output RMSNorm.

    Shapes and semantics in the module docstring. ``block_m``/``block_n`` override the tile
    sizes (powers of two >= 16). Skipping decides per tile, from the tile's largest rectified
    score ``max_ij (s_ij - tau_i)_+`` (one reduction of the scores every tile needs anyway),
    whether anything survives the threshold; a tile where nothing does computes no power, loads
    no V and runs no P V product in the forward pass, and in the backward runs no load or
    product but the scores. Exact, bit for bit: such a tile adds exactly zero to the output and
    to every gradient. ``skip_zero_tiles``: None (the default) skips in the forward pass only,
    True in both passes, False in neither (for comparison: ``kernels.tooling.bench.
    bench_zero_tile_skipping``, ``glitchlens bench tiles CKPT --skip-gain``). The backward does
    not skip by default because its test keeps more tiles live: the dK/dV kernels (and TDA's dQ)
    spill registers at Hopper's default tiles with it (``bench kernels --compile-only``). (A
    cheaper bound from norms alone cannot decide: q and k are L2-normalised, so Cauchy-Schwarz
    bounds a tile's scores by 1, above tau at every length the models see.)"""
    B, T, H, D = check_heads(q, k, v)
    tau = _tau(B, T, H, D, beta, kappa, v.device)
    return ThresholdAttentionFunction.apply(q, k, None, None, v, tau, None, _check_power(p), block_m, block_n,
                                            skip_zero_tiles)


def differential_threshold_attention(q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor,
                                     v: torch.Tensor, beta, lam, kappa=1.0, p: float = 2.0,
                                     block_m: int | None = None, block_n: int | None = None,
                                     skip_zero_tiles: bool | None = None) -> torch.Tensor:
    """Threshold differential attention (``tda``): ``sum_j (a1_ij - lam a2_ij) v_j`` before
    the output RMSNorm. As :func:`threshold_attention`, with a second view (q2, k2) sharing
    tau, p and V, and the inhibition strength ``lam`` (already in (0, 1); the models pass
    ``sigmoid(lambda_logit)``). A tile is skipped when nothing survives in either view."""
    B, T, H, D = check_heads(q1, k1, q2, k2, v)
    tau = _tau(B, T, H, D, beta, kappa, v.device)
    lam = torch.broadcast_to(torch.as_tensor(lam, dtype=torch.float32, device=v.device).reshape(1, -1), (B, H))
    return ThresholdAttentionFunction.apply(q1, k1, q2, k2, v, tau, lam.contiguous(), _check_power(p), block_m,
                                            block_n, skip_zero_tiles)

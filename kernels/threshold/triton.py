"""Threshold rectified attention (``trela``) and threshold differential attention (``tda``),
TDA paper Sec. 4 and App. C, as streaming kernels, exact against ``kernels.threshold.reference``.

``threshold_attention(q, k, v, beta, kappa=1.0, p=2.0) -> z``
``differential_threshold_attention(q1, k1, q2, k2, v, beta, lam, kappa=1.0, p=2.0) -> z``

- q*, k*, v: ``[batch, pos, head, d_head]``, float32 / bfloat16 / float16, any strides; q and
  k are used as given (the models pass them RoPE'd and L2-normalised).
- beta, lam: Python floats or float tensors, scalar (one per layer, as the models) or ``[head]``,
  never read back to the host; kappa > 0: a number (a tensor is read to the host once per call
  and gets no gradient here: the reference and the rows path give one); p >= 1 a float (1 and 2
  are exact products, other values go through exp2/log2).
- z: ``[batch, pos, head, d_head]`` in v's dtype, accumulated in float32. It is the sum
  BEFORE the per-head output RMSNorm, which the caller applies.

Semantics, per query i (0-based): ``s_ij = <q_i, k_j>`` with no 1/sqrt(d) (the threshold
carries it), ``tau_i = beta sqrt(2 max(log((i + 1) / kappa), 0) / d_head)`` (eq. 1, the log
clamped at 0 so tau is never NaN for kappa > 1), ``a_ij = (s_ij - tau_i)_+^p`` for j <= i and
exactly 0 for j > i whatever the sign of beta, ``z_i = sum_j a_ij v_j``: no softmax, no
normalisation. The differential form uses ``a1 - lam a2`` (both views with the same tau and
p) in a single P V product, loading V once.

tau is computed in the kernels, for each tile of query rows from beta (one per head) and
kappa, as :func:`kernels.tooling.common.threshold` computes it in PyTorch (the same float32
operations; the log and sqrt are Triton's, so a tau may differ from PyTorch's in its last bits):
no tensor of tau is built, and the forward makes no PyTorch launch for it.

Gradients for every q, k, v, for lam (``-sum_ij dA_ij a2_ij``) and for beta: the dQ kernel
writes each row's ``dtau_i c_i`` (``dtau_i = -sum_j ds_ij`` summed over the views, ``c_i =
tau_i / beta``), summed by PyTorch. At s_ij = tau_i exactly the rectifier's gradient is taken
as 0, as in PyTorch's ReLU.
Backward is FlashAttention-2's two-kernel split (one program per key tile for dK and dV,
one per query tile for dQ, beta's and lam's rows), recomputing the tiles from q, k and tau;
there is no log-sum-exp to save.

Skipping empty tiles (``skip_zero_tiles``), exact bit for bit: a (query tile, key tile) pair in
which no score exceeds its row's tau adds exactly zero to the output and to every gradient. Two
tests find such tiles:

- the norm bound, before anything of the tile is loaded: ``s_ij <= ||q_i|| ||k_j||``
  (Cauchy-Schwarz), so a tile whose largest query norm times largest key norm, with
  :data:`BOUND_SLACK` for the float32 rounding of the scores and norms, is at most the tile's
  smallest tau holds no survivor. The tiles' norms come from a pre-pass (:func:`_key_norms` in
  the forward, :func:`_query_norms` in the backward: one launch each), a program's own tile's
  from its rows. The dK/dV kernel decides per (key tile, query tile); the forward and dQ
  kernels per query tile, against the largest norm of the key tiles it would walk
  (:func:`_keys_in_reach`, which says why). On the L2-normalised q, k of the models the bound is
  ~1, so it decides wherever tau > 1: beta sqrt(2 log(i + 1) / d_head) > 1, i.e. past position
  e^(d_head / (2 beta^2)) - 1 (2980 for ``tda-beta1``'s head dim 16 and beta 1; never for head
  dim 64 at beta 1 within 2^31 positions).
- the tile's largest rectified score, after its scores (one reduction of what every tile
  computes anyway): what the bound misses, at the cost of the score product.

Tighter bounds from per-tile summaries were measured on trained inputs and detect almost none of
the empty tiles: the per-dimension box bound (``sum_d max`` of the products of the query and key
tiles' per-dimension extremes), the centroid-and-radius bound, and each query row against the
key tile's box (:func:`kernels.tooling.bench.tile_bound_detection`; the figures are in
docs/explanation/kernels-and-cpu-path.md, "Zero tiles"): a tile of 32 to 128 unit vectors in
16 to 64 dimensions spans too many directions for its box or ball to stay below tau.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.tooling.tiles import (causal_tile, check_heads, head_base, key_tile_meta, key_tile_products, launch_meta,
                                   load_tile, program_tile, rows_base, store_row, store_tile, tile_needed)

# Relative slack of the norm bound: the kernels' float32 scores (sums of d_head products, on the
# tensor cores) and the float32 norms are each within d_head * 2^-24 (relative, about 2^-17 at
# head dim 128) of the exact values; 2^-10 leaves a margin of over a hundred times that, and moves
# the position where the bound starts to decide by a factor e^(d_head / 2^11 beta^2) at most.
BOUND_SLACK = tl.constexpr(2.0 ** -10)


@triton.jit
def _threshold(BETA, h, pos, kappa, D: tl.constexpr):
    """``(tau, c)`` of rows ``pos`` of head ``h``: tau_i (eq. 1) in the float32 operations of
    :func:`kernels.tooling.common.threshold`, and ``c_i = tau_i / beta``, what beta's gradient needs."""
    c = tl.sqrt(2.0 * tl.maximum(tl.log((pos + 1).to(tl.float32) / kappa), 0.0) / D)
    return tl.load(BETA + h) * c, c


@triton.jit
def _smallest(tau, pos, T):
    """The smallest tau of a tile's rows before T (+inf for a tile past T)."""
    return tl.min(tl.where(pos < T, tau, float("inf")), axis=0)


@triton.jit
def _largest_norm(x1, x2, TWO_VIEWS: tl.constexpr):
    """The largest row norm of a tile in either view, float32; a row whose squared norm is NaN counts
    as infinite, so that the bound never decides on it."""
    x1 = x1.to(tl.float32)
    squares = tl.sum(x1 * x1, axis=1)
    if TWO_VIEWS:
        x2 = x2.to(tl.float32)
        squares = tl.maximum(squares, tl.sum(x2 * x2, axis=1))
    return tl.sqrt(tl.max(tl.where(squares == squares, squares, float("inf")), axis=0))


@triton.jit
def _keys_in_reach(n_keys, q_norm, K_NORMS, tau_min, BLOCK_N: tl.constexpr, BOUND: tl.constexpr):
    """The keys a query tile must walk: ``n_keys`` (its causal keys), or none where the norm bound
    rules out every key tile at once: its largest query norm times the largest key-tile norm of
    the first ``n_keys`` keys (``K_NORMS``, the head's row of the table) is at most its smallest
    tau. Deciding per query tile rather than per key tile keeps the key loop's body free of a
    branch around its loads, which Triton's pipelining needs: a per-tile test there spilled
    registers in float32 on sm_80 (TDA's forward, trela's dQ). On unit rows the key tiles' norms
    are all ~1, so it rules out the same tiles."""
    if BOUND:
        k_max = tl.full([], 0.0, tl.float32)
        for start in range(0, tl.cdiv(n_keys, BLOCK_N), BLOCK_N):
            tiles = start + tl.arange(0, BLOCK_N)
            k_max = tl.maximum(k_max, tl.max(tl.load(K_NORMS + tiles, mask=tiles < tl.cdiv(n_keys, BLOCK_N),
                                                     other=0.0), axis=0))
        return tl.where(_may_survive(q_norm, k_max, tau_min, BOUND), n_keys, 0)
    else:
        return n_keys


@triton.jit
def _may_survive(q_norm, k_norm, tau_min, BOUND: tl.constexpr):
    """False where the norm bound proves that no score of the tile exceeds its smallest tau (and the
    bound is on); NaN anywhere leaves the tile to the full computation."""
    return ~(q_norm * k_norm * (1.0 + BOUND_SLACK) <= tau_min) | (not BOUND)


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
def _tile_norms(X1, X2, NORMS, s1, s2, T, H, D: tl.constexpr, BLOCK: tl.constexpr, TWO_VIEWS: tl.constexpr):
    """The norm bound's pre-pass, one program per tile of ``BLOCK`` rows and sequence-head:
    ``NORMS[bh, tile]`` = the tile's largest row norm in either view (:func:`_largest_norm`)."""
    b, h, bh, pos = program_tile(H, BLOCK)
    x1, x2 = _view_rows(head_base(X1, b, h, s1), head_base(X2, b, h, s2), pos, T, s1, s2, D, TWO_VIEWS)
    tl.store(NORMS + bh.to(tl.int64) * tl.num_programs(0) + tl.program_id(0), _largest_norm(x1, x2, TWO_VIEWS))


@triton.jit
def _key_norms(K1, K2, NORMS, s1, s2, T, H, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               TWO_VIEWS: tl.constexpr):
    """:func:`_tile_norms` of the key tiles (``BLOCK_N`` rows), for the forward and dQ kernels."""
    _tile_norms(K1, K2, NORMS, s1, s2, T, H, D, BLOCK_N, TWO_VIEWS)


@triton.jit
def _query_norms(Q1, Q2, NORMS, s1, s2, T, H, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 TWO_VIEWS: tl.constexpr):
    """:func:`_tile_norms` of the query tiles (``BLOCK_M`` rows), for the dK/dV kernel."""
    _tile_norms(Q1, Q2, NORMS, s1, s2, T, H, D, BLOCK_M, TWO_VIEWS)


@triton.jit
def _fwd(Q1, K1, Q2, K2, V, BETA, LAM, K_NORMS, Z, sq1, sk1, sq2, sk2, sv, sz, T, H, kappa,
         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
         TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, BOUND: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    K_NORMS += bh.to(tl.int64) * tl.cdiv(T, BLOCK_N)
    lam = tl.load(LAM + bh)
    q1, q2 = _view_rows(head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), offs_m, T, sq1, sq2, D, TWO_VIEWS)
    tau = _threshold(BETA, h, offs_m, kappa, D)[0]
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    n_keys = _keys_in_reach(tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), _largest_norm(q1, q2, TWO_VIEWS), K_NORMS,
                            _smallest(tau, offs_m, T), BLOCK_N, BOUND)
    for start_n in range(0, n_keys, BLOCK_N):
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
def _bwd_dkdv(Q1, K1, Q2, K2, V, BETA, LAM, DO, Q_NORMS, DK1, DK2, DV, sq1, sk1, sq2, sk2, sv, so, sg, T, H, kappa,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
              TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, BOUND: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One key tile: dK1 (dK2) and dV, all with strides ``sg``. A query tile the norm bound rules
    out (``BOUND``) loads nothing; with ``SKIP_ZERO_TILES``, one where both views and their
    derivatives are zero loads no dO and runs no product but the scores."""
    b, h, bh, offs_n = program_tile(H, BLOCK_N)
    Q1, Q2, DO = head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), head_base(DO, b, h, so)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    Q_NORMS += bh.to(tl.int64) * tl.cdiv(T, BLOCK_M)
    lam = tl.load(LAM + bh)
    k1, k2 = _view_rows(K1, K2, offs_n, T, sk1, sk2, D, TWO_VIEWS)
    k_norm = _largest_norm(k1, k2, TWO_VIEWS)
    v = load_tile(V, offs_n, T, sv, D)
    dk1 = tl.zeros([BLOCK_N, D], tl.float32)
    dk2 = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    for start_m in range((tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M, T, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        tau = _threshold(BETA, h, offs_m, kappa, D)[0]
        if _may_survive(tl.load(Q_NORMS + start_m // BLOCK_M), k_norm, _smallest(tau, offs_m, T), BOUND):
            q1, q2 = _view_rows(Q1, Q2, offs_m, T, sq1, sq2, D, TWO_VIEWS)
            s1 = key_tile_products(q1, k1, Q1, K1, offs_m, offs_n, T, sq1, sk1, D, PREC)
            s2 = key_tile_products(q2, k2, Q2, K2, offs_m, offs_n, T, sq2, sk2, D, PREC) if TWO_VIEWS else s1
            a1, g1, a2, g2, support = _views(s1, s2, tau, causal_tile(offs_m, offs_n, T), POWER, TWO_VIEWS)
            if tile_needed(support, SKIP_ZERO_TILES):
                do = load_tile(DO, offs_m, T, so, D)
                w, ds1, ds2, _ = _tile_grads(a1, g1, a2, g2, key_tile_products(do, v, DO, V, offs_m, offs_n, T, so,
                                                                               sv, D, PREC), lam, TWO_VIEWS)
                dv += tl.dot(tl.trans(w).to(do.dtype), do, input_precision=PREC)
                dk1 += tl.dot(tl.trans(ds1).to(q1.dtype), q1, input_precision=PREC)
                if TWO_VIEWS:
                    dk2 += tl.dot(tl.trans(ds2).to(q2.dtype), q2, input_precision=PREC)
    store_tile(head_base(DK1, b, h, sg), offs_n, T, sg, dk1, D)
    store_tile(head_base(DV, b, h, sg), offs_n, T, sg, dv, D)
    if TWO_VIEWS:
        store_tile(head_base(DK2, b, h, sg), offs_n, T, sg, dk2, D)


@triton.jit
def _bwd_dq(Q1, K1, Q2, K2, V, BETA, LAM, DO, K_NORMS, DQ1, DQ2, DBETA, DLAM, sq1, sk1, sq2, sk2, sv, so, sg, T, H,
            kappa, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POWER: tl.constexpr,
            TWO_VIEWS: tl.constexpr, PREC: tl.constexpr, BOUND: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One query tile: dQ1 (dQ2) with strides ``sg`` and the per-row parts of beta's gradient
    (``dtau_i c_i``) and lam's. A query tile the norm bound rules out (``BOUND``,
    :func:`_keys_in_reach`) walks no key tile; with
    ``SKIP_ZERO_TILES``, one where both views and their derivatives are zero loads no V and runs
    no product but the scores."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    K1, K2, V = head_base(K1, b, h, sk1), head_base(K2, b, h, sk2), head_base(V, b, h, sv)
    K_NORMS += bh.to(tl.int64) * tl.cdiv(T, BLOCK_N)
    lam = tl.load(LAM + bh)
    q1, q2 = _view_rows(head_base(Q1, b, h, sq1), head_base(Q2, b, h, sq2), offs_m, T, sq1, sq2, D, TWO_VIEWS)
    do = load_tile(head_base(DO, b, h, so), offs_m, T, so, D)
    tau, c = _threshold(BETA, h, offs_m, kappa, D)
    dq1 = tl.zeros([BLOCK_M, D], tl.float32)
    dq2 = tl.zeros([BLOCK_M, D], tl.float32)
    dtau = tl.zeros([BLOCK_M], tl.float32)
    dlam = tl.zeros([BLOCK_M], tl.float32)
    n_keys = _keys_in_reach(tl.minimum((tl.program_id(0) + 1) * BLOCK_M, T), _largest_norm(q1, q2, TWO_VIEWS), K_NORMS,
                            _smallest(tau, offs_m, T), BLOCK_N, BOUND)
    for start_n in range(0, n_keys, BLOCK_N):
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
    store_row(rows_base(DBETA, bh, T), offs_m, T, dtau * c)
    if TWO_VIEWS:
        store_tile(head_base(DQ2, b, h, sg), offs_m, T, sg, dq2, D)
        store_row(rows_base(DLAM, bh, T), offs_m, T, dlam)


class ThresholdAttentionFunction(torch.autograd.Function):
    """``(q1, k1, q2, k2, v, beta, kappa, lam, p, block_m, block_n, skip_zero_tiles) -> z``; beta
    ``[head]`` and lam ``[batch, head]`` float32 contiguous, kappa a float. One view when q2 is
    None (then k2 and lam are None too); see the module docstring. ``skip_zero_tiles``: None
    skips by the norm bound in both passes and by the scores in the forward only, True by both
    in both passes, False not at all."""

    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, beta, kappa, lam, p, block_m, block_n, skip_zero_tiles):
        two = q2 is not None
        B, T, H, D = q1.shape
        q2, k2, lam = (q2, k2, lam) if two else (q1, k1, beta)  # stand-ins for a second view, never used
        meta = dict(POWER=p, TWO_VIEWS=two, BOUND=skip_zero_tiles is not False,
                    **launch_meta(v.dtype, D, block_m, block_n, v.device, "tda" if two else "trela"))
        k_norms = _tile_norms_of(_key_norms, k1, k2, meta["BLOCK_N"], meta)
        z = torch.empty((B, T, H, D), dtype=v.dtype, device=v.device)
        _fwd[(triton.cdiv(T, meta["BLOCK_M"]), B * H)](
            q1, k1, q2, k2, v, beta, lam, k_norms, z, q1.stride(), k1.stride(), q2.stride(), k2.stride(), v.stride(),
            z.stride(), T, H, kappa, SKIP_ZERO_TILES=skip_zero_tiles is not False, **meta)
        ctx.save_for_backward(q1, k1, q2, k2, v, beta, lam, k_norms)
        ctx.kappa = kappa
        ctx.meta = {**meta, "SKIP_ZERO_TILES": skip_zero_tiles is True}
        return z

    @staticmethod
    def backward(ctx, dz):
        q1, k1, q2, k2, v, beta, lam, k_norms = ctx.saved_tensors
        B, T, H, D = q1.shape
        meta, two = ctx.meta, ctx.meta["TWO_VIEWS"]
        dq1, dk1, dv = (torch.empty((B, T, H, D), dtype=v.dtype, device=v.device) for _ in range(3))
        d_beta = torch.empty((B, H, T), dtype=torch.float32, device=v.device)
        # with one view, the first view's buffers stand in for the second's (never written)
        dq2, dk2, d_lam = ((torch.empty_like(dq1), torch.empty_like(dk1), torch.empty_like(d_beta)) if two
                           else (dq1, dk1, d_beta))
        strides = (q1.stride(), k1.stride(), q2.stride(), k2.stride(), v.stride(), dz.stride(), dq1.stride(), T, H,
                   ctx.kappa)
        _bwd_dkdv[(triton.cdiv(T, meta["BLOCK_N"]), B * H)](
            q1, k1, q2, k2, v, beta, lam, dz, _tile_norms_of(_query_norms, q1, q2, meta["BLOCK_M"], meta), dk1, dk2, dv, *strides,
            **key_tile_meta(meta))
        _bwd_dq[(triton.cdiv(T, meta["BLOCK_M"]), B * H)](q1, k1, q2, k2, v, beta, lam, dz, k_norms, dq1, dq2, d_beta,
                                                          d_lam, *strides, **meta)
        d_beta = d_beta.sum((0, 2))
        if not two:
            return dq1, dk1, None, None, dv, d_beta, None, None, None, None, None, None
        return dq1, dk1, dq2, dk2, dv, d_beta, None, d_lam.sum(-1), None, None, None, None


def _tile_norms_of(kernel, x1: torch.Tensor, x2: torch.Tensor, block: int, meta: dict) -> torch.Tensor:
    """The norm bound's table ``[batch * head, tile]`` float32 of ``block``-row tiles of x1 (and x2
    with two views): ``kernel`` (:func:`_key_norms` or :func:`_query_norms`), one launch."""
    B, T, H, D = x1.shape
    norms = torch.empty((B * H, triton.cdiv(T, block)), dtype=torch.float32, device=x1.device)
    kernel[(norms.shape[1], B * H)](x1, x2, norms, x1.stride(), x2.stride(), T, H, TWO_VIEWS=meta["TWO_VIEWS"],
                                    **{key: meta[key] for key in ("D", "BLOCK_M", "BLOCK_N", "num_warps",
                                                                  "num_stages")})
    return norms


def _per_head(x, H: int, device, name: str) -> torch.Tensor:
    """beta or lam, a number or a tensor of one value or one per head, as float32 ``[head]``."""
    x = torch.as_tensor(x, dtype=torch.float32, device=device).reshape(-1)
    if x.numel() not in (1, H):
        raise ValueError(f"{name} must be one value or one per head ({H}), got {x.numel()} values")
    return x.expand(H)


def _kappa(kappa) -> float:
    """kappa as the number the kernels take; a tensor is read to the host, and refused if it
    requires grad (no gradient flows to kappa here)."""
    if isinstance(kappa, torch.Tensor) and kappa.requires_grad:
        raise ValueError("the Triton kernels give kappa no gradient: pass kappa as a number, or use the reference "
                         "or the rows path for a gradient in kappa")
    return float(kappa)


def _check_power(p: float) -> float:
    if not p >= 1:
        raise ValueError(f"the power p must be >= 1, got {p}")
    return float(p)


def threshold_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta, kappa=1.0, p: float = 2.0,
                        block_m: int | None = None, block_n: int | None = None,
                        skip_zero_tiles: bool | None = None) -> torch.Tensor:
    """Threshold rectified attention (``trela``): ``sum_j a_ij v_j`` before the output RMSNorm.

    Shapes and semantics in the module docstring. ``block_m``/``block_n`` override the tile
    sizes (powers of two >= 16). Empty tiles are skipped exactly, bit for bit (module docstring):
    ``skip_zero_tiles`` None (the default) skips by the norm bound in the forward and backward
    passes (nothing of such a tile is loaded or multiplied) and by the tile's largest rectified
    score in the forward pass (no power, no V load, no P V product); True adds the scores' test
    to the backward (no load or product but the scores); False skips nothing (for comparison:
    ``kernels.tooling.bench.bench_zero_tile_skipping``, ``glitchlens bench tiles CKPT
    --skip-gain``). The backward does not test the scores by default because that test keeps
    more tiles live: the dK/dV kernels (and TDA's dQ) spill registers at Hopper's default tiles
    with it (``bench kernels --compile-only``); the bound's test, on scalars before any load,
    keeps none."""
    H = check_heads(q, k, v)[2]
    return ThresholdAttentionFunction.apply(q, k, None, None, v, _per_head(beta, H, v.device, "beta").contiguous(),
                                            _kappa(kappa), None, _check_power(p), block_m, block_n, skip_zero_tiles)


def differential_threshold_attention(q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor,
                                     v: torch.Tensor, beta, lam, kappa=1.0, p: float = 2.0,
                                     block_m: int | None = None, block_n: int | None = None,
                                     skip_zero_tiles: bool | None = None) -> torch.Tensor:
    """Threshold differential attention (``tda``): ``sum_j (a1_ij - lam a2_ij) v_j`` before
    the output RMSNorm. As :func:`threshold_attention`, with a second view (q2, k2) sharing
    tau, p and V, and the inhibition strength ``lam`` (already in (0, 1); the models pass
    ``sigmoid(lambda_logit)``). A tile is skipped when nothing survives in either view."""
    B, _, H, _ = check_heads(q1, k1, q2, k2, v)
    lam = torch.broadcast_to(_per_head(lam, H, v.device, "lam"), (B, H))
    return ThresholdAttentionFunction.apply(q1, k1, q2, k2, v, _per_head(beta, H, v.device, "beta").contiguous(),
                                            _kappa(kappa), lam.contiguous(), _check_power(p), block_m, block_n,
                                            skip_zero_tiles)

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
cumulative sum of M (a product with a triangle of ones, on the tensor cores).

Gradients for q, k, v and log_delta. M and D-bar are piecewise constant in the scores and
pass no gradient; a key that does not survive gets none (ReLU's gradient at 0 taken as 0),
exactly as the reference's autograd. Backward is FlashAttention-2's two-kernel split, without
atomics: query-tile programs, recomputing P from q, k and the saved log-sum-exp, compute dQ and
dlog_delta and write each row's survivors right of every key tile they visit into a count table;
then one program per key tile walks the query tiles from its diagonal, reads the counts back for
its D-bar, and owns its dK and dV. The table, ``[batch * head, key tile, query row]`` int32,
would grow as T^2; it holds the rows of one pass of :func:`rows_per_pass` rows, and longer
sequences run the kernels once per pass, the key-tile programs adding their dK and dV to the
earlier passes' in float32, in pass order. Memory stays linear in T.

The query-tile side is split along the keys too, so that the GPU fills at long T (at T = 32k,
one program per query tile of a pass was 128 programs on an H200's 132 SMs, each walking up to
all 32k keys): a pass whose query tiles fill at most half the GPU cuts its keys into chunks,
enough for two waves of programs and at most one per :func:`rows_per_pass` keys, one program per
query tile and chunk (:func:`backward_launches` lists the grids). A chunk needs each row's survivors right of it before its walk starts: a first
kernel counts each row's survivors per chunk (its scores only), and each dQ program starts from
the sum of the counts of the chunks to its right: integers, so D-bar, the table and the logits
are exactly those of one walk over all keys. The chunks' dQ and dlog_delta, in float32, are summed in chunk order; a pass walked whole
stores them in place, bit for bit those of one walk. Two backward passes give bitwise the same
gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.tooling.tiles import (causal_tile, check_heads, head_base, key_tile_meta, key_tile_products, load_row, load_tile,
                           online_softmax_step, per_position, program_tile, row_dot, rows_base, softmax_finish,
                           softmax_forward, softmax_tile_grad, store_row, store_tile, tile_needed, tra_meta)


@triton.jit
def _suffix_counts(M):
    """``sum_{j' >= j} M_ij'`` within a ``[BLOCK_M, BLOCK_N]`` 0/1 tile, as its product with the
    upper-triangular ones on the tensor cores rather than a scan along the rows: exact, as 0 and 1
    are exact in fp16 and the float32 sums stay below BLOCK_N."""
    keys = tl.arange(0, M.shape[1])
    return tl.dot(M.to(tl.float16), (keys[:, None] >= keys[None, :]).to(tl.float16)).to(tl.int32)


@triton.jit
def _survivors(S, offs_m, offs_n, T):
    """M (eq. 3-4), 0/1 int32: the visible keys of the tile whose score ``S`` is positive."""
    return ((S > 0) & causal_tile(offs_m, offs_n, T)).to(tl.int32)


@triton.jit
def _tile_logits(S, log_delta, count, offs_m, offs_n, T):
    """One tile of eq. 3-11 from its scores ``S = q k^T / sqrt(d)`` (eq. 1) and ``count``, each
    row's survivors right of the tile: logits (-inf where M = 0), M and D-bar."""
    M = _survivors(S, offs_m, offs_n, T)                                                 # eq. 3-4
    D_bar = count[:, None] + _suffix_counts(M)                                          # eq. 6
    logits = tl.where(M > 0, S + D_bar.to(tl.float32) * log_delta[:, None], float("-inf"))  # eq. 10-11
    return logits, M, D_bar


@triton.jit
def _last_key_tile(first_row, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, T):
    """Index of the key tile holding the last row of the query tile that starts at ``first_row``
    (its diagonal tile)."""
    return (tl.minimum(first_row + BLOCK_M, T) - 1) // BLOCK_N


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
    last = _last_key_tile(tl.program_id(0) * BLOCK_M, BLOCK_M, BLOCK_N, T)
    for step in range(0, last + 1):
        offs_n = (last - step) * BLOCK_N + tl.arange(0, BLOCK_N)
        S = tl.dot(q, tl.trans(load_tile(K, offs_n, T, sk, D)), input_precision=PREC) * scale      # eq. 1
        logits, M, _ = _tile_logits(S, log_delta, count, offs_m, offs_n, T)
        count += tl.sum(M, axis=1)
        if tile_needed(M, SKIP_ZERO_TILES):  # a tile without survivors leaves the softmax state unchanged
            v = load_tile(V, offs_n, T, sv, D)
            m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, logits, v, PREC)           # eq. 12
    z, lse = softmax_finish(m_i, l_i, acc)
    store_tile(head_base(Z, b, h, sz), offs_m, T, sz, z, D)
    store_row(rows_base(LSE, bh, T), offs_m, T, lse)


@triton.jit
def _count_table(COUNT, bh, n_key_tiles, rows):
    """Pointer to head ``bh``'s part of the count table ``[batch * head, key tile, row of the
    pass]`` int32: the survivors of row i right of key tile n are at ``+ n * rows + i - row0``."""
    return COUNT + bh.to(tl.int64) * n_key_tiles * rows


@triton.jit
def _chunk_key_tiles(chunk, last, CHUNK_TILES):
    """First and last key tile of key chunk ``chunk`` that a query tile whose diagonal tile is
    ``last`` visits."""
    return chunk * CHUNK_TILES, tl.minimum((chunk + 1) * CHUNK_TILES - 1, last)


@triton.jit
def _bwd_chunk_survivors(Q, K, SURV, sq, sk, T, H, scale, row0, rows, CHUNK_TILES,
                         D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    """One query tile of the pass over rows ``row0 .. row0 + rows`` against key chunk
    ``1 + program_id(2)``: each row's survivors in the chunk, into ``SURV [batch * head, chunk,
    row of the pass]`` int32 (chunk 0, left of every other, is nobody's right)."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    offs_m += row0
    chunk = 1 + tl.program_id(2)
    K = head_base(K, b, h, sk)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    survivors = tl.zeros([BLOCK_M], tl.int32)
    first, last = _chunk_key_tiles(chunk, _last_key_tile(row0 + tl.program_id(0) * BLOCK_M, BLOCK_M, BLOCK_N, T),
                                   CHUNK_TILES)
    for n in range(first, last + 1):
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        S = tl.dot(q, tl.trans(load_tile(K, offs_n, T, sk, D)), input_precision=PREC) * scale      # eq. 1
        survivors += tl.sum(_survivors(S, offs_m, offs_n, T), axis=1)
    tl.store(SURV + (bh.to(tl.int64) * tl.num_programs(2) + tl.program_id(2)) * rows + offs_m - row0, survivors,
             mask=offs_m < T)


@triton.jit
def _bwd_dq(Q, K, V, LD, Z, DO, LSE, DELTA, COUNT, SURV, DQ, DLD, sq, sk, sv, sz, so, sg, T, H, scale, row0, rows,
            n_key_tiles, CHUNK_TILES, out_row0, out_len, D: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, PREC: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One query tile of the pass over rows ``row0 .. row0 + rows`` against key chunk
    ``program_id(2)``: its dQ (or with several chunks its part, in float32) into ``DQ [chunk,
    batch, row - out_row0, head, d]`` (strides ``sg`` past the chunk), its dlog_delta (or part) into
    ``DLD [chunk, batch * head, row - out_row0]`` (``out_len`` rows a head), and the count table:
    for each key tile it visits, every row's survivors right of that tile, starting from the
    survivors of the chunks to its right (``SURV``, of :func:`_bwd_chunk_survivors`). The programs
    of the diagonal chunk store FlashAttention-2's delta_i = dO_i . z_i (for :func:`_bwd_dkdv`)."""
    b, h, bh, offs_m = program_tile(H, BLOCK_M)
    offs_m += row0
    chunk = tl.program_id(2)
    K, V = head_base(K, b, h, sk), head_base(V, b, h, sv)
    q = load_tile(head_base(Q, b, h, sq), offs_m, T, sq, D)
    do = load_tile(head_base(DO, b, h, so), offs_m, T, so, D)
    log_delta = load_row(rows_base(LD, bh, T), offs_m, T)
    lse = load_row(rows_base(LSE, bh, T), offs_m, T)
    delta = row_dot(do, load_tile(head_base(Z, b, h, sz), offs_m, T, sz, D))
    if chunk == tl.num_programs(2) - 1:
        store_row(rows_base(DELTA, bh, T), offs_m, T, delta)
    counts = _count_table(COUNT, bh, n_key_tiles, rows) + offs_m - row0
    count = tl.zeros([BLOCK_M], tl.int32)
    for right in range(chunk, tl.num_programs(2) - 1):  # SURV holds chunks 1 .. last as 0 .. last - 1
        count += tl.load(SURV + (bh.to(tl.int64) * (tl.num_programs(2) - 1) + right) * rows + offs_m - row0,
                         mask=offs_m < T, other=0)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    d_log_delta = tl.zeros([BLOCK_M], tl.float32)
    first, last = _chunk_key_tiles(chunk, _last_key_tile(row0 + tl.program_id(0) * BLOCK_M, BLOCK_M, BLOCK_N, T),
                                   CHUNK_TILES)
    for step in range(0, last + 1 - first):
        n = last - step
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(counts + n * rows, count, mask=offs_m < T)
        k = load_tile(K, offs_n, T, sk, D)
        logits, M, D_bar = _tile_logits(tl.dot(q, tl.trans(k), input_precision=PREC) * scale, log_delta, count,
                                        offs_m, offs_n, T)
        count += tl.sum(M, axis=1)
        if tile_needed(M, SKIP_ZERO_TILES):  # no survivor: P and dlogits are exactly 0 on the tile
            P = tl.exp(logits - lse[:, None])
            dL = softmax_tile_grad(P, tl.dot(do, tl.trans(load_tile(V, offs_n, T, sv, D)), input_precision=PREC),
                                   delta)
            d_log_delta += tl.sum(dL * D_bar.to(tl.float32), axis=1)
            dq += tl.dot(dL.to(k.dtype), k, input_precision=PREC)
    own = offs_m - out_row0
    store_tile(head_base(DQ + chunk.to(tl.int64) * tl.num_programs(1) * out_len * D, b, h, sg), own, T - out_row0, sg,
               dq * scale, D)
    store_row(rows_base(DLD + chunk.to(tl.int64) * tl.num_programs(1) * out_len, bh, out_len), own, T - out_row0,
              d_log_delta)


@triton.jit
def _bwd_dkdv(Q, K, V, LD, DO, LSE, DELTA, COUNT, DK, DV, sq, sk, sv, so, sg, T, H, scale, row0, rows, n_key_tiles,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
              ACCUMULATE: tl.constexpr, SKIP_ZERO_TILES: tl.constexpr):
    """One key tile against the query tiles of the pass over rows ``row0 .. row0 + rows``: its dK
    and dV (strides ``sg``), stored, or with ``ACCUMULATE`` added to what the earlier passes
    stored (float32 buffers)."""
    b, h, bh, offs_n = program_tile(H, BLOCK_N)
    Q, K, V, DO = head_base(Q, b, h, sq), head_base(K, b, h, sk), head_base(V, b, h, sv), head_base(DO, b, h, so)
    LD, LSE, DELTA = rows_base(LD, bh, T), rows_base(LSE, bh, T), rows_base(DELTA, bh, T)
    counts = _count_table(COUNT, bh, n_key_tiles, rows) + tl.program_id(0) * rows - row0
    k = load_tile(K, offs_n, T, sk, D)
    v = load_tile(V, offs_n, T, sv, D)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    row_end = tl.minimum(row0 + rows, T)
    for start_m in range(tl.maximum(row0, (tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M), row_end, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = load_tile(Q, offs_m, T, sq, D)
        S = key_tile_products(q, k, Q, K, offs_m, offs_n, T, sq, sk, D, PREC) * scale
        logits, M, _ = _tile_logits(S, load_row(LD, offs_m, T), tl.load(counts + offs_m, mask=offs_m < T, other=0),
                                    offs_m, offs_n, T)
        if tile_needed(M, SKIP_ZERO_TILES):
            do = load_tile(DO, offs_m, T, so, D)
            P = tl.exp(logits - load_row(LSE, offs_m, T)[:, None])
            dL = softmax_tile_grad(P, key_tile_products(do, v, DO, V, offs_m, offs_n, T, so, sv, D, PREC),
                                   load_row(DELTA, offs_m, T))
            dv += tl.dot(tl.trans(P).to(do.dtype), do, input_precision=PREC)
            dk += tl.dot(tl.trans(dL).to(q.dtype), q, input_precision=PREC)
    DK, DV = head_base(DK, b, h, sg), head_base(DV, b, h, sg)
    dk *= scale
    if ACCUMULATE:
        dk += load_tile(DK, offs_n, T, sg, D)
        dv += load_tile(DV, offs_n, T, sg, D)
    store_tile(DK, offs_n, T, sg, dk, D)
    store_tile(DV, offs_n, T, sg, dv, D)


def rows_per_pass(meta: dict) -> int:
    """Query rows per pass of TRA's backward: ``BLOCK_N * d_head`` (a multiple of ``BLOCK_M``),
    so that the count table, ``[batch * head, key tile, row of the pass]`` int32, holds as many
    entries as dK: flat in T at a fixed number of tokens, where one table for every row would
    grow as T^2 / BLOCK_N."""
    return max(meta["BLOCK_N"] * meta["D"] // meta["BLOCK_M"], 1) * meta["BLOCK_M"]


# Programs of these kernels an SM runs at once: their 4 warps of 145-220 registers a thread
# (kernels.tooling.aot's table) take about half of an SM's 65536 registers
PROGRAMS_PER_SM = 2


@dataclass(frozen=True)
class BackwardPass:
    """One pass of TRA's backward over query rows ``row0 .. row_end``, its keys cut into
    ``chunks`` chunks of ``chunk_tiles`` key tiles, and the grid of each of its launches by kernel:
    "survivors" (:func:`_bwd_chunk_survivors`, query tiles x sequence-heads x chunks right of the
    first; absent with one chunk), "dq" (query tiles x sequence-heads x chunks) and "dkdv" (key
    tiles up to ``row_end`` x sequence-heads)."""
    row0: int
    row_end: int
    rows: int
    chunk_tiles: int
    chunks: int
    grids: dict


def backward_launches(T: int, heads: int, meta: dict, slots: int | None = None) -> list[BackwardPass]:
    """The passes of TRA's backward for ``heads`` sequence-heads of ``T`` positions at launch
    parameters ``meta`` (``BLOCK_M``, ``BLOCK_N``, ``D``), in launch order: what the backward
    runs, and what a test counts programs on without a GPU. A pass whose query tiles, times
    ``heads``, fill at most half of ``slots`` (the programs the GPU runs at once) cuts its keys
    into chunks, enough for two waves of programs (the second absorbs the first's uneven ends) and
    at most one per ``rows`` keys (so that the survivor counts stay within the size of dK): else at
    least half the GPU would idle through the pass, more than the survivor counts' extra scores
    cost (one product a tile, against dQ's four). A pass that fills more walks its keys whole.
    ``slots`` None (a CPU tensor, under the interpreter): every pass is cut, one chunk per ``rows``
    keys."""
    block_m, block_n = meta["BLOCK_M"], meta["BLOCK_N"]
    rows = min(rows_per_pass(meta), max(T, 1))  # a single pass needs a table of T rows only
    passes = []
    for row0 in range(0, T, rows):
        row_end = min(row0 + rows, T)
        query_tiles, key_tiles = triton.cdiv(row_end - row0, block_m), triton.cdiv(row_end, block_n)
        chunks = triton.cdiv(key_tiles, triton.cdiv(rows, block_n))  # at most one per rows keys
        if slots is not None:
            programs = query_tiles * heads
            chunks = min(chunks, 2 * triton.cdiv(slots, programs)) if 2 * programs <= slots else 1
        chunk_tiles = triton.cdiv(key_tiles, chunks)
        chunks = triton.cdiv(key_tiles, chunk_tiles)
        grids = {"survivors": (query_tiles, heads, chunks - 1)} if chunks > 1 else {}
        grids.update(dq=(query_tiles, heads, chunks), dkdv=(key_tiles, heads))
        passes.append(BackwardPass(row0, row_end, rows, chunk_tiles, chunks, grids))
    return passes


class TRAAttentionFunction(torch.autograd.Function):
    """``(q, k, v, log_delta, block_m, block_n, skip_zero_tiles) -> z`` with log_delta
    ``[batch, head, pos]`` float32 contiguous; see the module docstring. Saves q, k, v,
    log_delta, z and the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, log_delta, block_m, block_n, skip_zero_tiles):
        ctx.skip_zero_tiles = skip_zero_tiles
        return softmax_forward(ctx, "tra", _fwd, q, k, v, log_delta, block_m, block_n, tra_meta,
                               SKIP_ZERO_TILES=skip_zero_tiles)

    @staticmethod
    def backward(ctx, dz):
        q, k, v, log_delta, z, lse = ctx.saved_tensors
        B, T, H, D = q.shape
        meta = {**ctx.meta, "SKIP_ZERO_TILES": ctx.skip_zero_tiles}
        slots = (PROGRAMS_PER_SM * torch.cuda.get_device_properties(q.device).multi_processor_count
                 if q.is_cuda else None)
        launches = backward_launches(T, B * H, meta, slots)
        rows, chunks = launches[0].rows, max(p.chunks for p in launches)
        n_key_tiles = triton.cdiv(T, meta["BLOCK_N"])
        # one pass stores dK and dV once, in the inputs' dtype; several add theirs in float32, in pass order
        several = len(launches) > 1
        dk, dv = ((torch.zeros if several else torch.empty)((B, T, H, D), dtype=torch.float32 if several else k.dtype,
                                                           device=q.device) for _ in range(2))
        dq = torch.empty((B, T, H, D), dtype=q.dtype, device=q.device)
        d_log_delta, delta = (torch.empty((B, H, T), dtype=torch.float32, device=q.device) for _ in range(2))
        count = torch.empty((B * H, n_key_tiles, rows), dtype=torch.int32, device=q.device)
        survivors = torch.empty(max(B * H * (chunks - 1) * rows, 1), dtype=torch.int32, device=q.device)  # not null
        # a pass cut into chunks: each chunk's dQ and dlog_delta in float32, summed in chunk order after
        # the pass; a pass walked whole stores them in place
        dq_parts, dld_parts = (torch.empty((chunks, B, rows, H, D), dtype=torch.float32, device=q.device),
                               torch.empty((chunks, B, H, rows), dtype=torch.float32, device=q.device)) \
            if chunks > 1 else (None, None)
        strides, scale = (q.stride(), k.stride(), v.stride()), 1.0 / math.sqrt(D)
        for p in launches:
            if "survivors" in p.grids:
                _bwd_chunk_survivors[p.grids["survivors"]](q, k, survivors, q.stride(), k.stride(), T, H, scale,
                                                           p.row0, rows, p.chunk_tiles, **ctx.meta)
            dq_out, dld_out, sg, out_row0, out_len = ((dq_parts, dld_parts, dq_parts[0].stride(), p.row0, rows)
                                                      if p.chunks > 1 else (dq, d_log_delta, dq.stride(), 0, T))
            _bwd_dq[p.grids["dq"]](
                q, k, v, log_delta, z, dz, lse, delta, count, survivors, dq_out, dld_out, *strides, z.stride(),
                dz.stride(), sg, T, H, scale, p.row0, rows, n_key_tiles, p.chunk_tiles, out_row0, out_len, **meta)
            if p.chunks > 1:
                n = p.row_end - p.row0
                dq[:, p.row0:p.row_end] = dq_parts[:p.chunks, :, :n].sum(0)
                d_log_delta[..., p.row0:p.row_end] = dld_parts[:p.chunks, ..., :n].sum(0)
            _bwd_dkdv[p.grids["dkdv"]](
                q, k, v, log_delta, dz, lse, delta, count, dk, dv, *strides, dz.stride(), dk.stride(), T, H,
                scale, p.row0, rows, n_key_tiles, ACCUMULATE=several, **key_tile_meta(meta))
        return dq, dk.to(k.dtype), dv.to(v.dtype), d_log_delta, None, None, None


def tra_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_delta: torch.Tensor,
                  block_m: int | None = None, block_n: int | None = None,
                  skip_zero_tiles: bool = True) -> torch.Tensor:
    """Threshold Relative Attention ``z`` from q, k, v and the forget gate's log.

    Shapes and semantics in the module docstring. ``block_m``/``block_n`` override the tile
    sizes (powers of two >= 16); ``skip_zero_tiles`` (on by default; off for comparison) skips
    the work of key tiles without a survivor after their scores, in the forward pass (the V load and P V product) and in the
    backward (every product but the scores): exact, since such a tile adds exactly zero;
    whether it pays depends on the sparsity, see ``kernels.tooling.bench.zero_tile_fraction``."""
    B, T, H, _ = check_heads(q, k, v)
    return TRAAttentionFunction.apply(q, k, v, per_position(log_delta, B, H, T, "log_delta"), block_m, block_n,
                                      skip_zero_tiles)

"""Predicted cost of the Triton kernels on a GPU: FLOPs, bytes moved and roofline time.

PREDICTIONS, NOT MEASUREMENTS: no GPU has run these kernels. For each kernel's forward and
backward launches (:data:`PASSES`, read off the kernels' loops in ``kernels/<op>/triton.py``)
at the dispatcher's tile sizes, the model counts

- the matrix-product FLOPs the tiles execute (every visited tile pair in full, the causal
  diagonal's masked half included; element-wise work such as exp is not counted);
- bytes moved two ways, which bracket the truth: *once*, each tensor read and each output
  written once (a cache that keeps every key tile a sequence-head needs), and *streamed*,
  every tile load of every program from memory (no cache reuse at all);

and the roofline time ``max(FLOPs / peak, bytes / bandwidth)`` at the published dense bf16
tensor-core peak and memory bandwidth of each GPU in :data:`HARDWARE`, beside the time
FlashAttention-2 takes for its own FLOP count (its paper's formula: causal ``2 T^2 d`` per
sequence-head forward, 3.5 times that forward and backward) at the highest attention
throughput its paper reports on that GPU (:data:`FA2_PUBLISHED`): the paper's per-length
figures are bar charts, and at T = 512 they are lower than this best, so the FA2 column is a
lower bound on its time. The shape is FlashAttention-2's benchmark: 16384 tokens per batch,
32 heads of 64 (model width 2048), bf16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels.tiles import default_tiles

# dense bf16 tensor-core TFLOP/s and memory TB/s from NVIDIA's datasheets: H100 SXM5 80 GB, A100 SXM4 80 GB
HARDWARE = {"H100": (989.4, 3.35), "A100": (312.0, 2.039)}
# FlashAttention-2 (Dao, 2023), Sec. 4.1: "up to 230 TFLOPs/s" on A100 80GB SXM4 and "up to 335
# TFLOPs/s" forward and backward on H100 SXM5, the highest of its attention benchmarks
FA2_PUBLISHED = {"H100": 335.0, "A100": 230.0}
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HEADS = 16384, 32


@dataclass(frozen=True)
class Rows:
    """What a kernel reads or writes per sequence position: ``tensors`` rows of d_head elements in
    the inputs' dtype, ``f32`` rows of d_head float32, ``scalars`` float32 per-position values."""
    tensors: int = 0
    f32: int = 0
    scalars: int = 0

    def bytes(self, element: int, d_head: int) -> int:
        return (self.tensors * element + self.f32 * 4) * d_head + self.scalars * 4


@dataclass(frozen=True)
class Pass:
    """One kernel launch. A program owns a tile of query rows (``key_major`` False: it walks the
    key tiles from 0 to its diagonal) or of key rows (True: it walks the query tiles from its
    diagonal to T); ``own`` is loaded once per program, ``visited`` once per tile it walks,
    ``written`` stored once, ``atomic`` read and written at every visited tile (float32 atomics);
    ``products`` matrix products of [BLOCK_M, d] x [d, BLOCK_N] size per visited tile."""
    kernel: str
    key_major: bool
    own: Rows
    visited: Rows
    written: Rows
    products: int
    atomic: Rows = Rows()


PASSES = {
    "tra": (Pass("fwd", False, Rows(1, 0, 1), Rows(2), Rows(1, 0, 1), 2),         # q, log delta | k, v | z, lse
            Pass("bwd", False, Rows(2, 0, 3), Rows(2), Rows(0, 1, 1), 5, atomic=Rows(0, 2))),  # dK, dV atomically
    "fot": (Pass("fwd", False, Rows(1, 0, 1), Rows(2, 0, 1), Rows(1, 0, 1), 2),    # q, c | k, v, c | z, lse
            Pass("bwd_dkdv", True, Rows(2, 0, 1), Rows(2, 0, 3), Rows(2, 0, 1), 4),
            Pass("bwd_dq", False, Rows(2, 0, 3), Rows(2, 0, 1), Rows(1, 0, 1), 3)),
    "trela": (Pass("fwd", False, Rows(1, 0, 1), Rows(2), Rows(1), 2),              # q, tau | k, v | z
              Pass("bwd_dkdv", True, Rows(2), Rows(2, 0, 1), Rows(2), 4),
              Pass("bwd_dq", False, Rows(2, 0, 1), Rows(2), Rows(1, 0, 1), 3)),
    "tda": (Pass("fwd", False, Rows(2, 0, 1), Rows(3), Rows(1), 3),                # q1, q2, tau | k1, k2, v | z
            Pass("bwd_dkdv", True, Rows(3), Rows(3, 0, 1), Rows(3), 6),
            Pass("bwd_dq", False, Rows(3, 0, 1), Rows(3), Rows(2, 0, 2), 5)),
}


def _visits(p: Pass, n_pos: int, block_m: int, block_n: int) -> list[int]:
    """Rows each program of ``p`` walks (tiles times tile rows), one entry per program."""
    if p.key_major:
        return [math.ceil((n_pos - j * block_n // block_m * block_m) / block_m) * block_m
                for j in range(math.ceil(n_pos / block_n))]
    return [math.ceil(min((i + 1) * block_m, n_pos) / block_n) * block_n for i in range(math.ceil(n_pos / block_m))]


def pass_cost(p: Pass, n_pos: int, d_head: int = 64, dtype=torch.bfloat16) -> dict:
    """FLOPs, bytes moved once and bytes streamed of launch ``p`` for one sequence-head of
    ``n_pos`` positions, at the dispatcher's tiles for ``dtype`` and ``d_head``."""
    tiles = default_tiles(dtype, d_head)
    block_m, block_n = tiles.block_m, tiles.block_n
    element = dtype.itemsize
    own_rows, walk_rows = (block_n, block_m) if p.key_major else (block_m, block_n)
    visits = _visits(p, n_pos, block_m, block_n)
    flops = sum(2 * p.products * own_rows * rows * d_head for rows in visits)
    once = n_pos * (p.own.bytes(element, d_head) + p.visited.bytes(element, d_head)
                    + p.written.bytes(element, d_head) + 2 * p.atomic.bytes(element, d_head))
    streamed = sum(own_rows * (p.own.bytes(element, d_head) + p.written.bytes(element, d_head))
                   + rows * (p.visited.bytes(element, d_head) + 2 * p.atomic.bytes(element, d_head))
                   for rows in visits)
    return {"flops": flops, "bytes_once": once, "bytes_streamed": streamed}


def fa2_flops(n_pos: int, d_head: int = 64) -> float:
    """FlashAttention-2's count for one causal sequence-head, forward and backward."""
    return 4 * n_pos ** 2 * d_head / 2 * 3.5


def cost_table(d_head: int = 64, seq_lens=None, dtype=torch.bfloat16) -> list[dict]:
    """One row per kernel and T: the whole batch's forward + backward (``TOKENS // T`` sequences
    of ``HEADS`` heads) in GFLOP and MB, and predicted milliseconds on each GPU of
    :data:`HARDWARE` with bytes moved once and streamed, beside FlashAttention-2's time at its
    published best throughput."""
    rows = []
    for n_pos in seq_lens or SEQ_LENS:
        heads = max(TOKENS // n_pos, 1) * HEADS
        for name, passes in PASSES.items():
            total = {key: heads * sum(pass_cost(p, n_pos, d_head, dtype)[key] for p in passes)
                     for key in ("flops", "bytes_once", "bytes_streamed")}
            row = {"kernel": name, "T": n_pos, "GFLOP": total["flops"] / 1e9, "MB_once": total["bytes_once"] / 1e6,
                   "MB_streamed": total["bytes_streamed"] / 1e6}
            for gpu, (tflops, tb_per_s) in HARDWARE.items():
                compute_ms = total["flops"] / tflops / 1e9
                row[f"{gpu}_ms"] = max(compute_ms, total["bytes_once"] / tb_per_s / 1e9)
                row[f"{gpu}_ms_streamed"] = max(compute_ms, total["bytes_streamed"] / tb_per_s / 1e9)
                row[f"FA2_{gpu}_ms"] = heads * fa2_flops(n_pos, d_head) / FA2_PUBLISHED[gpu] / 1e9
            rows.append(row)
    return rows

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

The roofline priced TRA's float32 atomics at nothing and ranked its backward the cheapest; an
H200 measured it the slowest (``runs/gpu/bench-kernels-h200.csv``). :func:`calibrate` fits the
time of a forward or backward pass, in ms, as a non-negative sum of what the kernels do (launches,
FLOPs, bytes streamed, atomic bytes, exp, scan and tile elements: :data:`FEATURES`, each launch's
scaled by its fill of the GPU) to the rows measured on a GPU, and :func:`calibrated_table` predicts each kernel's fwd and bwd from it beside the
measured rows, with the relative error. Each measured file is described by the code it ran
(:data:`MEASURED_FILES`, :func:`code`): the earlier one (:data:`AS_MEASURED`: TRA's backward with
atomics) or the current one (TRA's backward without atomics, FoT's with FlashAttention-2's delta
inside its dQ kernel); for the earlier file's rows the current code's estimate is marked as not
measured. ``python -m kernels.tooling.cost [CSV ...]`` prints them.

Two terms were added after the model, fitted on ``runs/gpu/bench-kernels-h200.csv`` and ``-2.csv``,
missed ``-4.csv`` (2 and 8 sequence-heads, head dim 16 for trela and TDA, nearly every tile
skipped) by -44% to -78% for TRA, trela and TDA: ``tile_elements``, a feature, the element-wise
work of every visited tile (masks and comparisons, which a tile skipped after its scores still
does); and the fill of the GPU, not fitted: every work feature of a launch is scaled by
``(work + idle) / work``, with the idle slots of an under-filled GPU from :func:`idle_elements`
(programs placed in grid order on :data:`SLOTS`, the generalisation of ``ceil(programs / SMs)``
waves to programs of unequal work), so that a launch lasts as long as its busiest slot. TRA's
backward is priced per pass of rows and, since its key split, per key chunk (:func:`_launches`).
Fitted on the three files it may see (:data:`MEASURED_FILES`: ``-3.csv`` is the ``-2.csv`` code
at Hopper's tiles), it predicts the held-out ``-4.csv`` within 30% for TRA's backward (-19%) and
FoT (+14% forward, +5% backward), TRA's forward at -30%, and still misses trela and TDA by -62% to
-78%: the fit gives ``tile_elements`` no weight, since every row of those files has head dim 64,
where a tile's element-wise work and its products grow together, and it puts trela's and TDA's
time on their products, which head dim 16 and skipped tiles all but remove. Head dim 16 or
skipped tiles have to be in what the model is fitted on before it can price them.
``tests/test_kernels.py::test_cost_model_in_sample_and_held_out`` holds the in-sample error at
T >= 4096 (median under 15%, none over 40%) and these held-out errors.
"""

from __future__ import annotations

import functools
import heapq
import math
from pathlib import Path
from dataclasses import dataclass

import torch

from kernels.tooling.tiles import HOPPER_TILES, TileConfig, default_tiles
from kernels.tra.triton import PROGRAMS_PER_SM, backward_launches

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
    ``products`` matrix products of [BLOCK_M, d] x [d, BLOCK_N] size per visited tile; ``counts``
    int32 entries of TRA's count table written per owned row and visited tile; ``exp`` whether it
    takes the exponential of every tile element (a softmax), ``scan`` whether it runs a cumulative
    sum along every tile row (TRA's D-bar); ``kept`` and ``kept_products`` what a visited tile that
    skipping leaves out still costs: the rows it loads and the products it runs (its scores, for a
    tile skipped after them; nothing, for one the norm bound rules out before any load). A pass whose
    ``kernel`` starts with ``fwd`` belongs to the forward, any other to the backward. ``row_passes``:
    the launch runs once per pass of ``rows_per_pass`` query rows (TRA's backward,
    :func:`kernels.tra.triton.rows_per_pass`), a key-tile program walking the rows of its pass only;
    ``chunks``: its query-tile programs walk one key chunk each, as
    :func:`kernels.tra.triton.backward_launches` cuts them, "all" of the chunks their rows see or
    "past_first" (TRA's backward since its key split); "" a whole walk."""
    kernel: str
    key_major: bool
    own: Rows
    visited: Rows
    written: Rows
    products: int
    atomic: Rows = Rows()
    counts: int = 0
    exp: bool = False
    scan: bool = False
    kept: Rows = Rows()
    kept_products: int = 0
    row_passes: bool = False
    chunks: str = ""


PASSES = {
    # TRA's in-tile suffix count of survivors is a product with a BLOCK_N x BLOCK_N triangle (no scan),
    # counted as one more product; a tile without survivors is skipped after its scores and counts
    "tra": (Pass("fwd", False, Rows(1, 0, 1), Rows(2), Rows(1, 0, 1), 3, exp=True,  # q, log delta | k, v | z, lse
                 kept=Rows(1), kept_products=2),
            # q | k | each row's survivors per key chunk, for the chunks past the first
            Pass("bwd_chunk_survivors", False, Rows(1), Rows(1), Rows(0, 0, 1), 1, kept=Rows(1), kept_products=1,
                 row_passes=True, chunks="past_first"),
            # q, dO, z, log delta, lse | k, v | dQ, dlog delta, delta; the count table
            Pass("bwd_dq", False, Rows(3, 0, 2), Rows(2), Rows(1, 0, 2), 4, counts=1, exp=True, kept=Rows(1),
                 kept_products=2, row_passes=True, chunks="all"),
            # k, v | q, dO, log delta, lse, delta, count | dK, dV
            Pass("bwd_dkdv", True, Rows(2), Rows(2, 0, 4), Rows(2), 5, exp=True, kept=Rows(1, 0, 2), kept_products=2,
                 row_passes=True)),
    "fot": (Pass("fwd", False, Rows(1, 0, 1), Rows(2, 0, 1), Rows(1, 0, 1), 2, exp=True),  # q, c | k, v, c | z, lse
            # q, dO, z, c, lse | k, v, c | dQ, dc, delta
            Pass("bwd_dq", False, Rows(3, 0, 2), Rows(2, 0, 1), Rows(1, 0, 2), 3, exp=True),
            Pass("bwd_dkdv", True, Rows(2, 0, 1), Rows(2, 0, 3), Rows(2, 0, 1), 4, exp=True)),
    # tau computed in the kernels; a tile skipped is one the norm bound rules out (the few it misses,
    # which the forward finds after their scores, are priced as the bound's); the pre-passes read
    # k (q) once and write one float32 per tile (not counted)
    "trela": (Pass("fwd_key_norms", True, Rows(1), Rows(), Rows(), 0),
              Pass("fwd", False, Rows(1), Rows(2), Rows(1), 2),                     # q | k, v | z
              Pass("bwd_query_norms", False, Rows(1), Rows(), Rows(), 0),
              Pass("bwd_dkdv", True, Rows(2), Rows(2), Rows(2), 4),                 # k, v | q, dO | dK, dV
              Pass("bwd_dq", False, Rows(2), Rows(2), Rows(1, 0, 1), 3)),           # q, dO | k, v | dQ, dbeta
    "tda": (Pass("fwd_key_norms", True, Rows(2), Rows(), Rows(), 0),
            Pass("fwd", False, Rows(2), Rows(3), Rows(1), 3),                       # q1, q2 | k1, k2, v | z
            Pass("bwd_query_norms", False, Rows(2), Rows(), Rows(), 0),
            Pass("bwd_dkdv", True, Rows(3), Rows(3), Rows(3), 6),
            Pass("bwd_dq", False, Rows(3), Rows(3), Rows(2, 0, 2), 5)),
}

# trela and TDA as ``runs/gpu/bench-kernels-h200-2.csv`` to ``-4.csv`` measured them: tau computed by PyTorch
# and read as a per-position scalar, no norm bound, a tile without survivors skipped after its
# scores (``-4.csv``: in both passes; the earlier files' random inputs leave none), and their
# launches (tau's PyTorch ops, 10 in the forward; :func:`count_launches` on that code); and TRA's
# backward as they measured it, one query-tile program walking all its keys (no key chunks).
TAU_IN_TORCH = {
    "tra": (PASSES["tra"][0],
            Pass("bwd_dq", False, Rows(3, 0, 2), Rows(2), Rows(1, 0, 2), 4, counts=1, exp=True, kept=Rows(1),
                 kept_products=2, row_passes=True),
            PASSES["tra"][3]),
    "trela": (Pass("fwd", False, Rows(1, 0, 1), Rows(2), Rows(1), 2, kept=Rows(1), kept_products=1),
              Pass("bwd_dkdv", True, Rows(2), Rows(2, 0, 1), Rows(2), 4, kept=Rows(1, 0, 1), kept_products=1),
              Pass("bwd_dq", False, Rows(2, 0, 1), Rows(2), Rows(1, 0, 1), 3, kept=Rows(1), kept_products=1)),
    "tda": (Pass("fwd", False, Rows(2, 0, 1), Rows(3), Rows(1), 3, kept=Rows(2), kept_products=2),
            Pass("bwd_dkdv", True, Rows(3), Rows(3, 0, 1), Rows(3), 6, kept=Rows(2, 0, 1), kept_products=2),
            Pass("bwd_dq", False, Rows(3, 0, 1), Rows(3), Rows(2, 0, 2), 5, kept=Rows(2), kept_products=2)),
}
LAUNCHES_TAU_IN_TORCH = {"tra": (1, 2), "trela": (11, 5), "tda": (12, 10)}

# The code the H200 measured (runs/gpu/bench-kernels-h200.csv, before TRA's backward without atomics): PASSES with
# TAU_IN_TORCH's trela and TDA (their launches are those of that code), but TRA's
# kernels as they were: its suffix counts a scan (tl.cumsum), its backward one kernel per query
# tile adding dK and dV with float32 atomics (q, dO, log delta, lse, delta | k, v | dQ, dlog
# delta); and FoT's delta computed by PyTorch, read by its dQ kernel. And each op's launches,
# forward and backward, Triton kernels and the PyTorch ops around them, as :func:`count_launches`
# counts them on that code (TRA's backward: 3 zero fills, FlashAttention-2's delta in 5 ops, 3
# casts; FoT's the delta's 5 ops too).
AS_MEASURED = {
    **PASSES, **TAU_IN_TORCH,
    "fot": (PASSES["fot"][0], Pass("bwd_dkdv", True, Rows(2, 0, 1), Rows(2, 0, 3), Rows(2, 0, 1), 4, exp=True),
            Pass("bwd_dq", False, Rows(2, 0, 3), Rows(2, 0, 1), Rows(1, 0, 1), 3, exp=True)),
    "tra": (Pass("fwd", False, Rows(1, 0, 1), Rows(2), Rows(1, 0, 1), 2, exp=True, scan=True),
            Pass("bwd", False, Rows(2, 0, 3), Rows(2), Rows(0, 1, 1), 5, atomic=Rows(0, 2), exp=True, scan=True)),
}
LAUNCHES_AS_MEASURED = {"tra": (1, 12), "fot": (2, 11), "trela": (11, 5), "tda": (12, 10)}
# The H200 benchmarks the model is fitted to, each with the code it measured: "earlier" is
# AS_MEASURED (runs/gpu/bench-kernels-h200.csv), "tau-in-torch" is PASSES with TAU_IN_TORCH's trela and
# TDA (runs/gpu/bench-kernels-h200-2.csv: TRA's backward without atomics, at the tiles every GPU but
# Hopper still gets, which are those :func:`pass_cost` prices by default); "current" is PASSES with
# the launches the wrappers make now.
# ``-3.csv`` is the "tau-in-torch" code again, at Hopper's own tiles (:data:`HOPPER_FILES`).
MEASURED_FILES = {"runs/gpu/bench-kernels-h200.csv": "earlier", "runs/gpu/bench-kernels-h200-2.csv": "tau-in-torch",
                  "runs/gpu/bench-kernels-h200-3.csv": "tau-in-torch"}
# The measurement the fitted model predicts without being fitted to it (:func:`predicted_rows`): the
# kernels on trained-sparsity inputs, whose zero-tile fraction is the skip, at Hopper's tiles.
SKIP_FILE = "runs/gpu/bench-kernels-h200-4.csv"
# The files measured at :data:`kernels.tooling.tiles.HOPPER_TILES` (the others at the tiles every GPU gets)
HOPPER_FILES = ("runs/gpu/bench-kernels-h200-3.csv", SKIP_FILE)
# What a pass's time is fitted on (:func:`pass_features`), over all sequence-heads, each work feature
# scaled by its launch's fill
FEATURES = ("launches", "flops", "bytes_streamed", "bytes_atomic", "exp_elements", "scan_elements", "tile_elements")
# An H200's 132 SMs, each holding kernels.tra.triton.PROGRAMS_PER_SM programs at once: the slots of
# idle_elements. Of 1, 2, 4 and 8 programs an SM, 2 also gives the smallest largest in-sample error.
SLOTS = 132 * PROGRAMS_PER_SM
BENCH_HEADS = 4  # kernels.tooling.bench.bench_kernel's n_heads, which the measured rows used


def _launches(p: Pass, n_pos: int, block_m: int, block_n: int, d_head: int = 64,
              heads: int = 1) -> list[list[list[int]]]:
    """The launches of ``p`` for ``heads`` sequence-heads of ``n_pos`` positions: for each launch,
    its programs of one sequence-head in groups (the key chunks of a grid's third axis, each group
    launched for every sequence-head before the next), each program as the rows it walks (tiles
    times tile rows). TRA's passes of rows and key chunks are those its backward launches
    (:func:`kernels.tra.triton.backward_launches` on :data:`SLOTS`)."""
    blocks = [(0, n_pos, None)]
    if p.row_passes:
        plan = backward_launches(n_pos, heads, {"BLOCK_M": block_m, "BLOCK_N": block_n, "D": d_head}, SLOTS)
        blocks = [(b.row0, b.row_end, b.chunk_tiles if p.chunks else None) for b in plan]
    out = []
    for row0, row_end, chunk in blocks:
        if p.key_major:
            out.append([[math.ceil((row_end - max(row0, j * block_n // block_m * block_m)) / block_m) * block_m
                         for j in range(math.ceil(row_end / block_n))]])
            continue
        # the key tiles each query tile of the block walks, cut into chunks of ``chunk`` key tiles
        walks = [math.ceil(min(i + block_m, row_end) / block_n) for i in range(row0, row_end, block_m)]
        chunk = chunk or max(walks)
        groups = [[max(min(tiles - c * chunk, chunk), 0) * block_n for tiles in walks]
                  for c in range(math.ceil(max(walks) / chunk))]
        if p.chunks == "past_first":
            groups = groups[1:]
        if groups:
            out.append(groups)
    return out


def _programs(p: Pass, n_pos: int, block_m: int, block_n: int, d_head: int, heads: int) -> list[int]:
    """Rows each program of ``p`` walks, over all its launches, for one of ``heads`` sequence-heads."""
    return [rows for launch in _launches(p, n_pos, block_m, block_n, d_head, heads) for group in launch
            for rows in group]


def _tile_work(p: Pass, skipped: float) -> float:
    """What a visited tile element costs in element-wise work, as a fraction of a live tile's: a
    skipped tile whose scores were computed (``kept_products``) still does that tile's masking and
    comparisons; one the norm bound rules out does none."""
    return (1 - skipped) + skipped * (p.kept_products > 0) if p.products else 0.0


def pass_cost(p: Pass, n_pos: int, d_head: int = 64, dtype=torch.bfloat16, skipped: float = 0.0,
              tiles: TileConfig | None = None, heads: int = 1) -> dict:
    """FLOPs, bytes moved once, bytes streamed (atomics included), atomic bytes and tile elements
    (``exp_elements``, ``scan_elements``: those that take an exp, a scan; ``tile_elements``: those
    of every visited tile, each weighted by :func:`_tile_work`) of ``p``'s launches for one
    sequence-head of ``n_pos`` positions, when a fraction ``skipped`` of the tile pairs it visits is
    skipped (each then costing ``p.kept`` and ``p.kept_products`` only, and no exp or scan), at
    ``tiles`` (default: the dispatcher's for ``dtype`` and ``d_head`` on a GPU without tiles of its
    own, those of the H200 files the model is fitted to, measured before Hopper had its own), when
    ``heads`` sequence-heads are launched together (TRA's key chunks depend on them)."""
    tiles = tiles or default_tiles(dtype, d_head)
    block_m, block_n = tiles.block_m, tiles.block_n
    element = dtype.itemsize
    own_rows, walk_rows = (block_n, block_m) if p.key_major else (block_m, block_n)
    visits = _programs(p, n_pos, block_m, block_n, d_head, heads)
    live = 1 - skipped
    flops = sum(2 * (live * p.products + skipped * p.kept_products) * own_rows * rows * d_head for rows in visits)
    atomic = sum(rows * 2 * p.atomic.bytes(element, d_head) for rows in visits)
    table = sum(own_rows * 4 * p.counts * rows // walk_rows for rows in visits)
    once = n_pos * (p.own.bytes(element, d_head) + p.visited.bytes(element, d_head)
                    + p.written.bytes(element, d_head) + 2 * p.atomic.bytes(element, d_head)) + table
    visited = live * p.visited.bytes(element, d_head) + skipped * p.kept.bytes(element, d_head)
    streamed = sum(own_rows * (p.own.bytes(element, d_head) + p.written.bytes(element, d_head)) + rows * visited
                   for rows in visits) + atomic + table
    elements = sum(own_rows * rows for rows in visits) if p.products else 0
    return {"flops": flops, "bytes_once": once, "bytes_streamed": streamed, "bytes_atomic": atomic,
            "exp_elements": live * elements * p.exp, "scan_elements": live * elements * p.scan,
            "tile_elements": _tile_work(p, skipped) * elements}


def idle_elements(p: Pass, n_pos: int, heads: int, d_head: int = 64, skipped: float = 0.0,
                  tiles: TileConfig | None = None, slots: int | None = None) -> float:
    """What an under-filled GPU wastes on ``p`` over ``heads`` sequence-heads, in tile elements
    (:func:`pass_cost`'s ``tile_elements``): each launch's programs, in grid order, go to the first
    of ``slots`` free (default :data:`SLOTS`), a program taking its tile elements' time; the waste is
    the slots' time idle before the launch's last program ends (``makespan * slots - work``). A grid
    of many short programs wastes little; one of fewer programs than slots, or whose last programs
    are the long ones (a causal walk), wastes the most. Waves, ``ceil(programs / slots)``, are the
    special case of programs of equal work."""
    tiles = tiles or default_tiles(torch.bfloat16, d_head)
    own_rows = tiles.block_n if p.key_major else tiles.block_m
    weight = _tile_work(p, skipped) * own_rows
    idle = 0.0
    for launch in _launches(p, n_pos, tiles.block_m, tiles.block_n, d_head, heads):
        free = [0.0] * (slots or SLOTS)
        work = 0.0
        for group in launch:
            for _ in range(heads):
                for rows in group:
                    heapq.heapreplace(free, free[0] + weight * rows)
                    work += weight * rows
        idle += max(free) * len(free) - work
    return idle


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
            total = {key: heads * sum(pass_cost(p, n_pos, d_head, dtype, heads=heads)[key] for p in passes)
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


def count_launches(op: str) -> tuple[int, int]:
    """Launches of op ``op``'s forward and backward as its wrapper makes them on a GPU (a name of
    :data:`kernels.tooling.bench.KERNELS`): its Triton kernels, recorded rather than run (``kernels.tooling.aot``),
    and the PyTorch ops around them other than allocations and views, at T = 64, 4 heads of 64,
    bf16, on CPU tensors."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernels.tooling.aot import _recording, _ReportsCuda
    from kernels.tooling.bench import KERNELS, random_inputs

    class CountOps(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            self.n += not (func.is_view or name in ("aten::empty", "aten::empty_strided", "aten::_unsafe_view",
                                                     "aten::detach", "aten::lift_fresh"))
            return func(*args, **(kwargs or {}))

    kernels = []
    with _ReportsCuda(), _recording(kernels):
        inputs, _ = random_inputs(op, 1, 64, 4, 64, torch.bfloat16, "cpu")
        dz = torch.ones(1, 64, 4, 64, dtype=torch.bfloat16)
        with CountOps() as forward:
            z = KERNELS[op](*inputs)
        n_forward = len(kernels)
        with CountOps() as backward:
            torch.autograd.grad(z, [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad], dz)
    return n_forward + forward.n, len(kernels) - n_forward + backward.n


def pass_features(passes, launches: int, n_pos: int, heads: int, d_head: int = 64, skipped: float = 0.0,
                  tiles: TileConfig | None = None) -> list[float]:
    """:data:`FEATURES` of a forward or backward made of ``passes`` and ``launches`` launches in
    all (at T = 64: the passes' launches past one pass of rows are added), over ``heads``
    sequence-heads of ``n_pos`` positions (bf16), a fraction ``skipped`` of the visited tile pairs
    skipped (:func:`pass_cost`), each pass's work scaled by its fill (:func:`idle_elements`)."""
    tiles = tiles or default_tiles(torch.bfloat16, d_head)
    costs = [pass_cost(p, n_pos, d_head, skipped=skipped, tiles=tiles, heads=heads) for p in passes]
    # a launch lasts as long as its busiest slot: its work scaled by (work + idle) / work
    fills = [1 + idle_elements(p, n_pos, heads, d_head, skipped, tiles) / (heads * c["tile_elements"])
             if c["tile_elements"] else 1.0 for p, c in zip(passes, costs)]
    # count_launches counts at T = 64, one pass of rows: add the passes' launches past that
    launches += sum(len(_launches(p, n_pos, tiles.block_m, tiles.block_n, d_head, heads))
                    - len(_launches(p, 64, tiles.block_m, tiles.block_n, d_head, heads)) for p in passes)
    return [launches] + [heads * sum(c[key] * fill for c, fill in zip(costs, fills)) for key in FEATURES[1:]]


def _direction(passes, direction: str):
    return [p for p in passes if p.kernel.startswith("fwd") == (direction == "fwd")]


@functools.lru_cache(maxsize=None)
def code(which: str) -> tuple[dict, dict]:
    """The launches of each op, ``(passes, (forward launches, backward launches))`` by op, of the
    code ``which`` of :data:`MEASURED_FILES`: "earlier" (:data:`AS_MEASURED`), "tau-in-torch"
    (:data:`PASSES` with :data:`TAU_IN_TORCH`) or "current" (:data:`PASSES`, and
    :func:`count_launches` of the wrappers as they are), counted once."""
    if which == "earlier":
        return AS_MEASURED, LAUNCHES_AS_MEASURED
    if which not in ("tau-in-torch", "current"):
        raise ValueError(f"unknown code {which!r}: choose earlier, tau-in-torch or current")
    launches = {op: count_launches(op) for op in PASSES}
    if which == "tau-in-torch":
        return {**PASSES, **TAU_IN_TORCH}, {**launches, **LAUNCHES_TAU_IN_TORCH}
    return PASSES, launches


def measured_rows(path: str = "runs/gpu/bench-kernels-h200.csv", which: str | None = None) -> list[dict]:
    """The ``triton`` rows of a ``glitchlens bench kernels`` CSV (bf16, head dim 64), each with
    the code it measured (``code``: ``which``, by default :data:`MEASURED_FILES`'s entry for the
    file, else "tau-in-torch", the code of every file measured so far) and whether it ran at Hopper's
    own tiles (``hopper``: the file is one of :data:`HOPPER_FILES`)."""
    import pandas as pd

    frame = pd.read_csv(path)
    which = which or next((c for f, c in MEASURED_FILES.items() if str(path).endswith(f)), "tau-in-torch")
    hopper = any(str(path).endswith(f) for f in HOPPER_FILES)
    return [{**r, "code": which, "hopper": hopper} for r in frame[frame.impl == "triton"].to_dict("records")]


def _features(r: dict, codes: dict, which: str, direction: str) -> list[float]:
    """:func:`pass_features` of a measured row: its T, sequence-heads, head dim, (as the skip)
    its zero-tile fraction and tiles, where the file gives them (the earlier files' random inputs: 4
    heads of 64, nothing skipped)."""
    passes, launches = codes[which]
    tiles = HOPPER_TILES[r["kernel"]] if r.get("hopper") else None
    return pass_features(_direction(passes[r["kernel"]], direction), launches[r["kernel"]][direction == "bwd"],
                         r["T"], r["batch"] * r.get("heads", BENCH_HEADS), r.get("d_head", 64),
                         r.get("zero_tiles", 0.0), tiles)


def calibrate(rows: list[dict]) -> dict[str, float]:
    """ms per unit of each of :data:`FEATURES`, non-negative, fitted to the forward and backward
    times of the measured ``rows`` (:func:`measured_rows`), each described by the code it measured
    (:func:`code`), each row weighted by 1 / its time (relative errors)."""
    import numpy as np
    from scipy.optimize import nnls

    codes = {which: code(which) for which in {r["code"] for r in rows}}
    X = [_features(r, codes, r["code"], direction) for r in rows for direction in ("fwd", "bwd")]
    y = [r[f"{direction}_ms"] for r in rows for direction in ("fwd", "bwd")]
    X, y = np.array(X, dtype=float), np.array(y)
    scale = X.max(axis=0)
    coefficients, _ = nnls(X / scale / y[:, None], np.ones(len(y)))
    return dict(zip(FEATURES, (coefficients / scale).tolist()))


def calibrated_table(rows: list[dict], coefficients: dict[str, float] | None = None) -> list[dict]:
    """Per measured (kernel, T, code): the calibrated prediction of fwd and bwd (ms) for the code as
    measured, beside the measured time and the relative error; for a row of an earlier code whose kernel
    changed since (its passes or launches differ from :data:`PASSES` and the wrappers' now), a second
    row with the current code's prediction, ``measured`` False and no error."""
    coefficients = coefficients or calibrate(rows)
    codes = {which: code(which) for which in ("earlier", "tau-in-torch", "current")}

    def predict(r, which, direction):
        return sum(coefficients[key] * value for key, value in zip(FEATURES, _features(r, codes, which, direction)))

    def unchanged(op, which):
        return all(codes[which][part][op] == codes["current"][part][op] for part in (0, 1))

    table = []
    for r in rows:
        for which in dict.fromkeys((r["code"], "current")):
            measured = which == r["code"]
            if not measured and unchanged(r["kernel"], r["code"]):
                continue
            row = {"kernel": r["kernel"], "T": r["T"], "code": which if measured else "current (not measured)",
                   "measured": measured}
            for direction in ("fwd", "bwd"):
                predicted = predict(r, which, direction)
                row[f"{direction}_ms"] = r[f"{direction}_ms"] if measured else float("nan")
                row[f"{direction}_predicted_ms"] = predicted
                row[f"{direction}_error"] = predicted / r[f"{direction}_ms"] - 1 if measured else float("nan")
            table.append(row)
    return table


def predicted_rows(path: str = SKIP_FILE, coefficients: dict[str, float] | None = None,
                   which: str = "tau-in-torch") -> list[dict]:
    """The fitted model (default: :func:`calibrate` on :data:`MEASURED_FILES`, which it was not fitted to)
    against each kernel of ``path`` (a ``bench kernels`` CSV of the code ``which``, at Hopper's tiles,
    :data:`kernels.tooling.tiles.HOPPER_TILES`): the row's own heads, head dim and zero-tile fraction as
    the skip; fwd and bwd measured and predicted (ms), with the relative error."""
    if coefficients is None:
        root = Path(__file__).parents[2]
        coefficients = calibrate([r for f in MEASURED_FILES for r in measured_rows(str(root / f))])
    codes = {which: code(which)}
    table = []
    for r in measured_rows(path, which):
        row = {"kernel": r["kernel"], "T": r["T"], "zero_tiles": r["zero_tiles"]}
        for direction in ("fwd", "bwd"):
            features = _features({**r, "hopper": True}, codes, which, direction)
            predicted = sum(coefficients[key] * value for key, value in zip(FEATURES, features))
            row.update({f"{direction}_ms": r[f"{direction}_ms"], f"{direction}_predicted_ms": predicted,
                        f"{direction}_error": predicted / r[f"{direction}_ms"] - 1})
        table.append(row)
    return table


def main(argv: list[str] | None = None) -> int:
    """``python -m kernels.tooling.cost [CSV ...]``: the model calibrated on ``glitchlens bench kernels``
    CSVs (default: those of :data:`MEASURED_FILES`, and then its prediction of :data:`SKIP_FILE`), its
    coefficients and errors."""
    import sys

    import pandas as pd

    argv = sys.argv[1:] if argv is None else argv
    rows = [r for path in argv or MEASURED_FILES for r in measured_rows(path)]
    coefficients = calibrate(rows)
    table = pd.DataFrame(calibrated_table(rows, coefficients))
    errors = table.loc[table.measured, ["fwd_error", "bwd_error"]].abs().stack()
    print("calibrated: " + ", ".join(f"{key} {value:.3g} ms" for key, value in coefficients.items()))
    print(table.drop(columns="measured").to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"relative error against the {len(errors)} measured times: median {errors.median():.0%}, "
          f"max {errors.max():.0%}")
    if not argv:
        print(f"held out, {SKIP_FILE}:")
        print(pd.DataFrame(predicted_rows(coefficients=coefficients)).to_string(index=False,
                                                                                 float_format=lambda x: f"{x:.3g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

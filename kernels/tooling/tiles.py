"""What every Triton kernel shares: input checks, launch parameters, tile-level helpers.

Layout: q, k, v and the outputs are ``[batch, pos, head, d_head]`` (the models' layout)
with arbitrary strides, batch stride included; every offset is computed in 64 bits.
Per-position scalars (gates, thresholds, the log-sum-exp) are ``[batch, head, pos]``
float32, made contiguous by the wrappers (an O(T) copy). Head dims: 16, 32, 64, 128.

Precision: scores, logits, softmax statistics and every accumulator are float32. As in
FlashAttention, the weights (P, or the thresholded pattern) and score gradients are cast to
the input dtype for their matrix products, which accumulate in float32; float32 inputs
stay float32 throughout (IEEE products, no TF32).

Kernels run on CUDA tensors, or on CPU tensors when ``TRITON_INTERPRET=1`` is set before
triton is first imported (the test suite does this).
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.tooling.common import interpreting

HEAD_DIMS = (16, 32, 64, 128)


@dataclass(frozen=True)
class TileConfig:
    """A kernel's tile sizes (query rows, key rows) and launch options."""
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}-w{self.num_warps}-s{self.num_stages}"

    @classmethod
    def parse(cls, name: str) -> TileConfig:
        """The configuration :attr:`name` writes, ``BMxBN-wW-sS`` (e.g. ``128x64-w8-s2``): tiles powers of
        two from 16 to 256, 1 to 16 warps (a power of two), 1 to 6 pipeline stages."""
        match = re.fullmatch(r"(\d+)x(\d+)-w(\d+)-s(\d+)", name.strip())
        config = cls(*map(int, match.groups())) if match else None
        if (config is None or not all(16 <= b <= 256 and b & (b - 1) == 0 for b in (config.block_m, config.block_n))
                or config.num_warps not in (1, 2, 4, 8, 16) or not 1 <= config.num_stages <= 6):
            raise ValueError(f"tile configuration {name!r}: write BMxBN-wW-sS, tiles powers of two from 16 to 256, "
                             "1 to 16 warps (a power of two), 1 to 6 stages, e.g. 128x64-w8-s2")
        return config


# The tile configurations the dispatcher chooses among (:func:`default_tiles`, :func:`key_tile_meta`,
# :func:`tra_meta`); ``glitchlens bench kernels --compile-only`` compiles every kernel at
# each of them for A100, H100 and MI300.
TILE_CONFIGS = (TileConfig(64, 32, 4, 2), TileConfig(32, 32, 4, 2), TileConfig(16, 16, 4, 2),
                TileConfig(16, 16, 8, 2), TileConfig(16, 16, 4, 1), TileConfig(16, 16, 8, 1), TileConfig(32, 32, 8, 1),
                TileConfig(64, 64, 4, 3), TileConfig(64, 32, 4, 3), TileConfig(128, 64, 8, 3))


# Hopper's tiles (CUDA arch 90) in half precision up to head dim 64, per op, from the H200 tile sweep
# (runs/gpu/tiles-h200.csv): at T = 16384 the fastest fwd+bwd of the seven configurations measured
# that compile without a register spill for sm_90 with the project's Triton (64 x 64 with 4 warps
# and 3 stages spills in TRA's and TDA's backward there, though not with the Triton 3.6 that ran the
# sweep); tests/test_kernels.py checks the choice against the file.
HOPPER_TILES = {"tra": TileConfig(64, 32, 4, 3), "fot": TileConfig(64, 64, 4, 3), "trela": TileConfig(64, 64, 4, 3),
                "tda": TileConfig(128, 64, 8, 3)}


def default_tiles(dtype: torch.dtype, d_head: int, arch: int | None = None, op: str | None = None) -> TileConfig:
    """The tiles a GPU launch of ``op`` (a name of ``kernels.tooling.bench.KERNELS``) gets, chosen from the
    compile table (docs/explanation/kernels-and-cpu-path.md "Compiled for A100, H100 and MI300")
    and, on Hopper (``arch`` 90, the CUDA compute capability as major * 10 + minor), from the tile
    sweep measured on an H200 (:data:`HOPPER_TILES`). In half precision 64 x 32 up to head dim 64
    (on Hopper, the op's own) and 32 x 32 at 128. In float32, whose IEEE products (no TF32) run on
    the FMA units with each thread holding whole operand rows, 16 x 16 (the dK/dV kernels with
    twice the warps, :func:`key_tile_meta`), with one pipeline stage at head dim 16, where with
    two ptxas held FoT's dQ kernel to 64 registers on sm_90 and spilled. Larger tiles spilled
    registers on sm_80 or sm_90 (64 x 64, the earlier choice, in most backward kernels)."""
    if dtype == torch.float32:
        return TileConfig(16, 16, 4, 1 if d_head == 16 else 2)
    if arch == 90 and d_head <= 64 and op in HOPPER_TILES:
        return HOPPER_TILES[op]
    return TileConfig(64, 32, 4, 2) if d_head <= 64 else TileConfig(32, 32, 4, 2)


# The configuration every launch takes inside :func:`forced_tiles`, over the dispatcher's choice;
# the architecture :func:`gpu_arch` reports inside :func:`compiling_for`.
_forced: TileConfig | None = None
_target_arch: int | None = None


@contextlib.contextmanager
def forced_tiles(config: TileConfig):
    """Every kernel launched inside the block (forward and backward) runs at ``config``, its tiles,
    warps and stages, instead of the dispatcher's choice (:func:`default_tiles`,
    :func:`key_tile_meta`, :func:`tra_meta`): how ``glitchlens bench kernels --tile-configs``
    times the candidates side by side on one GPU. A module global, so one thread at a time;
    tiles given to an op (``block_m``/``block_n``) still win.

    >>> with forced_tiles(TileConfig.parse("64x64-w4-s3")):
    ...     launch_meta(torch.bfloat16, 64, None, None)["BLOCK_N"]
    64
    """
    global _forced
    before, _forced = _forced, config
    try:
        yield config
    finally:
        _forced = before


@contextlib.contextmanager
def compiling_for(arch: int | None):
    """Inside the block, :func:`gpu_arch` reports ``arch`` (None: not a CUDA GPU) whatever the
    tensors' device: how ``kernels.tooling.aot`` captures the launches a given GPU would make."""
    global _target_arch
    before, _target_arch = _target_arch, arch
    try:
        yield
    finally:
        _target_arch = before


def gpu_arch(device: torch.device) -> int | None:
    """The CUDA compute capability of ``device`` as major * 10 + minor (90 on H100 and H200), None
    off NVIDIA GPUs (the interpreter; AMD, where ROCm reports its own numbers under the same API,
    gfx90a as 9.0) or inside :func:`compiling_for` its architecture."""
    if _target_arch is not None or device.type != "cuda":
        return _target_arch
    return _cuda_arch(torch.cuda.current_device() if device.index is None else device.index)


@functools.lru_cache(maxsize=None)
def _cuda_arch(index: int) -> int | None:
    """A CUDA device's compute capability as major * 10 + minor (None on ROCm), asked once per
    device (a launch should not pay a driver query)."""
    if torch.version.hip:
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


def launch_meta(dtype: torch.dtype, d_head: int, block_m: int | None, block_n: int | None,
                device: torch.device | None = None, op: str | None = None) -> dict:
    """The compile-time arguments every kernel takes: head dim, dot precision (IEEE for
    float32 inputs: TF32 would move scores across the thresholds), tile sizes (given, or
    :func:`default_tiles` of ``op`` for ``device``'s architecture; 32 x 32 under the interpreter, whose
    programs run one after another on the CPU; inside :func:`forced_tiles` its configuration)
    and launch options."""
    arch = gpu_arch(device) if device is not None else _target_arch
    tiles = _forced or default_tiles(dtype, d_head, arch, op)
    block = (32, 32) if interpreting() and not _forced else (tiles.block_m, tiles.block_n)
    return {"D": d_head, "PREC": "ieee" if dtype == torch.float32 else "tf32",
            "BLOCK_M": block_m or block[0], "BLOCK_N": block_n or block[1],
            "num_warps": tiles.num_warps, "num_stages": tiles.num_stages}


def key_tile_meta(meta: dict) -> dict:
    """:func:`launch_meta` for the dK/dV kernels, whose programs own a key tile and walk the
    query tiles: in float32 with twice the warps (at four, their IEEE products spilled registers
    on sm_80 and sm_90 even at 16 x 16 tiles), otherwise the same (and inside :func:`forced_tiles`)."""
    if _forced:
        return meta
    return {**meta, "num_warps": 2 * meta["num_warps"]} if meta["PREC"] == "ieee" else meta


def tra_meta(meta: dict) -> dict:
    """:func:`launch_meta` for TRA's three kernels (the dK/dV kernel then through
    :func:`key_tile_meta`), which also hold each row's survivor count and D-bar: in half precision
    at head dim 128 (32 x 32 tiles) with 8 warps and one pipeline stage, in float32 at head dim 16
    with two stages. With the defaults the forward spilled 8 bytes on sm_80 at head dim 128 (4
    warps, 2 stages), the dK/dV kernel 8 on sm_90 (and with 8 warps and 2 stages 8 on gfx942),
    and the dQ kernel 8 on sm_80 in float32 at head dim 16 (1 stage). Otherwise the same (and inside
    :func:`forced_tiles`)."""
    if _forced:
        return meta
    if meta["PREC"] != "ieee" and meta["D"] > 64:
        return {**meta, "num_warps": 8, "num_stages": 1}
    return {**meta, "num_stages": 2} if meta["PREC"] == "ieee" and meta["D"] == 16 else meta


def check_heads(*xs: torch.Tensor) -> tuple[int, int, int, int]:
    """Validate ``[batch, pos, head, d_head]`` inputs of one call; returns (B, T, H, D)."""
    shape = xs[0].shape
    if len(shape) != 4:
        raise ValueError(f"expected [batch, pos, head, d_head] tensors, got shape {tuple(shape)}")
    for x in xs:
        if x.shape != shape:
            raise ValueError(f"q/k/v shapes differ: {tuple(x.shape)} vs {tuple(shape)}")
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or x.dtype != xs[0].dtype:
            raise ValueError(f"q/k/v must share one dtype among float32/bfloat16/float16, got {x.dtype}")
        if x.device != xs[0].device:
            raise ValueError("q/k/v must be on one device")
    if shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim must be one of {HEAD_DIMS}, got {shape[-1]}")
    if not xs[0].is_cuda and not interpreting():
        raise RuntimeError("the Triton kernels need CUDA tensors, or TRITON_INTERPRET=1 set before "
                           "triton is imported to run them (slowly) on the CPU")
    return tuple(shape)


def per_position(x: torch.Tensor, B: int, H: int, T: int, name: str) -> torch.Tensor:
    """A per-position scalar as the contiguous ``[batch, head, pos]`` float32 the kernels read."""
    if tuple(x.shape) != (B, H, T):
        raise ValueError(f"{name} must be [batch, head, pos] = {(B, H, T)}, got {tuple(x.shape)}")
    return x.float().contiguous()


@triton.jit
def program_tile(H, BLOCK: tl.constexpr):
    """This program's batch row ``b``, head ``h`` and sequence-head ``bh``, and the positions of
    its tile of ``BLOCK`` rows (the grid is tiles x sequence-heads)."""
    bh = tl.program_id(1)
    return bh // H, bh % H, bh, tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def head_base(ptr, b, h, strides):
    """Pointer to element [b, 0, h, 0] of a ``[batch, pos, head, d_head]`` tensor;
    ``strides`` is its ``.stride()`` tuple."""
    return ptr + b.to(tl.int64) * strides[0] + h.to(tl.int64) * strides[2]


@triton.jit
def tile_ptrs(base, pos, strides, D: tl.constexpr):
    """``[len(pos), D]`` pointers to rows ``pos`` of one head."""
    return base + pos[:, None].to(tl.int64) * strides[1] + tl.arange(0, D)[None, :].to(tl.int64) * strides[3]


@triton.jit
def load_tile(base, pos, T, strides, D: tl.constexpr):
    """Rows ``pos`` of one head, zeros past the sequence end."""
    return tl.load(tile_ptrs(base, pos, strides, D), mask=pos[:, None] < T, other=0.0)


@triton.jit
def store_tile(base, pos, T, strides, x, D: tl.constexpr):
    tl.store(tile_ptrs(base, pos, strides, D), x.to(base.dtype.element_ty), mask=pos[:, None] < T)


@triton.jit
def rows_base(ptr, bh, T):
    """Pointer to row 0 of head ``bh`` of a contiguous ``[batch, head, pos]`` tensor."""
    return ptr + bh.to(tl.int64) * T


@triton.jit
def load_row(base, pos, T):
    """A per-position float32 scalar for positions ``pos``, zero past the sequence end."""
    return tl.load(base + pos, mask=pos < T, other=0.0)


@triton.jit
def store_row(base, pos, T, x):
    tl.store(base + pos, x, mask=pos < T)


@triton.jit
def causal_tile(offs_m, offs_n, T):
    """``[BLOCK_M, BLOCK_N]`` True where key j <= query i < T (so j < T too)."""
    return (offs_n[None, :] <= offs_m[:, None]) & (offs_m[:, None] < T)


@triton.jit
def tile_needed(weights, SKIP_ZERO_TILES: tl.constexpr):
    """Whether a key tile's V load and P V product must run: always, unless skipping is on
    and every weight of the tile is exactly zero (then the product adds exactly nothing)."""
    return (tl.max(tl.abs(weights)) > 0) | (not SKIP_ZERO_TILES)


@triton.jit
def online_softmax_step(m_i, l_i, acc, logits, v, PREC: tl.constexpr):
    """One key tile of FlashAttention's online softmax; logits are -inf off the support,
    and rows whose support is still empty (m_i = -inf) stay exactly zero, never NaN."""
    m_new = tl.maximum(m_i, tl.max(logits, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    P = tl.exp(logits - m_safe[:, None])
    acc = acc * alpha[:, None] + tl.dot(P.to(v.dtype), v, input_precision=PREC)
    return m_new, l_i * alpha + tl.sum(P, axis=1), acc


@triton.jit
def softmax_finish(m_i, l_i, acc):
    """Normalised output and log-sum-exp; rows with an empty support give 0 (lse 0, unused)."""
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    return acc / l_safe[:, None], tl.where(l_i > 0, m_i + tl.log(l_safe), 0.0)


@triton.jit
def softmax_tile_grad(P, dP, delta):
    """dlogits = P (dP - delta) of one tile, dP = dO V^T (FlashAttention-2)."""
    return P * (dP - delta[:, None])


# Head-dim columns per step of :func:`key_tile_products` in float32: at 16, ptxas held TDA's dK/dV
# kernel at head dim 128 to 128 registers on sm_90 and spilled; at 64 (head dim 64: the whole row)
# it took all 255 there and spilled.
PRODUCT_CHUNK = tl.constexpr(32)


@triton.jit
def key_tile_products(x, k, X, K, offs_m, offs_n, T, sx, sk, D: tl.constexpr, PREC: tl.constexpr):
    """``x k^T``, ``[BLOCK_M, BLOCK_N]`` float32, in a dK/dV kernel: ``x`` the rows ``offs_m``
    of a query-side tensor (q, dO) at head-offset pointer ``X`` (strides ``sx``), ``k`` the
    program's own key-side tile (k, v), rows ``offs_n`` at ``K`` (strides ``sk``).

    In half precision it is ``tl.dot`` of the two tiles. Float32 products are IEEE (no TF32),
    which Triton runs on the FMA units with each thread holding whole operand rows of the
    contraction, and the key-side operand stays for the whole walk over the query tiles: above
    head dim 32 that spilled registers on sm_80 and sm_90 (up to 1.4 KB a thread, TDA's at head
    dim 128). So float32 contracts :data:`PRODUCT_CHUNK` columns at a time, both sub-tiles loaded
    again from memory (rows just read, so likely cache hits; not timed on a GPU) and the partial
    products summed; the whole tiles ``x`` and ``k`` then go unused there (a load nothing reads
    is not compiled)."""
    if PREC == "ieee" and D > PRODUCT_CHUNK:
        acc = tl.zeros([offs_m.shape[0], offs_n.shape[0]], tl.float32)
        for c in tl.static_range(0, D, PRODUCT_CHUNK):
            acc += tl.dot(load_tile(X + c * sx[3], offs_m, T, sx, PRODUCT_CHUNK),
                          tl.trans(load_tile(K + c * sk[3], offs_n, T, sk, PRODUCT_CHUNK)), input_precision=PREC)
        return acc
    else:
        return tl.dot(x, tl.trans(k), input_precision=PREC)


@triton.jit
def row_dot(x, y):
    """``sum_d x_id y_id`` of two ``[rows, D]`` tiles in float32: FlashAttention-2's delta_i =
    dO_i . z_i, computed in the dQ kernel rather than by a PyTorch pass over dO and z."""
    return tl.sum(x.to(tl.float32) * y.to(tl.float32), axis=1)


def softmax_forward(ctx, op, kernel, q, k, v, gate, block_m, block_n, meta_for=lambda meta: meta,
                    **options) -> torch.Tensor:
    """Launch a softmax forward ``kernel(Q, K, V, GATE, Z, LSE, strides..., T, H, scale, ...)``,
    one program per query tile and head, from an autograd ``ctx``: returns z in v's dtype and
    saves for the backward q, k, v, the gate, z and the float32 log-sum-exp ``[batch, head, pos]``,
    with the launch parameters (:func:`launch_meta`, through ``meta_for``) in ``ctx.meta``."""
    B, T, H, D = q.shape
    ctx.meta = meta_for(launch_meta(q.dtype, D, block_m, block_n, q.device, op))
    z = torch.empty((B, T, H, D), dtype=v.dtype, device=v.device)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=v.device)
    kernel[(triton.cdiv(T, ctx.meta["BLOCK_M"]), B * H)](
        q, k, v, gate, z, lse, q.stride(), k.stride(), v.stride(), z.stride(), T, H, 1.0 / math.sqrt(D),
        **options, **ctx.meta)
    ctx.save_for_backward(q, k, v, gate, z, lse)
    return z

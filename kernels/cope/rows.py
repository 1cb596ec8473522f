"""CoPE on the CPU path (``kernels.tooling.rows``): the logits of eq. 3-9 from a block of scores, in
PyTorch (:class:`CoPERule`) or, in training in float32, in C (:class:`NativeCoPERule`)."""

from __future__ import annotations

import torch

from kernels.tooling import native
from kernels.tooling.common import MASK_FILL, suffix_sum_from_prefix
from kernels.tooling.rows import at_rows, heads_first, mask_future_, needs_grad, softmax_rows


class CoPERule:
    """CoPE's logits (eq. 3-9); ``inputs = (q [bh, pos, d], pos_emb [p_max, d])``: the
    unscaled q, for the position logits ``q . e[p]``, and the layer's position embeddings."""

    BATCHED = (True, False)

    @staticmethod
    def logits(S, rows, q, pos_emb, for_backward=True):
        g = mask_future_(torch.sigmoid(S), rows)                               # eq. 3
        p = suffix_sum_from_prefix(g)                                          # eq. 4
        clamped = p > pos_emb.shape[0] - 1 if for_backward else None
        p.clamp_(max=pos_emb.shape[0] - 1)
        lo = p.floor()
        # Only the embeddings up to the block's largest position are read: z_int[p] and the
        # step to z_int[p + 1] (0 past the table's end, where p is clamped and w = 0).
        n_emb = min(pos_emb.shape[0], int(lo.max()) + 2)
        z_int = at_rows(q, rows) @ pos_emb[:n_emb].T                                 # eq. 7
        z_steps = torch.nn.functional.pad(z_int.diff(dim=-1), (0, 1))
        w = p.sub_(lo)
        lo = lo.long()
        z_step = z_steps.gather(-1, lo)
        logits = S.add_(z_int.gather(-1, lo)).addcmul_(w, z_step)             # eq. 8-9
        mask_future_(logits, rows, MASK_FILL)
        if not for_backward:
            return logits, None, None
        return logits, None, (g, w, lo, n_emb, z_step.masked_fill_(clamped, 0.0))

    @staticmethod
    def inference_logits(S, rows, q, pos_emb):
        """:meth:`logits` without what only the backward reads (which keys were clamped)."""
        logits, empty_rows, _ = CoPERule.logits(S, rows, q, pos_emb, for_backward=False)
        return logits, empty_rows

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        g, w, lo, n_emb, z_step = saved
        # z = z_int[lo] + w (z_int[lo + 1] - z_int[lo]): dL reaches z_int[lo] and, times w,
        # the step, which moves it from z_int[lo] to z_int[lo + 1]
        d_lo = torch.zeros(*dL.shape[:2], n_emb, dtype=dL.dtype, device=dL.device).scatter_add_(-1, lo, dL)
        d_step = torch.zeros_like(d_lo).scatter_add_(-1, lo, dL * w)
        dz_int = d_lo.sub_(d_step)
        dz_int[..., 1:] += d_step[..., :-1]
        table_gradients(dz_int, rows, inputs, grads)
        dg = (dL * z_step).cumsum_(-1)  # p_ij sums g_it over t >= j, so g_it collects dp_ij over j <= t
        return dg.mul_(g).mul_(1 - g).add_(dL)


def table_gradients(dz: torch.Tensor, rows: slice, inputs, grads) -> None:
    """The position logits' gradient ``dz [bh, rows, n_emb]`` (``z = q . e[m]``, eq. 7) added into
    q's and the table's gradients."""
    q, pos_emb = inputs
    n_emb = dz.shape[-1]
    grads[0][:, rows] += dz @ pos_emb[:n_emb]
    grads[1][:n_emb] += torch.einsum("bmp,bmd->pd", dz, q[:, rows])


class NativeCoPERule:
    """:class:`CoPERule` in training on the CPU in float32: each block's gates and positions, its
    logits, and in the backward the scores' and position logits' gradients, each in one pass of a C
    kernel over the block (:func:`kernels.tooling.native.cope_positions`), where the PyTorch rule
    makes some thirty passes, two of them scatters. It keeps the gates, the positions and the
    position logits for the backward. The positions are suffix sums in double, as the native
    forward's (the PyTorch rule's are float prefix sums): equal up to float rounding."""

    BATCHED = (True, False)

    @staticmethod
    def logits(S, rows, q, pos_emb):
        g, p = native.cope_positions(S, rows.start)
        p_max = pos_emb.shape[0]
        # a row's positions peak at its first key: z is read at floor(p) and floor(p) + 1 below that
        n_emb = min(p_max, int(p[:, :, 0].max()) + 2)
        z = at_rows(q, rows) @ pos_emb[:n_emb].T                                          # eq. 7
        return native.cope_logits_(S, p, z, rows.start, p_max), None, (g, p, z)           # eq. 8-9

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        g, p, z = saved
        table_gradients(native.cope_backward_(dL, g, p, z, rows.start, inputs[1].shape[0]), rows, inputs, grads)
        return dL


def cope_rows(q, k, v, pos_emb, positions=None) -> torch.Tensor:
    """CoPE's ``z`` (gates from q . k) from q, k, v and the layer's ``pos_emb [p_max, d]``:
    :func:`kernels.cope.reference.cope_reference`'s without separate gate keys (at query
    ``positions [batch, n]`` only, if given: :func:`kernels.tooling.rows.softmax_rows`). Where the fused
    C kernel can run (built, CPU, no gradient wanted) it computes the same, 2-3x faster on the core:
    :func:`kernels.tooling.native.cope_attention`; in training on the CPU in float32 the blocks'
    logits and their gradient run in C (:class:`NativeCoPERule`), float64 and other devices run
    :class:`CoPERule`."""
    if native.usable(q, k, v, pos_emb):
        return native.cope_attention(q, k, v, pos_emb, positions)
    q_rows = heads_first(q)
    training = needs_grad(q, k, v, pos_emb) and native.trainable(q_rows, pos_emb)
    return softmax_rows(NativeCoPERule if training else CoPERule, q, k, v, q_rows, pos_emb.to(q_rows.dtype),
                        positions=positions)

"""trela and TDA on the CPU path (``kernels.tooling.rows``'s blocks of query rows): no softmax, so
their own autograd function, :class:`ThresholdRowsFunction`."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from kernels.tooling import native
from kernels.tooling.common import check_map_size, threshold
from kernels.tooling.rows import (at_rows, heads_first, heads_last, inference_blocks, key_count, mask_future_, needs_grad, per_head,
                         per_row, row_blocks)


class ThresholdRowsFunction(torch.autograd.Function):
    """``(lam, p, tau, v, q1, k1[, q2, k2]) -> sum_j (a1_ij - lam a2_ij) v_j`` with
    ``a_ij = (s_ij - tau_i)_+^p`` on causal keys, ``tau [bh, pos]``; one view when only
    q1, k1 are given (lam is then ignored). In float32 on the CPU each block's chain from the
    scores to the weights, and back from the weights' gradient to the scores', runs in one pass of
    a C kernel (:func:`kernels.tooling.native.threshold_weights_`) where PyTorch makes about ten
    each way; equal up to float rounding. Products accumulate into the gradients (``baddbmm_``) and
    write into the outputs (``out=``) without a temporary: the same floats as an add or a copy."""

    @staticmethod
    def weights(lam, p, tau, views, heads, rows, keep_views=True):
        """A block's weights ``a1 - lam a2`` and the rectified views ``(s - tau)_+``, which a
        forward without backward (``keep_views=False``) raises to the power in place."""
        R, keys = [], slice(0, key_count(rows))
        for q, k in zip(views[0::2], views[1::2]):
            r = torch.bmm(at_rows(q[heads], rows), k[heads, keys].transpose(1, 2))
            R.append(mask_future_(r.sub_(at_rows(tau[heads], rows)[..., None]).relu_(), rows))
        power = torch.pow if keep_views else torch.Tensor.pow_
        A = power(R[0], p)
        if len(R) == 2:
            A.sub_(power(R[1], p).mul_(lam))
        return A, R

    @staticmethod
    def native_weights(lam, p, tau, views, rows):
        """:meth:`weights` of a training block, the chain after the products in C."""
        keys = slice(0, rows.stop)
        R = [torch.bmm(q[:, rows], k[:, keys].transpose(1, 2)) for q, k in zip(views[0::2], views[1::2])]
        return native.threshold_weights_(R, tau, lam, p, rows.start), R

    @staticmethod
    def score_gradients(dA, R, lam, p, rows, d_tau, d_lam):
        """Each view's scores' gradient from the block's weights' gradient ``dA`` and rectified
        views ``R``; tau's gradient at the block's rows and lam's (two views) added into ``d_tau``
        and ``d_lam``."""
        dS = []
        for view, r in enumerate(R):
            # d/ds (s - tau)_+^p = p (s - tau)_+^(p-1), 0 where the key did not survive
            d = dA * (r if p == 2 else r.pow(p - 1).mul_(r > 0))
            if view == 1:  # d/d lam of -lam a2: -sum dA (s - tau)_+^p
                d_lam -= torch.dot(d.flatten(), r.flatten())
            dS.append(d.mul_(p if view == 0 else -lam * p))
            d_tau[:, rows] -= d.sum(-1)
        return dS

    @staticmethod
    def forward(ctx, lam, p, tau, v, *views):
        ctx.native = native.trainable(tau, v, *views)
        tau_rows = tau.contiguous() if ctx.native else tau
        z = torch.empty_like(v)
        ctx.blocks = []
        for rows in row_blocks(v.shape[1]):
            if ctx.native:
                A, R = ThresholdRowsFunction.native_weights(float(lam), p, tau_rows, views, rows)
            else:
                A, R = ThresholdRowsFunction.weights(lam, p, tau, views, slice(None), rows)
            torch.bmm(A, v[:, :rows.stop], out=z[:, rows])
            ctx.blocks.append((rows, A, R))
        ctx.p = p
        ctx.save_for_backward(lam, tau, v, *views)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        # in the forward's float32 even when backward() is called under autocast, which would
        # otherwise run the products in half precision beside the saved float32 maps
        with torch.autocast(dz.device.type, enabled=False):
            return ThresholdRowsFunction.float32_backward(ctx, dz)

    @staticmethod
    def float32_backward(ctx, dz):
        lam, tau, v, *views = ctx.saved_tensors
        p = ctx.p
        # q's gradient is written block by block, k's and v's accumulate over the blocks
        d_views = [(torch.empty_like if i % 2 == 0 else torch.zeros_like)(t) for i, t in enumerate(views)]
        dv, d_tau = torch.zeros_like(v), torch.zeros_like(tau)
        d_lam = torch.zeros(tau.shape[0], dtype=torch.float64) if ctx.native else torch.zeros_like(lam)
        lam_value = float(lam)
        for rows, A, R in ctx.blocks:
            keys = slice(0, rows.stop)
            dA = torch.bmm(dz[:, rows], v[:, keys].transpose(1, 2))
            dv[:, keys].baddbmm_(A.transpose(1, 2), dz[:, rows])
            if ctx.native:
                dS = native.threshold_backward_(dA, R, lam_value, p, rows.start, d_tau, d_lam)
            else:
                dS = ThresholdRowsFunction.score_gradients(dA, R, lam, p, rows, d_tau, d_lam)
            for view, d in enumerate(dS):
                q, k = views[2 * view], views[2 * view + 1]
                torch.bmm(d, k[:, keys], out=d_views[2 * view][:, rows])
                d_views[2 * view + 1][:, keys].baddbmm_(d.transpose(1, 2), q[:, rows])
        return d_lam.sum().to(lam.dtype), None, d_tau, dv, *d_views


def rectified_rows(tau, v, *views, lam=None, p: float = 2.0, positions=None) -> torch.Tensor:
    """``sum_j (a1_ij - lam a2_ij) v_j`` (views ``q1, k1, q2, k2``) or ``sum_j a1_ij v_j``
    (views ``q1, k1``) from unit q, k ``[batch, pos, head, d]``, any ``tau [batch, head, pos]``,
    v and a scalar ``lam``: the output of trela or TDA before its norm; at query ``positions
    [batch, n]`` only, if given (a forward without gradients, ``[batch, n, head, d]``). Where the
    fused C kernel can run (built, CPU, no gradient wanted) it computes the same, 2-3x faster
    on the core: :func:`kernels.tooling.native.threshold_attention`."""
    if native.usable(tau, v, *views, *([] if lam is None else [lam])):
        return native.threshold_attention(tau, v, *views, lam=0.0 if lam is None else float(lam), p=p,
                                          positions=positions)
    v_rows = heads_first(v)
    lam = torch.zeros((), dtype=v_rows.dtype, device=v.device) if lam is None else lam.to(v_rows.dtype)
    with torch.autocast(v.device.type, enabled=False):
        args = (lam, float(p), per_row(tau), v_rows, *(heads_first(t) for t in views))
        if needs_grad(tau, v, lam, *views):
            check_map_size(views[0], views[1])
            if positions is not None:
                raise ValueError("attention at chosen query positions computes no gradient: run it under no_grad")
            z = ThresholdRowsFunction.apply(*args)
        else:  # the forward alone, keeping nothing for a backward, in cache-sized blocks
            positions = per_head(positions, v.shape[2])
            z = v_rows.new_empty(v_rows.shape[0], v_rows.shape[1] if positions is None else positions.shape[1],
                                 v_rows.shape[2])
            for heads, rows, out_rows in inference_blocks(*v_rows.shape[:2], positions):
                A, _ = ThresholdRowsFunction.weights(lam, float(p), args[2], args[4:], heads, rows, keep_views=False)
                torch.bmm(A, v_rows[heads, :key_count(rows)], out=z[heads, out_rows])
    return heads_last(z, v)


def _tau(q: torch.Tensor, beta, kappa) -> torch.Tensor:
    """tau ``[batch, head, pos]`` (eq. 1) for q's shape; beta a scalar or one per head."""
    B, T, H, D = q.shape
    return threshold(T, D, torch.as_tensor(beta, device=q.device), kappa).expand(B, H, T)


def threshold_rows(q, k, v, beta, kappa=1.0, p: float = 2.0, positions=None) -> torch.Tensor:
    """trela's output before its norm: :func:`kernels.threshold.reference.threshold_reference`'s
    (same arguments as :func:`kernels.threshold.triton.threshold_attention`, and query
    ``positions``, as :func:`rectified_rows`)."""
    return rectified_rows(_tau(q, beta, kappa), v, q, k, p=p, positions=positions)


def differential_threshold_rows(q1, k1, q2, k2, v, beta, lam, kappa=1.0, p: float = 2.0, positions=None) -> torch.Tensor:
    """TDA's output before its norm: :func:`kernels.threshold.reference.differential_threshold_reference`'s
    (the arguments of :func:`kernels.threshold.triton.differential_threshold_attention`, with one
    ``lam`` for every head, and query ``positions``, as :func:`rectified_rows`)."""
    lam = torch.as_tensor(lam, device=v.device)
    if lam.numel() != 1:
        raise ValueError(f"the rows path takes one lambda for all heads, got shape {tuple(lam.shape)}")
    return rectified_rows(_tau(q1, beta, kappa), v, q1, k1, q2, k2, lam=lam, p=p, positions=positions)

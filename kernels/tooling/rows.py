"""The CPU path's shared machinery: attention computed one block of query rows at a time.

Every quantity the mechanisms compute along a query row (TRA's D-bar, CoPE's positions, the
softmax) depends only on that row's keys at or before it. So the ``[query, key]`` matrices
are built for ``ROWS`` query rows at a time against the keys up to the block's last row,
which leaves out most of the causal upper triangle (T = 512 in blocks of 64 multiplies 36/64
of the full products), and each block goes through a short chain of in-place operations.
Backward is written by hand: it keeps per block only the weights and the one map its
gradient needs (D-bar, CoPE's gates, the rectified scores), where autograd through the
reference keeps every intermediate. Rows are independent, so the block size changes the
result only by float rounding.

Each op's own rule is in ``kernels.<op>.rows``: a softmax mechanism's rule maps a block of
scores to its logits (:class:`SoftmaxRowsFunction`); trela and TDA have no softmax and their
own function. Inside, ``q, k, v`` are ``[batch * head, pos, d_head]`` float32 or float64
(:func:`heads_first` reshapes the models' ``[batch, pos, head, d_head]`` and upcasts), and
autocast is off.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from kernels.tooling.common import check_map_size, upcast

ROWS = 64  # measured at T = 512, mini: 64 and 128 within 3%, 256 about 15% slower
# Softmax weights below this are set to 0. They add nothing: together a row's flushed weights stay
# below 2^-64 T, under the float32 rounding of its largest weight (at least 1/T, rounded to 2^-24 / T)
# for every T up to 2^20, and 2^22 times under it at T = 512. Kept,
# they and their products with the backward's small gradients (A dz, A (dA - dz . z)) fall out of
# float32's normal range, and denormal operands and results make the CPU's products several times
# slower: a mini FoT at initialisation, whose decays leave most weights far below 1/T, trained 1.5x
# slower per step with the floor at float32's smallest normal number (1.2e-38) than with this one.
NEGLIGIBLE_WEIGHT = 2.0 ** -64
# Without gradients a block covers only as many sequence-heads as keep its scores within
# about this many elements (1 MiB of float32), so that its chain of element-wise passes
# stays in cache whatever the batch (at T = 512, one thread: 2^16 to 2^22 within the noise).
INFERENCE_BLOCK = 1 << 18
INFERENCE_ROWS = 64
# A block's query rows: a slice of consecutive positions shared by every sequence-head (the
# blocks of a forward over every position), or ``[bh, n]`` positions, n per sequence-head, in
# any order (a forward at chosen queries, :func:`softmax_rows`'s ``positions``).
Rows = slice | torch.Tensor


def row_blocks(n_pos: int, rows: int | None = None) -> list[slice]:
    """Consecutive blocks of ``rows`` query rows (:data:`ROWS`, read at each call, by default)."""
    rows = rows or ROWS
    return [slice(start, min(start + rows, n_pos)) for start in range(0, n_pos, rows)]


def mask_future_(x: torch.Tensor, rows: Rows, value: float = 0.0) -> torch.Tensor:
    """``x``, a block of ``[query, key]`` maps for query ``rows``, with its future keys (j > i)
    set to ``value`` in place. For a slice every earlier key is in the past of every row of the
    block, so only the block's last ``len(rows)`` columns need it; ``tril_`` and an add do it
    several times faster than ``masked_fill_`` with a broadcast mask."""
    if isinstance(rows, torch.Tensor):
        return x.masked_fill_(torch.arange(x.shape[-1], device=x.device) > rows[..., None], value)
    square = x[..., rows.start:].tril_()
    if value:
        n = rows.stop - rows.start
        square.add_(torch.full((n, n), value, dtype=x.dtype, device=x.device).triu_(1))
    return x


def at_rows(x: torch.Tensor, rows: Rows) -> torch.Tensor:
    """The values of ``x [bh, pos, ...]`` at a block's query ``rows``: ``[bh, rows, ...]``."""
    if isinstance(rows, torch.Tensor):
        return x[torch.arange(x.shape[0], device=x.device)[:, None], rows]
    return x[:, rows]


def past_keys(positions: torch.Tensor, n_keys: int) -> torch.Tensor:
    """``[batch, 1, n, key]`` bool, True where key j <= the query at ``positions [batch, n]``:
    the causal mask of chosen queries, for ``scaled_dot_product_attention``."""
    return (torch.arange(n_keys, device=positions.device) <= positions[..., None])[:, None]


def key_count(rows: Rows) -> int:
    """How many keys a block of query ``rows`` reads: those up to its last query."""
    return int(rows.max()) + 1 if isinstance(rows, torch.Tensor) else rows.stop


def needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def inference_blocks(n_bh: int, n_pos: int, positions: torch.Tensor | None = None):
    """``(heads, rows, out)`` slices for a forward without backward: blocks of query rows over
    only as many sequence-heads as keep a block's scores near :data:`INFERENCE_BLOCK`
    elements, the sequence-heads outermost so their keys and values stay in cache. ``rows``
    are consecutive blocks of every position, or with ``positions [bh, n]`` those positions
    (one block per chunk of sequence-heads); ``out`` indexes the block's rows in the output."""
    if positions is not None:
        chunk = max(1, INFERENCE_BLOCK // (positions.shape[1] * n_pos))
        for lo in range(0, n_bh, chunk):
            heads = slice(lo, min(lo + chunk, n_bh))
            yield heads, positions[heads], slice(None)
        return
    chunk = max(1, INFERENCE_BLOCK // (INFERENCE_ROWS * n_pos))
    for lo in range(0, n_bh, chunk):
        for rows in row_blocks(n_pos, INFERENCE_ROWS):
            yield slice(lo, min(lo + chunk, n_bh)), rows, rows


def softmax_rows_inference(rule, q, k, v, *inputs, positions: torch.Tensor | None = None) -> torch.Tensor:
    """:class:`SoftmaxRowsFunction`'s forward when no gradient is wanted: nothing is kept for
    a backward, blocks stay cache-sized (:func:`inference_blocks`), and a rule may compute its
    logits up to a constant per row (``inference_logits``), which the softmax ignores. With
    ``positions [bh, n]`` only the rows of those queries: ``z [bh, n, d]``."""
    n_rows = q.shape[1] if positions is None else positions.shape[1]
    z = v.new_empty(v.shape[0], n_rows, v.shape[-1])
    logits_of = getattr(rule, "inference_logits", None)
    for heads, rows, out_rows in inference_blocks(q.shape[0], k.shape[1], positions):
        n_keys = key_count(rows)
        S = torch.bmm(at_rows(q[heads], rows), k[heads, :n_keys].transpose(1, 2))
        block_inputs = [x[heads] if batched else x for x, batched in zip(inputs, rule.BATCHED)]
        if logits_of is None:
            logits, empty_rows, _ = rule.logits(S, rows, *block_inputs)
        else:
            logits, empty_rows = logits_of(S, rows, *block_inputs)
        out = z[heads, out_rows]
        torch.bmm(softmax_weights(logits, None), v[heads, :n_keys], out=out)
        if empty_rows is not None and empty_rows.any():  # a row without a key attends to nothing
            out.masked_fill_(empty_rows[..., None], 0.0)
    return z


def softmax_weights(logits: torch.Tensor, empty_rows: torch.Tensor | None) -> torch.Tensor:
    """The softmax of a block of ``logits``, weights below :data:`NEGLIGIBLE_WEIGHT` set to 0 and
    the ``empty_rows`` all 0."""
    A = torch.softmax(logits, -1)
    torch.nn.functional.threshold_(A, NEGLIGIBLE_WEIGHT, 0.0)
    if empty_rows is not None:
        A[empty_rows] = 0.0
    return A


class SoftmaxRowsFunction(torch.autograd.Function):
    """``z = softmax(rule.logits(q k^T)) v`` in blocks of query rows (q comes scaled). A
    ``rule`` maps a block of scores, in place, to logits, plus an optional ``[bh, rows]``
    mask of rows that attend to nothing and what its backward needs; its backward maps the
    logits' gradient to the scores' and adds its inputs' gradients into ``grads``.
    ``rule.BATCHED`` says which of its inputs have a leading ``[bh]`` axis."""

    @staticmethod
    def forward(ctx, rule, q, k, v, *inputs):
        z = torch.empty_like(v)
        ctx.blocks = []
        for rows in row_blocks(q.shape[1]):
            S = torch.bmm(q[:, rows], k[:, :rows.stop].transpose(1, 2))
            logits, empty_rows, saved = rule.logits(S, rows, *inputs)
            A = softmax_weights(logits, empty_rows)
            z[:, rows] = torch.bmm(A, v[:, :rows.stop])
            ctx.blocks.append((rows, A, saved))
        ctx.rule = rule
        ctx.save_for_backward(q, k, v, z, *inputs)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        # in the forward's float32 even when backward() is called under autocast, which would
        # otherwise run these products in half precision beside the saved float32 tensors
        with torch.autocast(dz.device.type, enabled=False):
            return SoftmaxRowsFunction.float32_backward(ctx, dz)

    @staticmethod
    def float32_backward(ctx, dz):
        q, k, v, z, *inputs = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grads = [torch.zeros_like(t) for t in inputs]
        # softmax backward's row term sum_j A_ij dA_ij, as dz_i . z_i (0 for an empty row)
        row_term = (dz * z).sum(-1, keepdim=True)
        for rows, A, saved in ctx.blocks:
            keys = slice(0, rows.stop)
            dL = torch.bmm(dz[:, rows], v[:, keys].transpose(1, 2)).sub_(row_term[:, rows]).mul_(A)
            dv[:, keys] += torch.bmm(A.transpose(1, 2), dz[:, rows])
            dS = ctx.rule.backward(dL, saved, rows, inputs, grads)
            dq[:, rows] = torch.bmm(dS, k[:, keys])
            dk[:, keys] += torch.bmm(dS.transpose(1, 2), q[:, rows])
        return None, dq, dk, dv, *grads


def heads_first(x: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, head, d]`` -> contiguous ``[batch * head, pos, d]`` in at least float32."""
    B, T, H, D = x.shape
    return upcast(x).transpose(1, 2).reshape(B * H, T, D).contiguous()  # a view where reshape could keep one


def heads_last(z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_first`, in ``like``'s dtype (``like`` gives the batch and head
    counts; z may hold fewer positions, the rows of chosen queries)."""
    B, _, H, D = like.shape
    return z.reshape(B, H, -1, D).transpose(1, 2).to(like.dtype)


def per_row(x: torch.Tensor) -> torch.Tensor:
    """``[batch, head, pos]`` -> ``[batch * head, pos]`` in at least float32."""
    return upcast(x).reshape(-1, x.shape[-1])


def per_head(positions: torch.Tensor | None, n_heads: int) -> torch.Tensor | None:
    """Query ``positions [batch, n]`` -> ``[batch * head, n]``, the rows' layout."""
    return None if positions is None else positions.repeat_interleave(n_heads, dim=0)


def softmax_rows(rule, q, k, v, *inputs, positions: torch.Tensor | None = None) -> torch.Tensor:
    """``z [batch, pos, head, d]`` of a softmax mechanism from q, k, v ``[batch, pos, head, d]``
    and its rule's ``inputs`` (already in the rows' layout). q is scaled by 1/sqrt(d) before
    the products (cheaper than scaling each block of S). With query ``positions [batch, n]``
    (a forward without gradients) only the rows of those queries: ``z [batch, n, head, d]``."""
    with torch.autocast(q.device.type, enabled=False):
        q_scaled = heads_first(q) * q.shape[-1] ** -0.5
        if needs_grad(q, k, v, *inputs):
            check_map_size(q, k)
            if positions is not None:
                raise ValueError("attention at chosen query positions computes no gradient: run it under no_grad")
            z = SoftmaxRowsFunction.apply(rule, q_scaled, heads_first(k), heads_first(v), *inputs)
        else:
            z = softmax_rows_inference(rule, q_scaled, heads_first(k), heads_first(v), *inputs,
                                       positions=per_head(positions, q.shape[2]))
    return heads_last(z, v)

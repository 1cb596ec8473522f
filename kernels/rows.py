"""The CPU fast path: TRA, FoT, CoPE, trela and TDA computed one block of query rows at a time.

Every quantity these mechanisms compute along a query row (TRA's D-bar, CoPE's positions, the
softmax) depends only on that row's keys at or before it. So the ``[query, key]`` matrices
are built for ``ROWS`` query rows at a time against the keys up to the block's last row,
which leaves out most of the causal upper triangle (T = 512 in blocks of 64 multiplies 36/64
of the full products), and each block goes through a short chain of in-place operations.
Backward is written by hand: it keeps per block only the weights and the one map its
gradient needs (D-bar, CoPE's gates, the rectified scores), where autograd through the
reference keeps every intermediate. Rows are independent, so the block size changes the
result only by float rounding.

``q, k, v`` are ``[batch * head, pos, d_head]`` float32 or float64 (the wrappers reshape the
models' ``[batch, pos, head, d_head]`` and upcast); autocast is off inside. The semantics
are the references' in ``models.attention``, which the tests compare forward and backward:

- ``tra_rows``: S = q k^T / sqrt(d) (eq. 1); survivors S > 0 and causal (eq. 3-4); D-bar
  the survivors between key and query (eq. 6); logits S + D-bar log delta_i (eq. 10-11);
  softmax over the survivors, a row without one is 0 (eq. 12).
- ``forgetting_rows``: softmax(S + c_i - c_j) with c the cumulative sum of log f.
- ``cope_rows``: gates sigmoid(S), positions their suffix sums clamped to ``p_max - 1``,
  position logits interpolated between ``q . e[floor p]`` and ``q . e[ceil p]``.
- ``threshold_rows``: sum over views of ``+-(s - tau_i)_+^p`` (view 2 weighted by -lambda) times V.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

ROWS = 64  # measured at T = 512, mini: 64 and 128 within 3%, 256 about 15% slower
# Without gradients a block covers only as many sequence-heads as keep its scores within
# about this many elements (1 MiB of float32), so that its chain of element-wise passes
# stays in cache whatever the batch (at T = 512, one thread: 2^16 to 2^22 within the noise).
INFERENCE_BLOCK = 1 << 18
INFERENCE_ROWS = 64
MASK_FILL = -1e11  # as models.attention.base: finite, so a row with nothing left is never NaN


def row_blocks(n_pos: int, rows: int = ROWS) -> list[slice]:
    return [slice(start, min(start + rows, n_pos)) for start in range(0, n_pos, rows)]


def future_keys(S: torch.Tensor, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """The part of a block of scores that holds its future keys, the block's last
    ``len(rows)`` columns, and its ``[query, key]`` mask of keys j > i: every earlier key is
    in the past of every row of the block, so only this square needs masking."""
    n = rows.stop - rows.start
    return S[..., rows.start:], torch.ones(n, n, dtype=torch.bool, device=S.device).triu_(1)


def suffix_sum(x: torch.Tensor) -> torch.Tensor:
    """``sum_{t >= j} x_it`` along the last axis (x is zero past each row's query), in
    place of the flip-cumsum-flip: a prefix sum subtracted from the row total."""
    prefix = x.cumsum(-1)
    total = prefix[..., -1:].clone()
    return prefix.neg_().add_(total).add_(x)


class TRARule:
    """TRA's logits (eq. 3-11) from a block of scores; ``inputs = (log_delta [bh, pos],)``."""

    BATCHED = (True,)

    @staticmethod
    def logits(S, rows, log_delta):
        diagonal, future = future_keys(S, rows)
        diagonal.masked_fill_(future, 0.0)
        M = torch.gt(S, 0, out=torch.empty_like(S))                            # eq. 3-4, as 0/1
        D_bar = suffix_sum(M)                                                   # eq. 6 (0 in a row without survivor)
        # Removed keys (S <= 0) get the fill first; adding their (finite) decay leaves them ~ -1e11.
        logits = torch.nn.functional.threshold_(S, 0.0, MASK_FILL).addcmul_(D_bar, log_delta[:, rows, None])  # eq. 10-11
        return logits, D_bar[..., 0] == 0, D_bar  # D-bar at key 0 counts the row's survivors

    @staticmethod
    def backward(dL, D_bar, rows, inputs, grads):
        grads[0][:, rows] = (dL * D_bar).sum(-1)
        return dL

    @staticmethod
    def inference_logits(S, rows, log_delta):
        """:meth:`logits` less a constant per row, without D-bar: a survivor's D-bar is
        ``n + 1 - P`` with P the survivors at or before its key and n the row's count, and
        the softmax drops the row's ``(n + 1) log delta_i``; logits ``S - P log delta_i``."""
        diagonal, future = future_keys(S, rows)
        diagonal.masked_fill_(future, 0.0)
        P = torch.gt(S, 0, out=torch.empty_like(S)).cumsum_(-1)
        logits = torch.nn.functional.threshold_(S, 0.0, MASK_FILL).addcmul_(P, log_delta[:, rows, None], value=-1.0)
        return logits, P[..., -1] == 0


class ForgettingRule:
    """FoT's logits S + c_i - c_j; ``inputs = (c [bh, pos],)``, c the cumulative log forget gate."""

    BATCHED = (True,)  # which inputs have a leading ``[bh]`` axis

    @staticmethod
    def logits(S, rows, c):
        logits = S.add_(c[:, rows, None] - c[:, None, :rows.stop])
        diagonal, future = future_keys(logits, rows)
        diagonal.masked_fill_(future, MASK_FILL)
        return logits, None, None

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        # c_i reaches every logit of row i alike, and a softmax row's logit gradients sum to 0,
        # so only the -c_j of the keys passes a gradient
        grads[0][:, :rows.stop] -= dL.sum(-2)
        return dL


class CoPERule:
    """CoPE's logits (eq. 3-9); ``inputs = (q [bh, pos, d], pos_emb [p_max, d])``: the
    unscaled q, for the position logits ``q . e[p]``, and the layer's position embeddings."""

    BATCHED = (True, False)

    @staticmethod
    def logits(S, rows, q, pos_emb, for_backward=True):
        g = torch.sigmoid(S)                                                   # eq. 3
        diagonal, future = future_keys(g, rows)
        diagonal.masked_fill_(future, 0.0)
        p = suffix_sum(g)                                                      # eq. 4
        clamped = p > pos_emb.shape[0] - 1 if for_backward else None
        p.clamp_(max=pos_emb.shape[0] - 1)
        lo = p.floor()
        # Only the embeddings up to the block's largest position are read: z_int[p] and the
        # step to z_int[p + 1] (0 past the table's end, where p is clamped and w = 0).
        n_emb = min(pos_emb.shape[0], int(lo.max()) + 2)
        z_int = q[:, rows] @ pos_emb[:n_emb].T                                 # eq. 7
        z_steps = torch.nn.functional.pad(z_int.diff(dim=-1), (0, 1))
        w = p.sub_(lo)
        lo = lo.long()
        z_step = z_steps.gather(-1, lo)
        logits = S.add_(z_int.gather(-1, lo)).addcmul_(w, z_step)             # eq. 8-9
        logits[..., rows.start:].masked_fill_(future, MASK_FILL)
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
        q, pos_emb = inputs
        # z = z_int[lo] + w (z_int[lo + 1] - z_int[lo]): dL reaches z_int[lo] and, times w,
        # the step, which moves it from z_int[lo] to z_int[lo + 1]
        d_lo = torch.zeros(*dL.shape[:2], n_emb, dtype=dL.dtype, device=dL.device).scatter_add_(-1, lo, dL)
        d_step = torch.zeros_like(d_lo).scatter_add_(-1, lo, dL * w)
        dz_int = d_lo.sub_(d_step)
        dz_int[..., 1:] += d_step[..., :-1]
        grads[0][:, rows] += dz_int @ pos_emb[:n_emb]
        grads[1][:n_emb] += torch.einsum("bmp,bmd->pd", dz_int, q[:, rows])
        dg = (dL * z_step).cumsum_(-1)  # p_ij sums g_it over t >= j, so g_it collects dp_ij over j <= t
        return dg.mul_(g).mul_(1 - g).add_(dL)


def needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def inference_blocks(n_bh: int, n_pos: int):
    """``(heads, rows)`` slices for a forward without backward: blocks of query rows over
    only as many sequence-heads as keep a block's scores near :data:`INFERENCE_BLOCK`
    elements, the sequence-heads outermost so their keys and values stay in cache."""
    chunk = max(1, INFERENCE_BLOCK // (INFERENCE_ROWS * n_pos))
    for lo in range(0, n_bh, chunk):
        for rows in row_blocks(n_pos, INFERENCE_ROWS):
            yield slice(lo, min(lo + chunk, n_bh)), rows


def softmax_rows_inference(rule, q, k, v, *inputs) -> torch.Tensor:
    """:class:`SoftmaxRowsFunction`'s forward when no gradient is wanted: nothing is kept for
    a backward, blocks stay cache-sized (:func:`inference_blocks`), and a rule may compute its
    logits up to a constant per row (``inference_logits``), which the softmax ignores."""
    z = torch.empty_like(v)
    logits_of = getattr(rule, "inference_logits", None)
    for heads, rows in inference_blocks(q.shape[0], q.shape[1]):
        S = torch.bmm(q[heads, rows], k[heads, :rows.stop].transpose(1, 2))
        block_inputs = [x[heads] if batched else x for x, batched in zip(inputs, rule.BATCHED)]
        if logits_of is None:
            logits, empty_rows, _ = rule.logits(S, rows, *block_inputs)
        else:
            logits, empty_rows = logits_of(S, rows, *block_inputs)
        out = z[heads, rows]
        torch.bmm(softmax_weights(logits, None), v[heads, :rows.stop], out=out)
        if empty_rows is not None:  # a row without a key attends to nothing
            out.masked_fill_(empty_rows[..., None], 0.0)
    return z


def softmax_weights(logits: torch.Tensor, empty_rows: torch.Tensor | None) -> torch.Tensor:
    A = torch.softmax(logits, -1)
    # Weights below the smallest normal float are flushed to 0: they add nothing, and
    # denormal operands make the CPU's matrix products several times slower.
    torch.nn.functional.threshold_(A, torch.finfo(A.dtype).tiny, 0.0)
    if empty_rows is not None:
        A[empty_rows] = 0.0
    return A


class SoftmaxRowsFunction(torch.autograd.Function):
    """``z = softmax(rule.logits(q k^T)) v`` in blocks of query rows (q comes scaled). A
    ``rule`` maps a block of scores, in place, to logits, plus an optional ``[bh, rows]``
    mask of rows that attend to nothing and what its backward needs; its backward maps the
    logits' gradient to the scores' and adds its inputs' gradients into ``grads``."""

    @staticmethod
    def forward(ctx, rule, q, k, v, *inputs):
        z = torch.empty_like(v)
        ctx.blocks = []
        for rows in row_blocks(q.shape[1]):
            S = torch.bmm(q[:, rows], k[:, :rows.stop].transpose(1, 2))
            logits, empty_rows, saved = rule.logits(S, rows, *inputs)
            A = softmax_weights(logits, empty_rows)
            z[:, rows] = torch.bmm(A, v[:, :rows.stop])
            ctx.blocks.append((A, saved))
        ctx.rule = rule
        ctx.save_for_backward(q, k, v, z, *inputs)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        q, k, v, z, *inputs = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grads = [torch.zeros_like(t) for t in inputs]
        # softmax backward's row term sum_j A_ij dA_ij, as dz_i . z_i (0 for an empty row)
        row_term = (dz * z).sum(-1, keepdim=True)
        for rows, (A, saved) in zip(row_blocks(q.shape[1]), ctx.blocks):
            keys = slice(0, rows.stop)
            dL = torch.bmm(dz[:, rows], v[:, keys].transpose(1, 2)).sub_(row_term[:, rows]).mul_(A)
            dv[:, keys] += torch.bmm(A.transpose(1, 2), dz[:, rows])
            dS = ctx.rule.backward(dL, saved, rows, inputs, grads)
            dq[:, rows] = torch.bmm(dS, k[:, keys])
            dk[:, keys] += torch.bmm(dS.transpose(1, 2), q[:, rows])
        return None, dq, dk, dv, *grads


class ThresholdRowsFunction(torch.autograd.Function):
    """``(lam, p, tau, v, q1, k1[, q2, k2]) -> sum_j (a1_ij - lam a2_ij) v_j`` with
    ``a_ij = (s_ij - tau_i)_+^p`` on causal keys, ``tau [bh, pos]``; one view when only
    q1, k1 are given (lam is then ignored)."""

    @staticmethod
    def weights(lam, p, tau, views, heads, rows):
        """A block's weights ``a1 - lam a2`` and the rectified views ``(s - tau)_+``."""
        R = []
        for q, k in zip(views[0::2], views[1::2]):
            r = torch.bmm(q[heads, rows], k[heads, :rows.stop].transpose(1, 2)).sub_(tau[heads, rows, None]).relu_()
            diagonal, future = future_keys(r, rows)
            diagonal.masked_fill_(future, 0.0)
            R.append(r)
        A = R[0].pow(p)
        if len(R) == 2:
            A.sub_(R[1].pow(p).mul_(lam))
        return A, R

    @staticmethod
    def forward(ctx, lam, p, tau, v, *views):
        z = torch.empty_like(v)
        ctx.blocks = []
        for rows in row_blocks(v.shape[1]):
            A, R = ThresholdRowsFunction.weights(lam, p, tau, views, slice(None), rows)
            z[:, rows] = torch.bmm(A, v[:, :rows.stop])
            ctx.blocks.append((A, R))
        ctx.p = p
        ctx.save_for_backward(lam, tau, v, *views)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, dz):
        lam, tau, v, *views = ctx.saved_tensors
        p = ctx.p
        coefs = [1.0, -lam][:len(views) // 2]
        d_views = [torch.zeros_like(t) for t in views]
        dv, d_tau, d_lam = torch.zeros_like(v), torch.zeros_like(tau), torch.zeros_like(lam)
        for rows, (A, R) in zip(row_blocks(v.shape[1]), ctx.blocks):
            keys = slice(0, rows.stop)
            dA = torch.bmm(dz[:, rows], v[:, keys].transpose(1, 2))
            dv[:, keys] += torch.bmm(A.transpose(1, 2), dz[:, rows])
            for view, (c, r) in enumerate(zip(coefs, R)):
                # d/ds (s - tau)_+^p = p (s - tau)_+^(p-1), 0 where the key did not survive
                dS = dA * (r if p == 2 else r.pow(p - 1).mul_(r > 0))
                if view == 1:  # d/d lam of -lam a2: -sum dA (s - tau)_+^p
                    d_lam -= torch.dot(dS.flatten(), r.flatten())
                dS.mul_(c * p)
                d_tau[:, rows] -= dS.sum(-1)
                q, k = views[2 * view], views[2 * view + 1]
                d_views[2 * view][:, rows] = torch.bmm(dS, k[:, keys])
                d_views[2 * view + 1][:, keys] += torch.bmm(dS.transpose(1, 2), q[:, rows])
        return d_lam, None, d_tau, dv, *d_views


def heads_first(x: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, head, d]`` -> contiguous ``[batch * head, pos, d]`` in at least float32."""
    B, T, H, D = x.shape
    return x.to(torch.promote_types(x.dtype, torch.float32)).transpose(1, 2).reshape(B * H, T, D)


def heads_last(z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_first`, in ``like``'s dtype."""
    B, T, H, D = like.shape
    return z.reshape(B, H, T, D).transpose(1, 2).to(like.dtype)


def per_row(x: torch.Tensor) -> torch.Tensor:
    """``[batch, head, pos]`` -> ``[batch * head, pos]`` in at least float32."""
    return x.to(torch.promote_types(x.dtype, torch.float32)).reshape(-1, x.shape[-1])


def _softmax_rows(rule, q, k, v, *inputs) -> torch.Tensor:
    """q is scaled by 1/sqrt(d) before the products (cheaper than scaling each block of S)."""
    with torch.autocast(q.device.type, enabled=False):
        q_scaled = heads_first(q) * q.shape[-1] ** -0.5
        if needs_grad(q, k, v, *inputs):
            z = SoftmaxRowsFunction.apply(rule, q_scaled, heads_first(k), heads_first(v), *inputs)
        else:
            z = softmax_rows_inference(rule, q_scaled, heads_first(k), heads_first(v), *inputs)
    return heads_last(z, v)


def tra_rows(q, k, v, log_delta) -> torch.Tensor:
    """TRA's ``z [batch, pos, head, d]`` from q, k (already normalised/rotated), v and
    ``log_delta [batch, head, pos]``."""
    return _softmax_rows(TRARule, q, k, v, per_row(log_delta))


def forgetting_rows(q, k, v, log_f) -> torch.Tensor:
    """FoT's ``z`` from q, k, v and ``log_f [batch, head, pos]``."""
    return _softmax_rows(ForgettingRule, q, k, v, per_row(log_f).cumsum(-1))


def cope_rows(q, k, v, pos_emb) -> torch.Tensor:
    """CoPE's ``z`` (gates from q . k) from q, k, v and the layer's ``pos_emb [p_max, d]``."""
    q_rows = heads_first(q)
    return _softmax_rows(CoPERule, q, k, v, q_rows, pos_emb.to(q_rows.dtype))


def threshold_rows(tau, v, *views, lam=None, p: float = 2.0) -> torch.Tensor:
    """trela (views ``q1, k1``) or TDA (``q1, k1, q2, k2`` and ``lam``) before the output
    norm, from unit q, k ``[batch, pos, head, d]``, ``tau [batch, head, pos]`` and v."""
    v_rows = heads_first(v)
    lam = torch.zeros((), dtype=v_rows.dtype, device=v.device) if lam is None else lam.to(v_rows.dtype)
    with torch.autocast(v.device.type, enabled=False):
        args = (lam, float(p), per_row(tau), v_rows, *(heads_first(t) for t in views))
        if needs_grad(tau, v, lam, *views):
            z = ThresholdRowsFunction.apply(*args)
        else:  # the forward alone, keeping nothing for a backward, in cache-sized blocks
            z = torch.empty_like(v_rows)
            for heads, rows in inference_blocks(*v_rows.shape[:2]):
                A, _ = ThresholdRowsFunction.weights(lam, float(p), args[2], args[4:], heads, rows)
                torch.bmm(A, v_rows[heads, :rows.stop], out=z[heads, rows])
    return heads_last(z, v)

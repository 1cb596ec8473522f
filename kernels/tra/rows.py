"""TRA on the CPU path (``kernels.tooling.rows``): the logits of eq. 3-11 from a block of scores."""

from __future__ import annotations

import torch

from kernels.tooling.common import MASK_FILL, suffix_sum_from_prefix
from kernels.tooling.rows import at_rows, mask_future_, per_row, softmax_rows


class TRARule:
    """TRA's logits (eq. 3-11) from a block of scores; ``inputs = (log_delta [bh, pos],)``."""

    BATCHED = (True,)

    @staticmethod
    def logits(S, rows, log_delta):
        mask_future_(S, rows)
        M = torch.gt(S, 0, out=torch.empty_like(S))                            # eq. 3-4, as 0/1
        D_bar = suffix_sum_from_prefix(M)                                       # eq. 6 (0 in a row without survivor)
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
        mask_future_(S, rows)
        P = torch.gt(S, 0, out=torch.empty_like(S)).cumsum_(-1)
        logits = torch.nn.functional.threshold_(S, 0.0, MASK_FILL).addcmul_(P, at_rows(log_delta, rows)[..., None], value=-1.0)
        return logits, P[..., -1] == 0


def tra_rows(q, k, v, log_delta, positions=None) -> torch.Tensor:
    """TRA's ``z [batch, pos, head, d]`` from q, k (already normalised/rotated), v and
    ``log_delta [batch, head, pos]``: :func:`kernels.tra.reference.tra_reference`'s (at query
    ``positions [batch, n]`` only, if given: :func:`kernels.tooling.rows.softmax_rows`)."""
    return softmax_rows(TRARule, q, k, v, per_row(log_delta), positions=positions)

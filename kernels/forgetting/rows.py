"""FoT on the CPU path (``kernels.tooling.rows``): the logits S + c_i - c_j from a block of scores."""

from __future__ import annotations

import torch

from kernels.tooling.common import MASK_FILL
from kernels.tooling.rows import at_rows, mask_future_, per_row, softmax_rows


class ForgettingRule:
    """FoT's logits S + c_i - c_j; ``inputs = (c [bh, pos],)``, c the cumulative log forget gate."""

    BATCHED = (True,)

    @staticmethod
    def logits(S, rows, c):
        logits = mask_future_(S.add_(at_rows(c, rows)[..., None] - c[:, None, :S.shape[-1]]), rows, MASK_FILL)
        return logits, None, None

    @staticmethod
    def backward(dL, saved, rows, inputs, grads):
        # c_i reaches every logit of row i alike, and a softmax row's logit gradients sum to 0,
        # so only the -c_j of the keys passes a gradient
        grads[0][:, :rows.stop] -= dL.sum(-2)
        return dL


def forgetting_rows(q, k, v, log_f, positions=None) -> torch.Tensor:
    """FoT's ``z`` from q, k, v and ``log_f [batch, head, pos]``:
    :func:`kernels.forgetting.reference.forgetting_reference`'s (at query ``positions [batch,
    n]`` only, if given: :func:`kernels.tooling.rows.softmax_rows`)."""
    return softmax_rows(ForgettingRule, q, k, v, per_row(log_f).cumsum(-1), positions=positions)

"""Forgetting attention (FoT, Lin et al. 2025; TRA paper Sec. 3.2, eq. 1-2) in plain PyTorch:
the spec that ``kernels.forgetting.rows`` and ``kernels.forgetting.triton`` are tested against,
and what ``models.attention.fot`` runs, with its hooks, whenever a hook or dropout needs the
full ``[query, key]`` matrices."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from kernels.tooling.common import (MASK_FILL, NO_HOOKS, Hooks, apply_pattern, causal_mask, no_dropout, scaled_scores, through,
                            upcast)


def forgetting_reference(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
                         v: Float[Tensor, "batch pos head d_head"],
                         log_f: Float[Tensor, "batch head pos"], hooks: Hooks = NO_HOOKS,
                         drop_logits=no_dropout) -> Float[Tensor, "batch pos head d_head"]:
    """``q, k, v [batch, pos, head, d_head]`` and ``log_f [batch, head, pos]`` -> ``z [batch,
    pos, head, d_head]``: ``softmax(S + D) V`` with ``D_ij = sum_{l=j+1..i} log f_l``; scores,
    bias and softmax in float32, each through the hook of its name (``models.attention.fot``)."""
    n_pos = q.shape[1]
    S = through(hooks, "hook_attn_scores", scaled_scores(q, k))  # eq. 1
    # One cumulative sum c_i = sum_{l<=i} log f_l turns every D_ij into c_i - c_j.
    c = upcast(log_f).cumsum(-1)
    D = through(hooks, "hook_decay_bias", c[..., :, None] - c[..., None, :])
    logits = through(hooks, "hook_attn_logits",
                     drop_logits(S + D).masked_fill(~causal_mask(n_pos, n_pos, q.device), MASK_FILL))
    A = through(hooks, "hook_pattern", torch.softmax(logits, dim=-1))  # eq. 2, with the decay as D
    return apply_pattern(A, v)

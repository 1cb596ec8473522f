"""Attention mechanisms written outside GlitchLens, as a researcher's own file would be: sigmoid
attention, which keeps the contract of ``models.attention.Attention``, and a copy of it that
looks at future tokens, which ``glitchlens check-mechanism`` must refuse. Imported by the tests
as ``plugin_mechanisms`` (``tests/`` on the path), never registered on import."""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from kernels.tooling.common import MASK_FILL, apply_pattern, causal_mask, scaled_products
from models.attention import Attention


@dataclass
class SigmoidOptions:
    bias: float | None = None   # b at initialisation; None: -log(n_ctx)


class SigmoidAttention(Attention):
    """Sigmoid attention (Ramapuram et al., 2024): ``A = sigmoid(S + b)`` on the keys up to the
    query, with a learned bias ``b`` per head, initialised to ``-log(n_ctx)`` so that a query's
    weights sum to about 1 at the training length. The weights are not normalised.

    Own hook: ``hook_mass``, the weight each query puts on its keys, ``[batch, head, query_pos]``.
    """

    Options = SigmoidOptions

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        bias = -math.log(cfg.n_ctx) if self.options.bias is None else self.options.bias
        self.b = nn.Parameter(torch.full((cfg.n_heads,), float(bias)))
        self.hook_mass = HookPoint()

    def allowed(self, n_pos: int, device) -> torch.Tensor:
        """``[query_pos, key_pos]`` bool: the keys each query may read."""
        return causal_mask(n_pos, n_pos, device)

    def attend(self, q, k, v, x, positions=None):
        S = self.hook_attn_scores(scaled_products(q, k))
        logits = self.drop_logits(S + self.b.float()[:, None, None])
        logits = self.hook_attn_logits(logits.masked_fill(~self.allowed(q.shape[1], q.device), MASK_FILL))
        pattern = self.hook_pattern(torch.sigmoid(logits))
        self.hook_mass(pattern.sum(-1))
        return apply_pattern(pattern, v)


class PeekingAttention(SigmoidAttention):
    """Sigmoid attention that also reads the next token's key: what a misplaced mask does."""

    def allowed(self, n_pos: int, device) -> torch.Tensor:
        return causal_mask(n_pos, n_pos, device) | causal_mask(n_pos, n_pos, device).roll(1, dims=1)

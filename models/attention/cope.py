"""Contextual Position Encoding (CoPE, Golovneva et al., 2024), CoPE paper Sec. 4 and App. B.

Positions are counted by gates the model chooses: ``p_ij`` is the sum of the gates
``g_it`` over ``t = j .. i``, so a query can count only the tokens that matter to it.
Fractional positions index integer position embeddings ``e[p]`` by linear interpolation,
done on the logits ``z_i[p] = q_i . e[p]`` (eq. 7-8) so no ``[query, key, d]`` tensor is built.
The equations are ``kernels.cope.reference`` (with this layer's hooks passed in) and its CPU
path ``kernels.cope.rows``; there is no Triton kernel.

Choices, following App. B's reference code where the text is loose:

- gates use the scaled logits, ``g_ij = sigmoid(q_i . k_j / sqrt(d_head))`` (App. B applies the
  sigmoid to the already scaled, masked attention logits; eq. 3 omits the scale);
- interpolation weights as in App. B: ``(p - floor p)`` on ``z[ceil p]`` and the rest on
  ``z[floor p]``. Eq. 5 and 8 as printed swap the two weights (they put ``ceil p - p`` on
  ``z[ceil p]``), which is not an interpolation (p = 2.9 would lean on z[2]); both agree at
  integer p;
- ``z_i[p]`` is added unscaled to the scaled logits (App. B, eq. 9);
- ``e`` has ``p_max`` rows ``[p_max, d_head]``, zero-initialised, shared by the heads of a
  layer (Sec. 4 "Multi-head attention"); ``p_max`` defaults to ``n_ctx + 1`` (positions
  0..T); positions are clamped to ``p_max - 1``, so longer inputs reuse the last row;
- ``sep_keys``: gates from a separate key projection ``W_G`` (Sec. 4 "Computing gates").

App. B's listing (``CoPE`` and ``SelfAttn``) is the authors' code we compare with; everything
above follows it (gates from the scaled, masked logits; positions as reversed cumulative sums
of the gates, clamped to ``npos_max - 1``; the interpolation; ``q . e[p]`` with the unscaled q;
a zero-initialised table; the result added to the scaled logits). Deviations from it:

- Masking: App. B adds ``mask.log()`` (-inf on future keys) before the gates, so their gates
  are sigmoid(-inf) = 0 and their logits -inf; ours sets those gates to 0 and the logits to
  the finite ``MASK_FILL``: the same positions and weights.
- The table: App. B's is ``[1, head_dim, npos_max]`` inside a single-head ``SelfAttn`` (heads
  folded into the batch); ours is ``[p_max, d_head]``, one per layer shared by its heads as in
  Sec. 4, and ``p_max`` defaults to ``n_ctx + 1`` where App. B takes ``npos_max`` as an argument.
- ``sep_keys`` is not in App. B (it is the Sec. 4 variant).
- Training: the CoPE paper's flip-flop runs (App. C: AdamW lr 3e-4 with linear decay, batch
  16, 10k steps) are not reproduced; every mechanism here trains with the same recipe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.cope.reference import cope_reference
from kernels.cope.rows import cope_rows
from models.attention.base import Attention, register


@dataclass
class CoPEOptions:
    p_max: int | None = None   # None: n_ctx + 1
    sep_keys: bool = False


@register("cope")
class CoPEAttention(Attention):
    """Extra hooks, all ``[batch, head, query_pos, key_pos]``: ``hook_gates`` (g, exactly 0
    on future keys), ``hook_positions`` (p), ``hook_pos_logits`` (z_i[p_ij]; on future keys
    it is z_i[0], which the causal mask then removes). With ``sep_keys``, ``hook_k_gate``
    ``[batch, pos, head, d_head]`` holds the gate keys. ``hook_attn_scores`` is the
    content term ``q.k / sqrt(d_head)`` alone, ``hook_attn_logits`` the softmax's input
    ``S + z`` (future keys at the fill), ``hook_pattern`` the final softmax weights.
    """

    Options = CoPEOptions
    IMPLEMENTATIONS = {"reference": cope_reference, "rows": cope_rows}

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.p_max = cfg.n_ctx + 1 if self.options.p_max is None else self.options.p_max
        if self.p_max < 2:
            raise ValueError(f"cope needs p_max >= 2, got {self.p_max}")
        self.pos_emb = nn.Parameter(torch.zeros(self.p_max, cfg.d_head))
        if self.options.sep_keys:
            self.W_G = nn.Parameter(torch.randn_like(self.W_K) / math.sqrt(cfg.d_model))
            self.hook_k_gate = HookPoint()
            # the CPU path reads the gates off S: with keys of their own, only the reference runs
            self.IMPLEMENTATIONS = {"reference": cope_reference}
        self.hook_gates = HookPoint()
        self.hook_positions = HookPoint()
        self.hook_pos_logits = HookPoint()

    def core_options(self) -> dict:
        return {"pos_emb": self.pos_emb}

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        gate_keys = {"k_gate": self.hook_k_gate(self.project(x, self.W_G))} if self.options.sep_keys else {}
        return self.core(self.implementation(q.device), positions)(q, k, v, **gate_keys)

"""Forgetting Transformer attention (FoT; Lin et al., 2025), and the per-head forget gate
it shares with TRA.

FoT is causal softmax attention whose only positional signal is a data-dependent decay:
each token t emits a forget gate ``f_t = sigmoid(w^T x_t + b)`` per head, and key j is
down-weighted for query i by the product of the gates of the tokens after it,
``D_ij = sum_{l=j+1..i} log f_l``; ``A = softmax(S + D)`` (TRA paper, Sec. 3.2, with its
eq. 1-2).
The equations are ``kernels.forgetting.reference`` (with this layer's hooks passed in), its
CPU path ``kernels.forgetting.rows`` and its kernel ``kernels.forgetting.triton``.

Compared with the authors' code (``ForgettingAttentionLayer`` in
``src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py``
of github.com/zhixuan-lin/forgetting-transformer), which we follow in: a full, data-dependent
gate ``Linear(d_model, n_heads, bias=True)`` read from the normalised block input, ``log f``
as ``logsigmoid`` in float32, the decay as a difference of one cumulative sum, the scale
``1/sqrt(d_head)``, and its defaults ``use_rope=False``, no q/k norm, no output gate or norm,
no key/value shift (the "LLaMA" FoX; the "Pro" variant's additions are not implemented).

Deviations from the authors' code:

- Initialisation of the gate. FoX draws every ``nn.Linear`` weight from N(0, 0.02^2) and
  zeroes every bias, so the gate logit starts near 0 with std ``0.02 sqrt(d_model)`` (0.16 at
  d_model 64, 0.23 at 128): f is about 1/2 at every position. Ours: ``W_f`` is initialised as
  the other projections (``init="scaled"``: N(0, 1/d_model), a logit std of about 1, so f
  spreads over roughly sigmoid(+-2); ``init="torch"``: U(+-1/sqrt(d_model)), about 0.58) and
  ``b_f`` is ``forget_bias`` (0, as FoX) or, with ``init="torch"``, U(+-1/sqrt(d_model)).
  Reason: one init rule for every projection of a model (``models.backbone``); FoX's 0.02
  is a whole-model choice we do not take, and changing ours would change shipped checkpoints.
- Masked keys get the finite ``MASK_FILL`` rather than FoX's kernel's -inf (same weights),
  and the logits are float32 whatever the autocast dtype.
- Not implemented: FoX's ``log_pruning_tolerance`` (skipping blocks whose decay makes them
  negligible: speed only, off by default) and grouped-query attention (untested there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.tooling.common import upcast
from kernels.forgetting.reference import forgetting_reference
from kernels.forgetting.rows import forgetting_rows
from models.attention.base import Attention, has_hooks, imported_on_call, register


class ForgetGated(Attention):
    """An attention mechanism with one scalar forget gate per head and position, read from
    the block input ``x`` (the normalised residual stream): ``sigmoid(W_f x + b_f)``, with
    ``W_f`` ``[head, d_model]`` (initialised like the other projections, so the gate logit
    starts near ``N(b, 1)``) and ``b_f`` ``[head]`` initialised to ``options.forget_bias``.

    The gate ``[batch, head, pos]`` passes through a hook point that each subclass names in
    its paper's terms (``hook_forget``). The mechanisms use its
    log, computed as ``logsigmoid`` in float32 (autocast off) so that a saturated gate
    neither rounds to 1 nor underflows to 0. While that hook point has hooks the log is
    read back from the hooked gate instead, so that edits take effect; that differs from
    ``logsigmoid`` only for gate logits beyond about +-17 (and a gate edited to 0 is read
    as the smallest normal float32, so its log stays finite).
    """

    ROTARY_HOOKS = True

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.W_f = nn.Parameter(torch.randn(cfg.n_heads, cfg.d_model) / math.sqrt(cfg.d_model))
        self.b_f = nn.Parameter(torch.full((cfg.n_heads,), float(self.options.forget_bias)))
        self.hook_forget = HookPoint()

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """``x [batch, pos, d_model]`` -> log of the forget gate ``[batch, head, pos]`` (float32)."""
        with torch.autocast(x.device.type, enabled=False):
            logit = torch.einsum("bpm,hm->bhp", upcast(x), upcast(self.W_f)) + upcast(self.b_f)[:, None]
        gate = self.hook_forget(torch.sigmoid(logit))
        if has_hooks(self.hook_forget):
            return gate.clamp_min(torch.finfo(torch.float32).tiny).log()
        return F.logsigmoid(logit)


@dataclass
class FoTOptions:
    forget_bias: float = 0.0   # b at init: f starts near 1/2
    rope: bool = False


@register("fot")
class FoTAttention(ForgetGated):
    """Forgetting attention: ``A = softmax(S + D)`` with ``D_ij = sum_{l=j+1..i} log f_l``.

    Hooks (besides the common ones): ``hook_forget`` f_t, the FoT paper's forget gate
    ``sigmoid(w^T x_t + b)`` ``[batch, head, pos]``, and
    ``hook_decay_bias`` D ``[batch, head, query_pos, key_pos]``, added to S after its
    ``1/sqrt(d_head)`` scaling (``hook_attn_logits`` is S + D, future keys at the fill). D is a
    difference of one float32 cumulative sum of log f, hence exactly zero on the diagonal; its
    entries for future keys (j > i) are that same difference and never reach the pattern,
    which masks them. No positional encoding
    besides the gate unless ``rope=True`` (then q and k are rotated first).
    """

    Options = FoTOptions
    IMPLEMENTATIONS = {"reference": forgetting_reference, "rows": forgetting_rows,
                       "triton": imported_on_call("kernels.forgetting.triton.forgetting_attention")}

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.hook_decay_bias = HookPoint()

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        if self.options.rope:
            q, k = self.rotate_qk(q, k)
        log_f = self.log_forget(x)
        return self.core(self.implementation(v.device), positions)(q, k, v, log_f)

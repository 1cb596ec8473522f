"""Threshold Relative Attention (TRA; TRA paper, Sec. 2, eq. 1-12).

A ReLU threshold removes the keys whose score is not positive (eq. 3-4); position is then
counted only among the keys that survive (the contextual distance D-bar, eq. 5-7), and a
per-query forget gate turns that count into a recency bias (eq. 8-10). Keys that do not
survive are removed from the softmax altogether (eq. 11-12).

The equations are ``kernels.tra.reference`` (with this layer's hooks passed in), its CPU path
``kernels.tra.rows`` and its kernel ``kernels.tra.triton``; here are the parameters, the hooks
and the choices where the paper is silent.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from kernels.tra.reference import tra_reference
from kernels.tra.rows import tra_rows
from models.attention.base import imported_on_call, register, rms_normalise
from models.attention.fot import ForgetGated


@dataclass
class TRAOptions:
    qk_norm: bool = True       # RMS-normalise q and k per head (no affine weight), as the authors' code
    forget_bias: float = 0.0   # b of eq. 8 at init: delta starts near 1/2
    rope: bool = False


@register("tra")
class TRAAttention(ForgetGated):
    """Threshold Relative Attention.

    Hooks, all ``[batch, head, query_pos, key_pos]`` float32 unless noted:
    ``hook_attn_scores`` S (eq. 1), ``hook_thresholded`` S' (eq. 3), ``hook_mask`` M
    (eq. 4, 0/1), ``hook_dbar`` D-bar (eq. 6-7), ``hook_forget`` delta, the per-query
    forget gate ``[batch, head, query_pos]`` (eq. 8), ``hook_log_decay`` ``D_bar * log delta_i``
    (= log D', eq. 9), ``hook_attn_logits`` A-bar (eq. 10-11), ``hook_pattern`` A' (eq. 12).

    Choices where the paper is silent:

    - ``qk_norm`` (default on): q and k are RMS-normalised per head with no affine weight
      before eq. 1, as in the authors' released code, so ``|S| <= sqrt(d_head)``. Without
      it, a tiny TRA did not learn flip-flop in 250 steps. ``qk_norm=False`` is the plain eq. 1.
      With ``rope=True`` q and k are rotated after normalising (a rotation keeps the RMS).
    - ``forget_bias`` b initialised to 0: every surviving key between j and the query
      halves the weight of key j, a recency bias from the start that the gate's gradient
      (``1 - delta``, 1/2 there) can still sharpen or relax; a gate near 1 would start with
      almost no recency bias and a vanishing gradient. The authors' notebook leaves the
      gate's ``Linear(d_model, n_heads)`` at its defaults, weight and bias U(+-1/sqrt(d_model)),
      which ``init="torch"`` reproduces (it replaces ``forget_bias``).
    - Training-time dropout on the logits ``S' + D-bar log delta`` (the notebook's p = 0.01,
      before the removed keys are filled): ``cfg.attention_dropout``, off by default.
    - ``log D' = D_bar * log(delta)`` with ``log delta = logsigmoid(W_f x + b)``, never the
      power ``delta ** D_bar``, which underflows for long distances.
    - A query none of whose keys survives attends to nothing: its weights are all zero
      (as in the authors' code), not a uniform softmax over the fill values.
    - Gradients: M and D-bar are piecewise constant and pass none; a key with ``S <= 0``
      is replaced by the fill, so it receives no gradient either (ReLU's gradient at 0 is
      taken as 0). S learns only through the keys that survive.
    """

    Options = TRAOptions
    IMPLEMENTATIONS = {"reference": tra_reference, "rows": tra_rows,
                       "triton": imported_on_call("kernels.tra.triton.tra_attention")}

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.hook_thresholded = HookPoint()
        self.hook_mask = HookPoint()
        self.hook_dbar = HookPoint()
        self.hook_log_decay = HookPoint()

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        if self.options.qk_norm:
            q, k = rms_normalise(q), rms_normalise(k)
        if self.options.rope:
            q, k = self.rotate_qk(q, k)
        log_delta = self.log_forget(x)  # eq. 8, as log delta
        return self.core(self.implementation(v.device), positions)(q, k, v, log_delta)

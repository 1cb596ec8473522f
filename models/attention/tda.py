"""Threshold Rectified Attention (``trela``) and Threshold Differential Attention (``tda``),
TDA paper Sec. 4.1-4.2.

Queries and keys are L2-normalised, so a score is a cosine ``s_ij = <q~_i, k~_j>`` in
[-1, 1] with NO further scale (no 1/sqrt(d): the threshold carries the 1/sqrt(d), eq. 1,
and App. C's kernel computes ``(QK^T - tau)_+^p V`` on the normalised q, k). A key survives
when its score exceeds the length-dependent threshold

    tau_i = beta sqrt(2 log((i + 1) / kappa) / d_head)          (eq. 1, i the 0-based query position)

and contributes ``(s_ij - tau_i)_+^p``; the head output is ``RMSNorm(sum_j a_ij v_j)``.
Choices where the paper is silent or loose:

- ``beta``: ONE learned scalar per layer, shared by its heads (the paper calls it "a
  learnable scalar" and its kernel takes a single beta for all heads), initialised to
  ``beta_init`` (1, the paper's setting). ``kappa = 1`` and ``p = 2`` as in Sec. 6.
- ``log((i + 1) / kappa)`` is clamped at 0, so for ``kappa > 1`` the first positions have
  tau = 0 rather than NaN.
- Future keys get exactly 0 by masking, not by the threshold: with ``beta < 0`` the
  threshold is negative and would otherwise let them through.
- TDA's views use the same power ``p`` as TRA (Sec. 4.2 writes the views without it, but
  Sec. 6 sets ``p = 2`` "for TRA and TDA", Table 6a varies p for TDA, and App. C builds
  each TDA view with the powered TRA kernel).
- TDA's lambda: one learned scalar per layer, ``lambda = sigmoid(lambda_logit)`` so it
  stays in (0, 1) with a live gradient (App. C's pseudo-code clamps it to [0, 1], which
  passes no gradient once it leaves that range), initialised to ``lambda_init`` (0.5: the
  paper gives no value; 0.5 is where the sigmoid's gradient is largest).
- RMSNorm without affine weight (absorbed by ``W_O``), as for ``diff``.
- RoPE (the paper's backbone) rotates q and k before the normalisation (``rope=False`` turns it off).

The equations are ``kernels.threshold.reference`` (with this layer's hooks passed in), its CPU
path ``kernels.threshold.rows`` and its kernels ``kernels.threshold.triton``; each returns
``sum_j pattern_ij v_j`` BEFORE the output RMSNorm (the part a fused kernel computes), and
``attend`` applies the norm.

The authors released only kernels (``triton_threshold_attention.py`` of
github.com/snap-research/TDA: ``threshold_rela_triton`` and the two-view wrapper
``differential_threshold_rela_triton``), no model. We follow them in: tau_i = beta sqrt(2
log(i + 1) / d) with unscaled scores, ``(s - tau)_+^p`` with p = 2, q and k L2-normalised
(the wrapper's ``normalize=True``), and ``out1 - lambda out2`` with both views sharing beta,
tau and V. Deviations from the authors' code:

- beta is learned here. Their kernel reads beta as a Python float (``beta.item()``) and its
  backward returns no gradient for it, so in their code beta is a fixed hyperparameter (1.0
  in their README). The paper calls it learnable, and the rows/Triton paths here return
  tau's gradient; a recipe that starts from ``beta_init = 0`` relies on it.
- Rows with no surviving key at initialisation: nothing in their code addresses them. With
  beta = 1 and independent random unit q, k, 90-98% of the rows keep no key at d_head 16-64
  and T = 128-512 (measured here; 0.2-0.8% with beta = 0), so they output 0 and pass no
  gradient to q and k; ``beta_init`` (default 1, theirs) can start training at tau = 0.
- lambda = sigmoid(lambda_logit) where their wrapper clamps the given lambda to [0, 1] (see
  above); it is a parameter here, initialised to ``lambda_init``.
- Future keys: their kernel zeroes the scores of future keys before subtracting tau, so a
  future key gets ``(-tau_i)_+^p``: 0 for beta >= 0, a leak for beta < 0; ours masks them.
- A non-integer p: their kernel computes ``exp(p log(x + 1e-10))``, ours the exact power.
- Their single-view function does not normalise q and k (its caller must); ``trela`` always
  does. RoPE, the output RMSNorm, kappa and where beta and lambda live (one per layer here)
  are not in their code: they follow the paper's text (above).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.threshold.reference import differential_threshold_reference, threshold_reference
from kernels.threshold.rows import differential_threshold_rows, threshold_rows
from models.attention.base import Attention, imported_on_call, register, rms_normalise
from models.attention.diff import OUTPUT_NORM_EPS
from models.attention.rope import rotated_unit, rotated_unit_reference


@dataclass
class ThresholdOptions:
    beta_init: float = 1.0
    kappa: float = 1.0
    p: float = 2.0
    rope: bool = True


@dataclass
class TDAOptions(ThresholdOptions):
    lambda_init: float = 0.5


class ThresholdAttention(Attention):
    """What ``trela`` and ``tda`` share: the learned beta, the threshold, the rectifier,
    the q/k normalisation and the output norm. Hooks:

    - ``hook_scores_1``: the cosine scores ``s_ij = <q~_i, k~_j>`` of view 1 (Sec. 4.1; the same
      tensor as ``hook_attn_scores``)
    - ``hook_threshold``: tau_i (eq. 1) ``[batch, head, query_pos]``, the same for every batch
      row and head since beta is per layer, shaped like the other per-query hooks
    - ``hook_view_1``: the rectified view ``a_ij = (s_ij - tau_i)_+^p`` (Sec. 4.1; a^(1) of TDA)
      ``[batch, head, query_pos, key_pos]``

    ``hook_attn_logits`` is view 1's ``s_ij - tau_i`` with the future keys at the fill: what
    the rectifier reads."""

    Options = ThresholdOptions

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        if self.options.kappa <= 0 or self.options.p < 1:
            raise ValueError(f"need kappa > 0 and p >= 1, got kappa={self.options.kappa}, p={self.options.p}")
        self.beta = nn.Parameter(torch.tensor(float(self.options.beta_init)))
        self.hook_scores_1 = HookPoint()
        self.hook_threshold = HookPoint()
        self.hook_view_1 = HookPoint()

    def unit(self, x: torch.Tensor, impl: str) -> torch.Tensor:
        """q~ or k~: RoPE (optional) then L2 normalisation, in float32. For the fast paths with the
        backward written out (:func:`models.attention.rope.rotated_unit`); for the reference the two
        functions themselves, plain PyTorch as the reference is (and as ``vmap`` batches it:
        ``interp.training.batched`` runs the reference): :func:`models.attention.rope.rotated_unit_reference`."""
        return (rotated_unit_reference if impl == "reference" else rotated_unit)(x, self.options.rope)

    def core_options(self) -> dict:
        return {"beta": self.beta, "kappa": self.options.kappa, "p": self.options.p}

    def view_inputs(self, q, k, x) -> list[torch.Tensor]:
        """The raw per-view queries and keys, in the core's argument order."""
        return [q, k]

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        impl = self.implementation(v.device)
        views = [self.unit(t, impl) for t in self.view_inputs(q, k, x)]
        z = self.core(impl, positions)(*views, v)
        return rms_normalise(z, OUTPUT_NORM_EPS)


def threshold_betas(model: nn.Module) -> list[nn.Parameter]:
    """The beta of every threshold layer (trela, TDA) of ``model``, layer 0 first; empty for
    a model without one."""
    return [module.beta for module in model.modules() if isinstance(module, ThresholdAttention)]


@register("trela")
class TRelAAttention(ThresholdAttention):
    """Threshold Rectified Attention (TDA paper Sec. 4.1; the TDA paper calls it "TRA")."""

    IMPLEMENTATIONS = {"reference": threshold_reference, "rows": threshold_rows,
                       "triton": imported_on_call("kernels.threshold.triton.threshold_attention")}


@register("tda")
class TDAAttention(ThresholdAttention):
    """Threshold Differential Attention (TDA paper Sec. 4.2). View 1 uses ``W_Q, W_K``
    (hooks ``hook_q``, ``hook_k``), view 2 its own ``W_Q2, W_K2``; V is shared. Extra hooks:

    - ``hook_q2``: view 2's queries (``W_Q2``) ``[batch, pos, head, d_head]``, before RoPE and
      the L2 normalisation
    - ``hook_k2``: view 2's keys (``W_K2``), before RoPE and the L2 normalisation
    - ``hook_scores_2``: view 2's cosine scores ``s^(2)_ij``
    - ``hook_view_2``: a^(2), view 2 rectified against the same threshold tau_i
    - ``hook_lambda``: lambda ``[batch, head]``, one value per layer

    ``hook_pattern`` is the signed ``Delta a = a^(1) - lambda a^(2)``."""

    Options = TDAOptions
    IMPLEMENTATIONS = {"reference": differential_threshold_reference, "rows": differential_threshold_rows,
                       "triton": imported_on_call("kernels.threshold.triton.differential_threshold_attention")}
    TL_PATTERN_HOOK = "hook_view_1"  # hook_pattern is the signed difference of the views

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        if not 0 < self.options.lambda_init < 1:
            raise ValueError(f"lambda_init must lie in (0, 1), got {self.options.lambda_init}")
        self.W_Q2 = nn.Parameter(torch.randn_like(self.W_Q) / cfg.d_model ** 0.5)
        self.W_K2 = nn.Parameter(torch.randn_like(self.W_K) / cfg.d_model ** 0.5)
        self.lambda_logit = nn.Parameter(torch.logit(torch.tensor(float(self.options.lambda_init))))
        self.hook_q2 = HookPoint()
        self.hook_k2 = HookPoint()
        self.hook_scores_2 = HookPoint()
        self.hook_view_2 = HookPoint()
        self.hook_lambda = HookPoint()

    def core_options(self) -> dict:
        return {**super().core_options(), "lam": torch.sigmoid(self.lambda_logit)}

    def view_inputs(self, q, k, x):
        return [q, k, self.hook_q2(self.project(x, self.W_Q2)), self.hook_k2(self.project(x, self.W_K2))]

"""The Llama-style backbone: embed, pre-norm blocks (RMSNorm, attention, RMSNorm, SwiGLU),
final RMSNorm, unembed. Built on TransformerLens's ``HookedRootModule``, so
``run_with_cache`` and ``run_with_hooks`` work, with TransformerLens's hook names.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from models.attention import get_attention_class
from models.attention.base import upcast
from models.config import ModelConfig


class RMSNorm(nn.Module):
    """``x / rms(x) * w``; hooks ``hook_scale`` ``[batch, pos, 1]`` and ``hook_normalized``."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.hook_scale((upcast(x).pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized((upcast(x) / scale).to(x.dtype) * self.w)


class SwiGLU(nn.Module):
    """``W_out (silu(x W_gate) * (x W_in))`` (Shazeer, 2020). Hooks: ``hook_pre`` (the gate
    pre-activation), ``hook_pre_linear``, ``hook_post``, all ``[batch, pos, d_mlp]``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_gate = nn.Parameter(torch.randn(cfg.d_model, cfg.d_mlp) / math.sqrt(cfg.d_model))
        self.W_in = nn.Parameter(torch.randn(cfg.d_model, cfg.d_mlp) / math.sqrt(cfg.d_model))
        self.W_out = nn.Parameter(torch.randn(cfg.d_mlp, cfg.d_model) / math.sqrt(cfg.d_mlp * 2 * cfg.n_layers))
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(x @ self.W_gate)
        pre_linear = self.hook_pre_linear(x @ self.W_in)
        return self.hook_post(F.silu(pre) * pre_linear) @ self.W_out


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model)
        self.attn = get_attention_class(cfg.attention)(cfg, layer)
        self.ln2 = RMSNorm(cfg.d_model)
        self.mlp = SwiGLU(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        attn_out = self.hook_attn_out(self.dropout(self.attn(self.ln1(resid))))
        resid = self.hook_resid_mid(resid + attn_out)
        mlp_out = self.hook_mlp_out(self.dropout(self.mlp(self.ln2(resid))))
        return self.hook_resid_post(resid + mlp_out)


class HookedModelMixin:
    """``run_with_cache`` returning a TransformerLens ``ActivationCache`` (the base class
    returns a plain dict), shared by the transformer and the LSTM."""

    def run_with_cache(self, *args, **kwargs):
        out, cache = super().run_with_cache(*args, **kwargs)
        if isinstance(cache, ActivationCache):
            return out, cache
        return out, ActivationCache(cache, self)


class GlitchLensTransformer(HookedModelMixin, HookedRootModule):
    """Tokens ``[batch, pos]`` -> logits ``[batch, pos, d_vocab]``.

    Residual position embeddings: ``learned`` (APE, a table of ``n_ctx`` rows) and
    ``label`` (Label: a sorted random subset of ``[0, label_range)`` indexes a table of
    ``label_range`` rows; sampled afresh per batch in training mode, from a fixed seed in
    eval mode so evaluation is reproducible). Hook ``hook_pos_embed`` ``[batch, pos, d_model]``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.W_E = nn.Parameter(torch.randn(cfg.d_vocab, cfg.d_model) * 0.02)
        self.hook_embed = HookPoint()
        if cfg.pos_embed in ("learned", "label"):
            rows = cfg.n_ctx if cfg.pos_embed == "learned" else cfg.label_range
            self.W_pos = nn.Parameter(torch.randn(rows, cfg.d_model) * 0.02)
            self.hook_pos_embed = HookPoint()
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.W_U = nn.Parameter(torch.randn(cfg.d_model, cfg.d_vocab) / math.sqrt(cfg.d_model))
        self.setup()

    def positions(self, n_pos: int, device) -> torch.Tensor:
        """The position index of each token: ``arange`` for APE, sorted random labels for Label."""
        if self.cfg.pos_embed == "learned":
            if n_pos > self.cfg.n_ctx:
                raise ValueError(
                    f"APE has {self.cfg.n_ctx} learned positions; the input has {n_pos} tokens. "
                    "Learned absolute positions cannot extrapolate: evaluate at most n_ctx tokens.")
            return torch.arange(n_pos, device=device)
        if n_pos > self.cfg.label_range:
            raise ValueError(f"Label positions are drawn from [0, {self.cfg.label_range}); "
                             f"the input has {n_pos} tokens")
        generator = None if self.training else torch.Generator().manual_seed(0)
        labels = torch.randperm(self.cfg.label_range, generator=generator)[:n_pos]
        return labels.sort().values.to(device)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.d_vocab):
            raise ValueError(f"token ids must lie in [0, {self.cfg.d_vocab}); got {tokens.min()}..{tokens.max()}")
        resid = self.hook_embed(self.W_E[tokens])
        if self.cfg.pos_embed != "none":
            pos = self.positions(tokens.shape[1], tokens.device)
            resid = resid + self.hook_pos_embed(self.W_pos[pos].expand_as(resid))
        return self.embed_dropout(resid)

    def forward(self, tokens: torch.Tensor, return_type: str = "logits") -> torch.Tensor:
        """``return_type``: ``"logits"`` ``[batch, pos, d_vocab]``, or ``"normalized"`` (the
        final RMSNorm output ``[batch, pos, d_model]``, for unembedding a few positions)."""
        resid = self.embed(tokens)
        for block in self.blocks:
            resid = block(resid)
        normalized = self.ln_final(resid)
        if return_type == "normalized":
            return normalized
        if return_type != "logits":
            raise ValueError(f"return_type must be 'logits' or 'normalized', got {return_type!r}")
        return self.unembed(normalized)

    def unembed(self, normalized: torch.Tensor) -> torch.Tensor:
        return normalized @ self.W_U

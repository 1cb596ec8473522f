"""The Llama-style backbone: embed, pre-norm blocks (RMSNorm, attention, RMSNorm, SwiGLU),
final RMSNorm, unembed. Built on TransformerLens's ``HookedRootModule``, so
``run_with_cache`` and ``run_with_hooks`` work, with TransformerLens's hook names, and with
the weights, tokenizer and config attributes TransformerLens's helpers read (``models.lens``).

Three config fields select the block recipe of the TRA authors' released code instead:
``norm_placement="stream"`` (the residual stream itself is normalised), ``init="torch"``
and ``linear_bias=True`` (see :func:`init_weights`). Three more place dropout where that
code does: ``embedding_dropout`` (the embedding output), ``mlp_hidden_dropout`` (the MLP's
hidden activation) and ``attention_dropout`` (the attention logits, in the mechanisms).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import FactoredMatrix, HookedRootModule
from transformer_lens.hook_points import HookPoint

from kernels.tooling import native
from kernels.tooling.common import upcast
from kernels.tooling.rows import at_rows
from models.attention import get_attention_class
from models.config import ModelConfig
from models.lens import Component, HookedModelMixin, check_positions, check_return_type, tl_component
from models.tokens import as_token_ids
from models.workers import forward_in_parts, has_forward_hooks, splits_over_threads


def runs_in_one_pass(module: nn.Module, x: torch.Tensor) -> bool:
    """Whether ``module``'s per-position work runs as one C pass (:func:`kernels.tooling.native.rms_norm`,
    :func:`~kernels.tooling.native.swiglu_hidden`): in eval mode, where the native kernels run
    without gradients on float32 ``x`` and the module's parameters, and with no hook on the
    module or its hook points, which would miss the steps the pass fuses."""
    return not module.training and native.position_kernels_run(x, *module.parameters()) and not has_forward_hooks(module)


class RMSNorm(nn.Module):
    """``x / rms(x) * w``. Hooks:

    - ``hook_scale``: the divisor ``rms(x) = sqrt(mean(x^2) + eps)`` ``[batch, pos, 1]``, as
      TransformerLens's ``hook_scale``
    - ``hook_normalized_tl``: ``x / rms(x)`` before the gain: TransformerLens's ``hook_normalized``
    - ``hook_normalized``: the output, ``x / rms(x) * w``
    """

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.hook_scale = HookPoint()
        self.hook_normalized_tl = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if runs_in_one_pass(self, x):
            return native.rms_norm(x, self.w, self.eps)
        scale = self.hook_scale((upcast(x).pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(self.hook_normalized_tl((upcast(x) / scale).to(x.dtype)) * self.w)


class SwiGLU(nn.Module):
    """``W_out (silu(x W_gate) * (x W_in))`` (Shazeer, 2020: ``(Swish_1(xW) * xV) W_2``). Hooks,
    all ``[batch, pos, d_mlp]``:

    - ``hook_pre``: the gate pre-activation ``x W_gate`` (Shazeer's xW)
    - ``hook_pre_linear``: the linear branch ``x W_in`` (Shazeer's xV)
    - ``hook_post``: the hidden activation ``silu(x W_gate) * (x W_in)``, what ``W_out`` reads

    In training, ``cfg.mlp_hidden_dropout`` drops the hidden activation after ``hook_post``, before
    ``W_out`` (where the TRA authors' notebook drops it), so the hook shows it undropped."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_gate = nn.Parameter(torch.randn(cfg.d_model, cfg.d_mlp) / math.sqrt(cfg.d_model))
        self.W_in = nn.Parameter(torch.randn(cfg.d_model, cfg.d_mlp) / math.sqrt(cfg.d_model))
        self.W_out = nn.Parameter(torch.randn(cfg.d_mlp, cfg.d_model) / math.sqrt(cfg.d_mlp * 2 * cfg.n_layers))
        for name, size in (("b_gate", cfg.d_mlp), ("b_in", cfg.d_mlp), ("b_out", cfg.d_model)):
            self.register_parameter(name, nn.Parameter(torch.zeros(size)) if cfg.linear_bias else None)
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()
        self.hidden_dropout = nn.Dropout(cfg.mlp_hidden_dropout)

    @staticmethod
    def linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return x @ W if b is None else torch.addmm(b, x.flatten(0, -2), W).unflatten(0, x.shape[:-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if runs_in_one_pass(self, x):   # the biases added in the pass rather than copied into the products
            hidden = native.swiglu_hidden(x @ self.W_gate, x @ self.W_in, self.b_gate, self.b_in)
        else:
            pre = self.hook_pre(self.linear(x, self.W_gate, self.b_gate))
            pre_linear = self.hook_pre_linear(self.linear(x, self.W_in, self.b_in))
            hidden = self.hidden_dropout(self.hook_post(F.silu(pre) * pre_linear))
        return self.linear(hidden, self.W_out, self.b_out)


class Block(nn.Module):
    """One residual block. ``norm_placement="pre"`` (Llama): ``x + attn(norm(x))``, then
    ``x + mlp(norm(x))``. ``"stream"`` (the TRA authors' code): the stream itself is
    replaced by its normalisation before each sublayer, ``x = norm(x); x = x + attn(x)``,
    so no unnormalised residual survives a block. Hooks are at the same places in both:

    - ``hook_resid_pre``: the block input
    - ``hook_attn_out``: what the attention sublayer adds to the stream, ``attn(norm(x))``
    - ``hook_resid_mid``: the sum after attention
    - ``hook_mlp_out``: what the MLP sublayer adds to the stream, ``mlp(norm(x))``
    - ``hook_resid_post``: the block output, the sum after the MLP

    In training ``cfg.dropout`` drops each sublayer's output before ``hook_attn_out`` and
    ``hook_mlp_out``, which show it dropped."""

    # TransformerLens's logit_lens asks each block whether hook_resid_post is the one stream
    # that the next block (or ln_final) reads: it is, in both norm placements.
    hook_out_is_single_residual_stream = True

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.normalise_stream = cfg.norm_placement == "stream"
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
        normed = self.ln1(resid)
        attn_out = self.hook_attn_out(self.dropout(self.attn(normed)))
        resid = self.hook_resid_mid((normed if self.normalise_stream else resid) + attn_out)
        return self.mlp_half(resid)

    def forward_at(self, resid: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``forward(resid)`` at ``positions [batch, n]`` only, ``[batch, n, d_model]``: the
        attention reads keys and values at every position (:meth:`Attention.forward_at`), the
        rest of the block runs at those positions alone. Without gradients or hooks
        (:meth:`GlitchLensTransformer.normalized_at` checks)."""
        normed = self.ln1(resid)
        stream = normed if self.normalise_stream else resid
        return self.mlp_half(at_rows(stream, positions) + self.attn.forward_at(normed, positions))

    def mlp_half(self, resid: torch.Tensor) -> torch.Tensor:
        normed = self.ln2(resid)
        mlp_out = self.hook_mlp_out(self.dropout(self.mlp(normed)))
        return self.hook_resid_post((normed if self.normalise_stream else resid) + mlp_out)


@torch.no_grad()
def init_weights_like_torch(model: nn.Module) -> None:
    """The initialisation of the TRA authors' released code, which builds every projection
    from ``nn.Linear``: each projection matrix and bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
    (``nn.Linear``'s default), the embedding ``U(-0.01, 0.01)``, the unembedding and learned
    position tables ``N(0, 0.02)``. The fan-in is ``d_mlp`` for the MLP's output projection
    and ``d_model`` for every other projection (attention Q/K/V/O, the second view's Q/K,
    gates, forget gates). Parameters that are not projections (norm gains, TDA's beta and
    lambda, CoPE's position table, REL biases, Diff's lambda vectors) keep their own init;
    so does the forget-gate bias's ``forget_bias`` option, which this replaces.
    """
    d_model, d_mlp = model.cfg.d_model, model.cfg.d_mlp
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name == "W_E":
                p.uniform_(-0.01, 0.01)
            elif name in ("W_U", "W_pos"):
                p.normal_(0.0, 0.02)
            elif name.startswith(("W_", "b_")):
                bound = 1 / math.sqrt(d_mlp if name in ("W_out", "b_out") else d_model)
                p.uniform_(-bound, bound)


def stacked_over_layers(sublayer: str, name: str, shape: str) -> property:
    """A read-only property ``[n_layers, *shape]`` stacking every block's ``<sublayer>.<name>``,
    as TransformerLens's ``model.W_Q`` and the like. A bias the block does not have (every bias
    without ``linear_bias``; the attention's ``b_Q``, ``b_K``, ``b_V`` always) stacks as zeros of
    its shape, which is what an absent bias adds."""

    def stack(model: "GlitchLensTransformer") -> torch.Tensor:
        absent = model.W_E.new_zeros(tuple(getattr(model.cfg, size) for size in shape.split(", ")))
        per_layer = [getattr(getattr(block, sublayer), name, None) for block in model.blocks]
        return torch.stack([absent if p is None else p for p in per_layer])

    return property(stack, doc=f"``[n_layers, {shape}]``: every block's ``{sublayer}.{name}``.")


class GlitchLensTransformer(HookedModelMixin, HookedRootModule):
    """Tokens ``[batch, pos]`` -> logits ``[batch, pos, d_vocab]``.

    Residual position embeddings: ``learned`` (APE, a table of ``n_ctx`` rows) and
    ``label`` (Label: a sorted random subset of ``[0, label_range)`` indexes a table of
    ``label_range`` rows; sampled afresh per batch in training mode, from a fixed seed in
    eval mode so evaluation is reproducible). Hooks, both ``[batch, pos, d_model]``:

    - ``hook_embed``: the token embeddings ``W_E[tokens]``
    - ``hook_pos_embed``: the position embeddings added to the token embeddings, the rows of
      ``W_pos`` at each position (APE) or at each position's label (Label)
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
        else:
            # TransformerLens code reads model.W_pos; where nothing is added to the stream by
            # position it is the zero table, what an absent embedding adds (not saved)
            self.register_buffer("W_pos", torch.zeros(cfg.n_ctx, cfg.d_model), persistent=False)
        self.embed_dropout = nn.Dropout(cfg.dropout if cfg.embedding_dropout is None else cfg.embedding_dropout)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.W_U = nn.Parameter(torch.randn(cfg.d_model, cfg.d_vocab) / math.sqrt(cfg.d_model))
        if cfg.init == "torch":
            init_weights_like_torch(self)
        self.setup()

    W_Q = stacked_over_layers("attn", "W_Q", "n_heads, d_model, d_head")
    W_K = stacked_over_layers("attn", "W_K", "n_heads, d_model, d_head")
    W_V = stacked_over_layers("attn", "W_V", "n_heads, d_model, d_head")
    W_O = stacked_over_layers("attn", "W_O", "n_heads, d_head, d_model")
    b_Q = stacked_over_layers("attn", "b_Q", "n_heads, d_head")
    b_K = stacked_over_layers("attn", "b_K", "n_heads, d_head")
    b_V = stacked_over_layers("attn", "b_V", "n_heads, d_head")
    b_O = stacked_over_layers("attn", "b_O", "d_model")
    W_gate = stacked_over_layers("mlp", "W_gate", "d_model, d_mlp")
    W_in = stacked_over_layers("mlp", "W_in", "d_model, d_mlp")
    b_in = stacked_over_layers("mlp", "b_in", "d_mlp")
    W_out = stacked_over_layers("mlp", "W_out", "d_mlp, d_model")
    b_out = stacked_over_layers("mlp", "b_out", "d_model")

    @property
    def QK(self) -> FactoredMatrix:
        """``[n_layers, n_heads, d_model, d_model]``: each head's bilinear form ``W_Q W_K^T`` of
        ``hook_attn_scores`` (``Attention.score_weights``; view 1 for ``diff``), before the
        mechanism's scaling, q/k normalisation and rotation."""
        W_Q, W_K = zip(*(block.attn.score_weights() for block in self.blocks))
        return FactoredMatrix(torch.stack(W_Q), torch.stack(W_K).transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """``[n_layers, n_heads, d_model, d_model]``: ``W_V W_O``, what a head writes per unit of
        weight on a key. ``diff``, ``trela`` and ``tda`` RMS-normalise each head's ``z`` before
        ``W_O``, so for them it is the map up to that per-query rescaling."""
        return FactoredMatrix(self.W_V, self.W_O)

    def ln1_gains(self) -> torch.Tensor:
        """``[n_layers, 1, d_model, 1]``: each block's ln1 gain, to fold into a per-head map's rows."""
        return torch.stack([block.ln1.w for block in self.blocks])[:, None, :, None]

    @property
    def QK_tl(self) -> FactoredMatrix:
        """:attr:`QK` as TransformerLens has it for a model loaded with ``fold_ln`` (its default):
        each block's ln1 gain folded in on both sides, so it is the bilinear form of
        ``hook_attn_scores`` on ``ln1.hook_normalized_tl`` (x / rms(x), before the gain). Like
        TransformerLens's, before the mechanism's scaling and any rotation; here also before TRA's
        and TDA's q/k normalisation."""
        gains, QK = self.ln1_gains(), self.QK
        return FactoredMatrix(gains * QK.A, QK.B * gains.transpose(-2, -1))

    @property
    def OV_tl(self) -> FactoredMatrix:
        """:attr:`OV` with each block's ln1 gain folded into ``W_V``, as TransformerLens's ``OV`` of
        a model loaded with ``fold_ln``: the map from ``ln1.hook_normalized_tl`` at a key to what
        the head writes per unit of weight on it (up to the per-query rescaling of ``diff``,
        ``trela`` and ``tda``)."""
        return FactoredMatrix(self.ln1_gains() * self.W_V, self.W_O)

    @property
    def folded_W_U(self) -> torch.Tensor:
        """``W_U`` ``[d_model, d_vocab]`` with the final RMSNorm's gain folded in (TransformerLens's
        ``fold_ln``): ``logits = resid / scale @ folded_W_U``, ``scale`` being ``ln_final.hook_scale``."""
        return self.ln_final.w[:, None] * self.W_U

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """``[d_model]``: the biases added to the residual stream before block ``layer``'s
        attention (before its MLP with ``mlp_input``); zero without ``linear_bias``."""
        bias = self.b_O[:layer].sum(0)
        if include_mlp_biases:
            bias = bias + self.b_out[:layer].sum(0)
        return bias + self.b_O[layer] if mlp_input else bias

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """TransformerLens's switch: with it on, each block's attention computes every head's output
        ``z @ W_O`` at ``attn.hook_result`` ``[batch, pos, head, d_model]`` and sums them, so the
        heads' outputs can be cached and edited one by one; off (the default), one product."""
        self.cfg.use_attn_result = use_attn_result

    def tl_hook_aliases(self) -> dict[str, str]:
        """``attn.hook_attn_scores_tl`` and ``attn.hook_pattern_tl`` of every block: the hooks that
        hold TransformerLens's ``hook_attn_scores`` (our ``hook_attn_logits``) and
        ``hook_pattern`` (what the normalisation makes of them: ``hook_pattern``, or view 1 where
        the mechanism subtracts two views)."""
        aliases = {}
        for layer, block in enumerate(self.blocks):
            attn = f"blocks.{layer}.attn."
            aliases[attn + "hook_attn_scores_tl"] = attn + "hook_attn_logits"
            aliases[attn + "hook_pattern_tl"] = attn + block.attn.TL_PATTERN_HOOK
        return aliases

    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        """TransformerLens's per-head copies of each block's input, which direct path patching
        (``transformer_lens.patching.get_act_patch_direct_path``) edits. There are none here, so
        turning them off does nothing and turning them on is refused."""
        if use_split_qkv_input:
            raise NotImplementedError(
                "direct path patching edits one head's own copy of the block input (TransformerLens's "
                "use_split_qkv_input), but a GlitchLens block normalises its input once and every head, "
                "forget gate and second view reads that one tensor; patch hook_q / hook_k / hook_v per head "
                "instead (transformer_lens.patching.get_act_patch_attn_head_*)")

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

    @tl_component("W_E")
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The stream entering block 0: token embeddings plus position embeddings (APE, Label).
        As TransformerLens's module, ``model.embed.W_E`` is :attr:`W_E`."""
        return self._embed_ids(as_token_ids(tokens, self.cfg.d_vocab))

    def _embed_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        """:meth:`embed` of ids :func:`models.tokens.as_token_ids` has already checked, so that
        :meth:`forward` checks its tokens once."""
        resid = self.hook_embed(self.W_E[tokens])
        if self.cfg.pos_embed != "none":
            pos = self.positions(tokens.shape[1], tokens.device)
            resid = resid + self.hook_pos_embed(self.W_pos[pos].expand_as(resid))
        return self.embed_dropout(resid)

    def forward(self, tokens: torch.Tensor, return_type: str | None = "logits", loss_per_token: bool = False, *,
                reads_only: bool = False, stop_at_layer: int | None = None):
        """TransformerLens's forward on token ids ``[batch, pos]``. ``return_type``: ``"logits"``
        ``[batch, pos, d_vocab]``, ``"loss"`` (:meth:`next_token_loss`, with ``loss_per_token``
        and ``reads_only``), ``"both"`` (``Output(logits, loss)``), None (runs the model, for its
        hooks, and returns None), or ``"normalized"`` (the final RMSNorm output ``[batch, pos,
        d_model]``, for unembedding a few positions). ``stop_at_layer``: run only the blocks
        before it (negative counts from the end) and return the residual stream there,
        ``[batch, pos, d_model]``. Empty inputs (no sequences, or T = 0) give empty outputs of
        those shapes.

        On the CPU in eval mode without gradients or hooks, the batch is shared out to torch's
        threads one part each (:mod:`models.workers`), except for a loss, which is a mean over
        the whole batch; the outputs equal the unsplit forward's up to float rounding."""
        check_return_type(return_type)
        blocks = self.blocks
        if stop_at_layer is not None:
            if type(stop_at_layer) is not int or not -len(blocks) <= stop_at_layer <= len(blocks):
                raise ValueError(f"stop_at_layer must be an integer in [-{len(blocks)}, {len(blocks)}] for "
                                 f"{len(blocks)} blocks, got {stop_at_layer!r}")
            blocks = blocks[:stop_at_layer]
        tokens = as_token_ids(tokens, self.cfg.d_vocab)
        if return_type not in ("loss", "both") and splits_over_threads(self, tokens):
            return forward_in_parts(lambda part: self._forward_blocks(part, blocks, return_type, stop_at_layer is not None),
                                    tokens)
        return self._forward_blocks(tokens, blocks, return_type, stop_at_layer is not None, loss_per_token, reads_only)

    def _forward_blocks(self, tokens: torch.Tensor, blocks, return_type: str | None, stream: bool,
                       loss_per_token: bool = False, reads_only: bool = False):
        """:meth:`forward`'s work on checked ids through ``blocks``: the residual stream after them
        when ``stream`` (``stop_at_layer``), else the output ``return_type`` asks for."""
        resid = self._embed_ids(tokens)
        if resid.numel():  # the mechanisms need at least one query and one key
            for block in blocks:
                resid = block(resid)
        if stream:
            return resid
        return self.output_as(return_type, self.ln_final(resid), tokens, loss_per_token, reads_only)

    def normalized_at(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``forward(tokens, "normalized")`` at ``positions [batch, n]`` (each row's positions
        in any order, repeats allowed): ``[batch, n, d_model]``, for unembedding the reads.

        The last block computes only what those positions need: its keys and values at every
        position, its queries, MLP and norms at these (:meth:`Block.forward_at`); the blocks
        before it are unchanged. So the result equals the full forward's up to float rounding.
        With a gradient wanted, in training mode or with any hook attached, the full forward
        runs and is indexed, so that hooks see every position as they always do."""
        if torch.is_grad_enabled() or self.training or not tokens.numel() or self.has_active_hooks():
            return super().normalized_at(tokens, positions)
        check_positions(tokens, positions)
        resid = self.embed(tokens)
        for block in self.blocks[:-1]:
            resid = block(resid)
        return self.ln_final(self.blocks[-1].forward_at(resid, positions))

    @tl_component("W_U", "b_U")
    def unembed(self, normalized: torch.Tensor) -> torch.Tensor:
        """Logits of the final norm's output; ``model.unembed.W_U`` is :attr:`W_U`, as TransformerLens's."""
        return normalized @ self.W_U

    @property
    def pos_embed(self) -> Component:
        """TransformerLens's ``pos_embed`` of a model that adds position embeddings to the stream
        (APE, Label): ``model.pos_embed(tokens)`` is what ``hook_pos_embed`` holds, ``[batch, pos,
        d_model]``, and ``model.pos_embed.W_pos`` the table. A model without them (RoPE, NoPE, the
        relative biases) has no ``pos_embed``, as in TransformerLens."""
        if self.cfg.pos_embed == "none":
            raise AttributeError(f"this {self.cfg.attention} model adds no position embedding to the stream "
                                 "(pos_embed='none'), so it has no pos_embed; model.W_pos is the zero table")

        def pos_embed(tokens: torch.Tensor) -> torch.Tensor:
            tokens = as_token_ids(tokens, self.cfg.d_vocab)
            return self.W_pos[self.positions(tokens.shape[1], tokens.device)].expand(*tokens.shape, -1)

        return Component(self, pos_embed, ("W_pos",))

"""The interface every attention mechanism implements, and the registry that names them.

A mechanism is an ``nn.Module`` built from ``(cfg, layer)`` that maps the normalised
residual stream ``[batch, pos, d_model]`` to its contribution ``[batch, pos, d_model]``.
It owns its projections (stored per head in TransformerLens's shapes) and its hook
points. Every mechanism exposes at least

- ``hook_q``: the queries q_i, the block input through ``W_Q`` per head, ``[batch, pos, head,
  d_head]``, before the mechanism's own normalisation or rotation
- ``hook_k``: the keys k_j, the block input through ``W_K`` per head, ``[batch, pos, head,
  d_head]``, before the mechanism's own normalisation or rotation
- ``hook_v``: the values v_j, the block input through ``W_V`` per head, ``[batch, pos, head, d_head]``
- ``hook_attn_scores``: the score matrix S the mechanism uses, ``[batch, head, query_pos, key_pos]``
  (the content term alone: no positional term, no mask)
- ``hook_attn_logits``: what the normalisation reads (softmax, or the rectifier of the
  threshold mechanisms), the positional terms added and masked keys at ``MASK_FILL``:
  TransformerLens's ``hook_attn_scores``, same shape
- ``hook_pattern``: the weights actually applied to V (signed for differential mechanisms)
- ``hook_z``: each head's output before ``W_O``, ``z_i = sum_j A_ij v_j`` ``[batch, pos, head,
  d_head]`` with A the applied weights (then RMS-normalised for trela and TDA, and for Diff also
  scaled by ``1 - lambda_init``)
- ``hook_result``: each head's output ``z @ W_O``, ``[batch, pos, head, d_model]``, computed
  only while ``cfg.use_attn_result`` is set (TransformerLens's switch, as there)

A mechanism that rotates its whole queries and keys by RoPE (softmax, TRA and FoT with the
``rope`` option: :attr:`Attention.ROTARY_HOOKS`) also has TransformerLens's rotary hooks
(:meth:`Attention.rotate_qk`), both ``[batch, pos, head, d_head]``:

- ``hook_rot_q``: the queries rotated by their positions, what the scores read
- ``hook_rot_k``: the keys rotated by their positions

Options come from ``cfg.attention_options`` and are checked against the mechanism's
``Options`` dataclass, so a typo is an error rather than a silently ignored key.

Attention dropout (``cfg.attention_dropout``, training mode only) acts where the TRA authors'
notebook puts it: on the logits, the tensor ``hook_attn_logits`` shows, after every positional
term is added and before the masked keys are set to the fill (:meth:`Attention.drop_logits`).
A dropped logit becomes 0 (for a softmax, the key stays in the normalisation with logit 0;
for the rectifier of trela and TDA, the key gets weight 0) and the kept ones are scaled by
``1 / (1 - p)``; masked keys stay masked. Two-view mechanisms drop each view's logits
independently. The fast paths do not implement it: while it is active every mechanism
runs its reference (:meth:`Attention.implementation`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from kernels.tooling import native
from kernels.tooling.common import interpreting, upcast
from kernels.tooling.rows import at_rows
from models.attention.rope import apply_rope, rotation_tables

REGISTRY: dict[str, type["Attention"]] = {}

# The hooks of the module docstring, which every mechanism has; any other hook of a mechanism
# is its own (TRA's D-bar, FoT's forget gate, the views of Diff and TDA, CoPE's gates).
COMMON_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_attn_logits", "hook_pattern", "hook_z",
                "hook_result")
# TransformerLens's rotated q and k, of the mechanisms that rotate them whole (Attention.ROTARY_HOOKS):
# functions of hook_q and hook_k, so neither a mechanism's own hooks nor inputs of their own to patch.
ROTATION_HOOKS = ("hook_rot_q", "hook_rot_k")


def register(name: str, replace: bool = False):
    """Class decorator: make a mechanism available as ``cfg.attention == name`` (the built-in
    ones; ``models.register_mechanism`` registers one's own, which may ``replace`` a class of
    its name)."""

    def wrap(cls):
        if name in REGISTRY and not replace:
            raise ValueError(f"attention mechanism {name!r} registered twice")
        REGISTRY[name] = cls
        cls.registry_name = name
        return cls

    return wrap


def get_attention_class(name: str) -> type["Attention"]:
    if name not in REGISTRY:
        raise ValueError(f"unknown attention mechanism {name!r}; registered: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


@dataclasses.dataclass
class NoOptions:
    pass


def imported_on_call(path: str) -> Callable:
    """The function at the dotted ``path``, imported when it is first called: a Triton kernel's
    module imports triton, which a model needs only when it runs a kernel (and which must come
    after ``TRITON_INTERPRET`` is set)."""
    module, name = path.rsplit(".", 1)

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x [..., d]`` scaled to unit root-mean-square over its last axis, no affine weight,
    computed in at least float32. An all-zero row stays zero (never NaN)."""
    return F.rms_norm(upcast(x), (x.shape[-1],), eps=eps).to(x.dtype)


@contextmanager
def reference_attention(model: nn.Module) -> Iterator[None]:
    """Every attention layer of ``model`` runs its reference while the block runs, in eval mode
    too (where ``attention_impl="reference"`` alone runs the fast path): the layers are set to the
    reference and to training mode, which nothing else of a layer reads but attention dropout
    (off unless ``cfg.attention_dropout``). For checking fast paths against the reference."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    saved = [(layer, layer.training, layer.cfg.attention_impl) for layer in layers]
    try:
        for layer in layers:
            layer.cfg.attention_impl = "reference"
            layer.train()
        yield
    finally:
        for layer, training, impl in saved:
            layer.cfg.attention_impl = impl
            layer.train(training)


def has_hooks(*hook_points: HookPoint) -> bool:
    return any(h.has_hooks() for h in hook_points)


class Attention(nn.Module):
    """Base class: per-head Q, K, V, O projections, the common hooks, and the output path.

    Subclasses implement :meth:`attend`, which maps ``q, k, v`` (``[batch, pos, head,
    d_head]``, already through their hooks) and the block input ``x`` to ``z``
    ``[batch, pos, head, d_head]``: it prepares the core's inputs (normalisation, rotation,
    gates) and hands them to the implementation :meth:`implementation` picks among the
    mechanism's :attr:`IMPLEMENTATIONS`. Mechanisms with more projections (two views, gates)
    add their own parameters and hooks.
    """

    Options = NoOptions
    registry_name = "?"
    # The hook holding TransformerLens's hook_pattern, what the normalisation makes of
    # hook_attn_logits (models.lens: the model's ``hook_pattern_tl``). A mechanism that subtracts
    # a second view names its first.
    TL_PATTERN_HOOK = "hook_pattern"
    # Whether the mechanism rotates its whole q and k with RoPE when its ``rope`` option is on, through
    # hook_rot_q / hook_rot_k (rotate_qk). Diff rotates each view's half of them, TDA and trela
    # rotate inside their L2 normalisation: none of them has TransformerLens's rotated q and k.
    ROTARY_HOOKS = False

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        try:
            self.options = self.Options(**cfg.attention_options)
        except TypeError:
            allowed = [f.name for f in dataclasses.fields(self.Options)]
            raise ValueError(
                f"attention {self.registry_name!r} got options {sorted(cfg.attention_options)}; "
                f"it accepts {allowed}") from None
        self.W_Q = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_model, cfg.d_head))
        self.W_K = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_model, cfg.d_head))
        self.W_V = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_model, cfg.d_head))
        self.W_O = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_head, cfg.d_model))
        for w in (self.W_Q, self.W_K, self.W_V):
            nn.init.normal_(w, std=1.0 / math.sqrt(cfg.d_model))
        nn.init.normal_(self.W_O, std=1.0 / math.sqrt(cfg.d_model * 2 * cfg.n_layers))
        self.b_O = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.linear_bias else None
        for name in COMMON_HOOKS:
            setattr(self, name, HookPoint())
        if self.ROTARY_HOOKS and getattr(self.options, "rope", False):
            self.hook_rot_q, self.hook_rot_k = HookPoint(), HookPoint()

    def rotate_qk(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"]
                  ) -> tuple[Float[Tensor, "batch pos head d_head"], Float[Tensor, "batch pos head d_head"]]:
        """q and k rotated by their positions (RoPE), through ``hook_rot_q`` and ``hook_rot_k`` as
        in TransformerLens's rotary models."""
        return self.hook_rot_q(apply_rope(q)), self.hook_rot_k(apply_rope(k))

    def rotation_in_kernel(self, impl: str, positions: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """RoPE's tables for q and k ``[batch, pos, head, d]`` where the core ``impl`` runs the fused C
        kernel (:mod:`kernels.tooling.native`: the ``rows`` path without gradients on a CPU it was built
        for), which then rotates them on their way into its layout in one pass, equal to
        :func:`~models.attention.rope.apply_rope` up to float rounding; None where the mechanism
        rotates them itself, as it does while a hook on the rotated q or k must see them."""
        if "rows" not in self.IMPLEMENTATIONS or (impl != "rows" and positions is None) or not native.usable(q, k, v):
            return None
        if has_hooks(*(getattr(self, name) for name in ROTATION_HOOKS if hasattr(self, name))):
            return None
        return rotation_tables(q.shape[1], q.shape[-1], upcast(q))

    def zero_bias(self) -> Float[Tensor, "head d_head"]:
        return self.W_Q.new_zeros(self.n_heads, self.d_head)

    # TransformerLens's per-head biases of q, k and v: none here, so zeros of their shape
    b_Q = property(zero_bias, doc="``[n_heads, d_head]`` zeros: the queries have no bias.")
    b_K = property(zero_bias, doc="``[n_heads, d_head]`` zeros: the keys have no bias.")
    b_V = property(zero_bias, doc="``[n_heads, d_head]`` zeros: the values have no bias.")

    @staticmethod
    def project(x: Float[Tensor, "batch pos d_model"], W: Float[Tensor, "head d_model d"]
                ) -> Float[Tensor, "batch pos head d"]:
        """``[batch, pos, d_model] x [head, d_model, d] -> [batch, pos, head, d]``."""
        return torch.einsum("bpm,hmd->bphd", x, W)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        q = self.hook_q(self.project(x, self.W_Q))
        k = self.hook_k(self.project(x, self.W_K))
        v = self.hook_v(self.project(x, self.W_V))
        z = self.hook_z(self.attend(q, k, v, x))
        return self.output(z)

    def output(self, z: Float[Tensor, "batch query_pos head d_head"]) -> Float[Tensor, "batch query_pos d_model"]:
        """``z [batch, pos, head, d_head]`` through ``W_O`` (and ``b_O``): ``[batch, pos, d_model]``;
        with ``cfg.use_attn_result`` as the sum of the heads' outputs at ``hook_result``."""
        if self.cfg.use_attn_result:
            out = self.hook_result(torch.einsum("bphd,hdm->bphm", z, self.W_O)).sum(-2)
        else:
            out = torch.einsum("bphd,hdm->bpm", z, self.W_O)
        return out if self.b_O is None else out + self.b_O

    def forward_at(self, x: Float[Tensor, "batch pos d_model"], positions: Int[Tensor, "batch query_pos"]
                   ) -> Float[Tensor, "batch query_pos d_model"]:
        """``forward(x)`` at the queries at ``positions [batch, n]`` only: ``[batch, n, d_model]``.

        q, k, v (and gates) are computed at every position, as keys need them and the
        mechanisms prepare q with its position; the attention core computes only the rows of
        the chosen queries where the mechanism has a ``rows`` or ``sdpa`` path and no hook or
        dropout needs the reference (:meth:`implementation`). Otherwise every row is computed
        and these are kept. Without gradients only (the evaluation's last block)."""
        if self.implementation(x.device) == "reference" or not {"rows", "sdpa"} & set(self.IMPLEMENTATIONS):
            return at_rows(self(x), positions)
        q, k, v = (self.project(x, W) for W in (self.W_Q, self.W_K, self.W_V))
        return self.output(self.attend(q, k, v, x, positions))

    def attend(self, q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"],
               v: Float[Tensor, "batch pos head d_head"], x: Float[Tensor, "batch pos d_model"],
               positions: Int[Tensor, "batch query_pos"] | None = None
               ) -> Float[Tensor, "batch query_pos head d_head"]:
        """``z`` at every position (``query_pos`` = ``pos``), or with query ``positions`` (from
        :meth:`forward_at`) at those only, through :meth:`core`; ``x`` is the block input, which
        gates and second views are read from."""
        raise NotImplementedError

    def drops_logits(self) -> bool:
        """Whether :meth:`drop_logits` acts: in training mode with ``cfg.attention_dropout > 0``."""
        return self.training and self.cfg.attention_dropout > 0

    def drop_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The attention dropout of the TRA authors' notebook: ``logits`` (the unmasked
        ``[batch, head, query, key]`` logits, about to be masked) with each entry zeroed with
        probability ``cfg.attention_dropout`` and the rest scaled by ``1 / (1 - p)``, in training
        mode only; unchanged otherwise, with no draw from the RNG."""
        if not self.drops_logits():
            return logits
        return F.dropout(logits, self.cfg.attention_dropout, training=True)

    def score_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The projections ``(W_Q, W_K)`` ``[head, d_model, d]`` whose bilinear form gives
        ``hook_attn_scores``, before the mechanism's scaling, q/k normalisation and rotation
        (the model's ``QK``)."""
        return self.W_Q, self.W_K

    # Hooks computed outside the attention core: a fused kernel still passes through them
    # (softmax's position bias goes into SDPA as its mask; CoPE's gate keys into the reference).
    OUTER_HOOKS = frozenset({"hook_q", "hook_k", "hook_v", "hook_z", "hook_q2", "hook_k2", "hook_forget",
                             "hook_pos_bias", "hook_k_gate", "hook_result", *ROTATION_HOOKS})

    def active_inner_hooks(self) -> list[str]:
        """Names of the hooks inside the attention core that currently have hooks attached."""
        return [name for name, h in self.hook_points().items() if name not in self.OUTER_HOOKS and h.has_hooks()]

    def hook_points(self) -> dict[str, HookPoint]:
        return {name: h for name, h in self.named_children() if isinstance(h, HookPoint)}

    # The attention core's implementations, all with the same arguments: "reference" (the
    # spec, ``kernels.<op>.reference``, which also takes the layer's hooks and attention
    # dropout) and the fast ones the mechanism has: "rows" (``kernels.<op>.rows``, the CPU
    # path), "triton" (``kernels.<op>.triton``) or "sdpa" (PyTorch's fused softmax attention).
    IMPLEMENTATIONS: dict[str, Callable] = {}

    def implementation(self, device: torch.device) -> str:
        """Which of :attr:`IMPLEMENTATIONS` the attention core runs on ``device``.

        ``cfg.attention_impl``: ``"reference"`` the reference in training mode, and in eval mode
        what ``"auto"`` runs (the setting a model was trained with, which a checkpoint keeps,
        should not make its evaluation quadratic in memory and slow; hook an inner map to see
        the reference run); ``"auto"`` ``"triton"`` on
        CUDA and ``"rows"`` elsewhere; ``"rows"`` or ``"triton"`` that one (``"triton"`` on the
        CPU needs ``TRITON_INTERPRET=1``). A mechanism without the chosen path runs ``"sdpa"``
        if it has it (softmax and Diff: PyTorch's fused attention, on every device, under every
        setting but ``"reference"``), else its reference. No fast path keeps the ``[query,
        key]`` matrices a hook inside the attention core must see, so while any such hook
        (pattern, scores, M, D-bar, views, ...) is active the reference runs instead; when the
        path was named explicitly a warning says so, rather than a hook seeing something else
        under its name. No fast path applies attention dropout either: while it acts
        (:meth:`drops_logits`) the reference runs too, with the same warning when the path was
        named.
        """
        impl = self.cfg.attention_impl
        if impl == "reference" and not self.training:
            impl = "auto"
        if impl == "auto":
            impl = "triton" if device.type == "cuda" else "rows"
        if impl not in self.IMPLEMENTATIONS:
            impl = "sdpa" if "sdpa" in self.IMPLEMENTATIONS else "reference"
        if impl == "reference":
            return impl
        if impl == "triton" and device.type != "cuda" and not interpreting():
            raise RuntimeError("attention_impl='triton' needs CUDA tensors, or TRITON_INTERPRET=1 to run "
                               "the kernels on the CPU through Triton's interpreter")
        named = impl == self.cfg.attention_impl
        inner = self.active_inner_hooks()
        if inner:
            if named:
                warnings.warn(f"hooks on {self.registry_name} internals ({', '.join(inner)}) need the full "
                              f"[query, key] matrices: those layers run the PyTorch reference, not {impl!r}",
                              stacklevel=2)
            return "reference"
        if self.drops_logits():
            if named:
                warnings.warn(f"attention dropout on the {self.registry_name} logits needs the full [query, key] "
                              f"matrices: in training those layers run the PyTorch reference, not {impl!r}",
                              stacklevel=2)
            return "reference"
        return impl

    def core_options(self) -> dict:
        """What the core's implementations take by keyword after its tensors, from this layer's
        parameters and options (TDA's beta and lambda, CoPE's position table)."""
        return {}

    def core(self, impl: str, positions: torch.Tensor | None = None) -> Callable:
        """Implementation ``impl`` of the attention core, with the layer's :meth:`core_options`
        and, for the reference, its hooks and attention dropout. With query ``positions`` it
        is the ``rows`` path (else ``sdpa``), which computes only those queries' rows."""
        options = self.core_options()
        if positions is not None:
            impl = "rows" if "rows" in self.IMPLEMENTATIONS else "sdpa"
            options.update(positions=positions)
        if impl == "reference":
            options.update(hooks=self.hook_points(), drop_logits=self.drop_logits)
        return functools.partial(self.IMPLEMENTATIONS[impl], **options)

    def reference(self, *inputs) -> torch.Tensor:
        """The attention core's reference on ``inputs`` (as :meth:`attend` passes them), with
        this layer's hooks and dropout: what the fast paths are tested and timed against."""
        return self.core("reference")(*inputs)

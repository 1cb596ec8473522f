"""TransformerLens parity: what TransformerLens's ``ActivationCache`` helpers and
``transformer_lens.patching`` need from a model besides its hooks, shared by the transformer
and the LSTM.

- :class:`GlitchLensCache`, the ``ActivationCache`` that ``run_with_cache`` returns. Its
  shorthand also reaches the mechanisms' own hooks (``cache["dbar", 1]`` is
  ``blocks.1.attn.hook_dbar``), a missing key says why it is missing, and it refuses to split
  a residual stream that is not a sum (``norm_placement="stream"``) into its parts.
- :class:`HookedModelMixin`: ``run_with_cache`` returning that cache, ``cfg.device`` kept
  current, the flip-flop letters as the tokenizer (``to_tokens``, ``to_str_tokens``, ...), and
  the residual directions of tokens for logit attribution.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import torch
from transformer_lens import ActivationCache
from transformer_lens.utilities import get_act_name

from kernels.rows import at_rows
from models.tokens import FLIPFLOP_VOCAB, as_token_ids


def hook_name(model, key: str | tuple) -> str:
    """The hook a cache key names. Full names and TransformerLens's shorthand (``"embed"``,
    ``("pattern", 0)``, ``("scale", 1, "ln2")``) mean what ``get_act_name`` makes of them;
    a ``(name, layer)`` key that names exactly one hook of that block, ``hook_<name>`` in the
    block or one of its sublayers, means that hook. So ``("dbar", 1)`` is
    ``blocks.1.attn.hook_dbar``, which ``get_act_name`` would place at ``blocks.1.hook_dbar``,
    and the model's own names come before TransformerLens's aliases: ``("attn_logits", 0)`` is
    ``blocks.0.attn.hook_attn_logits``, not the ``hook_attn_scores`` it aliases in
    TransformerLens. Negative layers count from the end."""
    if isinstance(key, str):
        return get_act_name(key)
    name, layer, layer_type = (*key, None, None)[:3]
    if layer is not None and layer < 0:
        layer += model.cfg.n_layers
    if layer is not None and layer_type is None:
        pattern = re.compile(rf"blocks\.{layer}\.(?:\w+\.)?hook_{re.escape(name)}")
        own = [hook for hook in model.hook_dict if pattern.fullmatch(hook)]
        if len(own) == 1:
            return own[0]
        if own:
            sublayer = own[0].split(".")[2]
            raise KeyError(f"{key!r} could be any of {', '.join(own)}: name the sublayer, "
                           f"e.g. cache[{name!r}, {layer}, {sublayer!r}]")
    return get_act_name(name, layer, layer_type)


def needs_additive_stream(helper):
    """Wrap an ``ActivationCache`` helper that splits the residual stream into the embeddings
    and the block outputs added to it. With ``norm_placement="stream"`` every sublayer
    replaces the stream by its normalisation, so an output reaches the later stream rescaled
    by each norm's gain and scale, and the stream is not the sum of the outputs: the helper
    would attribute to each output what it does not contribute."""

    @functools.wraps(helper)
    def checked(cache: "GlitchLensCache", *args, **kwargs):
        if cache.model.cfg.norm_placement == "stream":
            raise ValueError(
                f"{helper.__name__} splits the residual stream into the outputs added to it, but with "
                "norm_placement='stream' each block replaces the stream by its normalisation, so the "
                "stream is not the sum of the earlier outputs. What still holds: accumulated_resid, "
                "logit_lens, apply_ln_to_stack and logit_attrs on the stream itself, and patching.")
        return helper(cache, *args, **kwargs)

    return checked


class GlitchLensCache(ActivationCache):
    """TransformerLens's ``ActivationCache``, with the keys of :func:`hook_name`, errors that
    name what is missing, and the stream decompositions refused where the stream is no sum."""

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, str) and key in self.cache_dict:
            return self.cache_dict[key]
        name = hook_name(self.model, key)
        if name not in self.cache_dict:
            raise KeyError(f"{name!r} is not in this cache: {self.why_missing(name)}")
        return self.cache_dict[name]

    def why_missing(self, name: str) -> str:
        model = self.model
        if name in model.hook_dict:
            return "run_with_cache's names_filter left it out"
        if not hasattr(model, "blocks"):
            return (f"the {model.cfg.model} model has no blocks, attention or residual stream; "
                    f"its hooks are {', '.join(model.hook_dict)}")
        return f"the {model.cfg.model} model has no hook of that name"

    def apply_slice_to_batch_dim(self, batch_slice) -> "GlitchLensCache":
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return GlitchLensCache(sliced.cache_dict, self.model, has_batch_dim=sliced.has_batch_dim)

    decompose_resid = needs_additive_stream(ActivationCache.decompose_resid)
    stack_head_results = needs_additive_stream(ActivationCache.stack_head_results)
    stack_neuron_results = needs_additive_stream(ActivationCache.stack_neuron_results)
    get_full_resid_decomposition = needs_additive_stream(ActivationCache.get_full_resid_decomposition)


def check_positions(tokens: torch.Tensor, positions: torch.Tensor) -> None:
    """Refuse query ``positions`` that are not ``[batch, n]`` integers inside ``tokens [batch, T]``."""
    if not isinstance(positions, torch.Tensor) or positions.dtype.is_floating_point or positions.dim() != 2 \
            or positions.shape[0] != tokens.shape[0]:
        raise ValueError(f"positions must be an integer tensor [batch, n] with the tokens' batch of {tokens.shape[0]}, "
                         f"got {getattr(positions, 'dtype', type(positions).__name__)} "
                         f"{tuple(getattr(positions, 'shape', ()))}")
    if positions.numel() and (positions.min() < 0 or positions.max() >= tokens.shape[1]):
        raise ValueError(f"positions must lie in [0, {tokens.shape[1]}) for {tokens.shape[1]} tokens, got "
                         f"{int(positions.min())} to {int(positions.max())}")


class HookedModelMixin:
    """What the transformer and the LSTM share besides ``HookedRootModule``: the cache, the
    device, the vocabulary and the unembedding as TransformerLens's helpers read them. A model
    defines ``W_E``, ``W_U`` and ``folded_W_U``.

    ``vocab`` holds the token strings by id, the flip-flop letters; a model trained on another
    task can be given its own (one character per token) by assigning ``model.vocab``.
    """

    vocab: tuple[str, ...] = FLIPFLOP_VOCAB

    def setup(self):
        super().setup()
        self.cfg.device = self.W_E.device  # where the parameters were created

    def _apply(self, fn, *args, **kwargs):
        # Every move (.to, .cuda, .cpu) goes through here: record where the parameters went,
        # since transformer_lens.patching allocates its results on cfg.device.
        module = super()._apply(fn, *args, **kwargs)
        self.cfg.device = self.W_E.device
        return module

    def normalized_at(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``forward(tokens, "normalized")`` at ``positions [batch, n]``: ``[batch, n, d_model]``
        (the evaluation unembeds the reads from it). Here the full forward, indexed; a model may
        compute less (the transformer's last block runs only at these positions)."""
        check_positions(tokens, positions)
        return at_rows(self(tokens, return_type="normalized"), positions)

    def has_active_hooks(self) -> bool:
        """Whether any of the model's hook points has a hook attached."""
        return any(hook.has_hooks() for hook in self.hook_dict.values())

    def run_with_cache(self, *args, **kwargs) -> tuple[torch.Tensor, GlitchLensCache]:
        """``HookedRootModule.run_with_cache``, returning a :class:`GlitchLensCache`."""
        out, cache = super().run_with_cache(*args, **kwargs)
        cache_dict = cache.cache_dict if isinstance(cache, ActivationCache) else cache
        return out, GlitchLensCache(cache_dict, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    @property
    def b_U(self) -> torch.Tensor:
        """``[d_vocab]`` zeros: the unembedding has no bias, for TransformerLens code that adds one."""
        return self.W_U.new_zeros(self.W_U.shape[1])

    def tokens_to_residual_directions(self, tokens: str | int | torch.Tensor) -> torch.Tensor:
        """The residual direction of each token, ``[*tokens.shape, d_model]`` (``[d_model]`` for
        one token): a column of ``folded_W_U``, whose dot product with the stream divided by the
        final norm's scale (what ``cache.apply_ln_to_stack`` gives) is the token's logit."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        return self.folded_W_U.T[torch.as_tensor(tokens, device=self.W_U.device).long()]

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  move_to_device: bool = True) -> torch.Tensor:
        """``[batch, pos]`` token ids of a string or a list of equally long strings, one token
        per character: ``to_tokens("w1r1")`` is ``[[0, 4, 1, 4]]``. There is no BOS token and
        no padding token."""
        if prepend_bos:
            raise ValueError("the vocabulary has no BOS token: pass prepend_bos=False")
        texts = [input] if isinstance(input, str) else list(input)
        lengths = sorted({len(text) for text in texts})
        if len(lengths) > 1:
            raise ValueError(f"the strings have lengths {lengths}: the vocabulary has no padding token")
        ids = {letter: token for token, letter in enumerate(self.vocab)}
        for text in texts:
            bad = next((pos for pos, letter in enumerate(text) if letter not in ids), None)
            if bad is not None:
                raise ValueError(f"{text[bad]!r} at position {bad} of {text!r} is not a token; "
                                 f"the vocabulary is {' '.join(self.vocab)}")
        tokens = torch.tensor([[ids[letter] for letter in text] for text in texts], dtype=torch.long)
        tokens = tokens.reshape(len(texts), lengths[0] if lengths else 0)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def to_str_tokens(self, input: str | torch.Tensor | np.ndarray | list) -> list[str] | list[list[str]]:
        """The token strings of one sequence (a string, or ids ``[pos]`` or ``[1, pos]``), or of
        each item of a list."""
        if isinstance(input, list):
            return [self.to_str_tokens(item) for item in input]
        if isinstance(input, str):
            return [self.vocab[token] for token in self.to_tokens(input, move_to_device=False)[0].tolist()]
        tokens = torch.as_tensor(input)
        if tokens.ndim == 2 and len(tokens) == 1:
            tokens = tokens[0]
        if tokens.ndim > 1:
            raise ValueError(f"to_str_tokens takes one sequence, got shape {tuple(tokens.shape)}; "
                             "pass a list of sequences instead")
        tokens = as_token_ids(tokens.reshape(1, -1), len(self.vocab))[0]
        return [self.vocab[token] for token in tokens.tolist()]

    def to_single_token(self, string: str) -> int:
        tokens = self.to_tokens(string, move_to_device=False)
        if tokens.numel() != 1:
            raise ValueError(f"{string!r} is not a single token; the vocabulary is {' '.join(self.vocab)}")
        return int(tokens.item())

    def to_string(self, tokens: torch.Tensor | np.ndarray | list[int]) -> str | list[str]:
        """The text of ids ``[pos]``, or of each row of ``[batch, pos]``."""
        tokens = torch.as_tensor(tokens)
        if tokens.ndim == 2:
            return ["".join(self.to_str_tokens(row)) for row in tokens]
        return "".join(self.to_str_tokens(tokens))

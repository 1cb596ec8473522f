"""TransformerLens parity: what TransformerLens's ``ActivationCache`` helpers,
``transformer_lens.patching`` and code written for ``HookedTransformer`` need from a model
besides its hooks, shared by the transformer and the LSTM.

- :class:`GlitchLensCache`, the ``ActivationCache`` that ``run_with_cache`` returns. Its
  shorthand also reaches the mechanisms' own hooks (``cache["dbar", 1]`` is
  ``blocks.1.attn.hook_dbar``) and the ``*_tl`` aliases, a missing key says why it is missing,
  and its stream decompositions stay exact where each block renormalises the stream
  (``norm_placement="stream"``).
- :class:`HookedModelMixin`: ``run_with_cache`` returning that cache, TransformerLens's return
  types and next-token loss, ``generate``, ``cfg.device`` and ``cfg.dtype`` kept current, the
  vocabulary of the model's task as the tokenizer (``to_tokens``, ``to_str_tokens``, ``model("w1r1")``),
  the residual directions of tokens for logit attribution, and hooks that cannot be silent: a
  hook on a point the model never fires is refused when it is added, and one on a name whose
  meaning differs from TransformerLens's warns once, naming the ``*_tl`` hook that holds it.
- :func:`tl_component`: a model's method as TransformerLens's module of that name
  (``model.embed(tokens)`` and ``model.embed.W_E``).
"""

from __future__ import annotations

import difflib
import functools
import re
import warnings
from typing import NamedTuple, no_type_check

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens import ActivationCache
from transformer_lens.hook_points import HookPoint
from transformer_lens.utilities import Slice, get_act_name, lm_cross_entropy_loss, sample_logits

from kernels.tooling.common import upcast
from kernels.tooling.rows import at_rows
from models import validate
from models.tokens import FLIPFLOP_VOCAB, as_token_ids, detokenize, task_vocab, tokenize


def hook_name(model, key: str | tuple) -> str:
    """The hook a cache key names. Full names and TransformerLens's shorthand (``"embed"``,
    ``("pattern", 0)``, ``("scale", 1, "ln2")``) mean what ``get_act_name`` makes of them;
    a ``(name, layer)`` key that names exactly one hook of that block, ``hook_<name>`` in the
    block or one of its sublayers, means that hook. So ``("dbar", 1)`` is
    ``blocks.1.attn.hook_dbar``, which ``get_act_name`` would place at ``blocks.1.hook_dbar``,
    and the model's own names come before TransformerLens's aliases: ``("attn_logits", 0)`` is
    ``blocks.0.attn.hook_attn_logits``, not the ``hook_attn_scores`` it aliases in
    TransformerLens. Negative layers count from the end. An alias (``hook_pattern_tl``, see
    :meth:`HookedModelMixin.tl_hook_aliases`) means the hook it stands for."""
    if isinstance(key, str):
        full_name = get_act_name(key)
        return model.hook_aliases.get(full_name, full_name)
    name, layer, layer_type = (*key, None, None)[:3]
    if layer is not None and layer < 0:
        layer += model.cfg.n_layers
    if layer is not None and layer_type is None:
        pattern = re.compile(rf"blocks\.{layer}\.(?:\w+\.)?hook_{re.escape(name)}")
        own = [hook for hook in (*model.hook_dict, *model.hook_aliases) if pattern.fullmatch(hook)]
        if len(own) == 1:
            return model.hook_aliases.get(own[0], own[0])
        if own:
            sublayer = own[0].split(".")[2]
            raise KeyError(f"{key!r} could be any of {', '.join(own)}: name the sublayer, "
                           f"e.g. cache[{name!r}, {layer}, {sublayer!r}]")
    full_name = get_act_name(name, layer, layer_type)
    return model.hook_aliases.get(full_name, full_name)


# The first norm a component written to the stream passes, counting every block's ln1 and ln2
# in order (block l's ln1 is norm 2 l, its ln2 norm 2 l + 1), by the label TransformerLens's
# stack helpers give it: the embeddings pass every norm; block l's attention output (and each
# head's share) is added after its ln1, its MLP output (each neuron's) after its ln2.
COMPONENT_LABEL = re.compile(r"(?:(\d+)_attn_out|L(\d+)H\d+)|(?:(\d+)_mlp_out|L(\d+)N\d+)")


def first_norm(label: str) -> int:
    if label in ("embed", "pos_embed"):
        return 0
    match = COMPONENT_LABEL.fullmatch(label)
    if match is None:
        raise ValueError(f"no stream component is labelled {label!r}")
    attn_layer, head_layer, mlp_layer, neuron_layer = match.groups()
    if attn_layer or head_layer:
        return 2 * int(attn_layer or head_layer) + 1
    return 2 * int(mlp_layer or neuron_layer) + 2


def as_slice(pos_slice) -> Slice:
    """TransformerLens's ``pos_slice`` argument as its helpers read it (an int drops the axis)."""
    return pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)


def target_layer(model, layer: int | None) -> int:
    """TransformerLens's ``layer`` argument: None and -1 mean the unembedding, ``n_layers``."""
    return model.cfg.n_layers if layer is None or layer == -1 else layer


class GlitchLensCache(ActivationCache):
    """TransformerLens's ``ActivationCache``, with the keys of :func:`hook_name`, errors that
    name what is missing, and stream decompositions that hold for every norm placement.

    With ``norm_placement="stream"`` each block replaces the stream by its normalisation before
    each sublayer, so the stream is not the sum of the embeddings and the outputs added to it.
    With every norm's scale frozen at its cached value (``hook_scale``, as ``apply_ln_to_stack``
    freezes the last one) each norm is linear, ``x -> x * w / scale`` per position, and the
    stream entering a norm is exactly the sum of each component times the factors ``w / scale``
    of the norms between where it was added and there. ``decompose_resid``,
    ``stack_head_results``, ``stack_neuron_results`` and ``get_full_resid_decomposition``
    return the components so rescaled (:meth:`through_later_norms`), so that they add up to the
    stream they decompose, and ``apply_ln_to_stack`` and ``logit_attrs`` on them add up to the
    logits. With ``norm_placement="pre"`` every factor is 1 and TransformerLens's helpers run
    unchanged."""

    def __init__(self, cache_dict, model, has_batch_dim: bool = True, filtered: bool = False):
        super().__init__(cache_dict, model, has_batch_dim=has_batch_dim)
        self.filtered = filtered   # whether run_with_cache was given a names_filter

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
            silent = why_silent(model, name)
            if silent:
                return silent
            if self.filtered:
                return "run_with_cache's names_filter left it out"
            return "the run that made this cache stopped before it (stop_at_layer)"
        if not hasattr(model, "blocks"):
            return (f"the {model.cfg.model} model has no blocks, attention or residual stream; "
                    f"its hooks are {', '.join(model.hook_dict)}")
        return f"the {model.cfg.model} model has no hook of that name"

    def apply_slice_to_batch_dim(self, batch_slice) -> "GlitchLensCache":
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return GlitchLensCache(sliced.cache_dict, self.model, has_batch_dim=sliced.has_batch_dim,
                               filtered=self.filtered)

    @property
    def normalises_stream(self) -> bool:
        return self.model.cfg.norm_placement == "stream"

    def rescales(self, method: str) -> bool:
        """Whether ``method``'s components are rescaled through the later norms (a stream-norm
        model); its first use on such a model warns, once per model and method
        (:class:`TLMeaningWarning`), that they are not TransformerLens's raw outputs."""
        if not self.normalises_stream:
            return False
        warned = self.model.__dict__.setdefault("_warned_tl_meaning", set())
        if method not in warned:
            warned.add(method)
            warnings.warn(f"{method} on this {architecture(self.model)} returns each component rescaled through "
                          "the norms after it, so that they add up to the stream; TransformerLens's own "
                          f"(ActivationCache.{method}(cache, ...)) returns the raw outputs, which do not "
                          "(docs/explanation/hooks-and-transformerlens.md)", TLMeaningWarning, stacklevel=3)
        return True

    def norm_factors(self, layer: int, mlp_input: bool, pos_slice: Slice
                     ) -> Float[Tensor, "norm *batch_and_pos d_model"]:
        """``[2 layer + mlp_input + 1, *batch_and_pos, d_model]``: row ``n`` is the product of
        ``w / scale`` of the norms from norm ``n`` (see :func:`first_norm`) up to the one block
        ``layer`` applies first (its ln2 with ``mlp_input``, ``ln_final`` for ``n_layers``),
        which is left out, as ``apply_ln_to_stack`` applies it; the last row is 1. At least one
        norm must lie in between."""
        factors = []
        for index in reversed(range(2 * layer + mlp_input)):
            sublayer = ("ln1", "ln2")[index % 2]
            scale = pos_slice.apply(self[f"blocks.{index // 2}.{sublayer}.hook_scale"], dim=-2)
            factor = getattr(self.model.blocks[index // 2], sublayer).w / scale
            factors.append(factor * factors[-1] if factors else factor)
        return torch.stack([*factors[::-1], torch.ones_like(factors[0])])

    def through_later_norms(self, stack: Float[Tensor, "component *batch_and_pos d_model"], labels: list[str],
                            layer: int, mlp_input: bool, pos_slice: Slice
                            ) -> Float[Tensor, "component *batch_and_pos d_model"]:
        """``stack [component, *batch_and_pos, d_model]``, labelled as TransformerLens's helpers
        label it, with each component times the factors of the norms between where it was added
        and the input of block ``layer`` (its MLP with ``mlp_input``). A final ``"remainder"``
        becomes what the rescaled components leave of the stream it made up."""
        if layer == 0 and not mlp_input:  # nothing has passed a norm yet
            return stack
        factors = self.norm_factors(layer, mlp_input, pos_slice)
        last = len(factors) - 1
        has_remainder = bool(labels) and labels[-1] == "remainder"
        components = stack[:-1] if has_remainder else stack
        first = torch.tensor([min(first_norm(label), last) for label in labels[:len(components)]],
                             dtype=torch.long, device=factors.device)
        rescaled = components * factors[first]
        if not has_remainder:
            return rescaled
        remainder = stack[-1] + components.sum(0) - rescaled.sum(0)
        return torch.cat([rescaled, remainder[None]])

    def finish(self, stack: torch.Tensor, labels: list[str], layer: int, mlp_input: bool, pos_slice: Slice,
               apply_ln: bool, return_labels: bool, project_output_onto: torch.Tensor | None = None):
        """A rescaled stack through ``apply_ln`` and the projection, in TransformerLens's order,
        returned as TransformerLens's helpers return it."""
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        if project_output_onto is not None:
            stack = stack @ project_output_onto.to(stack.dtype)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer=None, mlp_input=False, mode="all", apply_ln=False, pos_slice=None,
                        incl_embeds=True, return_labels=False):
        if not self.rescales("decompose_resid"):
            return super().decompose_resid(layer, mlp_input, mode, apply_ln, pos_slice, incl_embeds, return_labels)
        layer, pos_slice = target_layer(self.model, layer), as_slice(pos_slice)
        stack, labels = super().decompose_resid(layer, mlp_input, mode, False, pos_slice, incl_embeds, True)
        stack = self.through_later_norms(stack, labels, layer, mlp_input, pos_slice)
        return self.finish(stack, labels, layer, mlp_input, pos_slice, apply_ln, return_labels)

    def stack_head_results(self, layer=-1, return_labels=False, incl_remainder=False, pos_slice=None, apply_ln=False):
        if not self.rescales("stack_head_results"):
            return super().stack_head_results(layer, return_labels, incl_remainder, pos_slice, apply_ln)
        layer, pos_slice = target_layer(self.model, layer), as_slice(pos_slice)
        stack, labels = super().stack_head_results(layer, True, incl_remainder, pos_slice)
        stack = self.through_later_norms(stack, labels, layer, False, pos_slice)
        return self.finish(stack, labels, layer, False, pos_slice, apply_ln, return_labels)

    def stack_neuron_results(self, layer, pos_slice=None, neuron_slice=None, return_labels=False,
                             incl_remainder=False, apply_ln=False, project_output_onto=None, mlp_input=False):
        if not self.rescales("stack_neuron_results"):
            return super().stack_neuron_results(layer, pos_slice, neuron_slice, return_labels, incl_remainder,
                                                apply_ln, project_output_onto, mlp_input)
        layer, pos_slice = target_layer(self.model, layer), as_slice(pos_slice)
        stack, labels = super().stack_neuron_results(layer, pos_slice, neuron_slice, True, incl_remainder,
                                                     mlp_input=mlp_input)
        stack = self.through_later_norms(stack, labels, layer, mlp_input, pos_slice)
        return self.finish(stack, labels, layer, mlp_input, pos_slice, apply_ln, return_labels, project_output_onto)

    def get_full_resid_decomposition(self, layer=None, mlp_input=False, expand_neurons=True, apply_ln=False,
                                     pos_slice=None, return_labels=False, project_output_onto=None):
        """TransformerLens's decomposition into every head, every neuron (each MLP with
        ``expand_neurons=False``), the embeddings and the biases; with ``norm_placement="stream"``
        each through the later norms, the biases too, so the ``"bias"`` row varies by position."""
        if not self.rescales("get_full_resid_decomposition"):
            return super().get_full_resid_decomposition(layer, mlp_input, expand_neurons, apply_ln, pos_slice,
                                                        return_labels, project_output_onto)
        layer, pos_slice = target_layer(self.model, layer), as_slice(pos_slice)
        # the helpers TransformerLens's own decomposition calls, without this class's rescaling
        parts = [ActivationCache.stack_head_results(self, layer + mlp_input, pos_slice=pos_slice, return_labels=True)]
        if layer > 0 and expand_neurons:
            parts.append(ActivationCache.stack_neuron_results(self, layer, pos_slice=pos_slice, return_labels=True))
        elif layer > 0:
            parts.append(ActivationCache.decompose_resid(self, layer, pos_slice=pos_slice, incl_embeds=False,
                                                         mode="mlp", return_labels=True))
        parts.append(ActivationCache.decompose_resid(self, 0, pos_slice=pos_slice, return_labels=True))
        labels = [label for _, part_labels in parts for label in part_labels]
        stack = self.through_later_norms(torch.cat([part for part, _ in parts]), labels, layer, mlp_input, pos_slice)
        # each bias, labelled as the output it is added with, through the norms after it
        biases = [(f"{l}_attn_out", self.model.b_O[l]) for l in range(layer + mlp_input)]
        if expand_neurons:  # otherwise the MLP outputs hold their biases
            biases += [(f"{l}_mlp_out", self.model.b_out[l]) for l in range(layer)]
        bias = torch.zeros_like(stack[:1])
        if biases:
            bias = self.through_later_norms(torch.stack([b.expand_as(stack[0]) for _, b in biases]),
                                            [label for label, _ in biases], layer, mlp_input, pos_slice).sum(0, True)
        return self.finish(torch.cat([stack, bias]), [*labels, "bias"], layer, mlp_input, pos_slice, apply_ln,
                           return_labels, project_output_onto)


class Component:
    """A model's method seen as TransformerLens's module of that name: calling it calls the
    method, and its weights are the model's (``model.embed.W_E`` is ``model.W_E``)."""

    def __init__(self, model, method, weights: tuple[str, ...]):
        self._model, self._method, self._weights = model, method, weights

    def __call__(self, *args, **kwargs):
        return self._method(*args, **kwargs)

    def __getattr__(self, name: str):
        if name in self._weights:
            return getattr(self._model, name)
        raise AttributeError(f"{self._method.__name__} has the weights {', '.join(self._weights)}, not {name!r}")

    def __repr__(self) -> str:
        return f"{self._method.__name__}({', '.join(self._weights)})"


class tl_component:
    """Decorator of a model's method that TransformerLens has as a module with weights: ``@tl_component("W_E")``
    on ``embed`` makes ``model.embed(tokens)`` call the method and ``model.embed.W_E`` read ``model.W_E``."""

    def __init__(self, *weights: str):
        self.weights = weights

    def __call__(self, method):
        self.method = method
        functools.update_wrapper(self, method)
        return self

    def __get__(self, model, owner=None):
        if model is None:
            return self
        return Component(model, self.method.__get__(model, owner), self.weights)


class TLMeaningWarning(UserWarning):
    """A hook whose name TransformerLens also uses holds something else on this model."""


def architecture(model) -> str:
    """``rope model (softmax attention, norm_placement='stream')``: what a message names a model by."""
    cfg = model.cfg
    if not hasattr(model, "blocks"):
        return f"{cfg.model} model"
    return f"{cfg.model} model ({cfg.attention} attention, norm_placement={cfg.norm_placement!r})"


def why_silent(model, name: str) -> str | None:
    """Why the hook ``name`` of ``model.hook_dict`` never fires on ``model`` (None if it fires)."""
    if name.endswith("attn.hook_result") and not model.cfg.use_attn_result:
        return ("hook_result holds each head's output only after model.set_use_attn_result(True): call it first, "
                "or compute them from hook_z with cache.compute_head_results()")
    if name not in model.fired_hooks():
        return f"{name} never fires on this {architecture(model)}"
    return None


# The length of the forward pass that finds the hooks a model fires (HookedModelMixin.fired_hooks).
FIRING_PROBE_TOKENS = 8


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


RETURN_TYPES = ("logits", "loss", "both", None, "normalized")


def check_return_type(return_type) -> None:
    if return_type not in RETURN_TYPES:
        raise ValueError(f"return_type must be one of {', '.join(map(repr, RETURN_TYPES))}, got {return_type!r}")


class Output(NamedTuple):
    """What ``return_type="both"`` returns, as TransformerLens's ``HookedTransformer`` does."""

    logits: torch.Tensor
    loss: torch.Tensor


def read_mask(tokens: Int[Tensor, "batch pos"], vocab: tuple[str, ...]) -> Bool[Tensor, "batch pos"]:
    """``[batch, pos]`` True at each read: an ``r`` at an instruction position (even), whose next
    token is the bit it reads (``interp.tasks.read_mask`` on numpy arrays)."""
    if "r" not in vocab:
        raise ValueError(f"reads_only needs the flip-flop vocabulary ({' '.join(FLIPFLOP_VOCAB)}); this model's is "
                         f"{' '.join(vocab)}")
    instruction = torch.arange(tokens.shape[-1], device=tokens.device) % 2 == 0
    return (tokens == vocab.index("r")) & instruction


class UnknownHookError(KeyError, ValueError):
    """A hook name that is no hook point of the model: a ``KeyError`` as TransformerLens's lookup
    raises, and a ``ValueError`` as every refused argument here."""


class ShapeCheckedHookPoint(HookPoint):
    """A hook point whose hooks may replace its activation only by a tensor of the same shape: a
    ``hook_pattern`` hook returning ``[batch, head, 1, key_pos]`` would otherwise be broadcast to
    every query without a word. The model's hook points are of this class (set up by
    :meth:`HookedModelMixin.setup`); without hooks the check costs one attribute test."""

    @no_type_check  # called at every activation: the test suite's shape checks (tests/conftest.py) pass it by
    def __call__(self, x):
        if not self._forward_hooks:
            return super().__call__(x)
        out = super().__call__(x)
        if isinstance(x, torch.Tensor) and not isinstance(out, torch.Tensor):
            raise TypeError(f"a hook on {self.name} returned {validate.shown(out)}: a hook returns None (the "
                            "activation unchanged) or a tensor of the activation's shape")
        if isinstance(out, torch.Tensor) and isinstance(x, torch.Tensor) and out.shape != x.shape:
            raise ValueError(f"a hook on {self.name} returned a tensor of shape {tuple(out.shape)} for its "
                             f"activation of shape {tuple(x.shape)}: a hook may change the values, not the shape")
        return out


# The longest sequence ``generate`` makes: each new token runs the whole prefix again, so the time
# grows as the cube of the length (the evaluation's own limit, interp.evaluate.MAX_SEQ_LEN, is the same).
MAX_GENERATED_LEN = 16384


class HookedModelMixin:
    """What the transformer and the LSTM share besides ``HookedRootModule``: the cache,
    TransformerLens's return types and ``generate``, the device and dtype, the vocabulary and
    the unembedding as TransformerLens's helpers read them. A model defines ``W_E``, ``W_U``,
    ``unembed`` and ``folded_W_U``.

    ``vocab`` holds the token strings by id: those of the task the model was trained on
    (``trained_task``, which a checkpoint records; flip-flop's letters for a model built here),
    or any other vocabulary assigned to ``model.vocab``.
    """

    @property
    def vocab(self) -> tuple[str, ...]:
        assigned = self.__dict__.get("_vocab")
        return assigned if assigned is not None else task_vocab(self.__dict__.get("trained_task"))

    @vocab.setter
    def vocab(self, vocab: tuple[str, ...]) -> None:
        self.__dict__["_vocab"] = tuple(vocab)
    # TransformerLens's tokenizer is a Hugging Face one; here the vocabulary is the tokenizer
    # (``to_tokens``, ``to_str_tokens``, ``to_single_token``, ``to_string``), so code that asks
    # ``model.tokenizer is None`` takes its token-id path
    tokenizer = None

    def setup(self):
        super().setup()
        for hook_point in self.hook_dict.values():
            if type(hook_point) is HookPoint:
                hook_point.__class__ = ShapeCheckedHookPoint
        self.cfg.device, self.cfg.dtype = self.W_E.device, self.W_E.dtype  # where the parameters were created
        # run_with_hooks finds a hook by name in mod_dict: an alias names the hook it stands for
        self.hook_aliases = self.tl_hook_aliases()
        self.mod_dict.update({alias: self.hook_dict[name] for alias, name in self.hook_aliases.items()})

    def tl_hook_aliases(self) -> dict[str, str]:
        """``{alias: hook}``: names under which TransformerLens's meaning of a hook is reachable
        where the model's own hook of that name means something else (none by default)."""
        return {}

    def tl_meaning_elsewhere(self) -> dict[str, str]:
        """``{hook: alias}``: the hooks whose meaning differs from TransformerLens's hook of that
        name, each with the ``*_tl`` hook or alias that holds TransformerLens's meaning (the
        norms' ``hook_normalized``; ``attn.hook_attn_scores``; ``attn.hook_pattern`` where the
        mechanism subtracts two views)."""
        differ = {}
        for alias in (*self.hook_dict, *self.hook_aliases):
            own = alias.removesuffix("_tl")
            if own != alias and own in self.hook_dict and self.hook_aliases.get(alias, alias) != own:
                differ[own] = alias
        return differ

    def as_input(self, input):
        """Text (a string, or a list of strings of as many tokens) as its token ids (:meth:`to_tokens`);
        anything else as it is."""
        if isinstance(input, str) or (isinstance(input, list) and input and isinstance(input[0], str)):
            return self.to_tokens(input)
        return input

    def __call__(self, input, *args, **kwargs):
        """The forward, which also takes text (``model("w1r1")``), as TransformerLens's models do."""
        return super().__call__(self.as_input(input), *args, **kwargs)

    def add_hook(self, name, hook, dir="fwd", is_permanent=False, level=None, prepend=False) -> None:
        """``HookedRootModule.add_hook``, refusing a named hook point that never fires
        (:meth:`check_hook`)."""
        if isinstance(name, str):
            self.check_hook(name)
        super().add_hook(name, hook, dir=dir, is_permanent=is_permanent, level=level, prepend=prepend)

    def run_with_hooks(self, *model_args, fwd_hooks=(), bwd_hooks=(), **kwargs):
        """``HookedRootModule.run_with_hooks`` (text inputs too), refusing a hook that is not a
        ``(name or filter, function)`` pair, a name that is no hook point of this model and a named
        hook point that never fires (:meth:`check_hook`)."""
        for argument, hooks in (("fwd_hooks", fwd_hooks), ("bwd_hooks", bwd_hooks)):
            for hook in validate.sequence(argument, hooks):
                self.check_hook_pair(argument, hook)
        if model_args:
            model_args = (self.as_input(model_args[0]), *model_args[1:])
        return super().run_with_hooks(*model_args, fwd_hooks=list(fwd_hooks), bwd_hooks=list(bwd_hooks), **kwargs)

    def check_hook_pair(self, argument: str, hook) -> None:
        """A one-line error naming ``argument`` unless ``hook`` is a pair of a hook name of this
        model (or a filter function of names) and a function."""
        if not (isinstance(hook, (tuple, list)) and len(hook) == 2):
            raise TypeError(f"{argument} must hold (hook name, function) pairs, got {validate.shown(hook)}")
        name, function = hook
        validate.function(f"{argument}: the function of {name!r}", function)
        if not isinstance(name, str):
            validate.function(f"{argument}: a hook name (a string, or a filter function of names)", name)
        elif self.hook_aliases.get(name, name) not in self.hook_dict:
            close = difflib.get_close_matches(name, list(self.hook_dict), n=3)
            raise UnknownHookError(f"{argument}: {name!r} is not a hook of this {architecture(self)}; "
                                   + (f"did you mean {', '.join(close)}?" if close else "model.hook_dict lists them"))
        else:
            self.check_hook(name)

    def check_hook(self, name: str) -> None:
        """A ``ValueError`` if the hook point ``name`` exists but never fires on this model (a hook
        there would never run: TransformerLens raises for ``hook_result`` too), saying what to call
        instead; a :class:`TLMeaningWarning`, once per model and name, if it holds something other
        than TransformerLens's hook of that name. An unknown name is left to ``mod_dict``'s KeyError."""
        target = self.hook_aliases.get(name, name)
        if target not in self.hook_dict:
            return
        silent = why_silent(self, target)
        if silent:
            raise ValueError(f"a hook on {name} would never run: {silent}")
        alias = self.tl_meaning_elsewhere().get(name)
        warned = self.__dict__.setdefault("_warned_tl_meaning", set())
        if alias is not None and name not in warned:
            warned.add(name)
            warnings.warn(f"{name} is not what TransformerLens's hook of that name holds on this "
                          f"{architecture(self)}: {alias} is (docs/reference/hooks.md)", TLMeaningWarning, stacklevel=3)

    def _apply(self, fn, *args, **kwargs):
        # Every move (.to, .cuda, .cpu, .half) goes through here: record where the parameters
        # went, since transformer_lens.patching allocates its results on cfg.device.
        module = super()._apply(fn, *args, **kwargs)
        self.cfg.device, self.cfg.dtype = self.W_E.device, self.W_E.dtype
        return module

    def output_as(self, return_type: str | None, normalized: torch.Tensor, tokens: torch.Tensor,
                  loss_per_token: bool, reads_only: bool):
        """The forward's result from the stream the unembedding reads, by ``return_type`` (see
        the transformer's ``forward``)."""
        if return_type in ("normalized", None):
            return None if return_type is None else normalized
        logits = self.unembed(normalized)
        if return_type == "logits":
            return logits
        loss = self.next_token_loss(logits, tokens, loss_per_token, reads_only)
        return loss if return_type == "loss" else Output(logits, loss)

    def next_token_loss(self, logits: Float[Tensor, "batch pos d_vocab"], tokens, per_token: bool = False,
                        reads_only: bool = False) -> Float[Tensor, "batch pos-1"] | Float[Tensor, ""]:
        """TransformerLens's language-model loss, ``-log p(token t+1 | tokens up to t)``: its mean
        over the ``[batch, pos - 1]`` predictions, or each of them with ``per_token``. With
        ``reads_only``, the loss on the reads alone (each ``r``'s prediction of the bit it reads:
        what the flip-flop papers score, and what ``--loss clean`` trains on): their mean, or per
        token with 0 at the other predictions, as TransformerLens's masked positions. The mean
        over sequences of one token (no prediction) is a ValueError, not TransformerLens's NaN."""
        tokens = as_token_ids(tokens, self.cfg.d_vocab).to(logits.device)
        losses = lm_cross_entropy_loss(upcast(logits), tokens, per_token=True)
        if reads_only:
            reads = read_mask(tokens, self.vocab)[:, :-1]
            if not per_token and not reads.any():
                raise ValueError("reads_only: these tokens have no read followed by its bit, so there is no loss "
                                 "to average")
            losses = losses.masked_fill(~reads, 0.0)
            return losses if per_token else losses.sum() / reads.sum()
        if not per_token and not losses.numel():   # a mean of no predictions would be NaN
            raise ValueError(f"tokens: {tokens.shape[-1]} token(s) per sequence give no next-token prediction to "
                             "average; the loss needs at least 2 (per_token=True gives the empty [batch, 0])")
        return losses if per_token else losses.mean()

    def normalized_at(self, tokens: Int[Tensor, "batch pos"], positions: torch.Tensor
                      ) -> Float[Tensor, "batch query_pos d_model"]:
        """``forward(tokens, "normalized")`` at ``positions [batch, n]``: ``[batch, n, d_model]``
        (the evaluation unembeds the reads from it). Here the full forward, indexed; a model may
        compute less (the transformer's last block runs only at these positions)."""
        check_positions(tokens, positions)
        return at_rows(self(tokens, return_type="normalized"), positions)

    def fired_hooks(self) -> list[str]:
        """The hooks a forward pass fires, in ``hook_dict`` order. A hook of ``hook_dict`` that
        is not among them exists on this model but is never called: softmax's ``hook_pos_bias``
        without REL's or ALiBi's bias, ``attn.hook_result`` until ``set_use_attn_result(True)``.
        Found by recording every hook in one forward of :data:`FIRING_PROBE_TOKENS` tokens (the
        random number generators left as they were), once per model and per ``use_attn_result``."""
        key = bool(self.cfg.use_attn_result)
        known = self.__dict__.setdefault("_fired_hooks", {})
        if key not in known:
            fired = set()
            n_pos = min(FIRING_PROBE_TOKENS, self.cfg.n_ctx)
            tokens = torch.arange(n_pos, device=self.cfg.device)[None] % self.cfg.d_vocab
            device = self.cfg.device
            with torch.no_grad(), torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
                self.run_with_hooks(tokens, return_type=None,
                                    fwd_hooks=[(lambda name: True, lambda act, hook: fired.add(hook.name))])
            known[key] = [name for name in self.hook_dict if name in fired]
        return known[key]

    def has_active_hooks(self) -> bool:
        """Whether any of the model's hook points has a hook attached."""
        return any(hook.has_hooks() for hook in self.hook_dict.values())

    def run_with_cache(self, *args, names_filter=None, incl_bwd: bool = False, **kwargs):
        """``HookedRootModule.run_with_cache``, returning a :class:`GlitchLensCache`.
        ``names_filter`` may name aliases (``hook_pattern_tl``): the hooks they stand for are
        cached. ``incl_bwd`` runs ``backward()`` on the output, which must be one number:
        ``return_type="loss"``."""
        return_type = kwargs.get("return_type", args[1] if len(args) > 1 else "logits")
        if incl_bwd and (return_type != "loss" or kwargs.get("loss_per_token") or kwargs.get("stop_at_layer")):
            raise ValueError("incl_bwd=True calls backward() on the model's output, which must be one number: pass "
                             "return_type='loss' (without loss_per_token or stop_at_layer)")
        if args:
            args = (self.as_input(args[0]), *args[1:])
        out, cache = super().run_with_cache(*args, names_filter=self.unaliased(names_filter), incl_bwd=incl_bwd,
                                            **kwargs)
        cache_dict = cache.cache_dict if isinstance(cache, ActivationCache) else cache
        return out, GlitchLensCache(cache_dict, self, has_batch_dim=not kwargs.get("remove_batch_dim", False),
                                    filtered=names_filter is not None)

    def unaliased(self, names_filter):
        """A ``names_filter`` (a name, a list of names or a predicate) that also takes the hooks
        that its aliases stand for."""
        if isinstance(names_filter, str):
            names_filter = [names_filter]
        if isinstance(names_filter, list):
            return [self.hook_aliases.get(name, name) for name in names_filter]
        if callable(names_filter):
            aliases_of = {}
            for alias, name in self.hook_aliases.items():
                aliases_of.setdefault(name, []).append(alias)
            return lambda name: names_filter(name) or any(names_filter(alias) for alias in aliases_of.get(name, ()))
        return names_filter

    @torch.no_grad()
    def generate(self, input: str | list[str] | torch.Tensor, max_new_tokens: int = 10, stop_at_eos: bool = True,
                 eos_token_id: int | None = None, do_sample: bool = True, top_k: int | None = None,
                 top_p: float | None = None, temperature: float = 1.0, prepend_bos: bool | None = None,
                 return_type: str = "input", verbose: bool = True, seed: int | None = None):
        """TransformerLens's ``generate``: ``input`` (a string, equally long strings, or ids
        ``[batch, pos]``) continued by ``max_new_tokens`` tokens, each drawn from the model's
        next-token distribution (``temperature``, ``top_k``, ``top_p``) or, with
        ``do_sample=False``, its most likely token. ``seed`` draws from a generator of its own
        (the global RNG is left as it was); without it, from the global RNG, as there. The
        vocabulary has no EOS token: with ``eos_token_id`` (and ``stop_at_eos``) a sequence that
        produced that token repeats it, and generation stops when every sequence has.
        ``return_type``: ``"tokens"`` ``[batch, pos + new]``, ``"str"`` (a string per sequence,
        one string for a string input), or ``"input"``, whichever of the two the input was.
        ``verbose`` shows a progress bar on stderr. Each step runs the whole prefix again (no
        key-value cache) with the last block at the last position only."""
        if return_type not in ("input", "str", "tokens"):
            raise ValueError(f"return_type must be 'input', 'str' or 'tokens', got {return_type!r}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        is_text = isinstance(input, (str, list))
        tokens = (self.to_tokens(input, prepend_bos=prepend_bos) if is_text
                  else as_token_ids(input, self.cfg.d_vocab).to(self.cfg.device))
        if not tokens.shape[1]:
            raise ValueError("generate needs a prefix of at least one token to continue")
        if tokens.shape[1] + max_new_tokens > MAX_GENERATED_LEN:
            raise ValueError(f"max_new_tokens={max_new_tokens:,}: with the {tokens.shape[1]}-token prefix that is more "
                             f"than the {MAX_GENERATED_LEN:,} tokens (models.lens.MAX_GENERATED_LEN) generate writes")
        finished = torch.zeros(len(tokens), dtype=torch.bool, device=tokens.device)
        with torch.random.fork_rng(devices=[] if tokens.device.type == "cpu" else [tokens.device],
                                   enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            for _ in tqdm(range(max_new_tokens), desc="generate", disable=not verbose):
                last = torch.full((len(tokens), 1), tokens.shape[1] - 1, device=tokens.device)
                logits = self.unembed(self.normalized_at(tokens, last))[:, -1]
                if do_sample:
                    new = sample_logits(logits, top_k=top_k, top_p=top_p, temperature=temperature)
                else:
                    new = logits.argmax(-1)
                if stop_at_eos and eos_token_id is not None:
                    new = new.masked_fill(finished, eos_token_id)
                    finished |= new == eos_token_id
                tokens = torch.cat([tokens, new[:, None]], dim=1)
                if finished.all():
                    break
        if return_type == "tokens" or (return_type == "input" and not is_text):
            return tokens
        text = self.to_string(tokens)
        return text[0] if isinstance(input, str) else text

    @property
    def b_U(self) -> Float[Tensor, "d_vocab"]:
        """``[d_vocab]`` zeros: the unembedding has no bias, for TransformerLens code that adds one."""
        return self.W_U.new_zeros(self.W_U.shape[1])

    def tokens_to_residual_directions(self, tokens: str | int | Int[Tensor, "*token"]
                                      ) -> Float[Tensor, "*token d_model"]:
        """The residual direction of each token, ``[*tokens.shape, d_model]`` (``[d_model]`` for
        one token): a column of ``folded_W_U``, whose dot product with the stream divided by the
        final norm's scale (what ``cache.apply_ln_to_stack`` gives) is the token's logit."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        return self.folded_W_U.T[torch.as_tensor(tokens, device=self.W_U.device).long()]

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  move_to_device: bool = True) -> torch.Tensor:
        """``[batch, pos]`` token ids of a string or a list of strings of as many tokens, read
        through the vocabulary of the model's task (:func:`models.tokens.tokenize`: the longest
        token at each position, spaces between tokens skipped): ``to_tokens("w1r1")`` is
        ``[[0, 4, 1, 4]]``. There is no BOS token and no padding token."""
        if prepend_bos:
            raise ValueError("the vocabulary has no BOS token: pass prepend_bos=False")
        texts = [input] if isinstance(input, str) else list(input)
        rows = [tokenize(text, self.vocab) for text in texts]
        lengths = sorted({len(row) for row in rows})
        if len(lengths) > 1:
            raise ValueError(f"the strings have {lengths} tokens: the vocabulary has no padding token")
        tokens = torch.tensor(rows, dtype=torch.long).reshape(len(texts), lengths[0] if lengths else 0)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def to_str_tokens(self, input: str | torch.Tensor | np.ndarray | list) -> list[str] | list[list[str]]:
        """The token strings of one sequence (a string, or ids ``[pos]`` or ``[1, pos]``), or of
        each item of a list."""
        if isinstance(input, list):
            return [self.to_str_tokens(item) for item in input]
        if isinstance(input, str):
            return [self.vocab[token] for token in tokenize(input, self.vocab)]
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
            return [self.to_string(row) for row in tokens]
        return detokenize(as_token_ids(tokens.reshape(1, -1), len(self.vocab))[0].tolist(), self.vocab)

"""Capturing attention maps: a model run with hooks on ``blocks.{layer}.attn.hook_{name}``.

:func:`capture_maps` is the one way the reports (``glitchlens diagnose``, ``figures``,
``bench tiles``) run a model for its maps. Either it collects every layer's maps, or, given
``consume``, it streams them: each layer's maps go to ``consume`` as soon as the layer has
produced them all and are then dropped, so that at most one layer's ``[batch, head, T, T]``
maps are alive (every layer of a ``mini`` model at T = 2048 would take gigabytes). To read
maps out of a cache one already has, :func:`~interp.metrics.cache_maps`.

Also here, what the reports that capture maps share: the context lengths they measure
(``DEFAULT_LENGTHS``) and the window of a sequence a heatmap shows (:func:`heatmap_window`).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np
import torch
from jaxtyping import Float, Integer
from torch import Tensor, nn

from interp.metrics.attention import Map, MissingHookError, attention_hook
from models import validate
from models.tokens import as_token_ids

DEFAULT_LENGTHS = (128, 256, 512, 1024, 2048)


@torch.no_grad()
def capture_maps(model: nn.Module, tokens: Integer[np.ndarray, "batch pos"], names: Sequence[str],
                 consume: Callable[[int, dict[str, Map]], None] | None = None,
                 ) -> tuple[Float[Tensor, "batch pos d_vocab"], dict[str, dict[int, Map]]]:
    """Run ``model`` on ``tokens`` ``[batch, T]`` with hooks on every layer's
    ``blocks.{layer}.attn.hook_{name}`` for each name in ``names`` (``pattern``, ``attn_scores``,
    ``view_1``, ``mask``, ...). Returns the logits ``[batch, T, d_vocab]`` and ``{name: {layer:
    map}}`` (maps ``[batch, head, query_pos, key_pos]``), both on the CPU.

    With ``consume``, the maps stream instead: ``consume(layer, {name: map})`` is called, on the
    model's device, as soon as a layer has produced all its maps, and the maps returned are
    empty. A hook that a mechanism has but never calls cannot hold a layer back: what is left is
    handed over after the forward pass, without it (collected, it has no layers). Raises
    :class:`MissingHookError` for a name the model has no hook of at any layer.
    """
    model = validate.model("model", model)
    tokens = as_token_ids(tokens, model.cfg.d_vocab)
    names = validate.strings("names", names)
    if not names:
        raise ValueError("names is empty: name the maps to capture, e.g. ['pattern']")
    if consume is not None:
        validate.function("consume", consume)
    hooks = {}       # {name: {layer: hook point}}
    for name in names:
        pattern = attention_hook(name)
        hooks[name] = {int(m.group(1)): point for key, point in model.hook_dict.items()
                       if (m := pattern.fullmatch(key))}
        if not hooks[name]:
            raise MissingHookError(f"the {model.cfg.model} model has no blocks.*.attn.hook_{name}")
    # a hook point this model has but never calls takes no hook (run_with_hooks refuses one)
    fired = set(model.fired_hooks()) if hasattr(model, "fired_hooks") else None
    hooks = {name: {layer: point for layer, point in at.items() if fired is None or point.name in fired}
             for name, at in hooks.items()}
    collected: dict[str, dict[int, Map]] = {name: {} for name in names}

    def collect(layer, maps):
        for name, m in maps.items():
            collected[name][layer] = m.cpu()

    consume = consume or collect
    expected = Counter(layer for at in hooks.values() for layer in at)
    pending: dict[int, dict[str, Map]] = defaultdict(dict)

    def keep(x, hook, layer, name):
        pending[layer][name] = x.detach()
        if len(pending[layer]) == expected[layer]:
            consume(layer, pending.pop(layer))

    device = next(model.parameters()).device
    fwd_hooks = [(point.name, functools.partial(keep, layer=layer, name=name))
                 for name, at in hooks.items() for layer, point in at.items()]
    logits = model.run_with_hooks(tokens.to(device), fwd_hooks=fwd_hooks)
    for layer in sorted(pending):
        consume(layer, pending.pop(layer))
    return logits.cpu(), {name: dict(sorted(at.items())) for name, at in collected.items()}


def heatmap_window(T: int, wrong: list[int], size: int) -> tuple[int, int]:
    """``size`` tokens (even) of a length-``T`` sequence ending just after its first wrong read
    (or position) in ``wrong``, or its last tokens when there is none: a 512 x 512 map is an
    unreadable blur. ``T`` >= 1, ``size`` >= 2 and ``wrong`` inside ``0..T - 1``, or a ``ValueError``
    naming the argument."""
    T, size = validate.integer("T", T, 1), validate.integer("size", size, 2)
    wrong = validate.integers("wrong", wrong, empty=True)
    outside = [p for p in wrong if not 0 <= p < T]
    if outside:
        raise ValueError(f"wrong: positions {outside[:3]} outside the sequence's 0..{T - 1}")
    size = min(T, size - size % 2)
    stop = min(T, max(size, min(wrong) + 2)) if wrong else T
    return stop - size, stop

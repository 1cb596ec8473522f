"""Attribution patching: the gradient-times-difference estimate of activation patching, for every
hook of a model at once (Nanda, "Attribution Patching", 2023; Syed et al., "Attribution Patching
Outperforms Automated Circuit Discovery", 2023), and how well it agrees with activation patching
(conventions: :mod:`interp.circuits`).

Patching a clean activation ``a_clean`` into the corrupt run changes the metric by about its
first-order term, ``(a_clean - a_corrupt) . d metric / d a`` at the corrupt run. One forward pass
of the clean run gives every ``a_clean``; one forward and one backward pass of the corrupt run
give every ``a_corrupt`` and every gradient: three passes for all hooks and heads, where
:func:`~interp.circuits.activation_patching` runs the model once per hook and head.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp.circuits.metrics import Metric, _check_frame
from interp.circuits.patching import _check_hooks, hook_axes, patchable_hooks, patching_summary, prepare_pairs
from interp.tasks import Task

# What attribution patching estimates by default: the streams, the heads' outputs and maps, and
# every hook of the mechanism's own (D-bar, forget gates, CoPE's gates, both differential views...).
ATTRIBUTION_KINDS = ("resid_pre", "z", "pattern", "mechanism")
PATCHING_COLUMNS = ["hook", "layer", "head", "offset", "position", "from_read", "from_write", "pair", "read", "clean",
                    "corrupt", "patched", "restored"]


def attribution_patching(model, clean_tokens, corrupt_tokens, hook_names: Sequence[str] | None = None, reads=None,
                         *, task: Task | str | None = None, metric: Metric | None = None) -> pd.DataFrame:
    """The first-order estimate of :func:`~interp.circuits.activation_patching` with every position
    patched at once (``positions=None``), for each hook and head of ``hook_names`` (default: the
    kinds ``ATTRIBUTION_KINDS`` of :func:`~interp.circuits.patchable_hooks`) in three passes.

    For hook ``h`` and head ``g`` the estimated change of the metric is
    ``sum((a_clean - a_corrupt) * d metric / d a)`` over the head's slice of the activation at
    every position, the gradient taken on the corrupt run. ``reads``, ``task``, ``metric``: as for
    activation patching (the metric must be differentiable; the default, the task's margin, is).

    Returns activation patching's columns (``offset``, ``position``, ``from_read`` and
    ``from_write`` are ``<NA>``: every position at once), with ``patched`` the estimate
    ``corrupt + estimate`` and ``restored`` from it, plus ``estimate``; so
    :func:`~interp.circuits.patching_summary` and :func:`compare_attribution` read both frames alike.
    """
    runs = prepare_pairs(model, clean_tokens, corrupt_tokens, reads, task, metric)
    names = _check_hooks(model, patchable_hooks(model, ATTRIBUTION_KINDS) if hook_names is None else hook_names)
    with torch.no_grad():
        clean_logits, clean_cache = model.run_with_cache(runs.clean, names_filter=list(names))
    corrupt_acts, deltas = {}, {}

    def open_to_gradient(act, hook):
        """Add a zero that requires a gradient: d metric / d zero is d metric / d act, whether or not
        the model's own parameters require one, and the rest of the graph is untouched."""
        corrupt_acts[hook.name] = act.detach()
        deltas[hook.name] = torch.zeros_like(act, requires_grad=True)
        return act + deltas[hook.name]

    with torch.enable_grad():
        logits = model.run_with_hooks(runs.corrupt, fwd_hooks=[(name, open_to_gradient) for name in names])
        corrupt_value = runs.measure(logits, runs.corrupt)
        gradients = torch.autograd.grad(corrupt_value.sum(), [deltas[name] for name in names], allow_unused=True)
    base = pd.DataFrame({"pair": np.arange(len(runs.reads)), "read": runs.reads.numpy(),
                         "clean": runs.measure(clean_logits, runs.clean).cpu().numpy(),
                         "corrupt": corrupt_value.detach().cpu().numpy()})
    rows = []
    for name, gradient in zip(names, gradients):
        difference = (clean_cache[name] - corrupt_acts[name]).double()
        gradient = torch.zeros_like(difference) if gradient is None else gradient.double()
        head_axis, _ = hook_axes(name, difference.shape, runs.clean.shape[1], model.cfg.n_heads)
        product = difference * gradient
        keep = [0] if head_axis is None else [0, head_axis]
        summed = [d for d in range(product.ndim) if d not in keep]
        per_head = (product.sum(dim=summed) if summed else product).cpu().numpy()    # [pair(, head)]; sum(dim=[]) sums all
        layer = int(name.split(".")[1]) if name.startswith("blocks.") else -1
        for head in range(per_head.shape[1]) if head_axis is not None else [None]:
            estimate = per_head[:, head] if head is not None else per_head
            rows.append(base.assign(hook=name, layer=layer, head=-1 if head is None else head, estimate=estimate,
                                    patched=base.corrupt + estimate))
    frame = pd.concat(rows, ignore_index=True)
    for column in ("offset", "position", "from_read", "from_write"):
        frame[column] = pd.array([pd.NA] * len(frame), dtype="Int64")
    frame["restored"] = (frame.patched - frame.corrupt) / (frame.clean - frame.corrupt)
    return frame[[*PATCHING_COLUMNS, "estimate"]]


def compare_attribution(estimated: pd.DataFrame, patched: pd.DataFrame) -> pd.DataFrame:
    """One row per component (hook, layer, head) that both frames hold: ``component``, ``hook``,
    ``layer``, ``head``, ``estimated`` (the share of the clean-corrupt gap that
    :func:`attribution_patching` predicts patching restores, over all pairs as in
    :func:`~interp.circuits.patching_summary`), ``patched`` (what
    :func:`~interp.circuits.activation_patching` with ``positions=None`` restored) and ``miss``
    (``estimated - patched``)."""
    for argument, frame in (("estimated", estimated), ("patched", patched)):
        _check_frame(argument, frame, ("hook", "layer", "head", "offset", "pair", "clean", "corrupt", "patched"),
                    "patching")
    if patched.offset.notna().any():
        raise ValueError("patched: compare activation patching of every position at once (positions=None), which "
                         "is what attribution patching estimates")
    keys = ["hook", "layer", "head"]
    both = patching_summary(estimated, by=keys).merge(patching_summary(patched, by=keys), on=[*keys, "component"],
                                                      suffixes=("_estimated", "_patched"))
    if both.empty:
        raise ValueError("estimated and patched share no component (hook, layer, head)")
    table = both.rename(columns={"restored_estimated": "estimated", "restored_patched": "patched"})
    table["miss"] = table.estimated - table.patched
    return table[["component", *keys, "estimated", "patched", "miss"]]


def attribution_agreement(table: pd.DataFrame) -> dict:
    """How far attribution patching can stand in for activation patching, over the components of
    a :func:`compare_attribution` table: ``components``, ``rank_correlation`` (Spearman's, of
    ``estimated`` and ``patched``; NaN when either is constant), ``largest_miss`` (the largest
    ``|miss|``), ``missed`` (its component), ``missed_estimated`` and ``missed_patched``. A
    component whose pairs' clean and corrupt runs measure the same (no gap to restore) is left out."""
    _check_frame("table", table, ("component", "estimated", "patched", "miss"), "compare_attribution")
    table = table.dropna(subset=["estimated", "patched"])
    if table.empty:
        raise ValueError("table has no component to compare: the pairs' clean and corrupt runs measure the same")
    worst = table.loc[table.miss.abs().idxmax()]
    return {"components": len(table),
            "rank_correlation": float(table.estimated.rank().corr(table.patched.rank())),
            "largest_miss": float(abs(worst.miss)), "missed": str(worst.component),
            "missed_estimated": float(worst.estimated), "missed_patched": float(worst.patched)}


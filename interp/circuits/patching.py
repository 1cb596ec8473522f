"""Activation patching and path patching between the clean and corrupt runs of a pair, measured
by a metric at the pair's scored position (conventions: :mod:`interp.circuits`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from interp.circuits.metrics import (
    Metric, Scored, _check_columns, _check_frame, _targets_at, check_metric, check_model, measure, resolve_task,
    token_ids_of,
)
from interp.circuits.reads import reads_up_to
from interp.tasks import Task
from models.attention.base import COMMON_HOOKS, ROTATION_HOOKS, Attention
from models import validate
from models.lens import why_silent

# --- activation patching ------------------------------------------------------------------


def mechanism_hooks(model) -> list[str]:
    """The attention hooks a mechanism fires besides the common ones (``COMMON_HOOKS``), among
    the hooks a forward pass of this model fires (``model.fired_hooks()``, so that a hook the
    class declares but this configuration never calls is left out): TRA's
    ``hook_thresholded``, ``hook_mask``, ``hook_dbar``, ``hook_log_decay``, ``hook_forget``;
    FoT's ``hook_forget``, ``hook_decay_bias``; the views, scores and lambda of Diff and TDA;
    CoPE's gates and positions; REL's and ALiBi's bias (not softmax's without a bias)."""
    check_model(model)
    validate.model("model", model)
    common = {f"attn.{name}" for name in (*COMMON_HOOKS, *ROTATION_HOOKS)}
    return [name for name in model.fired_hooks()
            if re.fullmatch(r"blocks\.\d+\.attn\.hook_\w+", name) and name.split(".", 2)[2] not in common]


# The kinds of hook patchable_hooks names.
HOOK_KINDS = ("resid_pre", "resid_post", "attn_out", "mlp_out", "z", "pattern", "mechanism")


def patchable_hooks(model, kinds: Iterable[str] = ("resid_pre", "z", "mechanism")) -> list[str]:
    """Hook names to patch, by kind, in the model's order: ``resid_pre`` (each block's input,
    plus the last block's ``hook_resid_post``), ``resid_post``, ``attn_out``, ``mlp_out``, ``z``
    (the heads' outputs before ``W_O``), ``pattern``, and ``mechanism`` (:func:`mechanism_hooks`);
    only hooks that a forward pass of this model fires (``model.fired_hooks()``)."""
    check_model(model)
    if not isinstance(kinds, (list, tuple)) or not all(isinstance(kind, str) for kind in kinds):
        raise TypeError(f"kinds must be a list of hook kinds, e.g. ['resid_pre', 'z'], got a {type(kinds).__name__}")
    unknown = [kind for kind in kinds if kind not in HOOK_KINDS]
    if unknown:
        raise ValueError(f"kinds: {', '.join(map(repr, unknown))} not among {', '.join(HOOK_KINDS)}")
    validate.model("model", model)
    chosen = []
    for kind in kinds:
        if kind == "mechanism":
            chosen += mechanism_hooks(model)
            continue
        suffix = {"z": "attn.hook_z", "pattern": "attn.hook_pattern"}.get(kind, f"hook_{kind}")
        found = [name for name in model.fired_hooks() if re.fullmatch(rf"blocks\.\d+\.{re.escape(suffix)}", name)]
        if not found:
            raise ValueError(f"the {model.cfg.model} model has no {kind} hooks (blocks.*.{suffix})")
        chosen += found
        if kind == "resid_pre":
            chosen.append(f"blocks.{len(found) - 1}.hook_resid_post")
    return list(dict.fromkeys(chosen))


def hook_axes(name: str, shape: Sequence[int], n_pos: int, n_heads: int) -> tuple[int | None, int | None]:
    """``(head axis, position axis)`` of a hooked activation, None where it has none, from its
    shape: ``[batch, head, query_pos, key_pos]`` maps (the position is the query's), ``[batch,
    pos, head, d]`` per-head vectors, ``[batch, head, pos]`` gates, ``[batch, head]``
    scalars, ``[batch, pos, d]`` streams. A shape two of these fit is refused."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a hook name, got a {type(name).__name__}")
    if not isinstance(shape, (tuple, list, torch.Size)) or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in (*shape, n_pos, n_heads)):
        raise TypeError(f"{name}: shape must be a tuple of ints, n_pos and n_heads ints")
    layouts = [
        ((1, 2), len(shape) == 4 and tuple(shape[1:]) == (n_heads, n_pos, n_pos)),
        ((2, 1), len(shape) == 4 and tuple(shape[1:3]) == (n_pos, n_heads)),
        ((1, 2), len(shape) == 3 and tuple(shape[1:]) == (n_heads, n_pos)),
        ((None, 1), len(shape) == 3 and shape[1] == n_pos),
        ((1, None), len(shape) == 2 and shape[1] == n_heads),
    ]
    fits = [axes for axes, fit in layouts if fit]
    if len(fits) != 1:
        raise ValueError(f"{name}: cannot tell the head and position axes of shape {tuple(shape)} "
                         f"({n_pos} positions, {n_heads} heads)")
    return fits[0]


@dataclass(frozen=True)
class PairRuns:
    """A batch of pairs made ready to run: both runs' tokens cut after the latest scored position
    and on the model's device, each pair's scored position, the clean run's right answer there, the
    task and the metric."""

    clean: torch.Tensor
    corrupt: torch.Tensor
    reads: torch.Tensor
    target: torch.Tensor
    task: Task
    metric: Metric

    def measure(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The metric of a run of ``tokens`` (either run, or the corrupt one patched)."""
        scored = Scored(tokens, self.reads, self.target, self.task, self.clean, self.corrupt)
        return measure(self.metric, logits, scored)


def prepare_pairs(model, clean_tokens, corrupt_tokens, reads, task: Task | str | None,
                  metric: Metric | None) -> PairRuns:
    """Check a batch of pairs (same shape, one scored position per pair that the task scores in
    both runs) and make it ready to run: :class:`PairRuns`."""
    task = resolve_task(model, task)
    metric = check_metric(task, metric)
    clean = token_ids_of("clean_tokens", clean_tokens, model.cfg.d_vocab)
    corrupt = token_ids_of("corrupt_tokens", corrupt_tokens, model.cfg.d_vocab)
    if clean.shape != corrupt.shape:
        raise ValueError(f"clean_tokens {tuple(clean.shape)} and corrupt_tokens {tuple(corrupt.shape)} differ in "
                         "shape: a pair is two runs of the same length")
    if not clean.numel():
        raise ValueError("no pairs to patch")
    if reads is None:
        reads = torch.full((len(clean),), clean.shape[1] - 1)
    elif isinstance(reads, (torch.Tensor, np.ndarray, list, tuple)):
        try:
            reads = torch.as_tensor(reads)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"reads must be integer positions, one per pair ({err})") from None
    else:
        raise TypeError(f"reads must be a tensor, array or list of positions, got {type(reads).__name__}")
    if reads.is_floating_point() or reads.is_complex() or reads.dtype == torch.bool:
        raise TypeError(f"reads must be integer positions, got {reads.dtype}")
    reads = reads.long().cpu()
    if reads.shape != (len(clean),):
        raise ValueError(f"reads must hold one position per pair, [{len(clean)}], got {tuple(reads.shape)}")
    if ((reads < 0) | (reads >= clean.shape[1])).any():
        raise ValueError(f"reads: positions {reads.tolist()} must lie in [0, {clean.shape[1]})")
    target = _targets_at(task, clean, reads, "clean")
    _targets_at(task, corrupt, reads, "corrupt")      # the corrupt run must be scored there too
    device = model.cfg.device
    return PairRuns(reads_up_to(model, clean, reads).to(device), reads_up_to(model, corrupt, reads).to(device),
                    reads, target, task, metric)


def _check_hooks(model, hook_names: Sequence[str]) -> list[str]:
    if not isinstance(hook_names, (list, tuple)) or not all(isinstance(name, str) for name in hook_names):
        raise TypeError(f"hook_names must be a list of hook names, e.g. patchable_hooks(model), got "
                        f"{type(hook_names).__name__}")
    names = list(hook_names)
    if not names:
        raise ValueError("no hooks to patch: name some, e.g. interp.circuits.patchable_hooks(model)")
    for name in names:
        if name not in model.hook_dict:
            close = difflib.get_close_matches(name, list(model.hook_dict), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "model.hook_dict lists them"
            raise ValueError(f"{name!r} is not a hook of this {model.cfg.model} model; {hint}")
        silent = why_silent(model, name)
        if silent:
            raise ValueError(f"{silent}: nothing to patch (interp.circuits.patchable_hooks(model) lists the hooks "
                             "that fire)")
    return names


def _along(shape: Sequence[int], axis: int) -> torch.Tensor:
    """``arange(shape[axis])`` shaped to broadcast against a tensor of ``shape``."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return torch.arange(shape[axis]).view(view)


def _selection(shape, head_axis, pos_axis, head: int | None, positions: torch.Tensor | None) -> torch.Tensor:
    """Bool mask of ``shape``: the entries of ``head`` (all heads if None) at each row's
    position in ``positions`` ``[batch]`` (all positions if None)."""
    mask = torch.ones(tuple(shape), dtype=torch.bool)
    if head is not None:
        mask &= _along(shape, head_axis) == head
    if positions is not None:
        mask &= _along(shape, pos_axis) == positions.view([-1] + [1] * (len(shape) - 1))
    return mask


@torch.no_grad()
def activation_patching(model, clean_tokens, corrupt_tokens, hook_names: Sequence[str], reads=None,
                        positions: Iterable[int] | None = None, anchor: str = "read", *,
                        task: Task | str | None = None, metric: Metric | None = None) -> pd.DataFrame:
    """Patch one activation at a time from the clean run into the corrupt run and measure the
    metric at each pair's scored position.

    ``clean_tokens``, ``corrupt_tokens``: ``[pair, pos]``; ``reads``: ``[pair]`` the scored
    position compared in each pair (flip-flop: an ``r``; default: the last position), which the
    task (``task``, default the model's: :func:`~interp.circuits.metrics.resolve_task`) must score
    in both runs. ``metric``: a callable ``(logits, scored) -> [pair]``
    (:mod:`interp.circuits.metrics`), default the task's margin in the direction of the clean
    run's right answer. ``hook_names``: full hook names (:func:`patchable_hooks`). A hook with a
    head axis (``hook_z``, maps, gates) is patched one head at a time, others whole.
    ``positions``: None patches every position at once; otherwise offsets from each pair's scored
    position (``anchor="read"``) or from its evidence (``anchor="write"``: the position the answer
    is read from, ``Task.evidence``; flip-flop's last write), each patched alone (for a map, the
    query's row). A position outside ``[0, read]`` is skipped for that pair (a later token cannot
    reach the read); a hook without a position axis (TDA's lambda) is patched whole.

    Returns one row per (hook, head, position, pair): ``hook``, ``layer`` (-1 outside the
    blocks), ``head`` (-1: the hook has no head axis), ``offset`` (from the anchor),
    ``position``, ``from_read``, ``from_write`` (of the patched position, from the evidence;
    these four are nullable integers, ``<NA>`` where every position was patched at once or the
    pair has no evidence position), ``pair``, ``read``, ``clean``, ``corrupt``, ``patched`` (the
    metric of each run) and ``restored``.
    """
    if not isinstance(anchor, str) or anchor not in ("read", "write"):
        shown = repr(anchor) if isinstance(anchor, str) else f"a {type(anchor).__name__}"
        raise ValueError(f"anchor must be 'read' or 'write', got {shown}")
    runs = prepare_pairs(model, clean_tokens, corrupt_tokens, reads, task, metric)
    clean, corrupt, reads = runs.clean, runs.corrupt, runs.reads
    names = _check_hooks(model, hook_names)
    offsets = None if positions is None else _check_offsets(positions)
    evidence = _evidence(runs, required=anchor == "write")
    clean_logits, clean_cache = model.run_with_cache(clean, names_filter=list(names))
    base = pd.DataFrame({"pair": np.arange(len(reads)), "read": reads.numpy(),
                         "clean": runs.measure(clean_logits, clean).cpu().numpy(),
                         "corrupt": runs.measure(model(corrupt), corrupt).cpu().numpy()})
    origin = reads if anchor == "read" else evidence
    anchored = [(None, None)] if offsets is None else [(o, origin + o) for o in offsets]
    rows = []
    for name in names:
        source = clean_cache[name]
        head_axis, pos_axis = hook_axes(name, source.shape, clean.shape[1], model.cfg.n_heads)
        layer = int(name.split(".")[1]) if name.startswith("blocks.") else -1
        for head in range(source.shape[head_axis]) if head_axis is not None else [None]:
            for offset, at in anchored if pos_axis is not None else [(None, None)]:
                inside = (torch.ones(len(reads), dtype=torch.bool) if at is None
                          else (at >= 0) & (at <= reads) & (origin >= 0))
                if not inside.any():
                    continue
                mask = _selection(source.shape, head_axis, pos_axis, head, None if at is None else at.where(inside, -1))
                mask = mask.to(source.device)
                logits = model.run_with_hooks(
                    corrupt, fwd_hooks=[(name, lambda act, hook: torch.where(mask, source, act))])
                rows.append(base.assign(
                    hook=name, layer=layer, head=-1 if head is None else head, offset=offset,
                    position=None if at is None else at.numpy(),
                    patched=runs.measure(logits, corrupt).cpu().numpy())[inside.numpy()])
    if not rows:
        raise ValueError(f"positions: none of the offsets {offsets} lands in [0, read] of any pair")
    frame = pd.concat(rows, ignore_index=True)
    frame = frame.astype({"offset": "Int64", "position": "Int64"})
    frame["from_read"] = frame.position - frame.read
    known = pd.Series(evidence.numpy(), dtype="Int64").where(lambda e: e >= 0)
    frame["from_write"] = frame.position - known.to_numpy()[frame.pair.to_numpy()]
    frame["restored"] = (frame.patched - frame.corrupt) / (frame.clean - frame.corrupt)
    return frame[["hook", "layer", "head", "offset", "position", "from_read", "from_write", "pair", "read", "clean",
                  "corrupt", "patched", "restored"]]


def _check_offsets(positions: Iterable[int]) -> list[int]:
    if isinstance(positions, (str, bytes)) or not isinstance(positions, Iterable):
        raise TypeError(f"positions must be a list of int offsets or None, got {type(positions).__name__}")
    offsets = list(positions)
    if not offsets or any(isinstance(o, bool) or not isinstance(o, (int, np.integer)) for o in offsets):
        raise TypeError(f"positions must be a non-empty list of int offsets, got {offsets!r}")
    return [int(o) for o in offsets]


def _evidence(runs: PairRuns, required: bool) -> torch.Tensor:
    """Each pair's evidence position in its clean run (``Task.evidence``; -1: none)."""
    found = runs.task.evidence(runs.clean.cpu().numpy())
    if found is None:
        if required:
            raise ValueError(f"anchor='write': the {runs.task.name!r} task declares no evidence position "
                             "(Task.evidence); anchor at the read instead")
        return torch.full((len(runs.reads),), -1)
    return torch.from_numpy(np.asarray(found)[np.arange(len(runs.reads)), runs.reads.numpy()].astype(np.int64))


def patching_summary(frame: pd.DataFrame, by: Sequence[str] = ("hook", "layer", "head", "offset")) -> pd.DataFrame:
    """Over pairs: ``restored`` = sum(patched - corrupt) / sum(clean - corrupt) per group of
    ``by``, with ``pairs`` (how many) and ``component`` (a label such as ``L1H0 z`` or
    ``L0 resid_pre``), in the frame's order. An ``offset`` of ``<NA>`` (every position at
    once) is a group of its own."""
    keys = _check_columns("by", by)
    _check_frame("frame", frame, [*keys, "pair", "clean", "corrupt", "patched"], "activation_patching")
    grouped = frame.assign(gain=frame.patched - frame.corrupt, gap=frame.clean - frame.corrupt).groupby(
        keys, sort=False, dropna=False)
    table = grouped.agg(pairs=("pair", "size"), gain=("gain", "sum"), gap=("gap", "sum")).reset_index()
    table["restored"] = table.gain / table.gap
    if {"hook", "layer", "head"} <= set(keys):
        labels = [component_label(*key) for key in zip(table["hook"], table["layer"], table["head"])]
        table.insert(0, "component", labels)
    return table.drop(columns=["gain", "gap"])


def component_label(hook: str, layer: int, head: int) -> str:
    """``blocks.1.attn.hook_z``, head 0 -> ``L1H0 z``; ``blocks.0.hook_resid_pre`` -> ``L0 resid_pre``."""
    if not isinstance(hook, str):
        raise TypeError(f"hook must be a hook name, got a {type(hook).__name__}")
    for argument, value in (("layer", layer), ("head", head)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{argument} must be an int (-1: none), got a {type(value).__name__}")
    short = hook.rsplit("hook_", 1)[-1]
    where = f"L{layer}H{head}" if head >= 0 else f"L{layer}" if layer >= 0 else ""
    return f"{where} {short}".strip()


# --- path patching ------------------------------------------------------------------------


def receiver_inputs(model, layer: int) -> list[str]:
    """What a head of block ``layer`` computes from the block input before its attention core,
    by hook suffix: ``q``, ``k``, ``v``, and where the mechanism has them ``forget`` (TRA,
    FoT), ``q2``, ``k2`` (TDA's second view) and REL's and ALiBi's ``pos_bias``; only hooks
    that fire on this model (``model.fired_hooks()``)."""
    check_model(model)
    validate.model("model", model)
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
        raise TypeError(f"layer must be an int, got {type(layer).__name__}")
    if not 0 <= layer < model.cfg.n_layers:
        raise ValueError(f"layer {layer} is not a block of this {model.cfg.n_layers}-layer model")
    attn = f"blocks.{layer}.attn."
    # the outputs of the core are not its inputs; the rotated q and k are q's and k's
    own = Attention.OUTER_HOOKS - {"hook_z", "hook_result", *ROTATION_HOOKS}
    return [name.removeprefix(attn + "hook_") for name in model.fired_hooks()
            if name.startswith(attn) and name.removeprefix(attn) in own]


@torch.no_grad()
def path_patching(model, clean_tokens, corrupt_tokens, senders: Sequence[tuple[int, int]] | None = None,
                  receivers: Sequence[tuple[int, int]] | None = None,
                  inputs: Sequence[str | tuple[str, ...]] = ("q", "k", "v"), through_mlps: bool = True,
                  reads=None, *, task: Task | str | None = None, metric: Metric | None = None) -> pd.DataFrame:
    """The effect of a sender head on the read through chosen inputs of one receiver head.

    For sender head h of layer s and receiver head g of a later layer r, in two runs on the
    corrupt tokens (Wang et al. 2022, "Interpretability in the Wild", Sec. 3.1):

    1. head h's output (``hook_z``) is the clean run's; every other head of layers s..r-1 is
       frozen at its corrupt output; the MLPs of those layers are recomputed
       (``through_mlps=True``) or frozen too (``False``: only the direct path from h to r).
       Head g's inputs (``inputs``: ``q``, ``k``, ``v``, and ``forget``, ``q2``, ``k2`` where
       the mechanism has them, see :func:`receiver_inputs`) are recorded.
    2. The corrupt run again, with only those recorded inputs of head g put in. Everything
       after them is recomputed, so the receiver's changed output reaches the read by every
       later path, while the sender reaches the read only through g's chosen inputs.

    So ``restored`` (as in :func:`activation_patching`, with its ``reads``, ``task`` and
    ``metric``) is the share of the clean-corrupt metric difference that travels sender -> [MLPs ->] receiver's inputs -> read. With
    ``through_mlps=False`` step 1 gives g the input ``ln1(resid_pre_r(corrupt) + (z_clean -
    z_corrupt)[h] @ W_O[s, h])``. An item of ``inputs`` that is a tuple (``("k", "v")``)
    patches those inputs together.

    ``senders``, ``receivers``: ``(layer, head)`` lists, default every head; only pairs with the
    sender in an earlier layer are run. Returns one row per (sender, receiver, input, pair):
    ``sender``, ``receiver`` (``L{l}H{h}``), ``sender_layer``, ``sender_head``, ``receiver_layer``,
    ``receiver_head``, ``input`` (``"k+v"`` for a tuple), ``pair``, ``read``, ``clean``,
    ``corrupt``, ``patched``, ``restored``.
    """
    resolve_task(model, task)
    if not hasattr(model, "blocks"):
        raise ValueError(f"the {model.cfg.model} model has no heads to patch a path between")
    if not isinstance(through_mlps, bool):
        raise TypeError(f"through_mlps must be True or False, got {validate.shown(through_mlps)}")
    runs = prepare_pairs(model, clean_tokens, corrupt_tokens, reads, task, metric)
    clean, corrupt, reads = runs.clean, runs.corrupt, runs.reads
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    every = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    senders, receivers = list(senders or every), list(receivers or every)
    for argument, heads in (("senders", senders), ("receivers", receivers)):
        for item in heads:
            if not (isinstance(item, (tuple, list)) and len(item) == 2
                    and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item)):
                raise TypeError(f"{argument} must be (layer, head) pairs of ints, got {item!r}")
            if not (0 <= item[0] < n_layers and 0 <= item[1] < n_heads):
                raise ValueError(f"{argument}: (layer {item[0]}, head {item[1]}) is not a head of this "
                                 f"{n_layers} x {n_heads} model")
    if isinstance(inputs, str) or not all(isinstance(item, (str, tuple, list)) for item in inputs):
        raise TypeError(f"inputs must be a list of input names or tuples of them, e.g. ['q', ('k', 'v')], "
                        f"got {inputs!r}")
    groups = [(item,) if isinstance(item, str) else tuple(item) for item in inputs]
    known = set(receiver_inputs(model, 0))
    for group in groups:
        if not group or set(group) - known:
            raise ValueError(f"receiver input {'+'.join(group)!r}: this {model.cfg.model} model's heads read "
                             f"{', '.join(sorted(known))}")
    clean_logits, clean_cache = model.run_with_cache(clean, names_filter=lambda name: name.endswith("attn.hook_z"))
    corrupt_logits, corrupt_cache = model.run_with_cache(
        corrupt, names_filter=lambda name: name.endswith(("attn.hook_z", "hook_mlp_out")))
    clean_ld, corrupt_ld = runs.measure(clean_logits, clean), runs.measure(corrupt_logits, corrupt)
    used = sorted({name for group in groups for name in group})

    def put(value: torch.Tensor, head: int, head_axis: int):
        """A hook that replaces one head's slice of its activation by ``value``'s."""
        def replace(act, hook):
            index = [slice(None)] * act.ndim
            index[head_axis] = head
            act = act.clone()
            act[tuple(index)] = value[tuple(index)]
            return act
        return replace

    rows = []
    for s_layer, s_head in senders:
        for r_layer, r_head in receivers:
            if r_layer <= s_layer:
                continue
            z = f"blocks.{s_layer}.attn.hook_z"
            step_1 = [(z, put(clean_cache[z], s_head, 2))]                 # hook_z: [batch, pos, head, d_head]
            step_1 += [(f"blocks.{layer}.attn.hook_z", lambda act, hook: corrupt_cache[hook.name])
                       for layer in range(s_layer + 1, r_layer)]
            if not through_mlps:
                step_1 += [(f"blocks.{layer}.hook_mlp_out", lambda act, hook: corrupt_cache[hook.name])
                           for layer in range(s_layer, r_layer)]
            received = {}

            def record(act, hook):
                received[hook.name] = act

            step_1 += [(f"blocks.{r_layer}.attn.hook_{name}", record) for name in used]
            model.run_with_hooks(corrupt, fwd_hooks=step_1)
            for group in groups:
                step_2 = []
                for name in group:
                    hook_name = f"blocks.{r_layer}.attn.hook_{name}"
                    value = received[hook_name]
                    head_axis, _ = hook_axes(hook_name, value.shape, clean.shape[1], n_heads)
                    step_2.append((hook_name, put(value, r_head, head_axis)))
                patched = runs.measure(model.run_with_hooks(corrupt, fwd_hooks=step_2), corrupt)
                rows.append(pd.DataFrame({
                    "sender": f"L{s_layer}H{s_head}", "receiver": f"L{r_layer}H{r_head}", "sender_layer": s_layer,
                    "sender_head": s_head, "receiver_layer": r_layer, "receiver_head": r_head, "input": "+".join(group),
                    "pair": np.arange(len(reads)), "read": reads.numpy(), "clean": clean_ld.cpu().numpy(),
                    "corrupt": corrupt_ld.cpu().numpy(), "patched": patched.cpu().numpy()}))
    if not rows:
        raise ValueError("no sender sits in a layer before a receiver: nothing to patch")
    frame = pd.concat(rows, ignore_index=True)
    frame["restored"] = (frame.patched - frame.corrupt) / (frame.clean - frame.corrupt)
    return frame

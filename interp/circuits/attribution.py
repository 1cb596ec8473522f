"""Direct logit attribution: what each component of the residual stream writes straight into
the metric at a scored position (conventions: :mod:`interp.circuits`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from transformer_lens.utilities import Slice

from interp.circuits.metrics import (
    Metric, Scored, _answer_index, _check_columns, _check_frame, check_metric, measure, resolve_task, scored_rows,
    token_ids_of,
)
from interp.tasks import Task

# Rows of logits [row, pos, d_vocab] handed to the metric at once (each row is one scored position).
METRIC_ROWS = 256


def direct_logit_attribution(model, tokens, cache=None, neurons: bool = False, *, task: Task | str | None = None,
                             metric: Metric | None = None, position: int | None = None) -> pd.DataFrame:
    """What each component writes directly into the metric at every scored position of ``tokens``.

    ``task`` (default: the model's, :func:`~interp.circuits.metrics.resolve_task`) says where the
    model is scored and what the right answer is; ``metric`` (default: the task's margin, the
    right answer's logit minus the best other answer's, :func:`~interp.circuits.metrics.margin`)
    what is attributed; ``position``: only that position (where the task scores it), default
    every scored one. The metric is split along its gradient with respect to the logits at the
    scored position (the margin's is ``e_right - e_best_other``), so the parts add up to the
    metric exactly for a metric linear in those logits (the margin, a logit difference) and to
    its first-order expansion otherwise (:func:`dla_sum_error` shows the gap).

    With ``norm_placement="pre"`` the final stream is the sum of the embeddings, every head's
    output ``z @ W_O`` (from ``hook_z``), the attention output biases and the MLP outputs; the
    logits are that stream divided by the final norm's scale (``ln_final.hook_scale``) times
    the unembedding with the norm's gain folded in (``model.folded_W_U``), as TransformerLens's
    ``cache.logit_attrs(cache.decompose_resid(...))`` decomposes them. So each component's
    share of the metric is its output at the scored position, divided by that scale, dotted
    with ``folded_W_U @ d metric / d logits``.

    With ``norm_placement="stream"`` each block *replaces* the stream by its normalisation
    before each sublayer (``x = ln1(x); x = x + attn(x); x = ln2(x); x = x + mlp(x)``), so a
    component added to the stream passes every later ``ln1``/``ln2`` before ``ln_final``. The
    decomposition freezes each norm's scale at its cached value (``blocks.{l}.ln{1,2}.hook_scale``),
    as the final norm's is frozen above: each norm is then the linear map ``x -> x * w / scale``
    per position, so the stream entering ``ln_final`` is exactly the sum of each component times
    the product of ``w / scale`` of the norms after the place where it was added (the cache's
    ``norm_factors``, which also make ``cache.decompose_resid`` exact on these models). The
    embeddings pass every norm, block ``l``'s heads and attention bias the norms from its ``ln2``
    on, its MLP the norms from block ``l + 1`` on. The shares are still exact (the parts of a
    position add up to the model's metric to float rounding); what the frozen scales hide
    is how a component also changes the later scales, which is not a direct effect.

    "Direct" means only the path straight to the unembedding: what a head does through later
    layers is not in its share. ``neurons``: each MLP as its neurons, neuron ``n`` of layer
    ``l`` writing ``hook_post[n] * W_out[n]`` (component ``L{l}N{n}``, kind ``neuron``), plus
    its output bias (``L{l} MLP bias``, kind ``mlp_bias``) where it has one, in place of the
    MLP's one row.

    ``cache``: a ``run_with_cache`` cache of ``tokens`` holding ``hook_embed``
    (``hook_pos_embed``), every ``hook_z`` and ``hook_mlp_out`` (``mlp.hook_post`` with
    ``neurons``), every norm's ``hook_scale`` and ``ln_final.hook_normalized``; by default the
    model is run here.

    Returns one row per (scored position, component), components in the model's order: ``seq``,
    ``position``, ``target`` (the right answer's token id), ``answer`` (its index among the
    task's answers: flip-flop's bit), ``logit_diff`` (the metric's value there, from the model's
    logits; the position's rows add up to it), ``component`` (``embed``, ``pos_embed``,
    ``L{l}H{h}``, ``L{l} attn bias``, ``L{l} MLP``), ``kind`` (``embed``, ``pos_embed``, ``head``,
    ``attn_bias``, ``mlp``), ``layer`` and ``head`` (-1 where they do not apply; the neuron's
    index for a neuron) and ``attribution``. A model without a residual stream (the LSTM) is a
    ``ValueError``.
    """
    if not isinstance(neurons, bool):
        raise TypeError(f"neurons must be True or False, got a {type(neurons).__name__}")
    task = resolve_task(model, task)
    if not hasattr(model, "blocks"):
        raise ValueError(f"the {model.cfg.model} model has no residual stream to split into components")
    metric = check_metric(task, metric)
    tokens = token_ids_of("tokens", tokens, model.cfg.d_vocab).to(model.cfg.device)
    seq, position, target = scored_rows(task, tokens.cpu(), position)
    if cache is None:
        _, cache = model.run_with_cache(tokens, names_filter=_dla_hooks(neurons))
    elif not hasattr(cache, "normalises_stream"):
        raise TypeError(f"cache must be the cache of model.run_with_cache(tokens), got {type(cache).__name__}")
    value, gradient = _metric_gradient(model, task, metric, tokens, cache, seq, position, target)
    direction = gradient @ model.folded_W_U.double().T.to(gradient.device)                  # [row, d_model]
    direction = direction / cache["ln_final.hook_scale"][seq, position].double()
    if cache.normalises_stream:   # [norm, read, d_model]: the direction as seen before each norm
        factors = cache.norm_factors(model.cfg.n_layers, False, Slice(None))[:, seq, position].double()
        directions = factors * direction
    else:
        directions = direction.expand(2 * model.cfg.n_layers + 1, -1, -1)

    def share(out: torch.Tensor, first_norm: int) -> np.ndarray:
        """``out [read, d_model]``, added to the stream before norm ``first_norm`` (block l's
        ln1 is norm 2 l, its ln2 2 l + 1, ``ln_final`` 2 n_layers) -> its share of each read's
        logit difference."""
        return (out.double() * directions[first_norm]).sum(-1).detach().cpu().numpy()

    parts = [("embed", "embed", -1, -1, share(cache["hook_embed"][seq, position], 0))]
    if "hook_pos_embed" in model.hook_dict:
        parts.append(("pos_embed", "pos_embed", -1, -1, share(cache["hook_pos_embed"][seq, position], 0)))
    for layer, block in enumerate(model.blocks):
        after_attn, after_mlp = 2 * layer + 1, 2 * layer + 2
        heads = torch.einsum("rhd,hdm->rhm", cache["z", layer][seq, position], block.attn.W_O)
        parts += [(f"L{layer}H{h}", "head", layer, h, share(heads[:, h], after_attn)) for h in range(heads.shape[1])]
        if block.attn.b_O is not None:
            parts.append((f"L{layer} attn bias", "attn_bias", layer, -1,
                          share(block.attn.b_O.expand(len(seq), -1), after_attn)))
        if not neurons:
            parts.append((f"L{layer} MLP", "mlp", layer, -1, share(cache["mlp_out", layer][seq, position], after_mlp)))
            continue
        per_neuron = (cache["post", layer][seq, position].double()
                      * (directions[after_mlp] @ block.mlp.W_out.double().T)).detach().cpu().numpy()  # [read, d_mlp]
        parts += [(f"L{layer}N{n}", "neuron", layer, n, per_neuron[:, n]) for n in range(per_neuron.shape[1])]
        if block.mlp.b_out is not None:
            parts.append((f"L{layer} MLP bias", "mlp_bias", layer, -1,
                          share(block.mlp.b_out.expand(len(seq), -1), after_mlp)))
    reads = pd.DataFrame({"seq": seq.numpy(), "position": position.numpy(), "target": target.numpy(),
                          "answer": _answer_index(task, target), "logit_diff": value.cpu().numpy()})
    names, kinds, layers, heads, values = zip(*parts)
    frame = reads.iloc[np.tile(np.arange(len(reads)), len(parts))].reset_index(drop=True)
    for column, per_component in (("component", names), ("kind", kinds), ("layer", layers), ("head", heads)):
        frame[column] = np.repeat(np.asarray(per_component), len(reads))
    frame["attribution"] = np.concatenate(values)
    return frame


def _metric_gradient(model, task, metric, tokens, cache, seq, position, target) -> tuple[torch.Tensor, torch.Tensor]:
    """The metric at each scored row and its gradient with respect to the logits at the row's
    position, ``([row], [row, d_vocab])``, from the cached final stream, ``METRIC_ROWS`` rows at a
    time."""
    normalized = cache["ln_final.hook_normalized"].detach()
    values, gradients = [], []
    for start in range(0, len(seq), METRIC_ROWS):
        rows = slice(start, start + METRIC_ROWS)
        at = seq[rows].to(normalized.device)
        with torch.enable_grad():
            logits = (normalized[at].double() @ model.W_U.detach().double()).requires_grad_()
            scored = Scored(tokens[at], position[rows], target[rows], task)
            value = measure(metric, logits, scored)
            (gradient,) = torch.autograd.grad(value.sum(), logits, allow_unused=True)
        gradient = torch.zeros_like(logits) if gradient is None else gradient
        values.append(value.detach())
        gradients.append(gradient[torch.arange(len(at)), position[rows].to(gradient.device)])
    if not values:
        return torch.zeros(0, dtype=torch.float64), torch.zeros(0, model.cfg.d_vocab, dtype=torch.float64)
    return torch.cat(values), torch.cat(gradients)


def _dla_hooks(neurons: bool):
    def wanted(name: str) -> bool:
        return name in ("hook_embed", "hook_pos_embed", "ln_final.hook_normalized") or name.endswith(
            ("hook_scale", "attn.hook_z", "mlp.hook_post" if neurons else "hook_mlp_out"))
    return wanted


def dla_sum_error(frame: pd.DataFrame) -> float:
    """The largest ``|sum of a position's attributions - its metric|`` over the scored positions
    of a :func:`direct_logit_attribution` frame: float rounding when the decomposition is exact."""
    _check_frame("frame", frame, ("seq", "position", "attribution", "logit_diff"), "direct_logit_attribution")
    totals = frame.groupby(["seq", "position"], sort=False).agg(total=("attribution", "sum"),
                                                                logit_diff=("logit_diff", "first"))
    return float((totals.total - totals.logit_diff).abs().max()) if len(totals) else 0.0


def dla_summary(frame: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Mean, and mean absolute, attribution per component (and per value of the columns
    ``by``, e.g. ``correct`` after a merge with ``read_table``), components in the model's
    order; ``share`` is the mean attribution over the mean logit difference."""
    keys = [*_check_columns("by", by), "component", "kind", "layer", "head"]
    _check_frame("frame", frame, [*keys, "attribution", "logit_diff"], "direct_logit_attribution")
    grouped = frame.groupby(keys, sort=False)
    table = grouped.agg(n_reads=("attribution", "size"), attribution=("attribution", "mean"),
                        abs_attribution=("attribution", lambda a: a.abs().mean()),
                        logit_diff=("logit_diff", "mean")).reset_index()
    table["share"] = table.attribution / table.logit_diff
    return table

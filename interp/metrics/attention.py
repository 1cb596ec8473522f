"""Attention diagnostics of the TDA paper (Sec. 3, App. B, App. E.1) as pure functions.

A *map* is one layer's ``[batch, head, query_pos, key_pos]`` tensor: the weights applied to
V (``pattern``), one view of a differential mechanism (``view_1``, ``view_2``) or the raw
scores (``attn_scores``). ``Maps`` is one map or ``{layer: map}``; :func:`cache_maps` builds
the latter from a TransformerLens cache.

Every map is read as the paper's causal-masked A, with A_ij = 0 for key j > query i,
whatever the tensor holds there (raw scores do hold values above the diagonal). Positions
are 0-indexed, so query position i sees |S(i)| = i + 1 keys; the paper's 1-indexed
``gSinkRatio(k)`` is ``key_pos = k - 1`` here.

Frames are tidy: one row per (layer, head[, position]) and metric, with columns
``layer, head, metric, value, map, seq_len`` (plus metric-specific ones), so frames from
several maps, lengths or models (add a ``model`` column) concatenate with ``pd.concat``
and reduce with :func:`summarise`. A value that is undefined (no non-zero row to average,
a constant view) is NaN, never an error; pandas' means skip it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Float, Shaped
from scipy.special import stdtrit
from torch import Tensor

from kernels.tooling.common import suffix_sum
from models import validate

# One layer's map, in TransformerLens's hook_pattern shape; Maps: one map, or one per layer
Map = Float[Tensor, "batch head query_pos key_pos"]
Maps = Map | Mapping[int, Map] | Sequence[Map]
# A map among maps of several lengths (and batches) in one call: its axes are not bound to theirs
MapAnyLength = Float[Tensor, "_batch _head _query_pos _key_pos"]

# Columns that describe a row rather than identify it: summarise() never groups by them.
DESCRIPTIVE = ("value", "gaussian", "sigma", "mean", "constant_view", "n_entries", "n_rows", "growth",
               "linear_reference")

# Only guards 0 / 0 and log 0; all-zero rows are excluded before any entropy is averaged.
EPS = 1e-12
# The longest map causal() builds: [T, T] bools of 16 GiB, more than any map a metric reads
MAX_CAUSAL = 1 << 17
# The reductions summarise() takes by name
REDUCTIONS = ("mean", "median", "sum", "min", "max", "std", "var", "sem", "count", "size", "first", "last", "prod",
              "nunique")


class MissingHookError(KeyError, ValueError):
    """A map was asked for whose attention hook the model (or the cache) does not have."""


def attention_hook(name: str) -> re.Pattern:
    """The names ``blocks.{layer}.attn.hook_{name}`` of every layer, the layer as group 1."""
    return re.compile(rf"blocks\.(\d+)\.attn\.hook_{re.escape(name)}")


def cache_maps(cache, name: str = "pattern") -> dict[int, Map]:
    """``{layer: cache["blocks.{layer}.attn.hook_{name}"]}`` for every layer the cache has.

    ``name``: ``pattern``, ``attn_scores``, ``view_1``, ``view_2``, or any other attention hook.
    Works on a TransformerLens ``ActivationCache`` or a plain dict of hook name -> tensor.

    A helper, no paper quantity.
    """
    if not (hasattr(cache, "keys") and hasattr(cache, "__getitem__")):
        raise TypeError(f"cache must be a TransformerLens ActivationCache or a dict of hook name -> tensor, got "
                        f"{validate.shown(cache)}")
    pattern = attention_hook(validate.text("name", name))
    maps = {int(m.group(1)): cache[key] for key in cache.keys()
            if isinstance(key, str) and (m := pattern.fullmatch(key))}
    if not maps:
        raise MissingHookError(f"the cache has no 'blocks.*.attn.hook_{name}' (was it run with that hook cached?)")
    return dict(sorted(maps.items()))


def by_layer(maps: Maps) -> dict[int, Map]:
    """``Maps`` -> ``{layer: [batch, head, T, T]}``; a bare map is layer 0. Each map is checked as
    :func:`checked_map` does.

    A helper, no paper quantity.
    """
    return layers_of(maps, "maps")


def layers_of(maps: Maps, argument: str) -> dict[int, Map]:
    """:func:`by_layer` of the argument named ``argument``, which its errors name."""
    if isinstance(maps, (torch.Tensor, np.ndarray)):
        maps = {0: maps}
    elif isinstance(maps, Sequence) and not isinstance(maps, (str, bytes)):
        maps = dict(enumerate(maps))
    elif not isinstance(maps, Mapping):
        raise TypeError(f"{argument} must be a map [batch, head, query_pos, key_pos] or a dict or list of them, got "
                        f"{validate.shown(maps)}")
    if not maps:
        raise ValueError(f"{argument}: no attention maps given (an empty dict or list); pass {{layer: [batch, head, "
                         "query_pos, key_pos]}, e.g. cache_maps(cache)")
    return {validate.integer(f"{argument}'s layer", layer, 0): checked_map(f"{argument}[{layer}]", a, 4)
            for layer, a in maps.items()}


def checked_map(argument: str, a, ndim: int | None = None, *, keep_graph: bool = False
                ) -> Float[Tensor, "*batch query_pos key_pos"]:
    """``a`` as a detached tensor (with ``keep_graph``, still in its autograd graph), or a one-line
    error naming ``argument``: a floating-point map ``[*batch, query_pos, key_pos]`` (``ndim`` axes
    when given) with query_pos == key_pos, not empty, finite on its causal entries (those above the
    diagonal are never read: raw scores hold any value there). A map holding NaN there (a diverged
    model's) has no metrics."""
    a = torch.as_tensor(validate.array(argument, a, "float", finite=False))
    a = a if keep_graph else a.detach()
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or (ndim is not None and a.ndim != ndim):
        axes = "[batch, head, query_pos, key_pos]" if ndim == 4 else "[*batch, query_pos, key_pos]"
        raise ValueError(f"{argument} must be {axes} with query_pos == key_pos, got shape {tuple(a.shape)}")
    finite = torch.isfinite(a)                  # bools: a quarter of a float copy of the map
    if not finite.logical_or_(~causal(a.shape[-1], a.device)).all():
        raise ValueError(f"{argument} holds NaN or infinite weights at causal entries (key <= query): a diverged "
                         "model's maps have no metrics")
    return a


def causal(n: int, device=None) -> Bool[Tensor, "query_pos key_pos"]:
    """``[query_pos, key_pos]`` bool, True where key j <= query i.

    A helper, no paper quantity.
    """
    n = validate.integer("n", n, 0, MAX_CAUSAL)
    device = None if device is None else validate.device("device", device)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def magnitudes(a: Float[Tensor, "*batch query_pos key_pos"]) -> Float[Tensor, "*batch query_pos key_pos"]:
    """|A_ij| in float32 with the entries j > i set to 0: the paper's masked absolute weights.

    A helper of the TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 3 metrics. Differentiable: the
    sharpening regularisers (:func:`l1_normalised`, :func:`effective_entropy`) backpropagate through it.
    """
    a = checked_map("a", a, keep_graph=True)
    return a.float().abs().masked_fill(~causal(a.shape[-1], a.device), 0.0)


def l1_normalised(a: Float[Tensor, "*batch query_pos key_pos"], eps: float = EPS
                  ) -> Float[Tensor, "*batch query_pos key_pos"]:
    """:func:`magnitudes` over their row's l1 norm, ``|A_ij| / max(sum_{t <= i} |A_it|, eps)``: each
    row a distribution over its keys, an all-zero row left at 0.

    TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 3's p_ij of :func:`effective_entropy`; on any map.
    """
    mag = magnitudes(a)
    return mag / mag.sum(-1, keepdim=True).clamp_min(positive_eps(eps))


def positive_eps(eps: float) -> float:
    """``eps``, a finite number > 0 (a guard of 0 / 0 and log 0), or a ``ValueError``."""
    return validate.number("eps", eps, 0, open_low=True)


def zero_rows(a: Float[Tensor, "*batch query_pos key_pos"]
              ) -> Bool[Tensor, "*batch query_pos"]:
    """``[batch, head, query_pos]`` bool: rows whose causal entries are all exactly 0 (a query
    that attends to nothing: possible for rectified and thresholded mechanisms).

    A helper, no paper quantity.
    """
    a = checked_map("a", a)
    return ~((a != 0) & causal(a.shape[-1], a.device)).any(-1)


def metric_frame(maps: Maps, name: str, stats: Callable[[Map], dict[str, Shaped[Tensor, "head *position"]]],
                 position: str | None = None) -> pd.DataFrame:
    """Rows ``(layer, head[, position], metric, value, map, seq_len)`` from ``stats(a)``, which
    maps each metric to a ``[head]`` tensor, or ``[head, T]`` when ``position`` names the last axis."""
    validate.text("name", name)
    parts = []
    for layer, a in by_layer(maps).items():
        for metric, values in stats(a).items():
            values = values.detach().double().cpu().reshape(values.shape[0], -1).numpy()
            head, pos = np.indices(values.shape)
            columns = {"layer": layer, "head": head.ravel()}
            if position:
                columns[position] = pos.ravel()
            columns |= {"metric": metric, "value": values.ravel(), "map": name, "seq_len": a.shape[-1]}
            parts.append(pd.DataFrame(columns))
    return pd.concat(parts, ignore_index=True)


def summarise(frame: pd.DataFrame, over: Sequence[str] = ("head",), how: str = "mean") -> pd.DataFrame:
    """Reduce ``value`` over the columns ``over`` (e.g. heads -> per layer; layers and heads ->
    overall, the paper's ``1/(LH) sum_{l,h}``), grouping by every other identifying column.
    ``how``: any pandas reduction (``mean`` skips NaN, as the paper omits undefined layers).
    A name in ``over`` that is not a column of ``frame`` is a ``ValueError``.

    A helper, no paper quantity.
    """
    validate.frame("frame", frame, ("value",))
    over = validate.strings("over", over)
    validate.text("how", how, REDUCTIONS)
    missing = [c for c in over if c not in frame.columns]
    if missing:
        raise ValueError(f"over: {missing} {'is not a column' if len(missing) == 1 else 'are not columns'} of the "
                         f"frame; choose from {[c for c in frame.columns if c not in DESCRIPTIVE]}")
    keys = [c for c in frame.columns if c not in over and c not in DESCRIPTIVE]
    if not keys:
        raise ValueError(f"over: {over} leaves no column of the frame to group by")
    return frame.groupby(keys, sort=True, dropna=False)["value"].agg(how).reset_index()


def sparsity(maps: Maps, name: str = "pattern") -> pd.DataFrame:
    """Fraction of causal entries that are exactly 0, per layer and head: TDA paper Sec. 5
    ("Attention Sparsity", Fig. 1a) and App. E.1, on the weights applied to V (``hook_pattern``)
    or one view (``hook_view_1``, ``hook_view_2``)::

        Sparsity^{l,h} = #{(b, i, j) : j <= i, A^{l,h}_bij = 0} / #{(b, i, j) : j <= i}

    Choice: the paper's numerator runs over all (i, j), which would also count the masked
    upper triangle (a dense map would score (T - 1) / (T + 1)); only causal entries count here.
    A map whose causal entries hold a NaN (a diverged model) is a ``ValueError``: a NaN is
    neither zero nor non-zero.
    Per layer / overall: ``summarise(frame)`` / ``summarise(frame, ("layer", "head"))``.
    """
    def stats(a):
        mask = causal(a.shape[-1], a.device)
        return {"sparsity": ((a == 0) & mask).sum((0, 2, 3)).double() / (mask.sum() * a.shape[0])}

    return metric_frame(maps, name, stats)


def effective_entropy(a: Float[Tensor, "*batch query_pos key_pos"], eps: float = EPS
                      ) -> Float[Tensor, "*batch query_pos"]:
    """``[batch, head, query_pos]``: the Shannon entropy (nats) of the l1-normalised |weights|, TDA paper
    Sec. 3 ("Attention Dispersion", after Vasylenko et al. 2025), of any map (``hook_pattern``, a view)::

        p_ij = |a_ij| / max(||a_i||_1, eps),   H(a_i) = -sum_{j <= i} p_ij log max(p_ij, eps)

    A row that is all zero gets H = 0; the frames below exclude such rows (see :func:`zero_rows`).
    The attention-sharpening regulariser (``interp.training.loop.sharpening_penalty``) is this
    entropy, differentiated through thresholded maps full of exact zeros: the log of
    ``max(p, eps)`` has there the finite gradient ``log eps`` where ``xlogy(p, p)``'s would be
    NaN, and it differs from ``p log p`` only for ``0 < p < eps``, by at most ``eps / e`` per entry.
    """
    eps = positive_eps(eps)
    return shannon_entropy(l1_normalised(a, eps), eps)


def shannon_entropy(p: Float[Tensor, "*batch key_pos"], eps: float = EPS) -> Float[Tensor, "*batch"]:
    """``-sum_j p_j log max(p_j, eps)`` over the last axis of distributions ``p`` (nats)."""
    return -(p * p.clamp_min(eps).log()).sum(-1)


def _entropy_by_position(a: Map, eps: float):
    """Sum of H over the batch's non-zero rows, their count, and the zero-row count, ``[head, query_pos]``."""
    dead = zero_rows(a)
    H = effective_entropy(a, eps).masked_fill(dead, 0.0)
    return H.double().sum(0), (~dead).sum(0), dead.sum(0)


def dispersion(maps: Maps, eps: float = EPS, name: str = "pattern") -> pd.DataFrame:
    """Per query position: ``effective_entropy`` E[H(a_i)] over the batch's non-zero rows, the
    ``dispersion_ratio`` E[H(a_i)] / log |S(i)| (Sec. 3; 1 for a uniform, dispersive map, -> 0
    for a non-dispersive one) and the number of ``zero_rows`` excluded.

    |S(i)| = query_pos + 1, the paper's 1-indexed i, so a uniform causal map gives ratio 1 at
    every position. Undefined values are NaN: the ratio at position 0 (log 1 = 0), and both
    at a position where every row in the batch is zero.

    Source: TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 3 ("Attention Dispersion"); on
    ``hook_pattern`` or a view.
    """
    def stats(a):
        H_sum, live, dead = _entropy_by_position(a, eps)
        mean_H = H_sum / live
        log_S = torch.arange(1, a.shape[-1] + 1, device=a.device).double().log()
        return {"effective_entropy": mean_H, "dispersion_ratio": mean_H / log_S, "zero_rows": dead}

    return metric_frame(maps, name, stats, position="query_pos")


def entropy_summary(maps: Maps, eps: float = EPS, name: str = "pattern") -> pd.DataFrame:
    """Per layer and head, over the non-zero rows of all queries in the batch:

    - ``effective_entropy``: mean H(a_i);
    - ``dispersion_ratio``: sum_i H(a_i) / sum_i log |S(i)| (rows with |S(i)| = 1 add 0 to both).
      A log|S(i)|-weighted mean of the per-position ratios (one number per head, where the
      paper plots a limit); 1 for a uniform map, 0 for one-hot rows;
    - ``zero_rows`` (count) and ``zero_row_fraction``: the rows left out of both.

    Source: TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 3 ("Attention Dispersion"), summed over
    positions; on ``hook_pattern`` or a view.
    """
    def stats(a):
        H_sum, live, dead = _entropy_by_position(a, eps)
        log_S = torch.arange(1, a.shape[-1] + 1, device=a.device).double().log()
        n_rows = a.shape[0] * a.shape[-1]
        return {"effective_entropy": H_sum.sum(-1) / live.sum(-1),
                "dispersion_ratio": H_sum.sum(-1) / (live * log_S).sum(-1),
                "zero_rows": dead.sum(-1),
                "zero_row_fraction": dead.sum(-1) / n_rows}

    return metric_frame(maps, name, stats)


def last_row_dispersion(maps: Maps, eps: float = EPS, name: str = "pattern") -> pd.DataFrame:
    """Non-dispersion, TDA paper Sec. 3 ("Attention Dispersion") with Theorem 4.4 (trela) and
    Corollary 4.7 (TDA), read at the last query of the map, whose |S(T)| = T keys are all
    visible, per layer and head, on the weights applied to V (``hook_pattern``)::

        last_row_dispersion = E_b[H(a_T)] / log T,   H of :func:`effective_entropy`

    Measured at several lengths T it is the paper's E[H(a_i)] / log i as i grows: -> 1 for a
    dispersive mechanism (softmax; 1 exactly for uniform rows), -> 0 for a non-dispersive one
    (the theorems' claim for trela and TDA). Choice: an all-zero row counts with H = 0, as the
    paper's formula gives it (p_ij = 0 / (0 + eps)), where :func:`dispersion` leaves such rows
    out; ``zero_row_fraction`` says how many there were. NaN for T = 1 (log 1 = 0).
    """
    eps = positive_eps(eps)

    def stats(a):
        last = a[:, :, -1].double().abs()                           # [batch, head, key_pos]: row i = T, all causal
        H = shannon_entropy(last / last.sum(-1, keepdim=True).clamp_min(eps), eps)
        log_T = math.log(a.shape[-1]) if a.shape[-1] > 1 else math.nan
        return {"last_row_dispersion": H.mean(0) / log_T, "zero_row_fraction": (last.sum(-1) == 0).double().mean(0)}

    return metric_frame(maps, name, stats)


def sink_ratio(maps: Maps, key_pos: Iterable[int] | None = None, name: str = "pattern") -> pd.DataFrame:
    """The generalised sink ratio of the TDA paper, Sec. 3 ("Attention Sink", after Gu et al. 2025), for
    each key position (default: all), per layer and head, on the weights applied to V (``hook_pattern``)::

        key_mass    A~_k      = 1/|R_k| sum_{i in R_k} |A_ik| / sum_{t <= i} |A_it|
        gsink_ratio gSinkRatio(k) = A~_k / A~_k^unif,   A~_k^unif = 1/|R_k| sum_{i in R_k} 1 / |S(i)|

    R_k: the rows i >= k, over the whole batch, that are not all zero. Excluding zero rows
    from both the mass and the uniform baseline keeps a dead row from reading as "no sink".
    1 for a uniform causal map at every k; T / H_T at k = 0 for one-hot rows on the first
    key (H_T the T-th harmonic number). ``gSinkRatio(k)`` of the paper (averaged over layers
    and heads): ``summarise(frame, ("layer", "head"))``. NaN where R_k is empty. A ``key_pos``
    outside ``0..T - 1`` of some map is a ``ValueError``.
    """
    layers = by_layer(maps)
    if key_pos is not None:
        key_pos = validate.integers("key_pos", key_pos)
        shortest = min(a.shape[-1] for a in layers.values())
        outside = [k for k in key_pos if not 0 <= k < shortest]
        if outside:
            raise ValueError(f"key_pos: {outside} outside the maps' key positions 0..{shortest - 1} (0-indexed: the "
                             "paper's gSinkRatio(k) is key_pos = k - 1)")
    def stats(a):
        T = a.shape[-1]
        mass = l1_normalised(a, torch.finfo(torch.float32).tiny).sum((0, 2)).double()  # [head, key_pos]
        live = (~zero_rows(a)).sum(0).double()                  # [head, query_pos]
        S = torch.arange(1, T + 1, device=a.device).double()    # |S(i)|
        return {"key_mass": mass / suffix_sum(live), "gsink_ratio": mass / suffix_sum(live / S)}

    frame = metric_frame(layers, name, stats, position="key_pos")
    return frame if key_pos is None else frame[frame.key_pos.isin(key_pos)].reset_index(drop=True)


def sink_eps(sink_frame: pd.DataFrame, eps: float = 0.3) -> pd.DataFrame:
    """The classic sink metric of Gu et al. (2025) from a :func:`sink_ratio` frame::

        Sink^eps(k) = 1/(LH) sum_{l,h} 1[A~_k^{l,h} > eps]

    the fraction of heads whose mean (l1-normalised, absolute) mass on key k exceeds eps.
    """
    validate.frame("sink_frame", sink_frame, ("layer", "head", "metric", "value"))
    eps = validate.number("eps", eps, 0, 1)
    mass = sink_frame[sink_frame.metric == "key_mass"]
    above = mass.assign(value=(mass.value > eps).astype(float), metric="sink_eps")
    return summarise(above, over=("layer", "head"))


def max_abs_weight(maps: Maps, name: str = "pattern") -> pd.DataFrame:
    """max_{b, i, j <= i} |A_bij| per layer and head (TDA paper Sec. 5, Fig. 1b); per layer:
    ``summarise(frame, how="max")``. Call once per map (``hook_pattern``, ``hook_view_1``,
    ``hook_view_2``) and concatenate; :func:`peak_cooccurrence` says whether the views' peaks meet."""
    return metric_frame(maps, name, lambda a: {"max_abs_weight": magnitudes(a).amax((0, 2, 3))})


def survivor_counts(maps: Maps, name: str = "pattern") -> pd.DataFrame:
    """Mean number of surviving (non-zero) keys per query, #{j <= i : A_ij != 0}, over the
    batch and all query positions, per layer and head (TDA paper App. B.2, Fig. 4), on
    ``hook_pattern`` (or TRA's ``hook_mask``, the keys its threshold keeps). No padding exists
    here, so every token is a relevant one."""
    def stats(a):
        alive = (a != 0) & causal(a.shape[-1], a.device)
        return {"survivors": alive.sum(-1).double().mean((0, 2))}

    return metric_frame(maps, name, stats)


def survivor_scaling(maps_per_length: Iterable[MapAnyLength | Mapping[int, MapAnyLength] | Sequence[MapAnyLength]],
                     name: str = "pattern") -> pd.DataFrame:
    """Survivors per layer (mean over heads) at several context lengths (App. B.2, Fig. 4):
    the same model run on sequences of each length, one ``Maps`` per length. ``growth`` is the
    count relative to the shortest length, ``linear_reference`` = seq_len / shortest, the O(n)
    growth a dispersive mechanism would show."""
    if isinstance(maps_per_length, (str, bytes, Mapping, torch.Tensor, np.ndarray)) or not isinstance(
            maps_per_length, Iterable):
        raise TypeError(f"maps_per_length must be a list of Maps, one per length, got "
                        f"{validate.shown(maps_per_length)}")
    counts = [survivor_counts(layers_of(m, f"maps_per_length[{i}]"), name) for i, m in enumerate(maps_per_length)]
    if not counts:
        raise ValueError("maps_per_length is empty; pass one Maps per context length")
    return survivor_growth(pd.concat(counts, ignore_index=True))


def survivor_growth(counts: pd.DataFrame) -> pd.DataFrame:
    """:func:`survivor_scaling` from :func:`survivor_counts` frames computed beforehand (at
    several lengths, maps and layers; e.g. one layer at a time when the maps are too large
    to hold together).

    A helper of TDA paper (``003_ffe354fecd74e1d6.txt``) App. B.2 / Fig. 4; on
    :func:`survivor_counts` frames.
    """
    frame = summarise(validate.frame("counts", counts, ("layer", "head", "metric", "value", "map", "seq_len")))
    shortest = frame.sort_values("seq_len").groupby(["map", "layer"])
    frame["growth"] = frame.value / shortest.value.transform("first")
    frame["linear_reference"] = frame.seq_len / shortest.seq_len.transform("first")
    return frame


def inhibition(maps: Maps, name: str = "pattern") -> pd.DataFrame:
    """How much of a signed (differential) map subtracts, per layer and head (TDA paper Fig. 2)::

        inhibitory_fraction = #{(b, i, j) : j <= i, A_bij < 0} / #{(b, i, j) : j <= i}
        inhibitory_mass     = sum_{j <= i, A_bij < 0} |A_bij| / sum_{j <= i} |A_bij|

    0 for any non-negative map; ``inhibitory_mass`` is NaN for an all-zero one.
    """
    def stats(a):
        mask = causal(a.shape[-1], a.device)
        mag = magnitudes(a)
        negative = (a < 0) & mask
        return {"inhibitory_fraction": negative.sum((0, 2, 3)) / (mask.sum() * a.shape[0]),
                "inhibitory_mass": mag.masked_fill(~negative, 0.0).sum((0, 2, 3)).double()
                / mag.sum((0, 2, 3)).double()}

    return metric_frame(maps, name, stats)


def cross_view_correlation(view_1: Maps, view_2: Maps, name: str = "views") -> pd.DataFrame:
    """Pearson correlation between the two views' weights over the causal entries of the
    batch, per layer and head (App. B.3, Fig. 5)::

        r = sum (x - x_bar)(y - y_bar) / sqrt(sum (x - x_bar)^2 sum (y - y_bar)^2),
        x = A^(1)_bij, y = A^(2)_bij over j <= i

    A view that is constant over those entries (e.g. all zero: a dead thresholded view)
    makes r undefined: value NaN and ``constant_view`` True (the paper omits such layers
    from its averages, as ``summarise`` does). Computed in float64.
    """
    validate.text("name", name)
    rows = []
    for layer, (a1, a2) in paired_views(view_1, view_2).items():
        mask = causal(a1.shape[-1], a1.device)
        for head in range(a1.shape[1]):
            x, y = (v[:, head].masked_select(mask).double() for v in (a1, a2))
            constant = bool(x.min() == x.max() or y.min() == y.max())
            x, y = x - x.mean(), y - y.mean()
            r = math.nan if constant else float((x * y).sum() / ((x * x).sum() * (y * y).sum()).sqrt())
            rows.append({"layer": layer, "head": head, "metric": "cross_view_correlation", "value": r,
                         "constant_view": constant, "map": name, "seq_len": a1.shape[-1]})
    return pd.DataFrame(rows)


def paired_views(view_1: Maps, view_2: Maps) -> dict[int, tuple[Map, Map]]:
    """``{layer: (view 1, view 2)}``; the views must cover the same layers with the same shapes."""
    views_1, views_2 = layers_of(view_1, "view_1"), layers_of(view_2, "view_2")
    if views_1.keys() != views_2.keys():
        raise ValueError(f"view_1 and view_2 cover different layers: {sorted(views_1)} vs {sorted(views_2)}")
    for layer, a1 in views_1.items():
        if a1.shape != views_2[layer].shape:
            raise ValueError(f"layer {layer}: the shapes of view_1 and view_2 differ, {tuple(a1.shape)} vs "
                             f"{tuple(views_2[layer].shape)}")
    return {layer: (a1, views_2[layer]) for layer, a1 in views_1.items()}


def peak_cooccurrence(view_1: Maps, view_2: Maps, name: str = "views") -> pd.DataFrame:
    """Whether TDA's inhibitory view can lower the excitatory peak (TDA paper Sec. 5, "Attention
    Sink", Fig. 1b: the differential map a^(1) - lambda a^(2) of Sec. 4.2 has smaller peaks than
    either view), per layer and head, on ``hook_view_1`` and ``hook_view_2``::

        view_2_at_view_1_peak = #{(b, i) : a^(2)_{b,i,j*} != 0} / #{(b, i) : a^(1)_{b,i} not all 0},
        j* = argmax_{j <= i} a^(1)_bij

    the share of the rows with an excitatory weight whose largest one (first on ties) view 2
    also weighs: only there can the difference be below view 1's peak. ``n_rows`` counts the
    rows with an excitatory weight; NaN where there is none.
    """
    parts = []
    for layer, (a1, a2) in paired_views(view_1, view_2).items():
        mask = causal(a1.shape[-1], a1.device)
        excitatory = a1.float().masked_fill(~mask, -math.inf)
        peak = excitatory.argmax(-1, keepdim=True)                              # [batch, head, query_pos, 1]
        live = (a1 != 0).logical_and(mask).any(-1)                              # [batch, head, query_pos]
        both = (a2.gather(-1, peak)[..., 0] != 0) & live
        n_rows = live.sum((0, 2))
        frame = metric_frame({layer: a1}, name,
                             lambda a: {"view_2_at_view_1_peak": both.sum((0, 2)).double() / n_rows})
        parts.append(frame.assign(n_rows=n_rows.cpu().numpy()))
    return pd.concat(parts, ignore_index=True)


def gaussian_tail(k: float) -> float:
    """P(|Z| > k) for Z ~ N(0, 1) = erfc(k / sqrt 2): 0.0455, 0.0027, 6.33e-5 at k = 2, 3, 4."""
    return math.erfc(validate.number("k", k) / math.sqrt(2.0))


def raw_logits(q: Float[Tensor, "batch pos head d_head"], k: Float[Tensor, "batch pos head d_head"]) -> Map:
    """The raw logits of the TDA paper's App. B.1, ``s_ij = q_i . k_j / sqrt(d)`` (Sec. 3's S), as
    ``[batch, head, query_pos, key_pos]`` in float32, from queries and keys ``[batch, pos, head,
    d_head]`` before any normalisation: ``hook_q``/``hook_k`` (view 2: ``hook_q2``/``hook_k2``) with
    the mechanism's rotation applied (RoPE for trela and TDA, ``models.attention.rope.apply_rope``),
    not their L2-normalised cosines (``hook_scores_1``, bounded by 1). Entries j > i are computed
    too; :func:`tail_probabilities` reads the causal ones only."""
    q, k = (torch.as_tensor(validate.array(name, x, "float", 4)) for name, x in (("q", q), ("k", k)))
    if q.shape != k.shape:
        raise ValueError(f"q and k must both be [batch, pos, head, d_head], got {tuple(q.shape)} and {tuple(k.shape)}")
    return torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / math.sqrt(q.shape[-1])


def t_interval(values: Sequence[float] | Float[np.ndarray, "draw"], confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided Student's t interval of the mean of ``values``, each one independent draw
    (sequences, seeds), at least two of them. A statistics helper, no paper quantity."""
    values = np.asarray(validate.array("values", values, "real", 1, lists=True), dtype=float)
    confidence = validate.number("confidence", confidence, 0, 1, open_low=True, open_high=True)
    if len(values) < 2:
        raise ValueError(f"values must hold at least two draws for a t interval, got {len(values)}")
    half = stdtrit(len(values) - 1, 1 - (1 - confidence) / 2) * values.std(ddof=1) / math.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def tail_probabilities(scores: Maps, ks: Sequence[float] = (2, 3, 4), name: str = "raw_logits") -> pd.DataFrame:
    """Empirical tail probabilities of the TDA paper's Table 7 (App. B.1) per layer, pooled over
    the batch, the heads and the causal entries of ``scores`` (:func:`raw_logits`), next to the
    Gaussian reference P(|Z| > k) (:func:`gaussian_tail`)::

        value = #{(b, h, i, j) : j <= i, |s_bhij - mean| > k sigma} / #{j <= i}

    with mean and sigma (``ddof=1``) of s over the same entries, "sigma the per-layer standard
    deviation". Choice: the paper writes P(|s| > k sigma); the deviations are counted from the
    mean, so that the statistic is that of the standardised logit, the quantity N(0, 1) is the
    reference for (the two agree for the mean-zero logits Assumption 4.1 posits; the ``mean``
    column shows how far from it the logits are). Columns ``k``, ``gaussian``, ``mean``,
    ``sigma``, ``n_entries``, ``n_batch``; no ``head``. ``low`` and ``high``: the 95% t
    interval of ``value`` over the batch's sequences, each sequence's rate (same mean and
    sigma) one draw, since the entries of one sequence are not independent draws (NaN for a
    batch of one); every sequence has the same entries, so ``value`` is their mean.
    """
    ks = validate.reals("ks", ks, 0)
    validate.text("name", name)
    rows = []
    for layer, s in layers_of(scores, "scores").items():
        T = s.shape[-1]
        mask = causal(T, s.device)
        s = s.double()
        entries = s.masked_select(mask)
        mean, sigma = float(entries.mean()), float(entries.std())
        deviation = (s - mean).abs()
        for k in ks:
            per_sequence = ((deviation > k * sigma) & mask).flatten(1).sum(1).double() / (mask.sum() * s.shape[1])
            low, high = t_interval(per_sequence.cpu().numpy()) if len(per_sequence) > 1 else (math.nan, math.nan)
            rows.append({"layer": layer, "k": k, "metric": "tail_probability",
                         "value": float(per_sequence.mean()), "low": low, "high": high, "gaussian": gaussian_tail(k),
                         "mean": mean, "sigma": sigma, "n_entries": entries.numel(), "n_batch": s.shape[0],
                         "map": name, "seq_len": T})
    return pd.DataFrame(rows)

"""Glitch anatomy: where a read's final layer looks when it answers, which term of its logits
decided it, and the statistics that say how sure a share or a mean is.

A *read* is a row of :func:`~interp.metrics.read_table` (``seq``, ``position``, ``write_pos``).
Its keys are cut into regions (:func:`key_regions`), its final layer's attention is summed over
them (:func:`attention_destinations`), and for a mechanism whose logit is a content term plus a
position term (RoPE, FoT, TRA) the logit of the best key holding the bit is set against the best
key that does not (:func:`logit_split`). Shares come with Wilson intervals
(:func:`wilson_interval`), means with t intervals (:func:`mean_interval`). Pure functions of
tensors and frames, as the rest of :mod:`interp.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Float, Integer, Shaped
from scipy.special import ndtri, stdtrit
from torch import Tensor

from interp.metrics.attention import Map, causal, checked_map
from interp.metrics.probes import Carriers, Tokens, _carriers, _ids
from interp.tasks.flipflop import WRITE, last_write_positions, read_mask
from models import validate

# The regions a destination can be, in the order they claim a key, then the class of a read whose
# attention no region holds the majority of.
REGIONS = ("last write", "older writes", "first token", "recent tokens")
SPREAD = "spread"
DESTINATIONS = (*REGIONS, SPREAD)
# The keys in no region: ignores and reads with their bits, outside the recent tokens and the
# last write's carriers. Their mass is reported, never a destination of its own.
OTHER = "other"
# The read itself and the three instructions before it, each with its bit.
RECENT_TOKENS = 8
# Losing terms of :func:`logit_split`.
LOSING_TERMS = ("position", "content", "both", "threshold", "none")
# One entry per read: its sequence (read_table's seq) or its position (position)
ReadIndex = Integer[np.ndarray, "read"]


def key_regions(tokens: Tokens, carriers: Carriers, seq: ReadIndex, position: ReadIndex
                ) -> dict[str, Bool[Tensor, "read key_pos"]]:
    """``{region: [read, key_pos] bool}`` for the reads at ``(seq, position)`` of ``tokens``
    ``[n, T]``, disjoint, each key in the first region that claims it:

    - ``last write``: the read's most recent ``w`` and every key from it to the read that holds
      its bit at the final layer's input (``carriers`` ``[n, T]``,
      :func:`~interp.metrics.bit_carriers` of the final layer: the bit token, the bits after
      later reads, and the positions earlier layers moved the bit into);
    - ``older writes``: the tokens of the writes before that ``w``, other than the first token:
      each older ``w``, the bit after it, and the bit after each read before the last write (a
      copy of an older write's bit);
    - ``first token``: key 0 (the attention sink of the TDA paper), unless it is the last write;
    - ``recent tokens``: the ``RECENT_TOKENS`` keys ending at the read (the read and the three
      instructions before it, with their bits);
    - ``other``: the rest: ignores and reads with their bits, outside the recent tokens.

    Every read needs a write before it (a flip-flop sequence opens with one).

    The project's glitch anatomy (no paper defines the regions; ``first token`` is the attention
    sink of TDA paper (``003_ffe354fecd74e1d6.txt``) Sec. 3); a helper on token ids and bit
    carriers.
    """
    tokens = _ids(tokens, "tokens")
    carriers = _carriers(carriers, tokens)
    seq, position = _reads_at(seq, position, tokens.shape)
    write_pos = last_write_positions(tokens)[seq, position]
    if (write_pos < 0).any():
        raise ValueError("every read needs a write before it; a flip-flop sequence starts with w")
    keys = torch.arange(tokens.shape[1])[None, :]
    q, w = torch.as_tensor(position)[:, None], torch.as_tensor(write_pos)[:, None]
    seen = keys <= q
    instruction = np.arange(tokens.shape[1]) % 2 == 0
    writes = instruction & (tokens == WRITE)
    bits = np.zeros(tokens.shape, dtype=bool)
    bits[:, 1:] = (writes | read_mask(tokens))[:, :-1]                  # the bit after each w and each r
    write_tokens = torch.as_tensor((writes | bits)[seq])
    last = seen & (keys >= w) & ((keys == w) | torch.as_tensor(carriers[seq]))
    first = seen & (keys == 0) & ~last
    older = seen & (keys >= 1) & (keys < w) & write_tokens
    recent = seen & (keys > q - RECENT_TOKENS) & ~last & ~first & ~older
    other = seen & ~(last | older | first | recent)
    return dict(zip((*REGIONS, OTHER), (last, older, first, recent, other)))


def _reads_at(seq, position, shape: tuple[int, ...]) -> tuple[ReadIndex, ReadIndex]:
    """``seq`` and ``position``, integer arrays ``[read]`` of equal length, inside ``shape``'s
    ``(n, ..., T)``."""
    seq, position = (np.asarray(validate.array(name, x, "integer", 1, empty=True, lists=True), dtype=np.int64)
                     for name, x in (("seq", seq), ("position", position)))
    if seq.shape != position.shape:
        raise ValueError(f"seq {seq.shape} and position {position.shape} must hold one entry per read")
    for name, x, size in (("seq", seq, shape[0]), ("position", position, shape[-1])):
        if ((x < 0) | (x >= size)).any():
            raise ValueError(f"{name} must lie in [0, {size}), got {x[(x < 0) | (x >= size)][:3].tolist()}")
    return seq, position


def _reads_frame(reads, shape: tuple[int, ...]) -> tuple[ReadIndex, ReadIndex]:
    """The ``seq`` and ``position`` columns of a :func:`read_table` frame, checked by :func:`_reads_at`."""
    validate.frame("reads", reads, ("seq", "position"))
    return _reads_at(reads.seq.to_numpy(copy=True), reads.position.to_numpy(copy=True), shape)


def _read_rows(a: Shaped[Tensor, "batch head query_pos key_pos"], seq: ReadIndex, position: ReadIndex
               ) -> Shaped[Tensor, "read head key_pos"]:
    """``[read, head, key_pos]``: the rows of map ``a`` ``[batch, head, query_pos, key_pos]`` at the reads."""
    return a[torch.as_tensor(seq), :, torch.as_tensor(position), :].float().cpu()


def region_masses(pattern: Map, regions: dict[str, Bool[Tensor, "read key_pos"]], seq: ReadIndex,
                  position: ReadIndex) -> dict[str, Float[Tensor, "read head"]]:
    """``{region: [read, head]}``: the share of each head's attention at each read that falls in
    each region: ``|A_qk|`` summed over the region's keys over ``|A_qk|`` summed over every key
    ``k <= q`` (signed differential maps count by magnitude). A row that is all zero has NaN.

    The project's glitch anatomy; masses by magnitude as TDA paper (``003_ffe354fecd74e1d6.txt``)
    Sec. 3 normalises rows (``|a_ij| / ||a_i||_1``); on the final layer's ``hook_pattern``.
    """
    pattern = checked_map("pattern", pattern, 4)
    seq, position = _reads_at(seq, position, pattern.shape)
    if not isinstance(regions, dict) or not regions:
        raise TypeError(f"regions must be a dict {{region: [read, key_pos] bool}} (key_regions), got "
                        f"{validate.shown(regions)}")
    for name, keys in regions.items():
        shape = tuple(validate.array(f"regions[{name!r}]", keys, "bool", 2, empty=True).shape)
        if shape != (len(seq), pattern.shape[-1]):
            raise ValueError(f"regions[{name!r}] must be [read, key_pos] = [{len(seq)}, {pattern.shape[-1]}], got "
                             f"{tuple(keys.shape)}")
    rows = _read_rows(pattern, seq, position).abs()
    rows = rows.masked_fill(~causal(pattern.shape[-1])[torch.as_tensor(position)][:, None, :], 0.0)
    total = rows.sum(-1)
    total = torch.where(total > 0, total, torch.full_like(total, math.nan))
    return {name: (rows * keys[:, None, :]).sum(-1) / total for name, keys in regions.items()}


def destination(masses: pd.DataFrame) -> pd.Series:
    """The destination of each row of ``masses`` (a column per region of :data:`REGIONS`): the
    region that holds more than half of the weight (at most one can), else ``spread``.

    A helper, no paper quantity: the class of a row of :func:`region_masses`.
    """
    values = validate.frame("masses", masses, REGIONS)[list(REGIONS)].to_numpy(dtype=float)
    best = np.nan_to_num(values, nan=-1.0).argmax(1)
    held = np.take_along_axis(values, best[:, None], 1)[:, 0] > 0.5
    return pd.Series(np.where(held, np.array(REGIONS, dtype=object)[best], SPREAD), index=masses.index)


def attention_destinations(pattern: Map, tokens: Tokens, carriers: Carriers, reads: pd.DataFrame) -> pd.DataFrame:
    """Where the final layer's attention goes at each read of ``reads`` (``seq``, ``position``),
    one row per read: the layer's weight in each region of :func:`key_regions` (columns named
    by region, plus ``other``) and its ``destination`` (:func:`destination`).

    The layer's weight is the mean over its heads of each head's :func:`region_masses` (heads
    whose row is all zero left out), so that one head's pick is a quarter of a 4-head layer's.
    ``pattern`` ``[batch, head, query_pos, key_pos]`` is the final layer's map on ``tokens``
    ``[n, T]``; ``carriers`` the bit carriers at its input.

    The project's glitch anatomy (no paper figure); on the final layer's ``hook_pattern``.
    """
    seq, position = _reads_frame(reads, checked_map("pattern", pattern, 4).shape)
    masses = region_masses(pattern, key_regions(tokens, carriers, seq, position), seq, position)
    frame = reads.reset_index(drop=True).copy()
    for name, mass in masses.items():
        frame[name] = np.nanmean(mass.numpy(), axis=1) if mass.numel() and not mass.isnan().all() else np.nan
    frame["destination"] = destination(frame)
    return frame


def retrieval_head(pattern: Map, tokens: Tokens, carriers: Carriers, reads: pd.DataFrame) -> int:
    """The head of a final layer that puts the most weight on the ``last write`` region
    (:func:`key_regions`), mean over ``reads``: the head that retrieves the bit.

    A helper, no paper quantity; on the final layer's ``hook_pattern``.
    """
    seq, position = _reads_frame(reads, checked_map("pattern", pattern, 4).shape)
    masses = region_masses(pattern, key_regions(tokens, carriers, seq, position), seq, position)
    return int(torch.nan_to_num(masses[REGIONS[0]], nan=0.0).mean(0).argmax())


def logit_split(content: Map, position_term: Map, allowed: Shaped[Tensor, "batch head query_pos key_pos"],
                tokens: Tokens, carriers: Carriers, reads: pd.DataFrame, head: int) -> pd.DataFrame:
    """The contest each read's attention logit decides, split into its content and position terms,
    for one ``head`` of a layer whose logit is ``content + position_term`` on the ``allowed`` keys
    (all three ``[batch, head, query_pos, key_pos]``: for RoPE q.k unrotated and the rotation's
    change to it, for FoT q.k and the forget gates' decay, for TRA the thresholded score and
    D-bar log delta, ``allowed`` the keys its threshold keeps).

    Per read: the *target*, the allowed key of the ``last write`` region (:func:`key_regions`)
    with the largest logit, against the *winner*, the allowed key outside it with the largest
    logit. Columns ``target_key``, ``winner_key``, ``content_target``, ``position_target``,
    ``content_winner``, ``position_winner``, ``margin`` (target's logit minus the winner's;
    negative: a key without the bit outranks every key with it), ``content_margin``,
    ``position_margin`` (the two terms' parts of the margin, which add up to it) and
    ``losing_term``: where the margin is negative, ``position`` (only the position term's part
    is negative), ``content`` (only the content term's), ``both``; ``threshold`` where no key
    holding the bit is allowed (TRA's threshold removed them all); ``none`` where the target
    wins (the read's error comes from elsewhere). NaN keys and terms where a side is empty.

    The project's glitch anatomy; the terms are each mechanism's logit: RoPE's rotary q.k, FoT's and
    TRA's from TRA paper (``000_1e40be65c4985cd5.txt``) eq. 3-12 (S, S' = ReLU(S), M, D-bar log
    delta); on the hooks of ``interp.figures.anatomy.SPLIT_HOOKS``.
    """
    content, position_term = checked_map("content", content, 4), checked_map("position_term", position_term, 4)
    allowed = validate.array("allowed", allowed, "any", 4)
    if not content.shape == position_term.shape == allowed.shape:
        raise ValueError(f"content {tuple(content.shape)}, position_term {tuple(position_term.shape)} and allowed "
                         f"{tuple(allowed.shape)} must be one shape, [batch, head, query_pos, key_pos]")
    head = validate.integer("head", head, 0, content.shape[1] - 1)
    seq, position = _reads_frame(reads, content.shape)
    last = key_regions(tokens, carriers, seq, position)[REGIONS[0]]
    c, p = (_read_rows(x[:, head:head + 1], seq, position)[:, 0] for x in (content, position_term))
    ok = _read_rows(allowed[:, head:head + 1], seq, position)[:, 0].bool()
    ok &= causal(content.shape[-1])[torch.as_tensor(position)]
    logit = c + p
    frame = reads.reset_index(drop=True).copy()
    for side, keys in (("target", ok & last), ("winner", ok & ~last)):
        best = logit.masked_fill(~keys, -math.inf).argmax(-1)
        present = keys.any(-1).numpy()
        frame[f"{side}_key"] = np.where(present, best.numpy(), -1)
        for name, term in (("content", c), ("position", p)):
            frame[f"{name}_{side}"] = np.where(present, term.gather(-1, best[:, None])[:, 0].numpy(), np.nan)
    for name in ("content", "position"):
        frame[f"{name}_margin"] = frame[f"{name}_target"] - frame[f"{name}_winner"]
    frame["margin"] = frame.content_margin + frame.position_margin
    frame["losing_term"] = np.select(
        [frame.target_key < 0, frame.winner_key < 0, frame.margin >= 0,
         (frame.position_margin < 0) & (frame.content_margin >= 0),
         (frame.content_margin < 0) & (frame.position_margin >= 0)],
        ["threshold", "none", "none", "position", "content"], default="both")
    frame["head"] = head
    return frame


def wilson_interval(count, n, confidence: float = 0.95
                    ) -> tuple[Float[np.ndarray, "*shape"] | float, Float[np.ndarray, "*shape"] | float]:
    """The Wilson score interval of a binomial share ``count / n`` (arrays alike; NaN where
    ``n`` is 0): what the share of ``n`` independent draws pins down at ``confidence``
    (Wilson 1927, the score interval)::

        (p + z^2 / 2n -+ z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n),   p = count / n,

    z the normal quantile at 1 - (1 - confidence) / 2. No paper of the four gives intervals:
    they are the project's, on shares of reads. A count outside ``0..n``, a negative ``n`` or a
    confidence outside (0, 1) is a ``ValueError`` naming the argument."""
    count, n = (np.asarray(validate.array(name, x if isinstance(x, (list, tuple)) else np.asarray(x), "real",
                                          empty=True, lists=True), dtype=float)
                for name, x in (("count", count), ("n", n)))
    confidence = validate.number("confidence", confidence, 0, 1, open_low=True, open_high=True)
    try:
        np.broadcast_shapes(count.shape, n.shape)
    except ValueError:
        raise ValueError(f"count {count.shape} and n {n.shape} must have one shape (or broadcast to one)") from None
    if (n < 0).any():
        raise ValueError(f"n must be >= 0, got {n[n < 0].ravel()[:3].tolist()}")
    outside = (count < 0) | (count > n)
    if outside.any():
        raise ValueError(f"count must lie in 0..n, got count {np.broadcast_to(count, outside.shape)[outside][:3].tolist()}"
                         f" for n {np.broadcast_to(n, outside.shape)[outside][:3].tolist()}")
    z = ndtri(1 - (1 - confidence) / 2)            # the normal quantile
    with np.errstate(invalid="ignore", divide="ignore"):
        share = count / n
        centre = (share + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # the interval holds the share itself: float rounding must not put it a hair outside
    return np.clip(centre - half, 0, share), np.clip(centre + half, share, 1)


def share_table(frame: pd.DataFrame, by: Sequence[str], column: str, classes: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` and class of ``column`` (every class of ``classes``, 0 where absent):
    ``count``, ``n`` (the group's rows), ``share`` = count / n and its 95% Wilson interval
    ``share_low``, ``share_high``.

    A statistics helper, no paper quantity: shares of a frame's classes with
    :func:`wilson_interval`.
    """
    by, classes = validate.strings("by", by, empty=False), validate.strings("classes", classes)
    validate.frame("frame", frame, [*by, validate.text("column", column)])
    rows = []
    for key, group in frame.groupby(list(by), observed=True, sort=True):
        counts = group[column].value_counts()
        for name in classes:
            rows.append({**dict(zip(by, key)), column: name, "count": int(counts.get(name, 0)), "n": len(group)})
    table = pd.DataFrame(rows)
    table["share"] = table["count"] / table.n
    table["share_low"], table["share_high"] = wilson_interval(table["count"], table.n)
    return table


def mean_interval(frame: pd.DataFrame, by: Sequence[str], value: str, confidence: float = 0.95) -> pd.DataFrame:
    """Per group of ``by``: the ``mean`` of ``value`` over the group's rows (NaN skipped), ``n``
    (rows with a value), ``std`` and the two-sided t interval of the mean, ``mean_low`` and
    ``mean_high`` (the mean itself for a single row or no spread).

    A statistics helper, no paper quantity (no paper of the four gives intervals).
    """
    by = validate.strings("by", by, empty=False)
    validate.frame("frame", frame, [*by, validate.text("value", value)])
    confidence = validate.number("confidence", confidence, 0, 1, open_low=True, open_high=True)
    grouped = frame.groupby(list(by), observed=True)[value]
    table = pd.DataFrame({"mean": grouped.mean(), "n": grouped.count(), "std": grouped.std()}).reset_index()
    t = stdtrit(np.maximum(table.n - 1, 1), 1 - (1 - confidence) / 2)   # Student's t quantile
    half = np.where(table.n > 1, t * table["std"].fillna(0) / np.sqrt(table.n), 0.0)
    table["mean_low"], table["mean_high"] = table["mean"] - half, table["mean"] + half
    return table


def growth_exponent(frame: pd.DataFrame, by: Sequence[str], x: str = "seq_len", y: str = "value") -> pd.DataFrame:
    """Per group of ``by``: the least-squares slope of log ``y`` against log ``x`` (``exponent``:
    ``y`` grows as ``x ** exponent``, 1 linear, 0 flat), over the rows where ``y`` > 0, with
    the lengths it spans (``from_x``, ``to_x``). Unlike a ratio between two lengths it does not
    depend on which lengths were measured.

    The project's summary of TDA paper (``003_ffe354fecd74e1d6.txt``) App. B.2 / Fig. 4 (survivors
    against length); on :func:`~interp.metrics.survivor_growth` frames.
    """
    by = validate.strings("by", by, empty=False)
    validate.frame("frame", frame, [*by, validate.text("x", x), validate.text("y", y)])
    rows = []
    for key, group in frame[frame[y] > 0].groupby(list(by), observed=True):
        lx, ly = np.log(group[x].to_numpy(dtype=float)), np.log(group[y].to_numpy(dtype=float))
        slope = np.polyfit(lx, ly, 1)[0] if len(np.unique(lx)) > 1 else np.nan
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "exponent": slope,
                     "from_x": group[x].min(), "to_x": group[x].max()})
    return pd.DataFrame(rows, columns=[*by, "exponent", "from_x", "to_x"])

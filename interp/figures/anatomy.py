"""Glitch anatomy (flip-flop paper Sec. 5 and App. B.2, on the specimens): for the wrong reads of
every glitching specimen, where its final layer's attention went, and for RoPE, FoT and TRA
which term of the attention logit, content or position, let a key without the bit win.

The specimens run fast (no hooks) over the first ``ANATOMY_SEQUENCES`` sequences of ``sparse``
and ``dense`` in batches; only the sequences of a batch that hold a wrong read are run again
with hooks (the reference path, 3-30x slower), and a split stops early once
``ANATOMY_MAX_WRONG`` wrong reads are in: captions give the sequences actually scanned."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from interp import plots
from interp.figures.common import (
    COPE, DIFF, FOT, ROPE, TDA, TRA, TRELA, Loader, PaperFigure, caption, one, paper_figure, percent, progress_bar,
    register,
)
from interp.metrics import (
    DESTINATIONS, LOSING_TERMS, RECENT_TOKENS, attention_destinations, bit_carriers, capture_maps, key_regions,
    logit_split, mean_interval, read_table, region_masses, share_table,
)
from interp.tasks import load_split

# The specimens with read errors on sparse or dense (their metadata's accuracy, `glitchlens
# pretrained`); fot-mech has none, automaton-1l is not a flip-flop language model.
GLITCHING = (ROPE, DIFF, TDA, TRELA, TRA, COPE)
# Whose logit is a content term plus a position term, and the hooks that hold the two.
SPLIT_MODELS = (ROPE, FOT, TRA)
# A model with no wrong read is split at the sequences where its partner glitches: FoT at TRA's,
# the App. A pair trained alike.
PARTNER = {FOT: TRA}
ANATOMY_SPLITS = ("sparse", "dense")
ANATOMY_SEQUENCES = 2000
ANATOMY_MAX_WRONG = 300
ANATOMY_BATCH = 32
# Fewer wrong reads than this and a specimen's bars would be all interval: it stays in the CSV.
MIN_SHOWN = 10


def logit_terms(model, maps: dict[str, dict[int, torch.Tensor]], layer: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(content, position, allowed)`` ``[batch, head, query_pos, key_pos]`` of ``layer``, whose
    sum on the allowed keys is the logit the softmax reads (``hook_attn_logits``):

    - RoPE: q.k / sqrt(d_head) of the unrotated q and k (``hook_q``, ``hook_k``), and what the
      rotation adds to it (``hook_attn_scores`` minus that); every causal key allowed;
    - FoT: ``hook_attn_scores`` (q.k / sqrt(d_head)) and ``hook_decay_bias`` (the forget gates'
      sum of log f over the keys between); every causal key allowed;
    - TRA: ``hook_thresholded`` (S' = relu(S)) and ``hook_log_decay`` (D-bar log delta); the keys
      its threshold keeps (``hook_mask``) allowed."""
    kind = model.cfg.model
    if kind == "tra":
        return maps["thresholded"][layer], maps["log_decay"][layer], maps["mask"][layer] > 0
    causal_keys = torch.ones_like(maps["attn_scores"][layer], dtype=torch.bool)
    if kind == "fot":
        return maps["attn_scores"][layer], maps["decay_bias"][layer], causal_keys
    if kind == "rope":
        q, k = maps["q"][layer].float(), maps["k"][layer].float()
        content = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        return content, maps["attn_scores"][layer].float() - content, causal_keys
    raise ValueError(f"no content/position split for a {kind} model (only rope, fot, tra)")


SPLIT_HOOKS = {"tra": ["thresholded", "log_decay", "mask"], "fot": ["attn_scores", "decay_bias"],
               "rope": ["q", "k", "attn_scores"]}


def scan(model, tokens: np.ndarray, max_wrong: int, split_terms: bool,
         only: np.ndarray | None = None, batch_size: int = ANATOMY_BATCH, desc: str = ""
         ) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Every read of the sequences of ``tokens`` ``[n, T]`` that hold a wrong read (or of the
    sequences ``only``, when given), batch by batch until ``max_wrong`` wrong reads are in:
    :func:`~interp.metrics.attention_destinations` of each (columns ``seq`` in ``tokens``,
    ``correct``, the regions' masses and ``destination``, plus ``last_write_<head>`` per head)
    and, with ``split_terms``, :func:`~interp.metrics.logit_split` of every head. Returns the two
    frames and how many sequences were scanned."""
    layer = model.cfg.n_layers - 1
    hooks = ["pattern"] + (SPLIT_HOOKS[model.cfg.model] if split_terms else [])
    destinations, splits, n_wrong, scanned = [], [], 0, 0
    for start in progress_bar(range(0, len(tokens), batch_size), desc, total=-(-len(tokens) // batch_size)):
        batch = tokens[start:start + batch_size]
        scanned = start + len(batch)
        if only is None:
            with torch.inference_mode():
                predicted = model(torch.as_tensor(batch.astype(np.int64))).argmax(-1)
            picked = np.unique(read_table(batch, predicted).query("~correct").seq)
        else:
            picked = only[(only >= start) & (only < scanned)] - start
        if picked.size:
            sub = batch[picked]
            logits, maps = capture_maps(model, sub, hooks)
            reads = read_table(sub, logits.argmax(-1))
            carriers = bit_carriers(maps["pattern"], sub)[layer]
            pattern = maps["pattern"][layer]
            found = attention_destinations(pattern, sub, carriers, reads)
            seq, position = reads.seq.to_numpy(copy=True), reads.position.to_numpy(copy=True)
            masses = region_masses(pattern, key_regions(sub, carriers, seq, position), seq, position)["last write"]
            for head in range(masses.shape[1]):
                found[f"last_write_{head}"] = masses[:, head].numpy()
            destinations.append(found.assign(seq=start + picked[found.seq]))
            if split_terms:
                content, position, allowed = logit_terms(model, maps, layer)
                splits += [logit_split(content, position, allowed, sub, carriers, reads, head)
                           .assign(seq=lambda f: start + picked[f.seq]) for head in range(pattern.shape[1])]
            n_wrong += int((~reads.correct).sum())
        if n_wrong >= max_wrong:
            break
    empty = pd.DataFrame()
    return (pd.concat(destinations, ignore_index=True) if destinations else empty,
            pd.concat(splits, ignore_index=True) if splits else empty, scanned)


def glitch_anatomy(load: Loader, models: Sequence[str] = GLITCHING, split_models: Sequence[str] = SPLIT_MODELS,
                   splits: Sequence[str] = ANATOMY_SPLITS, n: int = ANATOMY_SEQUENCES,
                   max_wrong: int = ANATOMY_MAX_WRONG) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two tables of the glitch anatomy (columns ``model``, ``split``, ``n_sequences``, the
    sequences scanned): the :func:`scan` destinations of ``models`` and the logit splits of
    ``split_models`` at their retrieval head (the final-layer head with the most weight on the
    last write over the right reads scanned; a model in :data:`PARTNER` is scanned at its
    partner's glitching sequences)."""
    destinations, logit_splits = [], []
    for split in splits:
        tokens = load_split(split, n)
        glitched = {}
        for name in [*dict.fromkeys([*models, *[m for m in split_models if m not in PARTNER]]),
                     *[m for m in split_models if m in PARTNER]]:
            partner = PARTNER.get(name)
            only = glitched.get(partner, np.array([], dtype=int)) if partner else None
            if partner and not only.size:
                continue
            found, terms, scanned = scan(load(name), tokens, max_wrong, name in split_models, only=only,
                                         desc=f"{name}, {split}")
            if found.empty:
                continue
            glitched[name] = np.unique(found.seq[~found.correct])
            setting = dict(model=name, split=split, n_sequences=scanned)
            if name in models:
                destinations.append(found.assign(**setting))
            if not terms.empty:
                right = found[found.correct]
                heads = [c for c in found.columns if c.startswith("last_write_")]
                head = int(np.argmax((right if len(right) else found)[heads].mean().to_numpy()))
                logit_splits.append(terms[terms["head"] == head].assign(**setting))
    return (pd.concat(destinations, ignore_index=True) if destinations else pd.DataFrame(),
            pd.concat(logit_splits, ignore_index=True) if logit_splits else pd.DataFrame())


def read_kind(frame: pd.DataFrame) -> pd.Series:
    return np.where(frame.correct, "right", "wrong")


@caption("12a_glitch_attention")
def caption_glitch_attention(data: pd.DataFrame) -> str:
    wrong = data[data.reads == "wrong"]
    parts = []
    for (name, split), rows in wrong.groupby(["model", "split"], sort=False):
        top = rows.sort_values("share", ascending=False, kind="stable").iloc[0]
        parts.append(f"{name} {split} ({int(top.n)} wrong read{'s' if top.n != 1 else ''} in "
                     f"{one(rows, 'n_sequences')} sequences): "
                     f"{top.destination} {percent(top.share, top.share_low, top.share_high)}")
    return ("Glitch anatomy: where the final layer's attention goes at each wrong read of every glitching specimen, "
            f"on the first sequences of sparse and dense (at most {one(data, 'max_sequences')}, scanned in order "
            f"until {one(data, 'max_wrong')} wrong reads were in). The layer's weight is the mean over its heads of "
            "each head's |weights| normalised to 1; the destination is the region holding more than half of it: "
            "the last write (its w and every position holding its bit at the layer's input), older writes "
            "(the w and bit tokens of earlier writes, and the bits of the reads before the last write), the first "
            f"token, the recent tokens (the read and the {int(one(data, 'recent_tokens')) - 1} tokens before it); "
            "else spread. Bars: share of the wrong reads, error bars the 95% Wilson interval (reads taken as "
            "independent; several wrong reads of one sequence are not); specimens with fewer than "
            f"{one(data, 'min_shown')} wrong reads in the CSV only. The most common destination per specimen and "
            "split: " + "; ".join(parts) + ". The right reads of the same sequences are in the CSV (reads = right).")


@caption("12b_glitch_logit_split")
def caption_logit_split(data: pd.DataFrame) -> str:
    terms = data[data.metric == "losing_term"]
    margins = data[data.metric != "losing_term"].set_index(["model", "split", "reads", "metric"])
    parts = []
    for (name, split, reads), rows in terms.groupby(["model", "split", "reads"], sort=False):
        shares = rows.set_index("losing_term")
        top = shares.sort_values("share", ascending=False, kind="stable").iloc[0]
        content, position = (margins.loc[(name, split, reads, f"{term}_margin")] for term in ("content", "position"))
        parts.append(f"{name} {split}, {int(top.n)} {reads} reads: {top.name} "
                     f"{percent(top.share, top.share_low, top.share_high)}; mean margin from content "
                     f"{content['mean']:.2f} ({content.mean_low:.2f} to {content.mean_high:.2f}), from position "
                     f"{position['mean']:.2f} ({position.mean_low:.2f} to {position.mean_high:.2f})")
    return ("Glitch anatomy: at each read, the final layer's retrieval head (the head with the most weight on the "
            "last write over the right reads) ranks the keys by logit = content + position (RoPE: q.k unrotated + "
            "the rotation's change; FoT: q.k + the forget gates' log decay; TRA: relu(q.k) + D-bar log delta over "
            "the keys its threshold keeps). The margin is the best key holding the bit minus the best key without "
            "it; the losing term is the one whose part of a negative margin is negative (position, content or "
            "both), threshold where TRA's threshold removed every key with the bit, none where the bit's key wins. "
            f"fot-mech has no wrong read and is split at the reads of the sequences where tra-mech glitches. "
            "Bars: share of the reads per losing term, 95% Wilson intervals; margins with 95% t intervals. "
            "The most common losing term: " + "; ".join(parts) + ".")


@register("glitch_anatomy", {
    "12a_glitch_attention": "Where the final layer looks at a wrong read, per glitching specimen",
    "12b_glitch_logit_split": "Which logit term loses a glitch: content or position (RoPE, FoT, TRA)",
})
def figure_glitch_anatomy(load: Loader, n: int = ANATOMY_SEQUENCES, max_wrong: int = ANATOMY_MAX_WRONG,
                          models: Sequence[str] = GLITCHING, split_models: Sequence[str] = SPLIT_MODELS
                          ) -> list[PaperFigure]:
    """The glitch anatomy of :func:`glitch_anatomy` as two figures: the destinations' shares per
    specimen and split, and the losing terms' shares with the mean margins."""
    found, terms = glitch_anatomy(load, models, split_models, n=n, max_wrong=max_wrong)
    found = found.assign(reads=read_kind(found))
    destinations = share_table(found, ["model", "split", "reads"], "destination", DESTINATIONS).merge(
        found.groupby(["model", "split"]).n_sequences.first().reset_index(), on=["model", "split"])
    destinations = destinations.assign(max_sequences=n, max_wrong=max_wrong, recent_tokens=RECENT_TOKENS,
                                       min_shown=MIN_SHOWN)
    terms = terms.assign(reads=read_kind(terms))
    keys = ["model", "split", "reads"]
    losing = share_table(terms, keys, "losing_term", LOSING_TERMS).assign(metric="losing_term")
    margins = pd.concat([mean_interval(terms, keys, column).assign(metric=column)
                         for column in ("content_margin", "position_margin", "margin")], ignore_index=True)
    split_data = pd.concat([losing, margins], ignore_index=True).merge(
        terms.groupby(["model", "split"]).agg(n_sequences=("n_sequences", "first"),
                                              head=("head", "first")).reset_index(), on=["model", "split"])
    return anatomy_figures(destinations, split_data)


def anatomy_figures(destinations: pd.DataFrame, split_data: pd.DataFrame) -> list[PaperFigure]:
    """12a and 12b from their data (the frames their CSVs hold)."""
    wrong = destinations[(destinations.reads == "wrong") & (destinations.n >= MIN_SHOWN)]
    wrong = wrong.assign(specimen=short_name(wrong, ["split"]))
    losing = split_data[split_data.metric == "losing_term"]
    shown_terms = losing.assign(reads_of=short_name(losing, ["split", "reads"]))
    return [
        paper_figure("12a_glitch_attention", destinations,
                     share_bars(wrong, "specimen", "destination", "Where the final layer looks at a wrong read",
                                "specimen, split", "share of wrong reads (95% CI)")),
        paper_figure("12b_glitch_logit_split", split_data,
                     share_bars(shown_terms, "reads_of", "losing_term",
                                "Which logit term lets a key without the bit win", "specimen, split, reads",
                                "share of reads (95% CI)")),
    ]


def share_bars(shares: pd.DataFrame, x: str, series: str, title: str, xlabel: str, ylabel: str):
    """``draw(backend)`` of a :func:`~interp.metrics.share_table`: a bar per class of ``series``
    (in the table's order) in each group of ``x``, with its Wilson interval."""
    # up to 1.3: room above the tallest bars (1) for the legend across the top
    return lambda b: plots.chart(plots.in_given_order(shares, series), x, "share", series=series, kind="bar",
                                 interval=("share_low", "share_high"), title=title, xlabel=xlabel, ylabel=ylabel,
                                 y_range=(0, 1.3), legend_above=True, backend=b)


def short_name(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """``rope sparse``: the model without its ``-mech`` and ``columns``, an axis label that fits."""
    return frame.model.str.removesuffix("-mech").str.cat([frame[c] for c in columns], sep=" ")

"""The CoPE paper's figure (Fig. 6): cope-mech's gates and contextual positions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from interp import plots
from interp.figures.common import (
    COPE, N_SAMPLES, Loader, PaperFigure, caption, heatmap_sequence, one, paper_figure, register, shown_window,
)
from interp.metrics import capture_maps
from interp.metrics.anatomy import mean_interval
from interp.tasks import VOCAB, load_split


@caption("10_cope_gates_positions")
def caption_cope_gates(data: pd.DataFrame) -> str:
    counted = (data.sort_values("value", ascending=False, kind="stable").groupby(["layer", "head"]).head(1)
               .sort_values(["layer", "head"]))
    most = "; ".join(f"L{r.layer} H{r.head}: {r.key_token} ({r.value:.2f})" for r in counted.itertuples())
    return (f"CoPE paper Fig. 6: {one(data, 'model')}'s gate values g_ij = sigmoid(q_i . k_j) (hook_gates; left) and "
            "contextual positions p_ij = sum of the gates from key j to query i (hook_positions; right), every layer, "
            f"on {shown_window(data)}. A gate near 1 counts the key as one position. The key token with the "
            f"highest mean gate, per layer and head, over {one(data, 'n_sequences')} iid sequences (all means, "
            f"with 95% t intervals over the sequences, in the CSV): {most}.")


@register("cope_gates", {"10_cope_gates_positions": "CoPE's gates and contextual positions (CoPE paper Fig. 6)"})
def figure_cope_gates(load: Loader, n: int = N_SAMPLES) -> list[PaperFigure]:
    """CoPE paper Fig. 6: cope-mech's gates and contextual positions on one iid window, and the
    mean gate per key token over the first ``n`` iid sequences."""
    tokens, window, seq = heatmap_sequence()
    _, maps = capture_maps(load(COPE), tokens, ["gates", "positions"])
    panels = {f"L{layer} H{head} {kind}": maps[kind][layer][0, head]
              for layer, gates in maps["gates"].items() for head in range(gates.shape[1])
              for kind in ("gates", "positions")}
    data = gates_by_key_token(load(COPE), n).assign(model=COPE, shown_seq=seq, window_start=window[0],
                                                    window_stop=window[1])
    return [paper_figure("10_cope_gates_positions", data,
                         lambda b: plots.heatmap_grid(panels, tokens[0], window=window, ncols=2, shared_scale="columns",
                                                      value_label=("gate g", "contextual position p"), backend=b))]


def gates_by_key_token(model, n: int = N_SAMPLES, batch_size: int = 10) -> pd.DataFrame:
    """:func:`interp.metrics.mean_by_key_token` of the gates on each of the first ``n`` iid
    sequences, then the mean over sequences (``value``) with its 95% t interval (``value_low``,
    ``value_high``). Per sequence it is computed from the column sums of the causal gates (key k
    has T - k causal entries), one pass per batch instead of one per token and sequence."""
    tokens = load_split("iid", n)
    rows = []
    for lo in range(0, n, batch_size):
        ids = torch.as_tensor(tokens[lo:lo + batch_size].astype(np.int64))              # [batch, key_pos]
        _, maps = capture_maps(model, tokens[lo:lo + batch_size], ["gates"])
        for layer, g in maps["gates"].items():                                          # [batch, head, q, k]
            T = g.shape[-1]
            column = (g.double() * torch.ones(T, T, dtype=torch.bool).tril()).sum(-2)  # [batch, head, key_pos]
            entries = torch.arange(T, 0, -1, dtype=torch.float64)                        # causal entries per key
            for token, symbol in enumerate(VOCAB):
                keys = (ids == token).double()                                           # [batch, key_pos]
                mean = (column * keys[:, None]).sum(-1) / (keys * entries).sum(-1)[:, None]
                rows += [{"layer": layer, "head": h, "metric": "mean_by_key_token", "map": "gates", "seq_len": T,
                          "key_token": symbol, "seq": lo + b, "value": float(mean[b, h])}
                         for b in range(mean.shape[0]) for h in range(mean.shape[1])]
    table = mean_interval(pd.DataFrame(rows), ["layer", "head", "metric", "map", "seq_len", "key_token"], "value")
    return table.rename(columns={"mean": "value", "mean_low": "value_low", "mean_high": "value_high",
                                 "n": "n_sequences"}).drop(columns="std")

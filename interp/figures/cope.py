"""The CoPE paper's figure (Fig. 6): cope-mech's gates and contextual positions."""

from __future__ import annotations

import pandas as pd

from interp import plots
from interp.figures.common import (
    COPE, Loader, PaperFigure, caption, heatmap_sequence, one, paper_figure, register, shown_window,
)
from interp.metrics import capture_maps, mean_by_key_token


@caption("10_cope_gates_positions")
def caption_cope_gates(data: pd.DataFrame) -> str:
    counted = (data.sort_values("value", ascending=False, kind="stable").groupby(["layer", "head"]).head(1)
               .sort_values(["layer", "head"]))
    most = "; ".join(f"L{r.layer} H{r.head}: {r.key_token} ({r.value:.2f})" for r in counted.itertuples())
    return (f"CoPE paper Fig. 6: {one(data, 'model')}'s gate values g_ij = sigmoid(q_i . k_j) (hook_gates; left) and "
            "contextual positions p_ij = sum of the gates from key j to query i (hook_positions; right), every layer, "
            f"on {shown_window(data)}. A gate near 1 counts the key as one position. The key token with the "
            f"highest mean gate, per layer and head (all means in the CSV): {most}.")


@register("cope_gates", {"10_cope_gates_positions": "CoPE's gates and contextual positions (CoPE paper Fig. 6)"})
def figure_cope_gates(load: Loader) -> list[PaperFigure]:
    """CoPE paper Fig. 6: cope-mech's gates and contextual positions on one iid window."""
    tokens, window, seq = heatmap_sequence()
    _, maps = capture_maps(load(COPE), tokens, ["gates", "positions"])
    panels = {f"L{layer} H{head} {kind}": maps[kind][layer][0, head]
              for layer, gates in maps["gates"].items() for head in range(gates.shape[1])
              for kind in ("gates", "positions")}
    data = mean_by_key_token(maps["gates"], tokens, name="gates").assign(
        model=COPE, shown_seq=seq, window_start=window[0], window_stop=window[1])
    return [paper_figure("10_cope_gates_positions", data,
                         lambda b: plots.heatmap_grid(panels, tokens[0], window=window, ncols=2, shared_scale="columns",
                                                      value_label=("gate g", "contextual position p"), backend=b))]

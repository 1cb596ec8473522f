"""The CoPE paper's figure (Fig. 6): cope-mech's gates and contextual positions."""

from __future__ import annotations

from interp import plots
from interp.figures.common import COPE, Loader, PaperFigure, heatmap_sequence, register
from interp.metrics import capture_maps, mean_by_key_token


@register("cope_gates", {"10_cope_gates_positions": "CoPE's gates and contextual positions (CoPE paper Fig. 6)"})
def figure_cope_gates(load: Loader) -> list[PaperFigure]:
    """CoPE paper Fig. 6: cope-mech's gates and contextual positions on one iid window."""
    tokens, window, shown_text = heatmap_sequence()
    _, maps = capture_maps(load(COPE), tokens, ["gates", "positions"])
    panels = {f"L{layer} H{head} {kind}": maps[kind][layer][0, head]
              for layer, gates in maps["gates"].items() for head in range(gates.shape[1])
              for kind in ("gates", "positions")}
    data = mean_by_key_token(maps["gates"], tokens, name="gates")
    counted = (data.sort_values("value", ascending=False, kind="stable").groupby(["layer", "head"]).head(1)
               .sort_values(["layer", "head"]))
    most = "; ".join(f"L{r.layer} H{r.head}: {r.key_token} ({r.value:.2f})" for r in counted.itertuples())
    caption = (f"CoPE paper Fig. 6: {COPE}'s gate values g_ij = sigmoid(q_i . k_j) (hook_gates; left) and contextual "
               "positions p_ij = sum of the gates from key j to query i (hook_positions; right), every layer, on "
               f"{shown_text}. A gate near 1 counts the key as one position. The key token with the "
               f"highest mean gate, per layer and head (all means in the CSV): {most}.")
    return [PaperFigure("10_cope_gates_positions", caption,
                        lambda b: plots.heatmap_grid(panels, tokens[0], window=window, ncols=2, shared_scale="columns",
                                                     backend=b), data)]

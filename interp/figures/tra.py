"""The TRA paper's attention figure (Fig. 1-3): the App. A pair, tra-app-a beside fot-app-a."""

from __future__ import annotations

import pandas as pd

from interp import plots
from interp.figures.common import (
    FOT_APP_A, TRA_APP_A, Loader, PaperFigure, caption, final_layer, heatmap_sequence, paper_figure, read_probe, register,
    shown_window,
)
from interp.metrics import capture_maps


@caption("01_tra_vs_fot_attention")
def caption_tra_vs_fot(data: pd.DataFrame) -> str:
    names = list(dict.fromkeys(data.model))
    summary = "; ".join(f"{name} answers {int(rows.correct.sum())} of {len(rows)} right and puts a mean "
                        f"{rows.weight.mean():.2f} of its weight on the last write"
                        for name, rows in data.groupby("model", sort=False))
    return (f"TRA paper Fig. 1-3 (App. A): final-layer attention (hook_pattern) of {names[0]} (left) and {names[1]} "
            f"(right) on {shown_window(data)}. Exact zeros are black (keys TRA's threshold removed), future keys grey; "
            "writes orange, reads blue, each read's last write outlined in cyan. On the reads shown, "
            f"{summary}.")


@register("tra_vs_fot", {"01_tra_vs_fot_attention": "TRA beside FoT: final-layer attention (TRA paper Fig. 1-3)"})
def figure_tra_vs_fot(load: Loader) -> list[PaperFigure]:
    """TRA paper Fig. 1-3: the final layer of tra-app-a beside fot-app-a on one iid window."""
    tokens, window, seq = heatmap_sequence()
    panels, probes = [], []
    for name in (TRA_APP_A, FOT_APP_A):
        logits, maps = capture_maps(load(name), tokens, ["pattern"])
        final = final_layer(maps["pattern"])
        panels.append(plots.layer_head_panels(final))
        probes.append(read_probe(final, tokens, logits).assign(model=name))
    data = pd.concat(probes, ignore_index=True)
    data = data[(data.position >= window[0]) & (data.write_pos >= window[0]) & (data.position < window[1])]
    data = data.assign(shown_seq=seq, window_start=window[0], window_stop=window[1])
    return [paper_figure("01_tra_vs_fot_attention", data,
                         lambda b: plots.compare(*panels, tokens[0], names=("TRA", "FoT"), window=window,
                                                 value_label="attention weight (hook_pattern)", backend=b))]

"""What several test files share: the models to parametrise over, how gradients are compared,
a figure of every kind that interp.plots draws, and headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from models.attention import get_attention_class
from models.config import MODEL_FAMILIES


def models_with(path: str) -> list[str]:
    """One model name per registered mechanism that has ``path`` (``"triton"`` or ``"rows"``)
    among its ``FAST_PATHS``: a new mechanism with a fast path is tested without editing the tests."""
    by_mechanism = {}
    for model, (mechanism, _, _) in MODEL_FAMILIES.items():
        if mechanism and path in get_attention_class(mechanism).FAST_PATHS:
            by_mechanism.setdefault(mechanism, model)
    return list(by_mechanism.values())


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.double().pow(2).mean().sqrt()


# Float32 rounding leaves errors of about 1e-7 to 1e-6 of the gradients' overall size, whatever the
# size of one gradient: a gradient that is exactly zero in the reference (CoPE's position table at
# T = 1) may come out as 1e-6 elsewhere. The floor of each relative error is this fraction of the
# RMS of all the reference's gradients together.
SCALE_FLOOR = 1e-2


def relative_errors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per key, ``RMS(actual - expected) / (RMS(expected) + SCALE_FLOOR * RMS(all of expected))``:
    relative where the expected value is large, scaled by the others where it is zero. Where
    every expected value is zero (a row with no key at T = 1), only an exact zero passes."""
    scale = rms(torch.cat([t.detach().flatten().double() for t in expected.values()]))
    return {key: (rms(actual[key].detach() - t.detach())
                  / (rms(t.detach()) + SCALE_FLOOR * scale).clamp_min(torch.finfo(torch.float64).tiny)).item()
            for key, t in expected.items()}


# --- every figure of interp.plots, on small synthetic inputs ---------------------------------

GALLERY_TEXT = "w1i0i1r1w0r0i1r0" * 2          # 32 flip-flop tokens: reads at 6, 10, 14, ... with their writes
GALLERY_LENGTHS = (8, 16, 32, 64)              # the "context lengths" of the sweeps


def causal_maps(n: int, layers: int = 2, heads: int = 2, seed: int = 0, signed: bool = False) -> dict:
    """``{layer: [1, head, n, n]}`` random causal maps with exact zeros, rows summing to 1
    (``signed``: minus a share of a second such map, as a differential map)."""
    g = torch.Generator().manual_seed(seed)
    maps = {}
    for layer in range(layers):
        a = torch.rand(1, heads, n, n, generator=g) * (torch.rand(1, heads, n, n, generator=g) > 0.3)
        a = (a + torch.eye(n)).tril()
        a = a / a.sum(-1, keepdim=True)
        maps[layer] = a - 0.5 * a.roll(1, -1).tril() if signed else a
    return maps


def plot_gallery(backend: str = "plotly") -> dict:
    """``{name of an interp.plots function: a figure it drew}`` for every function that draws
    one, on inputs small enough for a unit test, each showing what its figure is for (a sweep
    over lengths on log axes, an error chart with no error, panels compared side by side)."""
    from interp import plots
    from interp.metrics import (
        cross_view_correlation, dispersion, error_rate_by_dependency, max_abs_weight, read_table, sink_ratio,
        sparsity, survivor_counts, tail_probabilities,
    )
    from interp.reproduce import summarise_runs
    from interp.tasks import parse_sequence, sample_automaton

    tokens = parse_sequence(GALLERY_TEXT)
    n = len(tokens)
    maps, views = causal_maps(n), causal_maps(n, seed=1)
    sweep = {T: causal_maps(T, seed=T) for T in GALLERY_LENGTHS}
    inputs, _ = sample_automaton(1, n, 0.5, rng=0)
    reads = read_table(tokens[None], np.roll(tokens, -1)[None])             # every read right: no error
    drift = pd.DataFrame([{"model_layer": f"{model} L{layer} H0", "seq_len": T, "weight": 0.9 ** (layer + T / 16)}
                          for model in ("rope-mech", "tra-mech") for layer in range(2) for T in GALLERY_LENGTHS])
    table1 = summarise_runs([{"model": model, "seed": seed, "splits": {
        split: {"sequence_accuracy": 0.5 + 0.1 * seed, "error_rate": 0.01} for split in ("iid", "dense", "sparse")}}
        for model in ("tra", "lstm") for seed in range(2)])
    components = ["embed", "L0H0", "L0H1", "L1H0"]
    dla = pd.DataFrame({"component": components * 2, "attribution": [0.5, 1.5, -0.3, 2.0, 0.2, -1.0, 0.1, -0.5],
                        "reads": ["correct"] * 4 + ["wrong"] * 4})
    patching = pd.DataFrame([{"component": c, "offset": o, "restored": (i - o) / 3}
                             for i, c in enumerate(components) for o in range(4)])
    draw = dict(backend=backend)
    return {
        "heatmap": plots.heatmap(maps[1][0, 0], tokens, title="pattern", wrong=[14], **draw),
        "heatmap_grid": plots.heatmap_grid({"view 1": views[0][0, 0], "view 2": views[0][0, 1],
                                            "differential": causal_maps(n, signed=True)[0][0, 0]},
                                           tokens, signed=True, shared_scale=True, ncols=3, **draw),
        "automaton_heatmap_grid": plots.automaton_heatmap_grid(plots.layer_head_panels({0: maps[0][:, :1]}),
                                                               inputs[0], wrong=[5], **draw),
        "attention_grid": plots.attention_grid(maps, tokens, **draw),
        "compare": plots.compare(plots.layer_head_panels({1: maps[1][:, :1]}),
                                 plots.layer_head_panels({1: 3 * views[1][:, :1]}), tokens, names=("TRA", "FoT"),
                                 **draw),
        "chart": plots.chart(drift, "seq_len", "weight", series="model_layer", log_x=True,
                             reference=(list(GALLERY_LENGTHS), [1.0] * len(GALLERY_LENGTHS), "ideal"), **draw),
        "sparsity_chart": plots.sparsity_chart(pd.concat([sparsity(maps), sparsity(views, "view_1")]), **draw),
        "max_abs_chart": plots.max_abs_chart(pd.concat([max_abs_weight(maps), max_abs_weight(views, "view_1")]),
                                             **draw),
        "sink_ratio_chart": plots.sink_ratio_chart(pd.concat([sink_ratio(m, [0]).assign(model="rope-mech")
                                                              for m in sweep.values()]), **draw),
        "survivor_chart": plots.survivor_chart(pd.concat([survivor_counts(m) for m in sweep.values()]), **draw),
        "dispersion_chart": plots.dispersion_chart(dispersion(maps), **draw),
        "tail_chart": plots.tail_chart(tail_probabilities({layer: 3 * torch.randn(1, 2, n, n, generator=torch.Generator()
                                                                                  .manual_seed(layer))
                                                           for layer in range(2)}), **draw),
        "correlation_chart": plots.correlation_chart(cross_view_correlation(maps, views), **draw),
        "error_rate_chart": plots.error_rate_chart(error_rate_by_dependency(reads).assign(model="perfect"), **draw),
        "table1_chart": plots.table1_chart(table1, **draw),
        "dla_chart": plots.dla_chart(dla, series="reads", **draw),
        "patching_heatmap": plots.patching_heatmap(patching, **draw),
    }


# --- headless Chromium ----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# For the tests that use it (with pytest.mark.browser): skipped, saying why, where it is missing.
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install "
                                    "chromium); the page was not browser-tested")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with ``args`` (``--dump-dom URL``, ``--screenshot=PNG URL``) in a
    throwaway profile."""
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    return run

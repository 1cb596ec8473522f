"""What the figures share: the models and fixed inputs they run, :class:`PaperFigure`, the
registry that the per-paper modules fill (:data:`FIGURES`, :data:`TITLES`), the helpers that
run models and pick what a heatmap shows, and the writing of the files."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import models
from interp import plots
from interp.metrics import DEFAULT_LENGTHS, Maps, capture_maps, last_write_attention, read_table
from interp.tasks import last_write_positions, load_split, read_mask

TRA, FOT, TDA, COPE, ROPE, AUTOMATON = "tra-mech", "fot-mech", "tda-mech", "cope-mech", "rope-mech", "automaton-1l"
SEED = 0
WINDOW_TOKENS = 80
N_CANDIDATES = 8
N_SEQUENCES = 4
N_SWEEP_SEQUENCES = 2
LENGTHS = DEFAULT_LENGTHS

Loader = Callable[[str], torch.nn.Module]


@dataclass
class PaperFigure:
    """One figure: ``draw(backend)`` builds it with :mod:`interp.plots` (``"plotly"`` or
    ``"matplotlib"``); ``data`` holds the numbers it shows, written as ``STEM.csv``."""

    stem: str
    caption: str
    draw: Callable[[str], object]
    data: pd.DataFrame

    @property
    def title(self) -> str:
        return TITLES[self.stem]


# --- the registry ---------------------------------------------------------------------------

# Every figure function by name, in the order they are drawn (the order the per-paper modules
# register them); each takes the model loader, except table1, which takes its table's CSV.
FIGURES: dict[str, Callable[..., list[PaperFigure]]] = {}
# What each figure shows, in a line: the heading of its page and of its entry in index.md. Its
# caption, computed with the figure, says what was run and what came out.
TITLES: dict[str, str] = {}


def register(name: str, titles: Mapping[str, str]) -> Callable:
    """Decorator: the function becomes ``FIGURES[name]``, and ``titles`` (``{stem: title}`` of
    the figures it returns) go into ``TITLES``."""

    def add(figure_function):
        FIGURES[name] = figure_function
        TITLES.update(titles)
        return figure_function

    return add


# --- running models -------------------------------------------------------------------------

def read_rich_window(tokens: np.ndarray, size: int = WINDOW_TOKENS) -> tuple[int, tuple[int, int]]:
    """The sequence and ``(start, stop)`` of the ``size``-token window (starting at an
    instruction) that shows the most reads together with their last write, ties to the first:
    where a heatmap of ``tokens`` ``[n, T]`` shows the most retrievals."""
    T = tokens.shape[1]
    size = min(T, size - size % 2)
    reads, last_write = read_mask(tokens), last_write_positions(tokens)
    starts = range(0, T - size + 1, 2)
    shown = np.stack([(reads[:, s:s + size] & (last_write[:, s:s + size] >= s)).sum(1) for s in starts], 1)
    seq, start = np.unravel_index(shown.argmax(), shown.shape)
    return int(seq), (starts[start], starts[start] + size)


def read_probe(maps: Maps, tokens: np.ndarray, logits: torch.Tensor) -> pd.DataFrame:
    """:func:`~interp.metrics.last_write_attention` of every read, with the model's answer
    (``dependency_length``, ``true_bit``, ``pred_bit``, ``correct`` of :func:`read_table`)."""
    reads = read_table(tokens, logits.argmax(-1))
    answers = reads[["seq", "position", "dependency_length", "true_bit", "pred_bit", "correct"]]
    return last_write_attention(maps, tokens).merge(answers, on=["seq", "position"])


def final_layer(maps: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """``{last layer: its map}`` of ``{layer: map}``."""
    layer = max(maps)
    return {layer: maps[layer]}


def across_lengths(load: Loader, hooks: Mapping[str, str], lengths: Sequence[int], n: int,
                   measure: Callable[[dict[int, torch.Tensor], str], pd.DataFrame]) -> pd.DataFrame:
    """``measure(maps, model_name)`` of each model's ``hooks[model_name]`` maps on the first ``n``
    FFL(0.8) sequences at each length, concatenated (one length's maps alive at a time)."""
    frames = []
    for name, hook in hooks.items():
        model = load(name)
        for T in lengths:
            _, maps = capture_maps(model, load_split("iid", n, seq_len=T), [hook])
            frames.append(measure(maps[hook], name))
    return pd.concat(frames, ignore_index=True)


def heatmap_sequence() -> tuple[np.ndarray, tuple[int, int], str]:
    """The iid sequence ``[1, T]`` and window the flip-flop heatmaps show (:func:`read_rich_window`
    over the first ``N_CANDIDATES``), and the words that name them in a caption."""
    tokens = load_split("iid", N_CANDIDATES)
    seq, window = read_rich_window(tokens)
    return tokens[seq:seq + 1], window, f"iid sequence {seq}, tokens {window[0]}-{window[1] - 1}"


# --- writing --------------------------------------------------------------------------------

def write_figure(figure: PaperFigure, out: Path) -> list[Path]:
    """``STEM.png``, ``STEM.html`` and ``STEM.csv`` of one figure in ``out``."""
    png = plots.save(figure.draw("matplotlib"), out / f"{figure.stem}.png")
    # One plotly.min.js beside the pages rather than 3.5 MB inlined in each; a fixed div id
    # (plotly's default is a random uuid) keeps the page identical from run to run.
    html = plots.save(figure.draw("plotly"), out / f"{figure.stem}.html", title=figure.title, caption=figure.caption,
                      shared_plotlyjs=True, div_id=figure.stem)
    csv = out / f"{figure.stem}.csv"
    figure.data.to_csv(csv, index=False)
    return [png, html, csv]


def write_index(out: Path, captions: Mapping[str, str]) -> Path:
    """``index.md``: every figure's title, PNG and caption, and links to its HTML and CSV."""
    lines = ["# GlitchLens figures", "",
             "Written by `glitchlens figures` (`interp/figures/`) from the pretrained models "
             "(`models.load_pretrained`). Each figure is a PNG, an interactive page (`.html`, opens offline) and "
             "the numbers behind it (`.csv`).", ""]
    for stem, caption in captions.items():
        lines += [f"## {stem}: {TITLES[stem]}", "", f"![{stem}]({stem}.png)", "", caption, "",
                  f"[interactive]({stem}.html) · [data]({stem}.csv)", ""]
    path = out / "index.md"
    path.write_text("\n".join(lines))
    return path


def make_figures(out: str | Path, names: Sequence[str] | None = None, load: Loader | None = None,
                 table1_csv: str | Path | None = None, log: Callable[[str], None] = print) -> dict[str, list[Path]]:
    """Draw the figures ``names`` (default: all of :data:`FIGURES`) into ``out`` and
    return ``{stem: [png, html, csv]}``. ``load(name)``: the model loader (default
    :func:`models.load_pretrained`; each model is loaded once). ``table1`` is skipped, with a
    message, when ``table1_csv`` is not given or does not exist. ``captions.json`` and
    ``index.md`` cover every figure in ``out``, so ``names`` can redraw a few of them."""
    names = list(FIGURES) if names is None else list(names)
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; choose from {', '.join(FIGURES)}")
    load = functools.cache(load or models.load_pretrained)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    captions_file = out / "captions.json"
    captions = json.loads(captions_file.read_text()) if captions_file.exists() else {}
    written = {}
    for name in names:
        start = time.perf_counter()
        if name == "table1":
            if table1_csv is None or not Path(table1_csv).exists():
                log("table1: skipped, " + ("no --table1 CSV given" if table1_csv is None else f"{table1_csv} not found")
                    + " (write one with `glitchlens reproduce table1`)")
                continue
            figures = FIGURES[name](table1_csv)
        else:
            figures = FIGURES[name](load)
        for figure in figures:
            written[figure.stem] = write_figure(figure, out)
            captions[figure.stem] = figure.caption
        log(f"{name}: {', '.join(f.stem for f in figures)} ({time.perf_counter() - start:.1f} s)")
    captions = {stem: captions[stem] for stem in sorted(captions) if (out / f"{stem}.png").exists()}
    captions_file.write_text(json.dumps(captions, indent=2) + "\n")
    write_index(out, captions)
    return written

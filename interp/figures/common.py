"""What the figures share: the models and fixed inputs they run, :class:`PaperFigure`, the
registry that the per-paper modules fill (:data:`FIGURES`, :data:`TITLES`), the helpers that
run models and pick what a heatmap shows, and the writing of the files."""

from __future__ import annotations

import functools
import io
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

import models
from interp import plots
from interp.metrics import DEFAULT_LENGTHS, Maps, capture_maps, last_write_attention, read_table
from interp.outputs import check_free, moved, read_json, staged, writable_dir
from interp.tasks import last_write_positions, load_split, read_mask

# The specimens the figures are drawn on, named here alone: a figure takes its model from these
# (the TDA figures, 02a-06, from TDA_BETA1), so drawing them on another specimen is one edit.
TRA, FOT, TDA, COPE, ROPE, AUTOMATON = "tra-mech", "fot-mech", "tda-mech", "cope-mech", "rope-mech", "automaton-1l"
# TDA in the paper's regime, its threshold at beta = 1 (interp.studies.registry.TDA_THRESHOLD_RULE); the
# glitch anatomy keeps tda-mech, whose beta was learned down to 0.18
TDA_BETA1 = "tda-beta1"
# automaton-1l's set-up trained with the entropy sharpening regulariser (interp.studies.specimens.sharpened)
AUTOMATON_SHARP = "automaton-1l-sharp"
# The App. A pair that the rule of ``glitchlens reproduce app-a`` chose (interp.studies.registry.APP_A_RULE)
TRA_APP_A, FOT_APP_A = "tra-app-a", "fot-app-a"
DIFF, TRELA = "diff-mech", "trela-mech"
# trela in the TDA paper's regime, beta ramped to 1 as TDA_BETA1's (the premise of its Theorem 4.4)
TRELA_BETA1 = "trela-beta1"
# Every shipped specimen trained on the flip-flop language (the automaton ones are not)
FLIPFLOP_SPECIMENS = (ROPE, TRA, FOT, TRA_APP_A, FOT_APP_A, COPE, DIFF, TRELA, TRELA_BETA1, TDA, TDA_BETA1)
SEED = 0
WINDOW_TOKENS = 80
N_CANDIDATES = 8
N_SEQUENCES = 4
N_SWEEP_SEQUENCES = 100
# Figures that draw an interval do so over at least this many sequences.
N_SAMPLES = 100
LENGTHS = DEFAULT_LENGTHS

Loader = Callable[[str], torch.nn.Module]


@dataclass
class PaperFigure:
    """One figure: ``draw(backend)`` builds it with :mod:`interp.plots` (``"plotly"`` or
    ``"matplotlib"``); ``data`` holds the numbers it shows, written as ``STEM.csv``; its
    ``caption`` is ``CAPTIONS[stem](data)`` (:func:`paper_figure`)."""

    stem: str
    caption: str
    draw: Callable[[str], object]
    data: pd.DataFrame

    @property
    def title(self) -> str:
        return TITLES[self.stem]


def paper_figure(stem: str, data: pd.DataFrame, draw: Callable[[str], object]) -> PaperFigure:
    """The :class:`PaperFigure` of ``stem`` with the caption its :data:`CAPTIONS` function
    writes from ``data`` as its CSV holds it (float32 columns read back as float64), so that the
    CSV alone gives the caption back, to the last digit."""
    return PaperFigure(stem, CAPTIONS[stem](as_written(data)), draw, data)


def as_written(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` as ``STEM.csv`` gives it back."""
    return pd.read_csv(io.StringIO(data.to_csv(index=False)))


# --- the registry ---------------------------------------------------------------------------

# Every figure function by name, in the order they are drawn (the order the per-paper modules
# register them); each takes the model loader, except table1, which takes its table's CSV.
FIGURES: dict[str, Callable[..., list[PaperFigure]]] = {}
# What each figure shows, in a line: the heading of its page and of its entry in index.md. Its
# caption, computed with the figure, says what was run and what came out.
TITLES: dict[str, str] = {}
# Each figure's caption as a function of its data alone (the frame written as STEM.csv): every
# number and every claim in a caption is computed from the CSV beside it, and
# tests/test_captions.py writes each caption again from the committed CSV.
CAPTIONS: dict[str, Callable[[pd.DataFrame], str]] = {}


def register(name: str, titles: Mapping[str, str]) -> Callable:
    """Decorator: the function becomes ``FIGURES[name]``, and ``titles`` (``{stem: title}`` of
    the figures it returns) go into ``TITLES``."""

    def add(figure_function):
        FIGURES[name] = figure_function
        TITLES.update(titles)
        return figure_function

    return add


def caption(stem: str) -> Callable:
    """Decorator: the function, ``data -> caption``, becomes ``CAPTIONS[stem]``."""

    def add(caption_function):
        CAPTIONS[stem] = caption_function
        return caption_function

    return add


def progress_bar(iterable, desc: str, total: int | None = None):
    """``iterable`` with a bar on stderr that names what is running (``SHOW_PROGRESS``)."""
    return tqdm(iterable, desc=desc, total=total, leave=False, disable=not SHOW_PROGRESS, file=sys.stderr)


# Progress bars on stderr while the figures are drawn (make_figures(progress=False) turns them off).
SHOW_PROGRESS = True


def percent(share: float, low: float, high: float) -> str:
    """A share with its interval in words: ``12.3% (95% CI 10.1-14.8%)``."""
    return f"{100 * share:.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f}%)"


def mean_words(row: pd.Series) -> str:
    """A row of :func:`~interp.metrics.mean_interval` in words: ``0.95 (0.93-0.97)``."""
    return f"{row['mean']:.2f} ({row.mean_low:.2f}-{row.mean_high:.2f})"


def length_ends(data: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.Series, pd.Series]]:
    """Per model of ``data`` (in order): its name, its rows by ``seq_len``, and the rows of its
    shortest and its longest length."""
    ends = []
    for name, rows in data.groupby("model", sort=False):
        rows = rows.sort_values("seq_len")
        ends.append((name, rows, rows.iloc[0], rows.iloc[-1]))
    return ends


def one(data: pd.DataFrame, column: str):
    """The single value ``column`` holds in every row of ``data`` (a setting written beside the
    numbers so that the caption can be written from the CSV)."""
    values = data[column].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"column {column!r} should hold one value, holds {list(values)[:5]}")
    value = values[0]
    return value.item() if hasattr(value, "item") else value


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


def per_sequence(load: Loader, hooks: Mapping[str, Sequence[str]], lengths: Sequence[int], n: int,
                 measure: Callable[[dict[str, dict[int, torch.Tensor]], str], pd.DataFrame],
                 batch_size: int = 4) -> pd.DataFrame:
    """``measure(maps, model_name)`` of each model's ``hooks[model_name]`` maps on each of the first
    ``n`` FFL(0.8) sequences at each length, one sequence at a time (columns ``model`` and ``seq``
    added):
    a sample to put an interval on. ``maps`` is ``{hook: {layer: [1, head, T, T]}}``."""
    frames = []
    for name, names in hooks.items():
        model = load(name)
        for T in lengths:
            tokens = load_split("iid", n, seq_len=T)
            for start in progress_bar(range(0, n, batch_size), f"{name}, T = {T}", total=-(-n // batch_size)):
                _, maps = capture_maps(model, tokens[start:start + batch_size], list(names))
                for b in range(min(batch_size, n - start)):
                    one_sequence = {hook: {layer: m[b:b + 1] for layer, m in at.items()} for hook, at in maps.items()}
                    frames.append(measure(one_sequence, name).assign(model=name, seq=start + b))
    return pd.concat(frames, ignore_index=True)


def heatmap_sequence() -> tuple[np.ndarray, tuple[int, int], int]:
    """The iid sequence ``[1, T]`` and window the flip-flop heatmaps show (:func:`read_rich_window`
    over the first ``N_CANDIDATES``), and the sequence's index in the split."""
    tokens = load_split("iid", N_CANDIDATES)
    seq, window = read_rich_window(tokens)
    return tokens[seq:seq + 1], window, seq


def shown_window(data: pd.DataFrame) -> str:
    """The words that name a heatmap's sequence and window, from the columns ``shown_seq``,
    ``window_start`` and ``window_stop``."""
    return (f"iid sequence {one(data, 'shown_seq')}, tokens {one(data, 'window_start')}-"
            f"{one(data, 'window_stop') - 1}")


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
                 table1_csv: str | Path | None = None, log: Callable[[str], None] = print,
                 progress: bool = True, overwrite: bool = False) -> dict[str, list[Path]]:
    """Draw the figures ``names`` (default: all of :data:`FIGURES`) into ``out`` and
    return ``{stem: [png, html, csv]}``. ``load(name)``: the model loader (default
    :func:`models.load_pretrained`; each model is loaded once). ``table1`` is skipped, with a
    message, when ``table1_csv`` is not given or does not exist. ``captions.json`` and
    ``index.md`` cover every figure in ``out``, so ``names`` can redraw a few of them.
    ``progress``: bars on stderr for the figures that run many sequences. The files move into
    ``out`` when every figure is drawn, never over a file not written by glitchlens unless
    ``overwrite`` (:mod:`interp.outputs`)."""
    global SHOW_PROGRESS
    SHOW_PROGRESS = progress
    names = list(FIGURES) if names is None else list(names)
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; choose from {', '.join(FIGURES)}")
    load = functools.cache(load or models.load_pretrained)
    out = writable_dir(out)
    check_free(out, INDEX_FILES, overwrite)
    captions_file = out / "captions.json"
    captions = read_json(captions_file, "captions file") if os.path.lexists(captions_file) else {}
    if not isinstance(captions, dict):
        raise ValueError(f"{captions_file}: not a figures captions file (a JSON object); pass --overwrite to "
                         "replace it")
    with staged(out, overwrite, INDEX_FILES) as stage:
        written = _draw(names, load, table1_csv, log, progress, captions, out, stage)
    return {stem: list(moved(dict(enumerate(paths)), stage, out).values()) for stem, paths in written.items()}


INDEX_FILES = ("captions.json", "index.md")


def _draw(names, load, table1_csv, log, progress, captions: dict, out: Path, stage: Path) -> dict[str, list[Path]]:
    """:func:`make_figures`' work: the figures, ``captions.json`` and ``index.md`` written into ``stage``."""
    written = {}
    # the figures' own bars (progress_bar) open below this one; the estimate of what is left is
    # the mean time per figure so far (they differ: tda_diagnostics and drift are the longest)
    figures_bar = tqdm(names, desc="figures", unit="figure", disable=not progress, file=sys.stderr)

    def say(text: str):   # above the bars, which are cleared and drawn again
        with tqdm.external_write_mode(file=sys.stderr):
            log(text)

    for name in figures_bar:
        figures_bar.set_postfix_str(f"drawing {name}")
        start = time.perf_counter()
        say(f"{name}: drawing ({names.index(name) + 1} of {len(names)})")
        if name == "table1":
            if table1_csv is None or not Path(table1_csv).exists():
                say("table1: skipped, " + ("no --table1 CSV given" if table1_csv is None else f"{table1_csv} not found")
                    + " (write one with `glitchlens reproduce table1`)")
                continue
            figures = FIGURES[name](table1_csv)
        else:
            figures = FIGURES[name](load)
        for figure in figures:
            written[figure.stem] = write_figure(figure, stage)
            captions[figure.stem] = figure.caption
        say(f"{name}: {', '.join(f.stem for f in figures)} ({time.perf_counter() - start:.1f} s)")
    figures_bar.close()
    captions = {stem: str(captions[stem]) for stem in sorted(captions) if stem in TITLES
                and ((stage / f"{stem}.png").exists() or (out / f"{stem}.png").exists())}
    (stage / "captions.json").write_text(json.dumps(captions, indent=2) + "\n")
    write_index(stage, captions)
    return written

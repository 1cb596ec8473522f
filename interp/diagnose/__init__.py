"""``glitchlens diagnose``: one checkpoint in, one self-contained report of its attention out.

Pure orchestration of :mod:`interp.evaluate`, :mod:`interp.metrics` and :mod:`interp.plots`:

1. Evaluate on the canonical splits (the first ``n`` sequences of each), keeping every read:
   the glitch table (every wrong read) and the error rate by dependency length.
2. Run the model on the first ``n_cache_sequences`` sequences of FFL(0.8) (the iid split's
   generator) at each length in ``lengths``, with hooks on every layer's
   ``blocks.{l}.attn.hook_pattern`` (and, at the probe length, ``hook_attn_scores`` and
   ``hook_view_*`` where the mechanism has them). Each layer's maps are reduced to metric
   rows as soon as that layer has produced them all, so at most one layer's
   ``[batch, head, T, T]`` maps are alive (every layer of a ``mini`` model at T = 2048 would
   take gigabytes): :func:`interp.metrics.capture_maps` streams them.
3. Draw the plots and write the files.

Choices:

- The *probe length* is the run length closest to 512, the canonical length (ties: the
  shorter). What the papers follow across lengths is measured at every length: the
  pattern's sparsity, survivors, max |a|, entropy and sinks (TDA Fig. 1c, Fig. 4). What
  they report at one length is measured at the probe length only: the views, the
  cross-view correlation, the logit tails (TDA Fig. 1a-b, Fig. 5, Table 7), the dispersion
  curve, the two retrieval probes and the heatmaps. At T = 2048 those would cost more than
  the forward pass.
- A length the model cannot take (APE beyond ``n_ctx``) makes its forward raise
  ``ValueError``; that length is skipped with the error's first line as the reason.
- The heatmap shows the final layer of the cached sequence with the most wrong reads, in a
  window of ``heatmap_tokens`` tokens ending just after its first wrong read (or the last
  tokens when it has none): a 512 x 512 map is an unreadable blur.
- Error rate by dependency length uses the token distance from the read to its last write,
  in power-of-two bins (lower edge reported).

Files written to ``out_dir``: ``report.html`` (one file of about 2.5 MB that opens offline
and fits a window 1400 px wide: :mod:`interp.diagnose.report`), ``metrics.json``,
``metrics.csv`` (the tidy frame of :mod:`interp.metrics`: columns ``layer, head, metric,
value, map, seq_len`` plus metric-specific ones; rows with a ``query_pos`` are the dispersion
curve at the probe length, mean over heads; rows with a ``split`` are the error rates by
dependency length), ``glitches.csv`` (one row per wrong read: ``split, seq, position,
write_pos, dependency_length, ignores_since, n_writes, true_bit, pred_bit``), with ``png``
PNGs of the key plots (the report draws them all, interactive), and ``browser.html``, the
glitch browser (:mod:`interp.diagnose.browser`: each glitch's attention at every layer and
head, its direct logit attribution and its patching).

The modules: ``run`` (the evaluation's error rates and the attention runs), ``summary`` (what
metrics.json and metrics.csv hold, every field documented there, and the printed table),
``report`` (the page) and ``sections`` (its sections and their texts).
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from interp.diagnose.report import Figures, render_html
from interp.diagnose.run import LengthRun, attention_hooks, errors_by_dependency, run_lengths
from interp.diagnose.sections import report_sections, specimen_name
from interp.diagnose.summary import (ATTENTION_FIELDS, FIELDS, Diagnosis, attention_fields, plain, require_finite,
                                     tidy_frame)
from interp.evaluate import BATCH_SIZE, checkpoint_task, evaluate_reads
from interp.metrics import DEFAULT_LENGTHS
from interp.outputs import check_free, moved, staged, writable_dir
from models.attention.tda import threshold_betas


# written by every diagnosis, checked before the work starts (the PNGs are checked before they move)
OUTPUT_FILES = ("report.html", "metrics.json", "metrics.csv", "glitches.csv", "browser.html")


def diagnose(checkpoint_path, out_dir, splits: Sequence[str] = ("iid", "sparse", "dense"), n: int | None = 32,
             lengths: Sequence[int] = DEFAULT_LENGTHS, n_cache_sequences: int = 2, sink_keys: Sequence[int] = (0, 1, 2, 3),
             sink_threshold: float = 0.3, heatmap_tokens: int = 128, probe_sequences: int = 16,
             batch_size: int = BATCH_SIZE, device: str = "cpu", progress: bool = False,
             overwrite: bool = False, png: bool = False) -> Diagnosis:
    """Diagnose a checkpoint and write report.html, metrics.json, metrics.csv, glitches.csv
    and browser.html into ``out_dir`` (see the module docstring). ``n``: sequences per split (None:
    all); ``probe_sequences``: iid sequences the linear probes are fitted and scored on. The defaults keep a ``mini`` checkpoint under a minute on a 2-core CPU.
    ``png``: also the PNGs of the key plots, drawn again with matplotlib (another task's report
    has none). ``progress``: a bar on stderr, one step per split evaluated, per layer of each
    attention run and per stage after them, saying which is running. ``overwrite``: replace files in
    ``out_dir`` that this command did not write (:mod:`interp.outputs`). A checkpoint of another
    task is diagnosed on its own task's splits (:func:`interp.diagnose.task.diagnose_task`)."""
    from models import load, read_config

    task = checkpoint_task(read_config(checkpoint_path))
    if task != "flipflop":   # its own splits, tokens and answers; the lengths are flip-flop's
        from interp.diagnose.task import diagnose_task

        return diagnose_task(checkpoint_path, out_dir, task, n=n, n_cache_sequences=n_cache_sequences,
                             probe_sequences=probe_sequences, batch_size=batch_size, device=device,
                             overwrite=overwrite)
    check_free(writable_dir(out_dir), OUTPUT_FILES, overwrite)  # before minutes of work, not after
    settings = {"splits": list(splits), "n": n, "lengths": list(lengths), "n_cache_sequences": n_cache_sequences,
                "sink_keys": list(sink_keys), "sink_eps": sink_threshold, "heatmap_tokens": heatmap_tokens,
                "probe_sequences": probe_sequences, "batch_size": batch_size, "device": device}
    timings, clock = {}, [time.perf_counter()]
    # steps: loading, each split, each layer at each length (counted once the model is loaded), metrics, report
    bar = tqdm(total=len(splits) + 3, desc="diagnose", unit="step", leave=False, disable=not progress)

    def lap(stage: str, doing_next: str, steps: int = 1):
        clock.append(time.perf_counter())
        timings[stage] = clock[-1] - clock[-2]
        bar.update(steps)
        bar.set_postfix_str(doing_next)   # drawn now: the next stage may be long

    bar.set_postfix_str("loading the model")
    model = require_finite(load(checkpoint_path, device=device), checkpoint_path, "diagnosis")
    layers, names = attention_hooks(model)
    bar.total += len(set(lengths)) * len(layers)
    lap("load", "evaluating")
    evaluation, tables = {}, []
    for split in splits:  # a split at a time, so that the bar moves
        bar.set_postfix_str(f"evaluating {split}")
        results, table = evaluate_reads(model, [split], n, batch_size)
        evaluation |= results
        tables.append(table)
        bar.update()
    reads = pd.concat(tables, ignore_index=True)
    rates = errors_by_dependency(reads)
    glitches = reads[~reads.correct].drop(columns="correct")
    glitches = glitches[["split", *glitches.columns.drop("split")]].reset_index(drop=True)
    lap("evaluate", "measuring attention", steps=0)
    runs, probe_length, skipped_lengths = (run_lengths(model, layers, names, lengths, n_cache_sequences, sink_keys,
                                                       bar) if layers else ({}, None, {}))
    lap("attention", "linear probes", steps=0)
    linear_probes = flipflop_probes(model, probe_sequences)
    lap("probes", "computing the metrics", steps=0)
    probe = runs.get(probe_length)
    frame = tidy_frame(runs, probe_length, rates)
    metrics = {
        "checkpoint": str(checkpoint_path), "model": model.cfg.model, "config": model.cfg.to_dict(),
        "threshold_beta": [beta.item() for beta in threshold_betas(model)] or None, "settings": settings, "evaluation": {name: r.to_dict() for name, r in evaluation.items()},
        "glitches": {"total": len(glitches), "by_split": {s: int((glitches.split == s).sum()) for s in splits}},
        "error_by_dependency": rates[["split", "dependency_length", "n_reads", "n_errors", "error_rate"]]
        .to_dict("records"), "linear_probes": linear_probes,
        **dict.fromkeys(ATTENTION_FIELDS), "skipped": {},
    }
    if probe is None:
        reason = (f"{model.cfg.model} has no attention layers (no blocks.*.attn.hook_pattern)" if not layers else
                  "no requested length could be run: " + "; ".join(f"{T}: {r}" for T, r in skipped_lengths.items()))
        metrics["skipped"] = dict.fromkeys(ATTENTION_FIELDS, reason)
    else:
        metrics |= attention_fields(model.cfg.model, names, frame, runs, probe_length, skipped_lengths, settings)
    if linear_probes is None:
        metrics["skipped"]["linear_probes"] = f"the {model.cfg.model} model has no residual stream (no blocks) to probe"
    if metrics["threshold_beta"] is None:
        metrics["skipped"]["threshold_beta"] = f"{model.cfg.model} has no threshold layer (only trela and tda do)"
    bar.set_postfix_str("the glitch browser")
    browser = glitch_browser(model, checkpoint_path, reads, n)
    lap("metrics", "drawing the report")
    with staged(out_dir, overwrite, OUTPUT_FILES) as stage:
        files = write_outputs(stage, metrics, frame, glitches, rates, probe, browser, png)
        lap("report", "done")
        bar.refresh()   # the last state is drawn, whatever tqdm's minimum interval between draws
        bar.close()
        metrics["timings_s"] = {**timings, "total": clock[-1] - clock[0]}
        files["metrics_json"].write_text(json.dumps(plain(metrics), indent=2, allow_nan=False) + "\n")
    files = moved(files, stage, out_dir)
    return Diagnosis(Path(out_dir), plain(metrics), frame, glitches, files)


def flipflop_probes(model, sequences: int) -> dict | None:
    """The ``linear_probes`` field of metrics.json (:mod:`interp.diagnose.summary`): the
    flip-flop task's probe label at every layer, on the first ``sequences`` iid sequences;
    None for a model without a residual stream."""
    from interp.diagnose.task import run_probes
    from interp.tasks import get_task

    if not hasattr(model, "blocks"):
        return None
    probes, meaning = run_probes(model, get_task("flipflop"), "iid", sequences, None)
    return {"label": meaning, "split": "iid", "sequences": sequences, "per_layer": probes.to_dict("records")}


def glitch_browser(model, checkpoint_path, reads: pd.DataFrame, n: int | None) -> str:
    """browser.html (:mod:`interp.diagnose.browser`) of the glitches among ``reads`` (the
    evaluation's :func:`~interp.metrics.read_table` rows with ``split``), each split's first
    ``n`` sequences."""
    from interp.diagnose.browser import glitch_views, render
    from interp.diagnose.circuits import glitch_circuits
    from interp.tasks import ZERO, get_task, load_split

    task = get_task("flipflop")
    splits = list(dict.fromkeys(reads.split))
    inputs = {split: load_split(split, n)[:, :-1] for split in splits}
    answers = reads.assign(target=ZERO + reads.true_bit)[["split", "seq", "position", "target", "correct"]]
    wrong = reads[~reads.correct]
    glitches = wrong.assign(target=wrong.true_bit.astype(str),
                            predicted=np.where(wrong.pred_bit >= 0, wrong.pred_bit.astype(str), "not a bit"))
    compute, skipped = glitch_circuits(model, task, inputs, answers)
    views = glitch_views(model, task, inputs, glitches[["split", "seq", "position", "target", "predicted"]], compute)
    counts = {split: int((glitches.split == split).sum()) for split in splits}
    return render(f"GlitchLens glitches: {checkpoint_path} ({model.cfg.model})", task.description, counts, views,
                  skipped)




def write_outputs(out_dir: Path, metrics: dict, frame: pd.DataFrame, glitches: pd.DataFrame, rates: pd.DataFrame,
                  probe: LengthRun | None, browser: str, png: bool) -> dict[str, Path]:
    """report.html, the CSVs, browser.html (the page ``browser``) and, with ``png``, the PNGs;
    records every file (metrics.json, written last by the caller, included) in ``metrics["files"]``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    figures = Figures(out_dir, files, png)
    sections = report_sections(metrics, frame, glitches, rates, probe, figures)
    files |= {"metrics_csv": out_dir / "metrics.csv", "glitches_csv": out_dir / "glitches.csv",
              "report": out_dir / "report.html", "metrics_json": out_dir / "metrics.json",
              "browser": out_dir / "browser.html"}
    files["browser"].write_text(browser)
    if metrics["linear_probes"] is not None:
        files["probes_csv"] = out_dir / "probes.csv"
        pd.DataFrame(metrics["linear_probes"]["per_layer"]).to_csv(files["probes_csv"], index=False)
    frame.to_csv(files["metrics_csv"], index=False)
    glitches.to_csv(files["glitches_csv"], index=False)
    metrics["files"] = {kind: path.name for kind, path in files.items()}
    settings, config = metrics["settings"], metrics["config"]
    meta = [f"checkpoint <code>{html.escape(metrics['checkpoint'])}</code>",
            "config: " + ", ".join(f"{k}={config[k]}" for k in ("n_layers", "n_heads", "d_model", "n_ctx", "attention",
                                                               "pos_embed", "attention_options")),
            "every glitch's attention, direct logit attribution and patching: <a href='browser.html'>browser.html</a>",
            f"evaluated on the first {settings['n']} sequences of each split; attention measured on "
            f"{settings['n_cache_sequences']} FFL(0.8) sequences per length; files: "
            + ", ".join(sorted(metrics["files"].values()))]
    title = f"GlitchLens diagnosis: {specimen_name(metrics)} ({metrics['model']})"
    files["report"].write_text(render_html(title, meta, sections, figures.specs))
    return files

"""``glitchlens diagnose`` of a checkpoint trained on a registered task other than flip-flop and
the automaton (counting, selective copy, a task of one's own): the flip-flop report's parts that
do not depend on flip-flop's reads and writes.

1. Evaluate on the task's canonical splits (the first ``n`` sequences of each): error rate and
   sequence accuracy, and one row per wrong answer (``split, seq, position, target,
   predicted, margin``; tokens as the task's strings) in ``glitches.csv``.
2. Run the model with hooks on every layer's ``hook_pattern`` on the first ``n_cache_sequences``
   sequences of the first in-distribution split: the pattern's sparsity, max |a| and entropy per
   layer and head (:mod:`interp.metrics`), in ``metrics.csv``.
3. Heatmaps of every head of the last layer on the first of those sequences, in a window of
   ``heatmap_tokens`` tokens ending just after its first wrong answer (or its first scored
   position when it has none), labelled by the task's tokens and coloured by their roles, each
   scored position's evidence cell outlined (:func:`interp.plots.task_heatmap_grid`).

``report.html`` (one page that opens offline) holds the tables and the interactive heatmap;
``metrics.json`` everything above. The heatmap is drawn with plotly only: a static PNG of it
costs seconds of matplotlib text layout (``interp.plots.save`` draws one from the notebook).
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from interp.diagnose.summary import Diagnosis
from interp.evaluate import BATCH_SIZE, predict_reads, summarise
from interp.metrics import capture_maps, entropy_summary, max_abs_weight, sparsity
from interp.outputs import check_free, writable_dir
from interp.tasks import get_task


FILES = ("report.html", "metrics.json", "metrics.csv", "glitches.csv")


class TaskDiagnosis(Diagnosis):
    """What :func:`diagnose_task` wrote, as :class:`~interp.diagnose.summary.Diagnosis`; its
    table rows are the task's error rates."""

    def summary_rows(self) -> list[tuple[str, str, str]]:
        """(quantity, value, detail) rows of the printed table: each split's error rate."""
        return [(f"{split} error rate", f"{r['error_rate']:.2e}",
                 f"{r['read_errors']} of {r['reads']} answers wrong; {100 * r['sequence_accuracy']:.1f}% of "
                 f"{r['sequences']} sequences right") for split, r in self.metrics["evaluation"].items()]


def heatmap_window(scored: np.ndarray, wrong: list[int], n: int, tokens: int) -> tuple[int, int]:
    """``tokens`` positions ending just after the first wrong answer (else the first scored one)."""
    anchor = wrong[0] if wrong else int(np.argmax(scored))
    stop = min(n, max(anchor + 2, tokens))
    return max(0, stop - tokens), stop


def diagnose_task(checkpoint_path, out_dir, task_name: str, n: int | None = 32, n_cache_sequences: int = 2,
                  heatmap_tokens: int = 96, batch_size: int = BATCH_SIZE, device: str = "cpu",
                  overwrite: bool = False) -> TaskDiagnosis:
    """Diagnose a checkpoint of the registered task ``task_name``; see the module docstring. A file
    of these names already in ``out_dir`` that glitchlens did not write is refused unless ``overwrite``."""
    from interp.plots import layer_head_panels, task_heatmap_grid, to_html
    from models import load

    task = get_task(task_name)
    out_dir = Path(writable_dir(out_dir))
    check_free(out_dir, FILES, overwrite)
    start = time.perf_counter()
    model = load(checkpoint_path, device=device)
    evaluation, rows = {}, []
    for split in task.splits:
        tokens = task.load_split(split, None if n is None else min(n, task.splits[split].size))
        reads = predict_reads(model, tokens, batch_size, task=task)
        evaluation[split] = summarise(split, len(tokens), reads, task).to_dict()
        wrong = ~task.is_correct(reads.predicted, reads.target)
        rows += [{"split": split, "seq": int(s), "position": int(p), "target": task.vocab[int(t)],
                  "predicted": task.vocab[int(q)], "margin": float(m)}
                 for s, p, t, q, m in zip(reads.sequence[wrong], reads.position[wrong], reads.target[wrong],
                                          reads.predicted[wrong], reads.margin[wrong])]
    glitches = pd.DataFrame(rows, columns=["split", "seq", "position", "target", "predicted", "margin"])
    probe_split = next(name for name, s in task.splits.items() if s.in_distribution)
    inputs, _, scored = task.model_io(task.load_split(probe_split, min(n_cache_sequences,
                                                                       task.splits[probe_split].size)))
    logits, maps = capture_maps(model, inputs, ["pattern"])
    pattern = maps["pattern"]
    frame = pd.concat([sparsity(pattern), max_abs_weight(pattern), entropy_summary(pattern)], ignore_index=True)
    first = glitches[(glitches.split == probe_split) & (glitches.seq == 0)].position.tolist()
    window = heatmap_window(scored[0], first, inputs.shape[1], heatmap_tokens)
    last = max(pattern)
    fig = task_heatmap_grid(layer_head_panels({last: pattern[last]}), task, inputs[0], wrong=first, window=window)
    files = {"report": out_dir / "report.html", "metrics_json": out_dir / "metrics.json",
             "metrics_csv": out_dir / "metrics.csv", "glitches_csv": out_dir / "glitches.csv"}
    frame.to_csv(files["metrics_csv"], index=False)
    glitches.to_csv(files["glitches_csv"], index=False)
    metrics = {"checkpoint": str(checkpoint_path), "model": model.cfg.model, "task": task.name,
               "config": model.cfg.to_dict(), "evaluation": evaluation,
               "settings": {"n": n, "n_cache_sequences": n_cache_sequences, "heatmap_tokens": heatmap_tokens,
                            "heatmap_window": list(window), "probe_split": probe_split},
               "glitches": {"total": len(glitches), "by_split": glitches.split.value_counts().to_dict()},
               "attention": frame.to_dict("records"),
               "files": {kind: path.name for kind, path in files.items()},
               "timings_s": {"total": time.perf_counter() - start}}
    table = pd.DataFrame(evaluation.values()).to_html(index=False)
    files["report"].write_text(
        f"<!doctype html><meta charset='utf-8'><title>GlitchLens diagnosis: {html.escape(task.name)}</title>"
        f"<h1>{html.escape(str(checkpoint_path))} ({html.escape(model.cfg.model)}) on the {html.escape(task.name)} "
        f"task</h1><p>{html.escape(task.description)}</p><h2>Error rates</h2>{table}"
        f"<h2>Wrong answers (first 50 of {len(glitches)})</h2>{glitches.head(50).to_html(index=False)}"
        f"<h2>Attention of layer {last}, {probe_split} sequence 0</h2><p>Tokens coloured by role, wrong answers "
        f"red; each answer's evidence cell outlined.</p>{to_html(fig)}")
    files["metrics_json"].write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    return TaskDiagnosis(out_dir, metrics, frame, glitches, files)

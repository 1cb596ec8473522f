"""``glitchlens diagnose`` of a checkpoint trained on a registered task other than flip-flop (the
automaton, counting, selective copy, a task of one's own): the flip-flop report's sections, with
the task's own tokens, scored positions and answers.

1. Evaluate on the task's canonical splits (the first ``n`` sequences of each): error rate and
   sequence accuracy, and one row per wrong answer, a *glitch* (``split, seq, position, target,
   predicted, margin``; tokens as the task's strings), in ``glitches.csv``.
2. Run the model with hooks on every layer's ``hook_pattern`` on the first ``n_cache_sequences``
   sequences of the first in-distribution split: the pattern's sparsity, max |a| and entropy per
   layer and head (:mod:`interp.metrics`), in ``metrics.csv``.
3. The attention of every head at the first glitch (of the in-distribution split if it has
   one): the keys each head weighs most at the glitch's position; and that glitch's direct
   logit attribution and activation patching (:mod:`interp.diagnose.circuits`).
4. Linear probes per layer for the label the task declares (``Task.probe_labels``; by default
   the right answer at each scored position) on the first ``probe_sequences`` sequences of the
   in-distribution split: held-out accuracy with its interval (:mod:`interp.metrics.store`).
5. Heatmaps of every head of the last layer on the first of the cached sequences, in a window of
   ``heatmap_tokens`` tokens ending just after its first wrong answer (or its first scored
   position when it has none), labelled by the task's tokens and coloured by their roles, each
   scored position's evidence cell outlined (:func:`interp.plots.task_heatmap_grid`).
6. The glitch browser (``browser.html``, :mod:`interp.diagnose.browser`).

``report.html`` (one page that opens offline) holds the tables and the interactive heatmap;
``metrics.json`` everything above; ``probes.csv`` the probes. An analysis that does not apply (no
glitch, a model without blocks) is skipped, its reason in ``metrics.json["skipped"]`` and in the
report. Every file goes through the staged writer of :mod:`interp.outputs`.
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from interp.diagnose.browser import glitch_views, render
from interp.diagnose.summary import Diagnosis, plain
from interp.evaluate import BATCH_SIZE, predict_reads, summarise
from interp.metrics import capture_maps, entropy_summary, max_abs_weight, sparsity
from interp.metrics.store import cache_activations, linear_probes, probe_labels
from interp.outputs import moved, staged, writable_dir
from interp.tasks import get_task

FILES = ("report.html", "metrics.json", "metrics.csv", "glitches.csv", "browser.html")
TOP_KEYS = 3          # keys per head named at the glitch


class TaskDiagnosis(Diagnosis):
    """What :func:`diagnose_task` wrote, as :class:`~interp.diagnose.summary.Diagnosis`; its
    table rows are the task's error rates, the glitches and the best probe."""

    def summary_rows(self) -> list[tuple[str, str, str]]:
        """(quantity, value, detail) rows of the printed table."""
        m = self.metrics
        rows = [(f"{split} error rate", f"{r['error_rate']:.2e}",
                 f"{r['read_errors']} of {r['reads']} answers wrong; {100 * r['sequence_accuracy']:.1f}% of "
                 f"{r['sequences']} sequences right") for split, r in m["evaluation"].items()]
        rows.append(("glitches", str(m["glitches"]["total"]), "rows of glitches.csv; browse them in browser.html"))
        if m["probes"]:
            best = max(m["probes"], key=lambda p: p["accuracy"])
            rows.append((f"probe of {m['probe_label']}", f"{best['accuracy']:.3f}",
                         f"held-out accuracy at layer {best['layer']} ({best['low']:.3f}-{best['high']:.3f}; "
                         f"always the commonest label: {best['baseline']:.3f})"))
        return rows + [(part, "skipped", reason) for part, reason in m["skipped"].items()]


def heatmap_window(scored: np.ndarray, wrong: list[int], n: int, tokens: int) -> tuple[int, int]:
    """``tokens`` positions ending just after the first wrong answer (else the first scored one)."""
    anchor = wrong[0] if wrong else int(np.argmax(scored))
    stop = min(n, max(anchor + 2, tokens))
    return max(0, stop - tokens), stop


def recorded_task(checkpoint_path, task_name: str | None) -> str:
    """The task ``checkpoint_path`` was trained on; ``task_name``, when given, must be that one:
    a tool never runs a model on another task's data."""
    from interp.evaluate import checkpoint_task
    from models import read_config

    task = checkpoint_task(read_config(checkpoint_path))
    if task_name is not None and task_name != task:
        raise ValueError(f"{checkpoint_path} was trained on the {task} task, not {task_name}: leave the task out or "
                         "name its own")
    return task


def evaluate_glitches(model, task, n: int | None, batch_size: int
                      ) -> tuple[dict, pd.DataFrame, pd.DataFrame, dict]:
    """Each split's error rates, every wrong answer as a row (``split, seq, position, target,
    predicted, margin``; the task's strings), every answer (``split, seq, position, target,
    correct``; token ids) and ``{split: the inputs the model read}``."""
    evaluation, rows, answers, inputs = {}, [], [], {}
    for split in task.splits:
        tokens = task.load_split(split, None if n is None else min(n, task.splits[split].size))
        inputs[split] = task.model_io(tokens)[0]
        reads = predict_reads(model, tokens, batch_size, task=task)
        evaluation[split] = summarise(split, len(tokens), reads, task).to_dict()
        wrong = ~task.is_correct(reads.predicted, reads.target)
        answers.append(pd.DataFrame({"split": split, "seq": reads.sequence, "position": reads.position,
                                     "target": reads.target, "correct": ~wrong}))
        rows += [{"split": split, "seq": int(s), "position": int(p), "target": task.vocab[int(t)],
                  "predicted": task.vocab[int(q)], "margin": float(m)}
                 for s, p, t, q, m in zip(reads.sequence[wrong], reads.position[wrong], reads.target[wrong],
                                          reads.predicted[wrong], reads.margin[wrong])]
    glitches = pd.DataFrame(rows, columns=["split", "seq", "position", "target", "predicted", "margin"])
    return evaluation, glitches, pd.concat(answers, ignore_index=True), inputs


def heads_at(view: dict) -> list[dict]:
    """Per layer and head, the :data:`TOP_KEYS` keys of largest weight in ``hook_pattern`` at a
    browser view's glitch: ``[{layer, head, keys: "pos (token) weight, ..."}]``."""
    out = []
    for layer, head, values in view["maps"].get("pattern", []):
        top = np.argsort(-np.asarray(values, dtype=float), kind="stable")[:TOP_KEYS]   # NaN (None) last
        out.append({"layer": layer, "head": head, "keys": ", ".join(
            f"{view['start'] + k} ({view['tokens'][k]}) {values[k]:.3f}" for k in top)})
    return out


def run_probes(model, task, split: str, n: int, spill_dir: Path | None) -> tuple[pd.DataFrame, str]:
    """:func:`~interp.metrics.store.linear_probes` per layer on the first ``n`` sequences of
    ``split``, activations spilled (past the store's bound) into ``spill_dir``."""
    inputs, labels, where, meaning = probe_labels(task, task.load_split(split, min(n, task.splits[split].size)))
    with cache_activations(model, inputs, where, spill_dir=spill_dir) as store:
        return linear_probes(store, labels, meaning), meaning


def diagnose_task(checkpoint_path, out_dir, task_name: str | None = None, n: int | None = 32,
                  n_cache_sequences: int = 2, heatmap_tokens: int = 96, probe_sequences: int = 16,
                  batch_size: int = BATCH_SIZE, device: str = "cpu", overwrite: bool = False) -> TaskDiagnosis:
    """Diagnose a checkpoint of a registered task (the one it records; ``task_name``, when given,
    must be that one); see the module docstring. A file of these names already in ``out_dir``
    that glitchlens did not write is refused unless ``overwrite``."""
    from interp.diagnose.summary import require_finite
    from interp.diagnose.circuits import glitch_circuits
    from interp.plots import layer_head_panels, task_heatmap_grid, to_html
    from models import load

    task = get_task(recorded_task(checkpoint_path, task_name))
    with staged(writable_dir(out_dir), overwrite, FILES) as stage:
        start = time.perf_counter()
        model = require_finite(load(checkpoint_path, device=device), checkpoint_path, "diagnosis")
        evaluation, glitches, answers, inputs = evaluate_glitches(model, task, n, batch_size)
        probe_split = next(name for name, s in task.splits.items() if s.in_distribution)
        skipped, metrics_rows, probes, meaning, at_glitch, fig = {}, pd.DataFrame(), pd.DataFrame(), "", None, None
        circuits, skipped_circuits = glitch_circuits(model, task, inputs, answers)
        if hasattr(model, "blocks"):
            cached = inputs[probe_split][:n_cache_sequences]
            _, maps = capture_maps(model, cached, ["pattern"])
            pattern = maps["pattern"]
            metrics_rows = pd.concat([sparsity(pattern), max_abs_weight(pattern), entropy_summary(pattern)],
                                     ignore_index=True)
            first = glitches[(glitches.split == probe_split) & (glitches.seq == 0)].position.tolist()
            scored = task.model_io(task.load_split(probe_split, 1))[2][0]
            window = heatmap_window(scored, first, cached.shape[1], heatmap_tokens)
            last = max(pattern)
            fig = task_heatmap_grid(layer_head_panels({last: pattern[last]}), task, cached[0], wrong=first,
                                    window=window)
            probes, meaning = run_probes(model, task, probe_split, probe_sequences, stage)
        else:
            reason = f"the {model.cfg.model} model has no attention layers or residual stream"
            skipped |= {"attention": reason, "probes": reason}
        skipped |= skipped_circuits
        ordered = pd.concat([glitches[glitches.split == probe_split], glitches[glitches.split != probe_split]])
        views = glitch_views(model, task, inputs, ordered, circuits)
        if views and "maps" in views[0]:
            at_glitch = {**{k: views[0][k] for k in ("split", "seq", "position", "target", "predicted")},
                         "heads": heads_at(views[0]), "dla": views[0].get("dla"), "patching": views[0].get("patching")}
        else:
            skipped["glitch"] = "no split has a glitch in these sequences"
        files = {"report": stage / "report.html", "metrics_json": stage / "metrics.json",
                 "metrics_csv": stage / "metrics.csv", "glitches_csv": stage / "glitches.csv",
                 "browser": stage / "browser.html"}
        if len(probes):
            files["probes_csv"] = stage / "probes.csv"
            probes.to_csv(files["probes_csv"], index=False)
        metrics_rows.to_csv(files["metrics_csv"], index=False)
        glitches.to_csv(files["glitches_csv"], index=False)
        title = f"GlitchLens glitches: {checkpoint_path} ({model.cfg.model}) on the {task.name} task"
        files["browser"].write_text(render(title, task.description,
                                           glitches.split.value_counts(sort=False).reindex(task.splits, fill_value=0)
                                           .to_dict(), views, skipped_circuits))
        metrics = plain({
            "checkpoint": str(checkpoint_path), "model": model.cfg.model, "task": task.name,
            "config": model.cfg.to_dict(), "evaluation": evaluation,
            "settings": {"n": n, "n_cache_sequences": n_cache_sequences, "heatmap_tokens": heatmap_tokens,
                         "probe_sequences": probe_sequences, "probe_split": probe_split},
            "glitches": {"total": len(glitches), "by_split": glitches.split.value_counts().to_dict()},
            "attention": metrics_rows.to_dict("records"), "at_glitch": at_glitch,
            "probe_label": meaning, "probes": probes.to_dict("records"), "skipped": skipped,
            "files": {kind: path.name for kind, path in files.items()},
            "timings_s": {"total": time.perf_counter() - start}})
        files["report"].write_text(report_html(checkpoint_path, model.cfg.model, task, metrics, glitches, probes,
                                               fig, to_html))
        files["metrics_json"].write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    files = moved(files, stage, out_dir)
    return TaskDiagnosis(Path(out_dir), metrics, metrics_rows, glitches, files)


def _table(rows: list, columns: list[str]) -> str:
    return pd.DataFrame(rows, columns=columns).to_html(index=False) if rows else "<p>none</p>"


def report_html(checkpoint_path, model_name: str, task, metrics: dict, glitches: pd.DataFrame,
                probes: pd.DataFrame, fig, to_html) -> str:
    """report.html: the sections of the module docstring, each skipped one with its reason."""
    esc = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>GlitchLens diagnosis: {esc(task.name)}</title>",
             f"<h1>{esc(str(checkpoint_path))} ({esc(model_name)}) on the {esc(task.name)} task</h1>",
             f"<p>{esc(task.description)}. Every glitch's attention, DLA and patching: "
             "<a href='browser.html'>browser.html</a>.</p>",
             *(f"<p><b>Skipped: {esc(part)}</b>: {esc(reason)}.</p>" for part, reason in metrics["skipped"].items()),
             "<h2>Error rates</h2>", pd.DataFrame(metrics["evaluation"].values()).to_html(index=False),
             f"<h2>Glitches (first 50 of {len(glitches)})</h2>",
             "<p>Each wrong answer: its split, sequence and position, the right answer and the prediction.</p>",
             glitches.head(50).to_html(index=False)]
    glitch = metrics["at_glitch"]
    if glitch:
        where = f"{glitch['split']} sequence {glitch['seq']}, position {glitch['position']}"
        parts += [f"<h2>The heads at the glitch of {esc(where)}</h2>",
                  f"<p>Right answer {esc(glitch['target'])}, predicted {esc(glitch['predicted'])}. The keys each "
                  f"head weighs most at that position (position, token, weight):</p>",
                  _table(glitch["heads"], ["layer", "head", "keys"]),
                  "<h2>Direct logit attribution and patching of that glitch</h2>",
                  "<p>What each component writes straight into the task's margin there (the right answer's logit "
                  "minus the best other answer's), the largest first; then the share of the margin gap to another "
                  "sequence answered right at that position that patching the component alone, from that sequence "
                  "into the glitch, closes (<code>restored</code>).</p>",
                  _table(glitch["dla"] or [], ["component", "attribution"]),
                  _table(glitch["patching"] or [], ["component", "restored"])]
    parts.append(f"<h2>Linear probes of {esc(metrics['probe_label'] or 'the task label')}</h2>")
    if len(probes):
        parts += ["<p>A linear read-out per layer, fitted on four sequences in five and scored on the fifth: "
                  "held-out accuracy, its 95% Wilson interval, and the accuracy of always answering the "
                  "commonest label.</p>", probes.to_html(index=False)]
    if fig is not None:
        parts += ["<h2>Attention of the last layer</h2><p>Tokens coloured by role, wrong answers red; each answer's "
                  "evidence cell outlined.</p>", to_html(fig)]
    return "".join(parts)

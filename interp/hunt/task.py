"""``glitchlens hunt`` of a checkpoint trained on a registered task other than flip-flop (the
automaton, counting, selective copy, a task of one's own): random sampling only. The guided search
edits flip-flop instructions, which other tasks do not have; here each split's own generator (its
parameters, at its length) draws ``budget`` fresh sequences from ``seed``, the model scores them
(:func:`interp.evaluate.predict_reads`), and the sequences with a wrong answer are the failures,
each with its lowest margin.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from interp.evaluate import BATCH_SIZE, predict_reads
from interp.outputs import moved, staged
from interp.tasks import get_task
from interp.tasks.registry import write_token_file

# Offsets each split's stream from the hunt's seed, so that no split repeats another's draws.
SPLIT_STREAM = 104_729


def hunt_task(model, task_name: str, budget: int = 1024, seed: int = 0, batch_size: int = BATCH_SIZE) -> dict:
    """For each split of the task: ``budget`` fresh sequences from ``default_rng([seed, SPLIT_STREAM, k])``
    (split ``k``), the answer and sequence error rates on them, and the failing sequences (token
    arrays, lowest margin first) under ``"failing"``."""
    task = get_task(task_name)
    found = {}
    for k, (name, split) in enumerate(task.splits.items()):
        tokens = task.sample(budget, split.seq_len, [seed, SPLIT_STREAM, k], **split.params)
        reads = predict_reads(model, tokens, batch_size, task=task)
        wrong = ~task.is_correct(reads.predicted, reads.target)
        lowest = np.full(len(tokens), np.inf)
        np.minimum.at(lowest, reads.sequence, reads.margin)
        failing = np.unique(reads.sequence[wrong])
        failing = failing[np.argsort(lowest[failing], kind="stable")]
        first = {int(s): int(p) for s, p in zip(reads.sequence[wrong][::-1], reads.position[wrong][::-1])}
        found[name] = {"params": dict(split.params), "seq_len": split.seq_len, "scored": len(tokens),
                       "answers": len(wrong), "answer_error_rate": float(wrong.mean()) if len(wrong) else 0.0,
                       "failing_sequences": len(failing), "sequence_error_rate": len(failing) / len(tokens),
                       "first_wrong_positions": [first[int(s)] for s in failing[:10]],
                       "failing": tokens[failing]}
    return {"task": task.name, "budget": budget, "seed": seed, "splits": found}


def summary(result: dict) -> dict:
    """``result`` without the token arrays (what ``hunt.json`` holds)."""
    return {**result, "splits": {name: {k: v for k, v in r.items() if k != "failing"}
                                 for name, r in result["splits"].items()}}


def write_task_hunt(result: dict, out_dir, overwrite: bool = False) -> dict[str, Path]:
    """``hunt.json`` and, per split with failures, ``failing-SPLIT.jsonl`` (:func:`write_token_file`),
    written through the staged writer of :mod:`interp.outputs`: a file of these names in
    ``out_dir`` that glitchlens did not write (a sequence file of one's own, a link) is refused
    unless ``overwrite``, and nothing moves."""
    task = get_task(result["task"])
    with staged(out_dir, overwrite, ("hunt.json",)) as stage:
        files = {f"failing-{name}": write_token_file(task, r["failing"], stage / f"failing-{name}.jsonl")
                 for name, r in result["splits"].items() if len(r["failing"])}
        files["json"] = stage / "hunt.json"
        files["json"].write_text(json.dumps({**summary(result), "files": {k: p.name for k, p in files.items()
                                                                         if k != "json"}}, indent=2) + "\n")
    return moved(files, stage, out_dir)

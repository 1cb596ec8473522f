"""``glitchlens reproduce cope-tasks``: the CoPE paper's comparison on its own tasks (Golovneva et al.,
Sec. 5.2-5.3, Tables 2-4, 9 and 10) at CPU scale.

CoPE, RoPE, APE and REL on counting with 1 and 3 variables and on selective copy, seeds 0-2: 36
runs, each a :class:`interp.studies.specimens.Specimen` trained and evaluated as the other studies' runs
(:func:`interp.studies.registry.run_study`): ``OUT/runs/NAME/result.json`` is written when a run ends, a
finished run is read back, an unfinished one resumes from its last checkpoint (every 100 steps).

The set-up, fixed before any run:

- size: 2 layers x 2 heads, d_model 64, the paper's for selective copy; the paper gives none for
  counting, which gets the same;
- training: :data:`STEPS` steps of batch 16 at lr 1e-3 with the ``cpu-learning`` recipe (the
  paper's 100k steps for selective copy, and its unstated counting budget, are a GPU's work; its
  optimiser settings are given only for flip-flop), at each task's training length (counting 512
  tokens, selective copy 769); counting draws from its 10,000-sequence pool;
- evaluation: every sequence of every split (1000 each): the answer error rate (the paper's "test
  error" is not defined further) and the sequence accuracy.

:func:`cope_tasks_summary` sets the mean and standard deviation over seeds beside the paper's
numbers (:data:`PAPER_ERROR`).
"""

from __future__ import annotations

import pandas as pd

from interp.studies.specimens import Specimen

MODELS = ("cope", "rope", "ape", "rel")
TASKS = ("counting", "counting-3", "selective-copy")
SEEDS = (0, 1, 2)
STEPS = 2000
SIZE = {"n_layers": 2, "n_heads": 2, "d_model": 64}
RECIPE = "cpu-learning"
# The paper's test error (%) per task, model and split: Tables 2 and 3-4 (means) with Tables 9-10's
# standard deviations; None where it reports none. Table 4's OOD columns are on 1 variable; REL is its
# "Relative PE".
PAPER_ERROR = {
    ("counting", "ape"): {"iid": (5.3, 0.8)}, ("counting", "rel"): {"iid": (1.1, 0.4), "long": (8.8, 1.1),
                                                                   "short": (34.1, 2.5)},
    ("counting", "cope"): {"iid": (0.0, 0.0), "long": (0.0, 0.0), "short": (4.0, 4.1)},
    ("counting-3", "ape"): {"iid": (67.6, 1.5)}, ("counting-3", "rel"): {"iid": (17.8, 7.8)},
    ("counting-3", "cope"): {"iid": (1.2, 2.1)},
    ("selective-copy", "ape"): {"iid": (16.9, 3.7), "dense": (25.6, 3.8), "sparse": (85.2, 8.4)},
    ("selective-copy", "rope"): {"iid": (40.1, 3.5), "dense": (100.0, 0.0), "sparse": (100.0, 0.0)},
    ("selective-copy", "cope"): {"iid": (0.0, 0.0), "dense": (0.0, 0.0), "sparse": (0.004, 0.006)},
}


def cope_task_run(task: str, model: str, seed: int) -> Specimen:
    """One run of the study (see the module docstring)."""
    from interp.tasks import get_task

    return Specimen(model, "tiny", {"task": task, "seq_len": get_task(task).seq_len, "batch_size": 16,
                                    "steps": STEPS, "lr": 1e-3, "seed": seed}, RECIPE, model_fields=dict(SIZE))


def cope_tasks_runs() -> dict[str, Specimen]:
    """Task by task, the cheapest first (counting is about a third of selective copy's cost a run),
    then seed by seed: an interrupted sweep has whole comparisons, every model at every seed, for the
    tasks it reached."""
    return {f"{task}-{model}-seed{seed}": cope_task_run(task, model, seed)
            for task in TASKS for seed in SEEDS for model in MODELS}


def task_evaluation(model, train_cfg, eval_n: int | None) -> dict:
    """``splits``: the first ``eval_n`` sequences of each of the run's task's splits."""
    from interp.evaluate import evaluate_splits

    return {"task": train_cfg.task,
            "splits": {name: r.to_dict() for name, r in evaluate_splits(model, n=eval_n, task=train_cfg.task).items()}}


def cope_tasks_table(results: list[dict]) -> pd.DataFrame:
    """One row per run and split: ``task, model, seed, split``, the answer ``error_rate`` (%), the
    ``sequence_accuracy`` and the counts."""
    return pd.DataFrame([{"name": r["name"], "task": r["task"], "model": r["model"], "seed": r["seed"], "split": split,
                          "error_rate": 100 * s["error_rate"], "sequence_accuracy": s["sequence_accuracy"],
                          "answers": s["reads"], "wrong": s["read_errors"]}
                         for r in results for split, s in r["splits"].items()])


def cope_tasks_summary(frame: pd.DataFrame) -> str:
    """Mean (standard deviation) over seeds of the answer error rate, per task, model and split,
    beside the paper's (no sd from a single seed)."""
    lines = ["| task | model | split | seeds | error % (sd) | paper % (sd) |", "|---|---|---|---|---|---|"]
    for (task, model, split), runs in frame.groupby(["task", "model", "split"], sort=False):
        paper = PAPER_ERROR.get((task, model), {}).get(split)
        spread = f" ({runs.error_rate.std(ddof=1):.1f})" if len(runs) > 1 else ""
        lines.append(f"| {task} | {model} | {split} | {len(runs)} | {runs.error_rate.mean():.1f}{spread} | "
                     + (f"{paper[0]} ({paper[1]}) |" if paper else "- |"))
    return (f"CoPE's tasks at CPU scale: 2 x 2 x 64, {STEPS} steps of batch 16 at lr 1e-3 ({RECIPE}); error: "
            "wrong answers over all answers of each split's 1000 sequences. Paper: Tables 2-4, 9, 10.\n\n"
            + "\n".join(lines) + "\n")

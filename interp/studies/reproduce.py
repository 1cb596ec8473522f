"""``glitchlens reproduce table1``: the TRA paper's Table 1 (full-sequence accuracy on the
flip-flop ``iid``, ``sparse`` and ``dense`` splits), for every model, over seeds.

Each (model, seed) run trains on fresh FFL(0.8) at T = 512 with the clean loss, evaluates on
the three canonical splits and writes ``runs/<model>-seed<seed>/result.json`` next to its
checkpoint. A run whose ``result.json`` exists is skipped and an unfinished run continues from
its last checkpoint (every 100 steps), so an interrupted sweep resumes where it stopped. Runs go
``jobs`` at a time, one torch thread each, or as one-CPU tasks on a Ray cluster (``interp.studies.sweeps``).

Scales (the same for every model: no model is tuned more than another):

- ``paper``: the TRA paper's set-up, ``mini`` preset, lr 1e-4, batch 64, 25k steps (a GPU job).
- ``cpu``: the ``cpu-learning-authors`` recipe (``tiny`` with 4 heads, the TRA authors' block,
  init and optimiser, beta_init = 0 for the rectified mechanisms) trained where Table 1 is
  measured, at T = 512: lr 1e-3, batch 16, 1000 steps, one torch thread. Evaluated on all of
  ``iid`` (1000) and ``dense`` (3000) and the first 10,000 of the 100,000 ``sparse`` sequences
  (the whole of ``sparse`` costs about as much as the training itself on 2 cores; ``glitchlens
  eval RUN --splits sparse`` completes it). A TRA or TDA step takes about 0.4-0.6 s on one core
  of the 2-core development machine (7-10 minutes a run), the softmax baselines about half.
- ``learning``: ``tiny`` with 4 heads (recipe ``cpu-learning``, or any other with ``reproduce
  recipes``) at T = 128 (docs/results/learning.md "Learning on CPU"): did a mechanism learn the task
  at all, apart from carrying it to longer sequences.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from interp.outputs import staged
from interp.studies.scales import SCALES, Scale
from interp.studies.seed_groups import PlannedRun, read_result, run_groups, train_alone
from interp.studies.sweeps import run_all

if TYPE_CHECKING:  # pandas costs a second to import: only the commands that tabulate import it
    import pandas as pd

TABLE1_MODELS = ("nope", "ape", "rel", "rope", "label", "fot", "diff", "cope", "tra", "tda", "trela", "lstm")
SPLIT_ORDER = ("iid", "dense", "sparse")

# TRA paper, Table 1: full-sequence accuracy (%), mean and standard deviation over 4 seeds.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "nope": {"iid": (100, 0), "dense": (0.15, 0.0), "sparse": (99.97, 0.1)},
    "ape": {"iid": (100, 0), "dense": (27.38, 13.1), "sparse": (90.61, 5.64)},
    "rel": {"iid": (100, 0), "dense": (41.2, 47.29), "sparse": (70.48, 10.92)},
    "rope": {"iid": (100, 0), "dense": (100, 0), "sparse": (72.82, 1.27)},
    "label": {"iid": (100, 0), "dense": (12.58, 15.87), "sparse": (86.93, 9.93)},
    "fot": {"iid": (100, 0), "dense": (100, 0), "sparse": (93.4, 4.21)},
    "diff": {"iid": (100, 0), "dense": (100, 0), "sparse": (77.8, 6.73)},
    "cope": {"iid": (100, 0), "dense": (100, 0), "sparse": (95.1, 4.4)},
    "tra": {"iid": (100, 0), "dense": (100, 0), "sparse": (100, 0)},
}


def configs(model: str, seed: int, scale: Scale):
    """The ``(ModelConfig, TrainConfig)`` of one run of a sweep."""
    from interp.training.recipes import run_configs

    return run_configs(model, scale.preset, scale.recipe, training={
        **scale.training(seed), "eval_every": scale.eval_every, "eval_n": QUICK_EVAL_N, "checkpoint_every": 100})


# Sequences per split of the quick checks during training; the learning step is the first
# check at which all of them are right.
QUICK_EVAL_N = 100
# Held-out FFL(0.8) sequences at the training length (interp.tasks.held_out) each run reads.
HELD_OUT_N = 1000


def run_name(model: str, seed: int) -> str:
    """The directory of one run of a sweep, under ``out/runs``."""
    return f"{model}-seed{seed}"


def run_one(model: str, seed: int, scale: Scale, out: str, device: str = "cpu") -> dict:
    """Train and evaluate one (model, seed) on ``device``; return its result (read from disk if
    done). The result names the device: runs of one configuration differ between devices by
    float rounding."""
    return train_alone(table1_run(model, seed, scale, out, device), device)


def table1_run(model: str, seed: int, scale: Scale, out: str | Path, device: str) -> PlannedRun:
    """One (model, seed) of a Table 1 sweep in ``out`` as ``interp.studies.seed_groups`` trains it."""
    return PlannedRun(str(out), run_name(model, seed), *configs(model, seed, scale),
                      table1_header(model, seed, scale, device), scale.eval_n, flipflop_evaluation)


def table1_header(model: str, seed: int, scale: Scale, device: str) -> dict:
    """What a Table 1 run's ``result.json`` records before its evaluation."""
    return {"model": model, "seed": seed, "scale": asdict(scale), "device": device}


def flipflop_evaluation(model, train_cfg, eval_n: int | None) -> dict:
    """``splits``: the canonical splits (the first ``eval_n`` sequences of each); ``held_out``:
    ``HELD_OUT_N`` held-out FFL(0.8) sequences of the training length, or ``eval_n`` if fewer
    (a smoke-test scale's few sequences)."""
    from interp.evaluate import evaluate_splits, evaluate_tokens
    from interp.tasks import held_out

    evaluation = evaluate_splits(model, SPLIT_ORDER, n=eval_n)
    n_held_out = HELD_OUT_N if eval_n is None else min(HELD_OUT_N, eval_n)
    return {"splits": {name: r.to_dict() for name, r in evaluation.items()},
            "held_out": evaluate_tokens(model, held_out(n_held_out, train_cfg.seq_len), "held-out").to_dict()}


def check_configs(models: tuple[str, ...], scale: Scale) -> None:
    """Build the configs of every run of a sweep, so that a bad name (a model, a recipe) fails
    before the first run starts rather than after the others."""
    for model in models:
        configs(model, 0, scale)


def check_finished_at(out: Path, runs: dict[str, tuple], scale: Scale) -> None:
    """Refuse to go on with a sweep in ``out`` that holds finished runs of another scale (another
    ``--steps``, say): they would be read back as this sweep's own. Before any run starts."""
    from interp.outputs import read_json

    wanted = asdict(scale)
    for name in runs:
        result_file = out / "runs" / name / "result.json"
        if not result_file.exists():
            continue
        saved = read_json(result_file, "run result")
        if not isinstance(saved, dict):
            read_result(result_file)   # says what the file is not
        trained = saved["scale"] if isinstance(saved.get("scale"), dict) else {}
        differs = ", ".join(f"{field} {trained.get(field)!r}, not {value!r}"
                            for field, value in wanted.items() if trained.get(field) != value)
        if differs:
            raise ValueError(f"{result_file.parent} is a finished run of another scale ({differs}): "
                             "give each scale and --steps an --out of its own")


def check_device(device: str, ray_address: str | None) -> None:
    """Refuse, before any run starts, a device the runs could not use (each would fail alike),
    and a device other than the CPU on Ray, whose tasks ask for one CPU and no GPU."""
    import torch

    from models.checkpoint import on_device

    if ray_address and device != "cpu":
        raise ValueError(f"--device {device} with --ray: the Ray tasks ask for one CPU each, no GPU; "
                         "run a GPU sweep on its machine without --ray")
    on_device(torch.empty(0), device)


def sweep(out: Path, scale: Scale, models: tuple[str, ...], seeds: int, jobs: int,
          ray_address: str | None = None, device: str = "cpu", batch_seeds: bool = False) -> list[dict]:
    """Every (model, seed) of ``scale`` under ``out/runs``, ``jobs`` processes at a time on ``device``
    or on the Ray cluster at ``ray_address``: one per run or, with ``batch_seeds``, one per model
    whose seeds train as one batched model (:mod:`interp.studies.seed_groups`); finished runs are
    read back, unfinished ones resume. Results in ``models`` order, then by seed; raises
    ``interp.studies.sweeps.SweepFailed`` after the last run if any failed."""
    check_device(device, ray_address)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    # seed by seed, in the order of ``models``, so that an interrupted sweep has every model's
    # first seeds, and the runs wanted first (the specimens) come first when named first
    runs = {run_name(model, seed): (model, seed, scale, str(out), device)
            for seed in range(seeds) for model in models}
    check_finished_at(out, runs, scale)
    if batch_seeds:
        run_groups([table1_run(*args[:2], scale, out, device) for args in runs.values()], jobs, ray_address, device)
        results = finished_runs(out, models, seeds)
    else:
        results = run_all(run_one, runs, jobs, ray_address)
    return sorted(results, key=lambda r: (models.index(r["model"]), r["seed"]))


def finished_runs(out: Path, models: tuple[str, ...], seeds: int) -> list[dict]:
    """The results of the runs of a sweep under ``out/runs`` that have finished, in ``models``
    order, then by seed."""
    files = [out / "runs" / run_name(model, seed) / "result.json" for model in models for seed in range(seeds)]
    return [read_result(f) for f in files if f.exists()]


def recipe_result(result: dict) -> dict:
    """``result`` if it holds what a recipes row reads (the held-out accuracy, the learning curve),
    else a ValueError naming the run: a result.json edited by hand, or of another sweep."""
    held = result.get("held_out")
    curve = result.get("learning_curve")
    if (not isinstance(held, dict) or not isinstance(held.get("sequence_accuracy"), (int, float))
            or not isinstance(curve, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in curve)):
        raise ValueError(f"the result.json of run {result['model']}-seed{result['seed']} holds no held_out accuracy "
                         "and learning curve: not a run of this sweep; delete it to run that run again")
    return result


def reproduce_table1(out: str | Path, scale: str | Scale = "cpu", seeds: int = 3, jobs: int = 2,
                     models: tuple[str, ...] = TABLE1_MODELS, train: bool = True,
                     ray_address: str | None = None, device: str = "cpu", batch_seeds: bool = False) -> pd.DataFrame:
    """Run (or resume) the sweep on ``device``, or on the Ray cluster at ``ray_address`` (each
    model's seeds batched with ``batch_seeds``: :func:`sweep`), and write ``table1.csv`` and
    ``table1.md`` to ``out``; ``train=False`` writes them from the runs that have finished,
    training nothing."""
    scale = SCALES[scale] if isinstance(scale, str) else scale
    out = Path(out)
    check_configs(models, scale)
    results = (sweep(out, scale, models, seeds, jobs, ray_address, device, batch_seeds) if train
               else finished_runs(out, models, seeds))
    if not results:
        raise ValueError(f"no finished run under {out / 'runs'}: run the sweep first (without --report-only)")
    table = summarise_runs(results)
    with staged(out) as stage:   # never over a file glitchlens did not write, nor through a link
        table.to_csv(stage / "table1.csv", index=False)
        (stage / "table1.md").write_text(markdown_table(table))
    return table


def summarise_runs(results: list[dict]) -> pd.DataFrame:
    """One row per (model, split): mean and std over seeds of full-sequence accuracy (%) and
    of the read error rate, the seeds at >= 99% full-sequence accuracy (``learned``; on
    ``iid``, the criterion of a model that learned the task), next to the paper's accuracy where it reports one."""
    import pandas as pd

    rows = [{"model": r["model"], "split": split, "seed": r["seed"],
             "accuracy": 100 * s["sequence_accuracy"], "error_rate": s["error_rate"]}
            for r in results for split, s in r["splits"].items()]
    frame = pd.DataFrame(rows)
    table = (frame.groupby(["model", "split"], sort=False)
             .agg(seeds=("seed", "count"), learned=("accuracy", lambda a: int((a >= 100 * LEARNED).sum())),
                  accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"),
                  error_rate_mean=("error_rate", "mean"), error_rate_std=("error_rate", "std"))
             .reset_index())
    paper = [PAPER_TABLE1.get(m, {}).get(s, (float("nan"), float("nan"))) for m, s in zip(table.model, table.split)]
    table["paper_accuracy_mean"] = [p[0] for p in paper]
    table["paper_accuracy_std"] = [p[1] for p in paper]
    return table


def markdown_table(table: pd.DataFrame) -> str:
    """Models as columns, splits as rows, ``ours (paper)`` in each cell, as in the paper."""
    import pandas as pd

    def cell(row) -> str:
        spread = "" if pd.isna(row.accuracy_std) else f" ± {row.accuracy_std:.2f}"   # one seed: no spread
        ours = f"{row.accuracy_mean:.2f}{spread}"
        if pd.isna(row.paper_accuracy_mean):
            return ours
        return f"{ours} ({row.paper_accuracy_mean:g} ± {row.paper_accuracy_std:g})"

    models = list(dict.fromkeys(table.model))
    lines = ["| split | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for split in SPLIT_ORDER:
        cells = {row.model: cell(row) for row in table[table.split == split].itertuples()}
        lines.append(f"| {split} | " + " | ".join(cells.get(m, "") for m in models) + " |")
    iid = {row.model: f"{row.learned}/{row.seeds}" for row in table[table.split == "iid"].itertuples()}
    lines.append("| seeds at >= 99% iid | " + " | ".join(iid.get(m, "") for m in models) + " |")
    return ("Full-sequence accuracy (%), mean ± std over seeds; the TRA paper's Table 1 in parentheses.\n\n"
            + "\n".join(lines) + "\n")


LEARNED = 0.99   # full-sequence accuracy that counts as learned (issue: >= 99%)


def reproduce_recipes(out: str | Path, recipes: tuple[str, ...], models: tuple[str, ...], seeds: int = 3,
                      jobs: int = 2, scale: str | Scale = "cpu", ray_address: str | None = None,
                      device: str = "cpu", train: bool = True, batch_seeds: bool = False) -> pd.DataFrame:
    """Which recipe learns: every (recipe, model, seed) at ``scale`` with that recipe, under
    ``out/<recipe>``; writes ``recipes.csv`` and ``recipes.md`` to ``out``. A seed has learned
    when its full-sequence accuracy on ``HELD_OUT_N`` held-out FFL(0.8) sequences of the
    training length is >= 99% (at T = 512 that is the ``iid`` distribution; the canonical
    ``iid`` split's accuracy is reported beside it, which at a shorter training length also
    measures extrapolation); its learning step is the first quick check at which all
    ``QUICK_EVAL_N`` iid sequences were right. Runs on ``device``, or on the Ray cluster at
    ``ray_address`` if given (each model's seeds batched with ``batch_seeds``); ``train=False``
    writes the report from the runs that have finished, training nothing."""
    from dataclasses import replace

    import pandas as pd

    scale = SCALES[scale] if isinstance(scale, str) else scale
    out = Path(out)
    for recipe in recipes:  # every name checked before the first sweep starts
        check_configs(models, replace(scale, recipe=recipe))
    rows = []
    for recipe in recipes:
        runs = (sweep(out / recipe, replace(scale, recipe=recipe), models, seeds, jobs, ray_address, device,
                      batch_seeds) if train
                else finished_runs(out / recipe, models, seeds))
        for r in map(recipe_result, runs):
            held = r["held_out"]["sequence_accuracy"]
            first = next((step for step, accuracy in r["learning_curve"] if accuracy >= 1.0), None)
            rows.append({"recipe": recipe, "model": r["model"], "seed": r["seed"], "held_out": held,
                         "iid": r["splits"]["iid"]["sequence_accuracy"], "learned": held >= LEARNED,
                         "first_perfect_check": first})
    if not rows:
        raise ValueError(f"no finished run under {out}/<recipe>/runs: run the sweep first (without --report-only)")
    frame = pd.DataFrame(rows)
    with staged(out) as stage:   # never over a file glitchlens did not write, nor through a link
        frame.to_csv(stage / "recipes.csv", index=False)
        (stage / "recipes.md").write_text(recipes_markdown(frame))
    return frame


def recipes_markdown(frame: pd.DataFrame) -> str:
    """Recipes as rows, models as columns; each cell ``learned/seeds``, each seed's held-out
    and ``iid`` accuracy, and the mean step of the first perfect quick check of those that learned."""
    def cell(runs: pd.DataFrame) -> str:
        accuracies = ", ".join(f"{100 * h:.1f}/{100 * i:.1f}" for h, i in zip(runs.held_out, runs.iid))
        steps = runs.first_perfect_check[runs.learned].dropna()
        timing = f"; step {steps.mean():.0f}" if len(steps) else ""
        return f"{int(runs.learned.sum())}/{len(runs)} ({accuracies}{timing})"

    models = list(dict.fromkeys(frame.model))
    lines = ["| recipe | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for recipe, runs in frame.groupby("recipe", sort=False):
        lines.append(f"| {recipe} | " + " | ".join(cell(runs[runs.model == m]) for m in models) + " |")
    return ("Seeds at >= 99% full-sequence accuracy on held-out sequences of the training length / seeds "
            "(each seed's held-out/iid accuracy, %; mean step of the first perfect quick check).\n\n"
            + "\n".join(lines) + "\n")

"""The seeds of a sweep's configuration trained as one batched model: what ``glitchlens campaign``
and ``glitchlens reproduce --batch-seeds`` share.

A :class:`PlannedRun` is one run of a study as its sweep names it: its directory under
``SWEEP/runs/NAME``, its configs, what its ``result.json`` records before the evaluation, and the
evaluation. :func:`group_runs` puts the runs of one configuration but for the seed into one
:class:`Group`, trained as one model by :func:`interp.training.batched.train_batched`; a run that
cannot be batched (:func:`interp.training.batched.unbatchable`) is a group of its own, trained by
the sweeps' :func:`train_and_evaluate`. Either way each run's directory is
the per-run path's: its checkpoint, ``log.jsonl`` and ``result.json``
(:func:`write_result`, with the study's evaluation), so the reports,
``glitchlens claims``, resumption and the result committer read them alike. A group also takes
the checkpoint step its runs resume from: the batched trainer starts every seed at one step, so
the seeds a stopped sweep left at different steps train in one group per step.

:func:`batching` decides ``--batch-seeds auto``: batched on CUDA, seed by seed (one process each,
``--jobs`` at a time) on the CPU. The batched model runs each mechanism's explicit attention
(:data:`interp.training.batched.BATCHED_IMPL`, the only one that batches on every device), where a
run alone takes the CPU's fast paths (SDPA, the fused row kernels), and its ``[seed, batch, head,
query, key]`` tensors outgrow the caches. Measured on the 2-core development machine, one torch
thread, one seed alone against the seeds batched, at cope-tasks' shape (2 layers x 2 heads x
d_model 64, counting at T = 512, batch 16; 5 steps timed after the first, rounds interleaved, the
best round of each; two training processes at nice 5 and other work held the cores, so the
rounds varied by up to 3x): a step of 3 seeds batched cost 4.95x one seed's with RoPE, 5.2x with
Shaw, 5.9x with APE and 8.2x with CoPE (3 rounds), that is 1.65-2.75x each seed's step alone;
5 seeds batched cost 13.6-47x (2 rounds). Batching there is slower even on one core, and it takes
the seeds' parallelism away from ``--jobs``. ``glitchlens bench seeds`` (:func:`interp.bench.bench_seeds`) times it at Table 1's
size, side by side, on whatever device the machine has. (At smaller shapes batching costs less: 3 seeds
batched cost 1.48x one seed at the tests' tiny size and 2.9x at d_model 64, T = 128, as measured
for the campaign; at the latter, ``learning``'s and App. A's T = 128, that saves 3% of the core
time, within these measurements' noise, so the rule does not look at the shape.) On a GPU a step is bound by its kernel launches rather than its
arithmetic, and batched seeds share each launch: in the committed H200 campaign log
(``runs/gpu/campaign-h200.jsonl``, 8 groups sharing the card, logged before the batched step kept
to the explicit attention) groups of 2-3 batched cope-tasks seeds made 13.9-35.0 runs x steps per
second where runs alone made 8.4-21.3 steps per second.

Resuming: runs whose ``result.json`` exists are read back, not trained; the others of a
configuration train as one group from their checkpoints (a group of one seed trains alone, as
the per-run path does). A batched group saves every seed's checkpoint every :data:`CHECKPOINT_S`
seconds and when stopped (Ctrl-C, SIGTERM, the sweep's stop), where a run alone saves every
``checkpoint_every`` steps; a checkpoint of either kind resumes in either.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from interp.outputs import read_bytes, staged_file

# Seconds between a batched group's checkpoints (a run alone saves every ``checkpoint_every`` steps)
CHECKPOINT_S = 120.0
BATCH_SEEDS = ("auto", "on", "off")


def learning_curve(run_dir: Path) -> list[tuple[int, float]]:
    """``(step, iid full-sequence accuracy)`` of every quick check in a run's ``log.jsonl``."""
    records = [json.loads(line) for line in read_bytes(run_dir / "log.jsonl", "training log").decode().splitlines()]
    return [(r["step"], r["eval"]["iid"]["sequence_accuracy"]) for r in records if "eval" in r]


def train_and_evaluate(run_dir: Path, run_configs: tuple, header: dict, eval_n: int | None,
                       evaluate, device: str = "cpu") -> dict:
    """Train one run of a sweep in ``run_dir`` (resuming it if it stopped) on one torch thread,
    evaluate it (``evaluate(model, train_cfg, eval_n)``, e.g. :func:`interp.studies.reproduce.flipflop_evaluation`)
    and write ``result.json`` atomically: ``header``, the learning curve and the evaluation. A run
    whose ``result.json`` exists is read back, not trained again."""
    import torch

    from interp.training.loop import train

    result_file = run_dir / "result.json"
    if result_file.exists():
        return read_result(result_file)
    torch.set_num_threads(1)
    model_cfg, train_cfg = run_configs
    trained = train(model_cfg, train_cfg, run_dir, resume=True, progress=False, device=device)
    return write_result(run_dir, trained, train_cfg, header, eval_n, evaluate)


def write_result(run_dir: Path, trained, train_cfg, header: dict, eval_n: int | None, evaluate) -> dict:
    """Evaluate a run's trained model and write its ``result.json`` atomically: ``header``, the
    learning curve of its ``log.jsonl`` and the evaluation (the sweeps' and the campaign's one schema)."""
    result = {**header, "learning_curve": learning_curve(run_dir), **evaluate(trained, train_cfg, eval_n)}
    with staged_file(run_dir / "result.json", overwrite=True) as tmp:   # never through a link planted there
        tmp.write_text(json.dumps(result, indent=2))
    return result


def read_result(path: Path) -> dict:
    """A finished run's ``result.json``, or a ValueError naming the file when it is not one (edited,
    truncated, or another tool's): a ``model``, a ``seed`` and ``splits`` mapping each split to its numbers."""
    from interp.outputs import read_json

    result = read_json(path, "run result")
    splits = result.get("splits") if isinstance(result, dict) else None
    if (not isinstance(splits, dict) or not isinstance(result.get("model"), str)
            or not isinstance(result.get("seed"), int) or not all(
                isinstance(s, dict) and isinstance(s.get("sequence_accuracy"), (int, float)) for s in splits.values())):
        raise ValueError(f"{path}: not the result of a finished run (a model, a seed, splits with their accuracies); "
                         "delete it to run that run again")
    return result


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its sweep directory and name, its configs, what its ``result.json``
    records before the evaluation, and the evaluation (the study's function ``(model, train_cfg,
    eval_n) -> dict``: ``interp.studies.registry.EVALUATIONS``, else flip-flop's; given by the
    caller, so this module needs no study) on the first ``eval_n`` sequences."""
    sweep: str
    name: str
    model_cfg: Any
    train_cfg: Any
    header: dict
    eval_n: int | None
    evaluation: Callable[[Any, Any, int | None], dict]

    @property
    def run_dir(self) -> Path:
        return Path(self.sweep) / "runs" / self.name


@dataclass(frozen=True)
class Group:
    """Runs trained together: the seeds of one configuration (``unbatched`` None), or one run alone
    (``unbatched``: why it is not batched)."""
    runs: tuple[PlannedRun, ...]
    unbatched: str | None

    @property
    def label(self) -> str:
        first = self.runs[0]
        seeds = ",".join(str(r.train_cfg.seed) for r in self.runs)
        return f"{first.sweep}/{first.name.rsplit('-seed', 1)[0]} seeds {seeds}"


def batching(choice: str, device: str) -> bool:
    """Whether ``--batch-seeds choice`` batches the seeds on ``device``: ``on``, ``off``, or ``auto``,
    batched on CUDA and not on the CPU (the module docstring); a ValueError for any other choice (the
    device itself is the sweep's to check: ``check_device``)."""
    if choice not in BATCH_SEEDS:
        raise ValueError(f"--batch-seeds {choice!r}: choose auto (batched on CUDA, one process per seed on the "
                         "CPU), on or off")
    return choice == "on" or (choice == "auto" and device.split(":")[0] == "cuda")


def group_runs(runs: list[PlannedRun], batch_one: bool = True) -> list[Group]:
    """``runs`` in groups, in the order of each group's first run: the runs of one sweep,
    configuration, evaluation and checkpoint step but for the seed in one, and each run that cannot
    be batched alone; a configuration with one seed to train is batched too if ``batch_one`` (the
    campaign's uniform path), else it trains as the per-run path does."""
    from interp.training.batched import unbatchable

    keyed: dict[str, list[PlannedRun]] = {}
    for run in runs:
        why = unbatchable(run.model_cfg, run.train_cfg)
        key = (f"{run.run_dir}" if why else
               json.dumps([run.sweep, run.eval_n, f"{run.evaluation.__module__}.{run.evaluation.__qualname__}",
                           run.model_cfg.to_dict(),
                           dataclasses.asdict(replace(run.train_cfg, seed=0)), checkpoint_step(run.run_dir)],
                          sort_keys=True, default=str))
        keyed.setdefault(key, []).append(run)
    groups = []
    for members in keyed.values():
        why = unbatchable(members[0].model_cfg, members[0].train_cfg)
        if why is None and len(members) == 1 and not batch_one:
            why = "one seed of its configuration to train: nothing to batch"
        groups.append(Group(tuple(members), why))
    return groups


def checkpoint_step(run_dir: Path) -> int:
    """The step of the checkpoint in ``run_dir`` (0 without one)."""
    import models

    if not (run_dir / models.checkpoint.CONFIG_FILE).exists():
        return 0
    return (models.read_config(run_dir).get("training") or {}).get("step", 0)


def new_record(group: Group, device: str) -> dict:
    """What :func:`train_group` fills in as it trains ``group``."""
    return {"group": group.label, "runs": [str(r.run_dir) for r in group.runs], "device": device,
            "batched": group.unbatched is None, "why_not_batched": group.unbatched, "finished": [], "steps_run": 0,
            "seconds": 0.0, "seeds_per_step": 1}


def train_group(group: Group, device: str, record_: dict, deadline: float | None = None,
                checkpoint_s: float = CHECKPOINT_S, project_after_s: float | None = None) -> None:
    """Train and evaluate ``group`` on ``device``, batched (``train_batched``'s ``deadline``,
    ``checkpoint_s`` and ``project_after_s``) or, not batchable or refused by ``vmap``, run by run
    (:func:`train_and_evaluate`); each finished run's ``result.json`` is
    written. ``record_`` (:func:`new_record`) says how it went: status, steps, seconds, the runs
    finished, the seeds that diverged, the operations ``vmap`` ran seed by seed. A stop raises
    (``BatchStopped``, ``TrainingInterrupted``: every run saved at a checkpoint)."""
    record_["status"] = "interrupted before its first step"   # until a step says otherwise
    if group.unbatched is None:
        _train_batched(group, device, deadline, checkpoint_s, project_after_s, record_)
    if not record_["batched"]:
        _train_apart(group, device, record_)


def run_groups(runs: list[PlannedRun], jobs: int, ray_address: str | None, device: str) -> None:
    """The runs of a sweep not finished yet, in groups (:func:`group_runs`; a configuration with one
    seed left trains alone, as the per-run path does), each group in a process of its own, ``jobs``
    at a time on this machine or as one-CPU tasks on the Ray cluster at ``ray_address``
    (:func:`interp.studies.sweeps.run_all`: a group that fails fails the sweep once the others ended)."""
    from interp.studies.sweeps import run_all

    groups = group_runs([run for run in runs if not (run.run_dir / "result.json").exists()], batch_one=False)
    named = {group.runs[0].name if len(group.runs) == 1 else group.label: group for group in groups}
    run_all(train_sweep_group, {name: (group, device) for name, group in named.items()}, jobs, ray_address,
            sizes={name: len(group.runs) for name, group in named.items()})


def train_alone(run: PlannedRun, device: str = "cpu") -> dict:
    """``run`` trained and evaluated alone, the per-run path (:func:`train_and_evaluate`:
    resumed from its checkpoint, or read back when finished); its result."""
    return train_and_evaluate(run.run_dir, (run.model_cfg, run.train_cfg), run.header, run.eval_n,
                              run.evaluation, device=device)


def train_sweep_group(group: Group, device: str) -> list[dict]:
    """One group of a ``glitchlens reproduce`` sweep, in its worker: :func:`train_group` on one torch
    thread; returns its runs' results. A seed that diverged fails the group, as a run alone fails
    its sweep, once the others' results are written."""
    import torch


    torch.set_num_threads(1)
    record_ = new_record(group, device)
    train_group(group, device, record_)
    diverged = record_.get("diverged")
    if diverged:
        raise RuntimeError("training diverged (a NaN or infinite loss or gradient norm): "
                           + "; ".join(f"{out} at step {step}" for out, step in diverged.items())
                           + "; each keeps its last finite checkpoint, and the group's other seeds finished")
    return [read_result(run.run_dir / "result.json") for run in group.runs]


def _train_batched(group: Group, device: str, deadline: float | None, checkpoint_s: float,
                   project_after_s: float | None, record_: dict) -> None:
    from interp.training.batched import BatchStopped, SeedRun, train_batched

    seeds = [SeedRun(r.run_dir, r.train_cfg) for r in group.runs]
    try:
        outcome = train_batched(group.runs[0].model_cfg, seeds, device, deadline, checkpoint_s,
                                project_after_s=project_after_s)
    except BatchStopped as stopped:
        record_.update(seeds_per_step=len(seeds), steps_run=stopped.steps_run, seconds=stopped.step_seconds,
                       vmap_fallbacks=stopped.fallbacks)
        raise
    except (KeyboardInterrupt, ValueError):
        raise
    except Exception as err:   # vmap refused the mechanism's reference (a RuntimeError, or its own): run by run
        record_.update(status="unbatched", batched=False, why_not_batched="vmap refused its attention's reference: "
                       + str(err).splitlines()[0][:300])
        return
    record_.update(status="trained", seeds_per_step=len(seeds), steps_run=outcome.steps_run,
                   seconds=outcome.step_seconds, diverged=outcome.diverged, vmap_fallbacks=outcome.fallbacks)
    for run in group.runs:
        if str(run.run_dir) in outcome.trained:
            write_result(run.run_dir, outcome.trained[str(run.run_dir)], run.train_cfg, run.header, run.eval_n,
                         run.evaluation)
            record_["finished"].append(str(run.run_dir / "result.json"))


def _train_apart(group: Group, device: str, record_: dict) -> None:
    """Each run alone, one after another (:func:`train_alone`)."""
    t0 = time.time()
    record_["status"] = "trained apart"
    for run in group.runs:
        try:
            train_alone(run, device)
        finally:
            steps, seconds = _logged_training(run.run_dir, t0)
            record_["steps_run"] += steps
            record_["seconds"] += seconds
        record_["finished"].append(str(run.run_dir / "result.json"))


def _logged_training(run_dir: Path, since: float) -> tuple[int, float]:
    """The steps a run's ``log.jsonl`` records since its last start, and their seconds (its loop's
    clock, quick checks included), if the log changed after ``since``."""
    log = run_dir / "log.jsonl"
    if not log.exists() or log.stat().st_mtime < since:
        return 0, 0.0
    times = [json.loads(line)["time"] for line in read_bytes(log, "training log").decode().splitlines()
             if '"loss"' in line]
    restarts = [i for i in range(1, len(times)) if times[i] < times[i - 1]]   # a resume restarts the clock
    times = times[restarts[-1]:] if restarts else times
    return len(times), (times[-1] if times else 0.0)

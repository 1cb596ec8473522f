"""``glitchlens campaign PLAN --out DIR``: many runs of the studies on one device, as fast as it goes.

A plan (a JSON file, docs/how-to/run-on-a-gpu.md "A campaign") is a list of entries in the order
of what each settles; each entry names runs of the studies by the studies' own definitions, so
they train into the studies' usual directories under their usual names and their ``result.json``
is the sweeps' own (:func:`interp.studies.seed_groups.write_result`): ``glitchlens claims`` and
``glitchlens reproduce ... --report-only`` read them as if the sweep had trained them.

Entry keys: ``out`` (the sweep's directory, e.g. ``runs/cope-tasks``, required), ``settles`` (a
note), and one of

- ``"study": "table1"`` with ``models``, ``seeds``, ``steps`` and ``scale`` (default ``cpu``): the runs of
  ``glitchlens reproduce table1 --scale SCALE --steps STEPS`` (named ``MODEL-seedSEED``);
- ``"study": "cope-tasks"`` with ``tasks``, ``models``, ``seeds`` and ``steps``: the study's runs
  (:func:`interp.studies.cope_tasks.cope_task_run`) over that grid, named ``TASK-MODEL-seedSEED``;
- ``"study": NAME`` of any other ``glitchlens reproduce`` study, with ``match`` (a glob or a list of
  them over its run names; default all);
- ``"specimens": [NAME, ...]``: pretrained entries (``glitchlens pretrained list``) trained as runs
  named after them, evaluated on the full splits.

Runs that already have a ``result.json`` are done and skipped. The others are grouped as
``glitchlens reproduce --batch-seeds`` groups them (:mod:`interp.studies.seed_groups`): the runs
of one configuration but for the seed, at one checkpoint step, train as one batched model
(:mod:`interp.training.batched`, whose log record names any operation ``vmap`` still ran seed by
seed: ``vmap_fallbacks``); a configuration that cannot be batched
(:func:`interp.training.batched.unbatchable`), or whose attention reference ``vmap`` refuses (a
mechanism of one's own), trains one process per seed
(:func:`interp.studies.seed_groups.train_and_evaluate`), and the log says which and why. ``jobs``
groups train at once, each in a process of its own, in plan order.

``--budget-s``: the campaign ends within that many seconds. Training stops ``reserve_s`` before
the end, each unfinished run at a checkpoint (and the same command resumes it); a run that
finished is evaluated and reported, an unfinished one is not. No group starts after the training
deadline, and a batched group whose first :data:`PROJECT_AFTER_S` seconds of steps project its end
past it stops then, at a checkpoint, leaving its process to the next group: a plan that does not
fit is cut from its end, and a group that cannot finish does not hold back those after it.
``--estimate`` measures each group's steps per second on the device (a few steps in a scratch
folder of ``--out``), or on CUDA where this machine has none reads them from the committed
campaign logs (:func:`logged_rates`), and prints what fits (:func:`estimate`).

What ``--out`` receives: ``campaign.jsonl`` (one record per group: its runs, whether batched,
steps, seconds, steps per second, runs x steps per second, the runs finished and, batched, the
operations ``vmap`` ran seed by seed: ``vmap_fallbacks``) and
``results.tar`` (each ``result.json`` this campaign wrote, at its path from the current directory).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import shutil
import signal
import statistics
import tarfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from interp.outputs import open_append, read_bytes, read_json, record, staged, writable_dir
from interp.studies import seed_groups
from interp.studies.seed_groups import Group, PlannedRun, checkpoint_step, group_runs, new_record

LOG_FILE = "campaign.jsonl"
TAR_FILE = "results.tar"
ENTRY_KEYS = {"out", "settles", "study", "specimens", "match", "models", "tasks", "seeds", "steps", "scale"}
GRID_KEYS = {"table1": {"models", "seeds", "steps", "scale"}, "cope-tasks": {"tasks", "models", "seeds", "steps"}}
PROBE_STEPS = 6   # steps a group trains in --estimate (the first, with its start-up, is not timed)
# Seconds of steps after which a batched group that would end past the training deadline stops at a
# checkpoint and leaves its process to the next group (the same command resumes it)
PROJECT_AFTER_S = 20.0


def read_plan(path: str | os.PathLike) -> list[dict]:
    """The entries of the plan file ``path``, each checked for its keys; a ValueError naming the
    entry and what is wrong."""
    plan = read_json(path, "campaign plan")
    entries = plan.get("entries") if isinstance(plan, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{path}: a campaign plan is a JSON object whose \"entries\" is a list of objects "
                         "(docs/how-to/run-on-a-gpu.md \"A campaign\")")
    for number, entry in enumerate(entries):
        unknown = sorted(set(entry) - ENTRY_KEYS)
        where = f"{path}: entry {number}"
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; an entry takes {sorted(ENTRY_KEYS)}")
        if not isinstance(entry.get("out"), str) or not entry["out"].strip():
            raise ValueError(f"{where}: \"out\" must name the sweep's directory, e.g. \"runs/cope-tasks\"")
        if ("study" in entry) == ("specimens" in entry):
            raise ValueError(f"{where}: name either a \"study\" or \"specimens\"")
        grid = sorted(set(entry) & {"models", "tasks", "seeds", "steps", "scale"})
        allowed = GRID_KEYS.get(entry.get("study"), set())
        if grid and not set(grid) <= allowed:
            raise ValueError(f"{where}: {grid} are grid keys of the table1 and cope-tasks studies only "
                             f"({entry.get('study') or 'specimens'} takes {sorted(allowed) or 'none'})")
    return entries


def entry_runs(entry: dict, number: int, device: str) -> list[PlannedRun]:
    """The runs entry ``number`` of a plan names, in the order the study trains them."""
    from interp.studies.registry import EVAL_N, STUDIES, planned_run
    from interp.studies.specimens import entry as pretrained_entry

    out = entry["out"]
    if "specimens" in entry:
        names = entry["specimens"] if isinstance(entry["specimens"], list) else [entry["specimens"]]
        return [planned_run("specimens", name, pretrained_entry(name).specimen, out, None) for name in names]
    study = entry["study"]
    if study == "table1":
        return _table1_runs(entry, number, device)
    if study == "cope-tasks" and set(entry) & GRID_KEYS["cope-tasks"]:
        from interp.studies import cope_tasks

        steps = _int(entry, "steps", cope_tasks.STEPS)
        runs = {}
        for task in _names(entry, "tasks", cope_tasks.TASKS):
            for seed in _ints(entry, "seeds", cope_tasks.SEEDS):
                for model in _names(entry, "models", cope_tasks.MODELS):
                    run = cope_tasks.cope_task_run(task, model, seed)
                    runs[f"{task}-{model}-seed{seed}"] = replace(run, training={**run.training, "steps": steps})
    elif study in STUDIES:
        patterns = entry.get("match", "*")
        patterns = patterns if isinstance(patterns, list) else [patterns]
        runs = {name: run for name, run in STUDIES[study]().items()
                if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
    else:
        raise ValueError(f"entry {number}: unknown study {study!r}; choose table1 or one of {', '.join(STUDIES)}")
    return [planned_run(study, name, run, out, EVAL_N) for name, run in runs.items()]


def _table1_runs(entry: dict, number: int, device: str) -> list[PlannedRun]:
    from interp.studies.reproduce import SCALES, TABLE1_MODELS, table1_run

    if entry.get("scale", "cpu") not in SCALES:
        raise ValueError(f"entry {number}: unknown scale {entry.get('scale')!r}; choose one of {', '.join(SCALES)}")
    scale = SCALES[entry.get("scale", "cpu")]
    scale = replace(scale, steps=_int(entry, "steps", scale.steps))
    return [table1_run(model, seed, scale, entry["out"], device)
            for seed in _ints(entry, "seeds", (0, 1, 2)) for model in _names(entry, "models", TABLE1_MODELS)]


def _names(entry: dict, key: str, default) -> tuple[str, ...]:
    value = entry.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"\"{key}\" must be a list of names, got {value!r}")
    return tuple(value)


def _ints(entry: dict, key: str, default) -> tuple[int, ...]:
    value = entry.get(key, list(default))
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise ValueError(f"\"{key}\" must be a list of integers >= 0, got {value!r}")
    return tuple(value)


def _int(entry: dict, key: str, default: int) -> int:
    value = entry.get(key, default)
    if type(value) is not int or value < 1:
        raise ValueError(f"\"{key}\" must be an integer >= 1, got {value!r}")
    return value


def plan_groups(entries: list[dict], device: str) -> tuple[list[Group], list[str]]:
    """The groups of the runs of ``entries`` not done yet, in plan order (a group where its first run
    is), and a line for each entry that names nothing trainable here (an unknown model, say: the
    campaign goes on without it)."""
    runs, skipped, seen = [], [], set()
    for number, entry in enumerate(entries):
        try:
            named = entry_runs(entry, number, device)
        except ValueError as err:
            skipped.append(f"entry {number} ({entry.get('settles', entry.get('study'))}) skipped: {err}")
            continue
        for run in named:
            if run.run_dir not in seen and not (run.run_dir / "result.json").exists():
                seen.add(run.run_dir)
                runs.append(run)
    return group_runs(runs), skipped


def _lines(path: Path, what: str) -> list[str]:
    """The lines of a JSON-lines file, read by the one checked reader."""
    return read_bytes(path, what).decode().splitlines()


def train_group(group: Group, device: str, deadline: float | None, checkpoint_s: float, log: str,
                campaign_id: float) -> dict:
    """Train and evaluate ``group`` (batched, or run by run: :func:`interp.studies.seed_groups.train_group`),
    append its record to ``log`` and return it; a group stopped (the deadline, a signal) says at which step."""
    import torch

    from interp.training.batched import BatchStopped
    from interp.training.setup import TrainingInterrupted

    torch.set_num_threads(1)
    record_ = {"campaign": campaign_id, **new_record(group, device)}
    try:
        if deadline is not None and time.time() >= deadline:
            record_["status"] = "not started: the training deadline had passed"
        else:
            seed_groups.train_group(group, device, record_, deadline, checkpoint_s, PROJECT_AFTER_S)
    except BatchStopped as stopped:
        record_["status"] = f"{stopped.why} at step {stopped.step} (checkpoints saved)"
    except TrainingInterrupted as stopped:
        record_["status"] = f"stopped at step {stopped.step} (checkpoint saved)"
    finally:   # also when interrupted: the log says how far each group came
        seconds = record_["seconds"]
        record_["steps_per_s"] = record_["steps_run"] / seconds if seconds else None
        record_["run_steps_per_s"] = record_["steps_run"] * record_["seeds_per_step"] / seconds if seconds else None
        with open_append(Path(log)) as f:
            f.write(json.dumps(record_) + "\n")
    return record_


def campaign(plan: str | os.PathLike, out: str | os.PathLike, device: str = "cpu", budget_s: float | None = None,
             jobs: int = 1, checkpoint_s: float = 120.0, reserve_s: float = 60.0) -> list[dict]:
    """Train the plan's runs not done yet (see the module docstring); returns the groups' records.
    A group that raised is named by :class:`interp.studies.sweeps.SweepFailed` once the others ended
    and their results are written."""
    from interp.studies.reproduce import check_device
    from interp.studies.sweeps import SweepFailed, run_all

    started = time.time()
    out = writable_dir(out)
    check_device(device, None)
    groups, skipped = plan_groups(read_plan(plan), device)
    for line in skipped:
        print(line)
    log = out / LOG_FILE
    open_append(log).close()
    record(out, [LOG_FILE])
    deadline = None if budget_s is None else started + budget_s - reserve_s
    print(f"campaign: {len(groups)} groups, {sum(len(g.runs) for g in groups)} runs to train on {device}"
          + ("" if budget_s is None else f", training until {budget_s - reserve_s:.0f} s from now"))
    timer = _stop_timer(started + budget_s - reserve_s / 2) if budget_s is not None else None
    failed = None
    try:
        run_all(train_group, {g.label: (g, device, deadline, checkpoint_s, str(log), started) for g in groups}, jobs)
    except SweepFailed as err:   # raised once the results of the others are written
        failed = err
    except KeyboardInterrupt:
        print("campaign: stopped; every unfinished run was saved at a checkpoint")
    finally:
        if timer is not None:
            timer.cancel()
    wall_s = time.time() - started
    with open_append(log) as f:   # the campaign's own line: its wall time and device, for the throughput
        f.write(json.dumps({"campaign": started, "wall_s": wall_s, "device": device,
                            "device_name": _device_name(device), "jobs": jobs, "budget_s": budget_s}) + "\n")
    records = [json.loads(line) for line in _lines(log, "campaign log") if line.strip()]
    mine = [r for r in records if r.get("campaign") == started and "group" in r]
    # every run of the plan that was not done before and is now, also those of a group stopped mid-way
    write_results_tar(out, [str(r.run_dir / "result.json") for g in groups for r in g.runs
                            if (r.run_dir / "result.json").exists()])
    print(throughput_table(mine, wall_s))
    if failed is not None:
        raise failed
    return mine


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"


def _stop_timer(at: float) -> threading.Timer:
    """A Ctrl-C to this process at ``at`` (``time.time()``): the sweep forwards it to the runs that
    train apart, which save and stop (the batched ones stop at the training deadline themselves)."""
    timer = threading.Timer(max(0.0, at - time.time()), os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer


def write_results_tar(out: Path, files: list[str]) -> None:
    """``results.tar`` in ``out``: each of ``files`` at its path (relative to the current directory)."""
    with staged(out, overwrite=False, names=[]) as stage:
        with tarfile.open(stage / TAR_FILE, "w") as tar:
            for name in files:
                data = read_json(name, "run result")
                payload = json.dumps(data, indent=2).encode()
                info = tarfile.TarInfo(Path(name).as_posix().lstrip("/"))   # as the plan names it
                info.size, info.mtime = len(payload), int(time.time())
                tar.addfile(info, io.BytesIO(payload))


# What the estimate says of a batched group's rate logged before the batched step kept to the explicit
# attention (interp.training.batched.BATCHED_IMPL), and why that rate is likely low
BEFORE_EXPLICIT = "before explicit attention"
BEFORE_EXPLICIT_WHY = ("its batched step ran SDPA, whose CUDA backward vmap ran seed by seed, so the rate now is "
                       "likely higher")

# The campaign logs committed from GPU calls (make gpu-campaign's campaign.jsonl, renamed after the card)
DEVICE_LOGS = "runs/gpu/campaign-*.jsonl"


def throughput_markdown(root: Path) -> str:
    """The device throughput of each campaign in the committed logs (:data:`DEVICE_LOGS`), by
    :func:`throughput_table`, for docs/results/benchmarks.md; a sentence while none is committed."""
    files = sorted(root.glob(DEVICE_LOGS))
    if not files:
        return ("Not measured yet: no campaign log is committed under `runs/gpu/` (`make gpu-campaign` writes "
                "`campaign.jsonl`; commit it as `runs/gpu/campaign-<card>.jsonl`).\n")
    parts = []
    for file in files:
        records = [json.loads(line) for line in _lines(file, "campaign log") if line.strip()]
        for summary in (r for r in records if "wall_s" in r):
            groups = [r for r in records if r.get("campaign") == summary["campaign"] and "group" in r]
            parts.append(f"`{file.relative_to(root)}`: {summary['device_name']}, {summary['jobs']} groups at once, "
                         f"budget {summary['budget_s']} s.\n\n" + throughput_table(groups, summary["wall_s"]))
    return "\n".join(parts)


def throughput_table(records: list[dict], wall_s: float) -> str:
    """Per group: runs, batched or not, steps, seconds, steps/s and runs x steps/s; then the
    campaign's runs x steps per second of wall time."""
    lines = ["| group | runs | batched | status | steps | seconds | steps/s | runs x steps/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        rate, run_rate = r.get("steps_per_s"), r.get("run_steps_per_s")
        lines.append(f"| {r['group']} | {len(r['runs'])} | {'yes' if r['batched'] else 'no'} | {r['status']} | "
                     f"{r['steps_run']} | {r['seconds']:.1f} | {'-' if rate is None else f'{rate:.1f}'} | "
                     f"{'-' if run_rate is None else f'{run_rate:.1f}'} |")
    run_steps = sum(r["steps_run"] * r["seeds_per_step"] for r in records)
    return ("\n".join(lines) + f"\n\n{run_steps} run-steps in {wall_s:.0f} s of wall time: "
            f"{run_steps / max(wall_s, 1e-9):.1f} runs x steps per second\n")


def estimate(plan: str | os.PathLike, out: str | os.PathLike, device: str = "cpu", budget_s: float | None = None,
             jobs: int = 1, reserve_s: float = 60.0, logs: Path = Path(".")) -> list[dict]:
    """Each group's seconds per step on ``device``, and what the plan costs: the steps left, the
    seconds, and where each group would start and end with ``jobs`` groups at once in plan order;
    with ``budget_s``, the groups that fit and those cut from the end. Returns one row per group,
    whose ``source`` says where its rate comes from.

    On a device this machine has, each group is measured (:data:`PROBE_STEPS` steps, alone, in a
    scratch folder of ``out`` removed afterwards); groups sharing the device slow each other, which
    this does not measure. On CUDA where this machine has none, the rates come from the committed
    campaign logs under ``logs`` (:func:`logged_rates`, measured with their campaign's groups at
    once): a group's own where it was measured, else the median of the groups measured trained the
    same way (batched, or run by run). The evaluations are not counted."""
    import tempfile

    import torch

    from interp.studies.reproduce import check_device

    from_logs = torch.device(device).type == "cuda" and not torch.cuda.is_available()
    if not from_logs:
        check_device(device, None)
    groups, skipped = plan_groups(read_plan(plan), device)
    for line in skipped:
        print(line)
    limit = None if budget_s is None else budget_s - reserve_s
    if from_logs:
        logged, where = logged_rates(logs)
        rows = [_logged_row(group, logged) for group in groups]
        measured = f"{device} from {where}"
    else:
        rows, measured = [], f"{device}, each group measured alone"
        scratch = Path(tempfile.mkdtemp(prefix=".campaign-estimate-", dir=writable_dir(out)))
        try:
            for number, group in enumerate(groups):
                s_per_step, batched, why = _probe(group, device, scratch / str(number))
                rows.append(_row(group, s_per_step, batched, why, f"measured here, {PROBE_STEPS} steps"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    placed = schedule([r["seconds"] for r in rows], jobs, limit,
                      [PROJECT_AFTER_S if r["batched"] else None for r in rows])
    for row, (begins, ends, fits) in zip(rows, placed):
        row |= {"begins_s": begins, "ends_s": ends, "fits": fits}
    print(estimate_table(rows, measured, jobs, limit))
    return rows


def _row(group: Group, s_per_step: float, batched: bool, why: str | None, source: str) -> dict:
    """A group's row of the estimate: its steps left (from its runs' checkpoints) and their seconds."""
    steps_left = max(r.train_cfg.steps - checkpoint_step(r.run_dir) for r in group.runs)
    return {"group": group.label, "runs": len(group.runs), "batched": batched, "why_not_batched": why,
            "s_per_step": s_per_step, "steps_left": steps_left, "source": source,
            "seconds": s_per_step * steps_left * (1 if batched else len(group.runs))}


def logged_rates(root: Path) -> tuple[dict[str, dict], str]:
    """The steps per second of every group the committed campaign logs (:data:`DEVICE_LOGS` under
    ``root``) measured, by group label: ``steps_per_s``, ``steps``, ``batched`` and ``explicit``
    (whether the batched step kept to the explicit attention: the records that name their
    ``vmap_fallbacks``), from the record with the most steps where a group was logged more than
    once; and a line naming the logs and their campaigns (device, groups at once). A ValueError
    when no log is committed."""
    files = sorted(root.glob(DEVICE_LOGS))
    if not files:
        raise ValueError(f"no CUDA device here and no campaign log under {root / DEVICE_LOGS} to estimate from: "
                         "run the estimate on the device, or pass --device cpu")
    rates: dict[str, dict] = {}
    names = []
    for file in files:
        records = [json.loads(line) for line in _lines(file, "campaign log") if line.strip()]
        names += [f"{file.relative_to(root)} ({r['device_name']}, {r['jobs']} groups at once)"
                  for r in records if "wall_s" in r]
        for r in records:
            if "group" in r and r["steps_run"] and r["seconds"] and r["steps_run"] > rates.get(r["group"], {}).get(
                    "steps", 0):
                rates[r["group"]] = {"steps_per_s": r["steps_run"] / r["seconds"], "steps": r["steps_run"],
                                     "batched": r["batched"], "explicit": "vmap_fallbacks" in r}
    return rates, ", ".join(names)


def _logged_row(group: Group, logged: dict[str, dict]) -> dict:
    """A group's row of the estimate from the logged rates: its own, else the median of the groups
    logged trained the same way (a launch-bound step's rate hardly depends on the model's size)."""
    batched = group.unbatched is None
    if group.label in logged:
        own = logged[group.label]
        older = own["batched"] and not own["explicit"]
        return _row(group, 1 / own["steps_per_s"], batched, group.unbatched,
                    f"logged, {own['steps']} steps" + (f" ({BEFORE_EXPLICIT})" if older else ""))
    kind = "batched" if batched else "run by run"
    alike = [r["steps_per_s"] for r in logged.values() if r["batched"] == batched]
    if not alike:
        raise ValueError(f"{group.label}: no group trained {kind} in the campaign logs to estimate it from; "
                         "run the estimate on the device")
    return _row(group, 1 / statistics.median(alike), batched, group.unbatched,
                f"median of {len(alike)} logged {kind}")


def schedule(seconds: list[float], jobs: int, limit: float | None,
             give_up_s: list[float | None] | None = None) -> list[tuple[float, float, bool]]:
    """Where each group of a plan begins and ends as the campaign runs them, ``jobs`` at a time in
    plan order (each on the first slot free), and whether it ends within ``limit`` seconds. One that
    would not holds its slot until ``limit`` (stopped at the deadline, at a checkpoint) or, where
    ``give_up_s`` gives it seconds (a batched group: :data:`PROJECT_AFTER_S`), that long only, as a
    batched group whose rate projects its end past the deadline stops then; one whose slot frees at
    ``limit`` or later does not start. So what does not fit is cut, and the groups after it may
    still fit."""
    slots, placed = [0.0] * jobs, []
    for number, cost in enumerate(seconds):
        slot = min(range(jobs), key=slots.__getitem__)
        begins = slots[slot]
        fits = limit is None or begins + cost <= limit
        gives_up = None if give_up_s is None else give_up_s[number]
        if fits:
            slots[slot] = begins + cost
        elif begins < limit:
            slots[slot] = limit if gives_up is None else min(limit, begins + gives_up)
        placed.append((begins, slots[slot], fits))
    return placed


def _probe(group: Group, device: str, scratch: Path) -> tuple[float, bool, str | None]:
    """Seconds per step of ``group`` on ``device``, whether it trains batched and, if not, why, from
    the step times its first :data:`PROBE_STEPS` steps log in ``scratch``."""
    from interp.training.batched import SeedRun, train_batched
    from interp.training.loop import train

    first, why = group.runs[0], group.unbatched
    until = min(PROBE_STEPS, first.train_cfg.steps)
    if why is None:
        seeds = [SeedRun(scratch / r.name, r.train_cfg) for r in group.runs]
        try:
            train_batched(first.model_cfg, seeds, device, until=until)
            return _logged_seconds_per_step(seeds[0].out), True, None
        except (KeyboardInterrupt, ValueError):
            raise
        except Exception as err:   # vmap refused the mechanism's reference
            why = "vmap refused its attention's reference: " + str(err).splitlines()[0][:200]
            shutil.rmtree(scratch, ignore_errors=True)
    train(first.model_cfg, first.train_cfg, scratch / first.name, progress=False, device=device, until=until)
    return _logged_seconds_per_step(scratch / first.name), False, why


def _logged_seconds_per_step(run_dir: Path) -> float:
    """The mean seconds between the steps a run's ``log.jsonl`` records (the first step, with its
    start-up, only starts the clock)."""
    times = [json.loads(line)["time"] for line in _lines(run_dir / "log.jsonl", "training log") if '"loss"' in line]
    return (times[-1] - times[0]) / max(1, len(times) - 1)


def estimate_table(rows: list[dict], measured: str, jobs: int, limit: float | None) -> str:
    """The estimate's table: each group's rate and where it comes from, its seconds, where it
    begins and ends, whether it fits; then the runs that fit and why groups are not batched."""
    lines = [f"Estimated for {measured}; {jobs} groups at once in plan order (evaluations not counted)"
             + ("" if limit is None else f"; training time {limit:.0f} s") + ":", "",
             "| group | runs | batched | s/step | rate from | steps left | seconds | from - to (s) | fits |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['group']} | {r['runs']} | {'yes' if r['batched'] else 'no'} | {r['s_per_step']:.4f} | "
              f"{r['source']} | {r['steps_left']} | {r['seconds']:.0f} | {r['begins_s']:.0f} - {r['ends_s']:.0f} | "
              f"{_fit(r, limit)} |" for r in rows]
    fitting = sum(r["runs"] for r in rows if r["fits"])
    reasons = sorted({f"- not batched, {r['why_not_batched']}" for r in rows if r["why_not_batched"]})
    if any(BEFORE_EXPLICIT in r["source"] for r in rows):
        reasons.append(f"- {BEFORE_EXPLICIT}: {BEFORE_EXPLICIT_WHY}")
    return ("\n".join(lines) + f"\n\n{fitting} of {sum(r['runs'] for r in rows)} runs fit.\n"
            + "".join(f"{line}\n" for line in reasons))


def _fit(row: dict, limit: float | None) -> str:
    """Whether a group of the estimate fits, is cut (trained until it stops, at a checkpoint), or
    does not start."""
    if row["fits"]:
        return "yes"
    return "not started" if row["begins_s"] >= limit else "cut"

"""``glitchlens reproduce --batch-seeds``: a study's seeds trained as one batched model leave each run's
directory as the run trained alone leaves it (result.json, checkpoint, log, up to float rounding);
a group resumes only its unfinished seeds; the choice auto, on or off, and a bad one in one line."""

import json
import shutil

import pytest
import torch

import models
from interp.cli import main
from interp.outputs import staged
from interp.studies import registry
from interp.studies.reproduce import Scale, sweep
from interp.studies.seed_groups import batching
from interp.studies.specimens import Specimen
from interp.training.batched import SeedRun, train_batched
from interp.training.loop import train

SEEDS = (0, 1, 2, 3)
STUDY = "cope-tasks"   # its evaluation is the task's own (interp.studies.cope_tasks.task_evaluation)


def tiny_study() -> dict[str, Specimen]:
    return {f"counting-cope-seed{seed}": Specimen(
        "cope", "tiny", {"task": "counting", "seq_len": 64, "batch_size": 4, "steps": 3, "lr": 1e-3, "seed": seed},
        "cpu-learning", model_fields={"n_layers": 1, "n_heads": 2, "d_model": 16}) for seed in SEEDS}


def in_process(trained: list):
    """``run_all`` run by run in this process, the names of what it was given kept in ``trained``."""
    def run_all(function, runs, jobs=2, ray_address=None, sizes=None):
        # the progress bar counts runs: a group of batched seeds counts as its seeds
        assert sizes is None or sum(sizes.values()) == sum(
            len(args[0].runs) if hasattr(args[0], "runs") else 1 for args in runs.values())
        trained.append(list(runs))
        return [function(*args) for args in runs.values()]
    return run_all


def small(patch: pytest.MonkeyPatch, trained: list) -> None:
    torch.set_num_threads(1)
    patch.setitem(registry.STUDIES, STUDY, tiny_study)
    patch.setattr(registry, "EVAL_N", 3)
    patch.setattr(registry, "QUICK_EVAL_N", 2)
    patch.setattr(registry, "run_all", in_process(trained))
    patch.setattr("interp.studies.sweeps.run_all", in_process(trained))


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """The study trained run by run, as without --batch-seeds."""
    out = tmp_path_factory.mktemp("alone")
    with pytest.MonkeyPatch.context() as patch:
        small(patch, [])
        registry.run_study(STUDY, out)
    return out


def leaves(value, at=()) -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, (*at, key)).items()}
    if isinstance(value, (list, tuple)):   # a result read back holds lists where one just written holds tuples
        return {k: v for i, item in enumerate(value) for k, v in leaves(item, (*at, i)).items()}
    return {at: value}


def assert_same_result(ours: dict, theirs: dict, what: str) -> None:
    """Equal results: their numbers up to float rounding, everything else exactly."""
    ours, theirs = leaves(ours), leaves(theirs)
    assert ours.keys() == theirs.keys(), what
    numbers = [k for k, v in theirs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert [ours[k] for k in numbers] == pytest.approx([theirs[k] for k in numbers], rel=1e-5), what
    assert {k: v for k, v in ours.items() if k not in numbers} == {k: v for k, v in theirs.items() if k not in numbers}


def assert_same_run(batched, alone) -> None:
    """The run in ``batched`` equals the one in ``alone`` up to float rounding (test_campaign's tolerance)."""
    assert_same_result(*(json.loads((d / "result.json").read_text()) for d in (batched, alone)), batched.name)
    mine, its = models.load(batched).state_dict(), models.load(alone).state_dict()
    for name, value in its.items():
        torch.testing.assert_close(mine[name], value, rtol=1e-5, atol=1e-5, msg=f"{batched.name} {name}")
    logs = [[{k: v for k, v in json.loads(line).items() if k != "time"} for line in (d / "log.jsonl").read_text()
             .splitlines()] for d in (batched, alone)]
    assert [sorted(r) for r in logs[0]] == [sorted(r) for r in logs[1]]   # the same steps, quick checks included
    losses = [[r["loss"] for r in log if "loss" in r] for log in logs]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_a_studys_seeds_batched_leave_each_run_as_trained_alone(alone, tmp_path, monkeypatch):
    trained = []
    small(monkeypatch, trained)
    registry.run_study(STUDY, tmp_path, batch_seeds=True)
    assert trained == [[f"{tmp_path}/counting-cope seeds 0,1,2,3"]], "one batched group, in one process"
    for name in tiny_study():
        assert_same_run(tmp_path / "runs" / name, alone / "runs" / name)
    assert (tmp_path / "runs.csv").read_text() == (alone / "runs.csv").read_text()


def test_a_group_trains_only_its_unfinished_seeds_from_their_checkpoints(alone, tmp_path, monkeypatch):
    """Seed 0 finished, seeds 1 and 2 stopped at step 2 by a batched run, seed 3 at step 1 alone: the
    first is read back, the next two resume as one group, the last alone (one seed: nothing to batch)."""
    trained = []
    small(monkeypatch, trained)
    shutil.copytree(alone / "runs" / "counting-cope-seed0", tmp_path / "runs" / "counting-cope-seed0")
    finished = (tmp_path / "runs" / "counting-cope-seed0" / "result.json").stat().st_mtime_ns
    planned = {name: registry.planned_run(STUDY, name, run, tmp_path, 3) for name, run in tiny_study().items()}
    stopped = [planned[f"counting-cope-seed{seed}"] for seed in (1, 2)]
    train_batched(stopped[0].model_cfg, [SeedRun(p.run_dir, p.train_cfg) for p in stopped], until=2)
    last = planned["counting-cope-seed3"]
    train(last.model_cfg, last.train_cfg, last.run_dir, progress=False, until=1)
    registry.run_study(STUDY, tmp_path, batch_seeds=True)
    assert trained == [[f"{tmp_path}/counting-cope seeds 1,2", "counting-cope-seed3"]]
    assert (tmp_path / "runs" / "counting-cope-seed0" / "result.json").stat().st_mtime_ns == finished
    for name in tiny_study():
        assert_same_run(tmp_path / "runs" / name, alone / "runs" / name)


def test_a_table1_sweep_batches_each_models_seeds(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr("interp.studies.sweeps.run_all", in_process(trained))
    monkeypatch.setattr("interp.studies.reproduce.run_all", in_process(trained))
    monkeypatch.setattr("interp.studies.reproduce.QUICK_EVAL_N", 2)
    scale = Scale(preset="tiny", steps=3, lr=1e-3, batch_size=2, recipe="cpu-learning", eval_n=2, eval_every=0,
                  seq_len=32)
    batched = sweep(tmp_path / "batched", scale, ("rope", "lstm"), seeds=2, jobs=1, batch_seeds=True)
    apart = sweep(tmp_path / "apart", scale, ("rope", "lstm"), seeds=2, jobs=1)
    assert trained[0] == [f"{tmp_path}/batched/rope seeds 0,1", "lstm-seed0", "lstm-seed1"]   # the LSTM cannot batch
    assert [(r["model"], r["seed"]) for r in batched] == [("rope", 0), ("rope", 1), ("lstm", 0), ("lstm", 1)]
    for ours, theirs in zip(batched, apart, strict=True):
        assert_same_result(ours, theirs, f"{theirs['model']}-seed{theirs['seed']}")


def write_report(out, name: str) -> None:
    with staged(out) as stage:
        (stage / name).write_text("table\n")


def test_batch_seeds_is_auto_on_or_off_and_anything_else_is_one_line(tmp_path, monkeypatch, capsys):
    from interp.studies import sweeps

    monkeypatch.setattr(sweeps, "SHOW_PROGRESS", sweeps.SHOW_PROGRESS)   # `reproduce --quiet` in this process clears it
    assert [batching(choice, device) for choice in ("auto", "on", "off") for device in ("cpu", "cuda")] == [
        False, True, True, True, False, False]   # auto: batched on CUDA only (interp.studies.seed_groups)
    chosen = []

    def run_study(study, out, *args, batch_seeds, **kwargs):
        chosen.append(batch_seeds)
        write_report(out, "summary.md")

    monkeypatch.setattr(registry, "run_study", run_study)
    for choice in ("on", "off", "auto"):
        assert main(["reproduce", STUDY, "--batch-seeds", choice, "--out", str(tmp_path / choice), "--quiet"]) == 0
    assert chosen == [True, False, False]
    capsys.readouterr()
    assert main(["reproduce", STUDY, "--batch-seeds", "yes", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err == ("glitchlens reproduce: error: --batch-seeds 'yes': choose auto (batched on CUDA, one process per "
                   "seed on the CPU), on or off\n")
    assert not (tmp_path / "bad").exists()

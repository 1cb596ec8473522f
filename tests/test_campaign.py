"""``glitchlens campaign``: the plan file, the seeds of a configuration trained as one batched model
(each seed equal to its single-seed run over 100 steps), resume after a stop, the budget cut from
the plan's end, and the result.json of the sweeps."""

import json
import time
from dataclasses import replace

import pytest
import torch

import models
from interp.studies import campaign, registry
from interp.studies.cope_tasks import cope_task_run
from interp.studies.campaign import plan_groups, read_plan, schedule
from interp.studies.seed_groups import Group, PlannedRun
from interp.studies.reproduce import flipflop_evaluation
from interp.training.batched import (
    BatchStopped, SeedRun, SeedStack, masked_mean_loss, train_batched, unbatchable, vmap_fallbacks,
)
from interp.training.loop import train
from interp.training.recipes import run_configs
from interp.training.setup import BatchSource
from models.mechanisms import MODEL_FAMILIES


def tiny_configs(model="rope", steps=100, **training):
    return run_configs(model, "tiny", "cpu-learning", {"n_layers": 1, "d_model": 16, "n_heads": 2},
                       {"seq_len": 32, "batch_size": 4, "steps": steps, "eval_every": 0, "eval_n": 2, **training})


def weights(path):
    return models.load(path).state_dict()


def write_plan(tmp_path, entries):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"entries": entries}))
    return path


def test_each_seed_of_a_batch_follows_its_single_seed_run_over_100_steps(tmp_path):
    torch.set_num_threads(1)
    model_cfg, cfg = tiny_configs()
    seeds = [SeedRun(tmp_path / f"batched{s}", replace(cfg, seed=s)) for s in (0, 1, 2)]
    outcome = train_batched(model_cfg, seeds)
    assert outcome.steps_run == 100 and not outcome.diverged
    for seed in (0, 1, 2):
        alone = train(model_cfg, replace(cfg, seed=seed), tmp_path / f"alone{seed}", progress=False).state_dict()
        batched = weights(tmp_path / f"batched{seed}")
        for name, value in alone.items():
            torch.testing.assert_close(batched[name], value, rtol=1e-5, atol=1e-5, msg=name)
        losses = [[json.loads(line)["loss"] for line in (tmp_path / f"{kind}{seed}" / "log.jsonl").read_text()
                   .splitlines() if '"loss"' in line] for kind in ("alone", "batched")]
        assert losses[0] == pytest.approx(losses[1], rel=1e-4)


# Every mechanism the campaign batches (the model families but Label and the LSTM), and the options
# that change what its attention computes
BATCHED_MECHANISMS = [(name, {}) for name in MODEL_FAMILIES if name not in ("label", "lstm")] + [
    ("shaw", {"values": True}), ("cope", {"sep_keys": True}), ("tra", {"rope": True}), ("fot", {"rope": True})]


@pytest.mark.parametrize("model, options", BATCHED_MECHANISMS,
                         ids=[name + "".join(f"-{k}" for k in options) for name, options in BATCHED_MECHANISMS])
def test_a_batched_step_runs_no_operation_seed_by_seed(model, options, monkeypatch):
    """One batched step of two seeds: vmap has a batching rule for every operation (none falls
    back to its loop over the seeds), and each seed's loss is its own model's. SDPA is not called
    at all: which of its kernels runs depends on the device and the inputs, so the batched step
    keeps to the explicit path, whose operations batch on every device."""
    def no_sdpa(*args, **kwargs):
        raise AssertionError(f"{model} {options}: SDPA under vmap (its kernel depends on the device)")
    torch.set_num_threads(1)
    model_cfg, cfg = tiny_configs(model, steps=1)
    model_cfg = replace(model_cfg, attention_options={**model_cfg.attention_options, **options})
    assert unbatchable(model_cfg, cfg) is None
    seed_models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        seed_models.append(models.build_model(model_cfg).train())
    stack = SeedStack(model_cfg, cfg, seed_models, [torch.optim.AdamW(m.parameters()) for m in seed_models],
                      torch.device("cpu"))
    batches = [BatchSource(replace(cfg, seed=seed))(0) for seed in (0, 1)]
    with monkeypatch.context() as patched, vmap_fallbacks() as fallbacks:
        patched.setattr(torch.nn.functional, "scaled_dot_product_attention", no_sdpa)
        losses, norms = stack.step(0, *(torch.stack(parts) for parts in zip(*batches)))
    assert not fallbacks, f"{model} {options}: vmap runs {', '.join(fallbacks)} seed by seed"
    assert torch.isfinite(norms).all()
    with torch.no_grad():
        alone = [masked_mean_loss(m(x), y, scored) for m, (x, y, scored) in zip(seed_models, batches)]
    torch.testing.assert_close(losses, torch.stack(alone), rtol=1e-5, atol=1e-6)


def test_a_batch_stopped_at_its_deadline_resumes_to_the_uninterrupted_result(tmp_path):
    torch.set_num_threads(1)
    model_cfg, cfg = tiny_configs(steps=8)
    whole = [SeedRun(tmp_path / f"whole{s}", replace(cfg, seed=s)) for s in (0, 1)]
    train_batched(model_cfg, whole)
    parts = [SeedRun(tmp_path / f"parts{s}", replace(cfg, seed=s)) for s in (0, 1)]
    train_batched(model_cfg, parts, until=3)   # a checkpoint at step 3, as a kill after it leaves
    with pytest.raises(BatchStopped) as stopped:
        train_batched(model_cfg, parts, deadline=time.time())   # stops after one more step, saved
    assert stopped.value.step == 4
    assert models.read_config(parts[0].out)["training"]["step"] == 4
    train_batched(model_cfg, parts)
    for s in (0, 1):
        resumed, uninterrupted = weights(tmp_path / f"parts{s}"), weights(tmp_path / f"whole{s}")
        assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)
    logs = [[{k: v for k, v in json.loads(line).items() if k != "time"}
             for line in (tmp_path / name / "log.jsonl").read_text().splitlines()] for name in ("parts0", "whole0")]
    assert logs[0] == logs[1] and [r["step"] for r in logs[0]] == [*range(1, 9), 8]   # the last: the final check


def test_what_cannot_be_batched_is_named():
    model_cfg, cfg = tiny_configs()
    assert unbatchable(model_cfg, cfg) is None
    assert "dropout" in unbatchable(replace(model_cfg, attention_dropout=0.1), cfg)
    assert "Label" in unbatchable(tiny_configs("label")[0], cfg)
    assert "LSTM" in unbatchable(tiny_configs("lstm")[0], cfg)
    assert "regularisers" in unbatchable(model_cfg, replace(cfg, regulariser="entropy", reg_coef=0.1))


@pytest.mark.parametrize("entry, message", [
    ({"study": "cope-tasks"}, "\"out\" must name"),
    ({"out": "x"}, "either a \"study\" or \"specimens\""),
    ({"out": "x", "study": "app-a", "seeds": [0]}, "grid keys"),
    ({"out": "x", "study": "table1", "colour": 1}, "unknown keys"),
])
def test_a_bad_plan_entry_is_named(tmp_path, entry, message):
    with pytest.raises(ValueError, match=message):
        read_plan(write_plan(tmp_path, [entry]))


def test_a_plan_names_the_studies_runs_in_their_directories(tmp_path):
    entries = read_plan(write_plan(tmp_path, [
        {"study": "cope-tasks", "out": str(tmp_path / "cope"), "tasks": ["selective-copy"], "models": ["cope", "ape"],
         "seeds": [3, 4]},
        {"study": "table1", "out": str(tmp_path / "t1"), "steps": 10000, "models": ["diff", "label"], "seeds": [0]},
        {"study": "cope-tasks", "out": str(tmp_path / "x"), "models": ["no-such-model"], "seeds": [0]},
        {"study": "r6-levers", "out": str(tmp_path / "r6"), "match": "*-seed4"},
    ]))
    groups, skipped = plan_groups(entries, "cpu")
    assert [g.label.rsplit("/", 1)[1] for g in groups] == [
        "selective-copy-cope seeds 3,4", "selective-copy-ape seeds 3,4", "diff seeds 0", "label seeds 0",
        "rope-embdrop0.5 seeds 4"]
    assert [g.unbatched is None for g in groups] == [True, True, True, False, False]
    assert len(skipped) == 1 and "entry 2" in skipped[0] and "no-such-model" in skipped[0]
    cope = groups[0].runs[0]
    assert cope.run_dir == tmp_path / "cope" / "runs" / "selective-copy-cope-seed3"
    assert ((cope.model_cfg, cope.train_cfg), cope.header) == registry.study_run(
        "selective-copy-cope-seed3", cope_task_run("selective-copy", "cope", 3))
    assert groups[2].runs[0].header["scale"]["steps"] == 10000 and groups[2].runs[0].train_cfg.steps == 10000


def test_the_estimate_places_the_groups_as_the_campaign_runs_them():
    # two slots, 200 s: the 300 s group is cut; batched, it gives up after 20 s, and the 10 s group fits
    placed = schedule([100, 50, 300, 10, 500], jobs=2, limit=200, give_up_s=[None, None, 20, None, None])
    assert [fits for *_, fits in placed] == [True, True, False, True, False]
    assert [(begins, ends) for begins, ends, _ in placed] == [(0, 100), (0, 50), (50, 70), (70, 80), (80, 200)]
    # run by run, a group that cannot finish holds its slot to the deadline, and none starts after it
    placed = schedule([250, 250, 10], jobs=2, limit=200)
    assert placed == [(0, 200, False), (0, 200, False), (200, 200, False)]


def test_the_estimate_for_a_device_not_here_comes_from_the_committed_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    plan = write_plan(tmp_path, [
        {"study": "cope-tasks", "out": str(tmp_path / "sweep"), "tasks": ["counting"], "models": ["ape", "rope"],
         "seeds": [0, 1], "steps": 300},
        {"study": "r6-levers", "out": str(tmp_path / "r6"), "match": "*-seed0"}])
    with pytest.raises(ValueError, match="no campaign log"):
        campaign.estimate(plan, tmp_path / "out", device="cuda", logs=tmp_path)
    (tmp_path / "runs" / "gpu").mkdir(parents=True)
    logged = [{"campaign": 1.0, "group": f"{tmp_path / 'sweep'}/counting-ape seeds 0,1", "batched": True,
               "steps_run": 100, "seconds": 10.0, "vmap_fallbacks": []},
              {"campaign": 1.0, "group": "runs/x/rope seeds 0,1", "batched": True, "steps_run": 50, "seconds": 10.0},
              {"campaign": 1.0, "group": "runs/x/other seeds 0,1", "batched": True, "steps_run": 150, "seconds": 10.0},
              {"campaign": 1.0, "group": "runs/y/apart seeds 0", "batched": False, "steps_run": 80, "seconds": 10.0},
              {"campaign": 1.0, "wall_s": 20.0, "device": "cuda", "device_name": "NVIDIA H200", "jobs": 8,
               "budget_s": 300}]
    (tmp_path / "runs/gpu/campaign-h200.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logged))
    rows = campaign.estimate(plan, tmp_path / "out", device="cuda", budget_s=1e6, logs=tmp_path)
    assert [(r["source"], r["s_per_step"], r["seconds"]) for r in rows] == [
        ("logged, 100 steps", 0.1, 30.0),                                  # its own rate, 300 steps
        ("median of 3 logged batched", 0.1, 30.0),                          # 10, 5 and 15 steps/s
        ("median of 1 logged run by run", 0.125, 125.0)]                    # 1000 steps, unbatched
    out = capsys.readouterr().out
    assert "runs/gpu/campaign-h200.jsonl (NVIDIA H200, 8 groups at once)" in out
    assert campaign.BEFORE_EXPLICIT not in out   # the one own rate logged is of the explicit batched step
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "out").exists()


def test_a_batch_that_cannot_finish_by_the_deadline_stops_once_its_rate_says_so():
    from interp.training.batched import _why_stop

    soon = time.time() + 100
    assert _why_stop(False, soon, 20, 30, 30, 50) is None                  # 50 s left of 100
    assert _why_stop(False, soon, 20, 30, 30, 500).startswith("cut")       # 500 s left
    assert _why_stop(False, soon, 20, 10, 10, 500) is None                 # too early to project
    assert _why_stop(False, time.time() - 1, None, 0, 0, 1) == "stopped at the deadline"
    assert _why_stop(True, None, None, 0, 0, 1) == "stopped by a signal"


def test_no_group_starts_after_the_training_deadline(tmp_path):
    model_cfg, cfg = tiny_configs(steps=4)
    run = PlannedRun(str(tmp_path), "rope-seed0", model_cfg, cfg, {"model": "rope", "seed": 0}, 2, flipflop_evaluation)
    log = tmp_path / "campaign.jsonl"
    record = campaign.train_group(Group((run,), None), "cpu", time.time() - 1, 60, str(log), 0.0)
    assert record["status"].startswith("not started") and not run.run_dir.exists()
    assert json.loads(log.read_text())["status"] == record["status"]


def test_the_campaign_writes_the_sweeps_result_json(tmp_path, monkeypatch):
    """A cope-tasks run trained by the campaign (batched) and by the sweep (alone): the same
    result.json keys and header, and results.tar holds the campaign's."""
    monkeypatch.setattr(registry, "EVAL_N", 3)
    monkeypatch.chdir(tmp_path)
    steps = {"steps": 2}
    plan = write_plan(tmp_path, [{"study": "cope-tasks", "out": "sweep", "tasks": ["counting"], "models": ["ape"],
                                  "seeds": [0, 1], **steps}])
    records = campaign.campaign(plan, "out", jobs=1)
    assert [r["status"] for r in records] == ["trained"] and records[0]["batched"]
    assert records[0]["vmap_fallbacks"] == []   # every operation of the batched step batched
    ours = json.loads((tmp_path / "sweep/runs/counting-ape-seed0/result.json").read_text())
    run = registry.cope_tasks_runs()["counting-ape-seed0"]
    run = replace(run, training={**run.training, **steps})
    theirs = registry.run_study_one("cope-tasks", "counting-ape-seed0", run, str(tmp_path / "alone"))

    def shape(value):
        return {k: shape(v) for k, v in value.items()} if isinstance(value, dict) else type(value).__name__
    assert shape(ours) == shape(theirs)
    assert {k: ours[k] for k in ("name", "model", "seed", "command", "task")} == {
        k: theirs[k] for k in ("name", "model", "seed", "command", "task")}
    import tarfile
    with tarfile.open(tmp_path / "out" / "results.tar") as tar:
        assert sorted(tar.getnames()) == ["sweep/runs/counting-ape-seed0/result.json",
                                          "sweep/runs/counting-ape-seed1/result.json"]
    assert plan_groups(read_plan(plan), "cpu")[0] == []   # done: a second campaign trains nothing


def test_the_device_throughput_is_computed_from_the_committed_log(tmp_path):
    assert campaign.throughput_markdown(tmp_path).startswith("Not measured yet")
    (tmp_path / "runs" / "gpu").mkdir(parents=True)
    group = {"campaign": 1.0, "group": "runs/x/a seeds 0,1", "runs": ["a0", "a1"], "batched": True, "status": "trained",
             "steps_run": 100, "seconds": 2.0, "seeds_per_step": 2, "steps_per_s": 50.0, "run_steps_per_s": 100.0}
    summary = {"campaign": 1.0, "wall_s": 4.0, "device": "cuda", "device_name": "NVIDIA H200", "jobs": 8,
               "budget_s": 480}
    (tmp_path / "runs/gpu/campaign-h200.jsonl").write_text(json.dumps(group) + "\n" + json.dumps(summary) + "\n")
    text = campaign.throughput_markdown(tmp_path)
    assert "NVIDIA H200, 8 groups at once" in text
    assert "| runs/x/a seeds 0,1 | 2 | yes | trained | 100 | 2.0 | 50.0 | 100.0 |" in text
    assert "200 run-steps in 4 s of wall time: 50.0 runs x steps per second" in text


def test_the_estimate_times_each_group_and_says_what_fits(tmp_path, capsys):
    plan = write_plan(tmp_path, [
        {"study": "cope-tasks", "out": str(tmp_path / "sweep"), "tasks": ["counting"], "models": ["ape"],
         "seeds": [0, 1], "steps": 3},
        {"study": "r6-levers", "out": str(tmp_path / "r6"), "match": "*-seed0"}])
    rows = campaign.estimate(plan, tmp_path / "out", budget_s=1e9, jobs=2)
    assert [(r["runs"], r["batched"], r["steps_left"], r["fits"]) for r in rows] == [(2, True, 3, True),
                                                                                     (1, False, 1000, True)]
    assert all(r["s_per_step"] > 0 for r in rows) and "dropout" in rows[1]["why_not_batched"]
    assert "3 of 3 runs fit." in capsys.readouterr().out
    assert not (tmp_path / "sweep").exists() and [p.name for p in (tmp_path / "out").iterdir()] == []

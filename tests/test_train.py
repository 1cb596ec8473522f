import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch

from interp.cli import main
from interp.tasks import load_split, write_sequences
from interp.training.loop import lr_at, sharpening_penalty, train
from interp.training.setup import BatchSource, TrainConfig, TrainingDiverged, TrainingInterrupted, make_optimizer
import models
from models import ModelConfig
from support import interrupt_training_at

SMALL = dict(seq_len=32, batch_size=4, warmup=3, eval_n=5)


def tensors(path):
    return models.checkpoint.read_checkpoint(path)[1]


def assert_same_checkpoint(a, b):
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys()
    for key in ta:
        assert torch.equal(ta[key], tb[key]), key


def test_decay_all_parameters_puts_every_parameter_in_the_decayed_group():
    model = models.build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=32, linear_bias=True))
    params = list(model.parameters())
    matrices, rest = make_optimizer(model, TrainConfig(weight_decay=0.01)).param_groups
    assert [p.ndim >= 2 for p in params].count(True) == len(matrices["params"]) and rest["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in matrices["params"]) and all(p.ndim < 2 for p in rest["params"])
    every, none = make_optimizer(model, TrainConfig(weight_decay=0.01, decay_all_parameters=True)).param_groups
    assert every["weight_decay"] == 0.01 and none["params"] == []
    assert [id(p) for p in every["params"]] == [id(p) for p in params]


def test_schedule():
    cfg = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0) and lr_at(55, cfg) == pytest.approx(0.55)
    assert lr_at(100, cfg) == pytest.approx(0.1)


@pytest.mark.parametrize("model_name", ["label", "lstm"])
def test_same_seed_same_checkpoint(tmp_path, model_name):
    mc = ModelConfig.from_preset(model_name, "tiny", n_ctx=32, dropout=0.1)
    train(mc, TrainConfig(steps=6, **SMALL), tmp_path / "a", progress=False)
    train(mc, TrainConfig(steps=6, **SMALL), tmp_path / "b", progress=False)
    assert_same_checkpoint(tmp_path / "a", tmp_path / "b")
    train(mc, TrainConfig(steps=6, seed=1, **SMALL), tmp_path / "c", progress=False)
    assert not torch.equal(tensors(tmp_path / "a")["W_E"], tensors(tmp_path / "c")["W_E"])


@pytest.mark.parametrize("model_name", ["rope", "lstm"])
def test_two_threads_give_the_same_checkpoint_twice(tmp_path, model_name):
    """Indexing's backward (the embedding) sums in a thread-dependent order on two CPU threads;
    training runs under PyTorch's deterministic algorithms, so the same command gives the same
    checkpoint at any fixed thread count (docs/explanation/runs-and-checkpoints.md "Determinism")."""
    mc = ModelConfig.from_preset(model_name, "tiny", n_ctx=128)
    cfg = TrainConfig(steps=3, seq_len=128, batch_size=16, eval_n=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for run in "ab":
            train(mc, cfg, tmp_path / run, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert_same_checkpoint(tmp_path / "a", tmp_path / "b")
    assert not torch.are_deterministic_algorithms_enabled(), "the setting is restored after training"


def test_resume_equals_uninterrupted_run(tmp_path, monkeypatch):
    mc = ModelConfig.from_preset("label", "tiny", n_ctx=32, dropout=0.1)
    cfg = TrainConfig(steps=8, **SMALL)
    train(mc, cfg, tmp_path / "full", progress=False)

    interrupt_training_at(monkeypatch, 4)
    with pytest.raises(TrainingInterrupted) as stop:
        train(mc, cfg, tmp_path / "part", progress=False)
    assert stop.value.step == 5
    assert json.loads((tmp_path / "part" / "config.json").read_text())["training"]["step"] == 5
    monkeypatch.undo()
    train(mc, cfg, tmp_path / "part", resume=True, progress=False)
    assert_same_checkpoint(tmp_path / "full", tmp_path / "part")


def test_training_in_parts_with_until_equals_one_run(tmp_path):
    mc = ModelConfig.from_preset("label", "tiny", n_ctx=32, dropout=0.1)
    cfg = TrainConfig(steps=8, **SMALL)
    train(mc, cfg, tmp_path / "full", progress=False)
    train(mc, cfg, tmp_path / "part", progress=False, until=3)
    saved = json.loads((tmp_path / "part" / "config.json").read_text())
    assert saved["training"]["step"] == 3 and "evaluation" not in saved.get("metadata", {})
    train(mc, cfg, tmp_path / "part", resume=True, progress=False, until=6)
    with pytest.raises(ValueError, match="past until=5"):
        train(mc, cfg, tmp_path / "part", resume=True, progress=False, until=5)
    train(mc, cfg, tmp_path / "part", resume=True, progress=False)
    assert_same_checkpoint(tmp_path / "full", tmp_path / "part")
    for until in (0, 9):
        with pytest.raises(ValueError, match="until must be a step from 1 to the run's 8 steps"):
            train(mc, cfg, tmp_path / f"until{until}", progress=False, until=until)


def test_resume_refuses_different_options(tmp_path):
    mc = ModelConfig.from_preset("nope", "tiny", n_ctx=32)
    train(mc, TrainConfig(steps=2, **SMALL), tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="lr"):
        train(mc, TrainConfig(steps=2, lr=0.5, **SMALL), tmp_path / "run", resume=True, progress=False)
    with pytest.raises(ValueError, match="model config differs"):
        train(ModelConfig.from_preset("rope", "tiny", n_ctx=32), TrainConfig(steps=2, **SMALL),
              tmp_path / "run", resume=True, progress=False)


def test_sharpening_penalties():
    keys = torch.arange(1, 5.0)                    # query i of a causal map sees i + 1 keys
    uniform = (torch.ones(4, 4).tril() / keys[:, None])[None, None]
    one_hot = torch.eye(4)[None, None]
    assert sharpening_penalty([uniform], "entropy") == pytest.approx(keys.log().mean().item())
    assert sharpening_penalty([one_hot], "entropy") == pytest.approx(0.0, abs=1e-6)
    assert sharpening_penalty([one_hot], "linf") == pytest.approx(-1.0)
    assert sharpening_penalty([uniform], "l2") == pytest.approx(-keys.rsqrt().mean().item())
    assert sharpening_penalty([torch.zeros(1, 1, 2, 2)], "entropy") == 0


def test_sharpening_penalties_have_finite_gradients_at_exact_zeros():
    """Thresholded mechanisms (TRA, TDA, trela) put exact zeros in their patterns, whole rows of
    them at times: the regularisers' gradients stay finite there (``xlogy(p, p)``'s would be NaN)."""
    rows = [[1.0, 0, 0, 0], [0.3, 0.7, 0, 0], [0, 0, 0, 0], [0.5, 0, -0.25, 0.25]]
    weights = torch.tensor(rows, requires_grad=True)
    kept = torch.tensor(rows) != 0
    for kind in ("entropy", "l2", "linf"):
        weights.grad = None
        sharpening_penalty([(weights * kept)[None, None]], kind).backward()
        assert torch.isfinite(weights.grad).all(), kind


def test_regularised_training_runs_and_uses_the_patterns(tmp_path):
    mc = ModelConfig.from_preset("rope", "tiny", n_ctx=32)
    plain = train(mc, TrainConfig(steps=4, **SMALL), tmp_path / "a", progress=False)
    sharp = train(mc, TrainConfig(steps=4, regulariser="entropy", reg_coef=1.0, **SMALL), tmp_path / "b",
                  progress=False)
    assert not torch.equal(plain.blocks[0].attn.W_Q, sharp.blocks[0].attn.W_Q)
    with pytest.raises(ValueError, match="LSTM"):
        train(ModelConfig.from_preset("lstm", "tiny"), TrainConfig(steps=1, regulariser="l2", reg_coef=1.0,
                                                                  **SMALL), tmp_path / "c", progress=False)


def test_automaton_and_generative_modes(tmp_path):
    mc = ModelConfig.from_preset("nope", "tiny", n_ctx=32, d_vocab=3)
    train(mc, TrainConfig(steps=3, task="automaton", **SMALL), tmp_path / "auto", progress=False)
    train(ModelConfig.from_preset("nope", "tiny", n_ctx=32), TrainConfig(steps=3, loss="generative", **SMALL),
          tmp_path / "gen", progress=False)
    log = [json.loads(line) for line in (tmp_path / "gen" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3]


@pytest.mark.integration
def test_ctrl_c_saves_and_resume_finishes_identically(tmp_path):
    args = ["--model", "nope", "--preset", "tiny", "--seq-len", "64", "--batch-size", "8", "--steps", "150",
            "--warmup", "3", "--eval-n", "5", "--checkpoint-every", "5", "--quiet"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "train", *args, "--out", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not (tmp_path / "run" / "config.json").exists() and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "checkpoint saved" in err
    step = json.loads((tmp_path / "run" / "config.json").read_text())["training"]["step"]
    assert 0 < step < 150
    # The rest in this process, at the thread count the process above had (OMP_NUM_THREADS, one
    # under `make test`): the same command resumes and trains straight through.
    threads = torch.get_num_threads()
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", threads)))
    try:
        assert main(["train", *args, "--out", str(tmp_path / "run"), "--resume"]) == 0
        assert main(["train", *args, "--out", str(tmp_path / "straight")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert_same_checkpoint(tmp_path / "run", tmp_path / "straight")


# --- Nothing lost, nothing silent.

TINY = ModelConfig.from_preset("nope", "tiny", n_ctx=32)


def test_an_existing_checkpoint_is_only_resumed_or_overwritten(tmp_path):
    run = tmp_path / "run"
    train(TINY, TrainConfig(steps=2, **SMALL), run, progress=False)
    before = tensors(run)
    for model_cfg in (TINY, ModelConfig.from_preset("lstm", "tiny")):
        with pytest.raises(ValueError, match=r"already holds a checkpoint \(nope, step 2\).*--resume.*--overwrite"):
            train(model_cfg, TrainConfig(steps=2, **SMALL), run, progress=False)
    assert all(torch.equal(before[k], tensors(run)[k]) for k in before)
    train(ModelConfig.from_preset("lstm", "tiny"), TrainConfig(steps=3, **SMALL), run, overwrite=True,
          progress=False)
    assert models.read_config(run)["model"]["model"] == "lstm"
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3]  # the replaced run's log is gone


def test_the_output_and_the_options_are_checked_before_step_1(tmp_path, monkeypatch):
    def no_training(self, step):
        raise AssertionError("training started")

    monkeypatch.setattr(BatchSource, "__call__", no_training)
    file = tmp_path / "file"
    file.write_text("x")
    cfg = TrainConfig(steps=2, **SMALL)
    with pytest.raises(ValueError, match="is a file"):
        train(TINY, cfg, file, progress=False)
    for unwritable in (file / "sub", "/proc/glitchlens-run"):
        with pytest.raises(ValueError, match="not writable"):
            train(TINY, cfg, unwritable, progress=False)
    with pytest.raises(ValueError, match=r"canonical splits \(T = 512\) would fail.*APE has 32.*--n-ctx 512"):
        train(ModelConfig.from_preset("ape", "tiny", n_ctx=32), cfg, tmp_path / "ape", progress=False)
    data = tmp_path / "d.jsonl"
    write_sequences(load_split("iid", 4, seq_len=16), data)
    with pytest.raises(ValueError, match="16 tokens, but seq_len is 32.*--seq-len 16"):
        train(TINY, TrainConfig(steps=2, data_file=str(data), **SMALL), tmp_path / "d", progress=False)
    with pytest.raises(ValueError, match="device 'gpu' is not usable here"):
        train(TINY, cfg, tmp_path / "gpu", progress=False, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' is not usable here.*--device cpu"):
            train(TINY, cfg, tmp_path / "cuda", progress=False, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-test)")
def test_training_on_cuda_saves_a_checkpoint_that_loads_on_the_cpu(tmp_path):
    """On CUDA (the Triton kernels, under ``auto``) the model and every batch live on the GPU, and
    the checkpoint holds exactly the trained weights."""
    mc = ModelConfig.from_preset("tra", "tiny", n_ctx=32)
    model = train(mc, TrainConfig(steps=4, **SMALL), tmp_path / "run", progress=False, device="cuda")
    assert all(p.is_cuda for p in model.parameters())
    saved = models.load(tmp_path / "run").state_dict()
    for key, value in model.state_dict().items():
        assert torch.equal(saved[key], value.cpu()), key


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_a_read_only_output_fails_before_training(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(ValueError, match="not writable"):
        train(TINY, TrainConfig(steps=2, **SMALL), locked, progress=False)


def test_ctrl_c_during_the_final_evaluation_keeps_the_trained_model(tmp_path, monkeypatch):
    import interp.training.loop

    evaluate = interp.training.loop.quick_eval

    def interrupted_final_eval(model, n, *options):
        if n == SMALL["eval_n"]:
            raise KeyboardInterrupt
        return evaluate(model, n)

    monkeypatch.setattr(interp.training.loop, "quick_eval", interrupted_final_eval)
    with pytest.raises(TrainingInterrupted, match="during the final evaluation, after step 3"):
        train(TINY, TrainConfig(steps=3, **SMALL), tmp_path / "run", progress=False)
    assert models.read_config(tmp_path / "run")["training"]["step"] == 3
    models.load(tmp_path / "run")
    monkeypatch.undo()
    train(TINY, TrainConfig(steps=3, **SMALL), tmp_path / "run", resume=True, progress=False)
    assert "evaluation" in models.read_config(tmp_path / "run")["metadata"]


def test_divergence_stops_and_keeps_the_last_finite_checkpoint(tmp_path):
    cfg = TrainConfig(steps=30, lr=1e6, checkpoint_every=1, **SMALL)
    with pytest.raises(TrainingDiverged, match=r"diverged at step (\d+).*keeps the last finite checkpoint") as stop:
        train(TINY, cfg, tmp_path / "run", progress=False)
    kept = stop.value.kept_step
    assert kept == stop.value.step - 1 and models.read_config(tmp_path / "run")["training"]["step"] == kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a finite checkpoint loads without the NaN warning
        models.load(tmp_path / "run")
    with pytest.raises(TrainingDiverged, match="no checkpoint of this run was saved"):
        train(TINY, TrainConfig(steps=30, lr=1e6, **SMALL), tmp_path / "fresh", progress=False)
    assert not (tmp_path / "fresh" / "config.json").exists()


def test_grad_clip_none_means_no_clipping(tmp_path):
    train(TINY, TrainConfig(steps=2, grad_clip=None, **SMALL), tmp_path / "run", progress=False)


def test_a_refused_overwrite_keeps_the_old_log(tmp_path):
    train(TINY, TrainConfig(steps=2, **SMALL), tmp_path / "run", progress=False)
    log = (tmp_path / "run" / "log.jsonl").read_text()
    with pytest.raises(ValueError, match="LSTM"):
        train(ModelConfig.from_preset("lstm", "tiny"), TrainConfig(steps=2, regulariser="l2", reg_coef=1.0, **SMALL),
              tmp_path / "run", overwrite=True, progress=False)
    assert (tmp_path / "run" / "log.jsonl").read_text() == log

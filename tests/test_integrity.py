"""What is loaded is what was saved, and every argument means what it says:
version downgrades, mechanism classes and tasks that do not match, a resume whose step and
optimiser disagree, a library planted in the kernel cache, crafted listing metadata, empty
paths, flags that were ignored, non-finite options, invalid tokens and shape-changing hooks."""

import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import models
from interp.cli import main
from interp.evaluate import checkpoint_task, evaluate_automaton, evaluate_tokens
from interp.metrics import read_table
from interp.tasks import load_split, sample_ffl
from interp.training.loop import train
from interp.training.setup import TrainConfig
from kernels.tooling import native
from models import CheckpointError, ModelConfig, build_model

TINY = ModelConfig.from_preset("nope", "tiny", n_ctx=32)
SMALL = dict(seq_len=32, batch_size=4, warmup=1, eval_n=2)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    return models.save(tmp_path / "ckpt", build_model(TINY))


def edit_config(path, **fields):
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **fields}))
    return config


# --- Checkpoints

def test_a_version_edited_down_keeps_the_checksum_and_odd_versions_are_refused(saved):
    config = edit_config(saved, format_version=2)
    weights = saved / config["files"]["model"]
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    for version in (2, 1):
        edit_config(saved, format_version=version, **({"files": config["files"]} if version == 1 else {}))
        with pytest.raises(CheckpointError, match="do not match their checksum"):
            models.load(saved)
    for version in (True, "3", 3.0, 4, None):
        edit_config(saved, format_version=version)
        with pytest.raises(CheckpointError, match="format version .* is not supported"):
            models.read_config(saved)


def test_a_mechanism_registered_under_another_class_is_refused(tmp_path):
    from plugin_mechanisms import SigmoidAttention

    models.register_mechanism("sigmoid", SigmoidAttention)
    path = models.save(tmp_path / "sig", build_model(ModelConfig.from_preset("sigmoid", "tiny", n_ctx=32)))
    models.load(path)
    edit_config(path, mechanism={"name": "sigmoid", "class": "mymech:PeekAttention"})
    with pytest.raises(CheckpointError, match=r"class mymech:PeekAttention, but 'sigmoid' is registered here as "
                                              r"plugin_mechanisms:SigmoidAttention"):
        models.load(path)
    config = json.loads((path / "config.json").read_text())
    del config["mechanism"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"class \(none recorded\)"):
        models.load(path)


def test_an_edited_task_is_refused_and_a_model_is_scored_on_its_own_task_only(tmp_path):
    run = tmp_path / "run"
    train(TINY, TrainConfig(steps=2, **SMALL), run, progress=False, until=1)
    flipflop_model = models.load(run)
    config = json.loads((run / "config.json").read_text())
    config["training"]["config"]["task"] = "automaton"
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="records the task 'automaton', but its tensors were trained on 'flip"):
        models.load(run)
    with pytest.raises(ValueError, match="records the task 'flipflop', whose vocabulary has 5 tokens, but its model "
                                         "has 3"):
        checkpoint_task({"model": {"d_vocab": 3}, "training": {"step": 1, "config": {"task": "flipflop"}}})
    for model, why in ((flipflop_model, "trained on the flipflop task, not the automaton task"),
                       (build_model(TINY), "vocabulary has 5 tokens, the flipflop task's, not the automaton")):
        with pytest.raises(ValueError, match=why):
            evaluate_automaton(model, n=2, seq_len=8)


def test_resume_refuses_a_step_that_its_optimiser_state_did_not_reach(tmp_path):
    run = tmp_path / "run"
    cfg = TrainConfig(steps=4, **SMALL)
    train(TINY, TrainConfig(steps=4, **SMALL), run, progress=False, until=3)
    config = json.loads((run / "config.json").read_text())
    config["training"]["step"] = 1
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="at step 1 but its optimiser state has counted 3 updates"):
        train(TINY, cfg, run, resume=True, progress=False)


# --- Files loaded and listed

@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler")
def test_a_library_planted_in_a_shared_cache_is_never_loaded(monkeypatch, tmp_path):
    marker, planted = tmp_path / "constructor-ran", tmp_path / "planted.c"
    planted.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                       f'{{ fclose(fopen("{marker}", "w")); }}\n')
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)   # a shared cache: anyone could have written there
    target = cache / native.library_name(os.environ.get("CC", "cc"))
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", str(planted), "-o", str(target)], check=True)
    assert native.private(tmp_path) and not native.private(cache)
    monkeypatch.setenv("GLITCHLENS_CACHE", str(cache))
    native.library.cache_clear()
    try:
        lib = native.library()
        assert lib is not None and lib.vector_lanes() > 0 and not marker.exists()
    finally:
        native.library.cache_clear()


def test_crafted_metadata_cannot_change_what_the_listing_computes(tmp_path):
    from interp.studies.pretrained import listing

    entry = tmp_path / "rope-mech"
    entry.mkdir()
    (entry / "config.json").write_text(json.dumps({
        "model": {"model": "rope", "n_layers": 2, "n_heads": 1, "d_model": 64},
        "training": {"config": {"steps": 10, "seq_len": 512, "batch_size": 16}},
        "metadata": {"command": "glitchlens train", "seed": 0, "accuracy": {"iid": {"sequence_accuracy": 1.0}},
                     "built": False, "path": "/elsewhere", "name": "other", "size_kb": -1, "description": "forged"}}))
    (row,) = listing(tmp_path, ["rope-mech"])
    assert row["built"] is True and row["path"] == str(entry) and row["name"] == "rope-mech"
    assert row["size_kb"] > 0 and row["description"] != "forged" and row["command"] == "glitchlens train"


# --- Flags that do what they say

def test_empty_paths_and_ignored_flags_are_refused(saved, tmp_path, capsys):
    assert main(["eval", str(saved), "--data", ""]) == 2
    assert "--data is empty" in capsys.readouterr().err
    out = tmp_path / "recipes"
    assert main(["reproduce", "recipes", "--report-only", "--models", "nope", "--seeds", "1", "--out", str(out)]) == 2
    assert "no finished run" in capsys.readouterr().err and not list(out.rglob("config.json"))
    for value in ("NaN", "Infinity"):
        assert main(["train", "--model", "tra", "--steps", "1", "--attn-opt", f"forget_bias={value}",
                     "--out", str(tmp_path / "tra")]) == 2
        assert "must be a finite number" in capsys.readouterr().err
    assert not (tmp_path / "tra" / "config.json").exists()


def test_non_finite_options_and_probabilities_are_refused():
    with pytest.raises(ValueError, match="forget_bias=nan of 'tra' must be a finite number"):
        ModelConfig(model="tra", attention_options={"forget_bias": math.nan})
    for p_i in (math.nan, 1.5, [0.5, math.nan]):
        with pytest.raises(ValueError, match="p_i (must lie in|must be a finite number|holds NaN)"):
            sample_ffl(2, 8, p_i)
    model = build_model(TINY)
    with pytest.raises(ValueError, match="the loss needs at least 2"):
        model(torch.zeros(2, 1, dtype=torch.long), return_type="loss")
    with pytest.raises(ValueError, match="max_new_tokens=1,000,000,000"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), max_new_tokens=10**9, verbose=False)


# --- Python API: tokens of the task, hooks that keep shapes

def test_tokens_that_are_not_flip_flop_sequences_are_refused():
    model = build_model(TINY)
    tokens = load_split("iid", 3, 32)
    contradicted = tokens.copy()
    read = np.flatnonzero(contradicted[1, 0::2] == 1)[0] * 2     # the first read of sequence 1
    contradicted[1, read + 1] = 7 - contradicted[1, read + 1]   # its bit flipped (3 <-> 4)
    no_read = tokens.copy()
    no_read[2, -2] = 2                                          # ends in an ignore: nothing to score there
    for bad, where in ((contradicted, f"sequence 1 at position {read + 1}"), (no_read, "sequence 2")):
        with pytest.raises(ValueError, match=f"tokens: .*{where}"):
            evaluate_tokens(model, bad)
        with pytest.raises(ValueError, match=f"tokens: .*{where}"):
            read_table(bad, np.zeros_like(bad))
    assert evaluate_tokens(model, tokens).sequences == 3


def test_a_hook_that_changes_the_shape_is_refused_naming_it():
    model = build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=32))
    tokens = torch.zeros(2, 8, dtype=torch.long)
    with pytest.raises(ValueError, match=r"a hook on blocks.0.attn.hook_pattern returned a tensor of shape "
                                         r"\(2, 1, 1, 8\) for its activation of shape \(2, 1, 8, 8\)"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda a, hook: a[:, :, -1:])])
    same = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda a, hook: a * 1)])
    assert torch.equal(same, model(tokens))


def test_every_shipped_checkpoint_binds_its_tensor_files_by_digest():
    import hashlib

    from models.pretrained import PRETRAINED_DIR

    entries = [entry for entry in sorted(PRETRAINED_DIR.iterdir()) if (entry / "config.json").exists()]
    assert entries
    for entry in entries:
        config = models.read_config(entry)
        assert set(config["sha256"]) == set(config["files"].values()), entry.name
        for name, digest in config["sha256"].items():
            assert hashlib.sha256((entry / name).read_bytes()).hexdigest() == digest, entry.name
        models.load(entry)


def test_another_runs_tensor_file_of_the_same_architecture_is_refused(tmp_path):
    torch.manual_seed(0)
    ours = models.save(tmp_path / "ours", build_model(TINY))
    theirs = models.save(tmp_path / "theirs", build_model(TINY))   # other weights, the same architecture
    name = models.read_config(ours)["files"]["model"]
    shutil.copyfile(theirs / models.read_config(theirs)["files"]["model"], ours / name)
    with pytest.raises(CheckpointError, match="not the file this checkpoint's config.json names"):
        models.load(ours)


def test_a_mechanism_record_on_a_built_in_model_and_nested_json_are_refused(saved):
    edit_config(saved, mechanism={"name": "nope", "class": "os:system"})
    with pytest.raises(CheckpointError, match="a built-in one or another mechanism"):
        models.load(saved)
    (saved / "config.json").write_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(CheckpointError, match="nested deeper than"):
        models.load(saved)


def test_a_lock_that_is_no_lock_is_refused_in_one_line_and_a_pid_past_any_process_is_stale(tmp_path):
    import socket

    from interp.training.setup import LOCK_FILE, output_lock

    for kind, make in (("fifo", os.mkfifo), ("devzero", lambda p: os.symlink("/dev/zero", p)), ("dir", os.mkdir)):
        out = tmp_path / kind
        out.mkdir()
        make(out / LOCK_FILE)
        with pytest.raises(ValueError, match="remove it") as err:
            with output_lock(out):
                pass
        assert "\n" not in str(err.value)
    out = tmp_path / "big-pid"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 2 ** 70, "host": socket.gethostname()}))
    with output_lock(out):   # no process has that pid: the lock is stale, and taken
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()

import itertools
import json
import os
import random
import signal
import pickle
import time

import pytest
import torch
from safetensors.torch import save_file

import models
from models import CheckpointError, ModelConfig, build_model
from models.files import MANIFEST, record


def model_file(path):
    return path / json.loads((path / "config.json").read_text())["files"]["model"]


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("rel", "tiny", n_ctx=64))
    path = models.save(tmp_path / "ckpt", model, metadata={"note": "x"})
    return model, path


def test_round_trip_is_bitwise(saved):
    model, path = saved
    loaded = models.load(path)
    assert not loaded.training
    original, restored = model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    for key in original:
        assert torch.equal(original[key], restored[key]), key
    tokens = torch.randint(0, 5, (2, 40))
    assert torch.equal(model.eval()(tokens), loaded(tokens))
    config = json.loads((path / "config.json").read_text())
    assert sorted(p.name for p in path.iterdir()) == sorted([MANIFEST, "config.json", config["files"]["model"]])
    assert config["format"] == "glitchlens-checkpoint" and config["model"]["model"] == "rel"


def test_overwrite_is_atomic_and_leaves_no_temporaries(saved, tmp_path):
    model, path = saved
    models.save(path, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_lstm_round_trip(tmp_path):
    model = build_model(ModelConfig.from_preset("lstm", "tiny"))
    loaded = models.load(models.save(tmp_path / "lstm", model))
    tokens = torch.randint(0, 5, (1, 10))
    assert torch.equal(model.eval()(tokens), loaded(tokens))


def test_refuses_a_pickle(tmp_path, saved):
    _, path = saved
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1)}, evil)
    with pytest.raises(CheckpointError, match="never unpickles"):
        models.load(evil)
    model_file(path).write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(CheckpointError, match="pickle, not safetensors"):
        models.load(path)


def test_refuses_a_truncated_file(saved):
    _, path = saved
    data = model_file(path).read_bytes()
    model_file(path).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        models.load(path)


@pytest.mark.parametrize("field, value, error", [("d_model", 32, "does not match its tensor file"),
                                                  ("n_experts", 8, "unknown fields")])
def test_refuses_a_model_config_that_is_not_the_tensors(saved, field, value, error):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    config["model"][field] = value
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=error):
        models.load(path)


def test_refuses_foreign_and_missing(tmp_path, saved):
    _, path = saved
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        models.load(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        models.load(empty)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    save_file({"w": torch.zeros(1)}, foreign / "model.safetensors")
    with pytest.raises(CheckpointError, match="another tool"):
        models.load(foreign)
    (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        models.load(path)


def test_resave_keeps_other_files(saved):
    model, path = saved
    (path / "log.jsonl").write_text("{}\n")
    models.save(path, model)
    assert (path / "log.jsonl").read_text() == "{}\n"


def test_a_header_length_starting_with_0x80_is_not_a_pickle(tmp_path):
    """The first byte of a safetensors file is the low byte of its header length."""
    for n in range(1, 400):
        file = tmp_path / "t.safetensors"
        save_file({"w" * n: torch.zeros(1)}, file)
        if file.read_bytes()[0] == 0x80:
            break
    else:
        pytest.fail("no header length ending in 0x80 found")
    assert models.checkpoint._parse_tensors(file, file.read_bytes(), "model", 1).keys() == {"w" * n}


# --- Nothing lost: saving never destroys data, and a checkpoint is always there under its name.

def weights(model):
    return model.state_dict()["W_E"]


def two_models():
    cfg = ModelConfig.from_preset("nope", "tiny", n_ctx=64)
    torch.manual_seed(1)
    a = build_model(cfg)
    torch.manual_seed(2)
    return a, build_model(cfg)


def is_one_of(loaded, candidates):
    return any(torch.equal(weights(loaded), weights(c)) for c in candidates)


def test_a_failed_save_keeps_the_old_checkpoint_and_every_user_file(saved, monkeypatch):
    model, path = saved
    user_files = {f"note{i}.txt": f"note {i}\n" for i in range(20)}
    for name, text in user_files.items():
        (path / name).write_text(text)
    before = sorted(p.name for p in path.iterdir())
    calls = []

    def fail_on_second_file(file, data):
        calls.append(file)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", str(file))
        return write(file, data)

    write = models.checkpoint._write_synced
    monkeypatch.setattr(models.checkpoint, "_write_synced", fail_on_second_file)
    other = build_model(ModelConfig.from_preset("rel", "tiny", n_ctx=64))
    with pytest.raises(CheckpointError, match="previous checkpoint, if any, is unchanged"):
        models.save(path, other, training_state={"x": torch.zeros(2)})
    assert sorted(p.name for p in path.iterdir()) == before
    assert all((path / name).read_text() == text for name, text in user_files.items())
    assert torch.equal(weights(models.load(path)), weights(model))


def test_an_exception_at_the_switch_keeps_the_old_checkpoint(saved, monkeypatch):
    model, path = saved
    before = sorted(p.name for p in path.iterdir())

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(models.checkpoint.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        models.save(path, build_model(ModelConfig.from_preset("rel", "tiny", n_ctx=64)))
    monkeypatch.undo()
    assert sorted(p.name for p in path.iterdir()) == before
    assert torch.equal(weights(models.load(path)), weights(model))


def test_a_successful_save_keeps_user_files_and_removes_only_its_own(saved):
    model, path = saved
    (path / "log.jsonl").write_text("{}\n")
    (path / "model.notes.safetensors").write_text("mine")  # looks like ours, is not: stays
    (path / "model.0123456789abcdef.safetensors").write_text("mine")  # named like ours, not listed: stays
    (path / "model.fedcba9876543210.safetensors").write_text("")  # a save killed before its switch
    record(path, ["model.fedcba9876543210.safetensors"])   # which listed it before writing it
    models.save(path, model)
    names = sorted(p.name for p in path.iterdir())
    assert names == sorted([MANIFEST, "config.json", model_file(path).name, "log.jsonl", "model.notes.safetensors",
                            "model.0123456789abcdef.safetensors"])
    assert (path / "log.jsonl").read_text() == "{}\n"
    assert (path / "model.0123456789abcdef.safetensors").read_text() == "mine"


def test_a_save_into_a_fresh_folder_never_deletes_a_users_file_named_like_its_own(tmp_path):
    """Another run's model copied in to compare, under the name shape saves use."""
    path = tmp_path / "fresh"
    path.mkdir()
    (path / "model.0123456789abcdef.safetensors").write_bytes(b"SENTINEL another run's model")
    models.save(path, build_model(ModelConfig.from_preset("rel", "tiny", n_ctx=64)))
    assert (path / "model.0123456789abcdef.safetensors").read_bytes() == b"SENTINEL another run's model"


def _fork_saver(path, candidates):
    """A child process that saves ``candidates`` in turn into ``path`` until killed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            for i in itertools.count():
                models.save(path, candidates[i % 2], training={"config": {}, "step": i},
                            training_state={"moment": weights(candidates[i % 2])})
        finally:
            os._exit(0)
    return pid


@pytest.mark.integration
def test_kill_at_a_random_point_of_a_save_always_leaves_a_loadable_checkpoint(tmp_path):
    """100 saves killed with SIGKILL at random moments: the checkpoint, its optimiser state
    and the user's file are always there under their names, and the next completed save
    removes what the killed ones left."""
    a, b = two_models()
    path = models.save(tmp_path / "ck", a, training_state={"moment": weights(a)})
    (path / "log.jsonl").write_text("user data\n")
    rng = random.Random(0)
    kills_mid_save = 0
    for _ in range(100):
        pid = _fork_saver(path, (a, b))
        time.sleep(rng.uniform(0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        loaded = models.load(path)
        assert is_one_of(loaded, (a, b))
        assert torch.equal(models.checkpoint.load_training_state(path)["moment"], weights(loaded))
        named = set(models.read_config(path)["files"].values())
        leftovers = {p.name for p in path.iterdir()} - named - {"config.json", "log.jsonl"}
        kills_mid_save += bool(leftovers)  # files of saves killed before their switch or cleanup
    assert (path / "log.jsonl").read_text() == "user data\n"
    models.save(path, a)
    assert sorted(p.name for p in path.iterdir()) == sorted([MANIFEST, "config.json", model_file(path).name,
                                                             "log.jsonl"])
    assert kills_mid_save > 0, "no kill landed inside a save; the test proves nothing"


@pytest.mark.integration
def test_readers_never_see_an_error_while_a_save_runs(tmp_path):
    a, b = two_models()
    path = models.save(tmp_path / "ck", a, training_state={"moment": weights(a)})
    pid = _fork_saver(path, (a, b))
    try:
        seen = set()
        for loads in itertools.count(1):  # 200 loads at least, and until both versions were seen
            loaded = models.load(path)
            assert is_one_of(loaded, (a, b))
            seen.add(torch.equal(weights(loaded), weights(a)))
            if loads >= 200 and len(seen) == 2 or loads == 5000:
                break
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert seen == {True, False}, "the saver never switched while the reader read"


def test_version_1_checkpoints_load_and_are_upgraded_on_save(tmp_path):
    model = build_model(ModelConfig.from_preset("rel", "tiny", n_ctx=64))
    path = tmp_path / "v1"
    path.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps({
        "format": "glitchlens-checkpoint", "format_version": 1, "model": model.cfg.to_dict(),
        "training": None, "metadata": {}}))
    (path / "notes.md").write_text("kept")
    assert torch.equal(weights(models.load(path)), weights(model))
    models.save(path, model)
    assert sorted(p.name for p in path.iterdir()) == sorted([MANIFEST, "config.json", model_file(path).name,
                                                             "notes.md"])


def test_save_refuses_a_file_and_a_foreign_config(tmp_path, saved):
    model, _ = saved
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        models.save(file, model)
    with pytest.raises(CheckpointError, match="cannot create"):
        models.save(file / "sub", model)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"architectures": ["GPT2"]}))
    with pytest.raises(CheckpointError, match="refusing to save over it"):
        models.save(foreign, model)
    assert json.loads((foreign / "config.json").read_text()) == {"architectures": ["GPT2"]}


def test_a_non_finite_checkpoint_warns_on_load(tmp_path):
    model = build_model(ModelConfig.from_preset("nope", "tiny", n_ctx=64))
    with torch.no_grad():
        model.W_E[0, 0] = float("nan")
    path = models.save(tmp_path / "nan", model)
    with pytest.warns(RuntimeWarning, match="NaN or Inf"):
        models.load(path)


def test_load_names_an_unusable_device(saved):
    _, path = saved
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="device 'cuda' is not usable"):
        models.load(path, device="cuda")


@pytest.mark.parametrize("edit", [
    lambda c: c.pop("model"), lambda c: c.update(model=3), lambda c: c.pop("metadata"),
    lambda c: c.update(training={"step": 1}), lambda c: c.update(files={"model": "../x.safetensors"}),
    lambda c: c.update(files={}),
])
def test_a_damaged_config_names_what_is_wrong(saved, edit):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="config.json: "):
        models.load(path)


def test_an_interrupt_just_after_the_switch_keeps_the_new_checkpoint(saved, monkeypatch):
    _, path = saved
    replace = os.replace

    def switch_then_interrupt(src, dst):
        replace(src, dst)
        if os.path.basename(dst) == "config.json":   # the switch, not the manifest's update
            raise KeyboardInterrupt

    monkeypatch.setattr(models.checkpoint.os, "replace", switch_then_interrupt)
    new = build_model(ModelConfig.from_preset("nope", "tiny", n_ctx=64))
    with pytest.raises(KeyboardInterrupt):
        models.save(path, new)
    monkeypatch.undo()
    assert torch.equal(weights(models.load(path)), weights(new))


# --- What wrote the tensors: a checkpoint records it, and loading refuses a mismatch.

def trained_pair(tmp_path):
    """A TRA and a FoT checkpoint of one size: their tensors have the same names and shapes."""
    paths = {}
    for name in ("tra", "fot"):
        torch.manual_seed(0)
        paths[name] = models.save(tmp_path / name, build_model(ModelConfig.from_preset(name, "tiny", n_ctx=64)),
                                  training={"config": {}, "step": 3}, training_state={"0.exp_avg": torch.ones(2)})
    return paths


def test_one_mechanisms_tensors_beside_anothers_config_are_refused_naming_both(tmp_path):
    paths = trained_pair(tmp_path)
    assert models.load(paths["tra"]).cfg.model == "tra"
    config = json.loads((paths["fot"] / "config.json").read_text())
    (paths["fot"] / config["files"]["model"]).unlink()
    os.replace(model_file(paths["tra"]), paths["fot"] / config["files"]["model"])
    with pytest.raises(CheckpointError, match=r"written by model='tra' and config.json describes model='fot'"):
        models.load(paths["fot"])


def test_the_record_names_the_role_the_architecture_and_a_digest(saved):
    model, path = saved
    record = models.checkpoint.tensor_record(model_file(path).read_bytes())
    assert record["role"] == "model" and record["format"] == "glitchlens-checkpoint"
    assert json.loads(record["architecture"]) == json.loads(json.dumps(models.checkpoint.architecture(model.cfg)))
    assert record["sha256"] == models.checkpoint.tensor_digest(model.state_dict())
    assert json.loads((path / "config.json").read_text())["format_version"] == 3


def test_flipped_bytes_in_the_tensor_data_are_refused(saved):
    _, path = saved
    data = bytearray(model_file(path).read_bytes())
    data[-40] ^= 0x01
    data[-7] ^= 0x80
    model_file(path).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="do not match their checksum.*damaged"):
        models.load(path)


def test_a_tensor_file_without_its_record_is_refused_in_a_version_3_checkpoint(saved):
    model, path = saved
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, model_file(path))
    with pytest.raises(CheckpointError, match="no GlitchLens record of what wrote it"):
        models.load(path)


def test_training_state_is_checked_as_the_model_is(tmp_path):
    path = trained_pair(tmp_path)["tra"]
    name = json.loads((path / "config.json").read_text())["files"]["training_state"]
    assert torch.equal(models.checkpoint.load_training_state(path)["0.exp_avg"], torch.ones(2))
    data = bytearray((path / name).read_bytes())
    data[-1] ^= 0x01
    (path / name).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        models.checkpoint.load_training_state(path)


def test_integer_weights_are_refused(saved):
    model, path = saved
    config = json.loads((path / "config.json").read_text())
    integers = {k: v.round().to(torch.int64) if k == "W_E" else v for k, v in model.state_dict().items()}
    (path / config["files"]["model"]).unlink()
    del config["sha256"]   # version 2 recorded no digest of its files
    path.joinpath("config.json").write_text(json.dumps({**config, "format_version": 2}))
    save_file({k: v.contiguous() for k, v in integers.items()}, path / config["files"]["model"])
    with pytest.raises(CheckpointError, match=r"not floating point W_E: file torch.int64"):
        models.load(path)


@pytest.mark.parametrize("version, field", [(3, "norm_placement"), (3, "linear_bias"), (1, "n_layers"),
                                            (2, "d_model")])
def test_a_field_that_its_format_version_always_records_must_be_there(saved, version, field):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    del config["model"][field]
    (path / "config.json").write_text(json.dumps({**config, "format_version": version}))
    with pytest.raises(CheckpointError, match=rf"lacks \['{field}'\], which every format version {version}"):
        models.load(path)


@pytest.mark.parametrize("version", [1, 2])
def test_checkpoints_older_than_a_field_take_the_value_of_their_time(tmp_path, version):
    """norm_placement (and init, linear_bias, the dropout options) came after format version 2's
    first checkpoints: those lack them and were pre-norm blocks without biases, the defaults."""
    model = build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=64))
    path = tmp_path / f"v{version}"
    path.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path / "model.0123456789abcdef.safetensors")
    old_fields = {k: v for k, v in model.cfg.to_dict().items() if k not in models.checkpoint._RECORDED_SINCE}
    (path / "config.json").write_text(json.dumps({
        "format": "glitchlens-checkpoint", "format_version": version, "model": old_fields, "training": None,
        "metadata": {}, **({"files": {"model": "model.0123456789abcdef.safetensors"}} if version == 2 else {})}))
    if version == 1:
        (path / "model.0123456789abcdef.safetensors").rename(path / "model.safetensors")
    loaded = models.load(path)
    assert loaded.cfg.norm_placement == "pre" and not loaded.cfg.linear_bias
    assert torch.equal(weights(loaded), weights(model))


def test_every_shipped_checkpoint_still_loads():
    for name in models.pretrained.built():
        assert models.load_pretrained(name).cfg.n_layers >= 1


def test_a_config_naming_a_foreign_file_is_refused_and_the_file_kept(saved):
    """A hand-edited config.json that names a user's file as its tensors: neither loading nor a
    save over it (train --overwrite) touches that file."""
    model, path = saved
    notes = path / "notes.md"
    notes.write_text("mine")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "files": {"model": "notes.md"}}))
    with pytest.raises(CheckpointError, match="names {'model': 'notes.md'}, which GlitchLens never writes"):
        models.load(path)
    with pytest.raises(CheckpointError, match="refusing to save over it"):
        models.save(path, model)
    assert notes.read_text() == "mine"


def test_a_save_deletes_only_the_files_glitchlens_writes(saved, monkeypatch):
    """Defence in depth: even a named file that slipped past read_config is not deleted."""
    model, path = saved
    notes = path / "notes.md"
    notes.write_text("mine")
    monkeypatch.setattr(models.checkpoint, "_named_files", lambda p: {"notes.md", model_file(path).name})
    models.save(path, model)
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("step", ["10", -1, 2.5, True])
def test_a_training_step_that_is_not_a_count_is_refused(saved, step):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "training": {"config": {}, "step": step}}))
    with pytest.raises(CheckpointError, match="training step must be an integer >= 0"):
        models.read_config(path)


def test_a_config_of_a_million_layers_is_refused_before_anything_is_built(saved, monkeypatch):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    config["model"]["n_layers"] = 10**6
    (path / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(models.checkpoint, "build_model", lambda cfg: pytest.fail("built"))
    with pytest.raises(CheckpointError, match="n_layers must be a positive integer at most 256, got 1000000"):
        models.load(path)


def test_sizes_that_do_not_fit_the_tensors_are_found_before_the_model_is_built(saved, monkeypatch):
    model, path = saved
    config = json.loads((path / "config.json").read_text())
    config["model"].update(n_layers=200, d_model=128)
    del config["sha256"]   # version 2 recorded no digest of its files
    (path / "config.json").write_text(json.dumps({**config, "format_version": 2}))
    (path / config["files"]["model"]).unlink()   # a version-2 file: no record to compare the sizes with
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path / config["files"]["model"])
    monkeypatch.setattr(models.checkpoint, "build_model", lambda cfg: pytest.fail("built"))
    with pytest.raises(CheckpointError, match="config d_model=128 vs file 64, config n_layers=200 vs file 2"):
        models.load(path)

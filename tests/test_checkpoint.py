import json
import pickle

import pytest
import torch
from safetensors.torch import save_file

import models
from models import CheckpointError, ModelConfig, build_model


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
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((path / "config.json").read_text())
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
    (path / "model.safetensors").write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(CheckpointError, match="pickle, not safetensors"):
        models.load(path)


def test_refuses_a_truncated_file(saved):
    _, path = saved
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        models.load(path)


def test_refuses_a_config_that_does_not_match_the_tensors(saved):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    config["model"]["d_model"] = 32
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="does not match model.safetensors"):
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


def test_refuses_unknown_config_fields(saved):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    config["model"]["n_experts"] = 8
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown fields"):
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
    assert models.checkpoint._load_tensors(file).keys() == {"w" * n}

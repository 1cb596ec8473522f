"""The shipped pretrained checkpoints: present, small, loadable, and reproducible by their recorded commands."""

import dataclasses
import json
import shlex
import shutil
import subprocess
import sys

import pytest

import models
from interp.cli import build_parser, main, train_configs
from interp.metrics import capture_maps, sparsity
from interp.studies import pretrained
from interp.studies.specimens import ENTRIES, TABLE1_SPECIMENS, specimen
from interp.tasks import load_split
from interp.training.setup import TrainConfig
from models import ModelConfig
from models.pretrained import PRETRAINED_DIR

MAX_BYTES = 2 * 1024 * 1024
MAX_GPU_BYTES = 12 * 1024 * 1024  # a `mini` model: 2.6M float32 parameters (TDA 3.2M: 12.0 MiB, over)
CPU_ENTRIES = [name for name, entry in ENTRIES.items() if not entry.gpu]


def test_every_built_directory_is_an_entry():
    """models.pretrained knows the entries by their directories; interp.studies.specimens defines them."""
    assert set(models.pretrained.built()) <= set(ENTRIES)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_every_entry_is_shipped_small_and_loadable(name):
    entry = PRETRAINED_DIR / name
    if ENTRIES[name].gpu and not entry.is_dir():
        pytest.skip(f"{name} needs a GPU to build: make gpu-specimen NAME={name}")
    assert entry.is_dir(), f"{name} is not built: glitchlens pretrained build {name}"
    assert sum(f.stat().st_size for f in entry.iterdir()) < (MAX_GPU_BYTES if ENTRIES[name].gpu else MAX_BYTES)
    files = models.checkpoint.tensor_files(models.read_config(entry))
    assert sorted(f.name for f in entry.iterdir()) == sorted(["config.json", files["model"]])
    model = models.load_pretrained(name)
    assert not model.training
    # the tensor file records its architecture and checksum (format 3), so swapped weights are refused
    assert models.read_config(entry)["format_version"] >= 3
    meta = models.pretrained.info(name)
    assert meta["command"] == ENTRIES[name].specimen.command()
    assert meta["seed"] == models.read_config(entry)["training"]["config"]["seed"]
    assert meta["accuracy"]


def test_swapping_the_tensors_of_two_entries_of_the_same_shapes_is_refused(tmp_path):
    """tra-mech and fot-mech have the same tensor names and shapes: only the record tells them apart."""
    swapped = tmp_path / "swapped"
    shutil.copytree(PRETRAINED_DIR / "tra-mech", swapped)
    fot = PRETRAINED_DIR / "fot-mech"
    tra_file = models.checkpoint.tensor_files(models.read_config(swapped))["model"]
    shutil.copy(fot / models.checkpoint.tensor_files(models.read_config(fot))["model"], swapped / tra_file)
    with pytest.raises(models.checkpoint.CheckpointError, match="fot"):
        models.load(swapped)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_the_command_shown_trains_exactly_the_specimen(name):
    """The ``glitchlens train`` command an entry records and ``glitchlens pretrained`` shows,
    parsed as the command line parses it, gives the specimen's configs, logging options included."""
    argv = shlex.split(ENTRIES[name].specimen.command())
    assert argv[0] == "glitchlens"
    assert train_configs(build_parser().parse_args(argv[1:])) == ENTRIES[name].specimen.configs()


@pytest.mark.parametrize("model", list(TABLE1_SPECIMENS))
def test_table1_specimens_are_seed_0_of_the_cpu_sweep(model):
    """So that ``pretrained build NAME --from-run runs/table1-cpu/runs/MODEL-seed0`` adopts the sweep's run."""
    from interp.studies.reproduce import SCALES, configs

    model_cfg, train_cfg = ENTRIES[f"{model}-mech"].specimen.configs()
    swept_model, swept_training = configs(model, 0, SCALES["cpu"])
    assert (model_cfg, train_cfg.semantic_dict()) == (swept_model, swept_training.semantic_dict())


def test_building_an_entry_imports_no_command_line():
    script = "import sys, interp.studies.pretrained\nassert 'interp.cli' not in sys.modules, sorted(sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# Flip-flop specimens, checked on the held-out sequences of the sweeps (reproduce.HELD_OUT_N of them):
# FFL(0.8) at T = 512 from a seed that no training run, canonical split or figure uses
# (interp.tasks.held_out). Fewer would be a noisy check: trela-mech reads 99.1% of the 1000, 98.7% of
# the first 300.
FLIPFLOP_SPECIMENS = [name for name in CPU_ENTRIES if ENTRIES[name].specimen.configs()[1].task == "flipflop"]


@pytest.mark.slow   # 1000 held-out sequences of T = 512 per specimen: 10-47 s each
@pytest.mark.parametrize("name", FLIPFLOP_SPECIMENS)
def test_every_flipflop_specimen_has_learned_the_task(name):
    """Every specimen reads >= 99% of in-distribution sequences right."""
    from interp.evaluate import evaluate_tokens
    from interp.studies.reproduce import HELD_OUT_N
    from interp.tasks import held_out

    result = evaluate_tokens(models.load_pretrained(name), held_out(HELD_OUT_N, 512), "held-out")
    assert result.sequence_accuracy >= 0.99, f"{name}: {result.sequence_accuracy:.1%} of held-out sequences"


@pytest.mark.integration
def test_retraining_an_entry_for_a_few_steps_gives_the_shipped_configuration(tmp_path, capsys):
    name = "fot-mech"
    built = pretrained.build(name, steps=3, root=tmp_path, eval_sequences=4, progress=True)
    err = capsys.readouterr().err
    assert "train fot" in err and "3/3 [" in err and "dense:" in err, "the training's and evaluation's bars on stderr"
    fresh, shipped = models.read_config(built), models.read_config(PRETRAINED_DIR / name)
    assert ModelConfig.from_dict(fresh["model"]) == ModelConfig.from_dict(shipped["model"])
    fresh_training = TrainConfig.from_dict(fresh["training"]["config"])
    shipped_training = TrainConfig.from_dict(shipped["training"]["config"])
    assert fresh_training == dataclasses.replace(shipped_training, steps=3)
    assert fresh["training"]["config"]["steps"] == 3
    assert "--steps 3" in fresh["metadata"]["command"]
    assert set(fresh["metadata"]["accuracy"]) == {"iid", "sparse", "dense"}
    models.load(built)


def test_unknown_or_unbuilt_names_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(models.CheckpointError, match=r"no pretrained model 'tra-huge' is built .*\(built: .*tra-mech"):
        models.load_pretrained("tra-huge")
    with pytest.raises(models.CheckpointError, match="not the name of a pretrained model"):
        models.load_pretrained("../tra-mech")
    monkeypatch.setattr(models.pretrained, "PRETRAINED_DIR", tmp_path)
    with pytest.raises(models.CheckpointError, match=r"\(built: none\); `glitchlens pretrained` lists every entry"):
        models.load_pretrained("rope-mech")


@pytest.mark.integration
def test_cli_lists_every_entry_with_its_accuracy(capsys):
    assert main(["pretrained", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(ENTRIES)
    assert all(rows[name]["built"] and rows[name]["accuracy"] for name in CPU_ENTRIES)
    assert main(["pretrained"]) == 0
    assert "tra-mech" in capsys.readouterr().out


def test_the_listing_records_each_entrys_shape_as_its_specimen_trains_it():
    """Built entries show their recorded layers, heads, d_model and training length; unbuilt ones
    their specimen's, computed without building configs: the two must agree where both exist."""
    for row in pretrained.listing():
        assert {field: row[field] for field in (*pretrained.SHAPE_FIELDS, *pretrained.LENGTH_FIELDS)} \
            == pretrained.planned_shape(row["name"]), row["name"]
    assert {row["name"]: (row["n_layers"], row["n_heads"], row["d_model"], row["steps"], row["seq_len"])
            for row in pretrained.listing(names=["tra-mech", "tda-mech"])} \
        == {"tra-mech": (2, 1, 64, 1000, 128), "tda-mech": (2, 4, 64, 1000, 512)}
    with pytest.raises(ValueError, match="unknown pretrained model 'tra-huge'; available: tra-mech"):
        pretrained.listing(names=["tra-huge"])


@pytest.mark.integration
def test_listing_imports_no_torch_and_fits_100_columns():
    """`glitchlens pretrained` reads recorded JSON only (importing torch and scipy took most of
    40 s on a busy machine) and prints one line per entry at 100 columns."""
    code = ("import sys; from interp.cli import main; status = main(['pretrained']); "
            "assert 'torch' not in sys.modules, 'the listing imported torch'; sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == list(ENTRIES), "an entry wraps onto a second line"
    tra = rows[0].split("│")
    assert [cell.strip() for cell in tra[2:5]] == ["tra", "2x1x64", "1000, T=128"]
    assert "layers x" in done.stdout and "not built" in done.stdout.split("tra-mini")[1]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["tda-mech", "trela-mech", "tda-beta1"])
def test_the_listing_gives_the_beta_of_every_layer_of_a_threshold_entry(name, capsys):
    betas = [block.attn.beta.item() for block in models.load_pretrained(name).blocks]
    assert pretrained.listing(names=[name])[0]["beta"] == pytest.approx(betas, abs=0)
    assert "beta" not in pretrained.listing(names=["rope-mech"])[0]
    main(["pretrained", "list", name])
    assert f"beta per layer: {betas[0]:.2f}/{betas[1]:.2f}" in capsys.readouterr().out


@pytest.mark.integration
def test_tda_beta1_is_in_the_papers_regime():
    """Its threshold at beta = 1 in every layer, and >= 95% of its differential map exactly 0 on iid
    (the TDA paper's Fig. 1a has > 99%)."""
    model = models.load_pretrained("tda-beta1")
    assert [block.attn.beta.item() for block in model.blocks] == [1.0, 1.0]
    _, maps = capture_maps(model, load_split("iid", 8)[:, :-1], ["pattern"])
    assert (sparsity(maps["pattern"]).groupby("layer").value.mean() >= 0.95).all()


def test_adopting_a_run_checks_that_it_is_the_specimen(tmp_path):
    short = specimen("rope-mech", steps=2)
    assert main(["train", *short.train_args(), "--checkpoint-every", "1", "--out", str(tmp_path / "run")]) == 0
    built = pretrained.build("rope-mech", steps=2, root=tmp_path / "entries", eval_sequences=2,
                             from_run=tmp_path / "run")
    assert models.read_config(built)["model"] == models.read_config(tmp_path / "run")["model"]
    other_seed = dataclasses.replace(short, training={**short.training, "seed": 1})
    assert main(["train", *other_seed.train_args(), "--out", str(tmp_path / "other")]) == 0
    with pytest.raises(ValueError, match=r"differs from the entry's \(seed\)"):
        pretrained.build("rope-mech", steps=2, root=tmp_path / "entries", from_run=tmp_path / "other", overwrite=True)
    with pytest.raises(ValueError, match="not a finished training run of 1000 steps"):
        pretrained.build("rope-mech", root=tmp_path / "entries", from_run=tmp_path / "run", overwrite=True)
    with pytest.raises(ValueError, match="already built; pass --overwrite"):   # the entry built above stays
        pretrained.build("rope-mech", steps=2, root=tmp_path / "entries", from_run=tmp_path / "run")


@pytest.mark.integration
def test_gpu_specimens_beside_table1(tmp_path, capsys):
    """``glitchlens pretrained --table1``: the built GPU specimens' accuracies beside the paper's."""
    assert "no GPU specimen is built yet" in pretrained.specimens_table1(tmp_path)
    def accuracy(sequence_accuracy):
        return {split: {"sequences": 10, "read_accuracy": 0.99, "sequence_accuracy": sequence_accuracy}
                for split in ("iid", "sparse", "dense")}

    model = models.build_model(models.ModelConfig.from_preset("tra"))
    training = {"config": dataclasses.asdict(TrainConfig()), "step": 1000}   # as every built entry records
    models.save(tmp_path / "tra-mini", model, training, metadata={"seed": 0, "accuracy": accuracy(0.9), "command": ""})
    models.save(tmp_path / "tra-mech", model, training,   # not a GPU entry
                metadata={"seed": 1, "accuracy": accuracy(0.5), "command": ""})
    assert main(["pretrained", "--table1", "--root", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "| iid | 90.00 (100 ± 0) |" in table and "| sparse | 90.00 (100 ± 0) |" in table, "one seed: no spread"

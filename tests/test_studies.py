"""The claim studies (interp/studies/registry.py), the beta ramp of trela/TDA training, and the probes
they report: spurious survivors of a threshold (TDA Theorems 4.3, 4.6) and sharp reads."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

import models
from interp.metrics.probes import sharp_share
from interp.metrics.threshold import spurious_survivors, survivor_theorems, threshold_kappa
from interp.studies import registry
from interp.tasks import IGNORE, ONE, READ, WRITE, ZERO
from interp.training.loop import beta_at, train
from interp.training.setup import TrainConfig, TrainingInterrupted
from models import ModelConfig
from support import interrupt_training_at

RAMP = dict(seq_len=32, batch_size=4, eval_n=1, steps=8, beta_schedule="ramp", beta_ramp_start=2, beta_ramp_end=6)


def test_the_ramp_holds_zero_then_rises_linearly_then_holds_beta_final():
    cfg = TrainConfig(**{**RAMP, "beta_final": 0.8})
    assert [beta_at(step, cfg) for step in range(8)] == pytest.approx([0, 0, 0, 0.2, 0.4, 0.6, 0.8, 0.8])


@pytest.mark.parametrize("bounds", [(4, 4), (5, 2), (0, 9), (-1, 3)])
def test_a_ramp_outside_the_run_is_refused(bounds):
    with pytest.raises(ValueError, match="beta ramp needs"):
        TrainConfig(**{**RAMP, "beta_ramp_start": bounds[0], "beta_ramp_end": bounds[1]})


def test_a_ramp_on_a_model_without_a_threshold_is_refused(tmp_path):
    with pytest.raises(ValueError, match="this model has none"):
        train(ModelConfig.from_preset("rope", "tiny", n_ctx=32), TrainConfig(**RAMP), tmp_path / "run", progress=False)


def test_ramped_beta_follows_the_schedule_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    mc = ModelConfig.from_preset("tda", "tiny", n_ctx=32, attention_options={"beta_init": 0.0})
    cfg = TrainConfig(**RAMP)
    full = train(mc, cfg, tmp_path / "full", progress=False)
    assert [block.attn.beta.item() for block in full.blocks] == [1.0, 1.0]
    interrupt_training_at(monkeypatch, 3)
    with pytest.raises(TrainingInterrupted):
        train(mc, cfg, tmp_path / "part", progress=False)
    monkeypatch.undo()
    assert [block.attn.beta.item() for block in models.load(tmp_path / "part").blocks] == [0.25, 0.25]
    train(mc, cfg, tmp_path / "part", resume=True, progress=False)
    ta, tb = (models.checkpoint.read_checkpoint(tmp_path / name)[1] for name in ("full", "part"))
    assert all(torch.equal(ta[key], tb[key]) for key in ta)


def test_spurious_survivors_count_the_i_and_r_keys_before_the_read_on_a_hand_example():
    tokens = np.array([[WRITE, ZERO, IGNORE, ONE, IGNORE, ZERO, READ, ZERO]])
    view_1 = torch.zeros(1, 1, 8, 8)
    view_2 = torch.zeros(1, 1, 8, 8)
    view_1[0, 0, 6, [0, 2, 3, 6]] = 0.5          # the write, one i, a bit, the read itself
    view_2[0, 0, 6, [2, 4]] = 0.1                # both i keys
    table = spurious_survivors({0: view_1}, tokens, {0: view_2})
    assert table[["position", "noise", "S", "S_2", "C"]].to_dict("records") == [
        {"position": 6, "noise": 2, "S": 1, "S_2": 2, "C": 1}]


def test_threshold_kappa_is_restored_and_needs_a_threshold_model():
    model = models.build_model(ModelConfig.from_preset("tda", "tiny", n_ctx=32))
    with threshold_kappa(model, 4.0):
        assert {block.attn.options.kappa for block in model.blocks} == {4.0}
    assert {block.attn.options.kappa for block in model.blocks} == {1.0}
    with pytest.raises(ValueError, match="no threshold layer"):
        with threshold_kappa(models.build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=32)), 2.0):
            pass


def test_survivor_theorems_give_one_row_per_layer_length_and_kappa():
    torch.manual_seed(0)
    model = models.build_model(ModelConfig.from_preset("tda", "tiny", n_ctx=64, attention_options={"beta_init": 0.0}))
    frame = survivor_theorems(model.eval(), lengths=(32, 64), kappas=(1.0, 2.0), reads=10)
    assert len(frame) == 2 * 2 * 2
    assert (frame.S_low <= frame.S_mean).all() and (frame.S_mean <= frame.S_high).all()
    assert (frame.C_mean <= frame.S_mean).all()
    assert frame.S_bound.tolist() == frame.kappa.tolist()


def test_sharp_share_counts_reads_where_some_head_puts_enough_on_the_last_write():
    table = pd.DataFrame({"layer": 0, "seq": [0, 0, 0, 0, 1, 1], "position": [4, 4, 8, 8, 4, 4],
                          "head": [0, 1, 0, 1, 0, 1], "weight": [0.995, 0.2, 0.5, 0.6, np.nan, np.nan]})
    assert sharp_share(table, 0.99).to_dict("records") == [{"layer": 0, "n": 2, "sharp": 1, "share": 0.5}]


def app_a_frame(learned: dict[tuple[str, int], bool]) -> pd.DataFrame:
    return pd.DataFrame([{"model": model, "seq_len": 512, "seed": seed, "learned": ok}
                         for (model, seed), ok in learned.items()])


def test_the_app_a_rule_takes_the_lowest_seed_where_both_learned_and_waits_for_unfinished_seeds():
    both_at_1 = {("tra", 0): False, ("fot", 0): True, ("tra", 1): True, ("fot", 1): True}
    assert registry.app_a_chosen_seed(app_a_frame(both_at_1)) == 1
    assert registry.app_a_chosen_seed(app_a_frame({("tra", 1): True, ("fot", 1): True})) is None
    assert registry.app_a_chosen_seed(app_a_frame({("tra", 0): True, ("fot", 0): False})) is None


def test_every_study_names_its_runs_by_their_options():
    assert len(registry.app_a_runs()) == 2 * 5 * 2
    assert {run.training["beta_schedule"] for run in registry.tda_threshold_runs().values()} == {"ramp"}
    sharpening = registry.sharpening_runs()
    assert len(sharpening) == 2 * 5 * 2
    assert {"regulariser": "linf", "reg_coef": 0.1, "seed": 1}.items() <= sharpening["rope-mech-linf0.1-seed1"].training.items()


def test_a_study_run_is_trained_once_and_the_summary_is_written_from_finished_runs(tmp_path, monkeypatch):
    from interp.studies.specimens import Specimen

    run = Specimen("fot", "tiny", {"seq_len": 32, "batch_size": 4, "steps": 2, "lr": 1e-3, "seed": 0}, "llama",
                   model_fields={"n_ctx": 512})
    monkeypatch.setitem(registry.STUDIES, "app-a", lambda: {"fot-T512-seed0": run})
    monkeypatch.setattr(registry, "EVAL_N", 2)
    monkeypatch.setattr("interp.studies.reproduce.HELD_OUT_N", 2)
    first = registry.run_study_one("app-a", "fot-T512-seed0", run, str(tmp_path))
    again = registry.run_study_one("app-a", "fot-T512-seed0", run, str(tmp_path))   # read back, not retrained
    assert again == json.loads(json.dumps(first))
    frame = registry.run_study("app-a", tmp_path, train=False)
    result = json.loads((tmp_path / "runs" / "fot-T512-seed0" / "result.json").read_text())
    assert result["command"].startswith("glitchlens train --model fot") and result["splits"]["iid"]["sequences"] == 2
    assert frame.name.tolist() == ["fot-T512-seed0"] and "Chosen: no seed yet" in (tmp_path / "summary.md").read_text()
    with pytest.raises(ValueError, match="unknown study"):
        registry.run_study("nosuch", tmp_path)


def test_the_sharpening_table_reads_both_set_ups_and_takes_the_sharpest_layer():
    split = {"read_errors": 3, "reads": 1000, "error_rate": 0.003, "error_rate_upper95": 0.0088, "sequence_accuracy": 0.9}
    rope = {"name": "rope-mech-linf0.1-seed1", "regulariser": "linf", "reg_coef": 0.1, "seed": 1,
            "held_out": {"sequence_accuracy": 1.0}, "splits": {"iid": split, "sparse": split, "dense": split},
            "sharpness": {"sparse": [{"layer": 0, "n": 10, "sharp": 1, "share": 0.1},
                                     {"layer": 1, "n": 10, "sharp": 8, "share": 0.8}],
                          "dense": [{"layer": 0, "n": 30, "sharp": 3, "share": 0.1},
                                    {"layer": 1, "n": 30, "sharp": 6, "share": 0.2}]}}
    automaton = {"name": "automaton-1l-none-seed0", "regulariser": "none", "reg_coef": 0.0, "seed": 0,
                 "automaton": {"128": {"position_accuracy": 1.0, "sequence_accuracy": 1.0},
                               "512": {"position_accuracy": 0.99, "sequence_accuracy": 0.5}},
                 "sharpness": {"train": [{"layer": 0, "n": 100, "sharp": 25, "share": 0.25}]}}
    frame = registry.sharpening_table([rope, automaton])
    assert frame.base.tolist() == ["rope-mech", "automaton-1l"]
    assert frame.sharp_L1[0] == pytest.approx(14 / 40) and frame.sharp.tolist() == pytest.approx([14 / 40, 0.25])
    summary = registry.sharpening_summary(frame)
    assert "| rope-mech | linf 0.1 | 1 | 3 of 1000 (3.00e-03, <= 8.80e-03)" in summary
    assert "| automaton-1l | none | 0 |" in summary and "100.000% / 99.000%" in summary

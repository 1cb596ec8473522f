"""The block recipe options (norm placement, torch init, biases) and the recipes that bundle them,
the TRA authors' notebook's dropout and decay of every parameter included."""

import json
import math

import pandas as pd
import pytest
import torch

from interp.cli import build_parser, main, train_configs
from interp.studies.reproduce import (Scale, markdown_table, recipes_markdown, reproduce_recipes, reproduce_table1,
                                      summarise_runs)
from interp.training.recipes import DEFAULT_RECIPE, RECIPES
from models import ModelConfig, build_model, load, save

AUTHORS = RECIPES["authors"].model


def test_stream_block_normalises_the_stream_itself():
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("tra", "tiny", norm_placement="stream"))
    _, cache = model.run_with_cache(torch.randint(0, 5, (2, 17)))
    for layer in range(2):
        normed = cache[f"blocks.{layer}.ln1.hook_normalized"]
        torch.testing.assert_close(cache[f"blocks.{layer}.hook_resid_mid"],
                                   normed + cache[f"blocks.{layer}.hook_attn_out"])
        torch.testing.assert_close(cache[f"blocks.{layer}.hook_resid_post"],
                                   cache[f"blocks.{layer}.ln2.hook_normalized"] + cache[f"blocks.{layer}.hook_mlp_out"])


def test_pre_norm_block_keeps_the_raw_stream():
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("tra", "tiny"))
    _, cache = model.run_with_cache(torch.randint(0, 5, (2, 17)))
    torch.testing.assert_close(cache["blocks.0.hook_resid_mid"],
                               cache["blocks.0.hook_resid_pre"] + cache["blocks.0.hook_attn_out"])


@pytest.mark.parametrize("name", ["tra", "fot", "tda", "cope", "rope", "ape"])
def test_torch_init_bounds(name):
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset(name, "tiny", **AUTHORS)
    model = build_model(cfg)
    params = dict(model.named_parameters())
    assert params["W_E"].abs().max() <= 0.01
    assert 0.015 < params["W_U"].std() < 0.025
    model_bound, mlp_bound = 1 / math.sqrt(cfg.d_model), 1 / math.sqrt(cfg.d_mlp)
    for key, p in params.items():
        leaf = key.rsplit(".", 1)[-1]
        if not leaf.startswith(("W_", "b_")) or leaf in ("W_E", "W_U", "W_pos"):
            continue
        bound = mlp_bound if leaf in ("W_out", "b_out") else model_bound
        assert p.abs().max() <= bound, key
        if p.numel() >= 32:   # uniform on [-bound, bound]: the largest of many draws is near the bound
            assert p.abs().max() > 0.8 * bound, key
    if name == "tda":   # not a projection: keeps the option's value
        assert params["blocks.0.attn.beta"].item() == cfg.attention_options.get("beta_init", 1.0)


def test_linear_bias_adds_trained_biases():
    torch.manual_seed(0)
    plain = build_model(ModelConfig.from_preset("fot", "tiny"))
    biased = build_model(ModelConfig.from_preset("fot", "tiny", linear_bias=True))
    extra = set(dict(biased.named_parameters())) - set(dict(plain.named_parameters()))
    assert extra == {f"blocks.{l}.{n}" for l in range(2) for n in ("attn.b_O", "mlp.b_gate", "mlp.b_in", "mlp.b_out")}
    with torch.no_grad():
        biased.blocks[0].mlp.b_out.fill_(0.5)
    biased(torch.randint(0, 5, (2, 9))).sum().backward()
    assert all(biased.get_parameter(name).grad.abs().sum() > 0 for name in extra)


def test_recipe_options_survive_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("tra", "tiny", **AUTHORS))
    save(tmp_path / "ck", model)
    loaded = load(tmp_path / "ck")
    assert loaded.cfg == model.cfg
    tokens = torch.randint(0, 5, (2, 11))
    torch.testing.assert_close(loaded(tokens), model.eval()(tokens))


def test_unknown_block_options_are_refused():
    with pytest.raises(ValueError, match="norm_placement"):
        ModelConfig(model="tra", norm_placement="post")
    with pytest.raises(ValueError, match="init"):
        ModelConfig(model="tra", init="xavier")


def _parse(*argv):
    return train_configs(build_parser().parse_args(["train", "--model", "tra", "--out", "x", *argv]))


def test_cli_recipe_sets_defaults_and_flags_win():
    model_cfg, train_cfg = _parse("--recipe", "authors", "--warmup", "7")
    assert (model_cfg.norm_placement, model_cfg.init, model_cfg.linear_bias) == ("stream", "torch", True)
    assert (train_cfg.weight_decay, train_cfg.warmup, train_cfg.grad_clip) == (0.01, 7, None)
    model_cfg, train_cfg = _parse("--recipe", "llama", "--grad-clip", "none", "--init", "torch")
    assert train_cfg.grad_clip is None and model_cfg.init == "torch" and model_cfg.norm_placement == "pre"
    assert _parse("--recipe", "llama")[1].grad_clip == 1.0 and _parse("--recipe", "llama")[1].warmup == 50


def test_no_recipe_named_is_the_notebook_recipe():
    """The default recipe is ``authors-notebook`` (docs/results/learning.md "The recipes, measured")."""
    assert DEFAULT_RECIPE == "authors-notebook" and _parse() == _parse("--recipe", DEFAULT_RECIPE)
    model_cfg, train_cfg = _parse()
    assert (model_cfg.norm_placement, model_cfg.attention_dropout, model_cfg.mlp_hidden_dropout) == ("stream", 0.01, 0.01)
    assert (train_cfg.weight_decay, train_cfg.decay_all_parameters, train_cfg.warmup) == (0.01, True, 0)


@pytest.mark.integration
def test_recipe_sweep_tables(tmp_path):
    scale = Scale(preset="tiny", steps=2, lr=1e-3, batch_size=2, recipe="llama", eval_n=3, eval_every=1, seq_len=32)
    frame = reproduce_recipes(tmp_path, ("llama", "authors"), ("fot",), seeds=1, jobs=1, scale=scale)
    assert list(frame.recipe) == ["llama", "authors"] and set(frame.columns) >= {"iid", "learned"}
    run = tmp_path / "authors" / "runs" / "fot-seed0"
    assert load(run).cfg.norm_placement == "stream"
    assert (tmp_path / "recipes.md").read_text().startswith("Seeds at >= 99%")


def _result(model: str, seed: int, iid: float) -> dict:
    return {"model": model, "seed": seed,
            "splits": {split: {"sequence_accuracy": iid if split == "iid" else 0.5, "error_rate": 0.1}
                       for split in ("iid", "dense", "sparse")}}


def test_table1_counts_the_seeds_that_learned_iid():
    table = summarise_runs([_result("tra", 0, 1.0), _result("tra", 1, 0.985), _result("fot", 0, 0.99)])
    assert table.set_index(["model", "split"]).loc[("tra", "iid"), "learned"] == 1
    assert "| seeds at >= 99% iid | 1/2 | 1/1 |" in markdown_table(table)


def test_table1_report_only_reads_the_finished_runs_and_trains_nothing(tmp_path):
    with pytest.raises(ValueError, match="no finished run"):
        reproduce_table1(tmp_path, models=("tra", "fot"), train=False)
    for result in (_result("fot", 0, 1.0), _result("fot", 2, 0.2)):
        run = tmp_path / "runs" / f"fot-seed{result['seed']}"
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(result))
    table = reproduce_table1(tmp_path, models=("tra", "fot"), seeds=2, train=False)
    assert set(table.model) == {"fot"} and set(table.seeds) == {1}, "seed 2 lies outside --seeds 2"
    assert (tmp_path / "table1.md").read_text().count("| seeds at >= 99% iid | 1/1 |") == 1


def test_recipes_markdown_counts_learned_seeds():
    frame = pd.DataFrame({"recipe": ["a"] * 3, "model": ["tra"] * 3, "seed": [0, 1, 2],
                          "held_out": [1.0, 0.995, 0.5], "iid": [1.0, 0.8, 0.5],
                          "learned": [True, True, False], "first_perfect_check": [100, 300, None]})
    assert "| a | 2/3 (100.0/100.0, 99.5/80.0, 50.0/50.0; step 200) |" in recipes_markdown(frame)


def test_a_recipe_sets_attention_options_per_mechanism_and_flags_add_to_them():
    model_cfg = _parse("--model", "tda", "--recipe", "cpu-learning", "--attn-opt", "kappa=2.0")[0]
    assert model_cfg.n_heads == 4 and model_cfg.attention_options["beta_init"] == 0.0
    assert model_cfg.attention_options["kappa"] == 2.0
    assert _parse("--model", "tra", "--recipe", "cpu-learning")[0].attention_options == \
        ModelConfig.from_preset("tra").attention_options


NOTEBOOK_DROPOUT = {"embedding_dropout": 0.01, "attention_dropout": 0.01, "mlp_hidden_dropout": 0.01}


def dropout_fields(cfg):
    return {k: getattr(cfg, k) for k in NOTEBOOK_DROPOUT}


def test_the_notebook_recipes_resolve_and_leave_the_others_as_they_were():
    model_cfg, train_cfg = _parse("--recipe", "authors-notebook")
    assert (model_cfg.norm_placement, model_cfg.init, model_cfg.linear_bias) == ("stream", "torch", True)
    assert dropout_fields(model_cfg) == NOTEBOOK_DROPOUT and model_cfg.dropout == 0.0
    assert (train_cfg.weight_decay, train_cfg.warmup, train_cfg.grad_clip, train_cfg.decay_all_parameters) == \
        (0.01, 0, None, True)
    model_cfg, train_cfg = _parse("--recipe", "authors-dropout")
    assert dropout_fields(model_cfg) == NOTEBOOK_DROPOUT and model_cfg.norm_placement == "pre"
    assert not train_cfg.decay_all_parameters and train_cfg.weight_decay == 0.1
    model_cfg, train_cfg = _parse("--model", "tda", "--recipe", "cpu-learning-notebook")
    assert model_cfg.n_heads == 4 and model_cfg.attention_options["beta_init"] == 0.0
    assert dropout_fields(model_cfg) == NOTEBOOK_DROPOUT and train_cfg.decay_all_parameters
    for name in ("llama", "authors", "cpu-learning", "cpu-learning-authors"):
        model_cfg, train_cfg = _parse("--recipe", name)
        assert dropout_fields(model_cfg) == {"embedding_dropout": None, "attention_dropout": 0.0,
                                             "mlp_hidden_dropout": 0.0}, name
        assert not train_cfg.decay_all_parameters, name
    model_cfg, train_cfg = _parse("--recipe", "authors-notebook", "--no-decay-all-parameters",
                                  "--attention-dropout", "0")
    assert not train_cfg.decay_all_parameters and model_cfg.attention_dropout == 0.0
    assert _parse("--decay-all-parameters", "--mlp-hidden-dropout", "0.2")[1].decay_all_parameters


@pytest.mark.integration
def test_a_notebook_recipe_run_is_deterministic(tmp_path):
    def run(name, *extra):
        argv = ["train", "--model", "tra", "--recipe", "authors-notebook", "--steps", "2", "--batch-size", "2",
                "--seq-len", "32", "--eval-n", "1", "--quiet", "--out", str(tmp_path / name), *extra]
        assert main(argv) == 0
        return load(tmp_path / name).state_dict()

    first, second = run("a"), run("b")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    undropped = run("c", "--attention-dropout", "0")
    assert not torch.equal(first["blocks.0.attn.W_Q"], undropped["blocks.0.attn.W_Q"])

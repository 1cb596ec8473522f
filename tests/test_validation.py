"""Nonsense options are refused with a message naming the option, never run silently."""

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.training.setup import TrainConfig
from models import MODEL_NAMES, ModelConfig, build_model

NUMBERS = st.one_of(st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                    st.text(max_size=3))


@pytest.mark.parametrize("overrides, message", [
    ({"n_layers": 0}, "n_layers must be a positive integer"),
    ({"n_layers": -1}, "n_layers must be a positive integer"),
    ({"n_heads": 0}, "n_heads must be a positive integer"),
    ({"d_model": 0}, "d_model must be a positive integer"),
    ({"d_model": 2.5}, "d_model must be a positive integer"),
    ({"d_mlp": 0}, "d_mlp must be a positive integer"),
    ({"n_ctx": True}, "n_ctx must be a positive integer"),
    ({"dropout": 1.0}, "dropout must be a number in"),
    ({"attention_dropout": -0.1}, "attention_dropout must be a number in"),
    ({"attention_dropout": None}, "attention_dropout must be a number in"),
    ({"mlp_hidden_dropout": 1.0}, "mlp_hidden_dropout must be a number in"),
    ({"mlp_hidden_dropout": True}, "mlp_hidden_dropout must be a number in"),
    ({"embedding_dropout": math.nan}, r"embedding_dropout must be a number in \[0, 1\) \(or null"),
    ({"embedding_dropout": "0.1"}, "embedding_dropout must be a number in"),
    ({"attention_options": {"qk_norm": "banana"}}, "qk_norm='banana' of 'tra' must be bool"),
    ({"attention_options": {"forget_bias": "x"}}, "forget_bias='x' of 'tra' must be float"),
    ({"attention_options": {"rope": 1}}, "rope=1 of 'tra' must be bool"),
])
def test_model_config_refuses(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_preset("tra", "tiny", **overrides)


def test_option_types_accept_what_the_mechanisms_take():
    ModelConfig.from_preset("tra", "tiny", attention_options={"forget_bias": 1, "qk_norm": False})
    ModelConfig.from_preset("cope", "tiny", attention_options={"p_max": None})
    ModelConfig.from_preset("cope", "tiny", attention_options={"p_max": 8})
    with pytest.raises(ValueError, match="p_max=0.5 of 'cope' must be int or null"):
        ModelConfig.from_preset("cope", "tiny", attention_options={"p_max": 0.5})
    with pytest.raises(ValueError, match="accepts"):  # unknown names: the mechanism's own message
        build_model(ModelConfig.from_preset("tra", "tiny", attention_options={"qknorm": False}))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MODEL_NAMES), st.sampled_from(["n_layers", "n_heads", "d_model", "d_mlp", "n_ctx", "dropout",
                                                     "attention_dropout", "mlp_hidden_dropout", "embedding_dropout"]),
       NUMBERS)
def test_fuzz_model_sizes_are_valid_or_refused(model, field, value):
    """A random value either builds a valid config or raises ValueError naming the field."""
    try:
        cfg = ModelConfig.from_preset(model, "tiny", **{field: value})
    except ValueError as err:
        assert field in str(err) or "divisible" in str(err) or "label_range" in str(err)
    else:
        assert cfg.n_layers >= 1 and cfg.n_heads >= 1 and cfg.d_model >= 1 and 0 <= cfg.dropout < 1
        if field.endswith("dropout") and not (field == "embedding_dropout" and value is None):
            assert 0 <= getattr(cfg, field) < 1


@pytest.mark.parametrize("overrides, message", [
    ({"grad_clip": 0.0}, "grad_clip must be a positive number"),
    ({"grad_clip": -1.0}, "grad_clip must be a positive number"),
    ({"grad_clip": math.nan}, "grad_clip must be a positive number"),
    ({"eval_n": 0}, "eval_n must be a positive integer"),
    ({"lr": 0.0}, "lr must be a positive number"),
    ({"seq_len": 7}, "seq_len 7"),
    ({"warmup": -1}, "warmup must be an integer >= 0"),
    ({"p_bottom": 2.0}, "p_bottom must lie in"),
    ({"task": "automaton", "data_file": "x.jsonl"}, "automaton task.*neither a data file nor mixture"),
    ({"task": "automaton", "mixture": True}, "automaton task"),
    ({"mixture": True, "data_file": "x.jsonl"}, "choose one"),
    ({"decay_all_parameters": 1}, "decay_all_parameters must be true or false"),
    ({"decay_all_parameters": "yes"}, "decay_all_parameters must be true or false"),
])
def test_train_config_refuses(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["steps", "batch_size", "lr", "weight_decay", "warmup", "min_lr_ratio", "grad_clip",
                        "seq_len", "reg_coef", "eval_every", "eval_n", "checkpoint_every", "p_bottom",
                        "decay_all_parameters"]), NUMBERS)
def test_fuzz_train_options_are_valid_or_refused(field, value):
    try:
        TrainConfig(**{field: value})
    except ValueError as err:
        assert field in str(err)


def test_a_saved_training_config_takes_defaults_for_new_fields_and_refuses_unknown_ones():
    saved = dataclasses.asdict(TrainConfig(steps=7))
    del saved["grad_clip"]
    assert TrainConfig.from_dict(saved) == TrainConfig(steps=7)
    with pytest.raises(ValueError, match=r"training config has unknown fields \['bogus'\]"):
        TrainConfig.from_dict({**saved, "bogus": 1})


# --- Sizes are refused with their limit before anything is allocated.

@pytest.mark.parametrize("overrides, message", [
    ({"n_layers": 10**6}, "n_layers must be a positive integer at most 256, got 1000000"),
    ({"d_model": 10**30}, "d_model must be a positive integer at most 16,384"),
    ({"n_ctx": 10**11}, "n_ctx must be a positive integer at most 1,048,576"),
    ({"n_layers": 256, "d_model": 4096}, r"about 4.\d+e\+10 parameters, more than the 1,073,741,824"),
])
def test_sizes_beyond_the_limits_are_refused_naming_the_limit(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_preset("tra", "tiny", **overrides)


def test_the_parameter_estimate_bounds_the_models_built():
    for name in MODEL_NAMES:
        cfg = ModelConfig.from_preset(name, "tiny", n_heads=4, n_ctx=128, linear_bias=True)
        assert sum(p.numel() for p in build_model(cfg).parameters()) <= cfg.approx_parameters(), name


@pytest.mark.parametrize("overrides, message", [
    ({"seq_len": 10**11}, r"16 sequences per batch \(batch_size\) of 100,000,000,000 tokens .* more than the "
                          r"268,435,456"),
    ({"batch_size": 10**9}, r"1,000,000,000 sequences per batch \(batch_size\) of 512 tokens"),
])
def test_a_training_batch_beyond_the_limit_is_refused_before_training(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides)


def test_draws_beyond_the_limit_are_refused_before_numpy_allocates():
    from interp.tasks import sample_ffl

    with pytest.raises(ValueError, match=r"more than the 268,435,456 \(interp.tasks.MAX_TOKENS\)"):
        sample_ffl(10**6, 10**6)


# --- The Python API: empty or impossible inputs get a clear error, not a library's own.

def test_sparsity_of_no_maps_says_what_it_needs():
    from interp.metrics import sparsity

    for empty in ({}, []):
        with pytest.raises(ValueError, match=r"no attention maps given .* pass \{layer: \[batch, head"):
            sparsity(empty)


def test_read_table_refuses_ids_outside_the_vocabulary_instead_of_dropping_reads():
    import numpy as np

    from interp.metrics import read_table
    from interp.tasks import load_split

    tokens = load_split("iid", 2).astype(np.int64)
    assert len(read_table(tokens, tokens[:, 1:])) > 0
    tokens[1, 7] = 9
    with pytest.raises(ValueError, match="id 9 at sequence 1, position 7 is not in the flip-flop vocabulary 0..4"):
        read_table(tokens, tokens[:, 1:])


def test_evaluating_sequences_beyond_the_length_limit_is_refused_at_once():
    import numpy as np

    from interp.evaluate import MAX_SEQ_LEN, evaluate_tokens

    tokens = np.zeros((1, MAX_SEQ_LEN + 2), dtype=np.uint8)
    model = build_model(ModelConfig.from_preset("nope", "tiny"))
    with pytest.raises(ValueError, match=r"sequences of 16,386 tokens are longer than the 16,384"):
        evaluate_tokens(model, tokens, "long.jsonl")


def test_a_jsonl_file_with_a_byte_order_mark_reads(tmp_path):
    from interp.tasks import read_sequences

    path = tmp_path / "bom.jsonl"
    path.write_text('{"text": "w1r1"}\n{"text": "w0r0"}\n', encoding="utf-8-sig")
    assert path.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert read_sequences(path).tolist() == [[0, 4, 1, 4], [0, 3, 1, 3]]


@pytest.mark.parametrize("model", ["tra", "fot", "cope", "diff", "trela", "tda"])
def test_attention_maps_beyond_the_limit_are_refused_before_they_are_allocated(model, monkeypatch):
    """Every path that builds ``[batch, head, T, T]`` maps refuses them beyond the limit: the
    reference (which a hooked run and training with ``attention_impl="reference"`` take) and the
    CPU ``rows`` path with gradients, which keeps blocks of maps for its backward (Diff's too: it
    trains on the CPU in row blocks, not through SDPA)."""
    import torch

    import kernels.tooling.common

    net = build_model(ModelConfig.from_preset(model, "tiny", n_ctx=64)).eval()
    tokens = torch.zeros(2, 40, dtype=torch.long)
    monkeypatch.setattr(kernels.tooling.common, "MAX_MAP_ELEMENTS", 2 * net.cfg.n_heads * 40 * 40 - 1)
    with pytest.raises(ValueError, match=r"maps of 2 x \d+ x 40 x 40 = [\d,]+ elements .* over the limit"):
        net(tokens)
    with pytest.raises(ValueError, match="over the limit"):
        net.run_with_cache(tokens)
    with torch.no_grad():
        assert torch.isfinite(net(tokens)).all(), "without gradients the CPU path streams the keys"


# --- The public API checks what it is given (models.validate): one line naming the argument.

def _pattern(dtype=None):
    import torch

    pattern = torch.full((1, 1, 4, 4), 0.25).tril()
    return pattern if dtype is None else pattern.to(dtype)


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m.sparsity(_pattern(__import__("torch").int8)), TypeError, "a"),
    (lambda m: m.sparsity(_pattern(__import__("torch").bool)), TypeError, "a"),
    (lambda m: m.sparsity(_pattern(__import__("torch").complex64)), TypeError, "a"),
    (lambda m: m.sparsity({0: _pattern() * math.inf}), ValueError, r"maps\[0\] holds NaN or infinite weights"),
    (lambda m: m.entropy_summary(_pattern() * math.nan), ValueError, r"maps\[0\] holds NaN or infinite weights"),
    (lambda m: m.sparsity({}), ValueError, "maps: no attention maps given"),
    (lambda m: m.dispersion(_pattern(), eps=-1e-3), ValueError, "eps must be a finite number > 0"),
    (lambda m: m.dispersion(_pattern(), eps=math.nan), ValueError, "eps must be a finite number"),
    (lambda m: m.tail_probabilities(_pattern(), ks=(2, -1)), ValueError, r"ks\[1\] must be a finite number >= 0"),
    (lambda m: m.tail_probabilities(_pattern(), ks=()), ValueError, "ks is empty"),
    (lambda m: m.sink_ratio(_pattern(), key_pos=[0.5]), TypeError, r"key_pos\[0\] must be an integer"),
    (lambda m: m.sink_ratio(_pattern(), key_pos=[-1]), ValueError, "key_pos: .* outside"),
    (lambda m: m.t_interval([1.0]), ValueError, "values must hold at least two draws"),
    (lambda m: m.t_interval([1.0, math.inf]), ValueError, "values holds NaN or infinite values"),
    (lambda m: m.t_interval([1.0, 2.0], confidence=1), ValueError, r"confidence must be a finite number in \(0, 1\)"),
    (lambda m: m.wilson_interval([1, 2], [3, 4, 5]), ValueError, "count .* and n .* must have one shape"),
    (lambda m: m.summarise(m.sparsity(_pattern()), how="banana"), ValueError, "how must be one of"),
    (lambda m: m.sink_eps([1, 2]), TypeError, "sink_frame must be a pandas DataFrame"),
    (lambda m: m.gaussian_tail(1j), TypeError, "k must be a real number"),
    (lambda m: m.heatmap_window(8, [1.5], 4), TypeError, r"wrong\[0\] must be an integer"),
])
def test_the_metrics_refuse_nonsense_naming_the_argument(call, error, message):
    """The functions' own checks, without the suite's beartype shape checks (tests/conftest.py) in
    front of them, as a user's program calls them."""
    import inspect
    from types import SimpleNamespace

    import interp.metrics

    bodies = SimpleNamespace(**{name: inspect.unwrap(value) for name, value in vars(interp.metrics).items()
                                if callable(value)})
    with pytest.raises(error, match=message):
        call(bodies)


@pytest.mark.parametrize("call, error, message", [
    (lambda t: t.sample_ffl(2.5, 64), TypeError, "n must be an integer, got 2.5"),
    (lambda t: t.sample_ffl(-2, 64), ValueError, "n must be an integer >= 0, got -2"),
    (lambda t: t.sample_ffl(2, 64, p_i=math.nan), ValueError, "p_i must be a finite number"),
    (lambda t: t.sample_ffl(2, 64, rng=-1), ValueError, "rng must be an integer >= 0"),
    (lambda t: t.sample_ffl(2, 64, rng="seed"), TypeError, "rng must be a seed"),
    (lambda t: t.get_task("counting").sample(-2, 64, 0), ValueError, "n must be an integer >= 0, got -2"),
    (lambda t: t.get_task("selective-copy").sample(2, 64.0, 0), TypeError, "seq_len must be an integer"),
    (lambda t: t.get_task("flipflop").train_batch(4, -1, 0), ValueError, "step must be an integer >= 0"),
    (lambda t: t.get_task(["flipflop"]), TypeError, "name must be a string"),
    (lambda t: t.load_split("iid", 2.0), TypeError, "n must be an integer"),
    (lambda t: t.train_batch(4, 0, 0, mixture=1), TypeError, "mixture must be True or False"),
    (lambda t: t.read_mask("w1r1"), TypeError, "tokens must be"),
    (lambda t: t.parse_sequences("w1r1"), TypeError, "texts must be a list of strings"),
    (lambda t: t.instruction_probs("0.5"), TypeError, "p_i must be a real number"),
])
def test_the_tasks_refuse_nonsense_naming_the_argument(call, error, message):
    import interp.tasks

    with pytest.raises(error, match=message):
        call(interp.tasks)


def test_a_task_of_ones_own_gets_the_sample_checks_too():
    import numpy as np

    from interp.tasks import Task

    class Ones(Task):
        name, vocab = "ones", ("1",)

        def sample(self, n, seq_len, rng):
            return np.ones((n, seq_len), dtype=np.uint8)

    assert Ones().sample(2, 3, 0).shape == (2, 3)
    with pytest.raises(ValueError, match="n must be an integer >= 0, got -2"):
        Ones().sample(-2, 3, 0)


def test_models_refuse_nonsense_naming_the_argument():
    import torch

    import models

    with pytest.raises(TypeError, match="name must be a string, got 123"):
        models.load_pretrained(123)
    with pytest.raises(TypeError, match="cfg must be a models.ModelConfig"):
        build_model({"model": "tra"})
    with pytest.raises(TypeError, match="path must be a path"):
        models.load(None)
    with pytest.raises(ValueError, match="device 'gpu0' is not a device name"):
        models.load("nowhere", device="gpu0")
    model = build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=16)).eval()
    tokens = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"fwd_hooks: 'blocks.0.attn.hook_patern' is not a hook of this tra model.*"
                                         r"did you mean blocks.0.attn.hook_pattern"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_patern", lambda act, hook: act)])
    with pytest.raises(KeyError):   # as TransformerLens's own lookup
        model.run_with_hooks(tokens, fwd_hooks=[("nosuch.hook", lambda act, hook: act)])
    with pytest.raises(TypeError, match="fwd_hooks must hold \\(hook name, function\\) pairs"):
        model.run_with_hooks(tokens, fwd_hooks=["blocks.0.attn.hook_pattern"])
    with pytest.raises(TypeError, match="a hook on blocks.0.attn.hook_pattern returned 'x': a hook returns None"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda act, hook: "x")])

"""TransformerLens's cache helpers, activation patching and model surface on every model:
direct logit attribution adds up to the logits, the mechanisms' hooks answer to
TransformerLens's shorthand, patching the clean activations gives the clean run back, and
what cannot work says why."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformer_lens.patching as patching
from transformer_lens import FactoredMatrix

from interp.tasks import ONE, VOCAB, ZERO
from kernels.tooling.common import MASK_FILL, causal_mask
from models import MODEL_NAMES, ModelConfig, build_model, load_pretrained
from models.lens import GlitchLensCache

ATTENTION_MODELS = [m for m in MODEL_NAMES if m != "lstm"]
# Two flip-flop prefixes ending in a read; only the last write's bit (position 5) differs, so
# the read should return 0 for CLEAN and 1 for CORRUPTED.
CLEAN, CORRUPTED = "w1i0w0i1r", "w1i0w1i1r"
CHANGED_POSITION = 5
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 rounding of sums of about ten terms


def tiny(name, **overrides):
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset(name, "tiny", n_heads=2, n_ctx=16, **overrides)).eval()


def logit_difference(logits):
    """logit("1") - logit("0") at the last position (the read), ``[batch]``."""
    return logits[:, -1, ONE] - logits[:, -1, ZERO]


def test_transformer_lens_config_attributes_are_derived_and_never_saved():
    model = tiny("tra")
    cfg = model.cfg
    assert (cfg.attn_only, cfg.normalization_type, cfg.n_key_value_heads) == (False, "RMS", None)
    assert tiny("lstm").cfg.normalization_type is None
    assert cfg.device == torch.device("cpu")
    saved = cfg.to_dict()
    assert not {"attn_only", "normalization_type", "n_key_value_heads", "device"} & set(saved)
    assert ModelConfig.from_dict(saved) == cfg
    model.to("meta")  # every move updates cfg.device, which patching allocates its results on
    assert cfg.device == torch.device("meta")


def test_transformer_lens_habits_work_on_a_specimen():
    """tokenizer, W_pos, the stacked biases, n_params and d_vocab_out, as TransformerLens code reads them."""
    model = load_pretrained("tra-mech")
    cfg = model.cfg
    assert model.tokenizer is None
    assert torch.equal(model.W_pos, torch.zeros(cfg.n_ctx, cfg.d_model))  # no position table adds anything
    assert "W_pos" not in model.state_dict()
    for name, shape in (("b_Q", (cfg.n_heads, cfg.d_head)), ("b_V", (cfg.n_heads, cfg.d_head)), ("b_in", (cfg.d_mlp,))):
        assert getattr(model, name).shape == (cfg.n_layers, *shape), name
    hidden = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_in", "W_out")
    assert cfg.n_params == sum(getattr(model, name).numel() for name in hidden)
    assert cfg.d_vocab_out == cfg.d_vocab == model.W_U.shape[1]
    assert tiny("ape").W_pos.requires_grad  # APE's own table stays a parameter


# init="torch" draws the biases of linear_bias, so that the decomposition's bias term is not zero;
# norm_placement="stream" renormalises the stream before every sublayer, so that each component
# reaches the logits through the later norms' factors
DLA_CASES = [pytest.param(name, {}, id=name) for name in ATTENTION_MODELS] + [
    pytest.param(name, {"norm_placement": "stream"}, id=f"{name}-stream") for name in ATTENTION_MODELS] + [
    pytest.param("tra", {"init": "torch", "linear_bias": True}, id="tra-with-biases"),
    pytest.param("tra", {"init": "torch", "linear_bias": True, "norm_placement": "stream"},
                 id="tra-with-biases-stream")]


def stream_into(cache, layer, mlp_input=False):
    """The residual stream that block ``layer``'s first norm (its ln2 with ``mlp_input``;
    ``ln_final`` for ``n_layers``) reads."""
    return cache["resid_mid", layer] if mlp_input else cache["resid_post", layer - 1] if layer else \
        cache["resid_pre", 0]


@pytest.mark.parametrize("name,overrides", DLA_CASES)
def test_direct_logit_attribution_adds_up_to_the_logit_difference(name, overrides):
    model = tiny(name, **overrides)
    logits, cache = model.run_with_cache(model.to_tokens([CLEAN, CORRUPTED]))
    expected = logit_difference(logits)

    # logit_attrs applies the final norm itself: it takes the unscaled stack
    by_component = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens="1", incorrect_tokens="0",
                                     pos_slice=-1)
    torch.testing.assert_close(by_component.sum(0), expected, **TOLERANCE)

    scaled, labels = cache.decompose_resid(apply_ln=True, pos_slice=-1, return_labels=True)
    direction = model.tokens_to_residual_directions(ONE) - model.tokens_to_residual_directions(ZERO)
    torch.testing.assert_close((scaled @ direction).sum(0), expected, **TOLERANCE)
    assert ("pos_embed" in labels) == (name in ("ape", "label"))

    # every head, every neuron (or MLP), the embeddings and the biases
    for expand_neurons in (True, False):
        full, full_labels = cache.get_full_resid_decomposition(pos_slice=-1, expand_neurons=expand_neurons,
                                                               return_labels=True)
        by_part = cache.logit_attrs(full, tokens=torch.tensor(ONE), incorrect_tokens=torch.tensor(ZERO), pos_slice=-1)
        torch.testing.assert_close(by_part.sum(0), expected, **TOLERANCE)
    heads = cache.stack_head_results()
    torch.testing.assert_close(full[:len(heads)], heads[:, :, -1], **TOLERANCE)
    assert full_labels[:len(heads)] == [f"L{l}H{h}" for l in range(2) for h in range(2)] and full_labels[-1] == "bias"

    # each decomposition adds up to the stream it decomposes, at every norm
    for layer, mlp_input in ((0, False), (0, True), (1, False), (1, True), (2, False)):
        stream = stream_into(cache, layer, mlp_input)
        torch.testing.assert_close(cache.decompose_resid(layer, mlp_input).sum(0), stream, **TOLERANCE)
        torch.testing.assert_close(cache.get_full_resid_decomposition(layer, mlp_input).sum(0), stream, **TOLERANCE)
        if not mlp_input:  # TransformerLens's remainder at layer 0 is the whole final stream
            with_rest = cache.stack_head_results(layer, incl_remainder=True).sum(0)
            torch.testing.assert_close(with_rest, stream_into(cache, layer or model.cfg.n_layers), **TOLERANCE)
    neurons = cache.stack_neuron_results(1, incl_remainder=True, mlp_input=True)
    torch.testing.assert_close(neurons.sum(0), cache["resid_mid", 1], **TOLERANCE)

    heads = cache.stack_head_results(1).unflatten(0, (1, model.cfg.n_heads))
    attn_out = cache.stack_activation("attn_out", 1) - model.b_O[:1, None, None]
    if model.cfg.norm_placement == "stream":  # layer 0's output reaches block 1 through layer 0's ln2
        attn_out = attn_out * model.blocks[0].ln2.w / cache["scale", 0, "ln2"]
    torch.testing.assert_close(heads.sum(1), attn_out, **TOLERANCE)

    torch.testing.assert_close(cache.accumulated_resid(apply_ln=True)[-1], cache["ln_final.hook_normalized"])
    lens = cache.logit_lens()
    torch.testing.assert_close(lens.readout.values[-1], logits[:, -1], **TOLERANCE)


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_weights_stacked_over_layers_as_transformer_lens_has_them(name):
    model = tiny(name)
    cfg = model.cfg
    L, H, d, d_head = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head
    expected_shapes = {"W_Q": (L, H, d, d_head), "W_K": (L, H, d, d_head), "W_V": (L, H, d, d_head),
                       "W_O": (L, H, d_head, d), "b_O": (L, d), "W_gate": (L, d, cfg.d_mlp),
                       "W_in": (L, d, cfg.d_mlp), "W_out": (L, cfg.d_mlp, d), "b_out": (L, d)}
    for weight, shape in expected_shapes.items():
        assert getattr(model, weight).shape == shape, weight
    assert torch.equal(model.W_V[1], model.blocks[1].attn.W_V)
    assert not model.b_O.any() and not model.b_out.any(), "no linear_bias: zero biases"
    assert isinstance(model.QK, FactoredMatrix) and isinstance(model.OV, FactoredMatrix)
    assert model.QK.AB.shape == model.OV.AB.shape == (L, H, d, d)
    torch.testing.assert_close(model.OV.AB, model.W_V @ model.W_O)


@pytest.mark.parametrize("name,options,score_dim", [
    ("nope", {}, "d_head"), ("fot", {}, "d_head"), ("cope", {}, "d_head"),
    ("tra", {"qk_norm": False}, "d_head"), ("diff", {"rope": False}, "d_view")])
def test_QK_is_the_bilinear_form_of_the_attention_scores(name, options, score_dim):
    model = tiny(name, attention_options=options)
    _, cache = model.run_with_cache(model.to_tokens([CLEAN]))
    x = cache["normalized", 1, "ln1"]
    d = model.cfg.d_head // (2 if score_dim == "d_view" else 1)
    expected = torch.einsum("bqm,hmn,bkn->bhqk", x, model.QK.AB[1], x) / d ** 0.5
    torch.testing.assert_close(cache["attn_scores", 1], expected, **TOLERANCE)


# What each mechanism's hook_attn_logits feeds: (the map it becomes, how).
def softmax(logits):
    return torch.softmax(logits, -1)


NORMALISATION = {
    "softmax": ("pattern", softmax), "fot": ("pattern", softmax), "cope": ("pattern", softmax),
    "shaw": ("pattern", softmax),
    "tra": ("pattern", lambda logits: softmax(logits).masked_fill(logits == MASK_FILL, 0.0)),  # eq. 12
    "diff": ("view_1", softmax),
    "trela": ("view_1", lambda logits: F.relu(logits) ** 2), "tda": ("view_1", lambda logits: F.relu(logits) ** 2),
}


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_attn_logits_is_what_the_normalisation_reads(name):
    model = tiny(name)
    _, cache = model.run_with_cache(model.to_tokens([CLEAN, CORRUPTED]))
    future = ~causal_mask(len(CLEAN), len(CLEAN))
    normalised, normalise = NORMALISATION[model.cfg.attention]
    for layer in range(model.cfg.n_layers):
        logits = cache["attn_logits", layer]  # the model's own hook, before TransformerLens's alias
        assert logits is cache[f"blocks.{layer}.attn.hook_attn_logits"]
        assert (logits[..., future] == MASK_FILL).all()
        torch.testing.assert_close(normalise(logits), cache[normalised, layer])


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_every_attention_hook_answers_to_the_shorthand(name):
    model = tiny(name)
    _, cache = model.run_with_cache(model.to_tokens([CLEAN]))
    attention_hooks = [m for key in cache.cache_dict if (m := re.fullmatch(r"blocks\.(\d)\.attn\.hook_(\w+)", key))]
    assert len(attention_hooks) >= 2 * 7
    for match in attention_hooks:
        layer, short = int(match[1]), match[2]
        assert cache[short, layer] is cache[short, layer - model.cfg.n_layers] is cache.cache_dict[match[0]]
        assert cache.stack_activation(short).shape[0] == model.cfg.n_layers


def test_shorthand_of_tra_hooks_and_why_a_key_is_missing():
    model = tiny("tra")
    tokens = model.to_tokens([CLEAN])
    _, cache = model.run_with_cache(tokens)
    assert isinstance(cache, GlitchLensCache)
    assert cache["dbar", 1] is cache["blocks.1.attn.hook_dbar"]
    assert cache["mask", 0] is cache["blocks.0.attn.hook_mask"]
    assert cache["forget", -1] is cache["blocks.1.attn.hook_forget"]
    # TransformerLens's own shorthand is unchanged
    assert cache["pattern", 0] is cache["blocks.0.attn.hook_pattern"]
    assert cache["resid_pre", 1] is cache["blocks.1.hook_resid_pre"]
    assert cache["scale", 0, "ln1"] is cache["blocks.0.ln1.hook_scale"]
    assert cache["embed"] is cache["hook_embed"]
    with pytest.raises(KeyError, match=r"ln1\.hook_scale, blocks\.0\.ln2\.hook_scale: name the sublayer"):
        cache["scale", 0]
    with pytest.raises(KeyError, match="the tra model has no hook of that name"):
        cache["decay_bias", 0]  # FoT's
    _, patterns_only = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
    with pytest.raises(KeyError, match="names_filter left it out"):
        patterns_only["dbar", 1]


def test_batch_slices_and_batchless_caches_keep_the_shorthand():
    model = tiny("tra")
    tokens = model.to_tokens([CLEAN, CORRUPTED])
    _, cache = model.run_with_cache(tokens)
    first = cache.apply_slice_to_batch_dim(0)
    assert isinstance(first, GlitchLensCache) and not first.has_batch_dim
    assert torch.equal(first["dbar", 1], cache["dbar", 1][0])
    _, batchless = model.run_with_cache(tokens[:1], remove_batch_dim=True)
    assert not batchless.has_batch_dim and batchless["dbar", 1].ndim == 3
    assert batchless.accumulated_resid().shape == (model.cfg.n_layers + 1, len(CLEAN), model.cfg.d_model)


@pytest.mark.parametrize("name", ["tra", "lstm"])
def test_the_flip_flop_letters_are_the_tokenizer(name):
    model = tiny(name)
    assert model.vocab == VOCAB, "models.tokens.FLIPFLOP_VOCAB is interp.tasks.VOCAB"
    assert model.to_tokens("w1r1").tolist() == [[0, 4, 1, 4]]
    tokens = model.to_tokens([CLEAN, CORRUPTED])
    assert tokens.shape == (2, len(CLEAN)) and tokens.dtype == torch.long
    assert model.to_str_tokens(CLEAN) == list(CLEAN)
    assert model.to_str_tokens(tokens[:1]) == list(CLEAN)
    assert model.to_str_tokens(tokens[1].numpy().astype(np.uint8)) == list(CORRUPTED)
    assert model.to_str_tokens([CLEAN, tokens[1]]) == [list(CLEAN), list(CORRUPTED)]
    assert model.to_string(tokens) == [CLEAN, CORRUPTED] and model.to_string(tokens[0]) == CLEAN
    assert model.to_single_token("r") == 1
    with pytest.raises(ValueError, match=r"'2' at position 1 of 'w2' is not a token; the vocabulary is w r i 0 1"):
        model.to_tokens("w2")
    with pytest.raises(ValueError, match="no padding token"):
        model.to_tokens(["w1", "w1r"])
    with pytest.raises(ValueError, match="no BOS token"):
        model.to_tokens("w1", prepend_bos=True)
    with pytest.raises(ValueError, match="not a single token"):
        model.to_single_token("w1")
    with pytest.raises(ValueError, match="one sequence"):
        model.to_str_tokens(tokens)
    model.vocab = ("0", "1", "_")  # the automaton task's inputs sigma_0, sigma_1, bottom
    assert model.to_str_tokens(model.to_tokens("01_")) == ["0", "1", "_"] and model.to_single_token("_") == 2


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_patching_the_clean_residual_stream_gives_the_clean_read(name):
    model = tiny(name)
    clean, corrupted = model.to_tokens(CLEAN), model.to_tokens(CORRUPTED)
    clean_logits, clean_cache = model.run_with_cache(clean)

    def metric(logits):
        return logit_difference(logits)[0]

    clean_metric, corrupted_metric = metric(clean_logits), metric(model(corrupted))
    by_position = patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric)
    assert by_position.shape == (model.cfg.n_layers, len(CLEAN))
    # the tokens before the changed one have the same activations in both runs
    torch.testing.assert_close(by_position[:, :CHANGED_POSITION],
                               corrupted_metric.expand(model.cfg.n_layers, CHANGED_POSITION), **TOLERANCE)
    torch.testing.assert_close(by_position[0, CHANGED_POSITION], clean_metric, **TOLERANCE)
    everywhere = patching.generic_activation_patch(
        model, corrupted, clean_cache, metric, lambda corrupted_act, index, clean_act: clean_act,
        activation_name="resid_pre", index_axis_names=("layer",))
    torch.testing.assert_close(everywhere, clean_metric.expand(model.cfg.n_layers), **TOLERANCE)


def test_every_head_and_block_patching_sweep_runs():
    model = tiny("tra")
    corrupted = model.to_tokens(CORRUPTED)
    _, clean_cache = model.run_with_cache(model.to_tokens(CLEAN))
    _, corrupted_cache = model.run_with_cache(corrupted)

    def metric(logits):
        return logit_difference(logits)[0]

    L, P, H = model.cfg.n_layers, len(CLEAN), model.cfg.n_heads
    assert patching.get_act_patch_block_every(model, corrupted, clean_cache, metric).shape == (3, L, P)
    assert patching.get_act_patch_attn_head_all_pos_every(model, corrupted, clean_cache, metric).shape == (5, L, H)
    with pytest.raises(NotImplementedError, match="use_split_qkv_input"):
        patching.get_act_patch_direct_path(model, corrupted, clean_cache, corrupted_cache, metric, 0, 0)


def test_a_normalised_stream_projects_and_slices_as_transformer_lens_does():
    model = tiny("tra", norm_placement="stream")
    logits, cache = model.run_with_cache(model.to_tokens([CLEAN, CORRUPTED]))
    direction = model.tokens_to_residual_directions(ONE) - model.tokens_to_residual_directions(ZERO)
    projected = cache.get_full_resid_decomposition(pos_slice=-1, apply_ln=True, project_output_onto=direction)
    torch.testing.assert_close(projected.sum(0), logit_difference(logits), **TOLERANCE)
    both = torch.stack([direction, -direction], dim=-1)
    neurons = cache.stack_neuron_results(2, pos_slice=-1, apply_ln=True, project_output_onto=both)
    torch.testing.assert_close(neurons, cache.stack_neuron_results(2, pos_slice=-1, apply_ln=True) @ both)
    # a slice of positions and of the batch: the scales are sliced alike
    window = cache.decompose_resid(pos_slice=(3, 9))
    torch.testing.assert_close(window, cache.decompose_resid()[:, :, 3:9], **TOLERANCE)
    first = cache.apply_slice_to_batch_dim(0)
    torch.testing.assert_close(first.decompose_resid(), cache.decompose_resid()[:, 0], **TOLERANCE)
    # what holds for any stream: the final norm and the unembedding read the last one
    final_stream = cache["resid_post", -1][None, :, -1]
    attribution = cache.logit_attrs(final_stream, "1", "0", pos_slice=-1)
    torch.testing.assert_close(attribution[0], logit_difference(logits), **TOLERANCE)


def flipflop_specimens():
    """The shipped specimens trained on the flip-flop language (not the automaton task)."""
    from models import pretrained

    return [name for name in pretrained.built() if "--task automaton" not in pretrained.info(name)["command"]]


def test_every_shipped_mech_specimen_is_a_flip_flop_specimen_here():
    assert {"tra-mech", "fot-mech", "tda-mech", "cope-mech", "diff-mech", "trela-mech", "rope-mech"} <= set(
        flipflop_specimens())


@pytest.mark.parametrize("specimen", flipflop_specimens())
def test_direct_logit_attribution_adds_up_on_every_shipped_specimen(specimen):
    """Per component, per head and per neuron, at every position of a few short sequences: the
    shipped tda, cope, diff, trela and rope specimens renormalise the stream."""
    from interp.tasks import load_split

    model = load_pretrained(specimen)
    tokens = torch.cat([model.to_tokens([CLEAN + "0w1i0r", CORRUPTED + "1w0i0r"]),
                        torch.from_numpy(load_split("iid", 2)[:, :15].astype("int64"))])
    logits, cache = model.run_with_cache(tokens)
    everywhere = logits[..., ONE] - logits[..., ZERO]
    for stack in (cache.decompose_resid(), cache.get_full_resid_decomposition(),
                  cache.stack_head_results(incl_remainder=True)):
        attribution = cache.logit_attrs(stack, tokens="1", incorrect_tokens="0")
        torch.testing.assert_close(attribution.sum(0), everywhere, rtol=1e-4, atol=1e-4)


def test_the_lstm_has_no_stream_to_split_and_says_so():
    model = tiny("lstm")
    tokens = model.to_tokens([CLEAN, CORRUPTED])
    logits, cache = model.run_with_cache(tokens)
    # no norm between the hidden state and W_U: its attribution is the logit itself
    attribution = cache.logit_attrs(cache["hidden"][None, :, -1], tokens="1", incorrect_tokens="0", pos_slice=-1)
    torch.testing.assert_close(attribution[0], logit_difference(logits), **TOLERANCE)
    reason = "the lstm model has no blocks, attention or residual stream; its hooks are hook_embed, hook_hidden"
    for helper in (cache.accumulated_resid, cache.decompose_resid, cache.stack_head_results,
                   lambda: patching.get_act_patch_resid_pre(model, tokens, cache, lambda logits: logits.sum())):
        with pytest.raises(KeyError, match=reason):
            helper()


def test_the_pretrained_tra_mech_reads_attributes_and_patches():
    """The workflow that failed on ``tra-mech`` before the models spoke TransformerLens."""
    model = load_pretrained("tra-mech")
    clean, corrupted = model.to_tokens(CLEAN), model.to_tokens(CORRUPTED)
    logits, cache = model.run_with_cache(clean)
    assert model.to_str_tokens(clean) == list(CLEAN)
    assert logit_difference(logits) < 0 < logit_difference(model(corrupted)), "reads 0, then 1"
    attribution = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens="1", incorrect_tokens="0",
                                    pos_slice=-1)
    torch.testing.assert_close(attribution.sum(0), logit_difference(logits), **TOLERANCE)

    def metric(logits):
        return logit_difference(logits)[0]

    by_position = patching.get_act_patch_resid_pre(model, corrupted, cache, metric)
    assert by_position.shape == (2, len(CLEAN))
    torch.testing.assert_close(by_position[0, CHANGED_POSITION], metric(logits), **TOLERANCE)

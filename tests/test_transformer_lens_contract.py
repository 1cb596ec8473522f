"""What code written for TransformerLens's ``HookedTransformer`` reads and calls besides the cache:
the forward's return types and next-token loss (against a loss computed by hand), ``stop_at_layer``,
the config attributes, ``hook_result``, the ``*_tl`` hooks that hold TransformerLens's meaning
where ours differs, and ``generate`` on a trained specimen."""

import numpy as np
import pytest
import torch

from interp.tasks import ONE, READ, ZERO, last_write_positions, load_split
from kernels.tooling.common import MASK_FILL
from models import ModelConfig, build_model, load_pretrained
from models.lens import Output

TOKENS = ["w1i0w0i1r0w1r1", "w0r0i1i0w1r1i1"]
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 rounding of sums of about ten terms


def tiny(name, **overrides):
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset(name, "tiny", n_heads=2, n_ctx=16, **overrides)).eval()


def loss_by_hand(logits, tokens, positions):
    """-log p(next token) at each (sequence, position) of ``positions``, one by one."""
    return torch.stack([-torch.log_softmax(logits[b, t], -1)[tokens[b, t + 1]] for b, t in positions])


@pytest.mark.parametrize("name", ["tra", "lstm"])
def test_return_types_give_the_next_token_loss_computed_by_hand(name):
    model = tiny(name)
    tokens = model.to_tokens(TOKENS)
    batch, n_pos = tokens.shape
    logits = model(tokens)
    every = [(b, t) for b in range(batch) for t in range(n_pos - 1)]
    reads = [(b, t) for b, t in every if t % 2 == 0 and tokens[b, t] == READ]
    assert len(reads) == 4

    torch.testing.assert_close(model(tokens, return_type="loss"), loss_by_hand(logits, tokens, every).mean())
    per_token = model(tokens, "loss", True)
    assert per_token.shape == (batch, n_pos - 1)
    torch.testing.assert_close(per_token.flatten(), loss_by_hand(logits, tokens, every))
    on_reads = model(tokens, return_type="loss", reads_only=True)
    torch.testing.assert_close(on_reads, loss_by_hand(logits, tokens, reads).mean())
    reads_per_token = model(tokens, return_type="loss", loss_per_token=True, reads_only=True)
    assert reads_per_token.count_nonzero() == len(reads)
    torch.testing.assert_close(reads_per_token.sum() / len(reads), on_reads)

    both = model(tokens, return_type="both")
    assert isinstance(both, Output)
    torch.testing.assert_close(both.logits, logits)
    torch.testing.assert_close(both.loss, model(tokens, return_type="loss"))
    assert model.run_with_hooks(tokens, return_type="loss").shape == ()

    seen = []
    assert model.run_with_hooks(tokens, return_type=None, fwd_hooks=[("hook_embed", lambda x, hook: seen.append(x))]) \
        is None and len(seen) == 1, "None runs the model for its hooks"
    loss, cache = model.run_with_cache(tokens, return_type="loss")
    torch.testing.assert_close(loss, both.loss)
    assert "hook_embed" in cache.cache_dict

    with pytest.raises(ValueError, match="return_type must be one of"):
        model(tokens, return_type="probs")
    with pytest.raises(ValueError, match="no read followed by its bit"):
        model(model.to_tokens("w1i0"), return_type="loss", reads_only=True)


def test_the_cached_gradients_are_those_of_the_loss():
    model = tiny("tra")
    tokens = model.to_tokens(TOKENS)
    loss, cache = model.run_with_cache(tokens, return_type="loss", incl_bwd=True)
    assert loss.shape == () and "blocks.0.attn.hook_pattern_grad" in cache.cache_dict
    # d loss / d logits = (softmax - one-hot) / predictions at every position but the last,
    # and the final norm's output reaches the logits through W_U
    logits = model(tokens).detach()
    target = torch.nn.functional.one_hot(tokens[:, 1:], model.cfg.d_vocab).float()
    d_logits = torch.zeros_like(logits)
    d_logits[:, :-1] = (torch.softmax(logits[:, :-1], -1) - target) / target[..., 0].numel()
    torch.testing.assert_close(cache["ln_final.hook_normalized_grad"], d_logits @ model.W_U.T.detach(), **TOLERANCE)
    with pytest.raises(ValueError, match="must be one number: pass return_type='loss'"):
        model.run_with_cache(tokens, incl_bwd=True)


def test_stop_at_layer_returns_the_stream_before_that_block():
    model = tiny("ape")
    tokens = model.to_tokens(TOKENS)
    _, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(model(tokens, stop_at_layer=0), cache["hook_embed"] + cache["hook_pos_embed"])
    torch.testing.assert_close(model(tokens, stop_at_layer=1), cache["resid_pre", 1])
    torch.testing.assert_close(model.run_with_hooks(tokens, stop_at_layer=-1), cache["resid_pre", 1])
    torch.testing.assert_close(model(tokens, stop_at_layer=2), cache["resid_post", 1])
    for bad in (3, True):
        with pytest.raises(ValueError, match=r"stop_at_layer must be an integer in \[-2, 2\]"):
            model(tokens, stop_at_layer=bad)


def test_config_attributes_transformer_lens_code_reads():
    cfg = tiny("tra").cfg
    assert (cfg.act_fn, cfg.gated_mlp, cfg.default_prepend_bos, cfg.model_name) == ("silu", True, False, "tra")
    assert (cfg.dtype, cfg.use_attn_result) == (torch.float32, False)
    expected = {"ape": "standard", "label": "label", "rope": "rotary", "alibi": "alibi",
                "rel": "relative_positional_bias", "diff": "rotary", "tda": "rotary", "nope": "none", "tra": "none"}
    for name, kind in expected.items():
        assert ModelConfig.from_preset(name).positional_embedding_type == kind, name
    assert ModelConfig.from_preset("tda", attention_options={"rope": False}).positional_embedding_type == "none"
    assert (tiny("lstm").cfg.act_fn, tiny("lstm").cfg.positional_embedding_type) == (None, "none")

    specimen = load_pretrained("tda-mech")
    assert specimen.cfg.model_name == "tda-mech"
    saved = specimen.cfg.to_dict()
    assert not {"act_fn", "gated_mlp", "positional_embedding_type", "default_prepend_bos", "model_name", "dtype",
                "use_attn_result", "_model_name"} & set(saved)
    assert ModelConfig.from_dict(saved) == specimen.cfg
    specimen.to(torch.float64)
    assert specimen.cfg.dtype == torch.float64


def test_hook_result_holds_each_heads_output_when_switched_on():
    model = tiny("tra", init="torch", linear_bias=True)
    tokens = model.to_tokens(TOKENS)
    logits, cache = model.run_with_cache(tokens)
    assert "blocks.0.attn.hook_result" not in cache.cache_dict, "off by default, as in TransformerLens"
    model.set_use_attn_result(True)
    with_results, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(with_results, logits, **TOLERANCE)
    result = cache["result", 1]
    assert result.shape == (*tokens.shape, model.cfg.n_heads, model.cfg.d_model)
    torch.testing.assert_close(result.sum(-2) + model.b_O[1], cache["attn_out", 1], **TOLERANCE)
    torch.testing.assert_close(cache.stack_head_results()[2:], result.movedim(-2, 0), **TOLERANCE)

    def drop_head_0(x, hook):
        x[:, :, 0] = 0
        return x

    without_head = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_result", drop_head_0)])
    model.set_use_attn_result(False)
    torch.testing.assert_close(without_head, model.run_with_hooks(
        tokens, fwd_hooks=[("blocks.1.attn.hook_z", drop_head_0)]), **TOLERANCE)


NORMALISE = {"tra": lambda s: torch.softmax(s, -1).masked_fill(s == MASK_FILL, 0.0),  # TRA's removed keys
             "diff": lambda s: torch.softmax(s, -1), "tda": lambda s: torch.relu(s) ** 2}


@pytest.mark.parametrize("name,tl_pattern", [("tra", "pattern"), ("diff", "view_1"), ("tda", "view_1")])
def test_the_tl_hooks_hold_transformer_lens_meaning(name, tl_pattern):
    model = tiny(name)
    tokens = model.to_tokens(TOKENS)
    _, cache = model.run_with_cache(tokens)
    for layer in range(model.cfg.n_layers):
        assert cache["attn_scores_tl", layer] is cache["attn_logits", layer]
        assert cache[f"blocks.{layer}.attn.hook_pattern_tl"] is cache[tl_pattern, layer]
        # TransformerLens's pattern is what the normalisation makes of its scores
        torch.testing.assert_close(NORMALISE[name](cache["attn_scores_tl", layer]), cache["pattern_tl", layer])
        normalized_tl = cache["normalized_tl", layer, "ln1"]
        torch.testing.assert_close(normalized_tl, cache["resid_pre", layer] / cache["scale", layer, "ln1"])
        torch.testing.assert_close(normalized_tl * model.blocks[layer].ln1.w, cache["normalized", layer, "ln1"])

    names = []
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern_tl", lambda x, hook: names.append(hook.name))])
    assert names == [f"blocks.1.attn.hook_{tl_pattern}"]
    _, some = model.run_with_cache(tokens, names_filter=["blocks.0.attn.hook_attn_scores_tl"])
    assert list(some.cache_dict) == ["blocks.0.attn.hook_attn_logits"]
    _, some = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern_tl"))
    assert sorted(some.cache_dict) == [f"blocks.{layer}.attn.hook_{tl_pattern}" for layer in (0, 1)]


@pytest.mark.parametrize("name,options", [("nope", {}), ("cope", {}), ("tra", {"qk_norm": False})])
def test_QK_tl_and_OV_tl_fold_the_ln1_gain_as_transformer_lens_does(name, options):
    model = tiny(name, attention_options=options)
    with torch.no_grad():  # gains away from 1, so that folding them matters
        for block in model.blocks:
            block.ln1.w.uniform_(0.5, 1.5)
    _, cache = model.run_with_cache(model.to_tokens(TOKENS))
    x = cache["normalized_tl", 1, "ln1"]
    expected = torch.einsum("bqm,hmn,bkn->bhqk", x, model.QK_tl.AB[1], x) / model.cfg.d_head ** 0.5
    torch.testing.assert_close(cache["attn_scores", 1], expected, **TOLERANCE)
    folded = torch.stack([(block.ln1.w[:, None] * block.attn.W_V) @ block.attn.W_O for block in model.blocks])
    torch.testing.assert_close(model.OV_tl.AB, folded, **TOLERANCE)


def test_generate_answers_the_reads_a_flip_flop_prefix_ends_with():
    """The specimens are trained on the reads alone (``--loss clean``): what they generate after
    an ``r`` is the bit it reads, and that is what is scored here, greedy and sampled."""
    model = load_pretrained("tra-mech")
    sequences = load_split("iid", 64)
    at = 50
    ends_in_a_read = sequences[sequences[:, at] == READ][:, :at + 1]
    assert len(ends_in_a_read) >= 3
    prefixes = torch.from_numpy(ends_in_a_read.astype("int64"))
    answers = ends_in_a_read[np.arange(len(prefixes)), last_write_positions(ends_in_a_read)[:, -1] + 1]
    greedy = model.generate(prefixes, max_new_tokens=1, do_sample=False, verbose=False)
    assert torch.equal(greedy[:, :-1], prefixes) and greedy[:, -1].tolist() == answers.tolist()

    state = torch.random.get_rng_state()
    sampled = model.generate(prefixes, max_new_tokens=4, seed=0, verbose=False)
    assert torch.equal(torch.random.get_rng_state(), state), "a seed leaves the global RNG alone"
    assert torch.equal(sampled, model.generate(prefixes, max_new_tokens=4, seed=0, verbose=False))
    assert sampled.shape == (len(prefixes), at + 5) and sampled[:, at + 1].tolist() == answers.tolist()

    assert model.generate("w1i0w0i1r", max_new_tokens=1, do_sample=False, verbose=False) == "w1i0w0i1r0"
    assert model.generate(["w1i0w0i1r", "w0i0w1i1r"], max_new_tokens=1, do_sample=False, return_type="str",
                          verbose=False) == ["w1i0w0i1r0", "w0i0w1i1r1"]
    stopped = model.generate("w1i0w0i1r", max_new_tokens=8, do_sample=False, eos_token_id=ZERO, verbose=False)
    assert stopped == "w1i0w0i1r0", "every sequence produced the EOS token"
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0"):
        model.generate(prefixes, max_new_tokens=-1)

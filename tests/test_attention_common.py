"""What must hold for every model: hook names and shapes, causality, ablation through
hooks, gradients, and numerical robustness (long inputs, bf16, float64 gradcheck)."""

import pytest
import torch
from transformer_lens import ActivationCache
from transformer_lens.utilities import get_act_name

from models import MODEL_NAMES, ModelConfig, build_model
from models.attention.base import reference_attention

ATTENTION_MODELS = [m for m in MODEL_NAMES if m != "lstm"]
COMMON_ATTN_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")
BLOCK_HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post",
               "mlp.hook_pre", "mlp.hook_post")


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_hook_names_and_shapes(name, tokens, tiny_model):
    model = tiny_model(name, n_ctx=32, n_heads=2)
    x = tokens(2, 24, seed=0)
    logits, cache = model.run_with_cache(x)
    assert isinstance(cache, ActivationCache)
    B, P = x.shape
    cfg = model.cfg
    assert logits.shape == (B, P, cfg.d_vocab)
    assert cache["hook_embed"].shape == (B, P, cfg.d_model)
    assert cache["ln_final.hook_normalized"].shape == (B, P, cfg.d_model)
    for layer in range(cfg.n_layers):
        for hook in BLOCK_HOOKS:
            assert f"blocks.{layer}.{hook}" in cache.cache_dict, hook
        for hook in COMMON_ATTN_HOOKS:
            assert f"blocks.{layer}.attn.{hook}" in cache.cache_dict, hook
        for hook in ("q", "k", "v", "z"):
            assert cache[hook, layer].shape[:2] == (B, P) and cache[hook, layer].ndim == 4
        assert cache["pattern", layer].shape[0] == B and cache["pattern", layer].shape[-2:] == (P, P)
        assert cache["resid_post", layer].shape == (B, P, cfg.d_model)
    assert cache.stack_activation("pattern").shape[0] == cfg.n_layers
    assert get_act_name("pattern", 0) == "blocks.0.attn.hook_pattern"
    for value in cache.cache_dict.values():
        assert value.shape[0] == B, "every hooked tensor has a batch dimension"
    with reference_attention(model):   # what a cached run computes: the reference, maps and all
        assert torch.allclose(logits, model(x), atol=1e-5), "caching must not change the output"
    # The fast path is other float32 arithmetic (C kernels, row blocks); in trela and TDA a row whose
    # survivors sit just above tau normalises by a small sum of (s - tau)^p, which magnifies rounding.
    assert torch.allclose(logits, model(x), atol=1e-4), "the fast path must give the reference's output"


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_causal_invariance(name, tokens, tiny_model):
    model = tiny_model(name, n_ctx=32)
    x = tokens(2, 20, seed=0)
    changed = x.clone()
    t = 11
    changed[:, t + 1:] = (changed[:, t + 1:] + 1) % 5
    for run in (model, lambda x: model.run_with_cache(x)[0]):
        a, b = run(x), run(changed)
        assert torch.allclose(a[:, :t + 1], b[:, :t + 1], atol=1e-5)
        assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_zero_ablating_pattern_changes_logits(name, tokens, tiny_model):
    model = tiny_model(name, n_ctx=32)
    x = tokens(2, 24, seed=0)
    clean = model(x)
    ablated = model.run_with_hooks(
        x, fwd_hooks=[("blocks.1.attn.hook_pattern", lambda a, hook: torch.zeros_like(a))])
    assert not torch.allclose(clean, ablated, atol=1e-4)
    assert torch.allclose(model(x), clean), "hooks are removed after run_with_hooks"


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_finite_everywhere(name, tokens, tiny_model):
    """Random inputs, inputs longer than n_ctx, and bf16 autocast (backward() called after the
    autocast region, or inside it): no NaN or Inf in the outputs or in any parameter gradient."""
    model = tiny_model(name, n_ctx=32).train()
    if model.cfg.pos_embed == "learned":
        lengths = (model.cfg.n_ctx,)
    else:
        lengths = (24, 3 * model.cfg.n_ctx)
    for n_pos in lengths:
        for autocast, backward_inside in ((False, False), (True, False), (True, True)):
            model.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(tokens(2, n_pos, seed=0))
                if backward_inside:
                    logits.float().logsumexp(-1).mean().backward()
            assert torch.isfinite(logits).all(), (n_pos, autocast)
            if not backward_inside:
                logits.float().logsumexp(-1).mean().backward()
            for pname, p in model.named_parameters():
                assert p.grad is None or torch.isfinite(p.grad).all(), (pname, n_pos, autocast)


@pytest.mark.parametrize("name", ATTENTION_MODELS)
def test_gradcheck_float64(name):
    """Backward of the whole attention layer agrees with finite differences (float64)."""
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=8, d_model=8, n_heads=2 if name != "diff" else 1)
    torch.manual_seed(0)
    model = build_model(cfg).double()
    attn = model.blocks[0].attn
    x = torch.randn(1, 5, cfg.d_model, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda inp: attn(inp), (x,), eps=1e-6, atol=1e-5)


def test_lstm_has_the_same_interface(tokens, tiny_model):
    model = tiny_model("lstm", n_ctx=32)
    x = tokens(2, 24, seed=0)
    logits, cache = model.run_with_cache(x)
    assert logits.shape == (2, 24, 5) and cache["hook_hidden"].shape == (2, 24, 128)
    changed = x.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % 5
    assert torch.allclose(model(changed)[:, :15], logits[:, :15], atol=1e-6)

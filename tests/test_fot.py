"""Forgetting attention: the decay bias by hand, and the hooks against the equations."""

import math

import pytest
import torch

from kernels.tooling.common import MASK_FILL, causal_mask
from models.attention.rope import apply_rope

A = "blocks.{}.attn.{}"


def capture(attn, name):
    cache = {}
    getattr(attn, name).add_hook(lambda t, hook: cache.__setitem__(name, t))
    return cache


def test_decay_bias_by_hand(single_head):
    f = torch.tensor([0.9, 0.5, 0.8, 0.7])
    attn = single_head("fot")
    cache = capture(attn, "hook_decay_bias")
    q = k = v = torch.zeros(1, 4, 1, 4)
    attn.reference(q, k, v, f.log()[None, None])
    lf = f.log()
    expected = torch.tensor([
        [0.0, 0.0, 0.0, 0.0],
        [lf[1], 0.0, 0.0, 0.0],
        [lf[1] + lf[2], lf[2], 0.0, 0.0],
        [lf[1] + lf[2] + lf[3], lf[2] + lf[3], lf[3], 0.0],
    ])
    D = cache["hook_decay_bias"][0, 0]
    causal = causal_mask(4, 4)
    assert torch.allclose(D[causal], expected[causal], atol=1e-6)
    assert torch.equal(D.diagonal(), torch.zeros(4))


def test_pattern_by_hand_with_zero_scores(single_head):
    """With S = 0 the weights are the normalised products of the gates after each key."""
    f = torch.tensor([0.9, 0.5, 0.8, 0.7])
    attn = single_head("fot")
    q = k = torch.zeros(1, 4, 1, 4)
    v = torch.eye(4)[None, :, None, :]
    z = attn.reference(q, k, v, f.log()[None, None])
    w = torch.tensor([0.5 * 0.8 * 0.7, 0.8 * 0.7, 0.7, 1.0])
    assert torch.allclose(z[0, 3, 0], w / w.sum(), atol=1e-6)


def test_hooks_follow_the_equations(tokens, tiny_model):
    model = tiny_model("fot", n_heads=2)
    _, cache = model.run_with_cache(tokens(3, 24))
    n_pos, causal = 24, causal_mask(24, 24)
    for layer, block in enumerate(model.blocks):
        c = lambda name: cache[A.format(layer, name)]  # noqa: E731
        S = torch.einsum("bqhd,bkhd->bhqk", c("hook_q"), c("hook_k")) / math.sqrt(model.cfg.d_head)
        assert torch.allclose(c("hook_attn_scores"), S, atol=1e-6)
        x_in = cache[f"blocks.{layer}.ln1.hook_normalized"]
        f = torch.sigmoid(torch.einsum("bpm,hm->bhp", x_in, block.attn.W_f) + block.attn.b_f[:, None])
        assert torch.allclose(c("hook_forget"), f, atol=1e-6)
        log_f = c("hook_forget").log()
        i, j = torch.tril_indices(n_pos, n_pos)
        D = torch.stack([log_f[..., jj + 1:ii + 1].sum(-1) for ii, jj in zip(i.tolist(), j.tolist())], -1)
        assert torch.allclose(c("hook_decay_bias")[..., i, j], D, atol=1e-5)
        logits = (c("hook_attn_scores") + c("hook_decay_bias")).masked_fill(~causal, MASK_FILL)
        assert torch.allclose(c("hook_pattern"), torch.softmax(logits, -1), atol=1e-6)
        assert torch.equal(c("hook_pattern")[..., ~causal], torch.zeros_like(c("hook_pattern")[..., ~causal]))
        z = torch.einsum("bhqk,bkhd->bqhd", c("hook_pattern"), c("hook_v"))
        assert torch.allclose(c("hook_z"), z, atol=1e-5)


def test_forget_gate_of_one_is_plain_causal_softmax(tokens, tiny_model):
    model = tiny_model("fot", n_heads=2)
    x = tokens(3, 24)
    remember_all = lambda f, hook: torch.ones_like(f)  # noqa: E731
    with model.hooks(fwd_hooks=[(A.format(1, "hook_forget"), remember_all)]):
        edited, cache = model.run_with_cache(x)
    assert not torch.allclose(model(x), edited, atol=1e-4)
    assert torch.equal(cache[A.format(1, "hook_decay_bias")], torch.zeros_like(cache[A.format(1, "hook_decay_bias")]))
    n_pos = x.shape[1]
    S = cache[A.format(1, "hook_attn_scores")].masked_fill(~causal_mask(n_pos, n_pos), MASK_FILL)
    assert torch.allclose(cache[A.format(1, "hook_pattern")], torch.softmax(S, -1), atol=1e-6)


def test_forget_bias_option(tiny_model):
    assert torch.equal(tiny_model("fot", n_heads=2).blocks[0].attn.b_f.detach(), torch.zeros(2))
    model = tiny_model("fot", n_heads=2, attention_options={"forget_bias": 3.0})
    assert torch.equal(model.blocks[1].attn.b_f.detach(), torch.full((2,), 3.0))


def test_rope_option_rotates_q_and_k(tokens, tiny_model):
    model = tiny_model("fot", n_heads=2, attention_options={"rope": True})
    _, cache = model.run_with_cache(tokens(3, 24))
    q, k = apply_rope(cache[A.format(0, "hook_q")]), apply_rope(cache[A.format(0, "hook_k")])
    S = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(model.cfg.d_head)
    assert torch.allclose(cache[A.format(0, "hook_attn_scores")], S, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_autocast_and_strong_forgetting_are_finite(dtype, tokens, tiny_model):
    # log f ~ -30 per token: D reaches -1e4
    model = tiny_model("fot", n_heads=2, attention_options={"forget_bias": -30.0})
    with torch.autocast("cpu", dtype=dtype):
        logits, cache = model.run_with_cache(tokens(3, 400))
    assert torch.isfinite(logits).all()
    pattern = cache[A.format(1, "hook_pattern")]
    assert torch.isfinite(pattern).all()
    assert cache[A.format(1, "hook_decay_bias")].dtype == torch.float32
    assert torch.allclose(pattern.diagonal(dim1=-2, dim2=-1), torch.ones(()), atol=1e-3)  # all weight on self


def test_gradcheck_reference_float64(single_head):
    attn = single_head("fot", d_head=3).double()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 1, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    log_f = -torch.rand(1, 1, 5, generator=gen, dtype=torch.float64) - 0.1
    inputs = tuple(t.requires_grad_() for t in (q, k, v, log_f))
    assert torch.autograd.gradcheck(attn.reference, inputs)

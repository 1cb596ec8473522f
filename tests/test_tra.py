"""Threshold Relative Attention: the paper's worked examples and the hooks against eq. 1-12."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.tooling.common import MASK_FILL, causal_mask
from kernels.tra.reference import contextual_distance
from models.attention.base import rms_normalise

A = "blocks.{}.attn.{}"


def run_with_cache_and_hooks(model, x, fwd_hooks):
    with model.hooks(fwd_hooks=fwd_hooks):
        return model.run_with_cache(x)


def test_contextual_distance_paper_example():
    M = torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0], [1, 0, 1, 0]], dtype=torch.float32)  # eq. 5
    D_bar = torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0], [0, 2, 1, 0], [2, 0, 1, 0]], dtype=torch.float32)  # eq. 7
    assert torch.equal(contextual_distance(M), D_bar)


def test_hand_checked_example(single_head):
    """One query (position 3) with four visible keys: S = [0.5, -0.2, 1.0, 0.3], delta = 0.5."""
    attn = single_head("tra")
    S_row = torch.tensor([0.5, -0.2, 1.0, 0.3])
    q = torch.zeros(1, 4, 1, 4)
    q[0, 3, 0, 0] = 2.0                                 # S = q.k / sqrt(4) = k[..., 0]
    k = torch.zeros(1, 4, 1, 4)
    k[0, :, 0, 0] = S_row
    v = torch.eye(4)[None, :, None, :]                  # z of a query = its row of A'
    log_delta = torch.full((1, 1, 4), math.log(0.5))
    cache = {}
    for name in ("hook_attn_scores", "hook_dbar"):
        getattr(attn, name).add_hook(lambda t, hook, name=name: cache.__setitem__(name, t))
    z = attn.reference(q, k, v, log_delta)
    assert torch.allclose(cache["hook_attn_scores"][0, 0, 3], S_row)
    assert torch.equal(cache["hook_dbar"][0, 0, 3], torch.tensor([3.0, 0.0, 2.0, 1.0]))
    assert torch.allclose(z[0, 3, 0], torch.tensor([0.1321, 0.0, 0.4355, 0.4325]), atol=5e-5)


def test_hooks_follow_the_equations(tokens, tiny_model):
    model = tiny_model("tra", n_heads=2)
    x = tokens(3, 24)
    _, cache = model.run_with_cache(x)
    n_pos = x.shape[1]
    causal = causal_mask(n_pos, n_pos)
    d_head = model.cfg.d_head
    for layer, block in enumerate(model.blocks):
        c = lambda name: cache[A.format(layer, name)]  # noqa: E731
        q, k = rms_normalise(c("hook_q")), rms_normalise(c("hook_k"))
        S = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d_head)
        assert torch.allclose(c("hook_attn_scores"), S, atol=1e-5)                                   # eq. 1
        assert torch.equal(c("hook_thresholded"), F.relu(c("hook_attn_scores")))                     # eq. 3
        M = ((c("hook_thresholded") > 0) & causal).float()
        assert torch.equal(c("hook_mask"), M)                                                         # eq. 4
        assert torch.equal(c("hook_dbar"), contextual_distance(c("hook_mask")))                      # eq. 6-7
        x_in = cache[f"blocks.{layer}.ln1.hook_normalized"]
        delta = torch.sigmoid(torch.einsum("bpm,hm->bhp", x_in, block.attn.W_f) + block.attn.b_f[:, None])
        assert torch.allclose(c("hook_forget"), delta, atol=1e-6)                                     # eq. 8
        log_decay = c("hook_dbar") * c("hook_forget").log()[..., None]
        assert torch.allclose(c("hook_log_decay"), log_decay, atol=1e-5)                             # eq. 9
        logits = torch.where(M > 0, c("hook_thresholded") + c("hook_log_decay"), MASK_FILL)
        assert torch.equal(c("hook_attn_logits"), logits)                                            # eq. 10-11
        pattern = torch.softmax(logits, dim=-1) * M
        assert torch.allclose(c("hook_pattern"), pattern, atol=1e-6)                                 # eq. 12
        row_sums = c("hook_pattern").sum(-1)
        assert torch.allclose(row_sums, (M.sum(-1) > 0).float(), atol=1e-5)
        z = torch.einsum("bhqk,bkhd->bqhd", c("hook_pattern"), c("hook_v"))
        assert torch.allclose(c("hook_z"), z, atol=1e-5)
        assert (c("hook_mask").sum(-1) < torch.arange(1, n_pos + 1)).any(), "no key was thresholded away"


def test_recomputing_dbar_from_an_edited_mask(tokens, tiny_model):
    """D-bar is computed from the hooked M, so an edit to M moves the distances."""
    model = tiny_model("tra", n_heads=2)
    keep_all = lambda M, hook: causal_mask(M.shape[-2], M.shape[-1]).float().expand_as(M)  # noqa: E731
    _, cache = run_with_cache_and_hooks(model, tokens(3, 24), [(A.format(1, "hook_mask"), keep_all)])
    n_pos = tokens(3, 24).shape[1]
    expected = (torch.arange(n_pos)[:, None] - torch.arange(n_pos)[None, :] + 1).clamp(min=0).tril().float()
    assert torch.equal(cache[A.format(1, "hook_dbar")][0, 0], expected)


def test_qk_norm_false_is_plain_eq1(tokens, tiny_model):
    model = tiny_model("tra", n_heads=2, attention_options={"qk_norm": False})
    _, cache = model.run_with_cache(tokens(3, 24))
    q, k = cache[A.format(0, "hook_q")], cache[A.format(0, "hook_k")]
    S = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(model.cfg.d_head)
    assert torch.allclose(cache[A.format(0, "hook_attn_scores")], S, atol=1e-6)
    assert not torch.allclose(S, torch.einsum("bqhd,bkhd->bhqk", rms_normalise(q), rms_normalise(k))
                              / math.sqrt(model.cfg.d_head), atol=1e-3)


def test_empty_rows_attend_to_nothing(single_head):
    attn = single_head("tra")
    u = torch.randn(2, 1, 1, 4)
    q, k = u.expand(-1, 6, -1, -1), -u.expand(-1, 6, -1, -1)   # every score is -|u|^2 / 2 < 0
    v = torch.randn(2, 6, 1, 4)
    z = attn.reference(q, k, v, torch.full((2, 1, 6), -0.3))
    assert torch.equal(z, torch.zeros_like(z))


def test_an_empty_row_in_the_model_is_zero_and_finite(tokens, tiny_model):
    model = tiny_model("tra", n_heads=2)
    x = tokens(3, 24)

    def drown_query_5(S, hook):
        S[:, :, 5] = -1.0
        return S

    logits, cache = run_with_cache_and_hooks(model, x, [(A.format(1, "hook_attn_scores"), drown_query_5)])
    pattern = cache[A.format(1, "hook_pattern")]
    assert torch.equal(pattern[:, :, 5], torch.zeros_like(pattern[:, :, 5]))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_autocast_is_finite(dtype, tokens, tiny_model):
    model = tiny_model("tra", n_heads=2)
    x = tokens(3, 200)

    def drown_query_5(S, hook):
        S[:, :, 5] = -1.0
        return S

    with torch.autocast("cpu", dtype=dtype):
        logits, cache = run_with_cache_and_hooks(model, x, [(A.format(0, "hook_attn_scores"), drown_query_5)])
    assert torch.isfinite(logits).all()
    for layer in range(model.cfg.n_layers):
        assert cache[A.format(layer, "hook_attn_logits")].dtype == torch.float32
        assert torch.isfinite(cache[A.format(layer, "hook_pattern")]).all()
    assert cache[A.format(0, "hook_pattern")][:, :, 5].abs().sum() == 0


def test_half_precision_inputs_to_reference_are_finite(single_head):
    attn = single_head("tra", d_head=8)
    q, k, v = (rms_normalise(torch.randn(2, 300, 1, 8)).half() for _ in range(3))
    z = attn.reference(q, k, v, torch.full((2, 1, 300), -80.0))  # a near-zero gate over long distances
    assert z.dtype == torch.float16
    assert torch.isfinite(z).all()


def test_editing_the_forget_gate_takes_effect(tokens, tiny_model):
    model = tiny_model("tra", n_heads=2)
    x = tokens(3, 24)
    clean = model(x)
    half = lambda delta, hook: torch.full_like(delta, 0.5)  # noqa: E731
    edited, cache = run_with_cache_and_hooks(model, x, [(A.format(1, "hook_forget"), half)])
    assert not torch.allclose(clean, edited, atol=1e-4)
    expected = cache[A.format(1, "hook_dbar")] * math.log(0.5)
    assert torch.allclose(cache[A.format(1, "hook_log_decay")], expected)


def test_editing_the_dbar_changes_the_output(tokens, tiny_model):
    model = tiny_model("tra", n_heads=2)
    x = tokens(3, 24)
    no_distance = lambda D_bar, hook: torch.zeros_like(D_bar)  # noqa: E731
    edited = model.run_with_hooks(x, fwd_hooks=[(A.format(1, "hook_dbar"), no_distance)])
    assert not torch.allclose(model(x), edited, atol=1e-4)


def test_gradcheck_reference_float64(single_head):
    attn = single_head("tra", d_head=3).double()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 1, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    S = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(3)
    assert S.abs().min() > 1e-2, "inputs too close to the ReLU kink"
    log_delta = -torch.rand(1, 1, 5, generator=gen, dtype=torch.float64) - 0.1
    inputs = tuple(t.requires_grad_() for t in (q, k, v, log_delta))
    assert torch.autograd.gradcheck(attn.reference, inputs)


def test_forget_bias_option_sets_the_initial_bias(tiny_model):
    model = tiny_model("tra", n_heads=2, attention_options={"forget_bias": 2.5})
    assert torch.equal(model.blocks[0].attn.b_f.detach(), torch.full((2,), 2.5))

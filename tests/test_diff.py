"""Differential attention: lambda schedule, the signed pattern, the normalised output."""

import math

import pytest
import torch

from kernels.tooling import native
from kernels.tooling.common import causal_mask
import models.attention.diff as diff
from models import ModelConfig
from models.attention.rope import apply_rope
from models.backbone import GlitchLensTransformer

N_POS = 9


def diff_model(n_layers=1, n_heads=2, d_model=16, **options) -> GlitchLensTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(model="diff", n_layers=n_layers, n_heads=n_heads, d_model=d_model, n_ctx=N_POS,
                      attention_options=options)
    return GlitchLensTransformer(cfg)



def test_lambda_init_schedule():
    model = diff_model(n_layers=3)
    got = [block.attn.lambda_init for block in model.blocks]
    assert got == pytest.approx([0.2, 0.3555, 0.4707], abs=1e-4)


def test_rope_on_by_default_and_d_head_must_split_in_two_rope_views():
    assert diff_model().blocks[0].attn.options.rope
    with pytest.raises(ValueError, match="divisible by 4"):
        diff_model(n_heads=4, d_model=24)  # d_head 6: views of 3 cannot be rotated


@pytest.mark.parametrize("n_heads, rope", [(1, True), (2, True), (2, False)])
def test_hooks_agree_with_equations(n_heads, rope, tokens):
    model = diff_model(n_layers=2, n_heads=n_heads, rope=rope)
    _, cache = model.run_with_cache(tokens(2, N_POS))
    attn, c = model.blocks[1].attn, lambda name: cache[f"blocks.1.attn.{name}"]
    mask = causal_mask(N_POS, N_POS)
    d_view = attn.d_head // 2
    maybe_rope = apply_rope if rope else (lambda t: t)
    views = []
    for t, (q, k) in enumerate(zip(c("hook_q").chunk(2, -1), c("hook_k").chunk(2, -1)), start=1):
        S = torch.einsum("bqhd,bkhd->bhqk", maybe_rope(q), maybe_rope(k)) / math.sqrt(d_view)
        torch.testing.assert_close(c(f"hook_scores_{t}"), S)
        A = torch.softmax(S.masked_fill(~mask, float("-inf")), dim=-1)
        torch.testing.assert_close(c(f"hook_view_{t}"), A)
        views.append(A)
    torch.testing.assert_close(c("hook_attn_scores"), c("hook_scores_1"))

    lam = (torch.exp(attn.lambda_q1 @ attn.lambda_k1) - torch.exp(attn.lambda_q2 @ attn.lambda_k2)
           + 0.8 - 0.6 * math.exp(-0.3)).detach()
    torch.testing.assert_close(c("hook_lambda"), lam.expand(2, n_heads))
    pattern = views[0] - lam * views[1]
    torch.testing.assert_close(c("hook_pattern"), pattern)

    O = torch.einsum("bhqk,bkhd->bqhd", pattern, c("hook_v"))
    z = O / O.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * (1 - attn.lambda_init)
    torch.testing.assert_close(c("hook_z"), z)
    assert c("hook_z").shape == (2, N_POS, n_heads, attn.d_head)


def test_pattern_is_signed_and_rows_sum_to_one_minus_lambda(tokens):
    _, cache = diff_model().run_with_cache(tokens(2, N_POS))
    A, lam = cache["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_lambda"]
    torch.testing.assert_close(A.sum(-1), (1 - lam)[..., None].expand(A.shape[:-1]))
    assert (A < 0).any() and (A[..., ~causal_mask(N_POS, N_POS)] == 0).all()


def test_lambda_zero_reduces_to_view_one(tokens):
    model = diff_model()
    seen = {}
    model.run_with_hooks(tokens(2, N_POS), fwd_hooks=[
        ("blocks.0.attn.hook_lambda", lambda lam, hook: torch.zeros_like(lam)),
        ("blocks.0.attn.hook_view_1", lambda a, hook: seen.setdefault("A1", a)),
        ("blocks.0.attn.hook_pattern", lambda a, hook: seen.setdefault("A", a))])
    torch.testing.assert_close(seen["A"], seen["A1"])


def test_lambda_gets_gradient(tokens):
    model = diff_model()
    model(tokens(2, N_POS)).square().sum().backward()
    attn = model.blocks[0].attn
    for w in (attn.lambda_q1, attn.lambda_k1, attn.lambda_q2, attn.lambda_k2):
        assert w.grad is not None and w.grad.abs().sum() > 0


@pytest.mark.parametrize("rope", [True, False])
def test_sdpa_and_the_training_rows_equal_the_maps_forward_and_backward(rope, monkeypatch, tokens):
    """Without the native kernel the two views run through SDPA (``A1 V - lambda A2 V``), and with
    gradients (training) on the CPU through the rows path's blocks (``rows_training``); both give the
    model the explicit maps give, forward and every parameter's gradient; with a hook inside the
    core, or ``attention_impl="reference"`` in training mode, the maps are computed."""
    model = diff_model(n_layers=2, rope=rope).eval()
    x = tokens(2, N_POS)
    hooked = [(f"blocks.{layer}.attn.hook_pattern", lambda t, hook: t) for layer in range(2)]
    explicit = model.run_with_hooks(x, fwd_hooks=hooked)
    explicit.square().mean().backward()
    explicit_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    calls, rows_calls = [], []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *args, **kwargs: calls.append(1) or sdpa(*args, **kwargs))
    monkeypatch.setattr(diff, "rows_training", lambda *args, run=diff.rows_training: rows_calls.append(1) or run(*args))
    with torch.no_grad(), native.switched_off():
        fast = model(x)
    assert len(calls) == 4, "two views in each of the two layers"
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-5)
    model.train()(x).square().mean().backward()
    assert len(calls) == 4 and len(rows_calls) == 2, "training on the CPU runs the rows path's blocks"
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, explicit_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    model.cfg.attention_impl = "reference"
    with torch.no_grad():
        model(x)
    assert len(calls) == 4 and len(rows_calls) == 2, "attention_impl='reference' ran a fast path in training mode"


@pytest.mark.parametrize("rows", [5, 64])
def test_the_training_rows_are_the_reference_in_float64(rows, monkeypatch):
    """The rows path's two-view function (DiffRowsFunction) against diff_reference in float64,
    forward and the gradients of both views' q and k, v and lambda, on an awkward shape (T = 37 in
    blocks of 5 rows, ending in a partial one, or in one block; three heads), each tensor named."""
    import kernels.tooling.rows

    monkeypatch.setattr(kernels.tooling.rows, "ROWS", rows)
    gen = torch.Generator().manual_seed(6)
    inputs = [torch.randn(2, 37, 3, 8, generator=gen, dtype=torch.float64) for _ in range(4)]
    inputs += [torch.randn(2, 37, 3, 16, generator=gen, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64)]
    d_z = torch.randn(2, 37, 3, 16, generator=gen, dtype=torch.float64)
    results = {}
    for name, path in [("rows", diff.rows_attention), ("reference", diff.diff_reference)]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        z = path(*leaves)
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z))
    for what, ours, reference in zip(("z", "dq1", "dk1", "dq2", "dk2", "dv", "d_lambda"), *results.values()):
        torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-12, msg=lambda m: f"{what}: {m}")

"""Threshold Differential Attention (tda) and its single view (trela), TDA paper Sec. 4."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.tooling.common import causal_mask, threshold
from models import ModelConfig
from models.attention.rope import apply_rope
from models.backbone import GlitchLensTransformer

N_POS = 9


def threshold_model(model="tda", n_heads=2, d_model=16, **options) -> GlitchLensTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(model=model, n_layers=1, n_heads=n_heads, d_model=d_model, n_ctx=N_POS,
                      attention_options=options)
    return GlitchLensTransformer(cfg)



def set_beta(model, beta):
    with torch.no_grad():
        model.blocks[0].attn.beta.fill_(beta)


def test_threshold_zero_at_first_position_and_growing(tokens):
    _, cache = threshold_model().run_with_cache(tokens(2, 6))  # d_head 8, beta 1, kappa 1
    tau = cache["blocks.0.attn.hook_threshold"]
    assert tau.shape == (2, 2, 6) and (tau == tau[0, 0]).all()  # beta is one scalar per layer
    tau = tau[0, 0]
    assert tau[0] == 0
    assert (tau.diff() > 0).all()
    assert tau[3].item() == pytest.approx(math.sqrt(2 * math.log(4) / 8))


def test_threshold_log_clamped_for_kappa_above_one():
    attn = threshold_model(kappa=2.5).blocks[0].attn
    tau = threshold(5, attn.d_head, attn.beta, attn.options.kappa).detach()[0]
    assert torch.isfinite(tau).all()
    assert (tau[:2] == 0).all() and tau[2] > 0  # log((i+1)/2.5) < 0 for i = 0, 1


@pytest.mark.parametrize("model_name", ["tda", "trela"])
@pytest.mark.parametrize("beta", [1.0, -1.0])
def test_causal_and_future_keys_exactly_zero(model_name, beta, tokens):
    model = threshold_model(model_name)
    set_beta(model, beta)
    x = tokens(2, N_POS)
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 1) % 5
    logits_x, cache = model.run_with_cache(x)
    torch.testing.assert_close(model(y)[:, :5], logits_x[:, :5])
    future = ~causal_mask(N_POS, N_POS)
    views = ["hook_view_1", "hook_view_2"] if model_name == "tda" else ["hook_view_1"]
    for name in views + ["hook_pattern"]:
        assert (cache[f"blocks.0.attn.{name}"][..., future] == 0).all()
    if beta < 0:  # the negative threshold alone would let future keys through: the mask stops them
        S, tau = cache["blocks.0.attn.hook_scores_1"], cache["blocks.0.attn.hook_threshold"]
        assert (S - tau[..., None] > 0)[..., future].any()


@pytest.mark.parametrize("rope", [True, False])
def test_tda_hooks_agree_with_equations(rope, tokens):
    model = threshold_model(rope=rope, p=3.0)
    set_beta(model, 0.7)
    _, cache = model.run_with_cache(tokens(2, N_POS))
    attn, c = model.blocks[0].attn, lambda name: cache[f"blocks.0.attn.{name}"]
    mask = causal_mask(N_POS, N_POS)
    unit = lambda t: F.normalize(apply_rope(t) if rope else t, dim=-1)  # noqa: E731

    i = torch.arange(N_POS, dtype=torch.float32)
    tau = 0.7 * torch.sqrt(2 * torch.log(i + 1) / attn.d_head)
    torch.testing.assert_close(c("hook_threshold"), tau.expand(2, 2, N_POS))
    views = []
    for t, (q, k) in enumerate([("hook_q", "hook_k"), ("hook_q2", "hook_k2")], start=1):
        S = torch.einsum("bqhd,bkhd->bhqk", unit(c(q)), unit(c(k)))
        torch.testing.assert_close(c(f"hook_scores_{t}"), S)
        A = (S - tau[:, None]).clamp(min=0) ** 3 * mask
        torch.testing.assert_close(c(f"hook_view_{t}"), A)
        views.append(A)
    torch.testing.assert_close(c("hook_attn_scores"), c("hook_scores_1"))
    lam = torch.sigmoid(attn.lambda_logit).detach()
    torch.testing.assert_close(c("hook_lambda"), lam.expand(2, 2))
    assert lam.item() == pytest.approx(0.5)
    pattern = views[0] - lam * views[1]
    torch.testing.assert_close(c("hook_pattern"), pattern)
    assert (pattern == 0).float().mean() > 0.3  # the threshold leaves exact zeros
    O = torch.einsum("bhqk,bkhd->bqhd", pattern, c("hook_v"))
    torch.testing.assert_close(c("hook_z"), O / O.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt())


def test_trela_hooks_are_one_view_without_lambda(tokens):
    _, cache = threshold_model("trela").run_with_cache(tokens(2, N_POS))
    names = {n.split("attn.")[1] for n in cache.keys() if ".attn." in n}
    assert {"hook_scores_1", "hook_threshold", "hook_view_1", "hook_pattern"} <= names
    assert not names & {"hook_scores_2", "hook_view_2", "hook_lambda", "hook_q2", "hook_k2"}
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_view_1"])


def test_lambda_is_a_sigmoid_not_a_clamp(tokens):
    model = threshold_model(lambda_init=0.9)
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.lambda_logit.fill_(8.0)  # lambda = 0.99966: a clamp at 1 - eps would pass no gradient
    model(tokens(2, N_POS)).square().sum().backward()
    assert attn.lambda_logit.grad is not None and attn.lambda_logit.grad != 0
    with pytest.raises(ValueError, match="lambda_init"):
        threshold_model(lambda_init=1.0)


def random_unit(shape, generator):
    return F.normalize(torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1)


@pytest.mark.parametrize("model_name", ["tda", "trela"])
def test_reference_gradcheck_float64(model_name):
    model = threshold_model(model_name, n_heads=1, d_model=4)
    set_beta(model, 0.5)
    attn = model.blocks[0].attn.double()
    n_views, shape = (2 if model_name == "tda" else 1), (1, 4, 1, 4)
    generator = torch.Generator().manual_seed(2)
    qk = [random_unit(shape, generator) for _ in range(2 * n_views)]
    tau = threshold(4, attn.d_head, attn.beta, attn.options.kappa).detach()[0]
    for q, k in zip(qk[::2], qk[1::2]):  # keep every score away from the ReLU kink
        margin = (torch.einsum("bqhd,bkhd->bhqk", q, k) - tau[:, None])[..., causal_mask(4, 4)]
        assert margin.abs().min() > 1e-2 and (margin > 0).sum() >= 3  # and some keys survive
    v = torch.randn(shape, generator=generator, dtype=torch.float64)
    params = {"attn.beta": attn.beta.detach().clone()}
    if model_name == "tda":
        params["attn.lambda_logit"] = torch.tensor(0.3, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (*qk, v, *params.values())]
    n_tensors = len(qk) + 1

    def reference(*args):  # the inputs, then beta (and lambda_logit) in place of the parameters
        return torch.func.functional_call(Reference(attn), dict(zip(params, args[n_tensors:])), args[:n_tensors])

    assert torch.autograd.gradcheck(reference, inputs)


class Reference(torch.nn.Module):
    """``attn.reference`` as a module's forward, so ``functional_call`` can swap its scalars."""

    def __init__(self, attn):
        super().__init__()
        self.attn = attn

    def forward(self, *args):
        return self.attn.reference(*args)


def test_row_with_no_survivor_gives_zero_output_and_finite_grads(tokens):
    model = threshold_model()
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_scores_1", lambda s, hook: torch.full_like(s, -1.0)),
                                ("blocks.0.attn.hook_scores_2", lambda s, hook: torch.full_like(s, -1.0))]):
        logits, cache = model.run_with_cache(tokens(2, N_POS))
        logits.square().sum().backward()
    assert (cache["blocks.0.attn.hook_pattern"] == 0).all()
    assert (cache["blocks.0.attn.hook_z"] == 0).all()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("model_name", ["tda", "trela"])
def test_bf16_autocast_finite(model_name, tokens):
    model = threshold_model(model_name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens(2, 3 * N_POS))  # also longer than n_ctx
    logits.float().square().sum().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

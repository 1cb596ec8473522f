"""``kernels.rows``, the CPU path (``attention_impl="rows"``, what ``auto`` runs on the CPU):
whole models and single layers equal their reference forward and backward, on shapes that
do not fill the row blocks, with empty rows, clamped CoPE positions and negative thresholds."""

import pytest
import torch

import kernels.rows
from kernels.cope.rows import cope_rows
from kernels.forgetting.rows import forgetting_rows
from kernels.threshold.rows import ThresholdRowsFunction, rectified_rows
from kernels.tra.rows import tra_rows
from models import ModelConfig, build_model
from support import models_with, relative_errors

ROWS_MODELS = models_with("rows")


def pair(name, **overrides):
    cfg = ModelConfig.from_preset(name, "tiny", **{"n_ctx": 40, "n_heads": 2, "d_model": 32, **overrides})
    torch.manual_seed(0)
    reference = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "reference"}))
    rows = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "rows"}))
    rows.load_state_dict(reference.state_dict())
    return reference, rows


def assert_same_model(reference, rows, tokens, tol=1e-4):
    out_ref, out_rows = reference(tokens), rows(tokens)
    assert (out_ref - out_rows).abs().max() < tol
    out_ref.square().mean().backward()
    out_rows.square().mean().backward()
    errors = relative_errors({name: p.grad for name, p in rows.named_parameters()},
                             {name: p.grad for name, p in reference.named_parameters()})
    assert max(errors.values()) < 1e-3, errors


@pytest.fixture(params=[5, 16])
def small_blocks(request, monkeypatch):
    """Blocks much smaller than the sequences, so every test crosses block boundaries."""
    monkeypatch.setattr(kernels.rows, "ROWS", request.param)


@pytest.mark.parametrize("name", ROWS_MODELS)
@pytest.mark.parametrize("n_pos", [1, 37])
def test_rows_model_equals_reference_model(name, n_pos, small_blocks):
    reference, rows = pair(name)
    tokens = torch.randint(0, 5, (2, n_pos), generator=torch.Generator().manual_seed(1))
    assert_same_model(reference, rows, tokens)


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_auto_runs_rows_on_the_cpu_and_reference_under_hooks(name):
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=32)
    attn = build_model(cfg).blocks[0].attn
    assert attn.implementation(torch.device("cpu")) == "rows"
    attn.hook_pattern.add_hook(lambda t, hook: t)
    assert attn.implementation(torch.device("cpu")) == "reference", "a hooked pattern needs the reference"


def test_sequences_longer_than_training_and_clamped_cope_positions(small_blocks):
    reference, rows = pair("cope", n_ctx=8, attention_options={"p_max": 6})
    tokens = torch.randint(0, 5, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():  # a non-zero position table, so the interpolation matters
        for model in (reference, rows):
            for block in model.blocks:
                block.attn.pos_emb.copy_(torch.randn(block.attn.pos_emb.shape, generator=torch.Generator().manual_seed(3)))
    assert_same_model(reference, rows, tokens)


def test_tda_with_negative_beta_and_trela_with_power_one(small_blocks):
    reference, rows = pair("tda")
    with torch.no_grad():
        for model in (reference, rows):
            model.blocks[0].attn.beta.fill_(-0.5)
    assert_same_model(reference, rows, torch.randint(0, 5, (2, 33), generator=torch.Generator().manual_seed(4)))
    assert_same_model(*pair("trela", attention_options={"p": 1.0, "beta_init": 0.2}),
                      torch.randint(0, 5, (2, 33), generator=torch.Generator().manual_seed(5)))


def test_tra_rows_with_empty_rows_and_gradcheck(small_blocks):
    """Rows with no surviving key give 0 and pass no gradient; float64 gradcheck on a shape
    that crosses blocks."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    k[:, :, 0] = -q[:, :1, 0]  # head 0: every key is minus query 0, so query 0 keeps no key
    log_delta = -torch.rand(1, 2, 9, generator=gen, dtype=torch.float64) - 0.1
    inputs = tuple(t.requires_grad_() for t in (q, k, v, log_delta))
    assert torch.autograd.gradcheck(tra_rows, inputs)
    with_grad = tra_rows(*inputs)
    with torch.no_grad():  # the forward alone (logits up to a row constant), the empty row included
        without = tra_rows(*inputs)
    assert torch.allclose(with_grad, without, atol=1e-12) and torch.equal(without[0, 0, 0], torch.zeros(4, dtype=torch.float64))
    z = tra_rows(torch.ones(1, 3, 1, 4), -torch.ones(1, 3, 1, 4), torch.randn(1, 3, 1, 4),
                              torch.full((1, 1, 3), -0.5))
    assert torch.equal(z, torch.zeros_like(z)), "no key survives: every row attends to nothing"


@pytest.mark.parametrize("name", ["fot", "cope", "tda"])
def test_rows_gradcheck(name, small_blocks):
    gen = torch.Generator().manual_seed(0)
    q, k, v, q2, k2 = (torch.randn(1, 7, 2, 4, generator=gen, dtype=torch.float64) for _ in range(5))
    if name == "fot":
        log_f = -torch.rand(1, 2, 7, generator=gen, dtype=torch.float64) - 0.1
        fn, inputs = forgetting_rows, (q, k, v, log_f)
    elif name == "cope":
        pos_emb = torch.randn(5, 4, generator=gen, dtype=torch.float64)
        fn, inputs = cope_rows, (q, k, v, pos_emb)
    else:
        unit = [torch.nn.functional.normalize(t, dim=-1) for t in (q, k, q2, k2)]
        tau = torch.rand(1, 2, 7, generator=gen, dtype=torch.float64) * 0.3
        lam = torch.tensor(0.4, dtype=torch.float64)

        def fn(tau, v, q, k, q2, k2, lam):
            return rectified_rows(tau, v, q, k, q2, k2, lam=lam, p=2.0)

        inputs = (tau, v, *unit, lam)
    assert torch.autograd.gradcheck(fn, tuple(t.requires_grad_() for t in inputs))


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_rows_under_bf16_autocast_stays_finite(name):
    _, rows = pair(name)
    tokens = torch.randint(0, 5, (2, 37))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = rows(tokens)
    out.float().square().mean().backward()
    assert torch.isfinite(out.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in rows.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_inference_forward_equals_reference_and_keeps_nothing(name, monkeypatch):
    """Without gradients the rows path runs its forward alone (blocks over a few
    sequence-heads, TRA's logits up to a row constant): the same output as the reference."""
    monkeypatch.setattr(kernels.rows, "INFERENCE_ROWS", 5)
    monkeypatch.setattr(kernels.rows, "INFERENCE_BLOCK", 5 * 37 * 3)  # 3 of the 6 sequence-heads per block
    monkeypatch.setattr(kernels.rows.SoftmaxRowsFunction, "apply", None)  # never the autograd path
    monkeypatch.setattr(ThresholdRowsFunction, "apply", None)
    reference, rows = pair(name)
    tokens = torch.randint(0, 5, (3, 37), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        assert (reference(tokens) - rows(tokens)).abs().max() < 1e-4
    with torch.no_grad():
        assert (reference(tokens) - rows(tokens)).abs().max() < 1e-4

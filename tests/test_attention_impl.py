"""``attention_impl``: whole models on the Triton kernels equal their reference path, on the
``device`` fixture's device (the GPU, or the CPU under Triton's interpreter); a cache that needs
the [query, key] matrices switches to the reference (saying so); ``reference`` is honoured by
every mechanism, softmax included."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from models import ModelConfig, build_model
from support import models_with, relative_errors

pytest.importorskip("triton", reason="triton is not installed")

KERNEL_MODELS = models_with("triton")


def pair(name, device, impl="triton", **overrides):
    """The same weights built twice, on ``device``: with ``attention_impl="reference"`` and with ``impl``."""
    cfg = ModelConfig.from_preset(name, "tiny", **{"n_ctx": 32, "n_heads": 2, "d_model": 32, **overrides})
    torch.manual_seed(0)
    reference = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "reference"})).to(device)
    other = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": impl})).to(device)
    other.load_state_dict(reference.state_dict())
    return reference, other


def tokens(batch, n_pos, device, seed=1):
    return torch.randint(0, 5, (batch, n_pos), generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_triton_model_equals_reference_model(name, device):
    reference, fused = pair(name, device)
    x = tokens(2, 37, device)
    out_ref, out_fused = reference(x), fused(x)
    assert (out_ref - out_fused).abs().max() < 1e-4
    out_ref.square().mean().backward()
    out_fused.square().mean().backward()
    errors = relative_errors({pname: p.grad for pname, p in fused.named_parameters()},
                             {pname: p.grad for pname, p in reference.named_parameters()})
    assert max(errors.values()) < 1e-3, errors


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_cache_switches_to_reference_and_says_so(name, device):
    reference, fused = pair(name, device)
    x = tokens(1, 20, device)
    with pytest.warns(UserWarning, match="run the PyTorch reference"):
        logits, cache = fused.run_with_cache(x)
    _, ref_cache = reference.run_with_cache(x)
    assert torch.allclose(cache["pattern", 1], ref_cache["pattern", 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused.run_with_cache(x, names_filter=lambda n: n.endswith("hook_z"))


def test_softmax_reference_never_runs_sdpa(device, monkeypatch):
    """``attention_impl="reference"`` computes S and A explicitly, as the hooks see them; ``auto``
    runs SDPA. Both give the same model."""
    reference, auto = pair("rope", device, impl="auto")
    x = tokens(2, 20, device)
    out_auto = auto(x)
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *args, **kwargs: calls.append(args))
    out_ref = reference(x)
    assert not calls, "attention_impl='reference' ran SDPA"
    torch.testing.assert_close(out_ref, out_auto, rtol=1e-4, atol=1e-5)


def test_impl_choices(monkeypatch):
    cfg = ModelConfig.from_preset("tra", "tiny", n_ctx=32)
    attn = build_model(cfg).blocks[0].attn
    assert attn.implementation(torch.device("cpu")) == "rows", "auto runs kernels.rows on the CPU"
    assert attn.implementation(torch.device("cuda")) == "triton", "auto runs the Triton kernels on CUDA"
    for impl, expected in [("reference", "reference"), ("rows", "rows")]:
        impl_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": impl})
        assert build_model(impl_cfg).blocks[0].attn.implementation(torch.device("cpu")) == expected
    cope_cfg = ModelConfig.from_preset("cope", "tiny", n_ctx=32, attention_impl="triton")
    assert build_model(cope_cfg).blocks[0].attn.implementation(torch.device("cpu")) == "reference", \
        "CoPE has no Triton kernel"
    triton_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "triton"})
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # unset already on a machine with CUDA
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        build_model(triton_cfg).blocks[0].attn.implementation(torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_impl"):
        ModelConfig(model="tra", attention_impl="cuda")


def test_benchmark_references_compute_what_the_kernels_compute(device):
    """``glitchlens bench kernels`` times the references with the kernels' arguments."""
    from interp.bench import kernel_references
    from kernels.bench import KERNELS, random_inputs

    assert set(KERNELS) == set(KERNEL_MODELS), "the benchmark covers every mechanism with a Triton kernel"
    references = kernel_references()
    for name, kernel in KERNELS.items():
        torch.manual_seed(0)
        inputs, _ = random_inputs(name, 1, 20, 2, 16, torch.float32, device)
        assert (references[name](*inputs) - kernel(*inputs)).abs().max() < 1e-4, name

"""``attention_impl``: whole models on the Triton kernels equal their reference path, and a
cache that needs the [query, key] matrices switches to the reference (saying so)."""

import warnings

import pytest
import torch

from models import ModelConfig, build_model

pytest.importorskip("triton", reason="triton is not installed")

KERNEL_MODELS = ["tra", "fot", "trela", "tda"]


def pair(name):
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=32, n_heads=2, d_model=32)
    torch.manual_seed(0)
    reference = build_model(cfg)
    fused = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "triton"}))
    fused.load_state_dict(reference.state_dict())
    return reference, fused


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_triton_model_equals_reference_model(name):
    reference, fused = pair(name)
    tokens = torch.randint(0, 5, (2, 37), generator=torch.Generator().manual_seed(1))
    out_ref, out_fused = reference(tokens), fused(tokens)
    assert (out_ref - out_fused).abs().max() < 1e-4
    out_ref.square().mean().backward()
    out_fused.square().mean().backward()
    for (pname, p_ref), p_fused in zip(reference.named_parameters(), fused.parameters()):
        err = (p_ref.grad - p_fused.grad).norm() / p_ref.grad.norm().clamp_min(1e-12)
        assert err < 1e-3, pname


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_cache_switches_to_reference_and_says_so(name):
    reference, fused = pair(name)
    tokens = torch.randint(0, 5, (1, 20))
    with pytest.warns(UserWarning, match="run the PyTorch reference"):
        logits, cache = fused.run_with_cache(tokens)
    _, ref_cache = reference.run_with_cache(tokens)
    assert torch.allclose(cache["pattern", 1], ref_cache["pattern", 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_z"))


def test_impl_choices(monkeypatch):
    cfg = ModelConfig.from_preset("tra", "tiny", n_ctx=32)
    attn = build_model(cfg).blocks[0].attn
    assert attn.fast_path(torch.device("cpu")) == "rows", "auto runs kernels.rows on the CPU"
    assert attn.fast_path(torch.device("cuda")) == "triton", "auto runs the Triton kernels on CUDA"
    for impl, expected in [("reference", None), ("rows", "rows")]:
        impl_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": impl})
        assert build_model(impl_cfg).blocks[0].attn.fast_path(torch.device("cpu")) == expected
    cope_cfg = ModelConfig.from_preset("cope", "tiny", n_ctx=32, attention_impl="triton")
    assert build_model(cope_cfg).blocks[0].attn.fast_path(torch.device("cpu")) is None, "CoPE has no Triton kernel"
    triton_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "triton"})
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        build_model(triton_cfg).blocks[0].attn.fast_path(torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_impl"):
        ModelConfig(model="tra", attention_impl="cuda")


def test_benchmark_references_compute_what_the_kernels_compute():
    """``glitchlens bench kernels`` times the references with the kernels' arguments."""
    import kernels
    from interp.bench import kernel_references

    torch.manual_seed(0)
    references = kernel_references()
    q, k, q2, k2 = (torch.nn.functional.normalize(torch.randn(1, 20, 2, 16), dim=-1) for _ in range(4))
    v = torch.randn(1, 20, 2, 16)
    log_gate = torch.nn.functional.logsigmoid(torch.randn(1, 2, 20))
    beta, lam = torch.ones(()), torch.full((), 0.5)
    pairs = {
        "tra": ((q, k, v, log_gate), kernels.tra_attention),
        "fot": ((q, k, v, log_gate), kernels.forgetting_attention),
        "trela": ((q, k, v, beta), kernels.threshold_attention),
        "tda": ((q, k, q2, k2, v, beta, lam), kernels.differential_threshold_attention),
    }
    for name, (inputs, kernel) in pairs.items():
        assert (references[name](*inputs) - kernel(*inputs)).abs().max() < 1e-4, name

"""``attention_impl`` and the one place that picks a mechanism's implementation
(``Attention.implementation``): whole models on ``rows`` (the CPU path, what ``auto`` runs on the
CPU) and on the Triton kernels (on the ``device`` fixture's device: the GPU, or the CPU under
Triton's interpreter) equal their reference path forward and backward; a cache that needs the
[query, key] matrices switches to the reference (saying so); ``reference`` is honoured by every
mechanism, softmax included. Each op's implementations against its reference: ``tests/test_op_*.py``."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import kernels.tooling.rows
from kernels.threshold.rows import ThresholdRowsFunction
from models import ModelConfig, build_model
from models.attention import REGISTRY
from models.attention.base import reference_attention
from models.mechanisms import plugin_class
from models.mechanisms import MODEL_FAMILIES
from support import assert_same_model, models_with

ROWS_MODELS = models_with("rows")
KERNEL_MODELS = models_with("triton")


@pytest.mark.parametrize("name", ROWS_MODELS)
@pytest.mark.parametrize("n_pos", [1, 37])
def test_rows_model_equals_reference_model(name, n_pos, small_blocks, model_pair, tokens):
    assert_same_model(*model_pair(name, "rows"), tokens(2, n_pos))


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_triton_model_equals_reference_model(name, device, model_pair, tokens):
    pytest.importorskip("triton", reason="triton is not installed")
    assert_same_model(*model_pair(name, "triton", device, n_ctx=32), tokens(2, 37).to(device))


def test_every_builtin_mechanism_declares_its_reference():
    for name, mechanism in REGISTRY.items():
        if plugin_class(name) is not None:   # one's own need only implement attend (tests/plugin_mechanisms.py)
            continue
        assert "reference" in mechanism.IMPLEMENTATIONS, name
        assert set(mechanism.IMPLEMENTATIONS) <= {"reference", "rows", "triton", "sdpa"}, name


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_auto_runs_rows_on_the_cpu_and_reference_under_hooks(name):
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=32)
    attn = build_model(cfg).blocks[0].attn
    assert attn.implementation(torch.device("cpu")) == "rows"
    attn.hook_pattern.add_hook(lambda t, hook: t)
    assert attn.implementation(torch.device("cpu")) == "reference", "a hooked pattern needs the reference"


@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_cache_switches_to_reference_and_says_so(name, device, model_pair, tokens):
    pytest.importorskip("triton", reason="triton is not installed")
    reference, fused = model_pair(name, "triton", device, n_ctx=32)
    x = tokens(1, 20).to(device)
    with pytest.warns(UserWarning, match="run the PyTorch reference"):
        logits, cache = fused.run_with_cache(x)
    _, ref_cache = reference.run_with_cache(x)
    assert torch.allclose(cache["pattern", 1], ref_cache["pattern", 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused.run_with_cache(x, names_filter=lambda n: n.endswith("hook_z"))


def test_softmax_reference_never_runs_sdpa(device, monkeypatch, model_pair, tokens):
    """``attention_impl="reference"`` computes S and A explicitly, as the hooks see them; ``auto``
    runs SDPA. Both give the same model."""
    reference, auto = model_pair("rope", "auto", device, n_ctx=32)
    x = tokens(2, 20).to(device)
    out_auto = auto(x)
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *args, **kwargs: calls.append(args))
    out_ref = reference(x)
    assert not calls, "attention_impl='reference' ran SDPA"
    torch.testing.assert_close(out_ref, out_auto, rtol=1e-4, atol=1e-5)


def test_impl_choices(monkeypatch):
    cfg = ModelConfig.from_preset("tra", "tiny", n_ctx=32)
    attn = build_model(cfg).blocks[0].attn
    assert attn.implementation(torch.device("cpu")) == "rows", "auto runs kernels.tooling.rows on the CPU"
    assert attn.implementation(torch.device("cuda")) == "triton", "auto runs the Triton kernels on CUDA"
    for impl, expected in [("reference", "reference"), ("rows", "rows")]:
        impl_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": impl})
        assert build_model(impl_cfg).blocks[0].attn.implementation(torch.device("cpu")) == expected
    cope_cfg = ModelConfig.from_preset("cope", "tiny", n_ctx=32, attention_impl="triton")
    assert build_model(cope_cfg).blocks[0].attn.implementation(torch.device("cpu")) == "reference", \
        "CoPE has no Triton kernel"
    for impl, expected in [("auto", "rows"), ("rows", "rows"), ("triton", "sdpa")]:  # sdpa: softmax's other paths
        softmax_cfg = ModelConfig.from_preset("rope", "tiny", n_ctx=32, attention_impl=impl)
        assert build_model(softmax_cfg).blocks[0].attn.implementation(torch.device("cpu")) == expected
    diff = build_model(ModelConfig.from_preset("diff", "tiny", n_ctx=32)).blocks[0].attn
    assert diff.implementation(torch.device("cpu")) == "rows", "the C kernel, or SDPA where a gradient is wanted"
    assert diff.implementation(torch.device("cuda")) == "sdpa", "no Triton kernel: SDPA"
    triton_cfg = ModelConfig.from_dict({**cfg.to_dict(), "attention_impl": "triton"})
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # unset already on a machine with CUDA
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        build_model(triton_cfg).blocks[0].attn.implementation(torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_impl"):
        ModelConfig(model="tra", attention_impl="cuda")


def test_benchmark_references_compute_what_the_kernels_compute(device):
    """``glitchlens bench kernels`` times the references with the kernels' arguments."""
    pytest.importorskip("triton", reason="triton is not installed")
    from interp.bench import kernel_references
    from kernels.tooling.bench import KERNELS, random_inputs

    assert set(KERNELS) == set(KERNEL_MODELS), "the benchmark covers every mechanism with a Triton kernel"
    references = kernel_references()
    for name, kernel in KERNELS.items():
        torch.manual_seed(0)
        inputs, _ = random_inputs(name, 1, 20, 2, 16, torch.float32, device)
        assert (references[name](*inputs) - kernel(*inputs)).abs().max() < 1e-4, name


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_rows_under_bf16_autocast_stays_finite(name, model_pair, tokens):
    _, rows = model_pair(name, "rows")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = rows(tokens(2, 37))
    out.float().square().mean().backward()
    assert torch.isfinite(out.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in rows.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ROWS_MODELS)
def test_inference_forward_equals_reference_and_keeps_nothing(name, monkeypatch, model_pair, tokens):
    """Without gradients the rows path runs its forward alone (blocks over a few
    sequence-heads, TRA's logits up to a row constant): the same output as the reference."""
    monkeypatch.setattr(kernels.tooling.rows, "INFERENCE_ROWS", 5)
    monkeypatch.setattr(kernels.tooling.rows, "INFERENCE_BLOCK", 5 * 37 * 3)  # 3 of the 6 sequence-heads per block
    monkeypatch.setattr(kernels.tooling.rows.SoftmaxRowsFunction, "apply", None)  # never the autograd path
    monkeypatch.setattr(ThresholdRowsFunction, "apply", None)
    reference, rows = model_pair(name, "rows")
    x = tokens(3, 37, seed=6)
    with torch.inference_mode():
        assert (reference(x) - rows(x)).abs().max() < 1e-4
    with torch.no_grad():
        assert (reference(x) - rows(x)).abs().max() < 1e-4


def query_positions(batch: int, n_pos: int, n: int = 7, seed: int = 3) -> torch.Tensor:
    """``[batch, n]`` query positions in no order, with repeats, the first and the last."""
    positions = torch.randint(0, n_pos, (batch, n), generator=torch.Generator().manual_seed(seed))
    positions[:, 0], positions[0, 1], positions[:, 2] = n_pos - 1, 0, positions[:, 3]
    return positions


@pytest.mark.parametrize("name", list(MODEL_FAMILIES))
def test_normalized_at_equals_the_full_forward_there(name, monkeypatch, model_pair, tokens):
    """The last block at chosen queries only (the evaluation's reads) gives the full
    forward's final states there, with the rows' blocks over a few sequence-heads. A
    transformer never runs its last attention layer's full forward for it."""
    monkeypatch.setattr(kernels.tooling.rows, "INFERENCE_BLOCK", 7 * 70 * 3)
    reference, model = model_pair(name, "auto", n_ctx=80)
    reference.eval(), model.eval()
    if name != "lstm":
        monkeypatch.setattr(model.blocks[-1].attn, "forward", None)
    x, positions = tokens(4, 70, seed=2), query_positions(4, 70)
    with torch.inference_mode(), reference_attention(reference):
        expected = kernels.tooling.rows.at_rows(reference(x, return_type="normalized"), positions)
        assert (model.normalized_at(x, positions) - expected).abs().max() < 1e-4


def test_normalized_at_runs_the_full_forward_for_hooks_and_gradients(model_pair, tokens):
    _, model = model_pair("tra", "auto")
    x, positions = tokens(2, 37), query_positions(2, 37)
    with torch.no_grad():
        expected = kernels.tooling.rows.at_rows(model.eval()(x, return_type="normalized"), positions)
    seen = []
    model.blocks[-1].attn.hook_z.add_hook(lambda z, hook: seen.append(z.shape))
    with torch.no_grad():
        torch.testing.assert_close(model.normalized_at(x, positions), expected)
    assert seen == [(2, 37, 2, 16)]  # the hook saw every position
    model.reset_hooks()
    out = model.normalized_at(x, positions)
    out.square().sum().backward()
    torch.testing.assert_close(out.detach(), expected)
    assert model.blocks[-1].attn.W_Q.grad.abs().sum() > 0


def test_rows_at_positions_refuse_gradients_and_zero_rows_without_survivors():
    from kernels.tra.rows import tra_rows

    q = torch.ones(1, 9, 1, 4)
    v, log_delta, positions = torch.randn(1, 9, 1, 4), torch.zeros(1, 1, 9), torch.tensor([[8, 0, 3]])
    with torch.no_grad():  # every score is negative: no key survives the threshold
        assert tra_rows(q, -q, v, log_delta, positions=positions).abs().max() == 0
    with pytest.raises(ValueError, match="no gradient"):
        tra_rows(q.requires_grad_(), -q, v, log_delta, positions=positions)


@pytest.mark.parametrize("name", ["tra", "rope", "tda"])
def test_normalized_at_under_bf16_autocast_stays_near_the_full_forward(name, model_pair, tokens):
    """Masked keys keep their float32 fill under half-precision autocast: no -inf, no NaN."""
    _, model = model_pair(name, "auto")
    x, positions = tokens(2, 37), query_positions(2, 37)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        at = model.eval().normalized_at(x, positions).float()
        full = kernels.tooling.rows.at_rows(model(x, return_type="normalized"), positions).float()
    assert torch.isfinite(at).all() and (at - full).abs().max() < 0.1


@pytest.mark.parametrize("positions, problem", [
    (torch.tensor([[3, 37]]).expand(2, 2), r"\[0, 37\)"), (torch.tensor([[-1], [0]]), r"\[0, 37\)"),
    (torch.tensor([[1.0], [2.0]]), "integer"), (torch.tensor([1, 2]), r"\[batch, n\]"),
    (torch.tensor([[1], [2], [3]]), "batch of 2")])
def test_normalized_at_refuses_bad_positions(positions, problem, model_pair, tokens):
    _, model = model_pair("tra", "auto")
    with torch.no_grad(), pytest.raises(ValueError, match=problem):
        model.eval().normalized_at(tokens(2, 37), positions)
    with pytest.raises(ValueError, match=problem):  # the full forward's path checks them too
        model.train().normalized_at(tokens(2, 37), positions)


class LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """The number of elements of the largest tensor any operation returns while it is active."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def largest_tensor_of_eval_forward(model, x) -> int:
    with torch.no_grad(), LargestTensor() as largest:
        model(x)
    return largest.numel


@pytest.mark.parametrize("name", ["tra", "fot", "cope", "tda", "trela", "diff"])  # the specimens' mechanisms
def test_eval_mode_runs_the_fast_path_whatever_the_model_was_trained_with(name, tokens):
    """A model configured to train on its reference (as tra-mech and fot-mech are) runs its
    fastest exact path in eval mode: no [query, key] map is built, so that its largest tensor
    at T = 512 stays within 2x RoPE's (whose largest are per position: the MLP, the logits),
    the bound on the memory the issue of T = 4096 asks for. In training mode the reference
    still runs, and in eval mode a hook on an inner map brings it back for that layer alone."""
    x = tokens(1, 512)
    largest = {}
    for model_name in ("rope", name):
        torch.manual_seed(0)
        cfg = ModelConfig.from_preset(model_name, "tiny", n_ctx=512, attention_impl="reference")
        largest[model_name] = largest_tensor_of_eval_forward(build_model(cfg).eval(), x)
    assert largest[name] <= 2 * largest["rope"], largest
    model = build_model(ModelConfig.from_preset(name, "tiny", n_ctx=512, attention_impl="reference"))
    assert model.blocks[0].attn.implementation(torch.device("cpu")) == "reference", "training mode: the reference"
    model.eval()
    with reference_attention(model):
        assert model.blocks[1].attn.implementation(torch.device("cpu")) == "reference", "asked for in eval mode"
    model.blocks[0].attn.hook_pattern.add_hook(lambda t, hook: t)
    assert model.blocks[0].attn.implementation(torch.device("cpu")) == "reference", "hooked: the reference"
    assert model.blocks[1].attn.implementation(torch.device("cpu")) != "reference", "only the hooked layer"


def test_rows_flush_negligible_weights_within_float32_rounding_forward_and_backward(small_blocks):
    """The rows path sets softmax weights below kernels.tooling.rows.NEGLIGIBLE_WEIGHT to 0 (kept,
    they and the backward's products with them leave float32's normal range, and slow the CPU's
    products down): FoT with gates that decay the weights over dozens of orders of magnitude equals
    its float64 reference, forward and every gradient, as closely as the float32 reference does."""
    from kernels.forgetting.reference import forgetting_reference
    from kernels.forgetting.rows import forgetting_rows

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 40, 2, 16, generator=gen) for _ in range(3))
    log_f = torch.full((2, 2, 40), -3.0) + 0.1 * torch.randn(2, 2, 40, generator=gen)
    d_z = torch.randn(2, 40, 2, 16, generator=gen) * 1e-6   # gradients as small as a mean loss's
    results = {}
    for name, fn, dtype in [("rows", forgetting_rows, torch.float32), ("reference", forgetting_reference, torch.float32),
                            ("exact", forgetting_reference, torch.float64)]:
        leaves = [t.to(dtype).requires_grad_() for t in (q, k, v, log_f)]
        z = fn(*leaves)
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z.to(dtype)))
    with torch.no_grad():
        A = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) / 4 + (log_f.cumsum(-1)[..., :, None]
                          - log_f.cumsum(-1)[..., None, :]).masked_fill(~torch.ones(40, 40).tril().bool(), -1e11), -1)
    assert ((A > 0) & (A < kernels.tooling.rows.NEGLIGIBLE_WEIGHT)).any(), "no weight below the floor: test nothing"
    for what, ours, reference, exact in zip(("z", "dq", "dk", "dv", "dlog_f"), *results.values()):
        error, reference_error = ((t.double() - exact).abs().max() for t in (ours, reference))
        scale = exact.abs().max()
        assert error <= 4 * reference_error + 1e-6 * scale, f"{what}: {error:.3g} against the float32 reference's {reference_error:.3g}"

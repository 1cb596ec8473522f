"""The fused C kernels (``kernels.tooling.native``) against the PyTorch references: every op on awkward
shapes (T = 1, lengths across the 16-key chunks and the 4-row groups, head sizes that are not
a multiple of 16, one and three heads, half precision), at chosen query positions in any order,
split over threads; the paths that dispatch to them; and the build: a missing compiler falls
back to the PyTorch paths with a warning, a built library is reused, and loading it leaves the
process's float arithmetic alone."""

import contextlib
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import models
from interp.evaluate import predict_reads
from interp.tasks import load_split
from kernels.tooling import native
from kernels.cope.reference import cope_reference
from kernels.cope.rows import cope_rows
from kernels.threshold.reference import differential_threshold_reference, threshold_reference
from kernels.threshold.rows import differential_threshold_rows, threshold_rows
from models.attention.diff import diff_reference
from models.attention.rope import apply_rope, rotated_unit, rotation_tables
from models.attention.diff import rows_attention as diff_rows
from models.attention.softmax import rows_attention as softmax_rows
from models.attention.softmax import softmax_reference
from models.backbone import RMSNorm, SwiGLU

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C compiler: the native kernels are not built")
used_here = pytest.mark.skipif(not native.usable(), reason="built, but not used on this CPU: its vectors are "
                               f"narrower than {native.MIN_LANES} floats")


TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # float32 fast paths against their reference (tests/support.check)


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def draw(batch: int, T: int, heads: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, T, heads, d, generator=gen) for _ in range(5)]


# Each op: its reference on (q, k, v, extras) and its native call, the same arguments.
def softmax_op(q, k, v, q2, k2, table):
    return softmax_reference(q, k, v), lambda positions: native.softmax_attention(q, k, v, positions)


def rope_op(q, k, v, q2, k2, table):
    """RoPE on the way into the kernel's layout (``rotation``), against the reference on rotated q, k."""
    rotation = rotation_tables(q.shape[1], q.shape[-1], q)
    return (softmax_reference(apply_rope(q), apply_rope(k), v),
            lambda positions: native.softmax_attention(q, k, v, positions, rotation))


def diff_op(q, k, v, q2, k2, table, rope: bool = False):
    half = q.shape[-1] // 2
    views = (q[..., :half], k[..., :half], q2[..., :half], k2[..., :half])  # strided halves, as Diff's
    rotation = rotation_tables(q.shape[1], half, q) if rope else None
    rotated = [apply_rope(t) if rope else t for t in views]
    return (diff_reference(*rotated, v, torch.tensor(0.7)),
            lambda positions: native.diff_attention(*views, v, 0.7, positions, rotation))


def cope_op(q, k, v, q2, k2, table):
    q, k = 2 * q, 2 * k  # gates away from 1/2, so positions spread over the table
    return cope_reference(q, k, v, table), lambda positions: native.cope_attention(q, k, v, table, positions)


def threshold_op(p):
    def op(q, k, v, q2, k2, table):
        q, k = unit(q), unit(k)
        tau = native_tau(q, beta=0.3)
        return (threshold_reference(q, k, v, torch.tensor(0.3), p=p),
                lambda positions: native.threshold_attention(tau, v, q, k, p=p, positions=positions))
    return op


def tda_op(q, k, v, q2, k2, table):
    q, k, q2, k2 = map(unit, (q, k, q2, k2))
    tau = native_tau(q, beta=0.3)
    return (differential_threshold_reference(q, k, q2, k2, v, torch.tensor(0.3), torch.tensor(0.6)),
            lambda positions: native.threshold_attention(tau, v, q, k, q2, k2, lam=0.6, positions=positions))


def native_tau(q: torch.Tensor, beta: float) -> torch.Tensor:
    from kernels.threshold.rows import _tau
    return _tau(q, beta, 1.0)


OPS = {"softmax": softmax_op, "rope": rope_op, "diff": diff_op,
       "diff-rope": lambda *inputs: diff_op(*inputs, rope=True), "cope": cope_op, "trela": threshold_op(2.0),
       "trela-p1.5": threshold_op(1.5), "tda": tda_op}
# (batch, T, heads, d): one key; lengths across the chunks of 16 keys and groups of 4 rows; head
# sizes under, over and between multiples of 16 (values are padded to one)
SHAPES = [(1, 1, 1, 16), (2, 17, 3, 12), (2, 33, 1, 20), (1, 64, 2, 16), (2, 70, 2, 64)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", OPS)
def test_every_position_matches_the_reference(op, shape):
    """As close to the float64 reference as the float32 reference is, up to a factor of 4 (the
    kernel sums in another order: CoPE at d_head 64, with position logits of standard deviation
    16 here, measured 2.3x), plus 1e-5."""
    B, T, H, D = shape
    inputs = [*draw(B, T, H, D), torch.randn(T + 1, D, generator=torch.Generator().manual_seed(1))]
    with torch.no_grad():
        reference, run = OPS[op](*inputs)
        exact, _ = OPS[op](*(t.double() for t in inputs))
        z = run(None)
    assert z.dtype == torch.float32
    error, reference_error = ((t.double() - exact).abs().max() for t in (z, reference))
    assert error <= 4 * reference_error + 1e-5, (error, reference_error)


@pytest.mark.parametrize("op", OPS)
def test_chosen_positions_in_any_order_match_the_reference_rows(op):
    """Rows as the evaluation's last block asks for them: per sequence, out of order, repeated,
    a count that leaves a partial group of 4."""
    q, k, v, q2, k2 = draw(3, 40, 2, 16, seed=2)
    table = torch.randn(41, 16, generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([[39, 0, 17, 17, 5], [1, 2, 3, 4, 38], [20, 19, 0, 39, 16]])
    with torch.no_grad():
        reference, run = OPS[op](q, k, v, q2, k2, table)
        expected = reference[torch.arange(3)[:, None], positions]
        torch.testing.assert_close(run(positions), expected, **TOLERANCE)
        assert run(positions[:, :0]).shape == (3, 0, 2, 16)


def test_cope_positions_clamped_to_a_small_table():
    q, k, v, *_ = draw(2, 50, 2, 16, seed=3)
    table = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(native.cope_attention(q, k, v, table), cope_reference(q, k, v, table),
                                   **TOLERANCE)


@used_here
@pytest.mark.parametrize("shape, p_max", [((1, 1, 1, 16), 2), ((2, 70, 3, 20), 71), ((2, 50, 2, 16), 4)],
                         ids=["T1", "full-table", "clamped"])
def test_cope_training_rule_matches_the_reference_forward_and_backward(monkeypatch, shape, p_max):
    """CoPE's C rule in training (kernels.cope.rows.NativeCoPERule) against the float64 reference,
    forward and the gradients of q, k, v and the table, in blocks of 16 rows (T = 70 ends in a partial
    one), with positions spread over the table and, with 4 rows, clamped: as close as the float32
    reference is, up to a factor of 4, plus 1e-5 (each tensor named on failure)."""
    import kernels.tooling.rows

    monkeypatch.setattr(kernels.tooling.rows, "ROWS", 16)
    calls = []
    monkeypatch.setattr(native, "cope_positions", lambda *a, run=native.cope_positions: calls.append(1) or run(*a))
    B, T, H, D = shape
    q, k, v, *_ = draw(B, T, H, D, seed=9)
    inputs = [2 * q, 2 * k, v, torch.randn(p_max, D, generator=torch.Generator().manual_seed(1))]
    d_z = torch.randn(B, T, H, D, generator=torch.Generator().manual_seed(2))
    results = {}
    for name, fn, dtype in [("rows", cope_rows, torch.float32), ("reference", cope_reference, torch.float32),
                            ("exact", cope_reference, torch.float64)]:
        leaves = [t.to(dtype).requires_grad_() for t in inputs]
        z = fn(*leaves)
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z.to(dtype)))
        assert all(torch.isfinite(t).all() for t in results[name]), f"{name}: not finite"
    assert calls, "the native rule did not run"
    for what, ours, reference, exact in zip(("z", "dq", "dk", "dv", "d_table"), *results.values()):
        error, reference_error = ((t.double() - exact).abs().max() for t in (ours, reference))
        assert error <= 4 * reference_error + 1e-5, f"{what}: {error:.3g} against the float32 reference's {reference_error:.3g}"


@used_here
@pytest.mark.parametrize("views", [1, 2], ids=["trela", "tda"])
@pytest.mark.parametrize("shape, p, beta", [((1, 1, 1, 16), 2.0, 0.3), ((2, 70, 3, 20), 2.0, 0.3),
                                            ((2, 37, 2, 16), 1.5, -0.4), ((2, 33, 1, 12), 1.0, 0.6),
                                            ((2, 33, 2, 16), 2.0, 50.0)],
                         ids=["T1", "p2", "p1.5-negative-beta", "p1", "nothing-survives"])
def test_threshold_training_rule_matches_the_reference_forward_and_backward(monkeypatch, views, shape, p, beta):
    """trela's and TDA's C rule in training (kernels.threshold.rows.ThresholdRowsFunction's blocks in
    float32) against the float64 reference, forward and the gradients of each view's q and k, v, beta
    and lambda, in blocks of 16 rows (T = 70, 37 and 33 end in a partial one), with a fifth of the
    causal keys above the threshold (p = 2), most of them (beta < 0, p = 1.5), a few (p = 1) and none
    (beta = 50: every row empty, its output and every gradient finite, as the reference's): as
    close as the float32 reference is, up to a factor of 4, plus 1e-5 (each tensor named on failure)."""
    import kernels.tooling.rows

    monkeypatch.setattr(kernels.tooling.rows, "ROWS", 16)
    calls = []
    monkeypatch.setattr(native, "threshold_backward_",
                        lambda *a, run=native.threshold_backward_: calls.append(1) or run(*a))
    B, T, H, D = shape
    q, k, v, q2, k2 = draw(B, T, H, D, seed=10)
    inputs = [*map(unit, (q, k, q2, k2)[:2 * views]), v, torch.tensor(beta), *[torch.tensor(0.6)][:views - 1]]
    d_z = torch.randn(B, T, H, D, generator=torch.Generator().manual_seed(2))
    paths = {1: [("rows", threshold_rows), ("reference", threshold_reference)],
             2: [("rows", differential_threshold_rows), ("reference", differential_threshold_reference)]}[views]
    results = {}
    for name, fn, dtype in [*((name, fn, torch.float32) for name, fn in paths), ("exact", paths[1][1], torch.float64)]:
        leaves = [t.to(dtype).requires_grad_() for t in inputs]
        z = fn(*leaves, p=p)
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z.to(dtype)))
        assert all(torch.isfinite(t).all() for t in results[name]), f"{name}: not finite"
    assert calls, "the native rule did not run"
    names = ("z", "dq1", "dk1", "dq2", "dk2")[:1 + 2 * views] + ("dv", "d_beta", "d_lam")[:1 + views]
    for what, ours, reference, exact in zip(names, *results.values()):
        error, reference_error = ((t.double() - exact).abs().max() for t in (ours, reference))
        assert error <= 4 * reference_error + 1e-5, f"{what}: {error:.3g} against the float32 reference's {reference_error:.3g}"


def test_threshold_rows_where_nothing_survives_are_zero():
    """beta large enough that no key passes tau beyond the first rows: those rows output exactly 0."""
    q, k, v, q2, k2 = (unit(t) for t in draw(2, 30, 2, 16, seed=4))
    tau = native_tau(q, beta=50.0)
    with torch.no_grad():
        z = native.threshold_attention(tau, v, q, k, q2, k2, lam=0.5)
        expected = differential_threshold_reference(q, k, q2, k2, v, torch.tensor(50.0), torch.tensor(0.5))
    assert (z[:, 1:] == 0).all() and (expected[:, 1:] == 0).all()
    torch.testing.assert_close(z, expected)


def test_threads_split_the_sequence_heads_without_changing_a_bit():
    q, k, v, *_ = draw(3, 45, 3, 16, seed=5)
    threads = torch.get_num_threads()
    with torch.no_grad():
        try:
            torch.set_num_threads(1)
            one = native.softmax_attention(q, k, v)
            torch.set_num_threads(4)
            four = native.softmax_attention(q, k, v)
        finally:
            torch.set_num_threads(threads)
    assert torch.equal(one, four)


def test_positions_out_of_range_are_refused():
    q, k, v, *_ = draw(1, 8, 1, 16)
    with torch.no_grad(), pytest.raises(IndexError, match="query positions"):
        native.softmax_attention(q, k, v, torch.tensor([[8]]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_computed_in_float32(dtype):
    q, k, v, *_ = draw(2, 20, 2, 16, seed=6)
    half = [t.to(dtype) for t in (q, k, v)]
    with torch.no_grad():
        z = softmax_rows(*half)
        expected = softmax_reference(*(t.float() for t in half))
    assert z.dtype == dtype
    torch.testing.assert_close(z.float(), expected, rtol=1e-2, atol=1e-2)


@used_here
def test_the_cpu_paths_dispatch_to_the_kernels_only_without_gradients(monkeypatch):
    """Without gradients each path calls its kernel; with them (training), or switched off,
    the PyTorch path runs, and gives the same up to float rounding."""
    calls = []
    monkeypatch.setattr(native, "_run", lambda *args, run=native._run: calls.append(args[0]) or run(*args))
    q, k, v, q2, k2 = draw(2, 24, 2, 16, seed=7)
    beta, lam, table = torch.tensor(0.2), torch.tensor(0.4), torch.randn(25, 16)
    u = [unit(t) for t in (q, k, q2, k2)]
    paths = [lambda: softmax_rows(q, k, v), lambda: diff_rows(q[..., :8], k[..., :8], q2[..., :8], k2[..., :8], v, lam),
             lambda: cope_rows(q, k, v, table), lambda: threshold_rows(u[0], u[1], v, beta),
             lambda: differential_threshold_rows(*u, v, beta, lam)]
    for path in paths:
        with torch.no_grad():
            fast = path()
            with native.switched_off():
                torch.testing.assert_close(fast, path(), **TOLERANCE)
    assert calls == ["softmax_attention", "softmax_attention", "cope_attention", "threshold_attention",
                     "threshold_attention"]
    v.requires_grad_()
    for path in paths:
        path().sum().backward()
    assert len(calls) == 5, "a forward that wants gradients ran a native kernel"


@used_here
@pytest.mark.parametrize("rotate", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (2, 37, 3, 20), (3, 5, 2, 64)])
def test_rotated_unit_and_its_gradient_match_the_pytorch_functions(rotate, shape):
    """trela's and TDA's q~, k~ (RoPE, then unit length) and their gradient, which run in training
    too: the C kernel against autograd through apply_rope and F.normalize, on a non-contiguous
    input with a zero row and one shorter than F.normalize's eps, its gradient arriving in the heads-first
    layout the rows path hands back; u is laid out for that path (heads first, no copy)."""
    gen = torch.Generator().manual_seed(8)
    B, T, H, D = shape
    wide = torch.randn(B, T, H, D + 3, generator=gen)
    wide[0, 0, 0] = 0.0
    wide[-1, -1, -1] *= 1e-14
    x = wide[..., 3:].requires_grad_()
    d_u = torch.randn(B, H, T, D, generator=gen).transpose(1, 2)
    results = {}
    for path in ("native", "pytorch"):
        with contextlib.nullcontext() if path == "native" else native.switched_off():
            u = rotated_unit(x, rotate)
            results[path] = (u, *torch.autograd.grad(u, x, d_u))
    reference = F.normalize(apply_rope(x) if rotate else x, dim=-1)
    expected = (reference, *torch.autograd.grad(reference, x, d_u))
    assert results["native"][0].transpose(1, 2).is_contiguous()
    for path, got in results.items():
        for what, ours, ref in zip(("u", "dx"), got, expected):
            scale = ref.abs().max().clamp(min=1.0)   # the tiny row's gradient is du / eps: ~1e12
            torch.testing.assert_close(ours / scale, ref / scale, **TOLERANCE, msg=lambda m: f"{path} {what}: {m}")


@used_here
@pytest.mark.parametrize("name", ["rope-mech", "diff-mech"])
def test_rope_runs_in_the_kernel_unless_a_hook_reads_the_rotated_q_or_k(monkeypatch, name):
    """RoPE's models rotate q and k on their way into the kernel (:func:`native._laid_out`); a
    hook on the rotated q or k (softmax's ``hook_rot_q``, ``hook_rot_k``) makes the layer rotate
    them itself, and sees ``apply_rope`` of ``hook_q`` as always. Every hook of the layer fires
    either way with the same q, k and v, and the logits agree up to float rounding."""
    model = models.load_pretrained(name)
    tokens = torch.from_numpy(load_split("sparse", 3)[:, :40].astype(np.int64))
    rotated = []
    monkeypatch.setattr(native, "_laid_out", lambda x, out, strides, rotation, run=native._laid_out:
                        rotated.append(rotation is not None) or run(x, out, strides, rotation))
    attn = "blocks.0.attn."
    names = [attn + hook for hook in ("hook_q", "hook_k", "hook_v", "hook_z")]
    rotary = [attn + "hook_rot_q", attn + "hook_rot_k"] if name == "rope-mech" else []
    seen = {}

    def keep(tensor, hook):
        seen.setdefault(hook.name, []).append(tensor.clone())

    with torch.no_grad():
        fast = model.run_with_hooks(tokens, fwd_hooks=[(hook, keep) for hook in names])
        assert any(rotated)
        rotated.clear()
        slow = model.run_with_hooks(tokens, fwd_hooks=[(hook, keep) for hook in names + rotary])
    assert not any(rotated[:2 if rotary else 0]), "the layer with rotary hooks rotated in the kernel"
    for hook in names:
        assert len(seen[hook]) == 2 and seen[hook][0].shape == seen[hook][1].shape
        torch.testing.assert_close(seen[hook][0], seen[hook][1], **TOLERANCE)
    for hook in rotary:
        torch.testing.assert_close(seen[hook][0], apply_rope(seen[hook.replace("rot_", "")][1]), rtol=0, atol=0)
    torch.testing.assert_close(fast, slow, **TOLERANCE)


def mlp_and_norm(d_model: int, d_mlp: int, bias: bool, seed: int = 9) -> tuple[RMSNorm, SwiGLU]:
    """An RMSNorm and a SwiGLU in eval mode with random weights (biases too, where asked)."""
    torch.manual_seed(seed)
    cfg = models.ModelConfig.from_preset("rope", "tiny", d_model=d_model, d_mlp=d_mlp, linear_bias=bias)
    norm, mlp = RMSNorm(d_model).eval(), SwiGLU(cfg).eval()
    for parameter in [*norm.parameters(), *mlp.parameters()]:
        parameter.data = torch.randn_like(parameter)
    return norm, mlp


@used_here
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape, d_mlp", [((1, 1, 1), 1), ((2, 37, 13), 21), ((3, 600, 64), 128), ((0, 5, 16), 32)],
                         ids=["1x1x1", "2x37x13", "3x600x64-threads", "empty"])
def test_the_norm_and_the_mlp_in_one_pass_match_their_pytorch_paths(shape, d_mlp, bias):
    """RMSNorm's ``x / rms(x) * w`` and SwiGLU's hidden activation, biases added in the pass, on
    rows whose length is no multiple of a vector, on a non-contiguous input, a zero row (rms =
    sqrt(eps)), a row whose gate pre-activations pass expf's range (|pre| > 88), and enough rows
    for two threads; the modules' outputs against their PyTorch paths (the kernels switched off)."""
    norm, mlp = mlp_and_norm(shape[-1], d_mlp, bias)
    x = torch.randn(*shape[:-1], shape[-1] + 2)[..., 2:] * 3
    if x.numel():
        x[0, 0] = 0.0
        x[-1, -1] *= 1000
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            fast = {"norm": norm(x), "mlp": mlp(x)}
            with native.switched_off():
                slow = {"norm": norm(x), "mlp": mlp(x)}
    finally:
        torch.set_num_threads(threads)
    for what in fast:
        scale = slow[what].abs().max().clamp(min=1.0) if x.numel() else 1.0
        torch.testing.assert_close(fast[what] / scale, slow[what] / scale, **TOLERANCE, msg=lambda m: f"{what}: {m}")


@used_here
def test_the_norm_and_the_mlp_run_in_one_pass_only_where_nothing_can_tell(monkeypatch):
    """The passes run in eval mode without gradients on float32; a hook on the module or any of
    its hook points, training mode, gradients, autocast and float64 each keep the PyTorch path,
    and a hook there sees what it always does."""
    calls = []
    for kernel in ("rms_norm", "swiglu_hidden"):
        monkeypatch.setattr(native, kernel, lambda *args, run=getattr(native, kernel), name=kernel:
                            calls.append(name) or run(*args))
    norm, mlp = mlp_and_norm(16, 24, bias=True)
    x = torch.randn(2, 5, 16)

    def passes(module, x=x) -> bool:
        calls.clear()
        module(x)
        return bool(calls)

    with torch.no_grad():
        assert passes(norm) and passes(mlp)
        hidden = []
        handle = mlp.hook_post.add_hook(lambda t, hook: hidden.append(t))
        assert not passes(mlp) and torch.equal(hidden[0], F.silu(x @ mlp.W_gate + mlp.b_gate) * (x @ mlp.W_in + mlp.b_in))
        mlp.hook_post.remove_hooks()
        handle = norm.register_forward_hook(lambda module, args, out: None)
        assert not passes(norm)
        handle.remove()
        norm.train()
        assert not passes(norm)
        norm.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not passes(norm) and not passes(mlp)
        assert not passes(norm.double(), x.double())
    assert not passes(mlp), "gradients wanted"
    with pytest.raises(TypeError, match="float32 CPU tensors, got torch.float64"):
        native.rms_norm(x.double(), norm.w, 1e-6)


@used_here
@pytest.mark.parametrize("name", ["diff-mech", "cope-mech", "tda-mech", "rope-mech", "tra-mech", "fot-mech"])
def test_evaluation_predicts_what_the_pytorch_paths_predict(name):
    model = models.load_pretrained(name)
    tokens = load_split("sparse", 24)
    fast = predict_reads(model, tokens)
    with native.switched_off():
        slow = predict_reads(model, tokens)
    assert np.array_equal(fast.predicted, slow.predicted)
    np.testing.assert_allclose(fast.margin, slow.margin, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, lanes, feature", [("x86-64-v2", 4, "sse4_2"), ("x86-64-v3", 8, "avx2")])
def test_narrower_vector_builds_compute_the_same(monkeypatch, tmp_path, target, lanes, feature):
    """The kernels for other CPUs than this one: a build for SSE (4 floats a vector) and for AVX2
    (8) against the references, where this CPU can run them."""
    if f" {feature} " not in native._cpu_identity() + " ":
        pytest.skip(f"this CPU cannot run a {target} build")
    monkeypatch.setattr(native, "COMPILE_FLAGS",
                        tuple(f"-march={target}" if f == "-march=native" else f for f in native.COMPILE_FLAGS))
    monkeypatch.setenv("GLITCHLENS_CACHE", str(tmp_path))
    native.library.cache_clear()
    try:
        assert native.library().vector_lanes() == lanes
        for op in OPS:
            test_every_position_matches_the_reference(op, (2, 37, 2, 20))
            test_chosen_positions_in_any_order_match_the_reference_rows(op)
    finally:
        native.library.cache_clear()


def test_without_a_compiler_the_pytorch_paths_run(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("GLITCHLENS_CACHE", str(tmp_path / "cache"))
    native.library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="could not be built.*Install a C compiler"):
            assert native.library() is None
        q, k, v, *_ = draw(1, 10, 1, 16)
        with torch.no_grad():
            assert not native.usable(q, k, v)
            torch.testing.assert_close(softmax_rows(q, k, v), softmax_reference(q, k, v), **TOLERANCE)
        monkeypatch.setenv("GLITCHLENS_NATIVE", "0")
        native.library.cache_clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert native.library() is None, "GLITCHLENS_NATIVE=0 switches the kernels off, silently"
    finally:
        native.library.cache_clear()


def test_a_built_library_is_reused_not_rebuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("GLITCHLENS_CACHE", str(tmp_path))
    native.library.cache_clear()
    try:
        assert native.library() is not None
        built = list(tmp_path.glob("native-*.so"))
        assert len(built) == 1 and not list(tmp_path.glob("tmp*")), "one library, no build leftovers"
        native.library.cache_clear()
        monkeypatch.setattr(native.subprocess, "run", lambda *a, **k: pytest.fail("rebuilt an existing library"))
        assert native.library() is not None
    finally:
        native.library.cache_clear()


@pytest.mark.integration
def test_loading_the_library_keeps_subnormal_floats():
    """The object is compiled with -ffast-math but linked without it: a library linked with it
    would switch the whole process to flush-to-zero on load."""
    code = ("import numpy as np, torch; from kernels.tooling import native; assert native.library() is not None; "
            "print(float(np.float32(1e-39) * np.float32(0.5)), float(torch.tensor([1e-39]) .mul(0.5)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout.split()
    assert all(float(x) > 0 for x in out), out

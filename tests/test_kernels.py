"""The Triton kernels against the mechanisms' PyTorch references, on the ``device`` fixture's
device: the GPU, or CPU tensors under Triton's interpreter (TRITON_INTERPRET=1, switched on by
tests/conftest.py on machines without CUDA). Forward outputs and every gradient, over sequence lengths (including T = 1 and lengths that are not a
multiple of the tile), head dims, tile shapes, memory layouts (transposed, strided with a
batch stride), gate strengths, signs of beta, powers p, rows with no survivor, and half
precision.

Tolerances (float32): max abs error 1e-4 on outputs, relative RMS error 1e-3 on gradients
(``support.relative_errors``: relative to each gradient plus a floor scaled by all of them).
For the threshold kernels (TRA's S > 0, trela/TDA's s > tau) a score within 1e-4 of its
threshold could legitimately fall on the other side in a differently ordered float32 sum,
so rows holding such a score are left out of the comparison (their upstream gradient is
zeroed); ``test_threshold_flips`` counts the entries that actually flip.
"""

import math
from dataclasses import dataclass, fields

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is not installed; the kernel tests need it")

from triton.runtime import interpreter  # noqa: E402

from kernels import bench  # noqa: E402
from kernels.forgetting.triton import forgetting_attention  # noqa: E402
from kernels.threshold.triton import differential_threshold_attention, threshold_attention  # noqa: E402
from kernels.tra import triton as tra  # noqa: E402
from kernels.tra.triton import tra_attention  # noqa: E402
from models import ModelConfig  # noqa: E402
from models.attention import get_attention_class  # noqa: E402
from support import models_with, relative_errors  # noqa: E402

B, H = 2, 2
NEAR = 1e-4
THRESHOLD_MODELS = ("trela", "tda")


@pytest.fixture(autouse=True, scope="module")
def exact_bf16_dot_in_interpreter():
    """Triton's interpreter keeps bf16 as raw uint16 bits and its ``tl.dot`` multiplies the
    bits (triton-lang/triton#11584; compiled kernels are unaffected). Widen bf16 operands
    to float32 first, exactly (a bf16 is the top half of a float32), as the proposed fix
    (#11585) does, so that the bf16 tests check the kernels rather than that bug."""
    if not isinstance(tra._fwd, interpreter.InterpretedFunction):
        yield  # compiled kernels
        return
    builder = interpreter.InterpreterBuilder
    original = builder.create_dot

    def widened(x):
        if x.dtype != interpreter.tl.bfloat16:
            return x
        return interpreter.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), interpreter.tl.float32)

    builder.create_dot = lambda self, a, b, *rest: original(self, widened(a), widened(b), *rest)
    yield
    builder.create_dot = original


@dataclass
class Case:
    """One comparison. ``blocks``: (BLOCK_M, BLOCK_N); ``scale`` multiplies q and k (raw
    TRA scores instead of RMS-normalised ones); ``gate``: the forget-gate logit offset
    (negative: strong forgetting); ``empty``: the middle half of the rows has no surviving key."""
    T: int
    D: int
    layout: str = "contiguous"
    blocks: tuple = (32, 32)
    scale: float = 1.0
    gate: float = 0.0
    beta: float = 1.0
    p: float = 2.0
    kappa: float = 1.0
    empty: bool = False
    dtype: torch.dtype = torch.float32

    def __str__(self):
        changed = [f"{f.name}={getattr(self, f.name)}".replace(" ", "") for f in fields(self)[2:]
                   if getattr(self, f.name) != f.default]
        return "-".join([f"T{self.T}", f"D{self.D}", *changed])


def placed(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x [batch, pos, head, d]`` copied into a leaf with the given memory layout."""
    b, t, h, d = x.shape
    like = {"dtype": x.dtype, "device": x.device}
    if layout == "contiguous":
        out = torch.empty(b, t, h, d, **like)
    elif layout == "transposed":  # a [batch, head, pos, d] buffer seen as [batch, pos, head, d]
        out = torch.empty(b, h, t, d, **like).transpose(1, 2)
    elif layout == "strided":  # every other batch row and feature of a larger buffer
        out = torch.empty(2 * b, t, h, 2 * d, **like)[::2, :, :, ::2]
    else:
        raise ValueError(layout)
    with torch.no_grad():
        out.copy_(x)
    return out.requires_grad_()


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def rms_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def attention_module(name: str, case: Case, device: torch.device):
    options = {"p": case.p, "kappa": case.kappa} if name in THRESHOLD_MODELS else {}
    cfg = ModelConfig.from_preset(name, "tiny", n_heads=H, d_model=H * case.D, attention_options=options)
    module = get_attention_class(name)(cfg, 0).to(device)
    if name in THRESHOLD_MODELS:
        with torch.no_grad():
            module.beta.fill_(case.beta)
    return module


def make_inputs(name: str, case: Case, gen: torch.Generator, device: torch.device) -> dict:
    """Leaf tensors (in ``case.layout`` and ``case.dtype``, on ``device``) for the kernel and the
    reference; drawn on the CPU, so that every device sees the same values."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    n_qk = 4 if name == "tda" else 2
    normalise = unit_rows if name in THRESHOLD_MODELS else rms_rows
    qk = [normalise(randn(B, case.T, H, case.D)) * case.scale for _ in range(n_qk)]
    if case.empty:  # keys in the positive orthant, the middle half of the queries in the negative one
        qk[1] = qk[1].abs()
        qk[0][:, case.T // 4: 3 * case.T // 4] = -qk[0][:, case.T // 4: 3 * case.T // 4].abs()
    tensors = {f"qk{i}": placed(x.to(case.dtype), case.layout) for i, x in enumerate(qk)}
    tensors["v"] = placed(randn(B, case.T, H, case.D).to(case.dtype), case.layout)
    if name in ("tra", "fot"):
        tensors["log_gate"] = F.logsigmoid(randn(B, H, case.T) + case.gate).requires_grad_()
    return tensors


def forward_only_inputs(name: str, case: Case, device: torch.device) -> dict:
    return {key: t.detach() for key, t in make_inputs(name, case, torch.Generator().manual_seed(0), device).items()}


def qk_of(name: str, x: dict) -> list[torch.Tensor]:
    return [x[f"qk{i}"] for i in range(4 if name == "tda" else 2)]


def run_kernel(name: str, module, x: dict, case: Case, **options) -> torch.Tensor:
    qk, tiles = qk_of(name, x), {"block_m": case.blocks[0], "block_n": case.blocks[1], **options}
    if name == "tra":
        return tra_attention(*qk, x["v"], x["log_gate"], **tiles)
    if name == "fot":
        return forgetting_attention(*qk, x["v"], x["log_gate"], **tiles)
    if name == "trela":
        return threshold_attention(*qk, x["v"], module.beta, case.kappa, case.p, **tiles)
    return differential_threshold_attention(*qk, x["v"], module.beta, torch.sigmoid(module.lambda_logit),
                                                    case.kappa, case.p, **tiles)


def run_reference(name: str, module, x: dict, case: Case) -> torch.Tensor:
    return module.reference(*qk_of(name, x), x["v"], *([x["log_gate"]] if "log_gate" in x else []))


def near_threshold(name: str, x: dict, case: Case) -> torch.Tensor:
    """``[batch, head, query_pos, key_pos]`` (on the CPU) True where a visible score lies within
    NEAR of its threshold."""
    if name == "fot":
        return torch.zeros(B, H, case.T, case.T, dtype=torch.bool)
    causal = torch.ones(case.T, case.T, dtype=torch.bool).tril()
    qk = [t.detach().double().cpu() for t in qk_of(name, x)]
    if name == "tra":
        return (torch.einsum("bqhd,bkhd->bhqk", *qk).abs() / math.sqrt(case.D) < NEAR) & causal
    i = torch.arange(case.T, dtype=torch.float64)
    tau = case.beta * torch.sqrt(2 * torch.log((i + 1) / case.kappa).clamp(min=0) / case.D)
    near = torch.zeros(B, H, case.T, case.T, dtype=torch.bool)
    for q, k in zip(qk[::2], qk[1::2]):
        near |= ((torch.einsum("bqhd,bkhd->bhqk", q, k) - tau[:, None]).abs() < NEAR) & causal
    return near


def run(impl, name: str, module, x: dict, case: Case, dz: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Output and the gradients of ``<z, dz>`` for every input and learned scalar."""
    params = {"trela": ["beta"], "tda": ["beta", "lambda_logit"]}.get(name, [])
    targets = {**x, **{p: getattr(module, p) for p in params}}
    z = impl(name, module, x, case)
    grads = torch.autograd.grad(z, list(targets.values()), dz.to(z.dtype))
    for g, t in zip(grads, targets.values()):
        assert g.shape == t.shape and g.dtype == t.dtype and torch.isfinite(g).all()
    return z, dict(zip(targets, grads))


def errors(a: tuple, b: tuple, rows: torch.Tensor) -> dict:
    (z, grads), (z_ref, grads_ref) = a, b
    return {"out": ((z.double() - z_ref.double()).abs() * rows).max().item(),
            "grads": relative_errors(grads, grads_ref)}


def compare(name: str, case: Case, device: torch.device) -> dict:
    """The kernel on ``case.dtype`` inputs against the reference in float32 on the same
    values and, for half precision, the reference in ``case.dtype`` against the same float32
    run (what rounding alone costs). Rows near a threshold are left out (see the docstring)."""
    gen = torch.Generator().manual_seed(0)
    module = attention_module(name, case, device)
    x = make_inputs(name, case, gen, device)
    x32 = {key: t.detach().float().requires_grad_() for key, t in x.items()}
    keep = ~near_threshold(name, x32, case).any(-1)                             # [batch, head, query_pos]
    rows = keep.transpose(1, 2)[..., None].to(device)
    dz = torch.randn(B, case.T, H, case.D, generator=gen).to(device) * rows
    exact = run(run_reference, name, module, x32, case, dz)
    kernel = run(run_kernel, name, module, x, case, dz)
    assert kernel[0].dtype == case.dtype
    result = {"kernel": errors(kernel, exact, rows), "left_out_rows": int((~keep).sum())}
    if case.dtype != torch.float32:
        result["reference"] = errors(run(run_reference, name, module, x, case, dz), exact, rows)
    return result


def check_float32(name: str, case: Case, device: torch.device):
    result = compare(name, case, device)
    assert result["kernel"]["out"] <= 1e-4, result
    assert all(e < 1e-3 for e in result["kernel"]["grads"].values()), result


# Every T and D of the issue per kernel, each with another layout / tile shape / variant.
SWEEP = {
    "tra": [Case(1, 16), Case(17, 32, "transposed", (16, 16), scale=3.0), Case(64, 64, "strided", gate=6.0),
            Case(65, 16, blocks=(32, 16), scale=3.0, gate=-4.0), Case(130, 32, "transposed", (16, 32)),
            Case(65, 32, empty=True)],
    "fot": [Case(1, 16), Case(17, 32, "transposed", (16, 16), gate=6.0), Case(64, 64, "strided", gate=-4.0),
            Case(65, 16, blocks=(32, 16), gate=-30.0), Case(130, 32, "transposed", (16, 32), gate=3.0)],
    "trela": [Case(1, 16), Case(17, 32, "transposed", (16, 16), beta=-0.5, p=1.0), Case(64, 64, "strided"),
              Case(65, 16, blocks=(32, 16), beta=2.0, p=1.0), Case(130, 32, "transposed", (16, 32), beta=-1.0),
              Case(65, 32, p=1.5, kappa=2.5), Case(65, 32, beta=3.0, p=1.0, empty=True)],
    "tda": [Case(1, 16), Case(17, 32, "transposed", (16, 16), beta=-0.5, p=1.0), Case(64, 64, "strided"),
            Case(65, 16, blocks=(32, 16), beta=2.0, p=1.0), Case(130, 32, "transposed", (16, 32), beta=-1.0),
            Case(65, 32, p=1.5, kappa=2.5)],
}


# Every mechanism with a Triton kernel, from the registry: one without cases here fails collection.
KERNEL_MODELS = models_with("triton")


@pytest.mark.parametrize("name,case", [(n, c) for n in KERNEL_MODELS for c in SWEEP[n]], ids=str)
def test_matches_reference(name, case, device):
    check_float32(name, case, device)


@pytest.mark.slow
@pytest.mark.parametrize("name", KERNEL_MODELS)
@pytest.mark.parametrize("T", [17, 64, 65, 130])
@pytest.mark.parametrize("D", [16, 32, 64, 128])
def test_matches_reference_sweep(name, T, D, device):
    odd = T % 2 == 1
    check_float32(name, Case(T, D, "transposed", beta=-1.0 if odd else 1.0, p=1.0 if odd else 2.0,
                             gate=-4.0 if odd else 4.0), device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_half_precision_as_accurate_as_reference(name, dtype, device):
    """bf16/fp16 inputs, float32 accumulation: the kernel must be about as close to the
    float32 computation as the PyTorch reference run in that dtype is."""
    result = compare(name, Case(65, 32, "transposed", dtype=dtype), device)
    kernel, reference = result["kernel"], result["reference"]
    assert kernel["out"] <= 2 * reference["out"] + 1e-3, result
    assert all(kernel["grads"][key] <= 2 * err + 1e-2 for key, err in reference["grads"].items()), result


def positions(key: str, t: torch.Tensor, index) -> torch.Tensor:
    """``t[positions index]`` for an input of ``make_inputs`` (the gate is ``[batch, head, pos]``)."""
    return t[..., index] if key == "log_gate" else t[:, index]


@pytest.mark.filterwarnings("ignore:All-NaN slice")
@pytest.mark.parametrize("name", KERNEL_MODELS)
def test_future_tiles_never_read(name, device):
    """NaN in every position from a tile boundary on leaves the rows before it exactly as
    a run on the truncated sequence: no future tile is read, whatever the sign of beta
    (a masked but loaded NaN value would still poison P V through 0 * NaN)."""
    case, cut = Case(64, 32, beta=-1.0), 32
    module = attention_module(name, case, device)
    x = forward_only_inputs(name, case, device)
    poisoned = {key: t.clone() for key, t in x.items()}
    for key, t in poisoned.items():
        positions(key, t, slice(cut, None)).fill_(float("nan"))
    with torch.no_grad():
        z = run_kernel(name, module, poisoned, case)[:, :cut]
        z_truncated = run_kernel(name, module, {key: positions(key, t, slice(cut)) for key, t in x.items()}, case)
    assert torch.isfinite(z).all()
    torch.testing.assert_close(z, z_truncated, rtol=0, atol=0)


def reference_pattern(name: str, module, x: dict, case: Case) -> torch.Tensor:
    """The reference's ``hook_pattern`` ``[batch, head, query_pos, key_pos]``."""
    cache = {}
    handle = module.hook_pattern.register_forward_hook(lambda mod, args, out: cache.update(pattern=out))
    run_reference(name, module, x, case)
    handle.remove()
    return cache["pattern"]


@pytest.mark.parametrize("name,case", [("tra", Case(130, 64, gate=2.0)), ("trela", Case(130, 64, beta=0.5, p=1.0))],
                         ids=str)
def test_threshold_flips(name, case, device):
    """Read the kernel's whole pattern through one-hot values (v_j = e_(j - c) for the keys
    of a D-wide column block c) and compare its support with the reference's: keys may only
    change sides where the score is within NEAR of the threshold."""
    module = attention_module(name, case, device)
    x = forward_only_inputs(name, case, device)
    pattern = torch.zeros(B, H, case.T, case.T)
    with torch.no_grad():
        for start in range(0, case.T, case.D):
            width = min(case.D, case.T - start)
            one_hot = torch.zeros(B, case.T, H, case.D)
            one_hot[:, start:start + width, :, :width] = torch.eye(width)[None, :, None, :]
            z = run_kernel(name, module, {**x, "v": one_hot.to(device)}, case)
            pattern[..., start:start + width] = z[..., :width].transpose(1, 2).cpu()
        reference = reference_pattern(name, module, x, case).cpu()
    flips = (pattern != 0) != (reference != 0)
    near = near_threshold(name, x, case)
    assert not (flips & ~near).any()
    torch.testing.assert_close(pattern, reference, rtol=0, atol=1e-5)
    print(f"{name}: {int(flips.sum())} flips among {int(near.sum())} scores within {NEAR} of the threshold")


def test_rejects_bad_inputs(device):
    q, gate = torch.randn(1, 8, 1, 16, device=device), torch.zeros(1, 1, 8, device=device)
    with pytest.raises(ValueError, match="head dim"):
        forgetting_attention(q[..., :12], q[..., :12], q[..., :12], gate)
    with pytest.raises(ValueError, match="shapes differ"):
        threshold_attention(q, q[:, :4], q, 1.0)
    with pytest.raises(ValueError, match="one dtype"):
        tra_attention(q, q.half(), q, gate)
    with pytest.raises(ValueError, match="log_delta"):
        tra_attention(q, q, q, gate.transpose(1, 2))


@pytest.mark.parametrize("name,case", [("tra", Case(130, 32, blocks=(16, 16), empty=True, gate=-4.0)),
                                       ("trela", Case(130, 32, blocks=(16, 16), beta=3.0, p=1.0)),
                                       ("tda", Case(130, 32, blocks=(16, 16), beta=3.0))], ids=str)
def test_skipping_zero_tiles_is_exact(name, case, device):
    module = attention_module(name, case, device)
    x = forward_only_inputs(name, case, device)
    with torch.no_grad():
        assert bench.zero_tile_fraction(reference_pattern(name, module, x, case), (16,))[16] > 0.2  # exercised
        dense = run_kernel(name, module, x, case)
        skipped = run_kernel(name, module, x, case, skip_zero_tiles=True)
    torch.testing.assert_close(skipped, dense, rtol=0, atol=0)


def test_per_head_beta_and_lambda(device):
    """A ``[head]`` beta / lambda acts on each head as the scalar of that head would."""
    gen = torch.Generator().manual_seed(0)
    q1, k1, q2, k2 = (unit_rows(torch.randn(B, 40, H, 16, generator=gen)).to(device) for _ in range(4))
    v = torch.randn(B, 40, H, 16, generator=gen).to(device)
    beta = torch.tensor([0.5, -1.0], device=device, requires_grad=True)
    lam = torch.tensor([0.2, 0.7], device=device, requires_grad=True)
    z = differential_threshold_attention(q1, k1, q2, k2, v, beta, lam)
    d_beta, d_lam = torch.autograd.grad(z.sum(), (beta, lam))
    for h in range(H):
        one = [t[:, :, h:h + 1] for t in (q1, k1, q2, k2, v)]
        b, lm = beta[h].detach().requires_grad_(), lam[h].detach().requires_grad_()
        z_h = differential_threshold_attention(*one, b, lm)
        torch.testing.assert_close(z[:, :, h:h + 1], z_h)
        grads_h = torch.autograd.grad(z_h.sum(), (b, lm))
        torch.testing.assert_close(torch.stack(grads_h), torch.stack([d_beta[h], d_lam[h]]))


def test_zero_tile_fraction_hand_checked():
    pattern = torch.zeros(1, 1, 64, 64)
    pattern[0, 0, 40, 3] = 0.5  # the only non-zero entry: query tile 2 (of 16) / 1 (of 32), key tile 0
    assert bench.zero_tile_fraction(pattern) == {16: pytest.approx(9 / 10), 32: pytest.approx(2 / 3), 64: 0.0}


def test_kernel_goals():
    def row(kernel, T, peak, vs_sdpa):
        return {"kernel": kernel, "T": T, "impl": "triton", "peak_mib": peak, "fwd_bwd_vs_sdpa": vs_sdpa}

    rows = [row("tra", 512, 10.0, 3.0), row("tra", 4096, 12.0, 1.1), row("tda", 512, 10.0, 2.0),
            row("tda", 8192, 20.0, 1.5), {"kernel": "tra", "T": 512, "impl": "sdpa_flash"}]
    goals = {(g["kernel"], g["goal"].split(",")[0].split(" /")[0]): (g["worst"], g["met"])
             for g in bench.kernel_goals(rows)}
    assert goals == {("tra", "peak memory"): (1.2, True), ("tra", "fwd+bwd"): (1.1, True),
                     ("tda", "peak memory"): (2.0, False), ("tda", "fwd+bwd"): (1.5, False)}
    no_memory = bench.kernel_goals([row("fot", 512, float("nan"), 3.0)])
    assert [g["met"] for g in no_memory] == [None, None], "off CUDA, or below T = 4096, nothing is decided"


def test_bench_kernels_command_resumes(tmp_path, device, capsys):
    """``glitchlens bench kernels`` at a tiny size: the kernel, SDPA and the reference, each timed
    forward, backward and both (peak memory on CUDA only). With ``--out CSV --budget-s S`` it
    runs (kernel, T) pairs until S has passed and appends them; the same command again runs only
    the pairs still missing."""
    import pandas as pd

    from interp.cli import main

    out = tmp_path / "kernels.csv"
    command = ["bench", "kernels", "--seq-lens", "16", "--tokens", "16", "--d-head", "16", "--repeats", "1",
               "--budget-s", "0", "--out", str(out)]
    assert main(command) == 0
    assert "run the same command again" in capsys.readouterr().out
    assert set(pd.read_csv(out).kernel) == {KERNEL_MODELS[0]}, "a budget of 0 s runs one pair"
    assert main(command) == 0
    frame = pd.read_csv(out)
    assert list(dict.fromkeys(frame.kernel)) == KERNEL_MODELS[:2]
    assert list(frame.impl) == ["triton", "sdpa_flash", "reference"] * 2
    assert (frame["T"] == 16).all() and (frame.batch == 1).all()
    assert (frame[list(bench.TIMES)] > 0).all().all()
    assert frame.peak_mib.isna().all() == (device.type != "cuda"), "peak memory is measured on CUDA only"
    assert (frame.fwd_bwd_vs_sdpa[frame.impl == "sdpa_flash"] == 1).all()
    assert (frame.fwd_bwd_vs_reference[frame.impl == "reference"] == 1).all()

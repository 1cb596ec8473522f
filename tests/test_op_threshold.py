"""The threshold ops (``kernels.threshold``): trela's and TDA's implementations as the mechanisms
declare them (``rows``, ``triton``) against ``kernels.threshold.reference``, forward and every
gradient (beta's and lambda's included), on the ``device`` fixture's device: sequence lengths
including T = 1 and non-multiples of the tile, head dims, tile shapes, memory layouts, signs of
beta, powers p, kappa, rows with no surviving key, per-head beta and lambda, half precision."""

import pytest
import torch

from support import (NEAR, B, Case, H, assert_same_model, check, check_future_tiles_never_read,
                     check_threshold_flips, draw_qkv, fast_implementations, half_precision, implementation,
                     length_by_head_dim_sweep, pattern_of, run, unit_rows)

pytestmark = pytest.mark.usefixtures("exact_bf16_dot")

MODELS = ("trela", "tda")


def make_inputs(name: str):
    """The inputs of ``name``'s op: unit q, k (two views for TDA), v, beta and, for TDA, lambda."""
    def inputs(case: Case, gen: torch.Generator, device) -> dict:
        x = draw_qkv(case, gen, device, n_qk=4 if name == "tda" else 2, normalise=unit_rows)
        x["beta"] = torch.tensor(case.beta, device=device, requires_grad=True)
        if name == "tda":
            x["lam"] = torch.tensor(0.5, device=device, requires_grad=True)
        return x

    return inputs


def near_threshold(x: dict, case: Case) -> torch.Tensor:
    """``[batch, head, query_pos, key_pos]`` (on the CPU) True where a visible score of either
    view lies within NEAR of its threshold tau_i."""
    causal = torch.ones(case.T, case.T, dtype=torch.bool).tril()
    qk = [t.detach().double().cpu() for key, t in x.items() if key.startswith("qk")]
    i = torch.arange(case.T, dtype=torch.float64)
    tau = case.beta * torch.sqrt(2 * torch.log((i + 1) / case.kappa).clamp(min=0) / case.D)
    near = torch.zeros(B, H, case.T, case.T, dtype=torch.bool)
    for q, k in zip(qk[::2], qk[1::2]):
        near |= ((torch.einsum("bqhd,bkhd->bhqk", q, k) - tau[:, None]).abs() < NEAR) & causal
    return near


CASES = {
    "trela": [Case(1, 16), Case(17, 32, "transposed", (16, 16), beta=-0.5, p=1.0), Case(64, 64, "strided"),
              Case(65, 16, blocks=(32, 16), beta=2.0, p=1.0), Case(130, 32, "transposed", (16, 32), beta=-1.0),
              Case(65, 32, p=1.5, kappa=2.5), Case(65, 32, beta=3.0, p=1.0, empty=True),
              *half_precision(Case(65, 32, "transposed"))],
    "tda": [Case(1, 16), Case(17, 32, "transposed", (16, 16), beta=-0.5, p=1.0), Case(64, 64, "strided"),
            Case(65, 16, blocks=(32, 16), beta=2.0, p=1.0), Case(130, 32, "transposed", (16, 32), beta=-1.0),
            Case(65, 32, p=1.5, kappa=2.5), *half_precision(Case(65, 32, "transposed"))],
}
SWEEP = length_by_head_dim_sweep(lambda T, D: Case(T, D, "transposed", beta=-1.0 if T % 2 else 1.0,
                                                  p=1.0 if T % 2 else 2.0))
PARAMS = [pytest.param(name, impl, case, id=f"{name}-{impl}-{case}", marks=[pytest.mark.slow] if case in SWEEP else [])
          for name in MODELS for impl in fast_implementations(name) for case in CASES[name] + SWEEP]


@pytest.mark.parametrize("name,impl,case", PARAMS)
def test_matches_reference(name, impl, case, device):
    check(implementation(name, impl, case), implementation(name, "reference"), make_inputs(name), near_threshold,
          case, device, kappa=case.kappa, p=case.p)


def forward_only_inputs(name: str, case: Case, device) -> tuple[dict, dict]:
    """The tensors ``[batch, pos, ...]`` and, apart, the scalars (beta, lambda, kappa, p)."""
    x = {key: t.detach() for key, t in make_inputs(name)(case, torch.Generator().manual_seed(0), device).items()}
    scalars = {key: x.pop(key) for key in ("beta", "lam") if key in x}
    return x, {**scalars, "kappa": case.kappa, "p": case.p}


@pytest.mark.filterwarnings("ignore:All-NaN slice")
@pytest.mark.parametrize("name", MODELS)
def test_future_tiles_never_read(name, device):
    """Whatever the sign of beta: a negative threshold alone would let future keys through."""
    case = Case(64, 32, beta=-1.0)
    x, scalars = forward_only_inputs(name, case, device)
    check_future_tiles_never_read(implementation(name, "triton", case), x, cut=32, **scalars)


def test_threshold_flips(device):
    case = Case(130, 64, beta=0.5, p=1.0)
    x, scalars = forward_only_inputs("trela", case, device)
    check_threshold_flips(implementation("trela", "triton", case), implementation("trela", "reference"), x,
                          near_threshold(x, case), case, **scalars)


@pytest.mark.parametrize("name,case", [("trela", Case(130, 32, blocks=(16, 16), beta=3.0, p=1.0)),
                                       ("tda", Case(130, 32, blocks=(16, 16), beta=3.0)),
                                       # view 1 empty in the middle rows, view 2 not
                                       ("tda", Case(130, 32, blocks=(16, 16), beta=1.0, empty=True))], ids=str)
def test_skipping_zero_tiles_is_exact(name, case, device):
    """A tile where every view and its derivative are zero adds exactly nothing, forward and
    backward, so skipping it, by the norm bound alone (the default's backward), by the bound and
    the scores (the default's forward, and True), changes no bit of the output or of a gradient
    (beta's included). At beta 3 and head dim 32 the bound decides from position 5 on (tau > 1)."""
    from kernels.tooling.bench import zero_tile_fraction

    kernel = implementation(name, "triton", case)
    x, scalars = forward_only_inputs(name, case, device)
    with torch.no_grad():
        assert zero_tile_fraction(pattern_of(implementation(name, "reference"), x, **scalars), (16,))[16] > 0.2
    x = make_inputs(name)(case, torch.Generator().manual_seed(0), device)  # the same values, as leaves
    dz = torch.randn(x["v"].shape, generator=torch.Generator().manual_seed(1)).to(device)
    dense, *skipped = (run(kernel, x, dz, skip_zero_tiles=flag, kappa=case.kappa, p=case.p)
                       for flag in (False, None, True))
    for result in skipped:
        torch.testing.assert_close(result, dense, rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_norm_bound_skips_tiles_without_loading_them(name, device):
    """Past the position where tau exceeds every |q||k| (tau > 1 for unit rows: from position 5 at
    beta 3, head dim 16), the norm bound rules a tile out before loading it, in the backward too,
    which by default does not test the scores: NaN in V there leaves the output there 0 and every
    gradient finite, where skipping off multiplies the NaN by zero weights."""
    case = Case(40, 16, blocks=(16, 16), beta=3.0)
    kernel = implementation(name, "triton", case)
    x = make_inputs(name)(case, torch.Generator().manual_seed(0), device)
    with torch.no_grad():
        x["v"][:, 16:] = float("nan")
    dz = torch.randn(x["v"].shape, generator=torch.Generator().manual_seed(1)).to(device)
    z, grads = run(kernel, x, dz, kappa=case.kappa, p=case.p)   # finite gradients, checked by run
    assert (z[:, 16:] == 0).all()
    with pytest.raises(AssertionError):
        run(kernel, x, dz, skip_zero_tiles=False, kappa=case.kappa, p=case.p)


def test_per_head_beta_and_lambda(device):
    """A ``[head]`` beta / lambda acts on each head as the scalar of that head would."""
    kernel = implementation("tda", "triton")
    gen = torch.Generator().manual_seed(0)
    q1, k1, q2, k2 = (unit_rows(torch.randn(B, 40, H, 16, generator=gen)).to(device) for _ in range(4))
    v = torch.randn(B, 40, H, 16, generator=gen).to(device)
    beta = torch.tensor([0.5, -1.0], device=device, requires_grad=True)
    lam = torch.tensor([0.2, 0.7], device=device, requires_grad=True)
    z = kernel(q1, k1, q2, k2, v, beta, lam)
    d_beta, d_lam = torch.autograd.grad(z.sum(), (beta, lam))
    for h in range(H):
        one = [t[:, :, h:h + 1] for t in (q1, k1, q2, k2, v)]
        b, lm = beta[h].detach().requires_grad_(), lam[h].detach().requires_grad_()
        z_h = kernel(*one, b, lm)
        torch.testing.assert_close(z[:, :, h:h + 1], z_h)
        grads_h = torch.autograd.grad(z_h.sum(), (b, lm))
        torch.testing.assert_close(torch.stack(grads_h), torch.stack([d_beta[h], d_lam[h]]))


def test_tda_with_negative_beta_and_trela_with_power_one(small_blocks, model_pair, tokens):
    reference_model, rows_model = model_pair("tda", "rows")
    with torch.no_grad():
        for model in (reference_model, rows_model):
            model.blocks[0].attn.beta.fill_(-0.5)
    assert_same_model(reference_model, rows_model, tokens(2, 33, seed=4))
    trela_pair = model_pair("trela", "rows", attention_options={"p": 1.0, "beta_init": 0.2})
    assert_same_model(*trela_pair, tokens(2, 33, seed=5))


def test_rows_gradcheck(small_blocks):
    """TDA's rows path with any tau (random per query and head), and through beta (one per head)."""
    from kernels.threshold.rows import rectified_rows

    gen = torch.Generator().manual_seed(0)
    q, k, v, q2, k2 = (torch.randn(1, 7, 2, 4, generator=gen, dtype=torch.float64) for _ in range(5))
    unit = [unit_rows(t) for t in (q, k, q2, k2)]
    tau = torch.rand(1, 2, 7, generator=gen, dtype=torch.float64) * 0.3
    lam = torch.tensor(0.4, dtype=torch.float64)

    def with_tau(tau, v, q, k, q2, k2, lam):
        return rectified_rows(tau, v, q, k, q2, k2, lam=lam, p=2.0)

    assert torch.autograd.gradcheck(with_tau, tuple(t.requires_grad_() for t in (tau, v, *unit, lam)))
    beta = torch.tensor([0.3, 0.2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(implementation("tda", "rows"), (*unit, v, beta, lam))

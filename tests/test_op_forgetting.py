"""FoT's op (``kernels.forgetting``): every implementation the mechanism declares (``rows``,
``triton``) against ``kernels.forgetting.reference``, forward and every gradient, on the
``device`` fixture's device: sequence lengths including T = 1 and non-multiples of the tile,
head dims, tile shapes, memory layouts, gate strengths from none to drowning, half precision."""

import pytest
import torch

from support import (Case, check, check_future_tiles_never_read, draw_gated, fast_implementations, half_precision,
                     implementation, length_by_head_dim_sweep, no_threshold, slow)

pytestmark = pytest.mark.usefixtures("exact_bf16_dot")

IMPLEMENTATIONS = fast_implementations("fot")
reference = implementation("fot", "reference")

CASES = [Case(1, 16), Case(17, 32, "transposed", (16, 16), gate=6.0), Case(64, 64, "strided", gate=-4.0),
         Case(65, 16, blocks=(32, 16), gate=-30.0), Case(130, 32, "transposed", (16, 32), gate=3.0),
         *half_precision(Case(65, 32, "transposed")),
         *slow(length_by_head_dim_sweep(lambda T, D: Case(T, D, "transposed", gate=-4.0 if T % 2 else 4.0)))]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_matches_reference(impl, case, device):
    check(implementation("fot", impl, case), reference, draw_gated, no_threshold, case, device)


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_future_tiles_never_read(device):
    case = Case(64, 32)
    x = {key: t.detach() for key, t in draw_gated(case, torch.Generator().manual_seed(0), device).items()}
    check_future_tiles_never_read(implementation("fot", "triton", case), x, cut=32)


def test_rows_gradcheck(small_blocks):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 7, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    log_f = -torch.rand(1, 2, 7, generator=gen, dtype=torch.float64) - 0.1
    assert torch.autograd.gradcheck(implementation("fot", "rows"), tuple(t.requires_grad_() for t in (q, k, v, log_f)))

"""CoPE's op (``kernels.cope``): every implementation the mechanism declares (``rows``; there is
no Triton kernel) against ``kernels.cope.reference``, forward and every gradient (the position
table's included): T = 1, lengths that cross the row blocks, memory layouts, positions clamped
to a small table, sequences longer than training, half precision."""

import pytest
import torch

from support import (Case, assert_same_model, check, draw_qkv, fast_implementations, half_precision, implementation,
                     no_threshold)

IMPLEMENTATIONS = fast_implementations("cope")
reference = implementation("cope", "reference")


def make_inputs(case: Case, gen: torch.Generator, device) -> dict:
    """q, k, v as a layer's projections give them, and a position table of ``case.p_max`` rows."""
    x = draw_qkv(case, gen, device)
    x["pos_emb"] = torch.randn(case.p_max, case.D, generator=gen).to(device).requires_grad_()
    return x


CASES = [Case(1, 16), Case(17, 32, "transposed"), Case(64, 64, "strided", p_max=65), Case(65, 16, p_max=3),
         Case(130, 32, "transposed", p_max=131), *half_precision(Case(65, 32, "transposed"))]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_matches_reference(impl, case, device):
    check(implementation("cope", impl, case), reference, make_inputs, no_threshold, case, device)


def test_sequences_longer_than_training_and_clamped_cope_positions(small_blocks, model_pair, tokens):
    reference_model, rows_model = model_pair("cope", "rows", n_ctx=8, attention_options={"p_max": 6})
    with torch.no_grad():  # a non-zero position table, so the interpolation matters
        for model in (reference_model, rows_model):
            for block in model.blocks:
                pos_emb = block.attn.pos_emb
                pos_emb.copy_(torch.randn(pos_emb.shape, generator=torch.Generator().manual_seed(3)))
    assert_same_model(reference_model, rows_model, tokens(2, 30, seed=2))


def test_rows_gradcheck(small_blocks):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 7, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    pos_emb = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    inputs = tuple(t.requires_grad_() for t in (q, k, v, pos_emb))
    assert torch.autograd.gradcheck(implementation("cope", "rows"), inputs)

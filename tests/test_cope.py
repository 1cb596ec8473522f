"""CoPE: contextual positions from gates, interpolated position logits (CoPE paper Sec. 4)."""

import math

import pytest
import torch

from kernels.tooling.common import causal_mask
from kernels.cope.reference import interpolate
from models import ModelConfig
from models.backbone import GlitchLensTransformer

N_POS = 7


def cope_model(**options) -> GlitchLensTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(model="cope", n_layers=1, n_heads=2, d_model=16, n_ctx=N_POS, attention_options=options)
    model = GlitchLensTransformer(cfg)
    with torch.no_grad():  # zero-initialised embeddings would make every position logit 0
        model.blocks[0].attn.pos_emb.normal_()
    return model



def test_embeddings_zero_initialised_shared_by_heads_default_p_max():
    cfg = ModelConfig(model="cope", n_layers=1, n_heads=2, d_model=16, n_ctx=N_POS)
    attn = GlitchLensTransformer(cfg).blocks[0].attn
    assert attn.pos_emb.shape == (N_POS + 1, 8)  # one table for both heads, rows 0..T
    assert torch.count_nonzero(attn.pos_emb) == 0


@pytest.mark.parametrize("p_max", [None, 4])
def test_all_ones_gates_give_token_relative_positions(p_max, tokens):
    model = cope_model(p_max=p_max)
    mask = causal_mask(N_POS, N_POS)
    seen = {}
    model.run_with_hooks(tokens(2, N_POS), fwd_hooks=[
        ("blocks.0.attn.hook_gates", lambda g, hook: mask.float().expand_as(g)),
        ("blocks.0.attn.hook_positions", lambda p, hook: seen.setdefault("P", p))])
    i, j = torch.meshgrid(torch.arange(N_POS), torch.arange(N_POS), indexing="ij")
    expected = torch.where(mask, (i - j + 1).float(), 0.0).clamp(max=(p_max or N_POS + 1) - 1)
    torch.testing.assert_close(seen["P"][1, 1], expected)
    assert seen["P"][0, 0, 6, 0] == (7 if p_max is None else 3)


def test_interpolation_by_hand():
    attn = cope_model(p_max=4).blocks[0].attn
    with torch.no_grad():
        attn.pos_emb.zero_()
        attn.pos_emb[:, 0] = torch.tensor([0.5, -1.0, 3.0, 2.0])  # z[p] = q . e[p] for q = unit x
    q = torch.zeros(1, 1, 2, 8)
    q[..., 0] = 1.0
    p = torch.tensor([0.0, 1.0, 3.0, 0.5, 2.25, 2.75]).expand(1, 2, 1, 6)
    # integers read the table; 0.5 -> (0.5 + -1) / 2; 2.25 -> 0.75 * 3 + 0.25 * 2; 2.75 -> 0.25 * 3 + 0.75 * 2
    expected = torch.tensor([0.5, -1.0, 2.0, -0.25, 2.75, 2.25])
    torch.testing.assert_close(interpolate(q, p, attn.pos_emb)[0, 0, 0], expected)
    torch.testing.assert_close(interpolate(q, p, attn.pos_emb)[0, 1, 0], expected)  # both heads share e


@pytest.mark.parametrize("sep_keys", [False, True])
def test_hooks_agree_with_equations(sep_keys, tokens):
    model = cope_model(sep_keys=sep_keys)
    _, cache = model.run_with_cache(tokens(2, N_POS))
    attn, c = model.blocks[0].attn, lambda name: cache[f"blocks.0.attn.{name}"]
    q, k, d = c("hook_q"), c("hook_k_gate") if sep_keys else c("hook_k"), attn.d_head
    mask = causal_mask(N_POS, N_POS)

    S = torch.einsum("bqhd,bkhd->bhqk", q, c("hook_k")) / math.sqrt(d)
    torch.testing.assert_close(c("hook_attn_scores"), S)
    g = torch.sigmoid(torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)) * mask  # eq. 3
    torch.testing.assert_close(c("hook_gates"), g)
    assert (c("hook_gates")[..., ~mask] == 0).all()
    p = torch.zeros_like(g)  # eq. 4 as a plain double loop
    for i in range(N_POS):
        for j in range(i + 1):
            p[..., i, j] = g[..., i, j:i + 1].sum(-1)
    torch.testing.assert_close(c("hook_positions"), p)
    # eq. 5-6 the slow way: interpolate the embedding vectors, then dot with q
    e, lo, hi = attn.pos_emb.detach(), p.floor().long(), p.ceil().long()
    e_p = (p - lo)[..., None] * e[hi] + (1 - p + lo)[..., None] * e[lo]
    z = torch.einsum("bqhd,bhqkd->bhqk", q, e_p)
    torch.testing.assert_close(c("hook_pos_logits")[..., mask], z[..., mask])
    A = torch.softmax((S + z).masked_fill(~mask, float("-inf")), dim=-1)  # eq. 9
    torch.testing.assert_close(c("hook_pattern"), A)


def test_positions_clamped_beyond_p_max_and_training_length(tokens):
    model = cope_model(p_max=3)
    logits, cache = model.run_with_cache(tokens(2, 3 * N_POS))
    P = cache["blocks.0.attn.hook_positions"]
    assert P.max() <= 2 and P.max() > 1.5  # long rows saturate at p_max - 1
    assert torch.isfinite(logits).all()

"""The backbone and the softmax positional variants (NoPE, APE, REL, RoPE, Label, ALiBi)."""


import pytest
import torch

from models import ModelConfig, build_model
from models.attention.rope import apply_rope
from models.attention.softmax import alibi_slopes

SOFTMAX_MODELS = ["nope", "ape", "rel", "rope", "label", "alibi"]


def tiny(name, **kw):
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset(name, "tiny", n_ctx=32, **kw)).eval()


@pytest.mark.parametrize("name", SOFTMAX_MODELS)
def test_fused_path_equals_explicit_path(name):
    """Without hooks the softmax runs through SDPA; with a cache it is explicit. Same numbers."""
    model = tiny(name, n_heads=2)
    tokens = torch.randint(0, 5, (3, 30))
    fused = model(tokens)
    explicit, cache = model.run_with_cache(tokens)
    assert torch.allclose(fused, explicit, atol=1e-5)
    pattern = cache["pattern", 0]
    assert torch.allclose(pattern.sum(-1), torch.ones(3, 2, 30), atol=1e-5)
    assert (pattern.triu(1) == 0).all()


def test_weights_in_transformer_lens_shapes():
    model = tiny("rope", n_heads=2)
    attn = model.blocks[0].attn
    assert attn.W_Q.shape == (2, 64, 32) and attn.W_O.shape == (2, 32, 64)
    assert model.cfg.d_head == 32 and model.cfg.d_mlp == 128


def test_rel_buckets_share_the_last_distance():
    model = tiny("rel")
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.rel_bias.copy_(torch.arange(32.0)[None])
    D = attn.position_bias(1, 40, "cpu")[0]
    assert D[0, 5, 2] == 3 and D[0, 39, 0] == 31 and D[0, 39, 5] == 31 and D[0, 35, 4] == 31


def test_alibi_bias():
    assert torch.allclose(alibi_slopes(4), torch.tensor([0.25, 0.0625, 0.015625, 0.00390625]))
    model = tiny("alibi", n_heads=4)
    D = model.blocks[0].attn.position_bias(1, 6, "cpu")[0]
    assert D[1, 5, 2] == pytest.approx(-3 * 0.0625)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    seq_q = q.expand(1, 20, 1, 16)
    seq_k = k.expand(1, 20, 1, 16)
    rq, rk = apply_rope(seq_q), apply_rope(seq_k)
    s = lambda i, j: (rq[0, i, 0] * rk[0, j, 0]).sum()
    assert torch.allclose(s(7, 3), s(15, 11), atol=1e-5)
    assert torch.allclose(apply_rope(seq_q).norm(dim=-1), seq_q.norm(dim=-1), atol=1e-5)


def test_ape_refuses_inputs_longer_than_its_table():
    model = tiny("ape")
    with pytest.raises(ValueError, match="APE has 32 learned positions"):
        model(torch.zeros(1, 33, dtype=torch.long))


def test_label_positions():
    model = tiny("label")
    model.train()
    a, b = model.positions(16, "cpu"), model.positions(16, "cpu")
    assert (a.diff() > 0).all() and a.max() < model.cfg.label_range and not torch.equal(a, b)
    model.eval()
    assert torch.equal(model.positions(16, "cpu"), model.positions(16, "cpu"))
    assert model(torch.zeros(1, 100, dtype=torch.long)).shape == (1, 100, 5), "extrapolates past n_ctx"


def test_bad_inputs_are_refused():
    model = tiny("nope")
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
        model(torch.tensor([[0, 7]]))
    with pytest.raises(ValueError, match=r"\[batch, pos\]"):
        model(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        ModelConfig(model="gpt")
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.from_preset("rope", "huge")
    with pytest.raises(ValueError, match="accepts"):
        build_model(ModelConfig(model="rope", attention_options={"ropee": True}))
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(model="rope", d_model=10, n_heads=3)


def test_presets():
    mini = ModelConfig.from_preset("tra", "mini")
    assert (mini.n_layers, mini.n_heads, mini.d_model, mini.d_mlp) == (4, 4, 256, 512)
    mech = ModelConfig.from_preset("fot", "mech")
    assert (mech.n_layers, mech.n_heads, mech.d_model) == (2, 1, 128)
    lstm = build_model(ModelConfig.from_preset("lstm", "mini"))
    assert lstm.cfg.d_model == 128 and sum(p.numel() for p in lstm.parameters()) == pytest.approx(133_000, rel=0.02)

"""The backbone and the softmax positional variants (NoPE, APE, REL, RoPE, Label, ALiBi), and the
dropout of the TRA authors' notebook (attention logits, embedding, MLP hidden activation)."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.tooling import native
from models import ModelConfig, build_model
from models.attention.rope import apply_rope, rotated_unit
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


class CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    """How many operations run while it is active."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("norm_placement", ["pre", "stream"])
@pytest.mark.parametrize("grad", [False, True])
def test_forward_runs_as_many_operations_at_any_batch(norm_placement, grad):
    """The hot path has no fixed row chunks: a forward over 40 sequences of 30 tokens (1200
    positions) runs the operations of a forward over one, so that on a loaded machine the
    threads of each operation meet at as few barriers as one sequence needs."""
    model = tiny("rope", norm_placement=norm_placement, linear_bias=True)
    counts = []
    for batch in (1, 40):
        with torch.set_grad_enabled(grad), CountOps() as ops:
            model(torch.randint(0, 5, (batch, 30)))
        counts.append(ops.count)
    assert counts[0] == counts[1], counts


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


def test_rope_is_the_pairwise_rotation_bit_for_bit():
    """The whole-row form of apply_rope gives the floats of the pairwise formula, on a contiguous
    input and on one view of a wider tensor (Diff rotates the halves of its heads), and a hand
    example: at d_head 2, position 1 turns (1, 0) by one radian."""
    wide = torch.randn(2, 37, 3, 32, generator=torch.Generator().manual_seed(4))
    angles = torch.arange(37.0)[:, None] * 10_000.0 ** (-torch.arange(8.0) / 8)
    cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
    for x in (wide[..., :16].contiguous(), wide[..., 16:]):
        x1, x2 = x[..., :8], x[..., 8:]
        assert torch.equal(apply_rope(x), torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1))
    turned = apply_rope(torch.tensor([1.0, 0.0]).expand(1, 2, 1, 2))
    torch.testing.assert_close(turned[0, :, 0], torch.tensor([[1.0, 0.0], [math.cos(1.0), math.sin(1.0)]]))


@pytest.mark.parametrize("rotate", [True, False])
def test_rotated_unit_is_normalize_of_rope_forward_and_backward(rotate):
    """trela's and TDA's q~, k~ with the hand-written backward, on its PyTorch path: the forward
    floats of F.normalize(apply_rope(x)), and in float64 the gradient autograd takes through the two, on an
    awkward shape (odd length, non-contiguous input) with rows of every size: zero, below F.normalize's
    eps, and ordinary."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, 3, 10, generator=gen)
    with native.switched_off():   # float32 on the CPU otherwise runs the C kernel (tests/test_native.py)
        torch.testing.assert_close(rotated_unit(x, rotate), F.normalize(apply_rope(x) if rotate else x, dim=-1),
                                   rtol=0, atol=0)
    wide = torch.randn(2, 13, 3, 20, dtype=torch.float64, generator=gen)
    wide[0, 3] = 0.0
    wide[1, 5] *= 1e-14   # shorter than eps = 1e-12: divided by eps
    x = wide[..., 5:15].requires_grad_()
    d_out = torch.randn(2, 13, 3, 10, dtype=torch.float64, generator=gen)
    grads = {}
    for name, fn in {"rotated_unit": lambda t: rotated_unit(t, rotate),
                     "reference": lambda t: F.normalize(apply_rope(t) if rotate else t, dim=-1)}.items():
        out = fn(x)
        grads[name] = (out, *torch.autograd.grad(out, x, d_out))
    for what, ours, ref in zip(("forward", "dx"), grads["rotated_unit"], grads["reference"]):
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12, msg=lambda m: f"{what}: {m}")


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


# The dropout of the TRA authors' notebook (attention logits, embedding, MLP hidden activation).
# One model per attention mechanism: softmax, TRA, FoT, CoPE, Diff, TDA, trela.
MECHANISM_MODELS = ["nope", "tra", "fot", "cope", "diff", "tda", "trela"]


def dropping(name, impl="auto", **kw):
    """A tiny model with attention dropout 0.3 and its twin without, same weights, in training mode."""
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=32, n_heads=2, attention_dropout=0.3, attention_impl=impl, **kw)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    twin = build_model(ModelConfig.from_dict({**cfg.to_dict(), "attention_dropout": 0.0})).train()
    twin.load_state_dict(model.state_dict())
    return model, twin


def seeded(model, tokens, seed):
    torch.manual_seed(seed)
    return model(tokens)


@pytest.mark.parametrize("name", MECHANISM_MODELS)
def test_attention_dropout_acts_in_training_only_and_follows_the_seed(name):
    model, twin = dropping(name)
    tokens = torch.randint(0, 5, (2, 24), generator=torch.Generator().manual_seed(1))
    dropped = seeded(model, tokens, 5)
    assert torch.equal(dropped, seeded(model, tokens, 5)), "same RNG state, same dropout"
    assert not torch.equal(dropped, seeded(model, tokens, 6))
    assert not torch.allclose(dropped, seeded(twin, tokens, 5), atol=1e-4)
    model.eval(), twin.eval()
    torch.testing.assert_close(model(tokens), twin(tokens))


@pytest.mark.parametrize("name", ["nope", "tra", "fot", "cope", "tda", "trela"])
def test_attention_dropout_runs_the_reference_instead_of_a_fast_path(name):
    """The fast paths (SDPA, kernels.tooling.rows) do not drop logits: while dropout acts, every
    mechanism runs its reference, so the result is the reference's under the same RNG state."""
    model, _ = dropping(name)
    reference, _ = dropping(name, impl="reference")
    tokens = torch.randint(0, 5, (2, 24), generator=torch.Generator().manual_seed(1))
    assert torch.equal(seeded(model, tokens, 3), seeded(reference, tokens, 3))
    attn = model.blocks[0].attn
    if "rows" in attn.IMPLEMENTATIONS:
        assert attn.implementation(torch.device("cpu")) == "reference"
        model.eval()
        assert attn.implementation(torch.device("cpu")) == "rows"
    named, _ = dropping(name, impl="rows")
    if "rows" in named.blocks[0].attn.IMPLEMENTATIONS:
        with pytest.warns(UserWarning, match="attention dropout"):
            named(tokens)


def test_tra_attention_dropout_is_the_notebooks():
    """TRA_FFL's ``A = dropout(S + D); A[mask] = -1e11; softmax; empty rows 0``, written out from
    the notebook's steps: the dropout mask is drawn over the whole [batch, head, q, k] tensor of
    S' + D, so the same RNG state gives the same weights."""
    model, _ = dropping("tra")
    attn = model.blocks[0].attn
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 9, 2, 32) for _ in range(3))
    q, k = F.rms_norm(q, (32,), eps=1e-6), F.rms_norm(k, (32,), eps=1e-6)
    log_delta = F.logsigmoid(torch.randn(2, 2, 9))
    torch.manual_seed(4)
    ours = attn.reference(q, k, v, log_delta)
    S = F.relu((q.transpose(1, 2) @ k.transpose(1, 2).transpose(-2, -1) / 32 ** 0.5)
               .masked_fill(torch.ones(9, 9).triu(1).bool(), -1e11))
    removed = S == 0
    D = ((~removed).float() * log_delta[..., None]).flip(-1).cumsum(-1).flip(-1)
    torch.manual_seed(4)
    A = F.dropout(S + D, 0.3, training=True)
    A[removed] = -1e11
    A = A.softmax(-1).masked_fill(removed.all(-1, keepdim=True), 0)
    torch.testing.assert_close(ours, (A @ v.transpose(1, 2)).transpose(1, 2))


def test_embedding_and_mlp_hidden_dropout_where_the_notebook_puts_them():
    cfg = ModelConfig.from_preset("tra", "tiny", n_ctx=32, embedding_dropout=0.5, mlp_hidden_dropout=0.5)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    tokens = torch.randint(0, 5, (2, 16))
    _, cache = model.run_with_cache(tokens)
    embed, resid = cache["hook_embed"], cache["blocks.0.hook_resid_pre"]
    assert torch.equal(resid[resid != 0], 2 * embed[resid != 0]) and (resid == 0).any()
    # the hidden activation is dropped after hook_post: the output is W_out of the dropped activation
    hidden = cache["blocks.0.mlp.hook_post"]
    out = cache["blocks.0.hook_mlp_out"]
    assert not torch.allclose(out, hidden @ model.blocks[0].mlp.W_out, atol=1e-5)
    # no dropout on the sublayer outputs: the stream is the sum of what the hooks show
    torch.testing.assert_close(cache["blocks.0.hook_resid_mid"], resid + cache["blocks.0.hook_attn_out"])
    # embedding_dropout None keeps `dropout` on the embedding (the behaviour before the option)
    old = build_model(ModelConfig.from_preset("tra", "tiny", n_ctx=32, dropout=0.5)).train()
    _, cache = old.run_with_cache(tokens)
    assert (cache["blocks.0.hook_resid_pre"] == 0).any()
    model.eval()
    _, cache = model.run_with_cache(tokens)
    assert torch.equal(cache["hook_embed"], cache["blocks.0.hook_resid_pre"])



@pytest.mark.parametrize("rows", [5, 64])
def test_training_with_a_bias_runs_the_rows_blocks_as_the_reference_in_float64(rows, monkeypatch):
    """REL's and ALiBi's training path on the CPU (softmax.rows_attention with a bias shared by the
    sequences: kernels.tooling.rows' blocks with softmax.BiasRule) against softmax_reference in
    float64, forward and the gradients of q, k, v and the bias (summed over the sequences), T = 37
    in blocks of 5 rows or one block, three heads; a bias that differs between sequences (a hook's
    edit) goes to SDPA."""
    import kernels.tooling.rows
    from models.attention import softmax

    monkeypatch.setattr(kernels.tooling.rows, "ROWS", rows)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 37, 3, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(3, 37, 37, generator=gen, dtype=torch.float64)
    d_z = torch.randn(2, 37, 3, 16, generator=gen, dtype=torch.float64)
    results = {}
    for name, path in [("rows", softmax.rows_attention), ("reference", softmax.softmax_reference)]:
        leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
        z = path(*leaves[:3], leaves[3].expand(2, -1, -1, -1))
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z))
    for what, ours, reference in zip(("z", "dq", "dk", "dv", "d_bias"), *results.values()):
        torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-12, msg=lambda m: f"{what}: {m}")
    calls = []
    monkeypatch.setattr(softmax, "softmax_rows", lambda *a: calls.append(1))
    softmax.rows_attention(q.requires_grad_(), k, v, bias.expand(2, -1, -1, -1).clone())
    assert not calls, "a bias that may differ between sequences ran the shared-bias blocks"

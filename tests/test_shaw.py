"""Shaw et al.'s relative position representations (``shaw``, the CoPE paper's Relative PE): a
hand-computed example, the fused path against the reference, the hook of the relative logits, the
clipping distance, the checkpoint round trip and training from the command line."""

from __future__ import annotations

import json
import math

import pytest
import torch

from interp.cli import main
from models import ModelConfig
from models.attention.shaw import (ShawAttention, clipped_distance, distance_logits, relative_logits, shaw_reference,
                                   shaw_rows)
from models.checkpoint import build_model, load, save
from support import assert_same_model


def test_a_hand_computed_example():
    """One head, d_head 2, three positions, K = 1: e_ij = q_i (k_j + w[min(i - j, 1)]) / sqrt(2)."""
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[None, :, None]    # [batch, pos, head, d]
    k = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])[None, :, None]
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])[None, :, None]
    w_k = torch.tensor([[0.0, 2.0], [1.0, 0.0]])                             # w[0], w[1]
    w_v = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    assert clipped_distance(3, 1).tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
    # by hand: row 1 (q = (0, 1)): j = 0: (1, 1) + w[1] = (2, 1) -> 1; j = 1: (2, 0) + w[0] = (2, 2) -> 2
    # row 2 (q = (1, 1)): j = 0: (1, 1) + w[1] -> 3; j = 1: (2, 0) + w[1] -> 3; j = 2: (0, 0) + w[0] -> 2
    s = math.sqrt(2)
    e = {1: torch.tensor([1.0, 2.0]) / s, 2: torch.tensor([3.0, 3.0, 2.0]) / s}
    a1, a2 = torch.softmax(e[1], 0), torch.softmax(e[2], 0)
    want = torch.stack([v[0, 0, 0], a1[0] * v[0, 0, 0] + a1[1] * v[0, 1, 0],
                        a2[0] * v[0, 0, 0] + a2[1] * v[0, 1, 0] + a2[2] * v[0, 2, 0]])
    D = relative_logits(q, w_k)
    assert torch.allclose(D[0, 0, 1, :2], torch.tensor([0.0, 2.0]) / s)         # q_1 . w[1], q_1 . w[0]
    z = shaw_reference(q, k, v, D)
    assert torch.allclose(z[0, :, 0], want, atol=1e-6)
    # with a^V: each key's value gains w^V at its clipped distance, weighted by a_ij
    extra = torch.stack([torch.zeros(2), a1[0] * w_v[1], (a2[0] + a2[1]) * w_v[1]])
    assert torch.allclose(shaw_reference(q, k, v, D, w_v=w_v)[0, :, 0], want + extra, atol=1e-5)


def config(**options) -> ModelConfig:
    return ModelConfig(model="shaw", n_layers=1, n_heads=2, d_model=16, n_ctx=12, attention_options=options)


def test_the_fused_path_is_the_reference_and_the_hook_sees_the_relative_logits():
    torch.manual_seed(0)
    model = build_model(config(max_distance=4)).eval()
    layer = model.blocks[0].attn
    assert isinstance(layer, ShawAttention) and layer.w_k.shape == (5, 8)
    with torch.no_grad():
        layer.w_k.normal_()
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 12))
    assert layer.implementation(tokens.device) == "sdpa"
    with torch.no_grad():
        fused = model(tokens)
        logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith(("pos_logits", "hook_q")))
    assert torch.allclose(fused, logits, atol=1e-5)          # the cache's pattern hook makes the reference run
    D = cache["blocks.0.attn.hook_pos_logits"]
    assert D.shape == (2, 2, 12, 12)
    assert torch.allclose(D, relative_logits(cache["blocks.0.attn.hook_q"], layer.w_k))
    # q_i . w[min(i - j, K)]: keys 4 or more before the query all read w[4], whatever they hold
    assert torch.allclose(D[..., 11, :8], D[..., 11, :1].expand(-1, -1, 8))
    assert not torch.allclose(D[..., 11, 7], D[..., 11, 8])


def test_the_checkpoint_round_trip_keeps_the_tables(tmp_path):
    torch.manual_seed(1)
    model = build_model(config(values=True)).eval()
    with torch.no_grad():
        model.blocks[0].attn.w_k.normal_()
        model.blocks[0].attn.w_v.normal_()
    save(tmp_path / "ckpt", model)
    loaded = load(tmp_path / "ckpt").eval()
    assert loaded.cfg.attention_options["values"] is True
    tokens = torch.randint(0, model.cfg.d_vocab, (1, 12))
    with torch.no_grad():
        assert torch.equal(model(tokens), loaded(tokens))


def test_shaw_trains_on_counting_from_the_command_line(tmp_path):
    out = tmp_path / "shaw"
    assert main(["train", "--task", "counting", "--model", "shaw", "--steps", "2", "--batch-size", "2",
                 "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--eval-n", "1", "--out", str(out),
                 "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["model"]["model"] == "shaw"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["pytorch-rule-float64", "native-rule-float32"])
@pytest.mark.parametrize("n_dist", [5, 41], ids=["clipped", "every-distance"])
def test_the_training_rows_path_is_the_reference_forward_and_backward(small_blocks, monkeypatch, dtype, n_dist):
    """Training on the CPU (models.attention.shaw.shaw_rows, blocks of 5 or 16 rows): in float64 the
    PyTorch rule (gather and scatter_add per block), in float32 the C kernel, against the float64
    reference, forward and the gradients of q, k, v and w^K, with the distances clipped (K = 4) or
    all distinct; float32 as close as the float32 reference, up to a factor of 4, plus 1e-6 of the
    tensor's largest entry (each tensor named on failure)."""
    from kernels.tooling import native

    used = []
    monkeypatch.setattr(native, "shaw_logits_", lambda *a, run=native.shaw_logits_: used.append(1) or run(*a))
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 37, 3, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    w_k = torch.randn(n_dist, 8, generator=gen, dtype=torch.float64)
    d_z = torch.randn(2, 37, 3, 8, generator=gen, dtype=torch.float64)
    results = {}
    for name, path, kind in [("rows", lambda *t: shaw_rows(*t[:3], distance_logits(t[0], t[3])), dtype),
                             ("reference", lambda *t: shaw_reference(*t[:3], relative_logits(t[0], t[3])), dtype),
                             ("exact", lambda *t: shaw_reference(*t[:3], relative_logits(t[0], t[3])), torch.float64)]:
        leaves = [t.to(kind).requires_grad_() for t in (q, k, v, w_k)]
        z = path(*leaves)
        results[name] = (z, *torch.autograd.grad(z, leaves, d_z.to(kind)))
    assert bool(used) == (dtype == torch.float32 and native.trainable(q.float()))
    for what, ours, reference, exact in zip(("z", "dq", "dk", "dv", "dw_k"), *results.values()):
        error, reference_error = ((t.double() - exact).abs().max() for t in (ours, reference))
        bound = 1e-12 if dtype == torch.float64 else 4 * reference_error + 1e-6 * exact.abs().max()
        assert error <= bound, f"{what}: {error:.3g} against the reference's {reference_error:.3g}"


def test_training_runs_the_rows_path_unless_the_positional_hook_is_on(monkeypatch):
    """A training step on the CPU goes through shaw_rows, and gives the reference model's logits and
    gradients; with a hook on hook_pos_logits the hook sees the whole map (the fused path)."""
    import models.attention.shaw as shaw

    calls = []
    monkeypatch.setattr(shaw, "shaw_rows", lambda *a, run=shaw.shaw_rows: calls.append(1) or run(*a))
    torch.manual_seed(0)
    model = build_model(config(max_distance=4)).train()
    with torch.no_grad():
        model.blocks[0].attn.w_k.normal_()
    reference = build_model(ModelConfig.from_dict({**model.cfg.to_dict(), "attention_impl": "reference"})).train()
    reference.load_state_dict(model.state_dict())
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 12))
    assert_same_model(reference, model, tokens)
    assert len(calls) == 1   # one layer
    seen = []
    model.blocks[0].attn.hook_pos_logits.add_hook(lambda t, hook: seen.append(t.shape))
    model(tokens).sum().backward()
    assert seen == [(2, 2, 12, 12)] and len(calls) == 1

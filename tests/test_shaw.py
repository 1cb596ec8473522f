"""Shaw et al.'s relative position representations (``shaw``, the CoPE paper's Relative PE): a
hand-computed example, the fused path against the reference, the hook of the relative logits, the
clipping distance, the checkpoint round trip and training from the command line."""

from __future__ import annotations

import json
import math

import torch

from interp.cli import main
from models import ModelConfig
from models.attention.shaw import ShawAttention, clipped_distance, relative_logits, shaw_reference
from models.checkpoint import build_model, load, save


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

"""``interp.metrics.capture``: maps captured from tiny random models, collected or streamed layer
by layer, are those of a plain ``run_with_cache``; a hook never called holds nothing back; a hook
the model lacks is named; the window a heatmap shows."""

import numpy as np
import pytest
import torch

import models
from kernels.tooling import native
from interp.metrics import MissingHookError, cache_maps, capture_maps, heatmap_window
from interp.tasks import load_split

MAPS = {"rope": ["pattern", "attn_scores"], "tda": ["pattern", "view_1", "view_2", "scores_1"]}


def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build_model(models.ModelConfig.from_preset(name, "tiny")).eval()


@pytest.mark.parametrize("name", MAPS)
def test_streamed_and_collected_maps_are_the_cached_ones(name):
    """Bit for bit: with the native kernels off, the capture runs the cache's PyTorch paths (where
    its hooks leave a module unhooked, the kernels would run there, equal up to float rounding:
    tests/test_native.py)."""
    model, names = tiny(name), MAPS[name]
    tokens = load_split("iid", 2, seq_len=32)
    with native.switched_off():
        logits, collected = capture_maps(model, tokens, names)

    streamed, arrived = {n: {} for n in names}, []

    def consume(layer, maps):
        arrived.append((layer, sorted(maps)))
        for n, m in maps.items():
            streamed[n][layer] = m.cpu()

    with native.switched_off():
        streamed_logits, left = capture_maps(model, tokens, names, consume)
    assert arrived == [(layer, sorted(names)) for layer in range(model.cfg.n_layers)], "one call per layer, in order"
    assert left == {n: {} for n in names}, "streamed maps are not kept"

    expected_logits, cache = model.run_with_cache(torch.as_tensor(tokens.astype(np.int64)))
    assert logits.device.type == "cpu" and torch.equal(logits, expected_logits) and torch.equal(streamed_logits, logits)
    for n in names:
        expected = cache_maps(cache, n)
        assert list(collected[n]) == list(streamed[n]) == list(expected)
        for layer, m in expected.items():
            assert m.shape == (2, model.cfg.n_heads, 32, 32)
            assert torch.equal(collected[n][layer], m) and torch.equal(streamed[n][layer], m)



def test_a_hook_that_is_never_called_holds_no_layer_back():
    model, tokens = tiny("rope"), load_split("iid", 1, seq_len=8)       # rope has hook_pos_bias, never called
    _, collected = capture_maps(model, tokens, ["pattern", "pos_bias"])
    assert collected["pos_bias"] == {} and list(collected["pattern"]) == list(range(model.cfg.n_layers))
    arrived = []
    capture_maps(model, tokens, ["pattern", "pos_bias"], lambda layer, maps: arrived.append((layer, list(maps))))
    assert arrived == [(layer, ["pattern"]) for layer in range(model.cfg.n_layers)]

def test_a_missing_hook_is_named_before_the_model_runs():
    calls = []
    with pytest.raises(MissingHookError, match=r"the rope model has no blocks\.\*\.attn\.hook_view_1"):
        capture_maps(tiny("rope"), load_split("iid", 1, seq_len=8), ["pattern", "view_1"],
                     consume=lambda layer, maps: calls.append(layer))
    assert calls == []
    with pytest.raises(MissingHookError, match="the lstm model has no blocks.*hook_pattern"):
        capture_maps(tiny("lstm"), load_split("iid", 1, seq_len=8), ["pattern"])


def test_heatmap_window_ends_just_after_the_first_wrong_read():
    assert heatmap_window(512, [300, 200], 128) == (74, 202)   # the first is the earliest
    assert heatmap_window(512, [40], 128) == (0, 128)          # never before the first token
    assert heatmap_window(512, [], 127) == (386, 512)           # no wrong read: the last tokens, an even count
    assert heatmap_window(64, [10], 128) == (0, 64)             # never longer than the sequence

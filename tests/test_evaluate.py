"""``interp.evaluate.predict_reads`` (length-bucketed, cut after the last read, worker
threads, the rows path) against a straightforward per-sequence loop, and the FLOP count
of ``glitchlens bench eval`` against torch's own count of the reference models' products."""

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import models
from interp.bench import computed_eval_flops, eval_flops, forward_flops
from interp.evaluate import evaluate_tokens, length_batches, predict_reads, scored_lengths
from interp.tasks import IGNORE, READ, load_split, read_mask
from kernels.tooling import native
from models import ModelConfig, build_model
from models.attention.base import reference_attention


def per_sequence_reference(model, tokens):
    """One sequence at a time, at its full length, the model as configured: its prediction
    at every read, in (sequence, position) order."""
    model.eval()
    out = []
    with torch.no_grad():
        for seq in tokens:
            inputs = torch.from_numpy(seq[None, :-1].astype(np.int64))
            reads = torch.from_numpy(read_mask(seq[None, :-1]))
            if reads.any():
                out.append(model.unembed(model(inputs, return_type="normalized")[reads]).argmax(-1).numpy())
    return np.concatenate(out)


def mixed_tokens(n=12, seq_len=64):
    """iid sequences with no read at all (two), and others whose reads stop at different
    positions (the instructions after them turned into ``i``)."""
    tokens = load_split("iid", n, seq_len=seq_len).copy()
    rng = np.random.default_rng(0)
    for s in range(n):
        reads = np.flatnonzero(tokens[s, :-1] == READ)
        reads = reads[reads % 2 == 0]
        if s in (3, 7):
            cut = 0
        else:
            cut = reads[rng.integers(len(reads))] + 1 if len(reads) else 0
        cut += cut % 2  # the next instruction
        tokens[s, cut:-1:2] = np.where(tokens[s, cut:-1:2] == READ, IGNORE, tokens[s, cut:-1:2])
    return tokens


@pytest.mark.parametrize("name", ["tra-mech", "fot-mech"])
def test_predictions_equal_the_per_sequence_loop_on_pretrained(name):
    model = models.load_pretrained(name)  # configured for the reference; predict_reads runs kernels.tooling.rows
    tokens = np.concatenate([mixed_tokens(seq_len=512), load_split("sparse", 6)])
    expected = per_sequence_reference(model, tokens)
    got = predict_reads(model, tokens, batch_size=2, workers=2)
    assert model.cfg.attention_impl == "reference" and not model.training
    np.testing.assert_array_equal(got.predicted, expected)
    mask = read_mask(tokens[:, :-1])
    np.testing.assert_array_equal(got.sequence, np.nonzero(mask)[0])
    np.testing.assert_array_equal(got.position, np.nonzero(mask)[1])


@pytest.mark.parametrize("name", ["tra", "fot", "cope", "tda", "label", "ape", "rope", "lstm"])
@pytest.mark.parametrize("workers", [1, 3])
def test_predictions_equal_the_per_sequence_loop_exactly(name, workers):
    """Untrained models, whose logits may nearly tie, through the same attention
    implementation: batching, cutting and threads must not change a single prediction."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(name, "tiny", n_ctx=64, attention_impl="reference"))
    tokens = mixed_tokens()
    expected = per_sequence_reference(model, tokens)
    got = predict_reads(model, tokens, batch_size=1, attention_impl="reference", workers=workers)
    np.testing.assert_array_equal(got.predicted, expected)


def test_scored_lengths_and_length_batches():
    tokens = mixed_tokens()
    inputs = tokens[:, :-1]
    mask = read_mask(inputs)
    model = build_model(ModelConfig.from_preset("tra", "tiny"))
    lengths = scored_lengths(model, inputs, mask)
    for s in range(len(tokens)):
        reads = np.flatnonzero(mask[s])
        assert lengths[s] == (reads[-1] + 1 if len(reads) else 0)
    assert lengths[3] == lengths[7] == 0 and len(set(lengths)) > 4
    batches = length_batches(lengths, max_tokens=100)
    seen = np.concatenate(batches)
    assert sorted(seen) == sorted(np.flatnonzero(lengths))  # every sequence with a read, once
    assert all(len(b) == 1 or len(b) * lengths[b].max() <= 100 for b in batches)
    assert list(lengths[seen]) == sorted(lengths[seen], reverse=True)
    label = build_model(ModelConfig.from_preset("label", "tiny"))
    assert set(scored_lengths(label, inputs, mask)) == {0, inputs.shape[1]}  # labels depend on the length


@pytest.mark.parametrize("name", ["tra", "fot", "tda", "cope", "rope", "diff", "trela"])
def test_flop_count_equals_torch_count_of_the_dense_reference(name):
    n_pos = 24
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=n_pos - 1, attention_impl="reference")  # CoPE: p_max = n_pos
    model = build_model(cfg).eval()
    if name == "rope":  # FlopCounterMode does not count the CPU's scaled_dot_product_attention
        model.blocks[0].attn.hook_pattern.add_hook(lambda t, hook: t)
        model.blocks[1].attn.hook_pattern.add_hook(lambda t, hook: t)
    with torch.no_grad(), reference_attention(model), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, n_pos, dtype=torch.long), return_type="normalized")
    assert counter.get_total_flops() == forward_flops(cfg, n_pos, causal=False)
    d = cfg.d_model
    assert forward_flops(cfg, n_pos, causal=False) - forward_flops(cfg, n_pos) == \
        cfg.n_layers * (n_pos * (n_pos - 1) // 2) * (2 + (name in ("tda", "cope"))) * 2 * d
    assert eval_flops(cfg, [n_pos, 0, n_pos], n_reads=3) == 2 * forward_flops(cfg, n_pos) + 3 * 2 * d * cfg.d_vocab


@pytest.mark.parametrize("name", ["tra", "fot", "tda", "trela"])
def test_computed_flop_count_equals_torch_count_of_one_read(name):
    """One layer read at one query: the rows path multiplies exactly the pairs it needs, so
    torch's count of ``normalized_at`` is what :func:`computed_eval_flops` says (the PyTorch
    path: torch does not see inside the native kernels, which compute keys in chunks of 16)."""
    n_pos, read = 24, 17
    cfg = ModelConfig.from_preset(name, "tiny", n_ctx=n_pos, n_layers=1, attention_impl="rows")
    model = build_model(cfg).eval()
    mask = np.zeros((1, n_pos), dtype=bool)
    mask[0, read] = True
    with torch.no_grad(), native.switched_off(), FlopCounterMode(display=False) as counter:
        model.normalized_at(torch.zeros(1, n_pos, dtype=torch.long), torch.tensor([[read]]))
    assert counter.get_total_flops() + 2 * cfg.d_model * cfg.d_vocab == computed_eval_flops(cfg, [n_pos], mask)
    everywhere = np.ones((1, n_pos), dtype=bool)
    assert computed_eval_flops(cfg, [n_pos], everywhere) == eval_flops(cfg, [n_pos], n_pos)


def test_progress_counts_every_sequence_once_and_is_off_unless_asked(capsys):
    """The progress callback gets each batch's sequences (those without reads at once, from the
    calling thread); ``evaluate_tokens`` draws a bar on stderr only when asked."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("nope", "tiny", n_ctx=64))
    tokens = mixed_tokens()
    done = []
    predict_reads(model, tokens, batch_size=1, workers=2, on_progress=done.append)
    assert done[0] == 2 and sum(done) == len(tokens)  # sequences 3 and 7 have no read
    tokens = load_split("iid", len(tokens), seq_len=64)   # evaluate_tokens scores flip-flop sequences only
    evaluate_tokens(model, tokens, "mixed", batch_size=1)
    assert capsys.readouterr() == ("", "")
    evaluate_tokens(model, tokens, "mixed", batch_size=1, progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and f"mixed:   0%|          | 0/{len(tokens)}" in captured.err

"""The papers' diagnostics and the light-switch test on a TransformerLens model built here: a small
randomly initialised GPT-2 saved as a Hugging Face model with a word-level tokenizer of the light-switch
sentences, loaded by ``glitchlens diagnose/eval --transformerlens DIR`` through the same
``TransformerBridge.boot_transformers`` that loads ``gpt2`` by name; and the Python API on a bridge
built from a configuration (``TransformerBridge.boot_native``)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from interp.cli import main
from interp.diagnose.transformerlens import FILES, attention_frames, light_switch_accuracy
from interp.tasks.light_switch import SENTENCES, LightSwitchTask

pytestmark = pytest.mark.integration

WORDS = ["<unk>", "<|endoftext|>", "Alice", "Bob", "turns", "the", "light", "on", "off", ".", "eats", "a", "banana",
         "an", "apple", "The", "is", "turned"]


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                       pre_tokenizers.Punctuation()])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A 2-layer, 2-head GPT-2 of 32 dimensions, randomly initialised, saved as Hugging Face saves gpt2."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS), n_positions=512, n_embd=32, n_layer=2, n_head=2,
                               bos_token_id=1, eos_token_id=1)).save_pretrained(directory)
    word_tokenizer().save_pretrained(directory)
    return directory


def light_switch_text(path, sequences=20):
    task = LightSwitchTask()
    path.write_text(" ".join(" ".join(SENTENCES[t] for t in row) for row in task.sample(sequences, 16, 0)))
    return path


def test_diagnose_writes_the_fig_1_panels_the_table_7_tails_and_the_dispersion(gpt2_dir, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    assert main(["diagnose", "--transformerlens", str(gpt2_dir), "--tokens", str(light_switch_text(tmp_path / "t.txt")),
                 "--lengths", "32", "64", "-n", "3", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(FILES) <= {p.name for p in out.iterdir()}
    assert summary["sequences"] == 3 and summary["lengths"] == [32, 64]
    frame = pd.read_csv(out / "metrics.csv")
    assert set(frame.metric) >= {"sparsity", "max_abs_weight", "gsink_ratio", "effective_entropy",
                                 "last_row_dispersion"}
    assert len(frame[(frame.metric == "sparsity")]) == 2 * 2 * 2, "2 lengths x 2 layers x 2 heads"
    softmax = frame[frame.metric == "sparsity"].value
    assert (softmax == 0).all(), "a softmax leaves no weight exactly zero"
    tails = pd.read_csv(out / "tails.csv")
    assert sorted(tails.k.unique()) == [2, 3, 4] and tails.value.between(0, 1).all()
    assert main(["diagnose", "--transformerlens", str(gpt2_dir), "--out", str(out)]) != 0
    assert "--transformerlens: give --tokens FILE" in capsys.readouterr().err


def test_light_switch_runs_end_to_end(gpt2_dir, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["eval", "--transformerlens", str(gpt2_dir), "--task", "light-switch", "--lengths", "16", "32",
                 "-n", "10", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["length"] for row in rows] == [16, 32] and all(row["sequences"] == 10 for row in rows)
    assert all(row["low"] <= row["accuracy"] <= row["high"] for row in rows)
    assert main(["eval", "--transformerlens", str(gpt2_dir), "--task", "flipflop"]) != 0
    assert "--transformerlens is evaluated on --task light-switch" in capsys.readouterr().err


def test_the_light_switch_prompt_is_the_papers():
    task = LightSwitchTask()
    demo, test = task.sample(1, 16, 0)[0], task.sample(1, 4, 1)[0]
    text, bit = task.prompt(demo, test)
    assert text.endswith(" The light is turned") and text.startswith(("Alice turns the light on.",
                                                                       "Alice turns the light off."))
    assert text.count(".") == 16 + 3, "the demonstration's 16 sentences, then all of the sequence's but its read"
    assert bit == task.answer(list(test[:-1])) % 2


def test_the_python_api_on_a_bridge_built_from_a_configuration(monkeypatch):
    """A TransformerBridge.boot_native model, as a user holding a bridge calls the diagnostics: the
    frame agrees with the metric computed on the bridge's own cached pattern, and the light-switch
    test runs on it."""
    import transformer_lens.model_bridge.sources.native  # noqa: F401  (registers boot_native)
    from transformer_lens.model_bridge import TransformerBridge

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from interp.metrics.attention import cache_maps, last_row_dispersion

    model = TransformerBridge.boot_native(dict(n_layers=1, d_model=16, n_heads=2, d_head=8, d_mlp=32,
                                               d_vocab=len(WORDS), n_ctx=64, act_fn="gelu",
                                               normalization_type="LN", seed=0))
    tokens = torch.randint(2, len(WORDS), (2, 24), generator=torch.Generator().manual_seed(0))
    per_head, tails = attention_frames(model, tokens)
    _, cache = model.run_with_cache(tokens)
    expected = last_row_dispersion(cache_maps(cache, "pattern"))
    expected = expected[expected.metric == "last_row_dispersion"]
    measured = per_head[per_head.metric == "last_row_dispersion"].value.to_numpy()
    np.testing.assert_allclose(measured, expected.value.to_numpy(), rtol=1e-6)
    assert set(tails.layer) == {0} and len(tails) == 3
    light = light_switch_accuracy(model_with_tokenizer(), [4], n=4)
    assert light.sequences.tolist() == [4]


def model_with_tokenizer():
    """A native bridge with the word-level tokenizer (saved and read back, as TransformerLens reloads it)."""
    import tempfile

    import transformer_lens.model_bridge.sources.native  # noqa: F401
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as directory:   # the bridge reloads the tokenizer from it
        word_tokenizer().save_pretrained(directory)
        return TransformerBridge.boot_native(dict(n_layers=1, d_model=16, n_heads=2, d_head=8, d_mlp=32,
                                                  d_vocab=len(WORDS), n_ctx=512, act_fn="gelu",
                                                  normalization_type="LN", seed=0),
                                             tokenizer=AutoTokenizer.from_pretrained(directory))


def test_the_how_to_states_the_defaults_the_code_has():
    """The numbers of docs/how-to/diagnose-a-transformerlens-model.md are the code's."""
    from pathlib import Path

    from interp.diagnose.transformerlens import DEFAULT_SEQUENCES
    from interp.tasks.light_switch import DEMONSTRATION_LENGTH, LENGTHS, SEQUENCES_PER_LENGTH

    page = " ".join((Path(__file__).parents[1] / "docs/how-to/diagnose-a-transformerlens-model.md").read_text().split())
    assert f"(default {DEFAULT_SEQUENCES})" in page
    assert f"a length-{DEMONSTRATION_LENGTH} demonstration, {SEQUENCES_PER_LENGTH} sequences per length" in page
    assert f"--task light-switch --lengths {' '.join(map(str, LENGTHS))}" in page

"""``interp.hunt`` and ``glitchlens hunt``: the edits keep sequences valid, the error types, and
hunts on models whose glitches are known (an oracle that errs past a gap, an always-right
oracle, an untrained transformer), each failure re-checked by the ordinary evaluation."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import models
from interp.cli import main
from interp.evaluate import ReadPredictions, evaluate_tokens, predict_reads
from interp.hunt import (
    EDIT_NAMES, LONG_GAP, OVERVIEW_COLUMNS, Edits, classify_errors, hunt, padded, verify, with_reads_recomputed, write_hunt,
)
from interp.tasks import (
    D_VOCAB, ONE, READ, ZERO, check_tokens, last_write_positions, parse_sequence, read_sequences, sample_ffl,
)
from kernels.tooling.rows import at_rows
from models import ModelConfig, build_model


class Oracle(torch.nn.Module):
    """A flip-flop "model" that reads the rules: its margin at a read is
    ``1 - (gap + 1/2) / glitch_gap``, gap being the tokens back to the last write, so
    it answers right below ``glitch_gap`` (always, by default) and gives the other bit from
    there on, and the farther the write, the nearer to a glitch: a slope for the search to
    climb. It reads any length."""

    def __init__(self, glitch_gap: float = float("inf")):
        super().__init__()
        self.glitch_gap = glitch_gap
        self.anchor = torch.nn.Parameter(torch.zeros(()))   # predict_reads reads the device off a parameter
        self.cfg = SimpleNamespace(d_vocab=D_VOCAB, model="oracle", pos_embed="none")

    def forward(self, tokens, return_type="logits"):
        ids = tokens.cpu().numpy()
        write = last_write_positions(ids)
        stored = np.take_along_axis(ids, np.clip(write + 1, 1, ids.shape[1] - 1), axis=1) == ONE
        margin = torch.from_numpy(1 - (np.arange(ids.shape[1]) - write + 0.5) / self.glitch_gap)
        logits = torch.full((*ids.shape, D_VOCAB), -10.0)   # never an instruction
        logits[..., ONE] = torch.where(torch.from_numpy(stored), margin / 2, -margin / 2).float()
        logits[..., ZERO] = -logits[..., ONE]
        return logits + 0 * self.anchor

    def normalized_at(self, tokens, positions):
        return at_rows(self(tokens), positions)

    def unembed(self, normalized):
        return normalized


def untrained(seed=0):
    torch.manual_seed(seed)
    return build_model(ModelConfig.from_preset("rope", "tiny")).eval()


def test_reads_are_recomputed_from_the_last_write():
    pairs = parse_sequence("w1r1i0w0r0r0").reshape(-1, 2).copy()
    pairs[1, 1] = pairs[4, 1] = ZERO   # reads that contradict their writes
    assert "".join("wri01"[t] for t in with_reads_recomputed(pairs)) == "w1r1i0w0r0r0"
    edits = Edits(0.8, step=4, max_pairs=64)
    flipped = edits.flip_write_bit(parse_sequence("w1r1i0i1r1").reshape(-1, 2), np.random.default_rng(0))
    assert "".join("wri01"[t] for t in with_reads_recomputed(flipped)) == "w0r0i0i1r0"


@pytest.mark.parametrize("edit", EDIT_NAMES)
def test_every_edit_keeps_the_sequence_valid(edit):
    """Valid after every edit (first w, last r, every read repeating the last write), and only
    lengthen changes the length, by a step."""
    edits, rng = Edits(0.8, step=4, max_pairs=40), np.random.default_rng(1)
    changed = 0
    for tokens in sample_ffl(60, 64, 0.5, rng):
        result = with_reads_recomputed(getattr(edits, edit)(tokens.reshape(-1, 2), rng))
        check_tokens(result[None])
        assert len(result) == (72 if edit == "lengthen" else 64)
        changed += not np.array_equal(result, tokens)
    assert changed > 30   # moving a write needs room before it
    for tokens in sample_ffl(60, 76, 0.5, rng):
        result = edits.apply(tokens, rng, n_edits=3)
        check_tokens(result[None])
        assert len(result) <= 80


def test_moving_a_write_back_widens_its_gap():
    edits, rng = Edits(0.8, step=4, max_pairs=40), np.random.default_rng(0)
    pairs = parse_sequence("w1i0i1w0i0i0i1r0").reshape(-1, 2)
    moved = with_reads_recomputed(edits.move_write_back(pairs, rng))
    assert "".join("wri01"[t] for t in moved) in ("w1w0i0i1i0i0i1r0", "w1i0w0i1i0i0i1r0")


def test_error_types():
    gap = LONG_GAP + 2
    sequences = [parse_sequence("w0w1" + "i0" * (gap // 2 - 1) + "r1"),   # sparse; a write of 0 before
                 parse_sequence("w1w1r1w0r0w1r1w0r0w1r1w0r0r0w0r0"),       # dense; 1 was stored too
                 parse_sequence("w1i0i1i0i0r1"),                         # plain, and no write stored 0
                 parse_sequence("w1i0r1")]                               # an instruction for an answer
    tokens = padded(sequences)
    seq = np.arange(4)
    position = np.array([len(s) - 2 for s in sequences])
    target = tokens[seq, position + 1].astype(np.int64)
    predicted = np.array([ZERO, ONE, ZERO, READ])
    reads = ReadPredictions(seq, position, target, predicted, np.full(4, -1.0))
    errors = classify_errors(tokens, reads)
    assert errors.type.tolist() == ["sparse/stale", "dense/stale", "plain/unsourced", "plain/not-a-bit"]
    assert classify_errors(tokens, reads, train_len=8).type.tolist() == [
        "sparse/stale/long", "dense/stale/long", "plain/unsourced/long", "plain/not-a-bit"]
    assert errors.gap.tolist() == [gap, 2, 10, 4]
    assert errors.stale_gap.tolist() == [gap + 2, 12, -1, -1]
    assert errors.operations_nearby[1] == 15


def test_guided_search_finds_what_random_sampling_cannot():
    """Past a gap of 40 tokens the oracle errs; sequences of 32 tokens never have one, so only
    the search, which grows them, finds glitches, and the evaluation reproduces each."""
    model = Oracle(glitch_gap=40)
    result = hunt(model, budget=96, seq_len=32, population=16, seed=3)
    guided = result.methods["guided"]
    assert guided.summary["failing_sequences"] > 0 and guided.summary["unconfirmed"] == 0
    assert result.methods["random sparse"].summary["failing_sequences"] == 0
    assert all(m.summary["scored"] <= 96 for m in result.methods.values())
    for sequence in guided.failing:
        check_tokens(sequence[None])
        assert not predict_reads(model, sequence[None]).correct.all()
    for shortest in guided.summary["types"].values():
        assert shortest["gap"] >= 40 and shortest["length"] == shortest["read_position"] + 2
        assert not verify(model, [parse_sequence(shortest["text"])])[1].empty


def test_an_always_right_model_has_nothing_to_report(tmp_path):
    result = hunt(Oracle(), budget=24, seq_len=16, population=8)
    for method in result.methods.values():
        assert method.summary["failing_sequences"] == 0 and method.summary["types"] == {}
        assert method.summary["final"]["read_error_rate"] == 0
    files = write_hunt(result, tmp_path)
    assert list(files) == ["json"] and json.loads(files["json"].read_text())["files"] == {}


def test_failures_of_an_untrained_model_recheck_from_the_files(tmp_path):
    model = untrained()
    result = hunt(model, budget=32, seq_len=24, population=8, seed=1)
    files = write_hunt(result, tmp_path)
    summary = json.loads(files["json"].read_text())
    assert summary["methods"]["guided"]["failing_sequences"] > 0
    for stem, name in summary["files"].items():
        tokens = read_sequences(tmp_path / name)
        check = evaluate_tokens(model, tokens)
        assert check.sequence_accuracy == 0 and check.read_errors > 0, stem
    for name, method in summary["methods"].items():
        proposals = [stem for stem in summary["files"] if stem.startswith(name.replace(" ", "-") + "-T")]
        assert sum(len(read_sequences(tmp_path / summary["files"][stem])) for stem in proposals) == method[
            "failing_sequences"]


def test_margins_agree_with_the_predictions():
    """``predict_reads``'s margin is the right bit's logit minus the other's: negative exactly
    where the argmax is the wrong bit."""
    reads = predict_reads(models.load_pretrained("rope-mech"), sample_ffl(16, 128, 0.1, rng=0))
    answered_a_bit = np.isin(reads.predicted, (ZERO, ONE))
    assert answered_a_bit.any() and not reads.correct.all()
    np.testing.assert_array_equal(reads.margin[answered_a_bit] < 0, ~reads.correct[answered_a_bit])


def test_a_seed_fixes_the_hunt():
    model = untrained()
    first, again, other = (hunt(model, budget=24, seq_len=16, population=8, seed=seed).summary()
                           for seed in (5, 5, 6))
    assert first == again and first != other


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="budget must be a positive integer"):
        hunt(Oracle(), budget=0)
    with pytest.raises(ValueError, match="seq_len must be an even number"):
        hunt(Oracle(), seq_len=15)
    with pytest.raises(ValueError, match=r"p_i must be a finite number in \[0, 1\], got 1.5"):
        hunt(Oracle(), p_i=1.5)
    with pytest.raises(ValueError, match="not the flip-flop language's"):
        hunt(build_model(ModelConfig.from_preset("rope", "tiny", d_vocab=3)))
    ape = build_model(ModelConfig.from_preset("ape", "tiny", n_ctx=64))
    with pytest.raises(ValueError, match="cannot extrapolate"):
        hunt(ape, seq_len=128)


@pytest.mark.integration
def test_cli_hunts_a_pretrained_model_and_eval_rechecks_its_files(tmp_path, capsys):
    out = tmp_path / "hunt"
    args = ["hunt", "rope-mech", "--budget", "16", "--seq-len", "64", "--population", "8", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "glitch hunt" in printed and "shortest failing sequence" in printed
    # each column says whether it counts over the whole hunt or is a rate on the last generation
    assert all(("(total)" in column) != ("rate (last gen.)" in column) for column in OVERVIEW_COLUMNS[2:])
    words = " ".join(printed.split())   # the note under the table, wrapped to the terminal's width
    assert "(total)" in printed and "total: a count over the whole hunt" in words and "last gen.: a rate" in words
    summary = json.loads((out / "hunt.json").read_text())
    assert summary["budget"] == 16 and set(summary["methods"]) == {"guided", "random sparse", "random dense"}
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {k: v for k, v in summary.items() if k != "files"}
    name = summary["files"]["random-dense-T64"]
    assert main(["eval", "rope-mech", "--data", str(out / name), "--json", "--quiet"]) == 0
    rechecked = json.loads(capsys.readouterr().out)[str(out / name)]
    assert rechecked["sequences"] == len(read_sequences(out / name)) and rechecked["sequence_accuracy"] == 0


@pytest.mark.integration
def test_cli_errors(capsys):
    assert main(["hunt", "no-such-model", "--quiet"]) == 2
    assert "no such checkpoint directory, nor a pretrained model" in capsys.readouterr().err
    assert main(["hunt", "automaton-1l", "--task", "flipflop", "--quiet"]) == 2
    assert "trained on the automaton task, not flipflop" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["hunt", "rope-mech", "--budget", "0"])
    assert stop.value.code == 2 and "expected a positive integer, got 0" in capsys.readouterr().err


@pytest.mark.integration
def test_a_task_hunt_is_staged_and_never_replaces_ones_own_files(tmp_path, capsys):
    """``hunt`` of a model of another task (an untrained automaton model): random draws per split,
    written through the staged writer: a sequence file of one's own under a failing-SPLIT name,
    or a link there, is refused with nothing written; a second run replaces its own files."""
    from interp.hunt.task import hunt_task, write_task_hunt
    from interp.outputs import MANIFEST

    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("rope", "tiny", d_vocab=3)).eval()
    result = hunt_task(model, "automaton", budget=8, seed=0)
    assert result["splits"]["fresh"]["failing_sequences"] == 8
    out = tmp_path / "out"
    out.mkdir()
    (out / "failing-fresh.jsonl").write_text("my own sequences\n")
    with pytest.raises(ValueError, match="failing-fresh.jsonl exists and is a file glitchlens did not write"):
        write_task_hunt(result, out)
    assert (out / "failing-fresh.jsonl").read_text() == "my own sequences\n"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".glitchlens-staging")) == [
        "failing-fresh.jsonl"]
    (out / "failing-fresh.jsonl").unlink()
    (out / "failing-fresh.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(ValueError, match="is a symbolic link"):
        write_task_hunt(result, out)
    assert not (tmp_path / "elsewhere.jsonl").exists()
    (out / "failing-fresh.jsonl").unlink()
    files = write_task_hunt(result, out)
    assert write_task_hunt(result, out) == files             # its own files: replaced without --overwrite
    assert set(json.loads((out / MANIFEST).read_text())["files"]) == {"hunt.json", "failing-fresh.jsonl"}
    lines = (out / "failing-fresh.jsonl").read_text().splitlines()
    assert len(lines) == result["splits"]["fresh"]["failing_sequences"]
    assert set(json.loads(lines[0])["text"].split()) <= {"0", "1", "_"}
    assert main(["hunt", "automaton-1l", "--budget", "16", "--out", str(out), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "automaton"

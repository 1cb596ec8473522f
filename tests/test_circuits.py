"""Circuit tools: direct logit attribution adds up, patching everything restores everything and
nothing restores nothing, path patching is what its docstring says, the pairs are the sequences
they claim to be, bad input is refused in words, and ``glitchlens explain`` writes its report."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from plugin_tasks import ParityTask

from interp import circuits, plots
from interp.cli import main
from interp.tasks import ONE, ZERO, get_task, load_split
from models import ModelConfig, build_model, load_pretrained

# Prefixes the model reads, each ending at a read and holding two more reads before it.
TEXTS = ["w1i0r1w0i1r0i1r", "w0r0i1w1r1i0i0r", "w1w0r0r0i1i1w1r"]
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # float32 rounding of the sums that patching and attribution add up


def tiny(name, **overrides):
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset(name, "tiny", **{"n_heads": 2, "n_ctx": 16, **overrides})).eval()


def logit_differences(model, tokens):
    """logit(right bit) - logit(other bit) at every read, straight from the logits: ``{(seq, pos): value}``."""
    logits = model(tokens).detach()
    values = {}
    for seq, text in enumerate(model.to_string(tokens)):
        for pos in range(0, len(text), 2):
            if text[pos] == "r":
                right = ZERO + int(text[text.rfind("w", 0, pos) + 1])
                values[seq, pos] = float(logits[seq, pos, right] - logits[seq, pos, ZERO + ONE - right])
    return values


@pytest.mark.parametrize("name,overrides", [("tra", {}), ("fot", {}), ("ape", {}), ("diff", {}), ("cope", {}),
                                            ("tra", {"init": "torch", "linear_bias": True})],
                         ids=["tra", "fot", "ape", "diff", "cope", "tra-with-biases"])
def test_direct_logit_attribution_adds_up_to_the_logit_difference(name, overrides):
    model = tiny(name, **overrides)
    tokens = model.to_tokens(TEXTS)
    frame = circuits.direct_logit_attribution(model, tokens)
    expected = logit_differences(model, tokens)
    totals = frame.groupby(["seq", "position"]).attribution.sum()
    assert set(totals.index) == set(expected) and len(expected) == 9
    for key, value in expected.items():
        assert totals[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    components = list(dict.fromkeys(frame.component))
    heads = [f"L{layer}H{head}" for layer in range(2) for head in range(2)]
    assert set(heads) <= set(components) and {"embed", "L0 MLP", "L1 MLP"} <= set(components)
    assert ("pos_embed" in components) == (name == "ape")
    assert ("L0 attn bias" in components) == bool(overrides.get("linear_bias"))
    summary = circuits.dla_summary(frame)
    assert list(summary.component) == components, "the model's order"
    assert summary.attribution.sum() == pytest.approx(summary.logit_diff.iloc[0], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("specimen", ["rope-mech", "diff-mech"])
def test_direct_logit_attribution_adds_up_through_the_norms_of_a_specimen(specimen):
    """Both specimens renormalise the stream in every block (norm_placement="stream")."""
    model = load_pretrained(specimen)
    tokens = torch.from_numpy(load_split("dense", 1)[:, :95].astype(np.int64))
    assert model.cfg.norm_placement == "stream"
    for neurons in (False, True):
        frame = circuits.direct_logit_attribution(model, tokens, neurons=neurons)
        expected = logit_differences(model, tokens)
        totals = frame.groupby(["seq", "position"]).attribution.sum()
        assert len(expected) > 10 and set(totals.index) == set(expected)
        for key, value in expected.items():
            assert totals[key] == pytest.approx(value, abs=1e-4), key
        assert circuits.dla_sum_error(frame) < 1e-4
    assert frame.kind.value_counts()["neuron"] == len(expected) * model.cfg.n_layers * model.cfg.d_mlp


def test_direct_logit_attribution_refuses_a_model_without_a_stream():
    model = tiny("lstm")
    with pytest.raises(ValueError, match="no residual stream"):
        circuits.direct_logit_attribution(model, model.to_tokens(TEXTS))


def test_bit_flip_pairs_flip_the_write_and_every_read_of_it():
    model = tiny("tra")
    tokens = model.to_tokens(["w1r1i0r1w0r0r"])
    pairs = circuits.bit_flip_pairs(tokens, pd.DataFrame({"seq": [0, 0], "position": [6, 12]}))
    assert model.to_string(pairs.clean) == ["w1r1i0r1w0r0r"] * 2
    assert model.to_string(pairs.corrupt) == ["w0r0i0r0w0r0r", "w1r1i0r1w1r1r"]
    assert pairs.read.tolist() == [6, 12] and pairs.info.write_pos.tolist() == [0, 8]
    assert pairs.info.answer.tolist() == [1, 0] and pairs.info.edit_pos.tolist() == [1, 9]
    every_read = circuits.bit_flip_pairs(tokens)
    assert every_read.read.tolist() == [2, 6, 10, 12]


def test_patching_everything_restores_all_and_nothing_restores_nothing():
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    everything = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"]
    frame = circuits.activation_patching(model, pairs.clean, pairs.corrupt, everything, reads=pairs.read)
    assert len(frame) == 2 * len(pairs) and frame.position.isna().all() and frame.offset.isna().all()
    np.testing.assert_allclose(frame.restored, 1.0, rtol=1e-5)
    np.testing.assert_allclose(frame.patched, frame.clean, rtol=1e-5, atol=1e-5)
    # the write token itself, and every position before the changed bit, are the same in both runs
    before = circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.0.hook_resid_pre"],
                                          reads=pairs.read, positions=[-1, 0], anchor="write")
    assert set(before.from_write) <= {-1, 0} and len(before) >= len(pairs)
    np.testing.assert_array_equal(before.patched, before.corrupt)
    np.testing.assert_array_equal(before.restored, 0.0)
    # one position at a time: in "w1i0r1w0i1r", read at 10, only the bit of the write at 6 and the read's own
    # bit (11, after the read) differ, so that bit token alone restores everything at the first layer's input
    (pair,) = pairs.info.query("seq == 0 and position == 10").pair
    bit = circuits.activation_patching(model, pairs.clean[pair:pair + 1], pairs.corrupt[pair:pair + 1],
                                       ["blocks.0.hook_resid_pre"], reads=pairs.read[pair:pair + 1], positions=[1],
                                       anchor="write")
    assert (pairs.clean[pair] != pairs.corrupt[pair]).nonzero().flatten().tolist() == [7, 11]
    assert bit.position.tolist() == [7] and bit.from_read.tolist() == [-3]
    assert bit.restored.iloc[0] == pytest.approx(1.0, rel=1e-5)
    summary = circuits.patching_summary(frame)
    assert list(summary.component) == ["L0 resid_pre", "L1 resid_post"] and (summary.pairs == len(pairs)).all()


def test_heads_gates_and_maps_are_patched_one_head_at_a_time():
    model = tiny("fot")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    hooks = circuits.patchable_hooks(model, ("z", "mechanism"))
    assert "blocks.1.attn.hook_forget" in hooks and "blocks.0.attn.hook_decay_bias" in hooks
    frame = circuits.activation_patching(model, pairs.clean, pairs.corrupt, hooks, reads=pairs.read,
                                         positions=[0], anchor="read")
    assert set(frame["head"]) == {0, 1} and (frame.from_read == 0).all()
    assert len(frame) == len(hooks) * 2 * len(pairs) and frame.restored.notna().all()


def test_mechanism_hooks_come_from_the_model():
    """From the hooks a forward pass fires: softmax declares hook_pos_bias, only REL and ALiBi call it."""
    for name in ("rel", "alibi"):
        assert circuits.mechanism_hooks(tiny(name)) == ["blocks.0.attn.hook_pos_bias", "blocks.1.attn.hook_pos_bias"]
        assert circuits.receiver_inputs(tiny(name), 1) == ["q", "k", "v", "pos_bias"]
    for name in ("nope", "ape", "label", "rope"):
        assert circuits.mechanism_hooks(tiny(name)) == [] and circuits.receiver_inputs(tiny(name), 1) == ["q", "k", "v"]
    tra = set(circuits.mechanism_hooks(tiny("tra")))
    assert {f"blocks.1.attn.hook_{h}" for h in ("thresholded", "mask", "dbar", "log_decay", "forget")} == {
        h for h in tra if h.startswith("blocks.1.")}
    assert {"blocks.0.attn.hook_view_1", "blocks.0.attn.hook_lambda"} <= set(circuits.mechanism_hooks(tiny("diff")))
    assert circuits.receiver_inputs(tiny("tra"), 1) == ["q", "k", "v", "forget"]
    assert circuits.receiver_inputs(tiny("tda"), 1) == ["q", "k", "v", "q2", "k2"]


def test_hook_axes_from_shapes():
    assert circuits.hook_axes("pattern", (3, 2, 9, 9), 9, 2) == (1, 2)
    assert circuits.hook_axes("z", (3, 9, 2, 16), 9, 2) == (2, 1)
    assert circuits.hook_axes("forget", (3, 2, 9), 9, 2) == (1, 2)
    assert circuits.hook_axes("resid", (3, 9, 64), 9, 2) == (None, 1)
    assert circuits.hook_axes("lambda", (3, 2), 9, 2) == (1, None)
    with pytest.raises(ValueError, match="cannot tell the head and position axes"):
        circuits.hook_axes("forget", (3, 2, 2), 2, 2)


def test_path_patching_is_what_its_docstring_says():
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    clean, corrupt, reads = pairs.clean, pairs.corrupt, pairs.read
    direct = circuits.path_patching(model, clean, corrupt, [(0, 1)], [(1, 0)], ["v", ("k", "v")],
                                    through_mlps=False, reads=reads)
    assert list(direct.input.unique()) == ["v", "k+v"] and (direct.sender == "L0H1").all()

    # by hand: head 0 of layer 1 reads ln1(resid_pre(corrupt) + the sender's change through W_O)
    _, clean_cache = model.run_with_cache(clean)
    _, corrupt_cache = model.run_with_cache(corrupt)
    change = (clean_cache["z", 0] - corrupt_cache["z", 0])[:, :, 1] @ model.blocks[0].attn.W_O[1]
    received = model.blocks[1].ln1(corrupt_cache["resid_pre", 1] + change)
    v = torch.einsum("bpm,md->bpd", received, model.blocks[1].attn.W_V[0])

    def put_v(act, hook):
        act = act.clone()
        act[:, :, 0] = v
        return act

    logits = model.run_with_hooks(corrupt, fwd_hooks=[("blocks.1.attn.hook_v", put_v)])
    rows = torch.arange(len(reads))
    right = ZERO + torch.tensor(pairs.info.answer.to_numpy())
    expected = logits[rows, reads, right] - logits[rows, reads, ZERO + ONE - right]
    np.testing.assert_allclose(direct[direct.input == "v"].patched, expected.detach().numpy(), **TOLERANCE)

    # with layer 0's MLP writing nothing, the path through the MLPs is the direct path
    with torch.no_grad():
        model.blocks[0].mlp.W_out.zero_()
    through = circuits.path_patching(model, clean, corrupt, [(0, 1)], [(1, 0)], ["v", ("k", "v")], reads=reads)
    direct = circuits.path_patching(model, clean, corrupt, [(0, 1)], [(1, 0)], ["v", ("k", "v")],
                                    through_mlps=False, reads=reads)
    np.testing.assert_allclose(through.patched, direct.patched, **TOLERANCE)
    # a sender whose output is the same in both runs sends nothing
    same = circuits.path_patching(model, clean, clean.clone(), [(0, 0)], [(1, 1)], ["q"], reads=reads)
    np.testing.assert_array_equal(same.patched, same.corrupt)


def test_bad_input_is_refused_in_words():
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    clean, corrupt, reads = pairs.clean, pairs.corrupt, pairs.read
    with pytest.raises(ValueError, match=r"'blocks.1.attn.hook_dbr' is not a hook of this tra model; did you mean "
                                         r"blocks.1.attn.hook_dbar"):
        circuits.activation_patching(model, clean, corrupt, ["blocks.1.attn.hook_dbr"], reads=reads)
    with pytest.raises(ValueError, match="no hooks to patch"):
        circuits.activation_patching(model, clean, corrupt, [], reads=reads)
    with pytest.raises(ValueError, match=r"call set_use_attn_result\(True\)|set_use_attn_result\(True\): call it"):
        circuits.activation_patching(model, clean, corrupt, ["blocks.0.attn.hook_result"], reads=reads)
    rope = tiny("rope")
    with pytest.raises(ValueError, match=r"^blocks.0.attn.hook_pos_bias never fires on this rope model \(softmax "
                                         r"attention, norm_placement='pre'\): nothing to patch"):
        circuits.activation_patching(rope, clean, corrupt, ["blocks.0.attn.hook_pos_bias"], reads=reads)
    _, cache = rope.run_with_cache(clean)
    with pytest.raises(KeyError, match="hook_pos_bias never fires on this rope model"):
        cache["pos_bias", 0]
    with pytest.raises(KeyError, match=r"after model.set_use_attn_result\(True\)"):
        cache["result", 0]
    assert "names_filter" not in rope.run_with_cache(clean)[1].why_missing("blocks.0.attn.hook_result")
    with pytest.raises(ValueError, match=r"clean_tokens \(9, 15\) and corrupt_tokens \(9, 13\) differ in shape"):
        circuits.activation_patching(model, clean, corrupt[:, :13], ["blocks.0.hook_resid_pre"], reads=reads)
    with pytest.raises(ValueError, match="reads: position 3 of the clean run's row 0 is not a position the "
                                         "'flipflop' task scores"):
        circuits.activation_patching(model, clean, corrupt, ["blocks.0.hook_resid_pre"], reads=[3] + [14] * 8)
    with pytest.raises(ValueError, match="one position per pair"):
        circuits.activation_patching(model, clean, corrupt, ["blocks.0.hook_resid_pre"], reads=[14])
    with pytest.raises(ValueError, match="anchor must be 'read' or 'write'"):
        circuits.activation_patching(model, clean, corrupt, ["blocks.0.hook_resid_pre"], reads=reads, anchor="bit")
    with pytest.raises(ValueError, match="receiver input 'x': this tra model's heads read forget, k, q, v"):
        circuits.path_patching(model, clean, corrupt, inputs=["x"], reads=reads)
    with pytest.raises(ValueError, match=r"\(layer 2, head 0\) is not a head of this 2 x 2 model"):
        circuits.path_patching(model, clean, corrupt, senders=[(2, 0)], reads=reads)
    with pytest.raises(ValueError, match="position 2 of the clean run's row 0 is not a position the 'flipflop'"):
        circuits.activation_patching(model, model.to_tokens(["i1r"]), model.to_tokens(["i0r"]),
                                     ["blocks.0.hook_resid_pre"])
    with pytest.raises(ValueError, match="needs the columns seq and position"):
        circuits.bit_flip_pairs(clean, pd.DataFrame({"read": [14]}))


def test_glitch_pairs_find_the_edit_that_tra_mech_reads_right():
    """Sequence 25 of ``dense``: ``w0`` at 18, seven ``r0``, then ``i1`` and a read at 36 that
    ``tra-mech`` answers 1 (docs/results/claims.md "TRA beside FoT": its glitches)."""
    model = load_pretrained("tra-mech")
    tokens = load_split("dense", 26)[:, :-1]
    pairs = circuits.glitch_pairs(model, tokens, pd.DataFrame({"seq": [25], "position": [36]}))
    (info,) = pairs.info.to_dict("records")
    assert (info["write_pos"], info["answer"]) == (18, 0)
    assert info["edit"].endswith(f"at {info['edit_pos']}") and 18 < info["edit_pos"] < 36
    changed = (pairs.clean != pairs.corrupt).nonzero()[:, 1].tolist()
    assert changed and min(changed) == info["edit_pos"] and max(changed) <= info["edit_pos"] + 1
    clean_answer = model(pairs.clean[:, :37])[0, 36].argmax()
    glitch_answer = model(pairs.corrupt[:, :37])[0, 36].argmax()
    assert (int(clean_answer), int(glitch_answer)) == (ZERO, ONE)
    frame = circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.0.attn.hook_z"], reads=pairs.read)
    assert frame.restored.iloc[0] > 0.5, "layer 0's head carries the glitch"


def test_the_plots_draw_both_backends(tmp_path):
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    dla = circuits.dla_summary(circuits.direct_logit_attribution(model, pairs.clean).assign(reads="all"), by=["reads"])
    where = circuits.patching_summary(circuits.activation_patching(
        model, pairs.clean, pairs.corrupt, circuits.patchable_hooks(model, ("resid_pre",)), reads=pairs.read,
        positions=range(0, 4), anchor="write"))
    for backend in ("plotly", "matplotlib"):
        bars = plots.dla_chart(dla, series="reads", backend=backend)
        grid = plots.patching_heatmap(where, backend=backend)
        if backend == "plotly":
            assert list(bars.data[0].x) == list(dla.component), "components in the model's order"
            assert list(grid.data[0].y) == ["L0 resid_pre", "L1 resid_pre", "L1 resid_post"]
            assert list(grid.data[0].x) == ["0", "1", "2", "3"]
        else:
            plots.save(grid, tmp_path / "grid.png")
            assert [t.get_text() for t in bars.axes[0].get_xticklabels()] == list(dla.component)


@pytest.mark.integration
def test_explain_writes_its_report_on_tra_mech(tmp_path, capsys):
    out = tmp_path / "explain"
    assert main(["explain", "tra-mech", "-n", "1", "--pairs", "1", "--out", str(out)]) == 0
    printed, err = capsys.readouterr()
    # progress on stderr over the forward passes, planned once the glitches are known, each stage named
    for text in ("explain:", "evaluating dense", "direct logit attribution", "pairing the glitches",
                 "carry: patching every component", "corrupt: patching the stream by position", "corrupt: path patching"):
        assert text in err, text
    done = re.findall(r"(\d+)/(\d+) \[", err)[-1]
    assert done[0] == done[1], f"the bar ends at {done[0]} of {done[1]} forward passes"
    summary = json.loads((out / "explain.json").read_text())
    assert summary["glitches"] == 1 and summary["corrupt"]["pairs"] == 1 and summary["carry"]["pairs"] == 1
    assert "carry the bit (1 pairs" in printed and "corrupt it (1 pairs" in printed
    for name in ("report.md", "glitches.csv", "dla.csv", "pairs.csv", "patching.csv", "path_patching.csv", "dla.png",
                 "components.png", "where_carry.png", "where_corrupt.png"):
        assert (out / name).stat().st_size > 0, name
    assert "L1H0" in (out / "report.md").read_text()

    assert main(["explain", "tra-mech", "--split", "sparse", "-n", "1", "--pairs", "1", "--out", str(out / "x"),
                 "--quiet"]) == 0
    printed, err = capsys.readouterr()
    assert "no glitches in these sequences" in printed and err == ""
    assert "No glitches" in (out / "x" / "report.md").read_text() and not (out / "x" / "where_corrupt.png").exists()


# --- any task: the scored positions, answers and counterfactuals come from the task --------------

def task_model(task_name: str, name: str = "rope"):
    """A tiny model of ``task_name``'s vocabulary that says it was trained on it."""
    task = get_task(task_name)
    model = tiny(name, d_vocab=task.d_vocab, n_ctx=1024)
    model.trained_task = task.name
    return model


def task_inputs(task_name: str, n: int = 3, length: int = 530):
    task = get_task(task_name)
    return task.model_io(task.load_split(next(iter(task.splits)), n))[0][:, :length]


def margins(model, tokens, task) -> dict:
    """The right answer's logit minus the best other answer's at every scored position, from the logits."""
    logits = model(torch.as_tensor(np.array(tokens)).long()).detach().double()
    scored, targets = task.scored_answers(np.asarray(tokens))
    values = {}
    for seq, pos in zip(*np.nonzero(scored)):
        others = [a for a in task.answers if a != targets[seq, pos]]
        values[seq, pos] = float(logits[seq, pos, targets[seq, pos]] - logits[seq, pos, others].max())
    return values


@pytest.mark.parametrize("task_name", ["automaton", "counting", "selective-copy"])
def test_direct_logit_attribution_adds_up_to_the_margin_of_any_task(task_name):
    model, task = task_model(task_name), get_task(task_name)
    tokens = task_inputs(task_name)
    frame = circuits.direct_logit_attribution(model, tokens, neurons=True)
    expected = margins(model, tokens, task)
    totals = frame.groupby(["seq", "position"]).attribution.sum()
    assert set(totals.index) == set(expected) and len(expected) >= 3
    for key, value in expected.items():
        assert totals[key] == pytest.approx(value, abs=1e-4), key
    assert circuits.dla_sum_error(frame) < 1e-4
    assert set(frame.target) <= set(task.answers) and (frame.answer >= 0).all()
    last = int(frame.position.max())
    assert set(circuits.direct_logit_attribution(model, tokens, position=last).position) == {last}


def test_a_metric_of_ones_own_drives_attribution_and_patching():
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))

    def right_logit(logits, scored):   # linear in the logits: DLA splits it exactly
        return logits[torch.arange(len(scored.position)), scored.position, scored.target]

    frame = circuits.direct_logit_attribution(model, pairs.clean, metric=right_logit)
    logits = model(pairs.clean).detach()
    rows = frame.drop_duplicates(["seq", "position"])
    expected = logits[torch.tensor(rows.seq.tolist()), torch.tensor(rows.position.tolist()),
                      torch.tensor(rows.target.tolist())]
    np.testing.assert_allclose(rows.logit_diff, expected.double(), **TOLERANCE)
    assert circuits.dla_sum_error(frame) < 1e-4
    patched = circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.0.hook_resid_pre"],
                                           reads=pairs.read, metric=right_logit)
    np.testing.assert_allclose(patched.patched, patched.clean, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"metric must give one value per row, a tensor \[9\]"):
        circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.0.hook_resid_pre"],
                                     reads=pairs.read, metric=lambda logits, scored: logits.mean())
    with pytest.raises(TypeError, match="metric must be a callable"):
        circuits.direct_logit_attribution(model, pairs.clean, metric=3)


@pytest.mark.parametrize("task_name", ["flipflop", "automaton", "counting", "selective-copy"])
def test_corrupt_pairs_change_the_answer_and_little_else(task_name):
    task = get_task(task_name)
    tokens = task_inputs(task_name, length=600)
    pairs = circuits.corrupt_pairs(task, tokens)
    assert len(pairs) >= 3 and (pairs.info.answer != pairs.info.corrupt_answer).all()
    for clean, corrupt, read in zip(pairs.clean.numpy(), pairs.corrupt.numpy(), pairs.read.numpy()):
        changed = np.flatnonzero(clean[:read + 1] != corrupt[:read + 1])
        assert 1 <= len(changed) <= (read if task_name == "flipflop" else 1), changed   # flip-flop: its reads too
    model = task_model(task_name)
    frame = circuits.activation_patching(model, pairs.clean[:2], pairs.corrupt[:2], ["blocks.0.hook_resid_pre"],
                                         reads=pairs.read[:2])
    np.testing.assert_allclose(frame.restored, 1.0, rtol=1e-4)


def test_resample_pairs_need_nothing_but_the_contract():
    task = ParityTask()
    tokens = task.model_io(task.load_split("iid", 8))[0]
    with pytest.raises(ValueError, match="the 'parity' task declares no counterfactual.*resample_pairs"):
        circuits.corrupt_pairs(task, tokens)
    pairs = circuits.task_pairs(task, tokens, seed=1)
    assert (pairs.read == 8).all() and (pairs.info.answer != pairs.info.corrupt_answer).all()
    assert (pairs.corrupt.numpy() == tokens[pairs.info.partner]).all()
    assert pairs.info.partner.tolist() == circuits.resample_pairs(task, tokens, seed=1).info.partner.tolist()
    model = tiny("rope", d_vocab=3)
    frame = circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.1.hook_resid_post"],
                                         reads=pairs.read, task=task)
    np.testing.assert_allclose(frame.restored, 1.0, rtol=1e-4)
    with pytest.raises(ValueError, match="anchor='write': the 'parity' task declares no evidence position"):
        circuits.activation_patching(model, pairs.clean, pairs.corrupt, ["blocks.0.hook_resid_pre"],
                                     reads=pairs.read, task=task, positions=[0], anchor="write")


def test_what_a_task_cannot_support_is_refused_naming_why():
    from interp.tasks import Task

    class Echo(Task):
        name, vocab, answers = "echo", ("a", "b"), (1,)

    model = tiny("rope", d_vocab=2)
    with pytest.raises(ValueError, match="the 'echo' task has one answer token, so no margin"):
        circuits.direct_logit_attribution(model, torch.ones(1, 4, dtype=torch.long), task=Echo())
    automaton = task_model("automaton")
    with pytest.raises(ValueError, match="trained on the 'automaton' task, not 'flipflop'"):
        circuits.direct_logit_attribution(automaton, torch.zeros(1, 4, dtype=torch.long), task="flipflop")
    with pytest.raises(ValueError, match="the 'counting' task has 27 tokens but this model reads 5"):
        circuits.direct_logit_attribution(tiny("rope"), torch.zeros(1, 4, dtype=torch.long), task="counting")
    with pytest.raises(ValueError, match="glitch_pairs edits flip-flop instructions; this model is of the "
                                         "'automaton' task"):
        circuits.glitch_pairs(automaton, torch.zeros(1, 4, dtype=torch.long), pd.DataFrame({"seq": [0],
                                                                                            "position": [3]}))
    with pytest.raises(TypeError, match="task must be an interp.tasks.Task or a registered task name"):
        circuits.direct_logit_attribution(tiny("rope"), torch.zeros(1, 4, dtype=torch.long), task=3)
    with pytest.raises(TypeError, match="model must be a GlitchLens model"):
        circuits.direct_logit_attribution("tra-mech", torch.zeros(1, 4, dtype=torch.long))

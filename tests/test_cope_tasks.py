"""CoPE's tasks (Golovneva et al., Sec. 5.2-5.3): selective copy and counting, their vocabularies,
lengths and splits as the paper gives them, hand-checked sequences, the generators against plain
loops, and one of them through train, eval, diagnose and hunt on the command line."""

import json

import numpy as np
import pytest

from interp.cli import main
from interp.tasks import get_task
from interp.tasks.contract import check_task
from interp.tasks.counting import INCR, MAX_VALUE, PASS, PRINT, SET, VALUE, CountingTask
from interp.tasks.selective_copy import BLANK, SEPARATOR, SelectiveCopyTask


def ids(task, text: str) -> np.ndarray:
    """One sequence ``[1, T]`` of the tokens ``text`` names, comma-separated."""
    return np.array([[task.vocab.index(symbol.strip()) for symbol in text.split(",")]], dtype=np.uint8)


def test_counting_by_hand():
    task = get_task("counting-3")
    tokens = ids(task, "a=0, b=0, c=0, a++, pass, b++, a++, b=0, pass, a++, print a, 3")
    inputs, targets, scored = task.model_io(tokens)
    assert np.flatnonzero(scored[0]).tolist() == [10] and task.vocab[targets[0, 10]] == "3"
    assert task.answer(inputs[0].tolist()) == task.vocab.index("3")
    assert task.evidence(tokens)[0, 10] == 0   # a's last set
    assert task.answer(ids(task, "a=0, b=0, c=0, b++, a++, b++, print b")[0].tolist()) == task.vocab.index("2")


def test_counting_generator_agrees_with_a_loop_and_caps_values():
    task = CountingTask(3)
    tokens = task.sample(300, 64, 4, w_pass=2)   # few passes: values often reach the cap
    values = []
    for row in tokens:
        value = {}
        for token in row[:-2]:
            if SET <= token < INCR:
                value[token - SET] = 0
            elif INCR <= token < PRINT:
                value[token - INCR] += 1
                assert value[token - INCR] <= MAX_VALUE
        values.append(value[row[-2] - PRINT])
        assert row[-1] == VALUE + values[-1]
        assert [t - SET for t in row[:3]] == [0, 1, 2]   # every variable is set first
    assert max(values) == MAX_VALUE


def test_counting_follows_the_papers_weights_and_splits():
    task = get_task("counting")
    assert (task.seq_len, task.train_size, len(task.vocab)) == (512, 10_000, 27)
    assert {name: (s.params["w_pass"], s.in_distribution) for name, s in task.splits.items()} == \
        {"iid": (50, True), "long": (100, False), "short": (10, False)}
    ops = task.load_split("iid", 200)[:, 1:-2]
    # increments past the cap become passes: passes are at least their weight's share
    assert (ops == PASS).mean() > 50 / 58 - 0.01 and abs(((ops >= SET) & (ops < INCR)).mean() - 1 / 58) < 0.005
    passes = {name: (task.load_split(name, 50)[:, 1:-2] == PASS).mean() for name in ("short", "iid", "long")}
    assert passes["short"] < passes["iid"] < passes["long"]
    assert {t.name for t in (get_task("counting-3"), get_task("counting-5"))} == {"counting-3", "counting-5"}


def test_selective_copy_by_hand():
    task = SelectiveCopyTask(n_content=3)
    text = "D, _, _, C, F, _, |, D, C, F"
    tokens = ids(task, text)
    inputs, targets, scored = task.model_io(tokens)
    assert np.flatnonzero(scored[0]).tolist() == [6, 7, 8]
    assert [task.vocab[t] for t in targets[0, 6:]] == ["D", "C", "F"]
    assert [task.answer(inputs[0, :p + 1].tolist()) for p in (6, 7, 8)] == targets[0, 6:].tolist()
    assert task.evidence(tokens)[0, 6:9].tolist() == [0, 3, 4]


def test_selective_copy_has_the_papers_sizes():
    task = get_task("selective-copy")
    assert len(task.vocab) == 16 and task.seq_len == 769
    for name, blanks in (("iid", 256), ("dense", 128), ("sparse", 512)):
        tokens = task.load_split(name, 2)
        separator = 256 + blanks
        assert tokens.shape == (2, 2 * 256 + blanks + 1) and (tokens[:, separator] == SEPARATOR).all()
        assert ((tokens[:, :separator] == BLANK).sum(axis=1) == blanks).all()
        for row in tokens:
            assert np.array_equal(row[:separator][row[:separator] != BLANK], row[separator + 1:])
    assert [name for name, s in task.splits.items() if s.in_distribution] == ["iid"]


@pytest.mark.parametrize("name", ["counting", "selective-copy"])
def test_the_tasks_keep_the_contract(name):
    assert [check.line() for check in check_task(get_task(name)) if not check.passed] == []


def test_counting_trains_evaluates_diagnoses_and_hunts_through_the_command_line(tmp_path, capsys):
    ckpt = tmp_path / "counting"
    assert main(["train", "--task", "counting", "--model", "cope", "--steps", "2", "--batch-size", "2",
                 "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--eval-n", "1", "--out", str(ckpt),
                 "--quiet"]) == 0
    assert json.loads((ckpt / "config.json").read_text())["model"]["d_vocab"] == 27
    capsys.readouterr()
    assert main(["eval", str(ckpt), "-n", "3", "--splits", "iid,short", "--json", "--quiet"]) == 0
    assert {name: r["reads"] for name, r in json.loads(capsys.readouterr().out).items()} == {"iid": 3, "short": 3}
    report = tmp_path / "report"
    assert main(["diagnose", str(ckpt), "--out", str(report), "-n", "2", "--cache-sequences", "1", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["task"] == "counting" and set(metrics["evaluation"]) == {"iid", "long", "short"}
    assert "print a" in (report / "report.html").read_text()   # the heatmap's axes name the task's tokens
    assert main(["hunt", str(ckpt), "--budget", "4", "--out", str(tmp_path / "hunt"), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["long"]["scored"] == 4
    data = tmp_path / "short.jsonl"
    assert main(["data", "--task", "counting", "--split", "short", "-n", "2", "--out", str(data)]) == 0
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert np.array_equal([r["tokens"] for r in rows], get_task("counting").load_split("short", 2))


def test_the_cope_tasks_sweep_keeps_its_run_names_and_seeds():
    """CoPE, RoPE, APE and Shaw at seeds 0-4, the T5-style REL at its first 3, under the names the
    committed runs and the runs in training already have."""
    from interp.studies.cope_tasks import TASKS, cope_tasks_runs

    runs = cope_tasks_runs()
    for task in TASKS:
        for model in ("cope", "rope", "ape", "shaw"):
            assert [f"{task}-{model}-seed{seed}" in runs for seed in range(5)] == [True] * 5
        assert [name for name in runs if name.startswith(f"{task}-rel-")] == [f"{task}-rel-seed{s}" for s in range(3)]
    assert "--model shaw" in runs["counting-shaw-seed0"].command()
    assert "--seed 4" in runs["selective-copy-cope-seed4"].command()


def test_a_run_learns_at_a_tenth_of_the_majority_answers_error():
    from interp.studies.cope_tasks import LEARNS, learns, majority_error

    prior = majority_error("counting")
    assert prior == pytest.approx(0.768)    # the canonical iid split: 232 of its 1000 answers are the commonest
    assert learns("counting", LEARNS * prior) and not learns("counting", LEARNS * prior + 1e-3)

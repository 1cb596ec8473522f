"""Hostile input, one test per class (docs/explanation/runs-and-checkpoints.md "What commands write"): every
case ends in a correct result or a one-line error (exit status 2), never a traceback, a hang,
a write outside ``--out``, a write through a symbolic link or a user's file replaced unasked.
``tests/probe_hostile.py`` runs hundreds of such cases as subprocesses; these are the in-process
few that keep each class covered."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from interp.cli import main
from interp.outputs import MANIFEST, staged
from models.pretrained import PRETRAINED_DIR
from support import registries_kept


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, *argv: str, match: str) -> str:
    """Run the command; it must fail with one line on stderr (as a terminal shows it: a progress
    bar's line, redrawn after each carriage return, is gone) that contains ``match``."""
    status, _, err = run(capsys, *argv)
    lines = [line.rsplit("\r", 1)[-1] for line in err.split("\n") if line.rsplit("\r", 1)[-1].strip()]
    assert status == 2 and len(lines) == 1 and match in lines[0], err
    return lines[0]


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """A copy of the shipped tra-mech entry, to damage."""
    return Path(shutil.copytree(PRETRAINED_DIR / "tra-mech", tmp_path / "ck"))


def test_outputs_stay_inside_out_and_never_replace_what_glitchlens_did_not_write(tmp_path, capsys):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir(), outside.mkdir()
    (out / "hunt.json").symlink_to(outside / "stolen.json")
    hunt = ("hunt", "tra-mech", "--budget", "8", "--seq-len", "16", "--population", "4", "--quiet", "--out", out)
    refused(capsys, *hunt, match="symbolic link")
    (out / "hunt.json").unlink()
    (out / "hunt.json").write_text("my data")
    refused(capsys, *hunt, match="--overwrite")
    assert (out / "hunt.json").read_text() == "my data" and not list(outside.iterdir())
    assert run(capsys, *hunt, "--overwrite")[0] == 0
    assert json.loads((out / "hunt.json").read_text())["methods"]
    assert "hunt.json" in json.loads((out / MANIFEST).read_text())["files"]
    # what a command names as its own, and a folder of the stage that is a link, never lead outside
    with pytest.raises(ValueError, match="not a name inside"):
        with staged(out) as stage:
            (stage / "x").write_text("")
            from interp.outputs import inside
            inside(out, "../escape")
    (out / "sub").symlink_to(outside)
    with pytest.raises(ValueError, match="symbolic link or a file"):
        with staged(out) as stage:
            (stage / "sub").mkdir()
            (stage / "sub" / "f.csv").write_text("")
    assert not list(outside.iterdir())


def test_training_keeps_a_users_log_and_logs_every_step(tmp_path, capsys, monkeypatch):
    from interp.training.setup import BatchSource

    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text("user data\n")
    train = ("train", "--model", "nope", "--steps", "3", "--seq-len", "16", "--n-ctx", "512", "--batch-size", "2",
             "--eval-n", "1", "--quiet", "--out", out)
    refused(capsys, *train, match="log.jsonl")
    assert (out / "log.jsonl").read_text() == "user data\n"
    (out / "log.jsonl").unlink()
    lines_seen, fetch = [], BatchSource.__call__

    def watch(self, step):   # what `tail -f log.jsonl` sees as each step starts
        lines_seen.append(len((out / "log.jsonl").read_text().splitlines()))
        return fetch(self, step)

    monkeypatch.setattr(BatchSource, "__call__", watch)
    assert run(capsys, *train)[0] == 0
    assert lines_seen == [0, 1, 2]
    monkeypatch.undo()
    # --resume needs only --out; a flag that differs is named by its field. Long loops show a bar:
    # here the final evaluation's, on stderr
    status, _, err = run(capsys, "train", "--out", out, "--resume")
    assert status == 0 and "iid:" in err and "seq/s" in err
    refused(capsys, "train", "--out", out, "--resume", "--lr", "0.5", match="lr 0.5 (checkpoint: 0.001)")
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    (out / "log.jsonl").unlink()
    (out / "log.jsonl").symlink_to(outside)
    refused(capsys, "train", "--out", out, "--resume", "--quiet", match="symbolic link")
    assert outside.read_text() == ""


def test_building_in_place_refuses_the_shipped_entries(tmp_path):
    from interp.studies import pretrained

    before = sorted((PRETRAINED_DIR / "tra-mech").iterdir())
    with pytest.raises(ValueError, match="shipped in the installed package.*--overwrite"):
        pretrained.build("tra-mech", steps=1)
    assert sorted((PRETRAINED_DIR / "tra-mech").iterdir()) == before


def test_inputs_must_be_regular_files_of_a_sane_size(tmp_path, capsys, checkpoint):
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    refused(capsys, "eval", "tra-mech", "--data", fifo, match="not a regular file")
    sparse = tmp_path / "huge.jsonl"
    with open(sparse, "wb") as f:
        f.truncate(20 << 30)   # 20 GB of nothing, on disk as a few blocks
    refused(capsys, "eval", "tra-mech", "--data", sparse, match="more than the")
    refused(capsys, "train", "--model", "nope", "--data", "/dev/zero", "--out", tmp_path / "r", match="not a regular")
    weights = next(checkpoint.glob("model*.safetensors"))
    weights.unlink()
    os.mkfifo(weights)
    refused(capsys, "eval", checkpoint, "-n", "1", match="not a regular file")
    (checkpoint / "config.json").unlink()
    os.mkfifo(checkpoint / "config.json")
    refused(capsys, "eval", checkpoint, match="not a regular file")


def test_sizes_are_checked_before_anything_is_allocated(tmp_path, capsys):
    refused(capsys, "eval", "automaton-1l", "-n", "100000000", match="(-n)")
    refused(capsys, "train", "--model", "nope", "--eval-n", "100000000", "--out", tmp_path / "r", match="eval_n")
    refused(capsys, "train", "--model", "nope", "--seq-len", "100000", "--out", tmp_path / "r", match="--seq-len")
    refused(capsys, "explain", "tra-mech", "--pairs", "1000000", "--out", tmp_path / "e", match="--pairs")
    refused(capsys, "hunt", "tra-mech", "--seq-len", "100000", match="--seq-len")
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


def test_user_text_is_escaped_in_every_message(tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"text": "w1\x1b]0;pwned\x07\x1b[2J"}) + "\n")
    line = refused(capsys, "eval", "tra-mech", "--data", data, match="invalid flip-flop string")
    assert "\x1b" not in line and "\\x1b" in line
    refused(capsys, "eval", "ck/name[/]", match="no such checkpoint directory")
    markup = tmp_path / "ck[/]x"
    shutil.copytree(PRETRAINED_DIR / "tra-mech", markup)
    status, out, _ = run(capsys, "eval", markup, "-n", "1", "--splits", "iid", "--quiet")
    assert status == 0 and "ck[/]x" in out


def test_damaged_files_give_one_line(tmp_path, capsys, checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "training": ["a list"]}))
    refused(capsys, "eval", checkpoint, match="training")
    result = tmp_path / "sweep" / "runs" / "lstm-seed0" / "result.json"
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps({"model": "lstm", "seed": 0}))
    refused(capsys, "reproduce", "table1", "--models", "lstm", "--seeds", "1", "--report-only", "--out",
            tmp_path / "sweep", match="result.json")
    refused(capsys, "reproduce", "recipes", "--report-only", "--out", tmp_path / "empty", match="no finished run")
    root = tmp_path / "root"
    shutil.copytree(PRETRAINED_DIR / "tda-mech", root / "tda-mech")
    next((root / "tda-mech").glob("model*.safetensors")).write_bytes(b"not tensors")
    refused(capsys, "pretrained", "list", "--root", root, match="tda-mech")
    config = json.loads((root / "tda-mech" / "config.json").read_text())
    config["metadata"]["accuracy"]["iid"]["sequence_accuracy"] = float("nan")
    (root / "tda-mech" / "config.json").write_text(json.dumps(config))
    status, out, err = run(capsys, "pretrained", "list", "--root", root, "--json")
    assert status == 2 or json.loads(out) is not None, err
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a CSV\n")
    refused(capsys, "bench", "kernels", "--out", notes, "--seq-lens", "16", match="not a CSV")
    assert notes.read_text() == "my notes, not a CSV\n"


def test_a_diverged_checkpoint_and_a_broken_mechanism_give_one_line(tmp_path, capsys, monkeypatch):
    import torch

    import models
    from interp import conformance

    model = models.load(PRETRAINED_DIR / "tra-mech")
    with torch.no_grad():
        model.W_E.fill_(float("nan"))
    models.save(tmp_path / "nan", model)
    with pytest.warns(RuntimeWarning):
        refused(capsys, "diagnose", tmp_path / "nan", "--out", tmp_path / "d", match="NaN")
    (tmp_path / "broken_mech.py").write_text("class Broken(:\n")
    (tmp_path / "stuck_mech.py").write_text(
        "from plugin_mechanisms import SigmoidAttention\n"
        "class Stuck(SigmoidAttention):\n"
        "    def forward(self, *args, **kwargs):\n"
        "        while True:\n"
        "            pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    refused(capsys, "check-mechanism", "broken_mech:Broken", match="SyntaxError")
    monkeypatch.setattr(conformance, "CHECK_SECONDS", 0.5)
    with registries_kept():
        status, out, _ = run(capsys, "check-mechanism", "stuck_mech:Stuck", "--json")
    assert status == 1 and "did not return within" in out


@pytest.mark.parametrize("kind, source, match", [
    ("exit", "import os\nos._exit(0)\n", "ended (exit status 0) without a result"),
    ("loop", "while True:\n    pass\n", "did not finish within"),
    ("sleep", "import time\nfrom plugin_tasks import ParityTask\nclass Thing(ParityTask):\n    name = 'thing'\n"
              "    def sample(self, *a, **k):\n        time.sleep(3600)\n", "did not finish within")])
def test_check_task_runs_the_task_apart_with_a_time_limit(kind, source, match, tmp_path, capsys, monkeypatch):
    from interp import conformance

    (tmp_path / f"probe_{kind}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(conformance, "TASK_CHECK_SECONDS", 5.0)
    with registries_kept():
        refused(capsys, "check-task", f"probe_{kind}:Thing", match=match)

"""The command line as a user runs it."""

import argparse
import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import models
from interp.cli import build_parser, main, train_configs
from interp.tasks import load_split, read_sequences
from support import glitchlens_as_from_a_terminal, screen


def glitchlens(*args):
    return subprocess.run([sys.executable, "-m", "interp.cli", *args], capture_output=True, text=True)


@pytest.mark.integration
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_data_writes_the_canonical_prefix(tmp_path, suffix):
    out = tmp_path / f"dense{suffix}"
    assert main(["data", "--split", "dense", "-n", "5", "--out", str(out)]) == 0
    assert np.array_equal(read_sequences(out), load_split("dense", 5))
    assert main(["data", "--split", "train", "-n", "3", "--seed", "4", "--seq-len", "16", "--out", str(out),
                 "--overwrite"]) == 0
    assert read_sequences(out).shape == (3, 16)


@pytest.mark.integration
def test_train_eval_and_bench_tiles(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    data = tmp_path / "train.jsonl"
    main(["data", "--split", "train", "-n", "40", "--seq-len", "64", "--out", str(data)])
    assert main(["train", "--model", "fot", "--preset", "tiny", "--steps", "3", "--seq-len", "64",
                 "--batch-size", "4", "--eval-n", "4", "--data", str(data), "--quiet", "--out", str(ckpt)]) == 0
    config = json.loads((ckpt / "config.json").read_text())
    assert config["metadata"]["command"].startswith("glitchlens train --model fot")
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--splits", "iid,dense", "-n", "6", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert set(results) == {"iid", "dense"}
    assert set(results["iid"]) == {"split", "sequences", "reads", "read_errors", "error_rate", "error_rate_upper95",
                                   "sequence_accuracy"}
    assert results["iid"]["sequences"] == 6
    assert main(["eval", str(ckpt), "-n", "2"]) == 0
    table = capsys.readouterr().out
    assert "iid" in table and "sparse" in table and "%" in table
    assert main(["bench", "tiles", str(ckpt)]) == 0
    assert "zero_tiles_16" in capsys.readouterr().out


@pytest.mark.integration
def test_clear_errors(tmp_path, capsys):
    """The installed command exits 2 with the message (one process); the rest in this process."""
    result = glitchlens("train", "--model", "gpt5", "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "unknown model 'gpt5'" in result.stderr
    fails(capsys, "eval", tmp_path, match="no config.json")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1i0r0"}\n')
    fails(capsys, "train", "--model", "nope", "--data", bad, "--steps", "1", "--out", tmp_path / "y",
          match="position 5.*read returns '0'")
    fails(capsys, "train", "--model", "tra", "--attn-opt", "qknorm=false", "--steps", "1", "--out", tmp_path / "z",
          match="accepts")


@pytest.mark.integration
def test_bench_data_prints_ratios(capsys):
    assert main(["bench", "data", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "sparse" in out


# --- Every CLI error is one line naming the problem; nonsense is refused before any work.

def fails(capsys, *args, match):
    """``glitchlens ARGS`` exits 2 with one line on stderr matching ``match``."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse's own errors (bad choices, bad types)
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("glitchlens") and ": error: " in last and "Traceback" not in err, err
    assert re.search(match, last), last
    return last


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    data = root / "seq16.jsonl"
    main(["data", "--split", "train", "-n", "8", "--seq-len", "16", "--out", str(data)])
    (root / "five.jsonl").write_text('{"text": 5}\n')
    (root / "a_file").write_text("x")
    (root / "a_dir").mkdir()
    (root / "dangling").symlink_to(root / "nowhere")
    ckpt = root / "ckpt"
    assert main(["train", "--model", "nope", "--steps", "2", "--seq-len", "16", "--batch-size", "2",
                 "--eval-n", "1", "--quiet", "--out", str(ckpt)]) == 0
    return root


TRAIN = ["train", "--model", "nope", "--steps", "1", "--seq-len", "16", "--batch-size", "2", "--eval-n", "1",
         "--quiet"]


@pytest.mark.integration
@pytest.mark.parametrize("args, match", [
    (["--grad-clip", "0"], "grad_clip must be a positive number"),
    (["--grad-clip", "-1"], "grad_clip must be a positive number"),
    (["--n-layers", "0"], "n_layers must be a positive integer"),
    (["--n-layers", "-2"], "n_layers must be a positive integer"),
    (["--n-heads", "0"], "n_heads must be a positive integer"),
    (["--d-model", "0"], "d_model must be a positive integer"),
    (["--attn-opt", "qk_norm=banana", "--model", "tra"], "qk_norm='banana' of 'tra' must be bool"),
    (["--attn-opt", "qk_norm"], "--attn-opt expects key=value"),
    (["--eval-n", "0"], "eval_n must be a positive integer"),
    (["--task", "automaton", "--data", "{root}/seq16.jsonl"], "automaton task"),
    (["--mixture", "--data", "{root}/seq16.jsonl"], "choose one"),
    (["--data", "{root}/seq16.jsonl", "--seq-len", "32"], "16 tokens, but seq_len is 32"),
    (["--data", "{root}/five.jsonl"], r"five.jsonl:1: .*expected a string, found int"),
    (["--data", "{root}/a_dir"], "is a directory"),
    (["--data", "{root}/missing.jsonl"], "no such file"),
    (["--out", "{root}/a_file"], "is a file"),
    (["--out", "{root}/a_file/sub"], "not writable"),
    (["--out", "{root}/dangling"], "symbolic link to nothing"),
    (["--out", "{root}/ckpt"], r"already holds a checkpoint \(nope, step 2\).*--overwrite"),
    (["--lr", "1e6", "--steps", "30"], r"diverged at step \d+: the loss is NaN or infinite; no checkpoint"),
    (["--model", "gpt5"], "unknown model 'gpt5'"),
    (["--lr", "banana"], "invalid float value"),
    (["--device", "gpu"], "device 'gpu' is not usable here.*--device cpu"),
])
def test_train_errors(capsys, files, args, match):
    args = [a.format(root=files) for a in args]
    out = [] if "--out" in args else ["--out", str(files / "unused")]
    fails(capsys, *TRAIN, *args, *out, match=match)
    assert not (files / "unused" / "config.json").exists()


@pytest.mark.integration
@pytest.mark.parametrize("args, match", [
    (["eval", "{root}/ckpt", "--batch-size", "0"], "--batch-size: expected a positive integer, got 0"),
    (["eval", "{root}/ckpt", "--batch-size", "-3"], "--batch-size: expected a positive integer"),
    (["eval", "{root}/ckpt", "-n", "0"], "-n: expected a positive integer"),
    (["eval", "{root}/ckpt", "--splits", "bogus"], r"unknown splits \['bogus'\]; choose from iid"),
    (["eval", "{root}/ckpt", "--splits", ","], "unknown splits"),
    (["eval", "{root}/ckpt", "--data", "{root}/seq16.jsonl", "--splits", "iid"], "give one of them"),
    (["eval", "{root}/ckpt", "--device", "bogus"], "device 'bogus' is not a device name"),
    (["eval", "{root}/a_dir"], "no config.json"),
    (["eval", "{root}/a_file"], "is a file, not a GlitchLens checkpoint"),
    (["eval", "{root}/missing"], "no such checkpoint directory"),
    (["eval", "models/pretrained/automaton-1l", "--splits", "iid"], "trained on the automaton task"),
    (["diagnose", "models/pretrained/automaton-1l", "--task", "flipflop", "--out", "{root}/report"],
     "trained on the automaton task, not flipflop"),
    (["diagnose", "{root}/ckpt", "--out", "{root}/report", "-n", "0"], "-n/--n: expected a positive integer"),
    (["data", "--split", "iid", "-n", "2", "--out", "{root}/x.txt"], "unsupported file type '.txt'"),
    (["data", "--split", "iid", "-n", "-1", "--out", "{root}/x.jsonl"], "expected a positive integer"),
    (["data", "--split", "train", "--seq-len", "7", "--out", "{root}/x.jsonl"], "seq_len must be an even number"),
    (["pretrained", "build", "tra-huge"], "unknown pretrained model 'tra-huge'"),
    (["eval", "{root}/ckpt", "--data", "{root}/a_dir"], "is a directory"),
])
def test_other_errors(capsys, files, args, match):
    fails(capsys, *[a.format(root=files) for a in args], match=match)


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_one_line(capsys, files):
    fails(capsys, "eval", files / "ckpt", "--device", "cuda", match="device 'cuda' is not usable here")


@pytest.mark.integration
def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("glitchlens ")


@pytest.mark.integration
def test_n_ctx_overwrite_and_eval_data(tmp_path, files, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--model", "ape", "--n-ctx", "600", "--out", str(run)]) == 0
    assert models.read_config(run)["model"]["n_ctx"] == 600
    assert main([*TRAIN, "--model", "lstm", "--overwrite", "--out", str(run)]) == 0
    assert models.read_config(run)["model"]["model"] == "lstm"
    capsys.readouterr()
    data = str(files / "seq16.jsonl")
    assert main(["eval", str(run), "--data", data, "-n", "5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result[data]["sequences"] == 5 and result[data]["split"] == data
    assert main(["eval", "models/pretrained/automaton-1l", "-n", "4", "--json"]) == 0
    automaton = json.loads(capsys.readouterr().out)["automaton"]
    assert automaton["sequences"] == 4 and automaton["position_accuracy"] > 0.9


@pytest.mark.integration
def test_a_closed_pipe_is_not_a_traceback():
    """`glitchlens pretrained --json | head -0`: the reader is gone before the first write."""
    proc = subprocess.Popen([sys.executable, "-m", "interp.cli", "pretrained", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and err == b"", err.decode()


NUMBERS = st.one_of(st.integers(-3, 300), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.text(alphabet="0123456789.-eabn", max_size=5))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["--n-layers", "--n-heads", "--d-model", "--d-mlp", "--n-ctx", "--dropout", "--steps",
                        "--batch-size", "--lr", "--weight-decay", "--warmup", "--grad-clip", "--seq-len",
                        "--eval-every", "--eval-n", "--checkpoint-every", "--p-bottom", "--reg-coef"]), NUMBERS)
def test_fuzz_train_options_build_or_fail_in_one_line(flag, value):
    """A random value of any numeric option gives configs or a ValueError naming the option,
    and argparse refuses what is not a number: no other exception."""
    try:
        args = build_parser().parse_args(["train", "--model", "tra", "--out", "x", flag, str(value)])
    except SystemExit as exit_:
        assert exit_.code == 2
        return
    try:
        train_configs(args)
    except ValueError as err:
        assert flag.strip("-").replace("-", "_") in str(err) or "divisible" in str(err)


@pytest.mark.integration
def test_resume_without_a_checkpoint_says_so(tmp_path, capsys):
    assert main([*TRAIN, "--resume", "--out", str(tmp_path / "new")]) == 0
    assert "no checkpoint in" in capsys.readouterr().err
    assert models.read_config(tmp_path / "new")["training"]["step"] == 1


@pytest.mark.integration
def test_bench_eval_prints_rates_against_a_same_run_matmul(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")   # every column's name whole, however narrow the terminal running the tests
    assert main(["bench", "eval", "--models", "tra-mech", "-n", "4", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "square_GFLOP/s" in out and "of_roofline" in out and "tra-mech" in out and "passes_gain" in out
    assert "causal SDPA [8,1,511,64]" in out  # PyTorch's fused attention at tra-mech's head shape
    assert "yes" in out and "NO" not in out  # the same predictions as the previous loop


# --- A CLI that helps: pretrained names wherever a checkpoint goes, progress, help, a fast --help.

@pytest.mark.integration
def test_eval_takes_a_pretrained_name_with_a_progress_bar_on_stderr(capsys):
    assert main(["eval", "tra-mech", "--splits", "sparse", "-n", "2", "--batch-size", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["sparse"]["sequences"] == 2  # the bar leaves stdout JSON
    assert "sparse:   0%" in err and "seq" in err
    assert main(["eval", "tra-mech", "--splits", "sparse", "-n", "2", "--batch-size", "1", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "tra-mech (tra)" in out and err == ""
    rows = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    assert "95% upper ┃ seq accuracy ┃" in rows[0] and len(rows) == 2, "not a terminal: the table keeps its width"


@pytest.mark.integration
def test_names_resolve_for_diagnose_and_say_what_is_missing(capsys, tmp_path, monkeypatch):
    report = tmp_path / "report"
    fails(capsys, "diagnose", "automaton-1l", "--task", "flipflop", "--out", report,
          match="trained on the automaton task, not flipflop")
    line = fails(capsys, "eval", "tra-mehc", match="tra-mehc: no such checkpoint directory, nor a pretrained model")
    assert "tra-mech, fot-mech" in line
    fails(capsys, "diagnose", "tra-mehc", "--out", report, match="nor a pretrained model of that name")
    monkeypatch.setattr(models.pretrained, "PRETRAINED_DIR", tmp_path)  # nothing built here
    fails(capsys, "eval", "rope-mech", match="not built .*`glitchlens pretrained build rope-mech`")
    fails(capsys, "eval", "tra-mini", match="not built .*`make gpu-specimen NAME=tra-mini`")
    assert not report.exists()


@pytest.mark.integration
def test_a_directory_named_like_a_pretrained_model_wins(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tra-mech").mkdir()
    fails(capsys, "eval", "tra-mech", match="tra-mech: no config.json")


@pytest.mark.integration
def test_pretrained_list_shows_the_named_entries(capsys):
    assert main(["pretrained", "list", "tra-mech", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "tra-mech" and row["built"] and row["command"].startswith("glitchlens train")
    assert main(["pretrained", "list", "fot-mech", "tra-mini"]) == 0
    out = capsys.readouterr().out
    assert "FoT, 2 layers" in out and "--model fot" in out and "make gpu-specimen NAME=tra-mini" in out
    assert "tra-mech" not in out
    fails(capsys, "pretrained", "list", "tra-mech", "bogus", match="unknown pretrained model 'bogus'; available: tra")
    fails(capsys, "pretrained", "list", "tra-mini", "--table1", match="give no names")


def subparsers(parser):
    """The parser of every ``glitchlens COMMAND``."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices


def test_every_option_says_what_it_does_and_its_default():
    parser = build_parser()
    for name, command in {"glitchlens": parser, **subparsers(parser)}.items():
        assert command.description, name
        for action in command._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.option_strings or action.dest)
        command.format_help()  # a stray % in a help text fails here
    assert "(default: 1000)" in subparsers(parser)["train"].format_help()


@pytest.mark.integration
def test_help_imports_no_torch():
    """``glitchlens --help`` and every ``glitchlens COMMAND --help`` answer without importing torch
    (which alone takes seconds)."""
    script = ("import sys\nfrom interp.cli import build_parser, main\n"
              "for argv in [['--help'], *([name, '--help'] for name in ('data', 'train', 'eval', 'diagnose', "
              "'explain', 'hunt', 'reproduce', 'pretrained', 'figures', 'bench'))]:\n"
              "    try:\n        main(argv)\n    except SystemExit as exit_:\n        assert exit_.code == 0\n"
              "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and "usage: glitchlens bench" in result.stdout, result.stderr


# --- Nothing silent, nothing lost: outputs and names are checked before any work, Ctrl-C is one line.

@pytest.mark.integration
def test_data_refuses_to_replace_a_file_without_overwrite(tmp_path, capsys):
    out = tmp_path / "mine.jsonl"
    out.write_text("my notes\n")
    fails(capsys, "data", "--split", "iid", "-n", "2", "--out", out, match="mine.jsonl exists; pass --overwrite")
    assert out.read_text() == "my notes\n"
    assert main(["data", "--split", "iid", "-n", "2", "--out", str(out), "--overwrite"]) == 0
    assert np.array_equal(read_sequences(out), load_split("iid", 2))


@pytest.mark.integration
@pytest.mark.parametrize("args, match", [
    (["train", "--model", "nope", "--out", ""], "--out: an empty path"),
    (["diagnose", "tra-mech", "--out", " "], "--out: an empty path"),
    (["data", "--split", "iid", "--out", ""], "--out: an empty path"),
    (["hunt", "tra-mech", "--out", ""], "--out: an empty path"),
    (["pretrained", "list", "--root", "/nonexistent"], "--root /nonexistent: no such directory"),
    (["figures", "--out", "{root}/figs", "--only", "tra_vs_fot", "--table1", "{root}/missing.csv"],
     "--table1 .*missing.csv: no such file"),
    (["reproduce", "recipes", "--recipes", "llama,nosuch", "--out", "{root}/sweep"],
     "unknown recipe 'nosuch'; choose one of"),
    (["reproduce", "table1", "--models", "tra,gpt5", "--out", "{root}/sweep"], "unknown model 'gpt5'"),
    (["bench", "kernels", "--seq-lens", "0"], "--seq-lens: expected a positive integer, got 0"),
    (["diagnose", "{root}/ckpt", "--out", "{root}/a_file"], "--out .*a_file is a file"),
    (["hunt", "{root}/ckpt", "--out", "{root}/a_file"], "--out .*a_file is a file"),
    (["explain", "{root}/ckpt", "--out", "{root}/a_file"], "--out .*a_file is a file"),
    (["explain", "tra-mech", "-n", "100000000", "--out", "{root}/x"], "split 'dense' has 3000 sequences"),
    (["eval", "{root}/ckpt", "--data", "{root}/long.jsonl"], "sequences of 20,000 tokens are longer than the 16,384"),
])
def test_names_and_outputs_are_refused_before_any_work(capsys, files, monkeypatch, args, match):
    import interp.diagnose as diagnose
    import interp.hunt as hunt
    import interp.studies.reproduce as reproduce
    import models

    starts = [(diagnose, "evaluate_reads"), (hunt, "hunt"), (reproduce, "run_all")]
    for module, name in starts + ([(models, "load")] if args[0] == "explain" else []):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail(f"{name} started"))
    (files / "long.jsonl").write_text('{"text": "w0' + "i0" * 9_998 + 'r0"}\n')
    fails(capsys, *[a.format(root=files) for a in args], match=match)
    assert not (files / "sweep").exists() and not (files / "figs").exists()


@pytest.mark.integration
@pytest.mark.parametrize("command, where", [
    (["eval", "tra-mech", "-n", "2"], "interp.evaluate.predict_reads"),
    (["diagnose", "tra-mech", "--out", "{root}/report"], "interp.diagnose.evaluate_reads"),
    (["train", *TRAIN[1:], "--out", "{root}/early"], "interp.training.loop.BatchSource"),
    (["eval", "tra-mech"], "models.load"),
])
def test_ctrl_c_anywhere_is_one_line_and_status_130(capsys, files, monkeypatch, command, where):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupt)
    assert main([a.format(root=files) for a in command]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and screen(err)[-1] == f"glitchlens {command[0]}: interrupted", err


@pytest.mark.integration
def test_ctrl_c_while_the_command_starts_is_one_line():
    """SIGINT while `glitchlens eval` imports torch and loads the model.

    The command starts as from a terminal, SIGINT at its default and unblocked: a child inherits
    an ignored or blocked SIGINT from its parent, and once a test worker ran the whole of
    `glitchlens eval` through the signal (which the failure message then shows)."""
    worker = f"this process: SIGINT {signal.getsignal(signal.SIGINT)}, blocked {signal.pthread_sigmask(signal.SIG_BLOCK, [])}"
    proc = glitchlens_as_from_a_terminal("eval", "tra-mech")
    proc.stdout.readline()  # the launcher's line: the command starts now
    time.sleep(1.0)  # in main by then (it starts in 0.2 s), importing torch (2 s)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the command ran on through SIGINT ({worker})")
    # main has returned 130 every time (logged); in about 1 run in 10 with stdin closed the process then
    # ends by SIGINT during interpreter shutdown (not traced further), which a shell reports as 128 + 2 = 130
    assert proc.returncode in (130, -signal.SIGINT) and err.strip() == "glitchlens eval: interrupted", err


@pytest.mark.integration
def test_a_resume_state_past_the_steps_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--out", str(run)]) == 0
    config = json.loads((run / "config.json").read_text())
    config["training"]["step"] = 10**9
    (run / "config.json").write_text(json.dumps(config))
    fails(capsys, *TRAIN, "--resume", "--out", run, match="at step 1000000000, past --steps 1: there is nothing")
    config["training"]["step"] = "10"
    (run / "config.json").write_text(json.dumps(config))
    fails(capsys, *TRAIN, "--resume", "--out", run, match="the training step must be an integer >= 0, got '10'")


@pytest.mark.integration
def test_train_overwrite_never_deletes_a_file_the_project_did_not_write(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--out", str(run)]) == 0
    (run / "thesis.tex").write_text("years of work")
    config = json.loads((run / "config.json").read_text())
    config["files"]["training_state"] = "thesis.tex"
    (run / "config.json").write_text(json.dumps(config))
    fails(capsys, *TRAIN, "--overwrite", "--out", run, match="names {'training_state': 'thesis.tex'}, which "
                                                             "GlitchLens never writes")
    assert (run / "thesis.tex").read_text() == "years of work"

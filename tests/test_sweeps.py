"""Sweeps on this machine and on Ray: the results in the order of the runs, the same either way,
and a run that fails loses no other run's result but fails the sweep, naming it."""

import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from interp.cli import main
from interp.outputs import staged
from interp.studies import sweeps
from interp.studies.reproduce import SCALES, Scale, sweep
from interp.studies.sweeps import SweepFailed, ray_session, run_all
from interp.tasks.text import FlipFlopFormatError
from interp.training.setup import TrainingDiverged, TrainingInterrupted
from support import glitchlens_as_from_a_terminal, screen

QUICK = Scale(preset="tiny", steps=6, lr=1e-3, batch_size=2, recipe="llama", eval_n=3, eval_every=3, seq_len=64)
BROKEN = "nosuchmodel"   # its run fails when it builds its config


def result_files(out) -> dict[str, dict]:
    return {f.parent.name: json.loads(f.read_text()) for f in sorted((out / "runs").glob("*/result.json"))}


def test_results_come_in_the_order_of_the_runs(capsys, monkeypatch):
    assert run_all(math.sqrt, {"nine": (9.0,), "four": (4.0,), "one": (1.0,)}, jobs=2) == [3.0, 2.0, 1.0]
    err = capsys.readouterr().err
    assert "3/3 runs done" in err and " so far, " in err and " left]" in err, err
    monkeypatch.setattr(sweeps, "SHOW_PROGRESS", False)   # what `glitchlens reproduce --quiet` sets
    assert run_all(math.sqrt, {"four": (4.0,)}, jobs=1) == [2.0]
    assert capsys.readouterr().err == ""


def test_a_failed_run_fails_the_sweep_after_the_others(tmp_path):
    (tmp_path / "source").write_text("kept")
    runs = {"first": (tmp_path / "missing", tmp_path / "never"), "second": (tmp_path / "source", tmp_path / "copy")}
    with pytest.raises(SweepFailed, match="1 of 2 runs failed \\(first: FileNotFoundError") as err:
        run_all(shutil.copyfile, runs, jobs=1)   # one at a time: the failure comes first
    assert list(err.value.failures) == ["first"]
    assert (tmp_path / "copy").read_text() == "kept", "the run after the failed one ran"


@pytest.mark.slow
def test_ray_sweep_equals_the_local_one(tmp_path):
    models = ("fot", "lstm")
    local = sweep(tmp_path / "local", QUICK, models, seeds=1, jobs=2)
    with ray_session("local", cpus=2):   # one Ray instance for the test: starting one takes ~30 s here
        on_ray = sweep(tmp_path / "ray", QUICK, models, seeds=1, jobs=2, ray_address="local")
        with pytest.raises(SweepFailed, match=f"1 of 2 runs failed \\({BROKEN}-seed0: ValueError: unknown model"):
            sweep(tmp_path / "failing", QUICK, ("lstm", BROKEN), seeds=1, jobs=2, ray_address="local")
    assert [(r["model"], r["seed"]) for r in on_ray] == [("fot", 0), ("lstm", 0)]
    assert on_ray == local, "one thread a run: the same training and evaluation wherever it runs"
    assert [r["device"] for r in local] == ["cpu", "cpu"], "a result names the device it was trained on"
    local_files = result_files(tmp_path / "local")
    assert result_files(tmp_path / "ray") == local_files
    assert result_files(tmp_path / "failing") == {"lstm-seed0": local_files["lstm-seed0"]}, \
        "the run beside the failed one finished"


def test_ray_without_the_extra_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)   # makes `import ray` raise ImportError
    assert main(["reproduce", "table1", "--models", "lstm", "--seeds", "1", "--out", str(tmp_path),
                 "--ray", "auto"]) == 2
    assert "install the ray extra: pip install -e '.[ray]'" in capsys.readouterr().err


def test_a_sweep_refuses_an_out_with_runs_of_another_scale(tmp_path, monkeypatch):
    """A finished run is read back, not trained again, so one trained at another budget would pass
    for this sweep's own: refused before any run starts."""
    finished = tmp_path / "runs" / "lstm-seed0"
    finished.mkdir(parents=True)
    (finished / "result.json").write_text(json.dumps({"model": "lstm", "seed": 0, "scale": asdict(QUICK)}))
    monkeypatch.setattr("interp.studies.reproduce.run_all", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(ValueError, match="lstm-seed0 is a finished run of another scale \\(steps 6, not 7\\)"):
        sweep(tmp_path, replace(QUICK, steps=7), ("fot", "lstm"), seeds=1, jobs=1)


def write_report(out, name: str) -> None:
    """A report, written as the sweeps write theirs: staged and recorded."""
    with staged(out) as stage:
        (stage / name).write_text("table\n")


def test_steps_sets_the_budget_of_table1_and_recipes_only(tmp_path, monkeypatch, capsys):
    scales = []

    def reproduce_table1(out, scale, *args, **kwargs):
        scales.append(scale)
        write_report(out, "table1.md")

    def reproduce_recipes(out, recipes, models, seeds, jobs, scale, **kwargs):
        scales.append(scale)
        write_report(out, "recipes.md")

    monkeypatch.setattr("interp.studies.reproduce.reproduce_table1", reproduce_table1)
    monkeypatch.setattr("interp.studies.reproduce.reproduce_recipes", reproduce_recipes)
    assert main(["reproduce", "table1", "--steps", "10000", "--out", str(tmp_path), "--quiet"]) == 0
    assert main(["reproduce", "recipes", "--scale", "learning", "--steps", "2000", "--out", str(tmp_path)]) == 0
    assert main(["reproduce", "table1", "--out", str(tmp_path)]) == 0
    assert scales == [replace(SCALES["cpu"], steps=10_000), replace(SCALES["learning"], steps=2000), SCALES["cpu"]]
    assert main(["reproduce", "sharpening", "--steps", "10", "--out", str(tmp_path / "study")]) == 2
    assert "--steps is for table1 and recipes: sharpening fixes its runs' budgets" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_device_reaches_table1_and_recipes_and_a_sweep_refuses_one_it_cannot_use(tmp_path, monkeypatch, capsys):
    devices = []

    def reproduce_table1(out, scale, *args, device, **kwargs):
        devices.append(device)
        write_report(out, "table1.md")

    def reproduce_recipes(out, *args, device, **kwargs):
        devices.append(device)
        write_report(out, "recipes.md")

    monkeypatch.setattr("interp.studies.reproduce.reproduce_table1", reproduce_table1)
    monkeypatch.setattr("interp.studies.reproduce.reproduce_recipes", reproduce_recipes)
    assert main(["reproduce", "table1", "--device", "cuda", "--out", str(tmp_path), "--quiet"]) == 0
    assert main(["reproduce", "recipes", "--device", "cuda", "--out", str(tmp_path), "--quiet"]) == 0
    assert main(["reproduce", "table1", "--out", str(tmp_path), "--quiet"]) == 0
    assert devices == ["cuda", "cuda", "cpu"]
    assert main(["reproduce", "sharpening", "--device", "cuda", "--out", str(tmp_path / "study")]) == 2
    assert "--device is for table1 and recipes: sharpening trains on the CPU" in capsys.readouterr().err
    monkeypatch.setattr("interp.studies.reproduce.run_all", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(ValueError, match="--device cuda with --ray: the Ray tasks ask for one CPU each, no GPU"):
        sweep(tmp_path / "ray", QUICK, ("lstm",), seeds=1, jobs=1, ray_address="auto", device="cuda")
    with pytest.raises(ValueError, match="device 'gpu' is not usable here .*; use --device cpu"):
        sweep(tmp_path / "named", QUICK, ("lstm",), seeds=1, jobs=1, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' is not usable here"):
            sweep(tmp_path / "cuda", QUICK, ("lstm",), seeds=1, jobs=1, device="cuda")


@pytest.mark.parametrize("error", [TrainingInterrupted(7, Path("run")), TrainingDiverged(7, "the loss", Path("run"), 5),
                                   FlipFlopFormatError("unknown token 'x'", 4, "w0r0x", sequence=1)], ids=type)
def test_what_a_run_raises_reaches_the_sweep_whole(error):
    """A worker sends its run's exception to the sweep pickled; one that could not be rebuilt there
    would break the pool, and end every other run in it."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


def sweep_at_its_first_step(out):
    """A two-run sweep (one worker) started as from a terminal, once its first run has logged a
    step: the process and that run's log."""
    proc = glitchlens_as_from_a_terminal("reproduce", "table1", "--models", "lstm,nope", "--seeds", "1", "--steps",
                                         "3000", "--scale", "learning", "--jobs", "1", "--out", str(out))
    proc.stdout.readline()
    log = out / "runs" / "lstm-seed0" / "log.jsonl"
    for _ in range(240):
        if log.exists() and log.read_text().strip():
            break
        time.sleep(0.5)
    return proc, log


@pytest.mark.integration
def test_ctrl_c_stops_a_sweep_in_one_line_with_the_running_run_saved_and_no_other_started(tmp_path):
    """Ctrl-C signals the sweep's whole process group: the run training saves its step, the run
    waiting for a worker does not start, and the command ends once no worker is left, in one line."""
    out = tmp_path / "sweep"
    proc, log = sweep_at_its_first_step(out)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the sweep ran on through Ctrl-C")
    assert proc.returncode == 130 and screen(err)[-1] == "glitchlens reproduce: interrupted", err
    assert "Warning" not in err and "Traceback" not in err, err
    for _ in range(50):   # no worker outlives the command (the resource tracker ends just after it)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a process of the sweep outlived it by 5 s")
    last_logged = json.loads(log.read_text().splitlines()[-1])["step"]
    saved = json.loads((log.parent / "config.json").read_text())["training"]["step"]
    assert saved == last_logged, "the interrupted run saved the step it had reached"
    assert not (out / "runs" / "nope-seed0" / "log.jsonl").exists(), "no run started after Ctrl-C"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-test)")
def test_a_sweep_on_cuda_trains_there_and_says_so(tmp_path):
    [result] = sweep(tmp_path, QUICK, ("tra",), seeds=1, jobs=1, device="cuda")
    assert result["device"] == "cuda" and result["splits"]["iid"]["reads"] > 0


@pytest.mark.integration
def test_a_sweep_killed_with_sigkill_leaves_no_worker_and_the_running_run_saved(tmp_path):
    """SIGKILL reaches the sweep's process alone (its workers run in process groups of their own):
    each worker is told by the kernel that its parent died, saves its run's step and exits."""
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "sweep"
    proc, log = sweep_at_its_first_step(out)
    workers = [child for child in psutil.Process(proc.pid).children() if "resource_tracker" not in
               " ".join(child.cmdline())]
    assert workers, "the sweep has no worker"
    proc.kill()
    proc.wait()
    _, alive = psutil.wait_procs(workers, timeout=120)
    for worker in alive:
        worker.kill()
    assert not alive, f"workers {[w.pid for w in alive]} outlived the sweep killed with SIGKILL"
    assert (log.parent / "config.json").exists(), "the worker exited without saving its run"
    last_logged = json.loads(log.read_text().splitlines()[-1])["step"]
    saved = json.loads((log.parent / "config.json").read_text())["training"]["step"]
    assert saved == last_logged, "the worker saved the step it had reached"
    assert not (out / "runs" / "nope-seed0" / "log.jsonl").exists(), "no run started after the sweep died"


def test_a_fresh_clone_resumes_every_committed_sweep():
    """Each file committed at the top of a sweep's folder (runs.csv, summary.md, ...) is listed in
    that folder's list of what glitchlens wrote, which is committed too: without it a resumed sweep
    in a fresh clone refuses to rewrite its own report as a file glitchlens did not write."""
    root = Path(__file__).resolve().parent.parent
    listed = subprocess.run(["git", "ls-files", "runs"], cwd=root, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    tracked = set(listed.stdout.split())
    from models.files import MANIFEST, written
    for name in sorted(tracked):
        parts = Path(name).parts
        if len(parts) == 3 and parts[2] != MANIFEST:
            sweep = root / parts[0] / parts[1]
            assert f"runs/{parts[1]}/{MANIFEST}" in tracked, f"{sweep / MANIFEST} is not committed"
            assert parts[2] in written(sweep), f"{name} is not listed in {sweep / MANIFEST}"

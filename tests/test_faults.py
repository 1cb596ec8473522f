"""Faults from outside: two writers on one ``--out``, stop signals to a run and to a
sweep, a closed terminal (SIGHUP), and a storm of Ctrl-C during a checkpoint's save."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import models
from interp.cli import main
from interp.training.loop import train
from interp.training.setup import LOCK_FILE, TrainConfig, output_lock
from models import ModelConfig
from support import interrupt_training_at

TINY = ModelConfig.from_preset("nope", "tiny", n_ctx=32)
SMALL = dict(seq_len=32, batch_size=4, warmup=1, eval_n=2)
REPO = Path(__file__).parents[1]


def test_a_second_writer_is_refused_naming_the_first_and_a_dead_ones_lock_is_taken(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    with output_lock(run, "glitchlens train --out run"):
        with pytest.raises(ValueError, match=rf"being written by another run: pid {os.getpid()} .*started 20"):
            train(TINY, TrainConfig(steps=2, **SMALL), run, progress=False)
        assert main(["reproduce", "table1", "--report-only", "--out", str(run)]) == 2
        assert f"pid {os.getpid()}" in capsys.readouterr().err
    assert not (run / LOCK_FILE).exists()
    # a writer killed with kill -9 leaves its lock: a dead pid on this host is stale
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "command": "x",
                                             "started": "then"}))
    train(TINY, TrainConfig(steps=2, **SMALL), run, progress=False, until=1)
    assert models.read_config(run)["training"]["step"] == 1 and not (run / LOCK_FILE).exists()


@pytest.fixture
def stop_signals_restored():
    """``glitchlens`` ignores stop signals once it is ending; give this process its handlers back."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def train_command(out: Path) -> list[str]:
    return ["train", "--model", "nope", "--preset", "tiny", "--seq-len", "32", "--batch-size", "4", "--steps", "10",
            "--warmup", "1", "--eval-n", "2", "--quiet", "--out", str(out)]


def test_sighup_stops_a_run_as_sigterm_does(tmp_path, monkeypatch, capsys, stop_signals_restored):
    """A closed terminal or ssh session: the run saves, stops and says so in one line."""
    interrupt_training_at(monkeypatch, 1, signal.SIGHUP)
    assert main(train_command(tmp_path / "run")) == 128 + signal.SIGHUP
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted (SIGHUP) after step 2; checkpoint saved" in err[0], err
    assert models.read_config(tmp_path / "run")["training"]["step"] == 2


def test_a_ctrl_c_storm_ends_the_command_in_one_line(tmp_path, monkeypatch, capsys, stop_signals_restored):
    """The first Ctrl-C asks for a stop; those that arrive while the checkpoint is written wait
    until it is complete, and then change nothing."""
    save = models.save

    def stormy_save(*args, **kwargs):
        for _ in range(5):
            signal.raise_signal(signal.SIGINT)
        return save(*args, **kwargs)

    interrupt_training_at(monkeypatch, 1)
    monkeypatch.setattr(models, "save", stormy_save)
    assert main(train_command(tmp_path / "run")) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted (SIGINT) after step 2; checkpoint saved" in err[0], err
    models.load(tmp_path / "run")


def _wait_for(path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def train_until_stopped(out: str) -> None:
    """A sweep's run that only a stop ends (run in a worker process of :func:`run_all`)."""
    import torch

    torch.set_num_threads(1)
    train(TINY, TrainConfig(steps=100_000, checkpoint_every=1, **SMALL), out, progress=False)


@pytest.mark.slow
@pytest.mark.integration
def test_a_sweep_forwards_sigterm_to_its_workers_which_save_and_stop(tmp_path, stop_signals_restored):
    """``glitchlens reproduce`` is :func:`run_all` with the runs of a table: SIGTERM to the sweep
    alone (not its process group) stops every worker, each saving its run's checkpoint, and then
    the sweep, within seconds."""
    from interp.studies import sweeps

    runs = [tmp_path / "a", tmp_path / "b"]

    def terminate_once_both_train():
        for run in runs:
            _wait_for(run / "config.json")   # saved after step 1: the run's loop is going
        os.kill(os.getpid(), signal.SIGTERM)

    # outside run_all (a failure before it starts), SIGTERM must not kill the test process
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    watcher = threading.Thread(target=terminate_once_both_train, daemon=True)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        sweeps.run_all(train_until_stopped, {run.name: (str(run),) for run in runs}, jobs=2)
    watcher.join()
    for run in runs:
        assert models.read_config(run)["training"]["step"] >= 1 and not (run / LOCK_FILE).exists()
        models.load(run)

"""The thread count a command gives torch (``interp.cli.threads``, ``--threads``): the cores the
load average leaves idle, at least one, unless ``--threads`` or ``OMP_NUM_THREADS`` says."""

import os
import subprocess
import sys

import pytest

from interp.cli import build_parser
from interp.cli.threads import choose_threads, idle_cores


@pytest.mark.parametrize("cpus, load, expected", [(2, 0.1, 2), (2, 1.2, 1), (2, 15.0, 1), (16, 3.4, 13), (4, 0.0, 4)])
def test_idle_cores_leave_the_busy_ones_and_keep_one(cpus, load, expected):
    assert idle_cores(cpus, load) == expected


def test_threads_option_then_environment_then_idle_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads(5) == 5
    assert choose_threads(None) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))
    assert choose_threads(None) == 1


def test_every_command_takes_threads_and_refuses_zero(capsys):
    assert build_parser().parse_args(["eval", "ckpt", "--threads", "2"]).threads == 2
    assert build_parser().parse_args(["train", "--model", "rope", "--out", "x"]).threads is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "ckpt", "--threads", "0"])
    assert "expected a positive integer" in capsys.readouterr().err


def test_the_command_runs_torch_at_the_chosen_count_with_sleeping_waits():
    """``--threads`` reaches torch, imported here before the choice, and the processes the
    command starts: with ``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets a policy."""
    code = ("import os, sys, torch; from interp.cli import main; main(['pretrained', '--threads', '1', '--json']); "
            "print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], "
            "file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    for policy, expected in ((None, "1 1 PASSIVE"), ("ACTIVE", "1 1 ACTIVE")):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env=env if policy is None else {**env, "OMP_WAIT_POLICY": policy})
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == expected

"""One way out to the disk: every command that writes files writes them through the staged,
manifest-recording writer (``interp.outputs``, ``models.files``, ``models.checkpoint``'s atomic
save, the lock of ``interp.training.setup``). Each command of the CLI runs once here, at its
cheapest, with every way of opening a file for writing and of renaming one watched; a file that
lands in ``--out`` from anywhere else fails the test, naming the code that wrote it."""

from __future__ import annotations

import builtins
import io
import os
import traceback
from pathlib import Path

import pytest

from interp.cli import main
from interp.cli.commands import COMMANDS

REPO = Path(__file__).resolve().parents[1]
# The code allowed to put a file into --out: the writer itself. A file inside one of its staging
# folders may be written by anyone: the writer moves it into place and lists it.
WRITERS = {"models/files.py", "interp/outputs.py", "models/checkpoint.py", "interp/training/setup.py"}
STAGE = ".glitchlens-staging-"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def writers_argv(out: Path, fixtures: Path) -> dict[str, list]:
    """Each command that writes, at its cheapest; the task paths (a model of another task than
    flip-flop) apart."""
    return {
        "data": ["data", "--split", "iid", "-n", "2", "--seq-len", "16", "--out", out / "iid.jsonl"],
        "data (task)": ["data", "--task", "counting", "--split", "train", "-n", "2", "--out", out / "counting.jsonl"],
        "train": ["train", "--model", "nope", "--steps", "2", "--seq-len", "16", "--n-ctx", "512", "--batch-size", "2",
                  "--eval-n", "1", "--quiet", "--out", out],
        "diagnose": ["diagnose", "tra-mech", "-n", "2", "--lengths", "64", "--cache-sequences", "1", "--png",
                     "--quiet", "--out", out],
        "diagnose (task)": ["diagnose", "automaton-1l", "-n", "2", "--quiet", "--out", out],
        "explain": ["explain", "tra-mech", "-n", "4", "--pairs", "1", "--quiet", "--out", out],
        "hunt": ["hunt", "tra-mech", "--budget", "8", "--seq-len", "16", "--population", "4", "--quiet", "--out", out],
        "hunt (task)": ["hunt", "automaton-1l", "--budget", "8", "--quiet", "--out", out],
        # the sweep's runs train in worker processes, which "train" stands for; the report is written here
        "reproduce": ["reproduce", "table1", "--models", "tra", "--seeds", "1", "--report-only", "--quiet",
                      "--out", out],
        "pretrained": ["pretrained", "build", "automaton-1l", "--steps", "1", "--quiet", "--root", out],
        "figures": ["figures", "--only", "table1", "--table1", fixtures / "table1.csv", "--quiet", "--out", out],
    }


# Commands that write no file, or whose writes another test covers (and why).
READ_ONLY = {"eval": "prints", "check-mechanism": "prints", "check-task": "prints",
             "bench": "writes its CSV through interp.outputs.staged (tests/test_bench.py); timing runs are long",
             "claims": "rewrites the docs' generated blocks in the repository (tests/test_claims.py)",
             "campaign": "trains its runs in worker processes through train's writer (the train case here) and "
                         "appends campaign.jsonl through interp.outputs.open_append; a campaign takes minutes"}


def test_every_command_is_either_watched_here_or_writes_nothing(tmp_path):
    watched = {name.split(" ")[0] for name in writers_argv(tmp_path, tmp_path)}
    assert set(COMMANDS) == watched | set(READ_ONLY), "a command is neither watched for its writes nor read-only"


def project_frame() -> str | None:
    """The repository file (relative path) of the innermost caller that is project code."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = Path(frame.filename)
        if path.is_relative_to(REPO) and not path.is_relative_to(REPO / ".venv") and path.name != Path(__file__).name:
            return path.relative_to(REPO).as_posix()
    return None


@pytest.fixture
def watched_writes(monkeypatch):
    """Every path opened for writing or renamed to, with the project code that did it."""
    writes: list[tuple[str, str | None]] = []
    real_open, real_os_open, real_replace, real_rename = io.open, os.open, os.replace, os.rename

    def watched_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
            writes.append((os.path.abspath(file), project_frame()))
        return real_open(file, mode, *args, **kwargs)

    def watched_os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS:
            writes.append((os.path.abspath(path), project_frame()))
        return real_os_open(path, flags, *args, **kwargs)

    def moved(real):
        def watched_move(src, dst, *args, **kwargs):
            writes.append((os.path.abspath(dst), project_frame()))
            return real(src, dst, *args, **kwargs)
        return watched_move

    monkeypatch.setattr(builtins, "open", watched_open)
    monkeypatch.setattr(io, "open", watched_open)
    monkeypatch.setattr(os, "open", watched_os_open)
    monkeypatch.setattr(os, "replace", moved(real_replace))
    monkeypatch.setattr(os, "rename", moved(real_rename))
    return writes


def outside_the_writer(writes: list[tuple[str, str | None]], out: Path) -> list[str]:
    out = str(out.resolve())
    return sorted({f"{os.path.relpath(path, out)} by {code}" for path, code in writes
                   if path.startswith(out + os.sep) and STAGE not in path and code not in WRITERS})


@pytest.mark.integration
@pytest.mark.parametrize("command", list(writers_argv(Path("out"), Path("fixtures"))))
def test_every_file_a_command_writes_goes_through_the_writer(command, tmp_path, capsys, watched_writes):
    from probe_hostile import finished_runs

    fixtures, out = tmp_path / "fixtures", tmp_path / "out"
    out.mkdir()
    if command in ("reproduce", "figures"):   # finished runs to report on, and their table
        finished_runs(out if command == "reproduce" else fixtures)
    if command == "figures":
        assert main(["reproduce", "table1", "--models", "tra", "--seeds", "1", "--report-only", "--quiet",
                     "--out", str(fixtures)]) == 0
    watched_writes.clear()
    status = main([str(a) for a in writers_argv(out, fixtures)[command]])
    assert status == 0, capsys.readouterr().err
    assert any(path.startswith(str(out.resolve())) for path, _ in watched_writes), "the command wrote nothing"
    assert outside_the_writer(watched_writes, out) == []

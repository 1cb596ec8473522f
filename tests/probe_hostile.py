"""The hostile-input probe: hundreds of cases a careless or malicious user could try,
generated from the classes of ``tests/test_hostile.py`` (output folders x writing commands,
damaged checkpoints x reading commands, odd files x data options, sizes, user text, damaged
sweep folders and pretrained roots, broken mechanisms), each run with a time limit and
classified. Not collected by pytest (no ``test_`` prefix); run it by hand:

    nice -n 10 python tests/probe_hostile.py --out /tmp/probe [--jobs 2] [--only SUBSTRING] [--spawn]

Each case runs in a workspace of its own under ``--out``: ``work/`` holds what the command
reads and writes, ``outside/`` and ``cwd/`` (its working directory) must stay as they were,
as must the installed package's pretrained entries. Files whose content starts with
``SENTINEL`` stand for a user's data: any that changes or goes is data loss. A case is one
of: ``result`` (exit status 0; ``check-mechanism``: 1 with its report of failed checks), ``one-line error`` (exit status non-zero, one line on stderr),
``other failure`` (non-zero with more to say); and, counted apart, ``traceback``, ``hang``
(past the time limit), ``data loss``, ``write outside``, ``silent result`` (exit status 0 for
input that must be refused: a swapped tensor file, an unknown task, a plug-in that exits at
import) and ``orphan`` (a process left running :data:`ORPHAN_GRACE_S` after the case's command
was killed with SIGKILL, the sweep's workers). Any of these but ``raw escape`` makes the exit
status 1.

Each case is a child process: by default forked from this process once it has imported the
CLI (which saves the seconds of importing torch per case), calling ``interp.cli.main`` as the
``glitchlens`` script does; with ``--spawn``, a fresh ``python -m interp.cli``. Results go to
``--out/results.jsonl`` and a summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {"OMP_NUM_THREADS": ("1", "OpenMP threads of the probe's processes"),
                         "MKL_NUM_THREADS": ("1", "MKL threads of the probe's processes")}
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from models.pretrained import PRETRAINED_DIR  # noqa: E402

TIMEOUT_S = 60
# the flags none of the cases may raise
FAILURES = ("data loss", "write outside", "traceback", "hang", "silent result", "orphan")
SENTINEL = b"SENTINEL"
BIG = 20 << 30   # a sparse file of 20 GB


@dataclass
class Case:
    name: str
    make: Callable[[Path], list]   # workspace -> argv (prepares work/ first)
    refused: bool = False          # bad input: exit status 0 is a silent result
    kill_when: Callable[[Path], bool] | None = None   # SIGKILL the command's process alone once true of ws


# --- what a workspace holds ----------------------------------------------------------------------

def user_file(path: Path, text: str = "my data") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SENTINEL + f" {text} ({path.name})\n".encode())
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def link(path: Path, target) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def sparse(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(BIG)
    return path


def checkpoint(ws: Path, name: str = "ck", entry: str = "tra-mech") -> Path:
    return Path(shutil.copytree(PRETRAINED_DIR / entry, ws / "work" / name))


def weights(ck: Path) -> Path:
    return next(ck.glob("model*.safetensors"))


def edit_config(ck: Path, change: Callable[[dict], object]) -> Path:
    config = json.loads((ck / "config.json").read_text())
    result = change(config)
    (ck / "config.json").write_text(json.dumps(config if result is None else result))
    return ck


# --- the commands that write, at their cheapest ----------------------------------------------------

def writer_argv(command: str, out: str, ws: Path) -> list:
    fixtures = ws.parent.parent / "fixtures"
    return {
        "diagnose": ["diagnose", "tra-mech", "-n", "2", "--lengths", "64", "--cache-sequences", "1", "--quiet",
                     "--out", out],
        "explain": ["explain", "tra-mech", "-n", "4", "--pairs", "1", "--quiet", "--out", out],
        "hunt": ["hunt", "tra-mech", "--budget", "8", "--seq-len", "16", "--population", "4", "--quiet", "--out", out],
        "figures": ["figures", "--only", "table1", "--table1", fixtures / "table1.csv", "--quiet", "--out", out],
        "train": ["train", "--model", "nope", "--steps", "2", "--seq-len", "16", "--n-ctx", "512", "--batch-size", "2",
                  "--eval-n", "1", "--quiet", "--out", out],
        "reproduce": ["reproduce", "table1", "--models", "tra", "--seeds", "1", "--report-only", "--quiet",
                      "--out", out],
        "pretrained-build": ["pretrained", "build", "automaton-1l", "--steps", "1", "--quiet", "--root", out],
        "diagnose-task": ["diagnose", "automaton-1l", "-n", "2", "--quiet", "--out", out],
        "hunt-task": ["hunt", "automaton-1l", "--budget", "8", "--quiet", "--out", out],
    }[command]


# the files each writes that a user's file could share a name with
OUTPUT_NAMES = {
    "diagnose": ["report.html", "metrics.csv", "metrics.json", "glitches.csv"],
    "explain": ["report.md", "explain.json", "glitches.csv"],
    "hunt": ["hunt.json"],
    "figures": ["index.md", "captions.json", "table1.png", "table1.csv"],
    "train": ["log.jsonl"],
    "reproduce": ["table1.md", "table1.csv"],
    "pretrained-build": ["automaton-1l/config.json"],
    "diagnose-task": ["report.html", "metrics.json", "metrics.csv", "glitches.csv", "browser.html"],
    "hunt-task": ["hunt.json", "failing-fresh.jsonl"],
}


def finished_runs(out: Path) -> None:
    """A sweep folder with one finished run of tra (for reproduce --report-only)."""
    run = out / "runs" / "tra-seed0"
    run.mkdir(parents=True, exist_ok=True)
    (run / "result.json").write_text(json.dumps(VALID_RESULT))


VALID_RESULT = {"model": "tra", "seed": 0, "splits": {
    split: {"sequence_accuracy": 0.5, "error_rate": 0.01, "sequences": 10, "reads": 100, "read_errors": 1}
    for split in ("iid", "sparse", "dense")}}


def out_kinds(command: str) -> dict[str, Callable[[Path], str]]:
    """Ways to hand a writing command its --out; each prepares work/ and returns the path."""
    names = OUTPUT_NAMES[command]

    def prepared(out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        if command == "reproduce":
            finished_runs(out)
        return out

    def users_files(ws):
        out = prepared(ws / "work" / "out")
        for name in names:
            user_file(out / name)
        return str(out)

    def links_to_outside(ws):
        out = prepared(ws / "work" / "out")
        for name in names:
            link(out / name, ws / "outside" / "sentinel.txt")
        return str(out)

    def dangling_links(ws):
        out = prepared(ws / "work" / "out")
        for i, name in enumerate(names):
            link(out / name, ws / "outside" / f"new{i}")
        return str(out)

    def linked_folder(ws):
        out = prepared(ws / "work" / "out")
        if command == "reproduce":
            shutil.move(out / "runs", ws / "outside" / "runs")
            link(out / "runs", ws / "outside" / "runs")
        elif command == "pretrained-build":
            link(out / "automaton-1l", ws / "outside")
        else:
            link(out / "sub", ws / "outside")
        return str(out)

    def manifest_fifo(ws):
        out = prepared(ws / "work" / "out")
        fifo(out / ".glitchlens-outputs.json")
        return str(out)

    def manifest_garbage(ws):
        out = prepared(ws / "work" / "out")
        (out / ".glitchlens-outputs.json").write_text("[1, 2")
        user_file(out / names[0])
        return str(out)

    def unrelated_file(ws):
        out = prepared(ws / "work" / "out")
        user_file(out / "notes.txt")
        return str(out)

    def readonly_parent(ws):
        parent = ws / "work" / "ro"
        parent.mkdir(parents=True)
        parent.chmod(0o555)
        return str(parent / "out")

    def special(kind):
        def make(ws):
            target = ws / "work" / "out"
            if kind == "file":
                user_file(target)
            elif kind == "fifo":
                fifo(target)
            elif kind == "dangling":
                link(target, ws / "outside" / "nothing")
            elif kind == "devnull":
                return "/dev/null"
            return str(target)
        return make

    def named(text):
        def make(ws):
            out = ws / "work" / text
            if command == "reproduce":
                prepared(out)
            return str(out)
        return make

    def fresh(ws):
        out = ws / "work" / "a" / "b" / "out"
        if command == "reproduce":
            prepared(out)
        return str(out)

    def empty_dir(ws):
        return str(prepared(ws / "work" / "out"))

    return {"fresh": fresh, "empty-dir": empty_dir, "users-files": users_files, "links-to-outside": links_to_outside,
            "dangling-links": dangling_links, "linked-folder": linked_folder, "manifest-fifo": manifest_fifo,
            "manifest-garbage": manifest_garbage, "unrelated-file": unrelated_file, "readonly-parent": readonly_parent,
            "out-is-file": special("file"), "out-is-fifo": special("fifo"), "out-dangling": special("dangling"),
            "out-devnull": special("devnull"), "markup-name": named("o[/]x[bold]"),
            "control-name": named("o\x1b]0;pwned\x07\x1b[2Jx"), "empty-name": lambda ws: ""}


def writer_cases() -> list[Case]:
    cases = []
    for command in OUTPUT_NAMES:
        for kind, make_out in out_kinds(command).items():
            cases.append(Case(f"write/{command}/{kind}",
                              lambda ws, c=command, m=make_out: writer_argv(c, m(ws), ws)))
    cases += [Case("write/data/existing-file", lambda ws: ["data", "--split", "iid", "-n", "2", "--seq-len", "16",
                                                           "--out", user_file(ws / "work" / "d.jsonl")]),
              Case("write/data/link-to-outside", lambda ws: ["data", "--split", "iid", "-n", "2", "--out", link(
                  ws / "work" / "d.jsonl", ws / "outside" / "sentinel.txt"), "--overwrite"]),
              Case("write/data/dangling-link", lambda ws: ["data", "--split", "iid", "-n", "2", "--out", link(
                  ws / "work" / "d.jsonl", ws / "outside" / "new.jsonl")]),
              Case("write/data/fifo", lambda ws: ["data", "--split", "iid", "-n", "2", "--out",
                                                 fifo(ws / "work" / "d.jsonl")]),
              Case("write/data/dir", lambda ws: ["data", "--split", "iid", "-n", "2", "--out", ws / "work"]),
              Case("write/data/markup", lambda ws: ["data", "--split", "iid", "-n", "2", "--out",
                                                   ws / "work" / "d[/]x.jsonl"]),
              Case("write/data/bad-suffix", lambda ws: ["data", "--split", "iid", "-n", "2", "--out",
                                                       ws / "work" / "d\x1b[2J.txt"])]
    for kind, make in {"notes": lambda p: user_file(p), "fifo": fifo, "devzero": lambda p: link(p, "/dev/zero"),
                       "dir": lambda p: (p.mkdir(parents=True), p)[1],
                       "link-outside": lambda p: link(p, p.parents[1] / "outside" / "sentinel.txt"),
                       "sparse": sparse, "no-columns": lambda p: (p.write_text("a,b\n1,2\n"), p)[1],
                       "binary": lambda p: (p.write_bytes(bytes(range(256)) * 4), p)[1]}.items():
        cases.append(Case(f"write/bench-kernels/{kind}", lambda ws, m=make: [
            "bench", "kernels", "--seq-lens", "16", "--tokens", "16", "--repeats", "1", "--out", m(ws / "work" / "b.csv")]))
    return cases


# --- damaged checkpoints x the commands that read them ----------------------------------------------

def checkpoint_kinds() -> dict[str, Callable[[Path], str]]:
    def damaged(change):
        def make(ws):
            ck = checkpoint(ws)
            change(ck, ws)
            return str(ck)
        return make

    def replace_with(what):
        def change(ck, ws):
            (ck / what[0]).unlink() if what[0] != "weights" else weights(ck).unlink()
            path = ck / what[0] if what[0] != "weights" else ck / "model.x.safetensors"
            if what[0] == "weights":
                edit_config(ck, lambda c: c.__setitem__("files", {**c["files"], "model": path.name}))
            what[1](path)
        return change

    def nan_weights(ck, ws):
        from safetensors.numpy import load_file, save_file
        import numpy as np

        tensors = {k: np.full_like(v, np.nan) if v.dtype.kind == "f" else v for k, v in load_file(weights(ck)).items()}
        save_file(tensors, weights(ck))

    def swapped(ck, ws):   # another run's file of the same architecture under this checkpoint's name
        shutil.copyfile(weights(ws.parent.parent / "fixtures" / "tra-other"), weights(ck))

    def config_section(section, value):
        return damaged(lambda ck, ws: edit_config(ck, lambda c: c.__setitem__(section, value)))

    kinds = {
        "config-fifo": damaged(replace_with(("config.json", fifo))),
        "config-devzero": damaged(replace_with(("config.json", lambda p: link(p, "/dev/zero")))),
        "config-sparse": damaged(replace_with(("config.json", sparse))),
        "config-dir": damaged(replace_with(("config.json", lambda p: p.mkdir()))),
        "config-loop": damaged(replace_with(("config.json", lambda p: link(p, p)))),
        "config-empty": damaged(replace_with(("config.json", lambda p: p.write_text("")))),
        "config-binary": damaged(replace_with(("config.json", lambda p: p.write_bytes(b"\xff\xfe\x00" * 99)))),
        "config-list": damaged(lambda ck, ws: edit_config(ck, lambda c: [c])),
        "config-escapes": config_section("model", {"model": "tra\x1b]0;pwned\x07\x1b[2J[/]"}),
        "training-string": config_section("training", "a string"),
        "training-list": config_section("training", ["a", "list"]),
        "training-number": config_section("training", 5),
        "training-config-string": config_section("training", {"config": "x", "step": 1}),
        "model-string": config_section("model", "tra"),
        "metadata-list": config_section("metadata", [1]),
        "files-outside": config_section("files", {"model": "../../outside/sentinel.txt"}),
        "files-absolute": config_section("files", {"model": "/dev/zero"}),
        "weights-fifo": damaged(replace_with(("weights", fifo))),
        "weights-devzero": damaged(replace_with(("weights", lambda p: link(p, "/dev/zero")))),
        "weights-sparse": damaged(replace_with(("weights", sparse))),
        "weights-garbage": damaged(lambda ck, ws: weights(ck).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}" * 9)),
        "weights-truncated": damaged(lambda ck, ws: weights(ck).write_bytes(weights(ck).read_bytes()[:300])),
        "weights-missing": damaged(lambda ck, ws: weights(ck).unlink()),
        "weights-nan": damaged(nan_weights),
        "weights-swapped": damaged(swapped),
        "task-unknown": damaged(lambda ck, ws: edit_config(ck, lambda c: c["training"]["config"].__setitem__(
            "task", "nosuch"))),
        "mechanism-on-builtin": config_section("mechanism", {"name": "tra", "class": "os:system"}),
        "mechanism-not-a-record": config_section("mechanism", "os:system"),
        "digest-garbage": config_section("sha256", {"model.x.safetensors": "00"}),
        "config-nested": damaged(replace_with(("config.json", lambda p: p.write_text("[" * 100_000 + "]" * 100_000)))),
        "arg-fifo": lambda ws: str(fifo(ws / "work" / "ck")),
        "arg-devzero": lambda ws: "/dev/zero",
        "arg-sparse": lambda ws: str(sparse(ws / "work" / "ck")),
        "arg-markup": lambda ws: str(checkpoint(ws, "ck[/]x[bold]")),
        "arg-control": lambda ws: str(checkpoint(ws, "ck\x1b]0;pwned\x07")),
        "arg-missing-markup": lambda ws: "ck/name[/]",
    }
    return kinds


def reader_argv(command: str, ck: str, ws: Path) -> list:
    out = ws / "work" / "out"
    return {"eval": ["eval", ck, "-n", "2", "--splits", "iid", "--quiet"],
            "diagnose": ["diagnose", ck, "-n", "2", "--lengths", "64", "--cache-sequences", "1", "--quiet", "--out", out],
            "explain": ["explain", ck, "-n", "4", "--pairs", "1", "--quiet", "--out", out],
            "hunt": ["hunt", ck, "--budget", "8", "--seq-len", "16", "--population", "4", "--quiet"]}[command]


# damaged checkpoints whose every reading must be refused; the others load: NaN weights (with a
# warning), a sound checkpoint under an odd name (escaped where it is printed)
MUST_REFUSE = ("config-", "training-", "model-", "metadata-", "files-", "weights-", "arg-", "task-", "mechanism-",
               "digest-")
LOADS = ("weights-nan", "arg-markup", "arg-control")


def checkpoint_cases() -> list[Case]:
    return [Case(f"checkpoint/{command}/{kind}", lambda ws, c=command, m=make: reader_argv(c, m(ws), ws),
                 refused=kind.startswith(MUST_REFUSE) and kind not in LOADS)
            for command in ("eval", "diagnose", "explain", "hunt") for kind, make in checkpoint_kinds().items()]


# --- the lock, the manifest, a save's own names, plug-in checks, a sweep's workers ------------------------

def train_argv(out, *more) -> list:
    return ["train", "--model", "nope", "--steps", "2", "--seq-len", "16", "--n-ctx", "512", "--batch-size", "2",
            "--eval-n", "1", "--quiet", *more, "--out", out]


def in_out(make: Callable[[Path], object], name: str) -> Callable[[Path], Path]:
    """A fresh --out holding ``make(out / name)``."""
    def prepare(ws):
        out = ws / "work" / "out"
        out.mkdir(parents=True, exist_ok=True)
        make(out / name)
        return out
    return prepare


def big_pid_lock(path: Path) -> None:
    import socket

    path.write_text(json.dumps({"pid": 2 ** 70, "host": socket.gethostname(), "command": "x", "started": "x"}))


TASK_MODULES = {
    "exit-at-import": "import os\nos._exit(0)\n",
    "sys-exit-at-import": "import sys\nsys.exit(0)\n",
    "loops-at-import": "while True:\n    pass\n",
    "sample-sleeps": ("import time\nfrom plugin_tasks import ParityTask\nclass Thing(ParityTask):\n    name = 'thing'\n"
                      "    def sample(self, *a, **k):\n        time.sleep(3600)\n"),
}


def training(ws: Path) -> bool:
    """Whether a sweep's first run in ``ws`` has logged a training step."""
    log = ws / "work" / "sweep" / "runs" / "nope-seed0" / "log.jsonl"
    return log.exists() and bool(log.read_text().strip())


def integrity_cases() -> list[Case]:
    nested = "[" * 100_000 + "]" * 100_000
    cases = [
        Case(f"lock/train/{kind}", lambda ws, m=make: train_argv(in_out(m, ".glitchlens.lock")(ws)), refused=refused)
        for kind, make, refused in (("fifo", fifo, True), ("devzero", lambda p: link(p, "/dev/zero"), True),
                                    ("dir", lambda p: p.mkdir(), True), ("big-pid", big_pid_lock, False),
                                    ("garbage", lambda p: p.write_bytes(b"\xff" * 99), False),
                                    ("nested", lambda p: p.write_text(nested), False))]
    cases += [
        Case("overwrite/train/config-fifo", lambda ws: train_argv(in_out(fifo, "config.json")(ws), "--overwrite"),
             refused=True),
        Case("overwrite/train/config-nested", lambda ws: train_argv(in_out(
            lambda p: p.write_text(nested), "config.json")(ws), "--overwrite"), refused=True),
        Case("manifest/train/nested", lambda ws: train_argv(in_out(
            lambda p: p.write_text(nested), ".glitchlens-outputs.json")(ws)), refused=True),
        Case("manifest/diagnose/nested", lambda ws: writer_argv("diagnose", in_out(
            lambda p: p.write_text(nested), ".glitchlens-outputs.json")(ws), ws), refused=True),
        # another run's model copied in to compare, under the name shape a save uses: kept
        Case("save/train/users-tensor-name", lambda ws: train_argv(in_out(
            user_file, "model.0123456789abcdef.safetensors")(ws))),
        Case("save/train/users-config-tmp-name", lambda ws: train_argv(in_out(
            user_file, ".config.json.0123456789abcdef.tmp")(ws))),
    ]

    def task_module(ws, source):
        (ws / "work").mkdir(parents=True, exist_ok=True)
        (ws / "work" / "probe_task.py").write_text(source)
        return ["check-task", "probe_task:Thing"]
    cases += [Case(f"check-task/{kind}", lambda ws, s=source: task_module(ws, s), refused=True)
              for kind, source in TASK_MODULES.items()]
    # a sweep whose process is killed with SIGKILL: its workers must not train on for good
    cases.append(Case("orphans/reproduce/sigkill", lambda ws: [
        "reproduce", "table1", "--models", "nope", "--seeds", "1", "--steps", "3000", "--scale", "learning", "--jobs",
        "1", "--quiet", "--out", ws / "work" / "sweep"], kill_when=training))
    return cases


# --- odd data files ------------------------------------------------------------------------------------

def data_kinds() -> dict[str, Callable[[Path], str]]:
    def text(name, body: bytes):
        def make(ws):
            path = ws / "work" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            return str(path)
        return make

    line = lambda s: (json.dumps({"text": s}) + "\n").encode()   # noqa: E731
    return {
        "fifo": lambda ws: str(fifo(ws / "work" / "d.jsonl")),
        "devzero": lambda ws: "/dev/zero",
        "devzero-link": lambda ws: str(link(ws / "work" / "d.jsonl", "/dev/zero")),
        "sparse": lambda ws: str(sparse(ws / "work" / "d.jsonl")),
        "dir": lambda ws: str((ws / "work").resolve()),
        "missing": lambda ws: str(ws / "work" / "none.jsonl"),
        "empty": text("d.jsonl", b""),
        "binary": text("d.jsonl", bytes(range(256)) * 8),
        "escapes": text("d.jsonl", line("w1\x1b]0;pwned\x07\x1b[2J")),
        "markup-text": text("d.jsonl", line("w1[/]r1[bold]")),
        "list-lines": text("d.jsonl", b"[1, 2]\n"),
        "number-text": text("d.jsonl", b'{"text": 5}\n'),
        "long-line": text("d.jsonl", line("w0" * 2_000_000)),
        "parquet-garbage": text("d.parquet", b"PAR1 not really"),
        "txt-suffix": text("d.txt", line("w0r0" * 4)),
        "loop": lambda ws: str(link(ws / "work" / "d.jsonl", ws / "work" / "d.jsonl")),
        "markup-name": text("d[/]x[bold].jsonl", line("w0i0i0r0" * 2)),
        "control-name": text("d\x1b]0;t\x07.jsonl", line("w0i0i0r0" * 2)),
    }


def data_cases() -> list[Case]:
    cases = []
    for kind, make in data_kinds().items():
        cases.append(Case(f"data/eval/{kind}", lambda ws, m=make: ["eval", "tra-mech", "--data", m(ws), "-n", "2",
                                                                  "--quiet"]))
        cases.append(Case(f"data/train/{kind}", lambda ws, m=make: [
            "train", "--model", "nope", "--steps", "1", "--seq-len", "16", "--n-ctx", "512", "--batch-size", "2",
            "--eval-n", "1", "--quiet", "--data", m(ws), "--out", ws / "work" / "run"]))
    cases.append(Case("data/figures-table1/fifo", lambda ws: ["figures", "--only", "table1", "--table1",
                                                              fifo(ws / "work" / "t.csv"), "--out", ws / "work" / "f"]))
    for kind, body in {"garbage": b"\xff\x00" * 50, "no-columns": b"a,b\n1,2\n", "empty": b""}.items():
        cases.append(Case(f"data/figures-table1/{kind}", lambda ws, b=body: [
            "figures", "--only", "table1", "--quiet", "--table1", (ws / "work" / "t.csv", (ws / "work").mkdir(
                parents=True, exist_ok=True), (ws / "work" / "t.csv").write_bytes(b))[0], "--out", ws / "work" / "f"]))
    cases += [Case("data/figures-table1/devzero", lambda ws: ["figures", "--only", "table1", "--table1", "/dev/zero",
                                                              "--out", ws / "work" / "f"]),
              Case("data/figures-table1/dir", lambda ws: ["figures", "--only", "table1", "--table1", "/tmp",
                                                          "--out", ws / "work" / "f"])]
    return cases


# --- sizes ---------------------------------------------------------------------------------------------

def size_cases() -> list[Case]:
    big = "100000000"
    train = ["train", "--model", "nope", "--steps", "1", "--quiet"]
    sizes = {
        "eval-n-flipflop": lambda ws: ["eval", "tra-mech", "-n", big, "--splits", "iid", "--quiet"],
        "eval-n-automaton": lambda ws: ["eval", "automaton-1l", "-n", big, "--quiet"],
        "eval-batch-size": lambda ws: ["eval", "tra-mech", "--batch-size", "1000000000", "-n", "2", "--quiet"],
        "eval-splits-repeated": lambda ws: ["eval", "tra-mech", "-n", "1", "--quiet", "--splits", "iid," * 500],
        "train-eval-n": lambda ws: [*train, "--eval-n", big, "--out", ws / "work" / "r"],
        "train-seq-len": lambda ws: [*train, "--seq-len", "100000", "--out", ws / "work" / "r"],
        "train-seq-len-huge": lambda ws: [*train, "--seq-len", "1000000000", "--out", ws / "work" / "r"],
        "train-batch-size": lambda ws: [*train, "--batch-size", "1000000000", "--out", ws / "work" / "r"],
        "train-d-model": lambda ws: [*train, "--d-model", "1000000", "--out", ws / "work" / "r"],
        "train-d-model-max": lambda ws: [*train, "--d-model", "16384", "--n-layers", "256", "--out", ws / "work" / "r"],
        "train-n-ctx": lambda ws: [*train, "--n-ctx", "1000000000", "--seq-len", "16", "--out", ws / "work" / "r"],
        "train-n-heads": lambda ws: [*train, "--n-heads", "100000", "--out", ws / "work" / "r"],
        "train-negative-steps": lambda ws: [*train[:-2], "--steps", "-5", "--out", ws / "work" / "r"],
        "explain-pairs": lambda ws: ["explain", "tra-mech", "--pairs", "1000000", "--out", ws / "work" / "e"],
        "explain-n": lambda ws: ["explain", "tra-mech", "-n", big, "--pairs", "1", "--quiet", "--out", ws / "work" / "e"],
        "hunt-seq-len": lambda ws: ["hunt", "tra-mech", "--seq-len", "100000", "--quiet"],
        "hunt-max-len": lambda ws: ["hunt", "tra-mech", "--seq-len", "16", "--max-len", "1000000", "--quiet"],
        "hunt-budget": lambda ws: ["hunt", "tra-mech", "--budget", "1000000000", "--quiet"],
        "hunt-population": lambda ws: ["hunt", "tra-mech", "--population", "10000000", "--seq-len", "16", "--quiet"],
        "hunt-odd-seq-len": lambda ws: ["hunt", "tra-mech", "--seq-len", "7", "--quiet"],
        "diagnose-lengths": lambda ws: ["diagnose", "tra-mech", "--lengths", "100000", "--quiet", "--out", ws / "work" / "d"],
        "diagnose-cache": lambda ws: ["diagnose", "tra-mech", "--cache-sequences", "1000000", "--lengths", "512",
                                      "--quiet", "--out", ws / "work" / "d"],
        "diagnose-n": lambda ws: ["diagnose", "tra-mech", "-n", big, "--lengths", "64", "--cache-sequences", "1",
                                  "--quiet", "--out", ws / "work" / "d"],
        "data-n": lambda ws: ["data", "--split", "train", "-n", "10000000000", "--out", ws / "work" / "d.jsonl"],
        "data-seq-len": lambda ws: ["data", "--split", "train", "-n", "2", "--seq-len", "1000000000", "--out",
                                    ws / "work" / "d.jsonl"],
        "reproduce-seeds": lambda ws: ["reproduce", "table1", "--seeds", "1000000000", "--report-only", "--quiet",
                                       "--out", ws / "work" / "s"],
        "reproduce-jobs": lambda ws: ["reproduce", "table1", "--jobs", "100000", "--report-only", "--quiet",
                                      "--out", ws / "work" / "s"],
        "bench-eval-n": lambda ws: ["bench", "eval", "-n", "1000000000", "--models", "tra-mech", "--no-baseline"],
        "pretrained-build-steps": lambda ws: ["pretrained", "build", "tra-mech", "--steps", "0",
                                              "--root", ws / "work" / "p"],
    }
    return [Case(f"size/{name}", make) for name, make in sizes.items()]


# --- user text in messages -------------------------------------------------------------------------

def text_cases() -> list[Case]:
    markup, control = "x[/]y[bold red]", "x\x1b]0;pwned\x07\x1b[2Jy"
    cases = []
    for label, text in (("markup", markup), ("control", control)):
        cases += [
            Case(f"text/eval-splits/{label}", lambda ws, t=text: ["eval", "tra-mech", "--splits", t, "--quiet"]),
            Case(f"text/eval-name/{label}", lambda ws, t=text: ["eval", t]),
            Case(f"text/diagnose-name/{label}", lambda ws, t=text: ["diagnose", t, "--out", ws / "work" / "d"]),
            Case(f"text/hunt-name/{label}", lambda ws, t=text: ["hunt", t]),
            Case(f"text/reproduce-models/{label}", lambda ws, t=text: ["reproduce", "table1", "--models", t,
                                                                      "--report-only", "--out", ws / "work" / "s"]),
            Case(f"text/reproduce-recipes/{label}", lambda ws, t=text: ["reproduce", "recipes", "--recipes", t,
                                                                       "--report-only", "--out", ws / "work" / "s"]),
            Case(f"text/figures-only/{label}", lambda ws, t=text: ["figures", "--only", t, "--out", ws / "work" / "f"]),
            Case(f"text/pretrained-list/{label}", lambda ws, t=text: ["pretrained", "list", t]),
            Case(f"text/pretrained-build/{label}", lambda ws, t=text: ["pretrained", "build", t, "--root",
                                                                      ws / "work" / "p"]),
            Case(f"text/check-mechanism/{label}", lambda ws, t=text: ["check-mechanism", t]),
            Case(f"text/check-mechanism-spec/{label}", lambda ws, t=text: ["check-mechanism", f"{t}:Cls"]),
            Case(f"text/mechanism-flag/{label}", lambda ws, t=text: ["eval", "tra-mech", "--mechanism", f"n={t}:C"]),
            Case(f"text/train-attn-opt/{label}", lambda ws, t=text: [
                "train", "--model", "nope", "--steps", "1", "--attn-opt", t, "--out", ws / "work" / "r"]),
            Case(f"text/bench-models/{label}", lambda ws, t=text: ["bench", "eval", "--models", t]),
            Case(f"text/device/{label}", lambda ws, t=text: ["eval", "tra-mech", "-n", "1", "--device", t]),
        ]
    return cases


# --- damaged sweep folders and pretrained roots ---------------------------------------------------

def sweep_kinds() -> dict[str, Callable[[Path], None]]:
    def result(body):
        def make(run: Path):
            run.mkdir(parents=True, exist_ok=True)
            if callable(body):
                body(run / "result.json")
            else:
                (run / "result.json").write_text(body if isinstance(body, str) else json.dumps(body))
        return make

    return {"list": result([1, 2]), "string": result('"a string"'), "empty-object": result({}),
            "splits-string": result({**VALID_RESULT, "splits": "x"}),
            "split-number": result({**VALID_RESULT, "splits": {"iid": 5}}),
            "no-model": result({k: v for k, v in VALID_RESULT.items() if k != "model"}),
            "seed-string": result({**VALID_RESULT, "seed": "zero"}),
            "nan-accuracy": result(json.dumps(VALID_RESULT).replace("0.5", "NaN")),
            "truncated": result(json.dumps(VALID_RESULT)[:40]),
            "binary": result(lambda p: p.write_bytes(b"\xff" * 64)),
            "fifo": result(fifo), "devzero": result(lambda p: link(p, "/dev/zero")), "sparse": result(sparse),
            "dir": result(lambda p: p.mkdir())}


def sweep_cases() -> list[Case]:
    cases = []
    for what, run_name, extra in (("table1", "runs/tra-seed0", ["--models", "tra", "--seeds", "1"]),
                                  ("recipes", "llama/runs/tra-seed0", ["--models", "tra", "--seeds", "1",
                                                                      "--recipes", "llama"]),
                                  ("app-a", None, [])):
        for kind, make in sweep_kinds().items():
            if run_name is None and kind not in ("list", "fifo", "no-model"):
                continue
            def argv(ws, w=what, r=run_name, e=extra, m=make):
                out = ws / "work" / "sweep"
                m(out / (r or "runs/tra-T512-seed0"))
                return ["reproduce", w, *e, "--report-only", "--quiet", "--out", out]
            cases.append(Case(f"sweep/{what}/{kind}", argv))
        cases.append(Case(f"sweep/{what}/no-runs", lambda ws, w=what, e=extra: [
            "reproduce", w, *e, "--report-only", "--quiet", "--out", ws / "work" / "sweep"]))
    return cases


def root_kinds() -> dict[str, Callable[[Path], str]]:
    def entry(change=None, name="tda-mech"):
        def make(ws):
            root = ws / "work" / "root"
            ck = Path(shutil.copytree(PRETRAINED_DIR / name, root / name))
            if change:
                change(ck)
            return str(root)
        return make

    def meta(key, value):
        return entry(lambda ck: edit_config(ck, lambda c: c["metadata"].__setitem__(key, value)))

    return {
        "config-fifo": entry(lambda ck: ((ck / "config.json").unlink(), fifo(ck / "config.json"))),
        "config-devzero": entry(lambda ck: ((ck / "config.json").unlink(), link(ck / "config.json", "/dev/zero"))),
        "config-dir": entry(lambda ck: ((ck / "config.json").unlink(), (ck / "config.json").mkdir())),
        "config-garbage": entry(lambda ck: (ck / "config.json").write_bytes(b"\xff{")),
        "accuracy-nan": meta("accuracy", {"iid": {"sequence_accuracy": float("nan"), "read_accuracy": 1.0}}),
        "accuracy-string": meta("accuracy", "high"),
        "accuracy-list": meta("accuracy", [1, 2]),
        "command-escapes": meta("command", "glitchlens \x1b]0;pwned\x07\x1b[2J [/]"),
        "description-markup": meta("description", "[/][bold]x"),
        "name-override": meta("name", "[/]"),
        "weights-garbage": entry(lambda ck: weights(ck).write_bytes(b"junk" * 10)),
        "weights-fifo": entry(lambda ck: (weights(ck).unlink(), fifo(ck / "model.safetensors"),
                                          edit_config(ck, lambda c: c["files"].__setitem__("model", "model.safetensors")))),
        "n-layers-string": entry(lambda ck: edit_config(ck, lambda c: c["model"].__setitem__("n_layers", "two"))),
        "entry-is-file": lambda ws: (user_file(ws / "work" / "root" / "tda-mech"), str(ws / "work" / "root"))[1],
        "root-is-file": lambda ws: str(user_file(ws / "work" / "root")),
        "root-is-fifo": lambda ws: str(fifo(ws / "work" / "root")),
        "root-markup": lambda ws: str((ws / "work" / "r[/]x").mkdir(parents=True) or ws / "work" / "r[/]x"),
    }


def root_cases() -> list[Case]:
    return [Case(f"root/{form}/{kind}", lambda ws, m=make, f=form: [
        "pretrained", "list", *({"table": [], "json": ["--json"], "entry": ["tda-mech"]}[f]), "--root", m(ws)])
        for kind, make in root_kinds().items() for form in ("table", "json", "entry")]


# --- mechanisms of one's own that misbehave ------------------------------------------------------

MECHANISMS = {
    "syntax-error": "class Broken(:\n",
    "import-raises": "raise RuntimeError('boom at import')\n",
    "import-loops": "while True:\n    pass\n",
    "import-exits": "import sys\nsys.exit(3)\n",
    "not-a-class": "Thing = 5\n",
    "forward-loops": ("from plugin_mechanisms import SigmoidAttention\nclass Thing(SigmoidAttention):\n"
                      "    def forward(self, *a, **k):\n        while True:\n            pass\n"),
    "forward-raises": ("from plugin_mechanisms import SigmoidAttention\nclass Thing(SigmoidAttention):\n"
                       "    def forward(self, *a, **k):\n        raise KeyError('x')\n"),
    "init-loops": ("from plugin_mechanisms import SigmoidAttention\nclass Thing(SigmoidAttention):\n"
                   "    def __init__(self, *a, **k):\n        while True:\n            pass\n"),
    "forward-escapes": ("from plugin_mechanisms import SigmoidAttention\nclass Thing(SigmoidAttention):\n"
                        "    def forward(self, *a, **k):\n        raise ValueError('\\x1b]0;pwned\\x07[/]')\n"),
}


def mechanism_cases() -> list[Case]:
    def argv(ws, source, how):
        (ws / "work").mkdir(parents=True, exist_ok=True)
        (ws / "work" / "probe_mech.py").write_text(source)
        if how == "check":
            return ["check-mechanism", "probe_mech:Thing", "--json"]
        return ["eval", "tra-mech", "-n", "1", "--quiet", "--mechanism", "probe_mech:Thing"]
    return [Case(f"mechanism/{how}/{kind}", lambda ws, s=source, h=how: argv(ws, s, h))
            for kind, source in MECHANISMS.items() for how in ("check", "flag")]


# --- resuming ----------------------------------------------------------------------------------------

def resume_cases() -> list[Case]:
    def run(ws, change=None):
        out = Path(shutil.copytree(ws.parent.parent / "fixtures" / "run", ws / "work" / "run"))
        if change:
            change(out, ws)
        return out

    def log_as(make):
        return lambda out, ws: ((out / "log.jsonl").unlink(), make(out / "log.jsonl", ws))

    resume = ["train", "--resume", "--quiet", "--out"]
    return [
        Case("resume/out-only", lambda ws: [*resume, run(ws)]),
        Case("resume/other-lr", lambda ws: [*resume, run(ws), "--lr", "0.5"]),
        Case("resume/other-model", lambda ws: [*resume, run(ws), "--model", "tra"]),
        Case("resume/other-preset", lambda ws: [*resume, run(ws), "--preset", "mini"]),
        Case("resume/more-eval", lambda ws: [*resume, run(ws), "--eval-n", "2"]),
        Case("resume/log-link-outside", lambda ws: [*resume, run(ws, log_as(
            lambda p, ws: link(p, ws / "outside" / "sentinel.txt")))]),
        Case("resume/log-dangling", lambda ws: [*resume, run(ws, log_as(lambda p, ws: link(p, ws / "outside" / "new")))]),
        Case("resume/log-fifo", lambda ws: [*resume, run(ws, log_as(lambda p, ws: fifo(p)))]),
        Case("resume/log-dir", lambda ws: [*resume, run(ws, log_as(lambda p, ws: p.mkdir()))]),
        Case("resume/training-string", lambda ws: [*resume, run(ws, lambda out, ws: edit_config(
            out, lambda c: c.__setitem__("training", "x")))]),
        Case("resume/step-string", lambda ws: [*resume, run(ws, lambda out, ws: edit_config(
            out, lambda c: c["training"].__setitem__("step", "x")))]),
        Case("resume/no-checkpoint", lambda ws: [*resume, ws / "work" / "none"]),
        Case("resume/fresh-over-users-log", lambda ws: [
            "train", "--model", "nope", "--steps", "1", "--seq-len", "16", "--n-ctx", "512", "--quiet", "--out",
            user_file(ws / "work" / "run" / "log.jsonl").parent]),
        Case("resume/overwrite-keeps-outside", lambda ws: [
            "train", "--model", "nope", "--steps", "1", "--seq-len", "16", "--n-ctx", "512", "--quiet", "--overwrite",
            "--out", link(ws / "work" / "run" / "log.jsonl", ws / "outside" / "sentinel.txt").parent]),
    ]


def all_cases() -> list[Case]:
    return [*writer_cases(), *checkpoint_cases(), *data_cases(), *size_cases(), *text_cases(), *sweep_cases(),
            *root_cases(), *mechanism_cases(), *resume_cases(), *integrity_cases()]


# --- running and judging -------------------------------------------------------------------------------

def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every entry under ``roots`` (links not followed): its kind, size and modification time."""
    seen = {}
    for root in roots:
        if not os.path.lexists(root):
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = [name for name in dirs if name != "__pycache__"]   # Python's own byte code
            for name in dirs + files:
                path = Path(folder) / name
                info = path.lstat()
                seen[str(path)] = (info.st_mode >> 12, info.st_size, info.st_mtime_ns)
    return seen


def sentinels(work: Path) -> dict[str, bytes]:
    found = {}
    for folder, _, files in os.walk(work):
        for name in files:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink() and path.stat().st_size < 4096:
                try:
                    body = path.read_bytes()
                except OSError:
                    continue
                if body.startswith(SENTINEL):
                    found[str(path)] = body
    return found


def start(case: Case, ws: Path, spawn: bool) -> tuple[int, list, Path]:
    """Prepare the workspace and start the case; returns the child's pid, its argv and its folder."""
    for sub in ("work", "outside", "cwd"):
        (ws / sub).mkdir(parents=True, exist_ok=True)
    user_file(ws / "outside" / "sentinel.txt")
    argv = [str(a) for a in case.make(ws)]
    stdout, stderr = open(ws / "stdout", "wb"), open(ws / "stderr", "wb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ws / "work"), str(REPO / "tests"), str(REPO)])}
    if spawn:
        proc = subprocess.Popen([sys.executable, "-m", "interp.cli", *argv], cwd=ws / "cwd", stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=stderr, env=env, start_new_session=True)
        return proc.pid, argv, ws
    pid = os.fork()
    if pid == 0:   # the child: the glitchlens script, in a process of its own
        code = 1
        try:
            os.setsid()
            os.chdir(ws / "cwd")
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(stdout.fileno(), 1)
            os.dup2(stderr.fileno(), 2)
            sys.path[:0] = [str(ws / "work"), str(REPO / "tests")]
            os.environ["PYTHONPATH"] = env["PYTHONPATH"]
            sys.argv = ["glitchlens", *argv]
            from interp.cli import main

            code = main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code or 0)
    stdout.close(), stderr.close()
    return pid, argv, ws


def session_members(session: int) -> list[int]:
    """The processes of ``session`` (each case runs in a session of its own)."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session:
                    members.append(int(entry.name))
            except OSError:   # gone meanwhile
                pass
    return members


ORPHAN_GRACE_S = 90.0   # how long a killed command's workers have to save and stop


def orphans_of(session: int) -> list[int]:
    """The processes of a killed command's ``session`` still alive after :data:`ORPHAN_GRACE_S`
    (then killed, so that the probe goes on)."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while session_members(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = session_members(session)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def judge(case: Case, argv: list, ws: Path, status: int | None, seconds: float, before: dict,
          orphans: list[int] | None = None) -> dict:
    err = (ws / "stderr").read_text(errors="replace")
    shown = [line.rsplit("\r", 1)[-1] for line in err.split("\n")]
    # what is left of the message once warnings and argparse's usage lines (before its error line) are set aside
    shown = [line for line in shown if line.strip() and "Warning" not in line and not line.startswith(("  ", "usage:"))]
    flags = []
    if status is None:
        flags.append("hang")
    if "Traceback" in err:
        flags.append("traceback")
    changed = {path for path, body in before["sentinels"].items()
               if not os.path.isfile(path) or os.path.islink(path) or Path(path).read_bytes() != body}
    if changed:
        flags.append("data loss")
    outside = snapshot(ws / "outside", ws / "cwd", PRETRAINED_DIR)
    if outside != before["outside"]:
        flags.append("write outside")
    if "\x1b" in err or "\x1b" in (ws / "stdout").read_text(errors="replace"):
        flags.append("raw escape")
    if case.refused and status == 0:
        flags.append("silent result")
    if orphans:
        flags.append("orphan")
    outcome = ("killed as planned" if orphans is not None else
               "hang" if status is None else "result" if status == 0 or failed_checks(argv, status, ws) else
               "one-line error" if len(shown) == 1 and shown[0].startswith("glitchlens") else "other failure")
    return {"case": case.name, "argv": argv, "status": status, "seconds": round(seconds, 2), "outcome": outcome,
            "flags": flags, "stderr_tail": shown[-3:], "changed": sorted(changed),
            "outside": sorted(set(outside) ^ set(before["outside"]) | {p for p in outside if outside[p] != before[
                "outside"].get(p)})[:5]}


def failed_checks(argv: list, status: int, ws: Path) -> bool:
    """Whether the case is ``check-mechanism`` reporting failed checks: exit status 1 with its
    JSON report, the command's result for a broken mechanism."""
    try:
        return argv[0] == "check-mechanism" and status == 1 and "checks" in json.loads((ws / "stdout").read_text())
    except ValueError:
        return False


def make_fixtures(fixtures: Path) -> None:
    """A finished tiny run (for --resume) and a table1.csv (for figures), made once."""
    fixtures.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "interp.cli"]
    if not (fixtures / "run" / "config.json").exists():
        subprocess.run([*cli, "train", "--model", "nope", "--steps", "2", "--seq-len", "16", "--n-ctx", "512",
                        "--batch-size", "2", "--eval-n", "1", "--quiet", "--out", fixtures / "run"], check=True,
                       cwd=REPO)
    if not (fixtures / "tra-other" / "config.json").exists():   # tra-mech's architecture, other weights
        subprocess.run([*cli[:1], "-c", "import sys, torch, models; m = models.load_pretrained('tra-mech'); "
                        "[p.data.add_(0.01) for p in m.parameters()]; models.save(sys.argv[1], m)",
                        fixtures / "tra-other"], check=True, cwd=REPO)
    if not (fixtures / "table1.csv").exists():
        finished_runs(fixtures / "sweep")
        subprocess.run([*cli, "reproduce", "table1", "--models", "tra", "--seeds", "1", "--report-only", "--quiet",
                        "--out", fixtures / "sweep"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        shutil.copy(fixtures / "sweep" / "table1.csv", fixtures / "table1.csv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the workspaces and results.jsonl")
    parser.add_argument("--jobs", type=int, default=2, help="cases at once")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this (or one of these, "
                        "comma-separated)")
    parser.add_argument("--spawn", action="store_true", help="a fresh python per case instead of a fork")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds before a case counts as a hang")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args()
    cases = [case for case in all_cases() if args.only is None or any(part in case.name for part in args.only.split(","))]
    if args.list:
        print("\n".join(case.name for case in cases), f"\n{len(cases)} cases", sep="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    make_fixtures(args.out / "fixtures")
    if not args.spawn:   # imported once, before any fork: each case then starts at once
        import interp.cli  # noqa: F401
        import interp.diagnose  # noqa: F401
        import interp.explain  # noqa: F401
        import interp.hunt  # noqa: F401
        import interp.training.loop  # noqa: F401
    results, running, queue = [], {}, list(enumerate(cases))
    with open(args.out / "results.jsonl", "w") as log:
        while queue or running:
            while queue and len(running) < args.jobs:
                i, case = queue.pop(0)
                ws = args.out / "cases" / f"{i:03d}"
                shutil.rmtree(ws, ignore_errors=True)
                try:
                    pid, argv, ws = start(case, ws, args.spawn)
                except Exception as err:   # the probe's own setup failed: say so, go on
                    print(f"setup of {case.name} failed: {err!r}", file=sys.stderr)
                    continue
                before = {"sentinels": sentinels(ws / "work"), "outside": snapshot(ws / "outside", ws / "cwd",
                                                                                   PRETRAINED_DIR)}
                running[pid] = (case, argv, ws, time.monotonic(), before)
            time.sleep(0.05)
            for pid, (case, argv, ws, t0, before) in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - t0
                orphans = None
                # killed once it is training, or before the time limit would call it a hang
                if not done and case.kill_when is not None and (case.kill_when(ws) or elapsed >= args.timeout - 5):
                    os.kill(pid, signal.SIGKILL)   # the command alone, as an out-of-memory killer would
                    done, status = os.waitpid(pid, 0)
                    orphans = orphans_of(pid)
                if not done and elapsed < args.timeout:
                    continue
                if not done:   # a hang: the child and whatever it started
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status) if done else None
                result = judge(case, argv, ws, code, elapsed, before, orphans)
                results.append(result)
                log.write(json.dumps(result) + "\n")
                log.flush()
                del running[pid]
                mark = ", ".join(result["flags"]) or result["outcome"]
                print(f"[{len(results):3d}/{len(cases)}] {case.name}: {mark} ({elapsed:.1f} s)", flush=True)
    outcomes = Counter(r["outcome"] for r in results)
    flags = Counter(flag for r in results for flag in r["flags"])
    print(f"\n{len(results)} cases: " + ", ".join(f"{n} {what}" for what, n in outcomes.most_common()))
    for what in ("data loss", "write outside", "traceback", "hang", "silent result", "orphan", "raw escape"):
        print(f"{what}: {flags.get(what, 0)}" + "".join(f"\n  {r['case']}" for r in results if what in r["flags"]))
    return 1 if any(flags.get(w) for w in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())

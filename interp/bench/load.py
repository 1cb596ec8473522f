"""Benchmarks of what a user waits for on a shared machine, behind ``glitchlens bench threads``
and ``glitchlens bench demo``: the hot paths at one and two threads, each with and without a
competing busy process that the benchmark starts itself; ``glitchlens --help`` against a bare
Python start; ``make demo`` with and without the busy process. Every figure is a ratio of two
times measured in the same run, the rounds interleaved so that a change in the other jobs' load
falls on both."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

THREADS_CSV = "threads.csv"
STARTUP_CSV = "startup.csv"
TRAIN_CSV = "train.csv"
SEEDS_CSV = "seeds.csv"  # glitchlens bench seeds --out (interp.bench.bench_seeds's rows)
DEMO_CSV = "demo.csv"
EVAL_CSV = "eval.csv"  # glitchlens bench eval --out (interp.bench.bench_eval's rows)
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def busy_process() -> Iterator[None]:
    """A competing process that keeps one core busy (a Python loop) while the block runs."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)   # let the scheduler see it
        yield
    finally:
        process.kill()
        process.wait()


def thread_workloads(n: int = 8, seq_len: int = 512) -> dict[str, Callable[[], object]]:
    """The hot paths timed by :func:`bench_threads`, on ``rope-mech`` and ``n`` iid sequences of
    ``seq_len`` tokens: the forward (eval mode, no gradients: its batch shared out to the
    threads, :mod:`models.workers`), a training step (forward, backward, AdamW) and the capture
    of every layer's pattern that ``glitchlens diagnose`` runs (:func:`interp.metrics.capture_maps`)."""
    import copy

    import torch

    from interp.metrics import capture_maps
    from interp.tasks import load_split
    from interp.training.setup import TrainConfig, make_optimizer
    from models import load_pretrained

    model = load_pretrained("rope-mech")
    tokens = torch.from_numpy(load_split("iid", n)[:, :seq_len].astype("int64"))
    trained = copy.deepcopy(model).train()
    optimizer = make_optimizer(trained, TrainConfig())

    @torch.no_grad()
    def forward():
        model(tokens)

    def training_step():
        loss = trained(tokens, return_type="loss")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return {"forward": forward, "training step": training_step,
            "diagnose capture": lambda: capture_maps(model, tokens.numpy(), ["pattern"])}


def bench_threads(repeats: int = 3, counts: tuple[int, ...] = (1, 2)) -> list[dict]:
    """Each of :func:`thread_workloads` at each thread count in ``counts``, without and with
    :func:`busy_process`: one row per (workload, competing process), the best of ``repeats``
    rounds at each count and the ratio of the last count's time to the first's."""
    import torch

    workloads = thread_workloads()
    for run in workloads.values():   # warm-up: first-call allocations and lazy imports
        run()
    threads, best = torch.get_num_threads(), {}
    try:
        for _ in range(repeats):   # rounds: loads and counts alternate
            for competing in ("none", "1 busy process"):
                with busy_process() if competing != "none" else contextlib.nullcontext():
                    for name, run in workloads.items():
                        for count in counts:
                            torch.set_num_threads(count)
                            start = time.perf_counter()
                            run()
                            key = (name, competing, count)
                            best[key] = min(best.get(key, float("inf")), time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    rows = []
    for name in workloads:
        for competing in ("none", "1 busy process"):
            row = {"workload": name, "competing": competing}
            row.update({f"{count} threads s": best[name, competing, count] for count in counts})
            row[f"{counts[-1]}/{counts[0]}"] = best[name, competing, counts[-1]] / best[name, competing, counts[0]]
            rows.append(row)
    return rows


def child_cpu_seconds(command: list[str], repeats: int) -> tuple[float, float]:
    """The least CPU seconds (user + system) and wall seconds of ``repeats`` runs of ``command``,
    which may write its bytecode caches, as an installed package's start does."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu = wall = float("inf")
    for _ in range(repeats):
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, check=True, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return cpu, wall


def bench_startup(repeats: int = 7) -> list[dict]:
    """``glitchlens --help`` (``python -m interp.cli --help``) against a bare ``python -c pass``,
    runs alternating: CPU seconds (what the start costs, whatever the load) and wall seconds."""
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "glitchlens --help": [sys.executable, "-m", "interp.cli", "--help"]}
    best = {name: (float("inf"), float("inf")) for name in commands}
    for command in commands.values():   # untimed: writes the bytecode caches an install would have
        child_cpu_seconds(command, 1)
    for _ in range(repeats):
        for name, command in commands.items():
            cpu, wall = child_cpu_seconds(command, 1)
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    bare = best["python -c pass"]
    return [{"command": name, "cpu_s": cpu, "wall_s": wall, "cpu_ratio": cpu / bare[0], "wall_ratio": wall / bare[1]}
            for name, (cpu, wall) in best.items()]


def bench_demo(root: Path = ROOT) -> list[dict]:
    """``make demo`` once without and once with :func:`busy_process`, each into a folder of its
    own that is deleted afterwards: wall seconds and the ratio to the first, and each split's
    sequences, reads, read errors and sequence accuracy from the demo's own evaluation (the
    README's quick start reports the first run's: :func:`demo_sentence`). Slow (minutes each)."""
    rows = []
    for competing in ("none", "1 busy process"):
        with tempfile.TemporaryDirectory() as tmp, \
                busy_process() if competing != "none" else contextlib.nullcontext():
            start = time.perf_counter()
            subprocess.run(["make", "-C", str(root), "demo", f"DEMO={tmp}/demo", f"DEMO_EVAL_JSON={tmp}/eval.json"],
                           check=True, stdout=subprocess.DEVNULL)
            row = {"competing": competing, "wall_s": time.perf_counter() - start}
            for split, result in json.loads(Path(tmp, "eval.json").read_text()).items():
                row.update({f"{split}_{key}": result[key]
                            for key in ("sequences", "reads", "read_errors", "sequence_accuracy")})
            rows.append(row)
    for row in rows:
        row["ratio"] = row["wall_s"] / rows[0]["wall_s"]
    return rows


def demo_sentence(root: Path = ROOT) -> str:
    """What ``make demo`` printed in the committed ``glitchlens bench demo`` run (its run without
    the busy process), for the README's quick start."""
    import pandas as pd

    path = root / BENCH_DIR / DEMO_CSV
    frame = pd.read_csv(path).set_index("competing") if path.exists() else None
    if frame is None or "sparse_read_errors" not in frame.columns:
        return "(`glitchlens bench demo --out runs/bench` has not recorded the demo's evaluation)"
    from interp.metrics.anatomy import wilson_interval

    run = frame.loc["none"]
    splits = [s for s in ("iid", "dense", "sparse") if f"{s}_reads" in frame.columns]

    def percent(share: float) -> str:   # one significant figure below 0.1%, so no interval reads 0.0-0.0%
        return f"{100 * share:.1f}" if share == 0 or share >= 0.001 else f"{100 * share:.1g}"

    def wrong(split: str) -> str:   # the share of one model's reads, so the interval is over its reads
        errors, reads = run[f"{split}_read_errors"], run[f"{split}_reads"]
        low, high = wilson_interval(errors, reads)
        return (f"`{split}` {errors:,.0f} of {reads:,.0f} reads wrong ({percent(errors / reads)}%, 95% Wilson "
                f"{percent(low)}-{percent(high)}%), {100 * run[f'{split}_sequence_accuracy']:.1f}% of the sequences right")

    return f"the first {run[f'{splits[0]}_sequences']:,.0f} sequences of each split: " + "; ".join(map(wrong, splits))


def write_rows(out: str, name: str, rows: list[dict]) -> None:
    """``rows`` as the CSV ``out/name``, through the staged writer (only over a file it wrote)."""
    import pandas as pd

    from interp.outputs import staged

    with staged(out, overwrite=True, names=(name,)) as stage:
        pd.DataFrame(rows).to_csv(stage / name, index=False)


# What `glitchlens bench threads --out runs/bench` and `glitchlens bench demo --out runs/bench` wrote.
BENCH_DIR = "runs/bench"


def load_markdown(root: Path = ROOT) -> str:
    """The block of docs/results/benchmarks.md: the thread ratios, the start-up ratio and, once
    measured, ``make demo``'s, each read from its CSV under :data:`BENCH_DIR`."""
    import pandas as pd

    threads = pd.read_csv(root / BENCH_DIR / THREADS_CSV)
    ratio = [c for c in threads.columns if "/" in c][0]
    lines = [f"| workload | competing process | {' | '.join(c for c in threads.columns if c.endswith(' s'))} | {ratio} |",
             "|---|---|" + "---|" * (len(threads.columns) - 2)]
    lines += [f"| {r['workload']} | {r['competing']} | "
              + " | ".join(f"{r[c]:.3f}" for c in threads.columns if c.endswith(" s")) + f" | {r[ratio]:.2f} |"
              for _, r in threads.iterrows()]
    startup = pd.read_csv(root / BENCH_DIR / STARTUP_CSV).set_index("command")
    help_row = startup.loc["glitchlens --help"]
    lines += ["", f"`glitchlens --help` costs {help_row.cpu_ratio:.1f}x the CPU time of a bare `python -c pass` "
                  f"({help_row.cpu_s * 1000:.0f} ms against {startup.loc['python -c pass'].cpu_s * 1000:.0f} ms) "
                  f"and {help_row.wall_ratio:.1f}x its wall time."]
    demo = root / BENCH_DIR / DEMO_CSV
    if demo.exists():
        frame = pd.read_csv(demo).set_index("competing")
        lines += ["", f"`make demo` took {frame.wall_s['none']:.0f} s without and {frame.wall_s['1 busy process']:.0f} s "
                      f"with a competing busy process: {frame.ratio['1 busy process']:.2f}x."]
    else:
        lines += ["", "`make demo` with and without a competing busy process (`glitchlens bench demo --out "
                      "runs/bench`) has not been measured on the committed code."]
    return "\n".join(lines) + "\n"


def batched_seeds_markdown(root: Path = ROOT) -> str:
    """The block of docs/results/benchmarks.md for ``glitchlens bench seeds --out runs/bench``: per
    model one seed's step alone, the seeds' batched step, and their ratio against the goal of 1.5."""
    import pandas as pd

    path = root / BENCH_DIR / SEEDS_CSV
    if not path.exists():
        return "`glitchlens bench seeds --out runs/bench` has not been run on the committed code.\n"
    frame = pd.read_csv(path)
    lines = ["| model | seeds | device | threads | one seed alone, s / step | batched, s / step | batched / one | "
             "per seed |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.model} | {r.seeds} | {r.device} | {r.threads} | {r.alone_step_s:.3f} | {r.batched_step_s:.3f} | "
              f"**{r.batched_over_one:.2f}** | {r.per_seed:.2f} |" for r in frame.itertuples()]
    met = "met" if (frame.batched_over_one <= 1.5).all() else "not met"
    return ("\n".join(lines) + f"\n\nThe goal, {int(frame.seeds.iloc[0])} seeds batched in at most 1.5x one seed's "
            f"step, is {met} here (largest {frame.batched_over_one.max():.2f}).\n")


def train_markdown(root: Path = ROOT) -> str:
    """The block of docs/results/benchmarks.md for ``glitchlens bench train --out runs/bench``: each
    model's training step and its ratio to RoPE's, and the largest ratio of an attention mechanism
    against the goal of 1.3 (the LSTM has no attention)."""
    import pandas as pd

    path = root / BENCH_DIR / TRAIN_CSV
    if not path.exists():
        return "`glitchlens bench train --out runs/bench` has not been run on the committed code.\n"
    frame = pd.read_csv(path)
    lines = ["| " + " | ".join(frame.model) + " |", "|" + "---|" * len(frame),
             "| " + " | ".join(f"{s:.3f}" for s in frame.step_s) + " |",
             "| " + " | ".join(f"{r:.2f}" for r in frame.ratio_to_rope) + " |"]
    attention = frame[frame.model != "lstm"].set_index("model").ratio_to_rope
    threads = int(frame.threads.iloc[0])
    return ("\n".join(lines) + f"\n\nSeconds per step (first row) and ratio to RoPE's (second), {threads} "
            f"thread{'s' if threads > 1 else ''}: the largest ratio of an attention mechanism is "
            f"{attention.max():.2f} ({attention.idxmax()}); the goal is 1.3 or less for every one.\n")


def eval_markdown(root: Path = ROOT) -> str:
    """The block of docs/results/benchmarks.md for ``glitchlens bench eval --out runs/bench``: each
    specimen's evaluation on the scored-prefix measure against the square matmul of the same run at
    the evaluation's own threads (its rate beside it), the computed share, the native kernels'
    gain and that of the norms' and SwiGLU's passes alone (where measured), and the lowest share
    against the goal of 0.8."""
    import pandas as pd

    path = root / BENCH_DIR / EVAL_CSV
    if not path.exists():
        return "`glitchlens bench eval --out runs/bench` has not been run on the committed code.\n"
    frame = pd.read_csv(path).rename(columns={"GFLOP/s": "rate", "square_GFLOP/s": "square"})
    passes = "passes_gain" in frame.columns   # measured since the norms and SwiGLU got their passes
    lines = ["| model | s / 1000 seq | model GFLOP/s | square GFLOP/s | of roofline | computed share | native gain |"
             + (" norm and MLP passes' gain |" if passes else ""), "|---|---|---|---|---|---|---|" + ("---|" if passes else "")]
    lines += [f"| {r.model} | {r.eval_s * 1000 / r.n:.2f} | {r.rate:.1f} | {r.square:.1f} | **{r.of_roofline:.2f}** | "
              f"{r.computed_share:.2f} | {r.native_gain:.2f}x |" + (f" {r.passes_gain:.2f}x |" if passes else "")
              for r in frame.itertuples(index=False)]
    lowest, threads = frame.set_index("model").of_roofline, int(frame.threads.iloc[0])
    text = (f"First {int(frame.n.iloc[0])} `sparse` sequences, {threads} thread{'s' if threads > 1 else ''}: the lowest "
            f"share of the roofline is {lowest.min():.2f} ({lowest.idxmin()}); the goal is 0.8 or more for every specimen.")
    if "mlp_matmul_of_square" in frame.columns:   # the product at the models' own MLP shape, against the same square
        share = frame.mlp_matmul_of_square
        text += (f" The matmul at the models' MLP shape, `[32768, d_model] x [d_model, d_mlp]`, alone ran at "
                 f"{share.min():.2f}-{share.max():.2f} of the same squares.")
    return "\n".join(lines) + "\n\n" + text + "\n"


def run(what: str, args) -> list[tuple[str, list[dict]]]:
    """The tables of ``glitchlens bench threads`` or ``bench demo``, each with its title, the CSVs
    written to ``args.out`` when given."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    if what == "demo":
        rows = bench_demo()
        if args.out:
            write_rows(args.out, DEMO_CSV, rows)
        return [(f"make demo without and with a competing busy process, {os.cpu_count()} CPUs, load average "
                 f"{load} at the end", rows)]
    threads, startup = bench_threads(args.repeats), bench_startup()
    if args.out:
        write_rows(args.out, THREADS_CSV, threads)
        write_rows(args.out, STARTUP_CSV, startup)
    return [(f"rope-mech, 8 iid sequences of 512 tokens, best of {args.repeats} interleaved rounds, {os.cpu_count()} "
             f"CPUs, load average {load} at the end (the ratio: 2 threads' time over 1 thread's)", threads),
            ("start-up: glitchlens --help against a bare python -c pass, best of 7 alternating runs", startup)]

"""Benchmarks behind ``glitchlens bench``: every figure is printed next to the baseline it is
compared with, both measured in the same run on the same machine."""

from __future__ import annotations

import os
import time

import numpy as np
import torch


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def python_ffl_sequence(rng: np.random.Generator, seq_len: int, p_i: float) -> list[int]:
    """A straightforward per-token Python generator of one FFL(p_i) sequence: the
    baseline the vectorised generator is measured against."""
    p_w = (1 - p_i) / 2
    tokens, memory = [], 0
    for pair in range(seq_len // 2):
        u = rng.random()
        instr = 0 if pair == 0 else 1 if pair == seq_len // 2 - 1 else (0 if u < p_w else 1 if u < 2 * p_w else 2)
        bit = memory if instr == 1 else int(rng.random() < 0.5)
        if instr == 0:
            memory = bit
        tokens += [instr, 3 + bit]
    return tokens


def bench_data(repeats: int = 3) -> list[dict]:
    from interp.tasks import SPLITS, load_split

    rows = []
    for split in SPLITS.values():
        vectorised = _best_time(lambda: load_split(split.name), repeats)
        n_python = min(split.size, 1000)
        rng = np.random.default_rng(0)
        python = _best_time(lambda: [python_ffl_sequence(rng, 512, split.p_i) for _ in range(n_python)], 1)
        python_full = python * split.size / n_python
        rows.append({"split": split.name, "sequences": split.size, "vectorised_s": vectorised,
                     "python_s": python_full, "python_measured_on": n_python, "speedup": python_full / vectorised})
    return rows


def bench_models(repeats: int = 3, preset: str = "mini", seq_len: int = 512, batch_size: int = 8) -> list[dict]:
    """Training-step time (forward + backward + AdamW) of every mechanism, relative to softmax + RoPE."""
    from interp.train import TrainConfig, make_optimizer
    from models import MODEL_NAMES, ModelConfig, build_model

    torch.manual_seed(0)
    tokens = torch.randint(0, 5, (batch_size, seq_len))
    rows = []
    for name in MODEL_NAMES:
        torch.manual_seed(0)
        model = build_model(ModelConfig.from_preset(name, preset, n_ctx=seq_len))
        optimizer = make_optimizer(model, TrainConfig())

        def step():
            loss = model(tokens).float().logsumexp(-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        step()
        rows.append({"model": name, "step_s": _best_time(step, repeats)})
    baseline = next(r["step_s"] for r in rows if r["model"] == "rope")
    for r in rows:
        r["ratio_to_rope"] = r["step_s"] / baseline
    return rows


def bench_diagnose(mechanisms: tuple[str, ...] = ("rope", "tda"), preset: str = "mini",
                   target_s: float = 60.0) -> list[dict]:
    """``glitchlens diagnose`` with its default settings on a freshly initialised checkpoint of
    each mechanism (nothing is trained: the cost does not depend on the weights), against the
    target: ``rope``, the softmax baseline, and ``tda``, whose two views make the most maps to
    measure and draw. CPU seconds next to wall seconds: on a shared machine the wall time
    includes the other jobs' share of the cores."""
    import tempfile

    import models
    from interp.diagnose import diagnose

    rows = []
    for name in mechanisms:
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as tmp:
            path = models.save(f"{tmp}/{name}", models.build_model(models.ModelConfig.from_preset(name, preset)))
            wall, cpu = time.perf_counter(), time.process_time()
            result = diagnose(path, f"{tmp}/report")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        stages = result.metrics["timings_s"]
        rows.append({"model": f"{name} {preset}", "wall_s": wall, "cpu_s": cpu,
                     f"< {target_s:g} s": "yes" if wall < target_s else "NO", "eval_s": stages["evaluate"],
                     "attention_s": stages["attention"], "report_s": stages["report"]})
    return rows


def _print_rows(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()))
    Console().print(table)


def run(what: str, args) -> int:
    if what == "data":
        _print_rows(bench_data(args.repeats), "canonical splits: vectorised vs per-sequence Python generator")
    elif what == "models":
        _print_rows(bench_models(args.repeats),
                    f"training step, mini preset, T=512, batch 8, {torch.get_num_threads()} threads")
    elif what == "diagnose":
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        _print_rows(bench_diagnose(), f"glitchlens diagnose, default settings, {torch.get_num_threads()} threads, "
                                      f"{os.cpu_count()} CPUs, load average {load}")
    return 0

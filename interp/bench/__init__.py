"""Benchmarks behind ``glitchlens bench``: every figure is printed next to the baseline it is
compared with, both measured in the same run on the same machine."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from kernels.tooling import native


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
    """Training-step time (forward + backward + AdamW) of every mechanism, relative to softmax + RoPE,
    each with its default ``attention_impl`` (on the CPU: ``kernels.tooling.rows``) and glibc keeping
    freed blocks (:func:`interp.training.setup.reuse_freed_memory`), as ``glitchlens train`` runs them:
    the best of ``repeats`` rounds, each round timing every model once."""
    from interp.training.setup import TrainConfig, make_optimizer, reuse_freed_memory
    from models import MODEL_NAMES, ModelConfig, build_model

    reuse_freed_memory()
    torch.manual_seed(0)
    tokens = torch.randint(0, 5, (batch_size, seq_len))

    def training_step(name: str) -> Callable[[], None]:
        torch.manual_seed(0)
        model = build_model(ModelConfig.from_preset(name, preset, n_ctx=seq_len))
        optimizer = make_optimizer(model, TrainConfig())

        def step():
            loss = model(tokens).float().logsumexp(-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        step()
        return step

    steps = {name: training_step(name) for name in MODEL_NAMES}
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):   # rounds over the models: a change in the others' load falls on all of them
        for name, step in steps.items():
            best[name] = min(best[name], _best_time(step, 1))
    rows = [{"model": name, "step_s": seconds} for name, seconds in best.items()]
    baseline = next(r["step_s"] for r in rows if r["model"] == "rope")
    for r in rows:
        r["ratio_to_rope"] = r["step_s"] / baseline
    return rows


def step_seconds(log: Path) -> float:
    """Seconds per training step in a run's ``log.jsonl`` (its ``time`` from the start), from the
    first logged step to the last: the first step's set-up is left out."""
    from interp.outputs import read_bytes

    lines = read_bytes(log, "training log").decode().splitlines()
    times = [(r["step"], r["time"]) for r in map(json.loads, lines) if "time" in r]
    (first, start), (last, end) = times[0], times[-1]
    return (end - start) / (last - first)


def bench_seeds(models: tuple[str, ...] = ("rope", "tra"), n_seeds: int = 3, steps: int = 8, repeats: int = 2,
                seq_len: int = 512, batch_size: int = 16, device: str = "cpu") -> list[dict]:
    """Training ``n_seeds`` seeds of one configuration as one batched model
    (:func:`interp.training.batched.train_batched`, what ``reproduce --batch-seeds on`` runs) against
    one seed alone (:func:`interp.training.loop.train`), on ``device`` at the torch threads set: the
    Table 1 runs' size (``tiny``, 2 x 4 x 64, the ``cpu-learning`` recipe, T = ``seq_len``, batch
    ``batch_size``), ``steps`` steps each, the rounds interleaved and the best of ``repeats`` kept.
    ``batched_over_one``: the batched step over the seed's alone (the goal: at most 1.5 at 3 seeds);
    ``per_seed``: that over ``n_seeds``, what one seed's step costs inside the batch."""
    import tempfile
    from dataclasses import replace

    from interp.training.batched import SeedRun, train_batched
    from interp.training.loop import train
    from interp.training.recipes import run_configs

    from tqdm.auto import tqdm

    configs = {model: run_configs(model, "tiny", "cpu-learning", None, {"seq_len": seq_len, "batch_size": batch_size,
                                                                          "steps": steps, "eval_every": 0})
               for model in models}
    best = {model: {"alone": float("inf"), "batched": float("inf")} for model in models}
    rounds = [(round_, model) for round_ in range(repeats) for model in models]
    with tempfile.TemporaryDirectory() as tmp:
        for round_, model in tqdm(rounds, desc="bench seeds", unit="run pair", file=sys.stderr):
            model_cfg, cfg = configs[model]
            out = Path(tmp) / f"{model}-{round_}"
            train(model_cfg, cfg, out / "alone", progress=False, device=device)
            runs = [SeedRun(out / f"seed{seed}", replace(cfg, seed=seed)) for seed in range(n_seeds)]
            train_batched(model_cfg, runs, device=device)
            best[model]["alone"] = min(best[model]["alone"], step_seconds(out / "alone" / "log.jsonl"))
            best[model]["batched"] = min(best[model]["batched"], max(step_seconds(r.out / "log.jsonl") for r in runs))
    return [{"model": model, "seeds": n_seeds, "device": device, "threads": torch.get_num_threads(),
             "alone_step_s": b["alone"], "batched_step_s": b["batched"], "batched_over_one": b["batched"] / b["alone"],
             "per_seed": b["batched"] / b["alone"] / n_seeds} for model, b in best.items()]


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


@functools.lru_cache(maxsize=None)
def _attention_layer(name: str, n_heads: int, d_head: int, device: str):
    from models import ModelConfig, build_model

    cfg = ModelConfig.from_preset(name, "tiny", n_heads=n_heads, d_model=n_heads * d_head)
    return build_model(cfg).blocks[0].attn.to(device)


def kernel_references() -> dict:
    """The mechanisms' PyTorch ``reference`` methods called with a kernel's arguments, for
    :func:`kernels.tooling.bench.bench_kernel`: the per-position and per-head tensors are passed on;
    scalars (beta, lambda, kappa, p) are the layer's own (beta 1, lambda 0.5, as the benchmark
    passes), so the outputs equal the kernels'."""

    def reference(name):
        def call(*inputs, **_):
            q = inputs[0]
            layer = _attention_layer(name, q.shape[-2], q.shape[-1], str(q.device))
            return layer.reference(*(x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 3))
        return call

    from kernels.tooling.bench import KERNELS

    return {name: reference(name) for name in KERNELS}


def bench_kernels(out: str | Path | None = None, budget_s: float = float("inf"),
                  seq_lens: tuple[int, ...] | None = None, measure: Callable | None = None,
                  **options) -> tuple[list[dict], bool]:
    """``measure(name, T, **options)`` for every kernel at every T (default
    ``kernels.tooling.bench.SEQ_LENS``): by default :func:`kernels.tooling.bench.bench_kernel` next to the
    references, or e.g. :func:`kernels.tooling.bench.bench_tile_configs` with its configurations; each
    pair's progress, with what is left, goes to standard error. With ``out``, a CSV file: the
    (kernel, T) pairs it holds are not run again, each new pair's rows are appended as soon as
    they are measured, and no new pair starts once ``budget_s`` seconds have passed (each call
    runs at least one), so that a long benchmark runs as a series of short, resumable calls (of
    the same command: the file does not record the options). Returns the rows (the file's and
    the new ones) and whether every pair is done."""
    import pandas as pd

    from kernels.tooling.bench import KERNELS, SEQ_LENS, bench_kernel

    done = _bench_rows(out) if out and os.path.lexists(out) else []
    rows, start = list(done), time.perf_counter()
    inputs = "random" if measure else None
    todo = [(n_pos, name) for n_pos in seq_lens or SEQ_LENS for name in KERNELS
            if not any(r["kernel"] == name and r["T"] == n_pos
                       and r.get("inputs", "random") == (inputs or _inputs_of(name, options)) for r in done)]
    for i, (n_pos, name) in enumerate(todo):
        new = measure(name, n_pos, **options) if measure else bench_kernel(name, n_pos, kernel_references(), **options)
        rows += new
        if out:
            pd.DataFrame(new).to_csv(out, mode="a", header=not Path(out).exists(), index=False)
        elapsed, left = time.perf_counter() - start, len(todo) - i - 1
        print(f"[{i + 1}/{len(todo)}] {name} T = {n_pos} measured; {left} left, about {elapsed / (i + 1) * left:.0f} s",
              file=sys.stderr, flush=True)
        if elapsed > budget_s and left:
            return rows, False
    return rows, True


def _inputs_of(name: str, options: dict) -> str:
    """The ``inputs`` a :func:`kernels.tooling.bench.bench_kernel` row of ``name`` gets under ``options``."""
    trained = options.get("trained") or {}
    return trained[name][0] if name in trained else "random"


# The checkpoints whose inputs stand for each kernel's trained sparsity (``bench kernels --inputs trained``):
# the specimen of its mechanism, and for trela TDA's beta = 1 specimen, whose first view is a trained
# single-view threshold map at the paper's beta (trela-mech learned beta 0.13, where little is cut).
SPARSITY_SOURCES = {"tra": "tra-mech", "fot": "fot-mech", "trela": "tda-beta1", "tda": "tda-beta1"}


def trained_kernel_inputs(n: int = 4, seq_len: int = 512, device: str = "cpu",
                          kernels: tuple[str, ...] = tuple(SPARSITY_SOURCES)) -> dict[str, tuple[str, tuple, dict]]:
    """``{kernel: (source, args, kwargs)}``: the arguments each kernel gets from its
    :data:`SPARSITY_SOURCES` checkpoint's last layer on ``n`` sequences of its own task (T =
    ``seq_len``) for each of ``kernels``, in :func:`kernels.tooling.bench.random_inputs`' order, for
    :func:`kernels.tooling.bench.bench_kernel`'s ``trained``; trela takes TDA's first view (q1, k1, v,
    beta). The specimen's heads and head dim are kept (its scores are what it learned)."""
    from interp.tasks import get_task
    from models import load_pretrained

    trained = {}
    for name in kernels:
        source = SPARSITY_SOURCES[name]
        model = load_pretrained(source, device)
        tokens = get_task(getattr(model, "trained_task", None) or "flipflop").load_split("iid", n)[:, :seq_len]
        _, args, kwargs = captured_kernel_calls(model, tokens, CAPTURED_KERNELS)[-1]
        scalars = [kwargs.pop(key) for key in ("beta", "lam") if key in kwargs]   # positional, as random_inputs
        args = (args[0], args[1], args[4], scalars[0]) if name == "trela" else (*args, *scalars)
        trained[name] = (f"trained:{source}", args, kwargs)
    return trained


def _bench_rows(out: str | Path) -> list[dict]:
    """The rows of an earlier ``bench kernels --out CSV``, or a ValueError saying why ``out`` is not one."""
    import pandas as pd

    from interp.outputs import input_file

    if os.path.islink(out):
        raise ValueError(f"--out {out} is a symbolic link; give the CSV file itself (glitchlens never writes through "
                         "a link)")
    try:
        frame = pd.read_csv(input_file(out, "--out"))
    except (ValueError, pd.errors.ParserError) as err:
        raise ValueError(f"--out {out}: not a CSV of `glitchlens bench kernels` ({' '.join(str(err).split())}); "
                         "give a new file") from None
    if not {"kernel", "T"} <= set(frame.columns):
        raise ValueError(f"--out {out}: not a CSV of `glitchlens bench kernels` (no kernel and T columns); give a "
                         "new file")
    return frame.fillna({"note": ""}).to_dict("records")


def compile_kernels(out: str | None, targets: str, dtype: str | None, d_head: int | None,
                    defaults_only: bool = False) -> int:
    """``glitchlens bench kernels --compile-only``: :func:`kernels.tooling.aot.compile_matrix` for the
    comma-separated ``targets``, restricted to ``dtype`` and ``d_head`` when given; prints the
    table failures first and a summary. Exit status 1 when a configuration the dispatcher picks
    fails, spills or does not fit (the other candidates are not picked at that dtype and head dim)."""
    from kernels.tooling.aot import DTYPES, compile_matrix, failures_first, problems
    from kernels.tooling.tiles import HEAD_DIMS

    if not out:
        raise ValueError("bench kernels --compile-only needs --out DIR, the folder for compile.csv and the binaries")
    from interp.outputs import staged

    chosen = [t.strip() for t in targets.split(",") if t.strip()]
    try:
        with staged(out, names=("compile.csv",)) as stage:   # never over a file glitchlens did not write
            rows = compile_matrix(stage, chosen, (dtype,) if dtype else DTYPES, (d_head,) if d_head else HEAD_DIMS,
                                  defaults_only=defaults_only)
    except KeyboardInterrupt:
        print("interrupted: nothing written; Triton's cache keeps what was compiled, so the same command resumes "
              "quickly", file=sys.stderr)
        return 130
    _print_rows(failures_first(rows), f"kernels compiled for {', '.join(chosen)} (spill_bytes: stack and local "
                                      f"memory per thread, scratch per lane on AMD; shared_bytes per program)")
    bad = [r for r in rows if problems(r)]
    bad_defaults = [r for r in bad if r["default"]]
    print(f"{len(rows)} kernels compiled into {out}: {len(bad)} with a problem, {len(bad_defaults)} of them in a "
          f"configuration the dispatcher picks" + "".join(
              f"\n  {r['kernel']} {r['target']} {r['dtype']} d_head {r['d_head']}: {', '.join(problems(r))}"
              for r in bad_defaults))
    return 1 if bad_defaults else 0


def bench_tiles(checkpoint: str, n: int = 8, seq_len: int = 512) -> list[dict]:
    """Fraction of all-zero key tiles (16, 32, 64) in each layer's pattern of a trained
    checkpoint on ``n`` iid sequences: the work a tile-skipping kernel could save."""
    from interp.metrics import capture_maps
    from interp.tasks import load_split
    from kernels.tooling.bench import zero_tile_fraction
    from models import load

    _, maps = capture_maps(load(checkpoint), load_split("iid", n)[:, :seq_len], ["pattern"])
    return [{"layer": layer, **{f"zero_tiles_{t}": f for t, f in zero_tile_fraction(pattern).items()}}
            for layer, pattern in maps["pattern"].items()]


# The Triton kernels that can skip all-zero key tiles, by the module and name a model calls them through.
SKIPPING_KERNELS = {"tra": ("kernels.tra.triton", "tra_attention"),
                    "trela": ("kernels.threshold.triton", "threshold_attention"),
                    "tda": ("kernels.threshold.triton", "differential_threshold_attention")}


# Every Triton kernel a model calls, by the module and name it calls it through.
CAPTURED_KERNELS = {**SKIPPING_KERNELS, "fot": ("kernels.forgetting.triton", "forgetting_attention")}


def captured_kernel_calls(model, tokens: np.ndarray, kernels: dict = SKIPPING_KERNELS) -> list[tuple[str, tuple, dict]]:
    """``(kernel, args, kwargs)`` of every call the model makes to a Triton kernel of ``kernels``
    on ``tokens``, layer 0 first, run with ``attention_impl="triton"`` (on CUDA, or on the CPU
    under ``TRITON_INTERPRET=1``) and without gradients."""
    import importlib

    calls, patched = [], []
    for name, (module_name, function) in kernels.items():
        module = importlib.import_module(module_name)
        original = getattr(module, function)

        def recording(*args, _name=name, _original=original, **kwargs):
            calls.append((_name, args, {k: v for k, v in kwargs.items() if k != "skip_zero_tiles"}))
            return _original(*args, **kwargs)

        patched.append((module, function, original))
        setattr(module, function, recording)
    impl, model.cfg.attention_impl = model.cfg.attention_impl, "triton"
    try:
        with torch.no_grad():
            model(torch.as_tensor(tokens, device=next(model.parameters()).device))
    finally:
        model.cfg.attention_impl = impl
        for module, function, original in patched:
            setattr(module, function, original)
    return calls


def bench_skip_gain(checkpoint: str, n: int = 64, seq_len: int = 512, repeats: int = 10) -> list[dict]:
    """Per layer of a trained TRA, trela or TDA checkpoint: its Triton kernel's forward time on
    the inputs it gets from ``n`` iid sequences (T = ``seq_len``), with and without
    ``skip_zero_tiles`` (``kernels.tooling.bench.bench_zero_tile_skipping``, which also checks that the
    outputs are equal), on the GPU, or on the CPU under ``TRITON_INTERPRET=1``. The model's own
    dtype (float32 for the shipped specimens) and the dispatcher's tiles. Progress, with what is
    left, goes to standard error."""
    from interp.tasks import load_split
    from kernels.tooling.bench import bench_zero_tile_skipping
    from kernels.tooling.common import interpreting
    from models import load

    if not torch.cuda.is_available() and not interpreting():
        raise ValueError("bench tiles --skip-gain times the Triton kernels: it needs a CUDA GPU, or "
                         "TRITON_INTERPRET=1 to run them (slowly) on the CPU")
    model = load(checkpoint, "cuda" if torch.cuda.is_available() else "cpu")
    if model.cfg.model not in SKIPPING_KERNELS:
        raise ValueError(f"bench tiles --skip-gain: the {model.cfg.model} model has no kernel that skips zero tiles "
                         f"(those of {', '.join(SKIPPING_KERNELS)} do)")
    print(f"capturing the kernels' inputs on {n} iid sequences (T = {seq_len})", file=sys.stderr, flush=True)
    calls = captured_kernel_calls(model, load_split("iid", n)[:, :seq_len])
    rows = []
    for layer, (name, args, kwargs) in enumerate(calls):
        timed = bench_zero_tile_skipping(name, *args, repeats=repeats, **kwargs)
        rows.append({"layer": layer, "kernel": name, **{k: v for k, v in timed.items() if k != "kernel"}})
        print(f"[{layer + 1}/{len(calls)}] layer {layer} timed; {len(calls) - layer - 1} left", file=sys.stderr,
              flush=True)
    return rows


def forward_flops(cfg, n_pos: int, causal: bool = True, last_layer_queries=None) -> int:
    """Multiply-add FLOPs (2 per multiply-add) of one sequence of ``n_pos`` tokens through
    the model, read from its config: per layer the Q, K, V, O projections (and TDA's second
    Q, K, the forget gate of TRA and FoT), SwiGLU's three products, and attention's q k^T
    and A V (TDA two q k^T; CoPE's position logits q e[p] counted like q k^T). ``causal``:
    query i against its i + 1 keys, the useful work; otherwise all ``n_pos`` keys, what the
    dense references compute. ``last_layer_queries``: the positions at which the last layer
    runs when only they are wanted (``normalized_at``): its projections to q, k, v and gates
    at every position, attention, W_O and the MLP at these. Element-wise work (norms,
    softmax, masks) is not counted; the unembedding at the reads is left to the caller. The
    LSTM: its four gates' products."""
    d, n_layers = cfg.d_model, cfg.n_layers
    if cfg.attention is None:
        return n_layers * n_pos * 4 * 2 * (2 * d * d)
    per_token = 2 * d * d * (3 + 2 * (cfg.attention == "tda"))  # Q, K, V (TDA: and Q2, K2)
    if cfg.attention in ("tra", "fot"):
        per_token += 2 * d * cfg.n_heads
    per_query = 2 * d * d + 3 * 2 * d * cfg.d_mlp  # W_O and the MLP
    per_pair = (2 + (cfg.attention in ("tda", "cope"))) * 2 * d  # q k^T (x2 for TDA, + q e[p] for CoPE), A V

    def layer(n_queries: int, pairs: int) -> int:
        return n_pos * per_token + n_queries * per_query + pairs * per_pair

    full = layer(n_pos, n_pos * (n_pos + 1) // 2 if causal else n_pos * n_pos)
    if last_layer_queries is None:
        return n_layers * full
    queries = np.asarray(last_layer_queries, dtype=np.int64)
    return (n_layers - 1) * full + layer(len(queries), int((queries + 1).sum()))


def eval_flops(cfg, lengths, n_reads: int) -> int:
    """Model FLOPs of an evaluation, the scored-prefix measure: each sequence's causal forward
    at its scored length (:func:`interp.evaluate.scored_lengths`), plus the unembedding at
    every read; what the evaluation skips inside that forward still counts."""
    counts = np.bincount(np.asarray(lengths, dtype=np.int64))
    return sum(int(c) * forward_flops(cfg, n) for n, c in enumerate(counts) if c and n) \
        + n_reads * 2 * cfg.d_model * cfg.d_vocab


def computed_eval_flops(cfg, lengths, mask: np.ndarray) -> int:
    """The FLOPs an evaluation computes (:func:`eval_flops` less the last layer's work away
    from the reads, ``mask [n, T]``, which ``normalized_at`` skips); the rows padded to a
    batch's largest read count are not counted."""
    reads = [np.flatnonzero(m) for m in mask]
    return sum(forward_flops(cfg, int(n), last_layer_queries=r) for n, r in zip(lengths, reads) if n) \
        + int(mask.sum()) * 2 * cfg.d_model * cfg.d_vocab


def parallel_matmul_rate(workers: int, n: int = 2048, repeats: int = 3, shape: tuple[int, int, int] | None = None
                         ) -> float:
    """GFLOP/s of ``workers`` float32 products at once, ``n x n`` squares or ``shape = (m, k, n)``,
    one per Python thread, each at one torch thread: the arrangement
    :func:`interp.evaluate.predict_reads` runs its batches in on the CPU, so the roofline of an
    evaluation is measured at the evaluation's own threads."""
    from concurrent.futures import ThreadPoolExecutor

    m, k, n = shape or (n, n, n)
    triples = [(torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)) for _ in range(workers)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            def all_at_once():
                list(pool.map(lambda abc: torch.mm(abc[0], abc[1], out=abc[2]), triples))

            all_at_once()
            return workers * 2 * m * k * n / _best_time(all_at_once, repeats) / 1e9
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def attention_rate(n_heads: int, d_head: int, n_pos: int = 511, batch: int = 8, repeats: int = 3) -> float:
    """Useful GFLOP/s (q k^T and A V, causally) of PyTorch's fused causal softmax attention
    (``scaled_dot_product_attention``, float32) at a model's head shape: what the best attention
    kernel PyTorch ships does at that shape, the yardstick for the attention paths."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(batch, n_heads, n_pos, d_head) for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    seconds = _best_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
    return batch * n_heads * n_pos * (n_pos + 1) // 2 * 2 * 2 * d_head / seconds / 1e9


@torch.no_grad()
def legacy_predict_reads(model, tokens: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """The earlier evaluation loop, the baseline of :func:`bench_eval`: full-length
    batches of 64 under ``no_grad``, the model's own attention implementation without the
    native kernels (which came later), the default thread count. Returns the predictions only."""
    from interp.tasks import read_mask

    model.eval()
    mask = read_mask(tokens[:, :-1])
    out = []
    with native.switched_off():
        for lo in range(0, len(tokens), batch_size):
            batch = torch.from_numpy(tokens[lo:lo + batch_size, :-1].astype(np.int64))
            normalized = model(batch, return_type="normalized")
            out.append(model.unembed(normalized[torch.from_numpy(mask[lo:lo + batch_size])]).argmax(-1).numpy())
    return np.concatenate(out)


EVAL_MODELS = ("tra-mech", "fot-mech", "cope-mech", "tda-mech", "trela-mech", "diff-mech", "rope-mech")


def bench_eval(names: tuple[str, ...] = EVAL_MODELS, split: str = "sparse", n: int = 1024,
               repeats: int = 2, baseline: bool = True) -> tuple[list[dict], dict]:
    """``predict_reads`` on the first ``n`` sequences of ``split`` for pretrained models, in
    model GFLOP/s (:func:`eval_flops`, the scored-prefix measure: the causal forward of every
    scored prefix) and in the GFLOP/s of what it computes (:func:`computed_eval_flops`, without the
    last layer's work away from the reads), against float32 matmuls: 2048 x 2048 square ones in
    the evaluation's own arrangement (:func:`parallel_matmul_rate`: as many at once as it has
    workers, one torch thread each), measured right before each model's runs (on a shared machine
    the cores' share drifts), are its roofline; the products at the model's MLP shape ``[32768,
    d_model] x [d_model, d_mlp]`` in the same arrangement right after them (``mlp_matmul_of_square``:
    what the model's own largest products reach of it), and PyTorch's fused causal attention at its
    head shape (:func:`attention_rate`), printed once. ``torch_path_s``: the same evaluation with
    the native kernels switched off (:mod:`kernels.tooling.native`: the attention cores of softmax
    without a bias, Diff, CoPE, trela and TDA, and every model's norms and SwiGLU); ``passes_s``:
    with the norms' and SwiGLU's passes alone switched off (:func:`kernels.tooling.native.passes_switched_off`).
    With ``baseline`` also
    the loop it replaced (:func:`legacy_predict_reads`), whose predictions must be the same."""
    import models
    from interp.evaluate import predict_reads, scored_lengths
    from interp.tasks import load_split, read_mask

    tokens = load_split(split, n)
    rates = {}  # the reference rates, measured once per shape
    rows = []
    for name in names:
        model = models.load_pretrained(name)
        cfg = model.cfg
        mask = read_mask(tokens[:, :-1])
        lengths = scored_lengths(model, tokens[:, :-1], mask)
        flops = eval_flops(cfg, lengths, int(mask.sum()))
        computed = computed_eval_flops(cfg, lengths, mask)
        mlp = f"matmul [32768,{cfg.d_model}]x[{cfg.d_model},{cfg.d_mlp}]"
        attention = f"causal SDPA [8,{cfg.n_heads},511,{cfg.d_head}]"
        if cfg.attention is not None and attention not in rates:
            rates[attention] = attention_rate(cfg.n_heads, cfg.d_head, repeats=repeats)
        predictions = predict_reads(model, tokens).predicted
        workers = torch.get_num_threads()   # predict_reads' workers, one torch thread each
        square = parallel_matmul_rate(workers, repeats=repeats)
        rates[mlp] = parallel_matmul_rate(workers, repeats=repeats, shape=(32768, cfg.d_model, cfg.d_mlp))
        now, torch_path, without_passes, before = [], [], [], []
        for _ in range(repeats):  # the loops alternate, so that a change in the load falls on all of them
            now.append(_best_time(lambda: predict_reads(model, tokens), 1))
            with native.switched_off():
                torch_path.append(_best_time(lambda: predict_reads(model, tokens), 1))
            with native.passes_switched_off():
                without_passes.append(_best_time(lambda: predict_reads(model, tokens), 1))
            if baseline:
                before.append(_best_time(lambda: legacy_predict_reads(model, tokens), 1))
        seconds = min(now)
        row = {"model": name, "n": n, "threads": torch.get_num_threads(), "eval_s": seconds,
               "GFLOP/s": flops / seconds / 1e9, "square_GFLOP/s": square,
               "of_roofline": flops / seconds / 1e9 / square, "computed_GFLOP/s": computed / seconds / 1e9,
               "computed_share": computed / seconds / 1e9 / square, "s_per_1e5": seconds * 1e5 / n,
               "torch_path_s": min(torch_path), "native_gain": min(torch_path) / seconds,
               "passes_s": min(without_passes), "passes_gain": min(without_passes) / seconds,
               "mlp_matmul_GFLOP/s": rates[mlp], "mlp_matmul_of_square": rates[mlp] / square}
        if baseline:
            same = bool((legacy_predict_reads(model, tokens) == predictions).all())
            legacy = min(before)
            row.update({"before_s": legacy, "speedup": legacy / seconds,
                        "same_predictions": "yes" if same else "NO"})
        rows.append(row)
    return rows, rates


# What `bench attribution --out DIR` writes; runs/bench/ holds the one docs/results/benchmarks.md reads.
ATTRIBUTION_CSV = "attribution.csv"

def flipflop_specimens() -> list[str]:
    """The shipped specimens trained on flip-flop (``models/pretrained``), in name order."""
    from models import pretrained
    from models.checkpoint import trained_task

    return [name for name in pretrained.built()
            if (trained_task(json.loads((pretrained.path(name) / "config.json").read_text())) or "flipflop")
            == "flipflop"]


def bench_attribution(names: tuple[str, ...] | None = None, n_pairs: int = 16, seq_len: int = 128) -> list[dict]:
    """Attribution patching against activation patching on each shipped flip-flop specimen: the
    bit-flip pairs of the last read of the first ``n_pairs`` iid sequences cut to ``seq_len``
    tokens, every hook of :data:`interp.circuits.ATTRIBUTION_KINDS` and head patched at every
    position at once (:func:`interp.circuits.compare_attribution`). One row per specimen:
    ``components``, ``rank_correlation`` (Spearman's, over components), ``largest_miss`` (in
    shares of the clean-corrupt gap) with its component (``missed``) and both sides, and
    ``speedup`` (activation patching's time over attribution patching's, measured once each)."""
    from interp import circuits
    from interp.tasks import load_split
    from models import load_pretrained

    inputs = np.array(load_split("iid", n_pairs)[:, :seq_len])
    every = circuits.bit_flip_pairs(inputs)
    last = every.info.groupby("seq").pair.max().tolist()
    clean, corrupt, reads = every.clean[last], every.corrupt[last], every.read[last]
    rows = []
    for name in names or flipflop_specimens():
        model = load_pretrained(name)
        hooks = circuits.patchable_hooks(model, circuits.ATTRIBUTION_KINDS)
        start = time.perf_counter()
        patched = circuits.activation_patching(model, clean, corrupt, hooks, reads=reads)
        middle = time.perf_counter()
        estimated = circuits.attribution_patching(model, clean, corrupt, hooks, reads=reads)
        end = time.perf_counter()
        agreement = circuits.attribution_agreement(circuits.compare_attribution(estimated, patched))
        rows.append({"specimen": name, "model": model.cfg.model, "pairs": len(reads), **agreement,
                     "speedup": (middle - start) / (end - middle)})
        print(f"{name}: rank correlation {agreement['rank_correlation']:.2f}", file=sys.stderr, flush=True)
    return rows


def _print_rows(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()))
    Console(width=max(Console().width, 180)).print(table)


def run(what: str, args) -> int:
    if what in ("threads", "demo"):
        from interp.bench import load as bench_load

        for title, rows in bench_load.run(what, args):
            _print_rows(rows, title)
    elif what == "data":
        _print_rows(bench_data(args.repeats), "canonical splits: vectorised vs per-sequence Python generator")
    elif what in ("models", "train"):
        rows = [{**row, "threads": torch.get_num_threads()} for row in bench_models(args.repeats)]
        if args.out:
            from interp.bench.load import TRAIN_CSV, write_rows

            write_rows(args.out, TRAIN_CSV, rows)
        _print_rows(rows,
                    f"training step, mini preset, T=512, batch 8, CPU, {torch.get_num_threads()} threads "
                    "(attention_impl auto: kernels.tooling.rows)")
    elif what == "seeds":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        rows = bench_seeds(repeats=args.repeats, device=device)
        if args.out:
            from interp.bench.load import SEEDS_CSV, write_rows

            write_rows(args.out, SEEDS_CSV, rows)
        _print_rows(rows, f"3 seeds trained as one batched model against one seed alone, tiny preset, T=512, batch 16, "
                          f"{device}, {torch.get_num_threads()} threads (seconds per step, the best of "
                          f"{args.repeats} interleaved rounds)")
    elif what == "kernels" and args.cost_model:
        from kernels.tooling.cost import HARDWARE, HEADS, TOKENS, cost_table

        rows = cost_table(d_head=args.d_head or 64, seq_lens=args.seq_lens or None)
        _print_rows(rows, f"PREDICTED (not measured): causal fwd+bwd of {TOKENS} tokens a batch, {HEADS} heads of "
                          f"{args.d_head or 64}, bfloat16, roofline at the datasheet peaks "
                          + "; ".join(f"{gpu} {tflops:g} TFLOP/s, {tbs:g} TB/s" for gpu, (tflops, tbs)
                                      in HARDWARE.items()))
    elif what == "kernels" and args.compile_only:
        return compile_kernels(args.out, args.targets, args.dtype, args.d_head, args.defaults_only)
    elif what == "kernels":
        from kernels.tooling.bench import best_tiles, bench_tile_configs, kernel_goals

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        where = torch.cuda.get_device_name() if device.type == "cuda" else "the CPU under Triton's interpreter"
        d_head, dtype = args.d_head or 64, args.dtype or "bfloat16"
        measure = functools.partial(bench_tile_configs, configs=args.tile_configs) if args.tile_configs else None
        kinds = {"random": [False], "trained": [True], "both": [False, True]}[args.inputs]
        rows, complete, start = [], True, time.perf_counter()
        for trained in kinds:
            options = {"trained": trained_kernel_inputs(device=device.type)} if trained and not measure else {}
            new, complete = bench_kernels(args.out, args.budget_s - (time.perf_counter() - start), args.seq_lens,
                                          measure, tokens=args.tokens, d_head=d_head, dtype=getattr(torch, dtype),
                                          repeats=args.repeats, device=device, **options)
            rows = new if args.out else rows + new   # with --out, each call returns the file's rows too
            if not complete:
                break
        _print_rows(rows, f"kernels on {where}, {dtype}, causal, head dim {d_head}, {args.tokens} tokens per batch")
        if args.tile_configs:
            _print_rows(best_tiles(rows), "fastest tiles (best_pair: the fastest forward's time plus the fastest "
                                          "backward's, to SDPA's)")
        else:
            _print_rows(kernel_goals(rows), "goals (met: None where these rows do not tell)")
        if not complete:
            print(f"stopped after {args.budget_s:g} s with pairs still to run: run the same command again to go on")
    elif what == "tiles":
        if not args.checkpoint:
            raise ValueError("bench tiles needs a checkpoint: glitchlens bench tiles CKPT")
        _print_rows(bench_tiles(args.checkpoint), f"all-zero key tiles of {args.checkpoint}, 8 iid sequences, T=512")
        if args.skip_gain:
            where = torch.cuda.get_device_name() if torch.cuda.is_available() else "the CPU under Triton's interpreter"
            _print_rows(bench_skip_gain(args.checkpoint, repeats=args.repeats),
                        f"forward of each layer's kernel on {where} with and without skip_zero_tiles, on the inputs of "
                        f"64 iid sequences, T=512 (speedup: dense / skip, median of {args.repeats})")
    elif what == "eval":
        names = tuple(args.models.split(",")) if args.models else EVAL_MODELS
        rows, rates = bench_eval(names, n=args.n, repeats=args.repeats, baseline=not args.no_baseline)
        if args.out:
            from interp.bench.load import EVAL_CSV, write_rows

            write_rows(args.out, EVAL_CSV, rows)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print("float32 at the models' shapes, GFLOP/s: " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items()))
        _print_rows(rows, f"glitchlens eval, first {args.n} sparse sequences, model FLOPs (causal forward of the "
                          f"scored prefixes) and computed FLOPs (the last layer at the reads only), roofline = "
                          f"{torch.get_num_threads()} 2048^2 matmuls at once at 1 thread each (the eval's "
                          f"{torch.get_num_threads()} workers) before each model, load average {load}")
    elif what == "attribution":
        rows = bench_attribution()
        _print_rows(rows, "attribution patching against activation patching, every hook and head at every position, "
                          "bit-flip pairs at the last read of 16 iid sequences, T = 128 (speedup: activation "
                          "patching's time over attribution patching's)")
        if args.out:
            import pandas as pd

            from interp.outputs import staged

            with staged(args.out, overwrite=True, names=(ATTRIBUTION_CSV,)) as stage:
                pd.DataFrame(rows).to_csv(stage / ATTRIBUTION_CSV, index=False)
    elif what == "diagnose":
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        _print_rows(bench_diagnose(), f"glitchlens diagnose, default settings, {torch.get_num_threads()} threads, "
                                      f"{os.cpu_count()} CPUs, load average {load}")
    return 0

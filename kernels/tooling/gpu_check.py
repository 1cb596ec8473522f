"""The kernels' check on a GPU in one command, under 10 minutes: the kernel tests on the device,
then ``glitchlens bench kernels`` at T = 4096 ... 32768 (the four kernels beside SDPA's flash
attention, in one run) into ``runs/gpu/bench-kernels-<card>.csv``, named after the card, then
``glitchlens bench kernels --tile-configs`` (each kernel at :data:`TILE_CONFIGS` beside its
default and SDPA, at T = 16384 and 8192) into ``runs/gpu/tiles-<card>.csv``: the measurement
that chooses the card's default tiles.

``python3 -m kernels.tooling.gpu_check [--out CSV] [--skip-tests]`` (``make gpu-kernels``), from the
repository root, with the machine's own PyTorch and Triton (no ``make setup``: a GPU machine here
reaches no package index; what it lacks, such as transformer-lens, travels as wheels:
docs/how-to/run-on-a-gpu.md "On a GPU"). The tests get ``TEST_BUDGET_S`` seconds, the benchmark
``BENCH_BUDGET_S`` and the tile sweep ``TILES_BUDGET_S`` (each starts no (kernel, T) pair after
that; the same command with ``--out`` the CSV it printed resumes it). A file already there is
never written over: without ``--out`` the first free name is taken (``bench-kernels-h200-2.csv``
beside an earlier ``bench-kernels-h200.csv``). Exit status: 0 when the tests passed and the
benchmark is complete, 1 otherwise, 2 on bad use.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

SEQ_LENS = (4096, 8192, 16384, 32768)
TEST_FILES = ("tests/test_op_tra.py", "tests/test_op_forgetting.py", "tests/test_op_threshold.py",
              "tests/test_kernels.py", "tests/test_attention_impl.py")
TEST_BUDGET_S, BENCH_BUDGET_S, TILES_BUDGET_S = 150, 200, 200
# Candidates: configurations that compile for sm_90 (Triton 3.6, bfloat16, head dim 64) with no
# register spill in any of the twelve kernels, or (64 x 64, 4 warps, 3 stages) in all but TDA's
# backward; around the Hopper choices of Triton's fused-attention tutorial (128 x 64, 8 warps),
# beside the default every GPU had before the sweep (64 x 32, 4 warps, 2 stages; the "default" row
# is whatever the dispatcher picks now). (128 x 64 with 4 warps and 3 stages, and 128 x 128, spilled
# in most backward kernels.)
TILE_CONFIGS = ("128x64-w8-s2", "128x64-w8-s3", "64x64-w8-s2", "128x32-w8-s2", "64x64-w4-s3", "64x32-w4-s3")
TILE_SEQ_LENS = (16384, 8192)
RUNS = Path("runs/gpu")
NEEDED = ("torch", "triton", "pytest", "xdist")


def card_slug(device_name: str) -> str:
    """The card's short name for a file name, from ``torch.cuda.get_device_name()``: the first
    word after the vendor, lower case (``NVIDIA H100 80GB HBM3`` -> ``h100``,
    ``NVIDIA A100-SXM4-80GB`` -> ``a100``, ``AMD Instinct MI300X`` -> ``mi300x``)."""
    words = re.findall(r"[a-z0-9]+", device_name.lower())
    words = [w for w in words if w not in ("nvidia", "amd", "instinct", "tesla", "geforce", "radeon")]
    if not words:
        raise ValueError(f"cannot name a file after the device {device_name!r}: pass --out CSV")
    return words[0]


def free_csv(card: str, runs: Path | None = None, stem: str = "bench-kernels") -> Path:
    """``<runs>/<stem>-<card>.csv`` (``runs`` by default :data:`RUNS`), or ``-2``, ``-3``, ... after
    it if taken."""
    runs = runs or RUNS
    path, n = runs / f"{stem}-{card}.csv", 2
    while path.exists():
        path, n = runs / f"{stem}-{card}-{n}.csv", n + 1
    return path


def missing_modules() -> list[str]:
    """Modules the tests and the benchmark need that this Python lacks (of the project's own
    imports, the first one missing)."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if not missing:
        try:
            for module in ("models", "interp.bench", "interp.cli", "plotly"):
                importlib.import_module(module)
        except ModuleNotFoundError as err:
            missing.append(err.name)
    return missing


def test_command(workers: int = 8, files=TEST_FILES) -> list[str]:
    """The kernel tests on the device (the ``device`` fixture is CUDA where present), the slow
    sweeps included (fast on a GPU)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", str(workers),
            *files]


def bench_command(out: Path, seq_lens=SEQ_LENS, budget_s: float = BENCH_BUDGET_S,
                  tile_configs: tuple[str, ...] = (), inputs: str = "both") -> list[str]:
    """``glitchlens bench kernels`` with as many tokens a batch as the longest T, so that every T
    holds the same tokens (batch = tokens / T) and the peak memory can be compared across T, on
    ``inputs`` (random, a trained specimen's, or both); with ``tile_configs``, the tile sweep (5
    repeats, to fit its budget, on random inputs)."""
    tiles = (["--tile-configs", ",".join(tile_configs), "--repeats", "5"] if tile_configs
             else ["--repeats", "10", "--inputs", inputs])
    return [sys.executable, "-m", "interp.cli", "bench", "kernels", *tiles, "--budget-s", str(budget_s),
            "--tokens", str(max(SEQ_LENS)), "--seq-lens", *map(str, seq_lens), "--out", str(out)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m kernels.tooling.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="the benchmark's CSV (default: the first free runs/gpu/bench-kernels-<card>.csv); an "
                             "existing one is resumed")
    parser.add_argument("--skip-tests", action="store_true", help="only the benchmark (e.g. when resuming it)")
    parser.add_argument("--skip-tiles", action="store_true", help="no tile sweep")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=list(SEQ_LENS))
    parser.add_argument("--inputs", choices=["random", "trained", "both"], default="both",
                        help="the benchmark's inputs: random, each kernel's trained specimen's, or both (default)")
    parser.add_argument("--bench-budget-s", type=float, default=BENCH_BUDGET_S,
                        help=f"start no benchmark pair after this many seconds (default {BENCH_BUDGET_S})")
    parser.add_argument("--test-files", nargs="+", default=list(TEST_FILES), help="the kernel tests to run")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.suffix != ".csv":
        parser.error(f"--out must name a .csv file, got {args.out}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    missing = missing_modules()
    if missing:
        print(f"missing Python modules: {', '.join(missing)}: carry them as wheels, as "
              'docs/how-to/run-on-a-gpu.md "On a GPU" says', file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check runs on a GPU (on the CPU: make test)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    out = args.out or free_csv(card_slug(name))
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{name}, torch {torch.__version__}, triton {importlib.import_module('triton').__version__}: "
          f"benchmark into {out}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tests_ok = True
    if not args.skip_tests:
        try:
            tests_ok = subprocess.run(test_command(files=args.test_files), env=env,
                                      timeout=TEST_BUDGET_S).returncode == 0
        except subprocess.TimeoutExpired:
            print(f"the kernel tests ran past {TEST_BUDGET_S} s and were stopped", flush=True)
            tests_ok = False
    complete = run_bench(bench_command(out, args.seq_lens, args.bench_budget_s, inputs=args.inputs), env)
    if not complete:
        print(f"to go on: python3 -m kernels.tooling.gpu_check --skip-tests --out {out}")
    tiles_note = "skipped"
    if not args.skip_tiles:
        tiles_out = free_csv(card_slug(name), out.parent, "tiles")
        tiles_done = run_bench(bench_command(tiles_out, TILE_SEQ_LENS, TILES_BUDGET_S, TILE_CONFIGS), env)
        tiles_note = f"{'complete' if tiles_done else 'NOT complete'} ({tiles_out})"
    print(f"kernel tests: {'passed' if tests_ok else 'FAILED'}; benchmark: {'complete' if complete else 'NOT complete'}"
          f" ({out}); tile sweep: {tiles_note}")
    return 0 if tests_ok and complete else 1


def run_bench(command: list[str], env: dict) -> bool:
    """Run one ``bench kernels`` command, print its tables; whether every (kernel, T) pair is done."""
    bench = subprocess.run(command, env=env, capture_output=True, text=True)
    print(bench.stdout[-20000:], bench.stderr[-3000:], sep="\n", flush=True)
    return bench.returncode == 0 and "run the same command again" not in bench.stdout


if __name__ == "__main__":
    raise SystemExit(main())

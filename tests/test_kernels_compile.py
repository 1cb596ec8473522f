"""Every Triton kernel compiled ahead of time for the GPUs users have (``kernels.tooling.aot``), here,
without a GPU: ``glitchlens bench kernels --compile-only`` run as a separate process, since the
suite imports triton under its interpreter, which cannot compile. The subset in the default
run (each kernel's default tiles at d_head 64, bf16 for sm_90 and float32 for sm_80)
fails on a compile error, a spill or shared memory over the limit; the full matrix is opt-in."""

import itertools
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed; the kernel tests need it")

from interp.cli import main  # noqa: E402
from kernels.tooling.aot import COLUMNS, CUOBJDUMP, SHARED_LIMIT, failures_first, problems  # noqa: E402
from kernels.tooling.common import interpreting  # noqa: E402
from kernels.tooling.tiles import (HEAD_DIMS, TILE_CONFIGS, TileConfig, compiling_for, default_tiles,  # noqa: E402
                           key_tile_meta, launch_meta, tra_meta)

# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {"GLITCHLENS_COMPILE_MATRIX": (
    "", "1: also compile the full matrix of kernels, targets, dtypes, head dims and tiles (about 2800 binaries, "
        "hours of CPU)")}
KERNELS = ({f"{op}_{kernel}" for op in ("tra", "fot", "trela", "tda") for kernel in ("fwd", "bwd_dkdv", "bwd_dq")}
           | {"tra_bwd_chunk_survivors"}  # TRA's backward past one pass of rows
           | {f"{op}_{table}_norms" for op in ("trela", "tda") for table in ("key", "query")})  # the norm bound's pre-passes


def compile_only(out, *options: str) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    """``glitchlens bench kernels --compile-only --out OUT OPTIONS`` in a process without
    ``TRITON_INTERPRET``: its result and compile.csv."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-m", "interp.cli", "bench", "kernels", "--compile-only", "--out",
                             str(out), *options], capture_output=True, text=True, env=env)
    csv = out / "compile.csv"
    return result, (pd.read_csv(csv, keep_default_na=False) if csv.exists() else None)


def assert_fit(frame: pd.DataFrame, out) -> None:
    for row in frame.to_dict("records"):
        assert not problems(row), f"{row}: {problems(row)}"
        binary = (out / row["binary"]).read_bytes()
        assert binary[:4] == b"\x7fELF", f"{row['binary']} is not an ELF object (cubin and hsaco are)"


@pytest.mark.integration
def test_default_tiles_compile_without_spills_or_atomics(tmp_path):
    """The CI subset, each kernel's default configuration at d_head 64 for sm_90 in bf16 and for
    sm_80 in float32: every one compiles, fits and is an ELF object. In the sm_90 machine code
    no backward kernel holds an atomic instruction: each owns its dK/dV tiles."""
    for target, dtype in (("sm_90", "bfloat16"), ("sm_80", "float32")):
        result, frame = compile_only(tmp_path / target, "--defaults-only", "--targets", target, "--dtype", dtype,
                                     "--d-head", "64")
        assert result.returncode == 0, result.stderr[-3000:]
        assert list(frame.columns) == list(COLUMNS)
        assert set(frame.kernel) == KERNELS and len(frame) == len(KERNELS)
        assert frame.default.all() and (frame.target == target).all()
        if target == "sm_90":  # Hopper's own tiles (kernels.tooling.tiles.default_tiles)
            assert [(r.kernel, TileConfig(r.block_m, r.block_n, r.num_warps, r.num_stages)) for r in frame.itertuples()] \
                == [(r.kernel, default_tiles(torch.bfloat16, 64, 90, r.kernel.split("_")[0])) for r in frame.itertuples()]
        assert_fit(frame, tmp_path / target)
        assert "left" in result.stderr, "progress, with what is left, goes to stderr"
        if target == "sm_90":
            backward = frame[frame.kernel.str.contains("_bwd")]
            atomics = {row.kernel: re.findall(r"\b(?:ATOMG?|REDG?)\.", subprocess.run(
                [str(CUOBJDUMP), "-sass", str(tmp_path / target / row.binary)], capture_output=True, text=True,
                check=True).stdout) for row in backward.itertuples()}
            assert len(atomics) == 9 and not any(atomics.values()), atomics


def test_the_candidates_are_what_the_dispatcher_picks():
    """Every configuration a launch can get, for each dtype and head dim (the default tiles, and
    the dK/dV kernels' and TRA's kernels' own launch options), is among the candidates the full
    matrix compiles, and every candidate is picked somewhere."""
    picked = set()
    for dtype, d_head, arch, op in itertools.product((torch.float32, torch.bfloat16, torch.float16), HEAD_DIMS,
                                                     (None, 80, 90), ("tra", "fot", "trela", "tda")):
        with compiling_for(arch):
            tiles = default_tiles(dtype, d_head, arch, op)
            meta = launch_meta(dtype, d_head, tiles.block_m, tiles.block_n, op=op)
        assert (meta["num_warps"], meta["num_stages"]) == (tiles.num_warps, tiles.num_stages)
        for kernel_meta in (meta, key_tile_meta(meta), tra_meta(meta), key_tile_meta(tra_meta(meta))):
            picked.add(TileConfig(*(kernel_meta[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))))
    assert picked == set(TILE_CONFIGS)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(os.environ.get("GLITCHLENS_COMPILE_MATRIX") != "1",
                    reason="the full compile matrix (about 2800 binaries) takes hours of CPU: "
                           "set GLITCHLENS_COMPILE_MATRIX=1")
def test_full_matrix_default_tiles_fit_every_target(tmp_path):
    """Every kernel, for sm_80, sm_90 and gfx942, every dtype and head dim, at every candidate
    configuration: all compile, and the configurations the dispatcher picks neither spill nor
    exceed shared memory (the command's exit status says the same)."""
    result, frame = compile_only(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (frame.status == "ok").all(), frame[frame.status != "ok"]
    assert set(frame.target) == set(SHARED_LIMIT) and set(frame.kernel) == KERNELS
    assert_fit(frame[frame.default], tmp_path)


def test_failures_first():
    def row(status, spill, shared):
        return {"status": status, "spill_bytes": spill, "shared_bytes": shared, "target": "gfx942"}

    rows = [row("ok", 0, 1024), row("ok", 8, 1024), row("CompilationError: boom", None, None),
            row("ok", 0, 65 * 1024), row("ok", 0, 2048)]
    assert [problems(r) for r in failures_first(rows)] == [
        ["compile error"], ["spills"], ["shared memory over the limit"], [], []]
    assert failures_first(rows)[3]["shared_bytes"] == 1024, "the order within a group is kept"


@pytest.mark.integration
@pytest.mark.parametrize("options, message", [
    (["--targets", "sm_75"], "unknown target sm_75: choose among sm_80, sm_90, gfx942"),
    (["--d-head", "48"], "unknown head dim 48: choose among 16, 32, 64, 128"),
    (["--targets", ","], "no target given: choose among sm_80, sm_90, gfx942"),
    pytest.param([], "TRITON_INTERPRET=1 is set", marks=pytest.mark.skipif(
        not interpreting(), reason="kernels compiled, not interpreted: this would compile the whole matrix")),
])
def test_bad_options_are_named(tmp_path, capsys, options, message):
    assert main(["bench", "kernels", "--compile-only", "--out", str(tmp_path), *options]) == 2
    assert message in capsys.readouterr().err


def test_compile_only_needs_out(capsys):
    assert main(["bench", "kernels", "--compile-only"]) == 2
    assert "needs --out DIR" in capsys.readouterr().err

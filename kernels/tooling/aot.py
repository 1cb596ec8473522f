"""Ahead-of-time compilation of every Triton kernel for the GPUs users have, without a GPU.

Triton's compiler needs no device: given a target (``GPUTarget("cuda", 90, 32)`` for H100,
``("cuda", 80, 32)`` for A100, ``("hip", "gfx942", 64)`` for MI300) it lowers a kernel to PTX
and a cubin, or to AMDGCN and an hsaco. What a launch would compile is found by running each
op's public function, forward and backward, on small CPU tensors while ``Tensor.is_cuda``
reads True (so the wrappers take their GPU path: tile sizes, checks) and every
``kernel[grid](...)`` is recorded instead of launched (:func:`captured_launches`); Triton's own
launch-time specialisation (argument types, 16-byte alignment, integers equal to 1) then turns
each recorded call into the signature it would compile for the target. Each compile runs at
every candidate tile configuration of :data:`kernels.tooling.tiles.TILE_CONFIGS`, with
``default`` marking the one the dispatcher picks.

Resources read from the binaries:

- NVIDIA: ``cuobjdump -res-usage`` (shipped inside the triton wheel): ``REG`` registers per
  thread; ``STACK`` + ``LOCAL``, the per-thread stack frame and local memory, as
  ``spill_bytes`` (Triton kernels keep no local arrays, so a stack frame is register spills);
  shared memory is Triton's dynamic allocation (``metadata.shared``, what the launch requests)
  plus the static ``SHARED`` cuobjdump reports.
- AMD: the kernel descriptor in the AMDGCN assembly's metadata: ``.vgpr_count`` registers per
  lane (architectural VGPRs and AGPRs, one file on gfx942); ``.private_segment_fixed_size``,
  the scratch memory per lane that memory spills go to, as ``spill_bytes`` (SGPR spills go to
  VGPR lanes, not memory); shared memory (LDS) is ``metadata.shared`` plus
  ``.group_segment_fixed_size``.

Needs kernels compiled rather than interpreted: under ``TRITON_INTERPRET=1`` ``@triton.jit``
yields interpreter functions, which cannot be lowered (:func:`check_compilable`).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
from torch.overrides import TorchFunctionMode

from kernels.tooling.common import interpreting
from kernels.tooling.tiles import HEAD_DIMS, TILE_CONFIGS, TileConfig, compiling_for

# name -> (backend, arch, warp size) of triton.backends.compiler.GPUTarget
TARGETS = {"sm_80": ("cuda", 80, 32), "sm_90": ("cuda", 90, 32), "gfx942": ("hip", "gfx942", 64)}
# Shared memory (LDS) one program may use, bytes: A100 164 KB and H100 228 KB per SM, of which a
# thread block may use 163 KB and 227 KB; MI300 (gfx942) 64 KB of LDS per workgroup.
SHARED_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024, "gfx942": 64 * 1024}
DTYPES = ("float32", "bfloat16", "float16")
COLUMNS = ("kernel", "target", "dtype", "d_head", "block_m", "block_n", "num_warps", "num_stages", "default",
           "status", "registers", "spill_bytes", "shared_bytes", "binary")
# the shapes the launches are captured at: integers Triton specialises the same way as at the
# models' shapes (T a multiple of 16, H not 1, every stride but d_head's a multiple of 16)
CAPTURE_POS, CAPTURE_HEADS = 64, 4
# TRA's backward launches its chunk-survivor kernel only past one pass of rows (kernels.tra.triton.rows_per_pass,
# at most 4096 rows: 32 x 32 tiles at head dim 128), so its launches are captured at a length of two passes
CAPTURE_POS_OF = {"tra": 4096 + 64}
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"  # ships inside the wheel


@dataclass(frozen=True)
class Launch:
    """One recorded ``kernel[grid](*args, **kwargs)`` of an op: ``kernel`` is its name in the
    table (op and kernel, e.g. ``fot_bwd_dkdv``)."""
    kernel: str
    fn: triton.runtime.JITFunction
    args: tuple
    kwargs: dict

    def config(self) -> TileConfig:
        return TileConfig(*(self.kwargs[key] for key in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")))


def check_compilable() -> None:
    if interpreting():
        raise RuntimeError("compiling the kernels needs triton's compiler, but TRITON_INTERPRET=1 is set: "
                           "run the command again without it")


class _ReportsCuda(TorchFunctionMode):
    """Every tensor's ``is_cuda`` reads True, so that the ops' wrappers take their GPU path on
    CPU tensors; nothing else changes (no kernel runs: :func:`captured_launches`)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is torch.Tensor.is_cuda:
            return True
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _recording(launches: list):
    """``kernel[grid](*args, **kwargs)`` appends ``(kernel, args, kwargs)`` instead of launching."""
    launch = triton.KernelInterface.__getitem__
    triton.KernelInterface.__getitem__ = lambda kernel, grid: lambda *a, **kw: launches.append((kernel, a, kw))
    try:
        yield
    finally:
        triton.KernelInterface.__getitem__ = launch


@functools.lru_cache(maxsize=None)
def captured_launches(op: str, dtype: str, d_head: int, target: str) -> tuple[Launch, ...]:
    """The kernel launches of op ``op`` (a name of :data:`kernels.tooling.bench.KERNELS`) forward and
    backward, in launch order, as the wrapper makes them on GPU ``target`` (a key of
    :data:`TARGETS`, whose default tiles may differ) for ``dtype`` and ``d_head``, each kernel once (its
    first launch) in the order of first launch."""
    from kernels.tooling.bench import KERNELS, random_inputs

    check_compilable()
    backend, arch, _ = TARGETS[target]
    recorded = []
    with _ReportsCuda(), _recording(recorded), compiling_for(arch if backend == "cuda" else None):
        inputs, _ = random_inputs(op, 1, CAPTURE_POS_OF.get(op, CAPTURE_POS), CAPTURE_HEADS, d_head,
                                  getattr(torch, dtype), "cpu")
        z = KERNELS[op](*inputs)
        grads = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
        torch.autograd.grad(z, grads, torch.ones_like(z), allow_unused=True)
    first = {}
    for fn, args, kwargs in recorded:  # a kernel launched once per pass is compiled once
        first.setdefault(fn, (args, kwargs))
    return tuple(Launch(f"{op}_{fn.__name__.lstrip('_')}", fn, args, kwargs) for fn, (args, kwargs) in first.items())


def _compile(launch: Launch, target: str, config: TileConfig):
    """The compiled kernel of ``launch`` at tile configuration ``config`` for ``target``, as
    Triton's launcher would build it (its binder and argument packing, which are private to
    triton 3.9's ``JITFunction``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    gpu = GPUTarget(*TARGETS[target])
    backend = make_backend(gpu)
    kwargs = {**launch.kwargs, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
              "num_warps": config.num_warps, "num_stages": config.num_stages}
    binder = create_function_from_signature(launch.fn.signature, launch.fn.params, backend)
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = launch.fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(launch.fn, signature, constexprs, attrs), target=gpu, options=options.__dict__)


def cuda_resources(cubin: Path) -> dict:
    """Registers, spill bytes (stack frame + local memory) and static shared memory of the one
    kernel in ``cubin``, from ``cuobjdump -res-usage``."""
    text = subprocess.run([str(CUOBJDUMP), "-res-usage", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    usage = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text))
    return {"registers": int(usage["REG"]), "spill_bytes": int(usage["STACK"]) + int(usage["LOCAL"]),
            "static_shared": int(usage["SHARED"])}


def hip_resources(amdgcn: str) -> dict:
    """Registers per lane, scratch bytes per lane and static LDS of the kernel in ``amdgcn``
    (the assembly Triton keeps next to the hsaco), from its kernel descriptor's metadata."""
    def field(name):
        return int(re.search(rf"^\s*\.{name}:\s+(\d+)", amdgcn, re.M).group(1))

    return {"registers": field("vgpr_count"), "spill_bytes": field("private_segment_fixed_size"),
            "static_shared": field("group_segment_fixed_size")}


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]


def compile_op(op: str, dtype: str, d_head: int, target: str, config: TileConfig | None, out: Path) -> list[dict]:
    """One row of the table per kernel of op ``op`` (forward and backward) compiled for
    ``target`` at ``config`` (None: each at the configuration the dispatcher picks); the
    binaries go under ``out/binaries/<target>/``."""
    rows = []
    for launch in captured_launches(op, dtype, d_head, target):
        tiles = config or launch.config()
        row = {"kernel": launch.kernel, "target": target, "dtype": dtype, "d_head": d_head, **asdict(tiles),
               "default": launch.config() == tiles, "status": "ok", "registers": None, "spill_bytes": None,
               "shared_bytes": None, "binary": ""}
        try:
            compiled = _compile(launch, target, tiles)
        except Exception as err:  # noqa: BLE001: any compiler error is a row of the table
            rows.append({**row, "status": _one_line(err)})
            continue
        suffix = "cubin" if "cubin" in compiled.asm else "hsaco"
        binary = Path("binaries", target, f"{launch.kernel}-{dtype}-d{d_head}-{tiles.name}.{suffix}")
        (out / binary).parent.mkdir(parents=True, exist_ok=True)
        (out / binary).write_bytes(compiled.asm[suffix])
        found = cuda_resources(out / binary) if suffix == "cubin" else hip_resources(compiled.asm["amdgcn"])
        rows.append({**row, "registers": found["registers"], "spill_bytes": found["spill_bytes"],
                     "shared_bytes": compiled.metadata.shared + found["static_shared"], "binary": str(binary)})
    return rows


def problems(row: dict) -> list[str]:
    """What is wrong with a compiled row: a compile error, register spills, or shared memory
    over the target's limit (empty when it fits)."""
    if row["status"] != "ok":
        return ["compile error"]
    found = []
    if row["spill_bytes"] > 0:
        found.append("spills")
    if row["shared_bytes"] > SHARED_LIMIT[row["target"]]:
        found.append("shared memory over the limit")
    return found


def failures_first(rows: list[dict]) -> list[dict]:
    """Compile errors, then rows that spill or do not fit, then the rest, each in matrix order."""
    return sorted(rows, key=lambda r: 0 if r["status"] != "ok" else 1 if problems(r) else 2)


def _compile_task(numbered: tuple) -> tuple[int, list[dict]]:
    """:func:`compile_op` of task ``(i, (op, dtype, d_head, target, config), out)``, numbered."""
    i, task, out = numbered
    return i, compile_op(*task, out)


def _worker_init():
    """A compile worker: one thread, and Ctrl-C left to the parent (which cancels what is queued).
    Triton 3.9 warns that floating-point fusion is on by default; it is what a launch compiles."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    torch.set_num_threads(1)


def compile_matrix(out: str | Path, targets=tuple(TARGETS), dtypes=DTYPES, d_heads=HEAD_DIMS, ops=None,
                   defaults_only: bool = False, workers: int | None = None, progress=None) -> list[dict]:
    """Compile every kernel of ``ops`` (default: all of :data:`kernels.tooling.bench.KERNELS`) for each
    target, dtype and head dim, at every tile configuration of :data:`TILE_CONFIGS` (with
    ``defaults_only``, at the one the dispatcher picks), in ``workers`` processes (default: one
    per core); write ``out/compile.csv`` (:data:`COLUMNS`) and the binaries, and return the rows
    in matrix order. Progress, with what is left, goes to ``progress`` (default: standard
    error); Triton's cache (``TRITON_CACHE_DIR``) makes a repeated run quick."""
    import pandas as pd

    from kernels.tooling.bench import KERNELS

    for name, chosen, allowed in (("target", targets, TARGETS), ("dtype", dtypes, DTYPES),
                                  ("head dim", d_heads, HEAD_DIMS), ("kernel", ops or KERNELS, KERNELS)):
        unknown = [x for x in chosen if x not in allowed]
        if unknown or not chosen:
            what = f"unknown {name} {', '.join(map(str, unknown))}" if unknown else f"no {name} given"
            raise ValueError(f"{what}: choose among {', '.join(map(str, allowed))}")
    check_compilable()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [(op, dtype, d, target, config) for op in ops or KERNELS for dtype in dtypes for d in d_heads
             for target in targets
             for config in ((None,) if defaults_only else TILE_CONFIGS)]
    workers = workers or len(os.sched_getaffinity(0))
    results, start = {}, time.perf_counter()
    pool = multiprocessing.get_context("spawn").Pool(workers, _worker_init)  # torch's threads do not survive a fork
    try:
        for i, rows in pool.imap_unordered(_compile_task, [(i, task, out) for i, task in enumerate(tasks)]):
            results[i] = rows
            op, dtype, d, target, config = tasks[i]
            elapsed, left = time.perf_counter() - start, len(tasks) - len(results)
            bad = sum(bool(problems(r)) for r in rows)
            print(f"[{len(results)}/{len(tasks)}] {op} {target} {dtype} d_head {d} "
                  f"{config.name if config else 'defaults'}: {bad or 'no'} problem{'s' * (bad != 1)}; {left} left, "
                  f"about {elapsed / len(results) * left:.0f} s", file=progress or sys.stderr, flush=True)
        pool.close()
    finally:
        pool.terminate()  # at once on Ctrl-C: a compile in flight is not worth waiting for
        pool.join()
    rows = [row for i in range(len(tasks)) for row in results[i]]
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(out / "compile.csv", index=False)
    return rows

"""Speed and memory of the kernels against PyTorch references and SDPA (flash), and the
tile sparsity that decides whether skipping all-zero key tiles pays.

- :func:`bench_kernels` (CUDA only): for each kernel and T (fixed tokens per batch, so the
  batch shrinks as T grows), forward, backward and forward+backward time (median of CUDA
  event timings) and peak memory, next to ``scaled_dot_product_attention`` restricted to
  its flash backend (causal, same shapes) and, when the caller passes them, the PyTorch
  references (``kernels`` never imports ``models``; ``interp`` builds them from the
  mechanisms' ``reference`` methods). A reference that runs out of memory is reported as such.
- :func:`bench_zero_tile_skipping` (CUDA only): the forward with and without
  ``skip_zero_tiles`` on given (ideally trained-model) inputs.
- :func:`zero_tile_fraction` (any device): the fraction of visible key tiles whose pattern
  entries are all exactly zero, for tile sizes 16, 32 and 64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernels.forgetting import forgetting_attention
from kernels.threshold import differential_threshold_attention, threshold_attention
from kernels.tra import tra_attention

KERNELS: dict[str, Callable] = {"tra": tra_attention, "fot": forgetting_attention, "trela": threshold_attention,
                                "tda": differential_threshold_attention}


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise RuntimeError("the kernel benchmark needs a CUDA GPU (Triton kernels, SDPA's flash backend, CUDA "
                           "timers); on this machine only zero_tile_fraction and the interpreter tests run")


def zero_tile_fraction(pattern: torch.Tensor, tile_sizes=(16, 32, 64)) -> dict[int, float]:
    """``pattern [batch, head, query_pos, key_pos]`` (the weights applied to V, e.g. a
    cached ``hook_pattern``) -> {tile size: fraction of the tiles on or below the diagonal
    whose entries are all exactly 0}. Positions past T pad the last tiles with zeros."""
    n_pos = pattern.shape[-1]
    fractions = {}
    for t in tile_sizes:
        n = math.ceil(n_pos / t)
        padded = F.pad(pattern != 0, (0, n * t - n_pos, 0, n * t - n_pos))
        nonzero = padded.reshape(*pattern.shape[:-2], n, t, n, t).any(-1).any(-2)   # [..., query_tile, key_tile]
        visible = torch.ones(n, n, dtype=torch.bool, device=pattern.device).tril()
        fractions[t] = ((~nonzero & visible).sum() / (visible.sum() * nonzero[..., 0, 0].numel())).item()
    return fractions


def _inputs(name: str, batch: int, n_pos: int, n_heads: int, d_head: int, dtype) -> tuple[list, list]:
    """Random inputs as the models produce them (normalised q and k, gates from logsigmoid),
    and the (q, k, v) that SDPA gets for the same shapes."""
    def heads(normalise):
        x = torch.randn(batch, n_pos, n_heads, d_head, device="cuda")
        return normalise(x).to(dtype).requires_grad_()

    def rms(x):
        return F.rms_norm(x, (d_head,))

    def unit(x):
        return F.normalize(x, dim=-1)

    def gate(offset):
        return F.logsigmoid(torch.randn(batch, n_heads, n_pos, device="cuda") + offset).requires_grad_()

    beta = torch.ones((), device="cuda", requires_grad=True)
    lam = torch.full((), 0.5, device="cuda", requires_grad=True)
    inputs = {"tra": lambda: [heads(rms), heads(rms), heads(rms), gate(0.0)],
              "fot": lambda: [heads(rms), heads(rms), heads(rms), gate(3.0)],
              "trela": lambda: [heads(unit), heads(unit), heads(rms), beta],
              "tda": lambda: [heads(unit), heads(unit), heads(unit), heads(unit), heads(rms), beta, lam]}[name]()
    v = inputs[4] if name == "tda" else inputs[2]
    return inputs, [inputs[0], inputs[1], v]


def _sdpa(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)


def _median_ms(fn: Callable, setup: Callable | None = None, repeats: int = 10) -> float:
    """Median CUDA-event time of ``fn(setup())`` (setup untimed), after one warm-up."""
    times = []
    for i in range(repeats + 1):
        arg = setup() if setup else None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn(arg)
        end.record()
        torch.cuda.synchronize()
        if i:
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _measure(fn: Callable, inputs: list, repeats: int) -> dict:
    """Forward, backward, forward+backward (ms) and the peak memory above the inputs (MiB)."""
    grads = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]

    def forward(_=None):
        return fn(*inputs)

    def backward(z):
        # allow_unused: a reference may hold its own scalars (beta, lambda) instead of the inputs'
        torch.autograd.grad(z, grads, torch.ones_like(z), allow_unused=True)

    def forward_backward(_=None):
        backward(forward())

    row = {"fwd_ms": _median_ms(forward, repeats=repeats),
           "bwd_ms": _median_ms(backward, forward, repeats=repeats),
           "fwd_bwd_ms": _median_ms(forward_backward, repeats=repeats)}
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    forward_backward()
    torch.cuda.synchronize()
    row["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    return row


def bench_kernels(references: dict[str, Callable] | None = None, seq_lens=(512, 1024, 2048, 4096, 8192, 16384),
                  tokens: int = 16384, n_heads: int = 4, d_head: int = 64, dtype=torch.bfloat16,
                  repeats: int = 10, kernels=tuple(KERNELS)) -> list[dict]:
    """One row per (kernel, T, implementation): ``triton``, ``sdpa_flash`` and, when
    ``references[name]`` is given (same signature as the kernel), ``reference``; each with
    its times, peak memory, and its ratios to SDPA and to the reference in the same run
    (NaN where there is no reference or it ran out of memory)."""
    require_cuda()
    rows = []
    for n_pos in seq_lens:
        batch = max(tokens // n_pos, 1)
        for name in kernels:
            torch.manual_seed(0)
            inputs, qkv = _inputs(name, batch, n_pos, n_heads, d_head, dtype)
            impls = {"triton": (KERNELS[name], inputs), "sdpa_flash": (_sdpa, qkv)}
            if references and name in references:
                impls["reference"] = (references[name], inputs)
            measured = {}
            for impl, (fn, args) in impls.items():
                try:
                    measured[impl] = {**_measure(fn, args, repeats), "note": ""}
                except torch.cuda.OutOfMemoryError:
                    measured[impl] = {key: float("nan") for key in ("fwd_ms", "bwd_ms", "fwd_bwd_ms", "peak_mib")}
                    measured[impl]["note"] = "out of memory"
                torch.cuda.empty_cache()
            sdpa = measured["sdpa_flash"]
            reference = measured.get("reference", {"fwd_bwd_ms": float("nan")})
            for impl, row in measured.items():
                rows.append({"kernel": name, "T": n_pos, "batch": batch, "impl": impl, **row,
                             "fwd_bwd_vs_sdpa": row["fwd_bwd_ms"] / sdpa["fwd_bwd_ms"],
                             "peak_vs_sdpa": row["peak_mib"] / sdpa["peak_mib"],
                             "fwd_bwd_vs_reference": row["fwd_bwd_ms"] / reference["fwd_bwd_ms"]})
    return rows


def bench_zero_tile_skipping(name: str, *inputs, repeats: int = 10, **kwargs) -> dict:
    """Forward time of kernel ``name`` (tra, trela or tda) on ``inputs`` (e.g. q, k, v and gates captured from a
    trained model's hooks) with and without ``skip_zero_tiles``; both outputs must agree."""
    require_cuda()
    fn = KERNELS[name]
    with torch.no_grad():
        dense, skipped = fn(*inputs, **kwargs), fn(*inputs, skip_zero_tiles=True, **kwargs)
        if not torch.equal(dense, skipped):
            raise AssertionError(f"{name}: skipping zero tiles changed the output")
        times = {flag: _median_ms(lambda _: fn(*inputs, skip_zero_tiles=flag, **kwargs), repeats=repeats)
                 for flag in (False, True)}
    return {"kernel": name, "dense_ms": times[False], "skip_ms": times[True], "speedup": times[False] / times[True]}

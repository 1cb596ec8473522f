"""Speed and memory of the kernels against PyTorch references and SDPA (flash), and the
tile sparsity that decides whether skipping all-zero key tiles pays.

- :func:`bench_kernel`: one kernel at one T (fixed tokens per batch, so the batch shrinks as
  T grows): forward, backward and forward+backward time (median wall time, the device
  synchronised around each run) and peak memory, next to ``scaled_dot_product_attention``
  restricted to its flash backend (causal, same shapes) and, when the caller passes them, the
  PyTorch references (``kernels`` never imports ``models``; ``interp`` builds them from the
  mechanisms' ``reference`` methods). A reference that runs out of memory, or refuses maps over
  ``kernels.tooling.common.MAX_MAP_ELEMENTS`` (T = 32768), is reported as such.
  Meant for a CUDA GPU; on CPU tensors under ``TRITON_INTERPRET=1`` it runs too (at tiny sizes,
  so that a test covers it), without peak memory: the CPU keeps no allocator statistics.
- :func:`bench_tile_configs`: one kernel at one T at each of several tile configurations
  (tiles, warps, stages), beside SDPA and the dispatcher's choice, in one run: the measurement
  that picks a GPU's default tiles.
- :func:`kernel_goals`: whether a set of :func:`bench_kernel` rows meets the kernels' goals.
- :func:`bench_zero_tile_skipping`: the forward with and without ``skip_zero_tiles`` on given
  (ideally trained-model) inputs.
- :func:`zero_tile_fraction` (any device): the fraction of visible key tiles whose pattern
  entries are all exactly zero, for tile sizes 16, 32 and 64.
- :func:`tile_bound_detection` (any device): which share of the empty tiles each cheap bound on
  a tile's largest score finds, on given (ideally trained-model) inputs.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton

from kernels.forgetting.triton import forgetting_attention
from kernels.tooling.common import threshold
from kernels.tooling.tiles import TileConfig, default_tiles, forced_tiles, gpu_arch
from kernels.threshold.triton import differential_threshold_attention, threshold_attention
from kernels.tra.triton import tra_attention

KERNELS: dict[str, Callable] = {"tra": tra_attention, "fot": forgetting_attention, "trela": threshold_attention,
                                "tda": differential_threshold_attention}
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
TIMES = ("fwd_ms", "bwd_ms", "fwd_bwd_ms")


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


def random_inputs(name: str, batch: int, n_pos: int, n_heads: int, d_head: int, dtype,
                  device="cuda") -> tuple[list, list]:
    """Random inputs of kernel ``name`` as the models produce them (normalised q and k, gates
    from logsigmoid), and the (q, k, v) that SDPA gets for the same shapes."""
    def heads(normalise):
        x = torch.randn(batch, n_pos, n_heads, d_head, device=device)
        return normalise(x).to(dtype).requires_grad_()

    def rms(x):
        return F.rms_norm(x, (d_head,))

    def unit(x):
        return F.normalize(x, dim=-1)

    def gate(offset):
        return F.logsigmoid(torch.randn(batch, n_heads, n_pos, device=device) + offset).requires_grad_()

    beta = torch.ones((), device=device, requires_grad=True)
    lam = torch.full((), 0.5, device=device, requires_grad=True)
    inputs = {"tra": lambda: [heads(rms), heads(rms), heads(rms), gate(0.0)],
              "fot": lambda: [heads(rms), heads(rms), heads(rms), gate(3.0)],
              "trela": lambda: [heads(unit), heads(unit), heads(rms), beta],
              "tda": lambda: [heads(unit), heads(unit), heads(unit), heads(unit), heads(rms), beta, lam]}[name]()
    v = inputs[4] if name == "tda" else inputs[2]
    return inputs, [inputs[0], inputs[1], v]


def tiled_inputs(args: tuple, n_pos: int, batch: int, dtype, device) -> list:
    """A kernel's arguments captured from a trained model at its own length (``q, k, v``
    ``[batch, pos, head, d_head]``, gates ``[batch, head, pos]``, scalars) stretched to ``batch``
    sequences of ``n_pos`` positions by repeating its sequences and positions cyclically: the
    score distribution of the trained heads at every T (the threshold still grows with the
    position, so long T is at least as sparse as the model's own). q, k and v take ``dtype``,
    gates and scalars stay float32; every float tensor is a fresh leaf that requires grad."""
    def stretch(x):
        if not isinstance(x, torch.Tensor):
            return x
        x = x.detach().to(device)
        if x.dim() == 4:
            x = x[torch.arange(batch) % x.shape[0]][:, torch.arange(n_pos) % x.shape[1]].to(dtype)
        elif x.dim() == 3:
            x = x[torch.arange(batch) % x.shape[0]][..., torch.arange(n_pos) % x.shape[2]].float()
        return x.contiguous().requires_grad_(x.is_floating_point())

    return [stretch(x) for x in args]


def sampled_zero_tile_fraction(name: str, inputs: list, tile: int = 64, query_tiles: int = 16,
                               kappa=1.0) -> float:
    """Fraction of the visible (query tile, key tile) pairs of ``tile`` x ``tile`` in which no
    weight survives, over ``query_tiles`` query tiles spread evenly along T (sequence 0, every
    head): what a zero-tile-skipping kernel leaves out, estimated without the T x T map. A
    survivor is ``s_ij > tau_i`` in either view for trela and TDA (``s = q.k``, TDA eq. 1's tau),
    ``q.k > 0`` for TRA (eq. 3-4); FoT's softmax leaves no tile zero (0.0)."""
    if name == "fot":
        return 0.0
    q, k = inputs[0][0].float(), inputs[1][0].float()                      # [pos, head, d]
    n_pos, d_head = q.shape[0], q.shape[-1]
    n_tiles = math.ceil(n_pos / tile)
    starts = torch.linspace(0, n_tiles - 1, min(query_tiles, n_tiles)).round().long().unique() * tile
    views = [(q, k)] + ([(inputs[2][0].float(), inputs[3][0].float())] if name == "tda" else [])
    beta = inputs[5 if name == "tda" else 3] if name in ("trela", "tda") else None
    zero = visible = 0
    for start in starts.tolist():
        rows = torch.arange(start, min(start + tile, n_pos), device=q.device)
        end = int(rows[-1]) + 1
        alive = torch.zeros(q.shape[1], len(rows), end, dtype=torch.bool, device=q.device)
        for qv, kv in views:
            s = torch.einsum("mhd,nhd->hmn", qv[rows], kv[:end])
            cut = (threshold(n_pos, d_head, beta.detach().float(), kappa)[:, rows, None] if beta is not None
                   else torch.zeros(()))
            alive |= s > cut
        alive &= torch.arange(end, device=q.device)[None, None, :] <= rows[None, :, None]
        key_tiles = math.ceil(end / tile)
        padded = F.pad(alive, (0, key_tiles * tile - end)).reshape(alive.shape[0], len(rows), key_tiles, tile)
        zero += int((~padded.any(-1).any(1)).sum())
        visible += alive.shape[0] * key_tiles
    return zero / visible


def _tiles(x: torch.Tensor, block: int) -> torch.Tensor:
    """``x [pos, head, d]`` as ``[head, tile, block, d]`` in float32, the last tile padded with
    copies of the last row (which leave every per-tile extreme unchanged)."""
    n = math.ceil(x.shape[0] / block)
    x = torch.cat([x, x[-1:].expand(n * block - x.shape[0], *x.shape[1:])]).float()
    return x.reshape(n, block, *x.shape[1:]).permute(2, 0, 1, 3)


def _norm_bound(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Cauchy-Schwarz per (query tile, key tile), ``[head, query tile, key tile]``: the largest
    query norm times the largest key norm (what the threshold kernels test)."""
    return q.norm(dim=-1).amax(2)[:, :, None] * k.norm(dim=-1).amax(2)[:, None]


def _box_bound(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The per-dimension box bound: ``sum_d max`` of the four products of the query and key tiles'
    per-dimension minimum and maximum."""
    ends_q, ends_k = (q.amin(2), q.amax(2)), (k.amin(2), k.amax(2))
    return torch.stack([a[:, :, None] * b[:, None] for a in ends_q for b in ends_k]).amax(0).sum(-1)


def _ball_bound(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The centroid-and-radius bound: ``c_q.c_k + r_q |c_k| + r_k |c_q| + r_q r_k``."""
    cq, ck = q.mean(2), k.mean(2)
    rq, rk = ((x - c[:, :, None]).norm(dim=-1).amax(2) for x, c in ((q, cq), (k, ck)))
    nq, nk = cq.norm(dim=-1), ck.norm(dim=-1)
    return (torch.einsum("hqd,hkd->hqk", cq, ck) + rq[:, :, None] * nk[:, None] + nq[:, :, None] * rk[:, None]
            + rq[:, :, None] * rk[:, None])


def _row_bound(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Each query row against the key tile's box, ``[head, pos, key tile]``: ``sum_d max(q_d lo_d,
    q_d hi_d)``; O(rows x d) per tile pair, not O(d) as the others."""
    lo, hi = k.amin(2), k.amax(2)
    rows = q.flatten(1, 2)
    return torch.maximum(rows[:, :, None] * lo[:, None], rows[:, :, None] * hi[:, None]).sum(-1)


def tile_bound_detection(name: str, inputs: list, block_m: int, block_n: int, kappa=1.0) -> dict:
    """On sequence 0 of kernel ``name``'s ``inputs`` (trela or TDA, or TRA with its threshold 0 on
    ``q.k``), at tiles of ``block_m`` query rows and ``block_n`` keys: the fraction of the visible
    (query tile, key tile) pairs in which no weight survives (``empty``), and the fraction of those
    that each bound on the tile's largest score proves empty (bound <= the tile's smallest tau, in
    every view): ``norm`` (:func:`_norm_bound`), ``box`` (:func:`_box_bound`), ``ball``
    (:func:`_ball_bound`) and ``row`` (:func:`_row_bound`, each row against its own tau). Every
    bound is checked never to call a tile with a survivor empty. In float32, without the kernels'
    rounding slack."""
    q, k = inputs[0][0].detach(), inputs[1][0].detach()                     # [pos, head, d]
    n_pos, n_heads, d_head = q.shape
    views = [(q, k)] + ([(inputs[2][0].detach(), inputs[3][0].detach())] if name == "tda" else [])
    beta = inputs[5 if name == "tda" else 3] if name in ("trela", "tda") else None
    tau = (threshold(n_pos, d_head, torch.as_tensor(beta).detach().float().to(q.device), kappa).expand(n_heads, n_pos)
           if beta is not None else torch.zeros(n_heads, n_pos, device=q.device))
    n_q, n_k = math.ceil(n_pos / block_m), math.ceil(n_pos / block_n)
    alive = torch.zeros(n_heads, n_q, n_k, dtype=torch.bool, device=q.device)
    for i in range(n_q):
        rows = torch.arange(i * block_m, min((i + 1) * block_m, n_pos), device=q.device)
        end = int(rows[-1]) + 1
        causal = torch.arange(end, device=q.device)[None, None, :] <= rows[None, :, None]
        for qv, kv in views:
            survives = (torch.einsum("mhd,nhd->hmn", qv[rows].float(), kv[:end].float()) > tau[:, rows, None]) & causal
            key_tiles = math.ceil(end / block_n)
            alive[:, i, :key_tiles] |= F.pad(survives, (0, key_tiles * block_n - end)).reshape(
                n_heads, len(rows), key_tiles, block_n).any(-1).any(1)
    starts = torch.arange(n_q, device=q.device)
    visible = (torch.arange(n_k, device=q.device)[None, :] * block_n <= torch.clamp(
        (starts[:, None] + 1) * block_m, max=n_pos) - 1).expand(n_heads, -1, -1)
    empty = visible & ~alive
    tau_min = F.pad(tau, (0, n_q * block_m - n_pos), value=float("inf")).reshape(n_heads, n_q, block_m).amin(-1)
    found = {}
    for bound in (_norm_bound, _box_bound, _ball_bound):
        proven = torch.stack([bound(_tiles(qv, block_m), _tiles(kv, block_n)) <= tau_min[:, :, None]
                              for qv, kv in views]).all(0)
        found[bound.__name__.strip("_").removesuffix("_bound")] = proven
    rows_proven = torch.stack([_row_bound(_tiles(qv, block_m), _tiles(kv, block_n))
                               <= F.pad(tau, (0, n_q * block_m - n_pos), value=float("inf"))[:, :, None]
                               for qv, kv in views]).all(0)
    found["row"] = rows_proven.reshape(n_heads, n_q, block_m, n_k).all(2)
    result = {"kernel": name, "T": n_pos, "block_m": block_m, "block_n": block_n,
              "empty": (empty.sum() / visible.sum()).item()}
    for bound, proven in found.items():
        if (proven & visible & alive).any():
            raise AssertionError(f"the {bound} bound calls a tile with a survivor empty")
        result[bound] = ((proven & empty).sum() / empty.sum().clamp(min=1)).item()
    return result


def _sdpa(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work: CUDA kernels run asynchronously, CPU ones do not."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn: Callable, device: torch.device, setup: Callable | None = None, repeats: int = 10) -> float:
    """Median wall time of ``fn(setup())`` (setup untimed), after one warm-up (which compiles)."""
    times = []
    for i in range(repeats + 1):
        arg = setup() if setup else None
        _synchronize(device)
        start = time.perf_counter()
        fn(arg)
        _synchronize(device)
        if i:
            times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def _peak_mib(fn: Callable, device: torch.device) -> float:
    """Peak memory of ``fn()`` above what was allocated before it (MiB); NaN off CUDA."""
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20


def _measure(fn: Callable, inputs: list, repeats: int, device: torch.device) -> dict:
    """Forward, backward, forward+backward (ms) and the peak memory above the inputs (MiB)."""
    grads = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]

    def forward(_=None):
        return fn(*inputs)

    def backward(z):
        # allow_unused: a reference may hold its own scalars (beta, lambda) instead of the inputs'
        torch.autograd.grad(z, grads, torch.ones_like(z), allow_unused=True)

    def forward_backward(_=None):
        backward(forward())

    return {"fwd_ms": _median_ms(forward, device, repeats=repeats),
            "bwd_ms": _median_ms(backward, device, forward, repeats=repeats),
            "fwd_bwd_ms": _median_ms(forward_backward, device, repeats=repeats),
            "peak_mib": _peak_mib(forward_backward, device)}


def bench_kernel(name: str, n_pos: int, references: dict[str, Callable] | None = None, tokens: int = 16384,
                 n_heads: int = 4, d_head: int = 64, dtype=torch.bfloat16, repeats: int = 10,
                 device="cuda", trained: dict[str, tuple[str, tuple, dict]] | None = None) -> list[dict]:
    """One row per implementation of kernel ``name`` at sequence length ``n_pos`` (batch
    ``tokens // n_pos``): ``triton``, ``sdpa_flash`` and, when ``references[name]`` is given
    (same signature as the kernel), ``reference``; each with its times, peak memory, and its
    ratios to SDPA and to the reference in the same run (NaN where there is no reference or
    it ran out of memory). The kernel's inputs are random (:func:`random_inputs`), or, when
    ``trained[name]`` is given as ``(source, args, kwargs)``, a trained model's captured
    arguments stretched to the shape (:func:`tiled_inputs`; SDPA gets their q, k, v); each row
    names its ``inputs`` and the fraction of 64 x 64 tiles in which nothing survives
    (:func:`sampled_zero_tile_fraction`)."""
    device = torch.device(device)
    batch = max(tokens // n_pos, 1)
    torch.manual_seed(0)
    source, kwargs = "random", {}
    if trained and name in trained:
        source, args, kwargs = trained[name]
        inputs = tiled_inputs(args, n_pos, batch, dtype, device)
        qkv = [inputs[0], inputs[1], inputs[4] if name == "tda" else inputs[2]]
    else:
        inputs, qkv = random_inputs(name, batch, n_pos, n_heads, d_head, dtype, device)
    with torch.no_grad():
        zero_tiles = sampled_zero_tile_fraction(name, inputs, kappa=kwargs.get("kappa", 1.0))
    kernel = functools.partial(KERNELS[name], **kwargs)
    impls = {"triton": (kernel, inputs), "sdpa_flash": (_sdpa, qkv)}
    if references and name in references:
        impls["reference"] = (references[name], inputs)
    measured = {}
    for impl, (fn, args) in impls.items():
        try:
            measured[impl] = {**_measure(fn, args, repeats, device), "note": ""}
        except torch.cuda.OutOfMemoryError:
            measured[impl] = {**dict.fromkeys((*TIMES, "peak_mib"), float("nan")), "note": "out of memory"}
        except ValueError:  # a reference refuses maps over kernels.tooling.common.MAX_MAP_ELEMENTS
            if impl != "reference":
                raise
            measured[impl] = {**dict.fromkeys((*TIMES, "peak_mib"), float("nan")), "note": "maps over the size limit"}
        if device.type == "cuda":
            torch.cuda.empty_cache()
    sdpa = measured["sdpa_flash"]
    reference = measured.get("reference", {"fwd_bwd_ms": float("nan")})
    return [{"kernel": name, "T": n_pos, "batch": batch, "inputs": source, "heads": qkv[0].shape[2],
             "d_head": qkv[0].shape[3], "zero_tiles": zero_tiles, "impl": impl, **row,
             "fwd_bwd_vs_sdpa": row["fwd_bwd_ms"] / sdpa["fwd_bwd_ms"],
             "peak_vs_sdpa": row["peak_mib"] / sdpa["peak_mib"],
             "fwd_bwd_vs_reference": row["fwd_bwd_ms"] / reference["fwd_bwd_ms"]}
            for impl, row in measured.items()]


def bench_tile_configs(name: str, n_pos: int, configs: list[TileConfig], tokens: int = 16384, n_heads: int = 4,
                       d_head: int = 64, dtype=torch.bfloat16, repeats: int = 10, device="cuda") -> list[dict]:
    """Kernel ``name`` at sequence length ``n_pos`` (batch ``tokens // n_pos``) at each of
    ``configs`` (every launch, forward and backward, through :func:`kernels.tooling.tiles.forced_tiles`) and
    at the dispatcher's choice (``tiles`` "default"), beside SDPA's flash attention (``tiles``
    "sdpa_flash"), one row each: times, ratio of fwd+bwd to SDPA's, and the largest absolute
    difference of the output from the default's (tiles change only the order of float32
    sums). The forward and backward times are separate columns, so that the fastest forward and
    the fastest backward configuration can be read apart (:func:`best_tiles`). A configuration the GPU cannot run (too much shared memory) gets a
    row with NaN times and Triton's reason in ``note``."""
    device = torch.device(device)
    batch = max(tokens // n_pos, 1)
    torch.manual_seed(0)
    inputs, qkv = random_inputs(name, batch, n_pos, n_heads, d_head, dtype, device)
    fn = KERNELS[name]
    with torch.no_grad():
        default_z = fn(*inputs)
    default = (default_tiles(dtype, d_head, gpu_arch(device), name).name if device.type == "cuda"
               else "32x32 under the interpreter")
    rows = [{"tiles": "sdpa_flash", **_measure(_sdpa, qkv, repeats, device), "max_abs_diff_vs_default": math.nan,
             "note": ""},
            {"tiles": "default", **_measure(fn, inputs, repeats, device), "max_abs_diff_vs_default": 0.0,
             "note": default}]
    for config in configs:
        try:
            with forced_tiles(config):
                with torch.no_grad():
                    diff = (fn(*inputs).float() - default_z.float()).abs().max().item()
                rows.append({"tiles": config.name, **_measure(fn, inputs, repeats, device),
                             "max_abs_diff_vs_default": diff, "note": ""})
        except triton.runtime.errors.OutOfResources as err:
            rows.append({"tiles": config.name, **dict.fromkeys((*TIMES, "peak_mib", "max_abs_diff_vs_default"),
                                                               math.nan), "note": " ".join(str(err).split())})
        if device.type == "cuda":
            torch.cuda.empty_cache()
    sdpa_ms = rows[0]["fwd_bwd_ms"]
    return [{"kernel": name, "T": n_pos, "batch": batch, "tiles": r.pop("tiles"), **r,
             "fwd_bwd_vs_sdpa": r["fwd_bwd_ms"] / sdpa_ms} for r in rows]


def best_tiles(rows: list[dict]) -> list[dict]:
    """Per kernel and T of :func:`bench_tile_configs` rows: the fastest configuration for the
    forward and for the backward (they may differ), and fwd+bwd at the default and at that pair
    (the sum of the two times, each measured alone), as ratios to SDPA's."""
    best = []
    for kernel, n_pos in dict.fromkeys((r["kernel"], r["T"]) for r in rows):
        mine = [r for r in rows if (r["kernel"], r["T"]) == (kernel, n_pos) and not math.isnan(r["fwd_bwd_ms"])]
        sdpa = next(r for r in mine if r["tiles"] == "sdpa_flash")
        default = next(r for r in mine if r["tiles"] == "default")
        ours = [r for r in mine if r["tiles"] != "sdpa_flash"]
        fwd, bwd = min(ours, key=lambda r: r["fwd_ms"]), min(ours, key=lambda r: r["bwd_ms"])
        best.append({"kernel": kernel, "T": n_pos, "best_fwd": fwd["tiles"], "best_bwd": bwd["tiles"],
                     "default_vs_sdpa": default["fwd_bwd_ms"] / sdpa["fwd_bwd_ms"],
                     "best_pair_vs_sdpa": (fwd["fwd_ms"] + bwd["bwd_ms"]) / (sdpa["fwd_ms"] + sdpa["bwd_ms"])})
    return best


# The kernels' goals for a benchmark at fixed tokens per batch: memory linear in T, i.e. a peak that
# does not grow with T (by more than FLAT_MEMORY); fwd+bwd within NEAR_SDPA of SDPA from T =
# NEAR_SDPA_FROM on (on any inputs); and, on a trained model's inputs (where the threshold empties
# whole tiles), fwd+bwd within FASTER_THAN_SDPA of SDPA's from T = FASTER_FROM on.
FLAT_MEMORY = 1.25
NEAR_SDPA, NEAR_SDPA_FROM = {"tra": 1.5, "fot": 1.2}, 8192
FASTER_THAN_SDPA, FASTER_FROM = {"trela": 0.9, "tda": 1.0}, 16384


def kernel_goals(rows: list[dict]) -> list[dict]:
    """One row per goal, kernel and kind of inputs of the ``triton`` rows of :func:`bench_kernel`:
    the worst measured figure against its limit, and whether it is met (None where the rows do
    not tell: no peak memory off CUDA, no T that large, no trained inputs)."""
    goals = []

    def add(kernel, inputs, goal, values, limit):
        values = [v for v in values if not math.isnan(v)]
        worst = max(values, default=float("nan"))
        goals.append({"kernel": kernel, "inputs": inputs, "goal": goal, "worst": worst, "limit": limit,
                      "met": None if not values else worst <= limit})

    triton = sorted((r for r in rows if r["impl"] == "triton"), key=lambda r: r["T"])
    for name, inputs in dict.fromkeys((r["kernel"], r.get("inputs", "random")) for r in triton):
        mine = [r for r in triton if r["kernel"] == name and r.get("inputs", "random") == inputs]
        add(name, inputs, f"peak memory / peak at T = {mine[0]['T']}",
            [r["peak_mib"] / mine[0]["peak_mib"] for r in mine], FLAT_MEMORY)
        if name in NEAR_SDPA:
            add(name, inputs, f"fwd+bwd / SDPA's, T >= {NEAR_SDPA_FROM}",
                [r["fwd_bwd_vs_sdpa"] for r in mine if r["T"] >= NEAR_SDPA_FROM], NEAR_SDPA[name])
        if name in FASTER_THAN_SDPA and inputs != "random":
            add(name, inputs, f"fwd+bwd / SDPA's, T >= {FASTER_FROM}",
                [r["fwd_bwd_vs_sdpa"] for r in mine if r["T"] >= FASTER_FROM], FASTER_THAN_SDPA[name])
    return goals


def bench_zero_tile_skipping(name: str, *inputs, repeats: int = 10, **kwargs) -> dict:
    """Forward time of kernel ``name`` (tra, trela or tda) on ``inputs`` (e.g. q, k, v and gates captured from a
    trained model's hooks) with and without ``skip_zero_tiles``; both outputs must agree."""
    fn = KERNELS[name]
    device = inputs[0].device
    with torch.no_grad():
        dense, skipped = fn(*inputs, **kwargs), fn(*inputs, skip_zero_tiles=True, **kwargs)
        if not torch.equal(dense, skipped):
            raise AssertionError(f"{name}: skipping zero tiles changed the output")
        times = {flag: _median_ms(lambda _: fn(*inputs, skip_zero_tiles=flag, **kwargs), device, repeats=repeats)
                 for flag in (False, True)}
    return {"kernel": name, "dense_ms": times[False], "skip_ms": times[True], "speedup": times[False] / times[True]}

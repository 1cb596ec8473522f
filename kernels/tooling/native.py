"""Fused C kernels for the CPU, ``kernels/tooling/native.c``: for the forward without gradients (the
evaluation's) the attention core of softmax attention without a bias (NoPE, APE, Label, RoPE),
Diff, CoPE, trela and TDA, four query rows at a time, each loop vectorised along the keys; in
training too, trela's and TDA's q~ and k~ (RoPE then unit length) and their gradient, one pass
over each row each way where PyTorch makes about ten (:func:`rotated_unit_forward`), and CoPE's
logits and their gradient in the training path's blocks (:func:`cope_positions`), Shaw's
(:func:`shaw_logits_`), and trela's and TDA's weights and their gradient (:func:`threshold_weights_`);
and the blocks' per-position work in the evaluation: RMSNorm (:func:`rms_norm`) and SwiGLU's hidden
activation (:func:`swiglu_hidden`), one pass each.

At the ``mech`` head size (d_head 16, 8 per Diff view) PyTorch's own paths are far from the
matmul roofline (its fused attention does about 40 GFLOP/s there, of 160-200): each query
row's products are too short for a matrix library, and every step of a mechanism's chain is a
separate pass over a ``[query, key]`` block. In C, with the keys transposed, each key vector
loaded serves four query rows, and the chain runs along one row's keys in cache; the same
work runs 2-3x faster on the core and lifts the evaluation over half the roofline
(``glitchlens bench eval`` prints both paths side by side).

The library is compiled on first use with the system's C compiler (``$CC``, default ``cc``;
``-O3 -march=native -ffast-math``) into ``$GLITCHLENS_CACHE`` (default
``~/.cache/glitchlens``), keyed by the source, the flags, the compiler and the CPU, and
written atomically. It is loaded from there only when the cache is private (owned by the user,
writable by no one else); otherwise it is compiled afresh for the process (:func:`library`).
Without a compiler, or with ``GLITCHLENS_NATIVE=0``, :func:`library` is None and the callers
run their PyTorch paths (one warning says why). The object is compiled
with ``-ffast-math`` but linked without it, so that loading the library does not switch the
process to flush-to-zero arithmetic (which ``-ffast-math`` at link time would).

The wrappers take the models' ``[batch, pos, head, d]`` tensors and query ``positions [batch,
n]`` (or None: every position), compute in float32 and return ``z`` in v's dtype, and split the
sequence-heads over torch's thread count (the C calls release the GIL). Their layouts come from
``kernels.tooling.rows`` where it has them (``heads_first``, ``heads_last``, ``per_head``, ``per_row``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import stat
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from kernels.tooling.rows import heads_first, heads_last, per_head, per_row

# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {
    "CC": ("cc", "the C compiler that builds the native kernels"),
    "GLITCHLENS_CACHE": ("$XDG_CACHE_HOME/glitchlens", "where the compiled native kernels are cached (loaded from "
                                                      "there only when the directory is private to the user)"),
    "GLITCHLENS_NATIVE": ("1", "0: never compile or load the native kernels; the PyTorch paths run instead"),
    "XDG_CACHE_HOME": ("~/.cache", "the cache root whose glitchlens/ holds the native kernels, unless "
                                   "GLITCHLENS_CACHE is set"),
}
SOURCE = Path(__file__).with_name("native.c")
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC", "-std=c11")
_build_lock = threading.Lock()
_switched_on = True
_passes_on = True
_I64, _F32, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
SIGNATURES = {
    "softmax_attention": [_PTR] * 6 + [_I64] * 5 + [_F32, _F32, _PTR],
    "cope_attention": [_PTR] * 5 + [_I64] * 6 + [_F32, _PTR],
    "threshold_attention": [_PTR] * 7 + [_I64] * 5 + [_F32, _F32, _PTR],
    "rotated_unit_forward": [_PTR] * 4 + [_I64] * 4 + [_F32, _PTR, _PTR, _PTR],
    "rotated_unit_backward": [_PTR] * 7 + [_I64] * 4 + [_F32, _PTR, _PTR],
    "laid_out": [_PTR] * 4 + [_I64] * 4 + [_PTR] * 2,
    "cope_rule_positions": [_PTR] + [_I64] * 4 + [_PTR, _PTR],
    "cope_rule_logits": [_PTR] * 3 + [_I64] * 6,
    "cope_rule_backward": [_PTR] * 4 + [_I64] * 6 + [_PTR],
    "shaw_rule_logits": [_PTR] * 2 + [_I64] * 6,
    "shaw_rule_backward": [_PTR] + [_I64] * 6 + [_PTR],
    "threshold_rule_weights": [_PTR] * 3 + [_I64] * 5 + [_F32, _F32, _PTR],
    "threshold_rule_backward": [_PTR] * 3 + [_I64] * 5 + [_F32, _F32] + [_PTR] * 3,
    "rms_norm_rows": [_PTR] * 2 + [_I64] * 2 + [_F32, _PTR],
    "swiglu_hidden": [_PTR] * 4 + [_I64] * 2 + [_PTR],
}
PAD = 16  # native.c's PAD: keys and values are padded to a multiple of it, a multiple of every vector width


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glitchlens"
    return Path(os.environ.get("GLITCHLENS_CACHE") or default)


def _cpu_identity() -> str:
    """What ``-march=native`` compiles for: the architecture and the CPU's feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    features = next((line for line in lines if line.startswith(("flags", "Features"))), "")
    return f"{platform.machine()} {features}"


def _compile(compiler: str, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        obj, shared = Path(tmp) / "native.o", Path(tmp) / "native.so"
        for command in ([compiler, *COMPILE_FLAGS, "-c", str(SOURCE), "-o", str(obj)],
                        [compiler, "-shared", str(obj), "-o", str(shared), "-lm"]):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"`{' '.join(command)}` failed:\n{done.stderr.strip()[-2000:]}")
        os.replace(shared, target)


def private(path: Path) -> bool:
    """Whether only this user can have written ``path``: owned by them and writable by no one
    else (as ssh asks of its keys). A library loaded from anywhere else could be anyone's code."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (not stat.S_ISLNK(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def library_name(compiler: str) -> str:
    """The cached library's file name: a digest of the source, the flags, the compiler and the CPU."""
    key = hashlib.sha256("\n".join([SOURCE.read_text(), *COMPILE_FLAGS, compiler, _cpu_identity()]).encode())
    return f"native-{key.hexdigest()[:16]}.so"


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels (built on first use), or None where they cannot be (warned once).

    A cached library is loaded only from a private cache (:func:`private`: the directory and
    the file owned by this user and writable by no one else). Otherwise, a shared or
    group-writable ``$GLITCHLENS_CACHE`` say, the kernels are compiled afresh into a private
    temporary directory (mode 0700: only this process's own output can be there) and loaded
    from there, so that a library planted in the cache is never dlopen'ed."""
    if os.environ.get("GLITCHLENS_NATIVE", "1") == "0":
        return None
    compiler = os.environ.get("CC", "cc")
    name = library_name(compiler)
    try:
        with _build_lock:
            cache = cache_dir()
            with contextlib.suppress(OSError):
                cache.mkdir(mode=0o700, parents=True, exist_ok=True)
            if private(cache) and (not os.path.lexists(cache / name) or private(cache / name)):
                if not (cache / name).exists():
                    _compile(compiler, cache / name)
                lib = ctypes.CDLL(str(cache / name))
            else:
                with tempfile.TemporaryDirectory(prefix="glitchlens-native-") as own:   # mode 0700
                    _compile(compiler, Path(own) / name)
                    lib = ctypes.CDLL(str(Path(own) / name))
    except (OSError, RuntimeError) as error:
        warnings.warn(f"the native CPU kernels could not be built ({error}); evaluation runs the PyTorch "
                      "paths instead, 1.3-2x slower. Install a C compiler or set $CC to one "
                      "(GLITCHLENS_NATIVE=0 silences this).", stacklevel=2)
        return None
    for name, argtypes in {**SIGNATURES, "vector_lanes": []}.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    return lib


@contextlib.contextmanager
def switched_off():
    """Within it, :func:`usable` is False everywhere and the callers run their PyTorch paths:
    the benchmarks' side-by-side baseline."""
    global _switched_on
    saved, _switched_on = _switched_on, False
    try:
        yield
    finally:
        _switched_on = saved


# The kernels run on AVX-class CPUs only. Against the PyTorch paths on this CPU, builds for three
# targets, one thread, [16, 511, 4, 16]: AVX-512 Diff 2.5x, CoPE 2.7x, TDA 2.3x faster; AVX2 2.1x,
# 2.4x, 1.7x; SSE (4 lanes) 1.1x, 1.1x and 0.7x (slower).
MIN_LANES = 8


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the native attention kernels run on ``tensors``: :func:`trainable`, and no gradient
    wanted."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return trainable(*tensors)


def trainable(*tensors: torch.Tensor) -> bool:
    """Whether the native kernels that have a backward (:func:`rotated_unit_forward`) run on
    ``tensors``: switched on, built with vectors of at least :data:`MIN_LANES` floats, on the CPU,
    and not float64 (kept for gradchecks on the PyTorch paths)."""
    if not (_switched_on and all(t.device.type == "cpu" and t.dtype != torch.float64 for t in tensors)):
        return False
    lib = library()
    return lib is not None and lib.vector_lanes() >= MIN_LANES


def _padded(n: int) -> int:
    return -(-n // PAD) * PAD


def _laid_out(x: torch.Tensor, out: torch.Tensor, out_strides: tuple[int, int, int],
              rotation: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """``out`` (float32, ``[batch * head, ...]``) with ``x [batch, pos, head, d]`` written into it
    in one pass, row ``(b, t, h)``'s entry j at ``(b * head + h) * s0 + t * s1 + j * s2`` for
    ``out_strides = (s0, s1, s2)``, rotated by RoPE's ``rotation`` (``(cos_both, sin_signed)``
    ``[1, pos, 1, d]``, as :func:`models.attention.rope.apply_rope` turns a row) where given: one
    pass where PyTorch's rotation and copy make five or more (for Diff's views, each a strided
    half of q or k, and for RoPE's q and k most of the evaluation's time outside the kernels)."""
    B, T, H, D = x.shape
    x = x.float() if x.dtype != torch.float32 else x
    x = x.contiguous() if x.stride(-1) != 1 else x
    tables, table_pointers = _tables(rotation)
    xs, os_ = _row_strides(x), (_I64 * 3)(*out_strides)

    def call(lo: int, hi: int) -> None:
        library().laid_out(x[lo:hi].data_ptr(), xs, *table_pointers, hi - lo, T, H, D, out[lo * H:hi * H].data_ptr(),
                           os_)

    _split(B, call)
    return out


def _queries(x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``[batch, pos, head, d]`` -> float32 ``[batch * head, pos, d]``, rotated by ``rotation``
    (:func:`_laid_out`); unrotated through :func:`heads_first`, a view of a tensor already laid
    out so (trela's and TDA's unit q)."""
    if rotation is None:
        return heads_first(x)
    B, T, H, D = x.shape
    return _laid_out(x, torch.empty(B * H, T, D), (T * D, D, 1), rotation)


def _keys_last(x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``[batch, pos, head, d]`` -> float32 ``[batch * head, d, stride]``, zeros past the last
    position up to a multiple of :data:`PAD`, rotated by ``rotation`` (:func:`_laid_out`)."""
    B, T, H, D = x.shape
    out = torch.empty(B * H, D, _padded(T))
    out[..., T:] = 0.0
    return _laid_out(x, out, (D * out.shape[-1], 1, out.shape[-1]), rotation)


def _values(v: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, head, d]`` -> float32 ``[batch * head, pos, d_padded]``, zero columns up to
    a multiple of :data:`PAD`."""
    B, T, H, D = v.shape
    out = torch.empty(B * H, T, _padded(D))
    out[..., D:] = 0.0
    return _laid_out(v, out, (T * out.shape[-1], out.shape[-1], 1), None)


def _run(kernel: str, chunked: list[torch.Tensor | None], shared: list[torch.Tensor], positions: torch.Tensor | None,
         v: torch.Tensor, sizes: list[int], scalars: list[float]) -> torch.Tensor:
    """Call ``kernel`` on chunks of the sequence-heads, one chunk per torch thread, and return
    ``z [batch, n_rows, head, d_value]`` in v's dtype. ``chunked``: tensors ``[bh, ...]`` that
    are chunked (or None, passed as NULL), the last of them v padded (:func:`_values`);
    ``shared``: tensors every chunk reads whole."""
    n_bh, n_pos, width = chunked[-1].shape
    rows = per_head(positions, v.shape[2])
    rows = None if rows is None else rows.to(torch.int64).contiguous()
    if rows is not None and rows.numel() and not 0 <= int(rows.min()) <= int(rows.max()) < n_pos:
        raise IndexError(f"query positions must lie in 0..{n_pos - 1}, got {int(rows.min())}..{int(rows.max())}")
    n_rows = n_pos if rows is None else rows.shape[1]
    z = torch.empty(n_bh, n_rows, width)
    function = getattr(library(), kernel)

    def call(lo: int, hi: int) -> None:
        if hi == lo or not n_rows:
            return
        pointers = [None if t is None else t[lo:hi].data_ptr() for t in chunked]
        status = function(*pointers, *(t.data_ptr() for t in shared), None if rows is None else rows[lo:hi].data_ptr(),
                          hi - lo, n_pos, n_rows, *sizes, width, *scalars, z[lo:hi].data_ptr())
        if status:
            raise MemoryError(f"{kernel}: could not allocate its row buffers")

    _split(n_bh, call)
    return heads_last(z[..., :v.shape[-1]], v)


def _split(n: int, call, grain: int = 1) -> None:
    """``call(lo, hi)`` over ``0..n`` in one chunk per torch thread (the C calls release the GIL),
    each of at least ``grain`` items."""
    workers = max(1, min(torch.get_num_threads(), n // grain))
    bounds = [n * w // workers for w in range(workers + 1)]
    if workers == 1:
        call(0, n)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(call, bounds[:-1], bounds[1:]))


def softmax_attention(q, k, v, positions: torch.Tensor | None = None,
                      rotation: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Causal ``softmax(q k^T / sqrt(d)) V`` ``[batch, pos or n, head, d_head]`` from q, k, v
    ``[batch, pos, head, d_head]``, q and k first rotated by RoPE's ``rotation`` where given
    (:func:`_laid_out`): :func:`models.attention.softmax.softmax_reference` without a bias, up to
    float rounding."""
    d = q.shape[-1]
    tensors = [_queries(q, rotation), _keys_last(k, rotation), None, None, _values(v)]
    return _run("softmax_attention", tensors, [], positions, v, [d], [d ** -0.5, 0.0])


def diff_attention(q1, k1, q2, k2, v, lam: float, positions: torch.Tensor | None = None,
                   rotation: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Diff's ``z = (A^(1) - lam A^(2)) V`` ``[batch, pos or n, head, d_head]`` from each view's
    q and k ``[batch, pos, head, d_view]`` (first rotated by RoPE's ``rotation`` where given,
    :func:`_laid_out`) and ``v [batch, pos, head, d_head]``, scale ``1/sqrt(d_view)``:
    :func:`models.attention.diff.diff_reference` up to float rounding."""
    d_view = q1.shape[-1]
    tensors = [_queries(q1, rotation), _keys_last(k1, rotation), _queries(q2, rotation), _keys_last(k2, rotation),
               _values(v)]
    return _run("softmax_attention", tensors, [], positions, v, [d_view], [d_view ** -0.5, float(lam)])


def cope_attention(q, k, v, pos_emb: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """CoPE's ``z [batch, pos or n, head, d_head]`` (gates from q . k) from q, k, v ``[batch, pos,
    head, d_head]`` and the layer's ``pos_emb [p_max, d_head]``: :func:`kernels.cope.reference.
    cope_reference`'s without separate gate keys, up to float rounding."""
    d = q.shape[-1]
    table = _keys_last(pos_emb.detach()[None, :, None])
    return _run("cope_attention", [heads_first(q), _keys_last(k), _values(v)], [table], positions, v,
                [d, pos_emb.shape[0]], [d ** -0.5])


def threshold_attention(tau, v, q1, k1, q2=None, k2=None, lam: float = 0.0, p: float = 2.0,
                        positions: torch.Tensor | None = None) -> torch.Tensor:
    """trela's (views ``q1, k1``) or TDA's (``q1, k1, q2, k2``) output before its norm,
    ``[batch, pos or n, head, d_head]``, from unit q, k ``[batch, pos, head, d]``, v, ``tau
    [batch, head, pos]`` and one ``lam``: :func:`kernels.threshold.rows.rectified_rows`'s up to
    float rounding."""
    second = [None, None] if q2 is None else [heads_first(q2), _keys_last(k2)]
    tensors = [heads_first(q1), _keys_last(k1), *second, per_row(tau).contiguous(), _values(v)]
    return _run("threshold_attention", tensors, [], positions, v, [q1.shape[-1]], [float(lam), float(p)])


def _row_strides(x: torch.Tensor) -> ctypes.Array:
    """The batch, position and head strides of ``x [batch, pos, head, d]`` (its rows consecutive),
    as the C kernels take them."""
    return (_I64 * 3)(*x.stride()[:3])


def _tables(rotation: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[list[torch.Tensor], list[int | None]]:
    """RoPE's tables ``(cos_both, sin_signed)`` made contiguous (kept alive by the caller) and
    their pointers, or NULLs for no rotation."""
    tables = [] if rotation is None else [t.contiguous() for t in rotation]
    return tables, [t.data_ptr() for t in tables] or [None, None]


def rotated_unit_forward(x: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor] | None, eps: float
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, length)``: the float32 ``x [batch, pos, head, d]`` rotated by ``rotation`` (RoPE's
    ``(cos_both, sin_signed)`` ``[1, pos, 1, d]``, or None) and scaled to unit length, and each
    row's length ``[batch, pos, head, 1]`` (:class:`models.attention.rope.RotatedUnit`'s forward). u is
    laid out heads first, so that :func:`kernels.tooling.rows.heads_first` reads it without a copy."""
    B, T, H, D = x.shape
    x = x.contiguous() if x.stride(-1) != 1 else x
    u = x.new_empty(B, H, T, D).transpose(1, 2)
    length = x.new_empty(B, T, H, 1)
    tables, table_pointers = _tables(rotation)
    xs, us = _row_strides(x), _row_strides(u)

    def call(lo: int, hi: int) -> None:
        library().rotated_unit_forward(x[lo:hi].data_ptr(), xs, *table_pointers, hi - lo, T, H, D, eps,
                                       u[lo:hi].data_ptr(), us, length[lo:hi].data_ptr())

    _split(B, call)
    return u, length


def rotated_unit_backward(u: torch.Tensor, length: torch.Tensor, du: torch.Tensor,
                          rotation: tuple[torch.Tensor, torch.Tensor] | None, eps: float) -> torch.Tensor:
    """The gradient of :func:`rotated_unit_forward`'s x from its ``u``, ``length`` and u's gradient
    ``du`` (any layout whose rows are consecutive), contiguous ``[batch, pos, head, d]``."""
    B, T, H, D = u.shape
    du = du.contiguous() if du.stride(-1) != 1 else du
    dx = torch.empty(B, T, H, D, dtype=u.dtype)
    tables, table_pointers = _tables(rotation)
    us, dus, dxs = _row_strides(u), _row_strides(du), _row_strides(dx)

    def call(lo: int, hi: int) -> None:
        library().rotated_unit_backward(u[lo:hi].data_ptr(), us, length[lo:hi].data_ptr(), du[lo:hi].data_ptr(), dus,
                                        *table_pointers, hi - lo, T, H, D, eps, dx[lo:hi].data_ptr(), dxs)

    _split(B, call)
    return dx


def _blocks(*maps: torch.Tensor) -> None:
    """Refuse maps the block kernels (CoPE's, Shaw's, the threshold's) cannot read in place: float32 and
    contiguous."""
    for m in maps:
        if m.dtype != torch.float32 or not m.is_contiguous():
            raise ValueError(f"the native block kernels take contiguous float32 maps, got {m.dtype} with strides "
                             f"{m.stride()}: run the PyTorch rule")


def cope_positions(S: torch.Tensor, first_row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CoPE's gates ``g = sigmoid(S)`` (0 on future keys) and positions ``p_j = sum_{t >= j} g_t``
    (eq. 3-4) of a training block of scaled scores ``S [bh, rows, keys]``, its rows the queries
    at ``first_row`` onwards: :class:`kernels.cope.rows.NativeCoPERule`'s first pass."""
    _blocks(S)
    n_bh, n_rows, n_keys = S.shape
    g, p = torch.empty_like(S), torch.empty_like(S)

    def call(lo: int, hi: int) -> None:
        library().cope_rule_positions(S[lo:hi].data_ptr(), hi - lo, n_rows, first_row, n_keys, g[lo:hi].data_ptr(),
                                      p[lo:hi].data_ptr())

    _split(n_bh, call)
    return g, p


def cope_logits_(S: torch.Tensor, p: torch.Tensor, z: torch.Tensor, first_row: int, p_max: int) -> torch.Tensor:
    """``S`` in place to CoPE's logits (eq. 8-9): ``S + z`` interpolated at the positions ``p``
    clamped to ``p_max - 1``, ``z [bh, rows, n_emb]`` the position logits ``q . e[m]`` (n_emb
    above every clamped position's floor + 1), future keys at MASK_FILL."""
    _blocks(S, p, z)
    n_bh, n_rows, n_keys = S.shape

    def call(lo: int, hi: int) -> None:
        library().cope_rule_logits(S[lo:hi].data_ptr(), p[lo:hi].data_ptr(), z[lo:hi].data_ptr(), z.shape[-1], hi - lo,
                                   n_rows, first_row, n_keys, p_max)

    _split(n_bh, call)
    return S


def cope_backward_(dL: torch.Tensor, g: torch.Tensor, p: torch.Tensor, z: torch.Tensor, first_row: int, p_max: int
                   ) -> torch.Tensor:
    """From the logits' gradient ``dL`` of a block (:func:`cope_logits_`'s), the scores' gradient,
    in place of ``dL``, and returned: the position logits' gradient ``dz [bh, rows, n_emb]``."""
    _blocks(dL, g, p, z)
    n_bh, n_rows, n_keys = dL.shape
    dz = torch.empty_like(z)

    def call(lo: int, hi: int) -> None:
        library().cope_rule_backward(dL[lo:hi].data_ptr(), g[lo:hi].data_ptr(), p[lo:hi].data_ptr(),
                                     z[lo:hi].data_ptr(), z.shape[-1], hi - lo, n_rows, first_row, n_keys, p_max,
                                     dz[lo:hi].data_ptr())

    _split(n_bh, call)
    return dz


def shaw_logits_(S: torch.Tensor, by_distance: torch.Tensor, first_row: int) -> torch.Tensor:
    """``S [bh, rows, keys]`` of a training block (rows from ``first_row``) in place to Shaw's logits
    ``S_ij + by_distance_i[min(i - j, K)]``, from the per-distance logits ``by_distance [bh, pos,
    K + 1]``; future keys at MASK_FILL (:class:`models.attention.shaw.NativeShawRule`)."""
    _blocks(S, by_distance)
    n_bh, n_rows, n_keys = S.shape

    def call(lo: int, hi: int) -> None:
        library().shaw_rule_logits(S[lo:hi].data_ptr(), by_distance[lo:hi].data_ptr(), hi - lo, n_rows, first_row,
                                   n_keys, *by_distance.shape[1:])

    _split(n_bh, call)
    return S


def shaw_backward(dL: torch.Tensor, first_row: int, d_by_distance: torch.Tensor) -> None:
    """The logits' gradient ``dL`` of a block (:func:`shaw_logits_`'s) added into the per-distance
    logits' gradient ``d_by_distance [bh, pos, K + 1]``."""
    _blocks(dL, d_by_distance)
    n_bh, n_rows, n_keys = dL.shape

    def call(lo: int, hi: int) -> None:
        library().shaw_rule_backward(dL[lo:hi].data_ptr(), hi - lo, n_rows, first_row, n_keys,
                                     *d_by_distance.shape[1:], d_by_distance[lo:hi].data_ptr())

    _split(n_bh, call)


def threshold_weights_(scores: list[torch.Tensor], tau: torch.Tensor, lam: float, p: float, first_row: int
                       ) -> torch.Tensor:
    """trela's or TDA's weights ``A = r1^p - lam r2^p`` of a training block, from each view's scores
    ``[bh, rows, keys]`` (one or two views; in place to the rectified scores ``r = (s - tau_i)_+``, 0
    on future keys), its rows the queries at ``first_row`` onwards, and ``tau [bh, pos]``
    (:class:`kernels.threshold.rows.ThresholdRowsFunction`'s forward)."""
    _blocks(*scores, tau)
    S1, S2 = (*scores, None)[:2]
    n_bh, n_rows, n_keys = S1.shape
    A = torch.empty_like(S1)

    def call(lo: int, hi: int) -> None:
        library().threshold_rule_weights(S1[lo:hi].data_ptr(), None if S2 is None else S2[lo:hi].data_ptr(),
                                         tau[lo:hi].data_ptr(), hi - lo, n_rows, first_row, n_keys, tau.shape[1], lam,
                                         p, A[lo:hi].data_ptr())

    _split(n_bh, call)
    return A


def threshold_backward_(dA: torch.Tensor, rectified: list[torch.Tensor], lam: float, p: float, first_row: int,
                        d_tau: torch.Tensor, d_lam: torch.Tensor) -> list[torch.Tensor]:
    """Each view's scores' gradient from a training block's weights' gradient ``dA`` (in place: view
    1's) and the views' ``rectified`` scores (:func:`threshold_weights_`'s); tau's gradient at the
    block's rows written into ``d_tau [bh, pos]``, and with two views lam's added into ``d_lam``,
    float64 ``[bh]``."""
    _blocks(dA, *rectified, d_tau)
    r1, r2 = (*rectified, None)[:2]
    n_bh, n_rows, n_keys = dA.shape
    dS2 = None if r2 is None else torch.empty_like(r2)

    def call(lo: int, hi: int) -> None:
        library().threshold_rule_backward(dA[lo:hi].data_ptr(), r1[lo:hi].data_ptr(),
                                          None if r2 is None else r2[lo:hi].data_ptr(), hi - lo, n_rows, first_row,
                                          n_keys, d_tau.shape[1], lam, p, None if dS2 is None else dS2[lo:hi].data_ptr(),
                                          d_tau[lo:hi].data_ptr(), d_lam[lo:hi].data_ptr())

    _split(n_bh, call)
    return [dA] if dS2 is None else [dA, dS2]


# Rows a thread of the per-position kernels gets at least, a chosen grain: a short call (the rows of
# a few reads) runs on the calling thread rather than start a pool.
ROWS_PER_THREAD = 4096


def position_kernels_run(*tensors: torch.Tensor) -> bool:
    """Whether :func:`rms_norm` and :func:`swiglu_hidden` run on ``tensors``: :func:`usable`, every
    one float32 and no autocast (which would hand them products in another dtype), and not within
    :func:`passes_switched_off`; elsewhere the modules' PyTorch paths compute as they do."""
    return (_passes_on and all(t.dtype == torch.float32 for t in tensors) and not torch.is_autocast_enabled("cpu")
            and usable(*tensors))


@contextlib.contextmanager
def passes_switched_off():
    """Within it the norms and SwiGLU run their PyTorch paths and the attention kernels still run:
    the benchmarks' baseline for the per-position passes alone."""
    global _passes_on
    saved, _passes_on = _passes_on, False
    try:
        yield
    finally:
        _passes_on = saved


def _float32(*tensors: torch.Tensor | None) -> None:
    """The per-position kernels read float32 memory: anything else is a caller's mistake."""
    for t in tensors:
        if t is not None and (t.dtype != torch.float32 or t.device.type != "cpu"):
            raise TypeError(f"the native per-position kernels take float32 CPU tensors, got {t.dtype} on {t.device}")


def _by_rows(n_rows: int, call) -> None:
    """``call(lo, hi)`` over row chunks, one per torch thread where each gets
    :data:`ROWS_PER_THREAD` rows or more."""
    _split(n_rows, call, ROWS_PER_THREAD)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * w`` over the last dimension of float32 ``x [..., d]`` in one
    pass per row: :class:`models.backbone.RMSNorm`'s output, up to float rounding."""
    _float32(x, w)
    d = x.shape[-1]
    x, w = x.contiguous(), w.contiguous()
    y = torch.empty_like(x)
    rows, out = x.view(-1, d), y.view(-1, d)

    def call(lo: int, hi: int) -> None:
        library().rms_norm_rows(rows[lo:hi].data_ptr(), w.data_ptr(), hi - lo, d, eps, out[lo:hi].data_ptr())

    _by_rows(len(rows), call)
    return y


def swiglu_hidden(pre: torch.Tensor, pre_linear: torch.Tensor, b_gate: torch.Tensor | None,
                  b_in: torch.Tensor | None) -> torch.Tensor:
    """``silu(pre + b_gate) * (pre_linear + b_in)`` of float32 ``[..., d_mlp]`` products (a None bias:
    none) in one pass: :class:`models.backbone.SwiGLU`'s hidden activation, up to float rounding."""
    _float32(pre, pre_linear, b_gate, b_in)
    d = pre.shape[-1]
    pre, pre_linear = pre.contiguous(), pre_linear.contiguous()
    b_gate, b_in = (None if b is None else b.contiguous() for b in (b_gate, b_in))
    h = torch.empty_like(pre)
    gate, linear, out = pre.view(-1, d), pre_linear.view(-1, d), h.view(-1, d)
    biases = [None if b is None else b.data_ptr() for b in (b_gate, b_in)]

    def call(lo: int, hi: int) -> None:
        library().swiglu_hidden(gate[lo:hi].data_ptr(), linear[lo:hi].data_ptr(), *biases, hi - lo, d,
                                out[lo:hi].data_ptr())

    _by_rows(len(out), call)
    return h

"""What several test files share: the models to parametrise over, how gradients are compared,
a figure of every kind that interp.plots draws, headless Chromium, and how an op's
implementations are compared with its reference (``tests/test_op_*.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from models.attention import get_attention_class
from models.mechanisms import MODEL_FAMILIES


@contextlib.contextmanager
def registries_kept():
    """The mechanism registries as they were before the block: a mechanism registered inside it
    (a test's own, a CLI run's ``--mechanism``) is not left registered for the worker's later tests."""
    from models import mechanisms
    from models.attention.base import REGISTRY

    saved = [(table, dict(table)) for table in (REGISTRY, MODEL_FAMILIES, mechanisms._PLUGINS)]
    try:
        yield
    finally:
        for table, content in saved:
            table.clear()
            table.update(content)


def models_with(path: str) -> list[str]:
    """One model name per registered mechanism that has ``path`` (``"triton"`` or ``"rows"``)
    among its ``IMPLEMENTATIONS``: a new mechanism with a fast path is tested without editing the tests."""
    by_mechanism = {}
    for model, (mechanism, _, _) in MODEL_FAMILIES.items():
        if mechanism and path in get_attention_class(mechanism).IMPLEMENTATIONS:
            by_mechanism.setdefault(mechanism, model)
    return list(by_mechanism.values())


def interrupt_training_at(monkeypatch, step: int, signum: int | None = None) -> None:
    """Make the next training run receive Ctrl-C (SIGINT), or ``signum``, while it fetches the
    batch of ``step``; ``monkeypatch.undo()`` lets later runs go on."""
    import signal

    from interp.training.setup import BatchSource

    fetch = BatchSource.__call__

    def interrupted(self, at):
        if at == step:
            signal.raise_signal(signal.SIGINT if signum is None else signum)
        return fetch(self, at)

    monkeypatch.setattr(BatchSource, "__call__", interrupted)


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.double().pow(2).mean().sqrt()


# Float32 rounding leaves errors of about 1e-7 to 1e-6 of the gradients' overall size, whatever the
# size of one gradient: a gradient that is exactly zero in the reference (CoPE's position table at
# T = 1) may come out as 1e-6 elsewhere. The floor of each relative error is this fraction of the
# RMS of all the reference's gradients together.
SCALE_FLOOR = 1e-2


def relative_errors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per key, ``RMS(actual - expected) / (RMS(expected) + SCALE_FLOOR * RMS(all of expected))``:
    relative where the expected value is large, scaled by the others where it is zero. Where
    every expected value is zero (a row with no key at T = 1), only an exact zero passes."""
    scale = rms(torch.cat([t.detach().flatten().double() for t in expected.values()]))
    return {key: (rms(actual[key].detach() - t.detach())
                  / (rms(t.detach()) + SCALE_FLOOR * scale).clamp_min(torch.finfo(torch.float64).tiny)).item()
            for key, t in expected.items()}


# --- every figure of interp.plots, on small synthetic inputs ---------------------------------

GALLERY_TEXT = "w1i0i1r1w0r0i1r0" * 2          # 32 flip-flop tokens: reads at 6, 10, 14, ... with their writes
GALLERY_LENGTHS = (8, 16, 32, 64)              # the "context lengths" of the sweeps


def causal_maps(n: int, layers: int = 2, heads: int = 2, seed: int = 0, signed: bool = False) -> dict:
    """``{layer: [1, head, n, n]}`` random causal maps with exact zeros, rows summing to 1
    (``signed``: minus a share of a second such map, as a differential map)."""
    g = torch.Generator().manual_seed(seed)
    maps = {}
    for layer in range(layers):
        a = torch.rand(1, heads, n, n, generator=g) * (torch.rand(1, heads, n, n, generator=g) > 0.3)
        a = (a + torch.eye(n)).tril()
        a = a / a.sum(-1, keepdim=True)
        maps[layer] = a - 0.5 * a.roll(1, -1).tril() if signed else a
    return maps


def plot_gallery(backend: str = "plotly") -> dict:
    """``{name of an interp.plots function: a figure it drew}`` for every function that draws
    one, on inputs small enough for a unit test, each showing what its figure is for (a sweep
    over lengths on log axes, an error chart with no error, panels compared side by side)."""
    from interp import plots
    from interp.metrics import (
        cross_view_correlation, dispersion, error_rate_by_dependency, max_abs_weight, read_table, sink_ratio,
        sparsity, survivor_counts, tail_probabilities,
    )
    from interp.studies.reproduce import summarise_runs
    from interp.tasks import parse_sequence, sample_automaton

    tokens = parse_sequence(GALLERY_TEXT)
    n = len(tokens)
    maps, views = causal_maps(n), causal_maps(n, seed=1)
    sweep = {T: causal_maps(T, seed=T) for T in GALLERY_LENGTHS}
    inputs, _ = sample_automaton(1, n, 0.5, rng=0)
    reads = read_table(tokens[None], np.roll(tokens, -1)[None])             # every read right: no error
    drift = pd.DataFrame([{"model_layer": f"{model} L{layer} H0", "seq_len": T, "weight": 0.9 ** (layer + T / 16)}
                          for model in ("rope-mech", "tra-mech") for layer in range(2) for T in GALLERY_LENGTHS])
    table1 = summarise_runs([{"model": model, "seed": seed, "splits": {
        split: {"sequence_accuracy": 0.5 + 0.1 * seed, "error_rate": 0.01} for split in ("iid", "dense", "sparse")}}
        for model in ("tra", "lstm") for seed in range(2)])
    components = ["embed", "L0H0", "L0H1", "L1H0"]
    dla = pd.DataFrame({"component": components * 2, "attribution": [0.5, 1.5, -0.3, 2.0, 0.2, -1.0, 0.1, -0.5],
                        "reads": ["correct"] * 4 + ["wrong"] * 4})
    patching = pd.DataFrame([{"component": c, "offset": o, "restored": (i - o) / 3}
                             for i, c in enumerate(components) for o in range(4)])
    draw = dict(backend=backend)
    return {
        "heatmap": plots.heatmap(maps[1][0, 0], tokens, title="pattern", wrong=[14], **draw),
        "heatmap_grid": plots.heatmap_grid({"view 1": views[0][0, 0], "view 2": views[0][0, 1],
                                            "differential": causal_maps(n, signed=True)[0][0, 0]},
                                           tokens, signed=True, shared_scale=True, ncols=3, **draw),
        "automaton_heatmap_grid": plots.automaton_heatmap_grid(plots.layer_head_panels({0: maps[0][:, :1]}),
                                                               inputs[0], wrong=[5], **draw),
        "attention_grid": plots.attention_grid(maps, tokens, **draw),
        "compare": plots.compare(plots.layer_head_panels({1: maps[1][:, :1]}),
                                 plots.layer_head_panels({1: 3 * views[1][:, :1]}), tokens, names=("TRA", "FoT"),
                                 **draw),
        "chart": plots.chart(drift, "seq_len", "weight", series="model_layer", log_x=True,
                             reference=(list(GALLERY_LENGTHS), [1.0] * len(GALLERY_LENGTHS), "ideal"), **draw),
        "sparsity_chart": plots.sparsity_chart(pd.concat([sparsity(maps), sparsity(views, "view_1")]), **draw),
        "max_abs_chart": plots.max_abs_chart(pd.concat([max_abs_weight(maps), max_abs_weight(views, "view_1")]),
                                             **draw),
        "sink_ratio_chart": plots.sink_ratio_chart(pd.concat([sink_ratio(m, [0]).assign(model="rope-mech")
                                                              for m in sweep.values()]), **draw),
        "survivor_chart": plots.survivor_chart(pd.concat([survivor_counts(m) for m in sweep.values()]), **draw),
        "dispersion_chart": plots.dispersion_chart(dispersion(maps), **draw),
        "tail_chart": plots.tail_chart(tail_probabilities({layer: 3 * torch.randn(1, 2, n, n, generator=torch.Generator()
                                                                                  .manual_seed(layer))
                                                           for layer in range(2)}), **draw),
        "correlation_chart": plots.correlation_chart(cross_view_correlation(maps, views), **draw),
        "error_rate_chart": plots.error_rate_chart(error_rate_by_dependency(reads).assign(model="perfect"), **draw),
        "table1_chart": plots.table1_chart(table1, **draw),
        "dla_chart": plots.dla_chart(dla, series="reads", **draw),
        "patching_heatmap": plots.patching_heatmap(patching, **draw),
    }


# --- headless Chromium ----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# For the tests that use it (with pytest.mark.browser): skipped, saying why, where it is missing.
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install "
                                    "chromium); the page was not browser-tested")


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: a carriage return (a progress bar's redraw)
    moves back to the start of the line, whose old characters stay until overwritten."""
    lines = []
    for line in text.split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part):]
        lines.append(shown.rstrip())
    return [line for line in lines if line]


def glitchlens_as_from_a_terminal(*args: str, **popen) -> subprocess.Popen:
    """``python -m interp.cli ARGS`` started as from a terminal, SIGINT at its default and
    unblocked (a child inherits an ignored or blocked SIGINT, as a test worker may have it), in
    a process group of its own, which a Ctrl-C signals whole; its stdout's first line is the
    launcher's, written just before the command starts."""
    launcher = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); print(flush=True); "
                "os.execv(sys.executable, [sys.executable, '-m', 'interp.cli', *sys.argv[1:]])")
    return subprocess.Popen([sys.executable, "-c", launcher, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **popen)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with ``args`` (``--dump-dom URL``, ``--screenshot=PNG URL``) in a
    throwaway profile."""
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    return run

# Comparing an op's implementations with its reference, on ``B`` sequences of ``H`` heads.
#
# Tolerances: :data:`KERNEL_OUTPUT_TOLERANCE` and :data:`KERNEL_GRADIENT_TOLERANCE` (:func:`check`).
# For the threshold ops (TRA's S > 0, trela/TDA's s > tau) a score within
# ``NEAR`` of its threshold could legitimately fall on the other side in a differently ordered
# float32 sum, so rows holding such a score are left out of the comparison (their upstream gradient
# is zeroed); ``test_threshold_flips`` counts the entries that actually flip.
B, H = 2, 2
NEAR = 1e-4
# Max abs error on an op's outputs that a fast path may add to twice the reference's own rounding
# (the reference run in the same dtype, both against it in float64), by dtype.
KERNEL_OUTPUT_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-3, torch.float16: 1e-3}
# Relative RMS error on each input's gradient (:func:`relative_errors`) that a fast path may add to
# twice the reference's own, by dtype.
KERNEL_GRADIENT_TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 1e-2, torch.float16: 1e-2}


@dataclass
class Case:
    """One comparison. ``blocks``: the Triton kernel's (BLOCK_M, BLOCK_N); ``scale`` multiplies
    q and k (raw TRA scores instead of RMS-normalised ones); ``gate``: the forget-gate logit
    offset (negative: strong forgetting); ``empty``: the middle half of the rows has no
    surviving key; ``p_max``: CoPE's table size (small: clamped positions)."""
    T: int
    D: int
    layout: str = "contiguous"
    blocks: tuple = (32, 32)
    scale: float = 1.0
    gate: float = 0.0
    beta: float = 1.0
    p: float = 2.0
    kappa: float = 1.0
    empty: bool = False
    p_max: int = 6
    dtype: torch.dtype = torch.float32

    def __str__(self):
        changed = [f"{f.name}={getattr(self, f.name)}".replace(" ", "") for f in fields(self)[2:]
                   if getattr(self, f.name) != f.default]
        return "-".join([f"T{self.T}", f"D{self.D}", *changed])


def placed(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x [batch, pos, head, d]`` copied into a leaf with the given memory layout."""
    b, t, h, d = x.shape
    like = {"dtype": x.dtype, "device": x.device}
    if layout == "contiguous":
        out = torch.empty(b, t, h, d, **like)
    elif layout == "transposed":  # a [batch, head, pos, d] buffer seen as [batch, pos, head, d]
        out = torch.empty(b, h, t, d, **like).transpose(1, 2)
    elif layout == "strided":  # every other batch row and feature of a larger buffer
        out = torch.empty(2 * b, t, h, 2 * d, **like)[::2, :, :, ::2]
    else:
        raise ValueError(layout)
    with torch.no_grad():
        out.copy_(x)
    return out.requires_grad_()


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def rms_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def draw_qkv(case: Case, gen: torch.Generator, device, n_qk: int = 2, normalise: Callable | None = None) -> dict:
    """Leaf tensors ``qk0, qk1, ...`` (``n_qk`` of them: q, k, and a second view's q, k) and
    ``v``, ``[B, T, H, D]`` in ``case.layout`` and ``case.dtype`` on ``device``, drawn on the CPU
    so that every device sees the same values: q and k normalised and scaled by
    ``case.scale``; with ``case.empty``, keys in the positive orthant and the middle half of
    the queries in the negative one."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    qk = [(normalise(randn(B, case.T, H, case.D)) if normalise else randn(B, case.T, H, case.D)) * case.scale
          for _ in range(n_qk)]
    if case.empty:
        middle = slice(case.T // 4, 3 * case.T // 4)
        qk[1] = qk[1].abs()
        qk[0][:, middle] = -qk[0][:, middle].abs()
    tensors = {f"qk{i}": placed(x.to(case.dtype), case.layout) for i, x in enumerate(qk)}
    tensors["v"] = placed(randn(B, case.T, H, case.D).to(case.dtype), case.layout)
    return tensors


def draw_gated(case: Case, gen: torch.Generator, device) -> dict:
    """:func:`draw_qkv` with q, k RMS-normalised, and ``log_gate``, the log of a forget gate
    ``[B, H, T]`` around ``sigmoid(case.gate)`` (TRA's delta, FoT's f)."""
    x = draw_qkv(case, gen, device, normalise=rms_rows)
    x["log_gate"] = F.logsigmoid(torch.randn(B, H, case.T, generator=gen).to(device) + case.gate).requires_grad_()
    return x


def fast_implementations(mechanism: str) -> list[str]:
    """The implementations mechanism ``mechanism`` declares besides its reference."""
    return [name for name in get_attention_class(mechanism).IMPLEMENTATIONS if name != "reference"]


def implementation(mechanism: str, name: str, case: Case | None = None) -> Callable:
    """Implementation ``name`` of ``mechanism``'s op, as the model calls it; the Triton kernel
    with ``case``'s tiles (skipped where triton is not installed)."""
    fn = get_attention_class(mechanism).IMPLEMENTATIONS[name]
    if name != "triton":
        return fn
    pytest.importorskip("triton", reason="triton is not installed")
    return fn if case is None else functools.partial(fn, block_m=case.blocks[0], block_n=case.blocks[1])


def run(fn: Callable, x: dict, dz: torch.Tensor, **options) -> tuple[torch.Tensor, dict]:
    """``fn(*x.values(), **options)`` and the gradients of ``<z, dz>`` for every input."""
    z = fn(*x.values(), **options)
    grads = torch.autograd.grad(z, list(x.values()), dz.to(z.dtype))
    for g, t in zip(grads, x.values()):
        assert g.shape == t.shape and g.dtype == t.dtype and torch.isfinite(g).all()
    return z, dict(zip(x, grads))


def errors(a: tuple, b: tuple, rows: torch.Tensor) -> dict:
    (z, grads), (z_ref, grads_ref) = a, b
    return {"out": ((z.double() - z_ref.double()).abs() * rows).max().item(),
            "grads": relative_errors(grads, grads_ref)}


def compare(fn: Callable, reference: Callable, make_inputs: Callable, near: Callable, case: Case, device,
            **options) -> dict:
    """``fn`` on ``make_inputs(case, generator, device)`` (``case.dtype``), and ``reference`` on
    the same values in the same dtype (what rounding alone costs), each against ``reference`` in
    float64. Rows with a score near a threshold (``near(x, case)``, ``[batch, head, query,
    key]``) are left out."""
    gen = torch.Generator().manual_seed(0)
    x = make_inputs(case, gen, device)
    x32 = {key: t.detach().float().requires_grad_() for key, t in x.items()}
    keep = ~near(x32, case).any(-1)                                             # [batch, head, query_pos]
    rows = keep.transpose(1, 2)[..., None].to(device)
    dz = torch.randn(B, case.T, H, case.D, generator=gen).to(device) * rows
    exact = run(reference, {key: t.detach().double().requires_grad_() for key, t in x.items()}, dz.double(),
                **options)
    fast = run(fn, x, dz, **options)
    assert fast[0].dtype == case.dtype
    return {"fast": errors(fast, exact, rows), "reference": errors(run(reference, x, dz, **options), exact, rows),
            "left_out_rows": int((~keep).sum())}


def check(fn: Callable, reference: Callable, make_inputs: Callable, near: Callable, case: Case, device, **options):
    """:func:`compare`'s arguments: the fast path about as close to the float64 computation as
    the reference run in the same dtype is, give or take :data:`KERNEL_OUTPUT_TOLERANCE` on
    outputs and :data:`KERNEL_GRADIENT_TOLERANCE` on gradients. A fixed bound alone would not do: at T = 130
    the float32 reference itself is 5e-5 from float64 on CoPE's outputs, and on an H200 the CPU
    path's float32 cumulative sums land 1.6e-4 from the reference's."""
    result = compare(fn, reference, make_inputs, near, case, device, **options)
    fast, rounding = result["fast"], result["reference"]
    out_slack, grad_slack = KERNEL_OUTPUT_TOLERANCE[case.dtype], KERNEL_GRADIENT_TOLERANCE[case.dtype]
    assert fast["out"] <= 2 * rounding["out"] + out_slack, result
    assert all(fast["grads"][key] <= 2 * err + grad_slack for key, err in rounding["grads"].items()), result


def half_precision(case: Case) -> list[Case]:
    """``case`` in bf16 and in fp16 (float32 accumulation inside)."""
    return [dataclasses.replace(case, dtype=dtype) for dtype in (torch.bfloat16, torch.float16)]


SWEEP_LENGTHS = (17, 64, 65, 130)
SWEEP_HEAD_DIMS = (16, 32, 64, 128)
# Under Triton's interpreter (no GPU) the sweep is a pairwise cover of the grid: every length with
# two head dims, every head dim at an odd length (one tile and a bit) and at an even one (whole
# tiles; the sign of the sweep's gate or beta follows the parity): 8 of the grid's 16 pairs, the
# costliest there (T = 130 with d_head 128) among them. A GPU runs all 16.
PAIRWISE_COVER = {17: (16, 64), 64: (32, 64), 65: (32, 128), 130: (16, 128)}


def length_by_head_dim_sweep(case_at) -> list[Case]:
    """``case_at(T, D)`` over the sweep's lengths and head dims: the whole grid on a GPU,
    :data:`PAIRWISE_COVER` of it elsewhere."""
    grid = {T: SWEEP_HEAD_DIMS for T in SWEEP_LENGTHS} if torch.cuda.is_available() else PAIRWISE_COVER
    return [case_at(T, D) for T, head_dims in grid.items() for D in head_dims]


def slow(cases: list[Case]) -> list:
    """``cases`` as parameters marked slow (the interpreter's sweeps)."""
    return [pytest.param(case, marks=pytest.mark.slow, id=str(case)) for case in cases]


def no_threshold(x: dict, case: Case) -> torch.Tensor:
    """:func:`compare`'s ``near`` for an op without a threshold: no row left out."""
    return torch.zeros(B, H, case.T, case.T, dtype=torch.bool)


def positions(key: str, t: torch.Tensor, index) -> torch.Tensor:
    """``t[positions index]`` for an input ``[batch, pos, ...]``, or ``[batch, head, pos]``
    for a per-position gate (key ``log_gate``)."""
    return t[..., index] if key == "log_gate" else t[:, index]


def check_future_tiles_never_read(fn: Callable, x: dict, cut: int, **options):
    """NaN in every position from ``cut`` (a tile boundary) on leaves the rows before it exactly
    as a run on the truncated sequence: no future tile is read (a masked but loaded NaN value
    would still poison P V through 0 * NaN). Per-head or per-layer scalars are passed as
    ``options``."""
    poisoned = {key: t.clone() for key, t in x.items()}
    for key, t in poisoned.items():
        positions(key, t, slice(cut, None)).fill_(float("nan"))
    with torch.no_grad():
        z = fn(*poisoned.values(), **options)[:, :cut]
        z_truncated = fn(*(positions(key, t, slice(cut)) for key, t in x.items()), **options)
    assert torch.isfinite(z).all()
    torch.testing.assert_close(z, z_truncated, rtol=0, atol=0)


def pattern_of(reference: Callable, x: dict, **options) -> torch.Tensor:
    """The reference's ``hook_pattern`` ``[batch, head, query_pos, key_pos]`` on ``x``."""
    cache = {}
    reference(*x.values(), hooks={"hook_pattern": lambda A: cache.setdefault("pattern", A)}, **options)
    return cache["pattern"]


def check_threshold_flips(kernel: Callable, reference: Callable, x: dict, near: torch.Tensor, case: Case, **options):
    """Read the kernel's whole pattern through one-hot values (v_j = e_(j - c) for the keys of a
    D-wide column block c) and compare its support with the reference's: keys may only change
    sides where the score is within NEAR of the threshold (``near``)."""
    pattern = torch.zeros(B, H, case.T, case.T)
    device = x["v"].device
    with torch.no_grad():
        for start in range(0, case.T, case.D):
            width = min(case.D, case.T - start)
            one_hot = torch.zeros(B, case.T, H, case.D)
            one_hot[:, start:start + width, :, :width] = torch.eye(width)[None, :, None, :]
            z = kernel(*{**x, "v": one_hot.to(device)}.values(), **options)
            pattern[..., start:start + width] = z[..., :width].transpose(1, 2).cpu()
        expected = pattern_of(reference, x, **options).cpu()
    flips = (pattern != 0) != (expected != 0)
    assert not (flips & ~near).any()
    torch.testing.assert_close(pattern, expected, rtol=0, atol=1e-5)
    print(f"{int(flips.sum())} flips among {int(near.sum())} scores within {NEAR} of the threshold")


# Two implementations of one model with the same weights: max abs error on the logits, and relative
# RMS error on each parameter's gradient (:func:`relative_errors`).
SAME_MODEL_TOLERANCE = {"logits": 1e-4, "gradients": 1e-3}


def assert_same_model(reference: torch.nn.Module, other: torch.nn.Module, tokens: torch.Tensor):
    """Two models with the same weights (``model_pair``) give the same output and the same
    parameter gradients, within :data:`SAME_MODEL_TOLERANCE`."""
    out_ref, out_other = reference(tokens), other(tokens)
    assert (out_ref - out_other).abs().max() < SAME_MODEL_TOLERANCE["logits"]
    out_ref.square().mean().backward()
    out_other.square().mean().backward()
    errors = relative_errors({name: p.grad for name, p in other.named_parameters()},
                             {name: p.grad for name, p in reference.named_parameters()})
    assert max(errors.values()) < SAME_MODEL_TOLERANCE["gradients"], errors

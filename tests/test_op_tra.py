"""TRA's op (``kernels.tra``): every implementation the mechanism declares (``rows``, ``triton``)
against ``kernels.tra.reference``, forward and every gradient, on the ``device`` fixture's device
(the GPU, or CPU tensors under Triton's interpreter): sequence lengths including T = 1 and
lengths that are not a multiple of the tile, head dims, tile shapes, memory layouts, gate
strengths, raw (unnormalised) scores, rows with no surviving key, and half precision."""

import math

import pytest
import torch

from support import (NEAR, Case, check, check_future_tiles_never_read, check_threshold_flips, draw_gated,
                     fast_implementations, half_precision, implementation, length_by_head_dim_sweep, pattern_of, run,
                     slow)

pytestmark = pytest.mark.usefixtures("exact_bf16_dot")

IMPLEMENTATIONS = fast_implementations("tra")
reference = implementation("tra", "reference")


def near_threshold(x: dict, case: Case) -> torch.Tensor:
    """``[batch, head, query_pos, key_pos]`` (on the CPU) True where a visible score lies within
    NEAR of 0, the threshold."""
    causal = torch.ones(case.T, case.T, dtype=torch.bool).tril()
    q, k = (x[key].detach().double().cpu() for key in ("qk0", "qk1"))
    return (torch.einsum("bqhd,bkhd->bhqk", q, k).abs() / math.sqrt(case.D) < NEAR) & causal


CASES = [Case(1, 16), Case(17, 32, "transposed", (16, 16), scale=3.0), Case(64, 64, "strided", gate=6.0),
         Case(65, 16, blocks=(32, 16), scale=3.0, gate=-4.0), Case(130, 32, "transposed", (16, 32)),
         Case(65, 32, empty=True), *half_precision(Case(65, 32, "transposed")),
         *slow(length_by_head_dim_sweep(lambda T, D: Case(T, D, "transposed", gate=-4.0 if T % 2 else 4.0)))]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_matches_reference(impl, case, device):
    check(implementation("tra", impl, case), reference, draw_gated, near_threshold, case, device)


def forward_only_inputs(case: Case, device) -> dict:
    return {key: t.detach() for key, t in draw_gated(case, torch.Generator().manual_seed(0), device).items()}


@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_future_tiles_never_read(device):
    case = Case(64, 32)
    check_future_tiles_never_read(implementation("tra", "triton", case), forward_only_inputs(case, device), cut=32)


def test_threshold_flips(device):
    case = Case(130, 64, gate=2.0)
    x = forward_only_inputs(case, device)
    check_threshold_flips(implementation("tra", "triton", case), reference, x, near_threshold(x, case), case)


def test_skipping_zero_tiles_is_exact(device):
    """A key tile without a survivor adds exactly zero, forward and backward, so skipping it
    changes no bit of the output or of a gradient."""
    from kernels.tooling.bench import zero_tile_fraction

    case = Case(48, 16, blocks=(16, 16), empty=True, gate=-4.0)
    kernel = implementation("tra", "triton", case)
    x = {key: t.requires_grad_() for key, t in forward_only_inputs(case, device).items()}
    with torch.no_grad():
        assert zero_tile_fraction(pattern_of(reference, x), (16,))[16] > 0.2  # exercised
    dz = torch.randn(x["qk0"].shape, generator=torch.Generator().manual_seed(1)).to(device)
    dense, skipped = (run(kernel, x, dz, skip_zero_tiles=flag) for flag in (False, True))
    torch.testing.assert_close(skipped, dense, rtol=0, atol=0)


@pytest.mark.parametrize("slots", [None, "twice the sequence-heads"])
def test_backward_in_several_passes(device, monkeypatch, slots):
    """Past :func:`kernels.tra.triton.rows_per_pass` query rows the backward runs in passes over
    the rows, each with its own count table, adding dK and dV in float32 in pass order, and its
    query tiles' keys cut into chunks: still the reference's gradients (here passes of 32 rows at
    T = 65, tiles of 16 x 16; chunks of 32 keys, or as a GPU with twice as many slots as
    sequence-heads cuts them: the first two passes, of two query tiles, walk their keys whole, the
    last, of one, cuts its 5 key tiles in chunks of 2, 2 and 1)."""
    import kernels.tra.triton as tra_triton

    monkeypatch.setattr(tra_triton, "rows_per_pass", lambda meta: 32)
    if slots:
        launches = tra_triton.backward_launches
        monkeypatch.setattr(tra_triton, "backward_launches",
                            lambda T, heads, meta, _: launches(T, heads, meta, 2 * heads))
        assert [(p.chunks, p.chunk_tiles) for p in tra_triton.backward_launches(
            65, 2, {"BLOCK_M": 16, "BLOCK_N": 16, "D": 16}, None)] == [(1, 2), (1, 4), (3, 2)]
    case = Case(65, 16, blocks=(16, 16), gate=-4.0)
    check(implementation("tra", "triton", case), reference, draw_gated, near_threshold, case, device)


def test_cutting_the_keys_changes_no_count(device, monkeypatch):
    """The survivor pre-pass gives each chunk the counts one walk over all keys carries: the count
    table, so dK and dV, and the output are bit for bit those of the backward that walks every pass
    whole (no slot to fill); dQ and dlog_delta, summed over the chunks, only to rounding. Cut as a
    GPU with twice as many slots as sequence-heads cuts them: the last pass's 11 key tiles (T = 161,
    passes of 32 rows, tiles of 16) in 4 chunks of 3, 3, 3 and 2, which do not line up with the
    passes (cut everywhere, the interpreter's way: :func:`test_backward_in_several_passes`)."""
    import kernels.tra.triton as tra_triton

    monkeypatch.setattr(tra_triton, "rows_per_pass", lambda meta: 32)
    launches = tra_triton.backward_launches
    case = Case(161, 16, blocks=(16, 16), gate=-4.0)
    x = {key: t.requires_grad_() for key, t in forward_only_inputs(case, device).items()}
    dz = torch.randn(x["qk0"].shape, generator=torch.Generator().manual_seed(1)).to(device)
    heads = x["qk0"].shape[0] * x["qk0"].shape[2]
    meta = {"BLOCK_M": 16, "BLOCK_N": 16, "D": 16}
    assert [(p.chunks, p.chunk_tiles) for p in launches(161, heads, meta, 2 * heads)][-1] == (4, 3)
    results = []
    for slots in (0, 2 * heads):  # 0: no pass cut
        monkeypatch.setattr(tra_triton, "backward_launches", lambda T, heads, meta, _: launches(T, heads, meta, slots))
        results.append(run(implementation("tra", "triton", case), x, dz))
    (whole, whole_grads), (cut, cut_grads) = results
    torch.testing.assert_close(cut, whole, rtol=0, atol=0)
    for key, grad in whole_grads.items():  # dK, dV exact; dQ, dlog delta to float32 rounding
        torch.testing.assert_close(cut_grads[key], grad, **({"rtol": 0, "atol": 0} if key in ("qk1", "v") else {}))


def test_rows_with_empty_rows_and_gradcheck(small_blocks):
    """Rows with no surviving key give 0 and pass no gradient; float64 gradcheck on a shape
    that crosses blocks; the forward without gradients (logits up to a row constant) agrees."""
    tra_rows = implementation("tra", "rows")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    k[:, :, 0] = -q[:, :1, 0]  # head 0: every key is minus query 0, so query 0 keeps no key
    log_delta = -torch.rand(1, 2, 9, generator=gen, dtype=torch.float64) - 0.1
    inputs = tuple(t.requires_grad_() for t in (q, k, v, log_delta))
    assert torch.autograd.gradcheck(tra_rows, inputs)
    with_grad = tra_rows(*inputs)
    with torch.no_grad():
        without = tra_rows(*inputs)
    assert torch.allclose(with_grad, without, atol=1e-12)
    assert torch.equal(without[0, 0, 0], torch.zeros(4, dtype=torch.float64))
    z = tra_rows(torch.ones(1, 3, 1, 4), -torch.ones(1, 3, 1, 4), torch.randn(1, 3, 1, 4), torch.full((1, 1, 3), -0.5))
    assert torch.equal(z, torch.zeros_like(z)), "no key survives: every row attends to nothing"


def test_backward_fills_the_gpu_at_long_t():
    """At T = 32768, 4 sequence-heads, Hopper's tiles (64 x 32, head dim 64: passes of 2048 rows),
    the backward's query-tile launches are split along the keys into chunks of 2048: every dQ
    program walks at most one chunk (64 key tiles), and pass p launches 32 x 4 x (p + 1) dQ
    programs, from the second pass on more than an H200's 132 SMs, where one program per query
    tile was 128 in every pass, the last ones walking all 1024 key tiles. The survivor counts of
    the chunks right of the first take one launch per pass; dK/dV keep one program per key tile.
    On a GPU only a pass whose query tiles fill at most half its slots is cut, into enough chunks
    for two waves."""
    from kernels.tra.triton import backward_launches

    passes = backward_launches(32768, 4, {"BLOCK_M": 64, "BLOCK_N": 32, "D": 64})
    assert len(passes) == 16 and {(p.rows, p.chunk_tiles) for p in passes} == {(2048, 64)}
    for i, p in enumerate(passes):
        assert p.grids["dq"] == (32, 4, i + 1) and p.grids["dkdv"] == (64 * (i + 1), 4)
        assert p.grids.get("survivors") == ((32, 4, i) if i else None)
    assert [math.prod(p.grids["dq"]) for p in passes][1:] == [128 * (i + 1) for i in range(1, 16)]
    # on an H200 (132 SMs, 2 programs each): cut where the query tiles fill at most half the 264 slots,
    # into enough chunks for two waves: 6 (of at most 171 key tiles) from the sixth pass on
    fitted = backward_launches(32768, 4, {"BLOCK_M": 64, "BLOCK_N": 32, "D": 64}, slots=264)
    assert [p.chunks for p in fitted] == [1, 2, 3, 4, 5] + [6] * 11 and fitted[-1].chunk_tiles == 171
    assert all(math.prod(p.grids["dq"]) >= 264 for p in fitted[2:]), "the second pass has 2 chunks at most"
    for T, heads in ((16384, 8), (8192, 16)):
        full = backward_launches(T, heads, {"BLOCK_M": 64, "BLOCK_N": 32, "D": 64}, slots=264)
        assert {p.chunks for p in full} == {1} and not any("survivors" in p.grids for p in full)
    one = backward_launches(100, 4, {"BLOCK_M": 64, "BLOCK_N": 32, "D": 64})
    assert [(p.rows, p.chunks, p.grids) for p in one] == [(100, 1, {"dq": (2, 4, 1), "dkdv": (4, 4)})], \
        "one pass, one chunk: the launches of one walk"

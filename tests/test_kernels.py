"""What the Triton kernels share (``kernels.tiles``: input checks) and their benchmark
(``kernels.bench``). Each op's kernel is compared with its reference in ``tests/test_op_<op>.py``."""

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed; the kernel tests need it")

from kernels import bench  # noqa: E402
from kernels.forgetting.triton import forgetting_attention  # noqa: E402
from kernels.threshold.triton import threshold_attention  # noqa: E402
from kernels.tra.triton import tra_attention  # noqa: E402
from support import models_with  # noqa: E402

KERNEL_MODELS = models_with("triton")


def test_rejects_bad_inputs(device):
    q, gate = torch.randn(1, 8, 1, 16, device=device), torch.zeros(1, 1, 8, device=device)
    with pytest.raises(ValueError, match="head dim"):
        forgetting_attention(q[..., :12], q[..., :12], q[..., :12], gate)
    with pytest.raises(ValueError, match="shapes differ"):
        threshold_attention(q, q[:, :4], q, 1.0)
    with pytest.raises(ValueError, match="one dtype"):
        tra_attention(q, q.half(), q, gate)
    with pytest.raises(ValueError, match="log_delta"):
        tra_attention(q, q, q, gate.transpose(1, 2))


def test_zero_tile_fraction_hand_checked():
    pattern = torch.zeros(1, 1, 64, 64)
    pattern[0, 0, 40, 3] = 0.5  # the only non-zero entry: query tile 2 (of 16) / 1 (of 32), key tile 0
    assert bench.zero_tile_fraction(pattern) == {16: pytest.approx(9 / 10), 32: pytest.approx(2 / 3), 64: 0.0}


def test_kernel_goals():
    def row(kernel, T, peak, vs_sdpa):
        return {"kernel": kernel, "T": T, "impl": "triton", "peak_mib": peak, "fwd_bwd_vs_sdpa": vs_sdpa}

    rows = [row("tra", 512, 10.0, 3.0), row("tra", 4096, 12.0, 1.1), row("tda", 512, 10.0, 2.0),
            row("tda", 8192, 20.0, 1.5), {"kernel": "tra", "T": 512, "impl": "sdpa_flash"}]
    goals = {(g["kernel"], g["goal"].split(",")[0].split(" /")[0]): (g["worst"], g["met"])
             for g in bench.kernel_goals(rows)}
    assert goals == {("tra", "peak memory"): (1.2, True), ("tra", "fwd+bwd"): (1.1, True),
                     ("tda", "peak memory"): (2.0, False), ("tda", "fwd+bwd"): (1.5, False)}
    no_memory = bench.kernel_goals([row("fot", 512, float("nan"), 3.0)])
    assert [g["met"] for g in no_memory] == [None, None], "off CUDA, or below T = 4096, nothing is decided"


@pytest.mark.integration
def test_bench_kernels_command_resumes(tmp_path, device, capsys):
    """``glitchlens bench kernels`` at a tiny size: the kernel, SDPA and the reference, each timed
    forward, backward and both (peak memory on CUDA only). With ``--out CSV --budget-s S`` it
    runs (kernel, T) pairs until S has passed and appends them; the same command again runs only
    the pairs still missing."""
    import pandas as pd

    from interp.cli import main

    out = tmp_path / "kernels.csv"
    command = ["bench", "kernels", "--seq-lens", "16", "--tokens", "16", "--d-head", "16", "--repeats", "1",
               "--budget-s", "0", "--out", str(out)]
    assert main(command) == 0
    assert "run the same command again" in capsys.readouterr().out
    assert set(pd.read_csv(out).kernel) == {KERNEL_MODELS[0]}, "a budget of 0 s runs one pair"
    assert main(command) == 0
    frame = pd.read_csv(out)
    assert list(dict.fromkeys(frame.kernel)) == KERNEL_MODELS[:2]
    assert list(frame.impl) == ["triton", "sdpa_flash", "reference"] * 2
    assert (frame["T"] == 16).all() and (frame.batch == 1).all()
    assert (frame[list(bench.TIMES)] > 0).all().all()
    assert frame.peak_mib.isna().all() == (device.type != "cuda"), "peak memory is measured on CUDA only"
    assert (frame.fwd_bwd_vs_sdpa[frame.impl == "sdpa_flash"] == 1).all()
    assert (frame.fwd_bwd_vs_reference[frame.impl == "reference"] == 1).all()


@pytest.mark.parametrize("name", ["fot", "trela", "tda"])
def test_backward_is_deterministic(name, device):
    """FoT's, trela's and TDA's backward own each dK/dV tile in one program (key-tile-major, no
    atomics), so two backward passes give bitwise the same gradients (TRA's adds dK and dV
    with float32 atomics, in whatever order the GPU runs its programs)."""
    torch.manual_seed(0)
    inputs, _ = bench.random_inputs(name, 1, 40, 1, 16, torch.float32, device)
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    z = bench.KERNELS[name](*inputs)
    dz = torch.randn_like(z)
    first, second = (torch.autograd.grad(z, leaves, dz, retain_graph=True) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_cost_model_hand_checked(capsys):
    """One FoT forward program at T = 64, head dim 64, bf16 (tiles 64 x 32): two key tiles of
    two 64 x 32 x 64 products each; q, c, k, v, c, z and the log-sum-exp moved once."""
    from interp.cli import main
    from kernels import cost

    forward = cost.PASSES["fot"][0]
    assert cost.pass_cost(forward, 64) == {"flops": 2 * 2 * 64 * 64 * 64, "bytes_once": 64 * (132 + 260 + 132),
                                           "bytes_streamed": 64 * (132 + 260 + 132)}
    rows = {(r["kernel"], r["T"]): r for r in cost.cost_table(seq_lens=[16384])}
    fa2 = rows["fot", 16384]["FA2_H100_ms"]
    assert fa2 == pytest.approx(32 * 4 * 16384 ** 2 * 64 / 2 * 3.5 / 335e12 * 1e3)
    assert rows["tda", 16384]["GFLOP"] > rows["fot", 16384]["GFLOP"] > rows["tra", 16384]["GFLOP"]
    assert main(["bench", "kernels", "--cost-model", "--seq-lens", "512"]) == 0
    assert "PREDICTED (not measured)" in capsys.readouterr().out

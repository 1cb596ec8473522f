"""Attribution patching: each estimate is the derivative it claims to be (a finite difference of
the metric along the patch), it covers every hook of the streams, heads, maps and mechanisms, it
ranks the components of a trained specimen as activation patching does, and the agreement table
of docs/results/benchmarks.md is what ``glitchlens bench attribution`` computes from the specimens."""

import numpy as np
import pandas as pd
import pytest
import torch

from interp import circuits
from interp.bench import ATTRIBUTION_CSV, bench_attribution
from interp.claims.sources import ROOT
from interp.tasks import load_split
from models import ModelConfig, build_model, load_pretrained

TEXTS = ["w1i0r1w0i1r0i1r", "w0r0i1w1r1i0i0r", "w1w0r0r0i1i1w1r"]
AGREEMENT = ROOT / "runs" / "bench" / ATTRIBUTION_CSV


def tiny(name, **overrides):
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset(name, "tiny", n_heads=2, n_ctx=16, **overrides)).eval()


def metric_along(model, pairs, name: str, head: int, eps: float) -> float:
    """The metric of the first pair's corrupt run with ``eps`` of (clean - corrupt) added to one
    head's slice of ``hook``: a finite difference of the metric along the patch."""
    runs = circuits.patching.prepare_pairs(model, pairs.clean[:1], pairs.corrupt[:1], pairs.read[:1], None, None)
    _, clean_cache = model.run_with_cache(runs.clean, names_filter=[name])
    head_axis, _ = circuits.hook_axes(name, clean_cache[name].shape, runs.clean.shape[1], model.cfg.n_heads)

    def nudge(act, hook):
        index = [slice(None)] * act.ndim
        if head_axis is not None:
            index[head_axis] = head
        moved = act.clone()
        moved[tuple(index)] += eps * (clean_cache[name] - act)[tuple(index)]
        return moved

    with torch.no_grad():
        logits = model.run_with_hooks(runs.corrupt, fwd_hooks=[(name, nudge)])
    return float(runs.measure(logits, runs.corrupt)[0])


@pytest.mark.parametrize("name", ["rope", "fot", "diff"])
def test_each_estimate_is_the_derivative_along_the_patch(name):
    model = tiny(name)
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    hooks = ["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre", "blocks.1.attn.hook_pattern"]
    frame = circuits.attribution_patching(model, pairs.clean[:1], pairs.corrupt[:1], hooks, reads=pairs.read[:1])
    eps = 1e-2
    for row in frame.itertuples():
        head = max(row.head, 0)
        difference = (metric_along(model, pairs, row.hook, head, eps)
                      - metric_along(model, pairs, row.hook, head, -eps)) / (2 * eps)
        assert row.estimate == pytest.approx(difference, rel=2e-2, abs=2e-4), (row.hook, row.head)
    assert frame.patched.tolist() == pytest.approx((frame.corrupt + frame.estimate).tolist())


@pytest.mark.parametrize("name,own", [("tra", "hook_dbar"), ("fot", "hook_forget"), ("cope", "hook_gates"),
                                      ("tda", "hook_view_2"), ("diff", "hook_view_1")])
def test_every_hook_of_a_mechanism_is_estimated_in_three_passes(name, own):
    model = tiny(name)
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    hooks = circuits.patchable_hooks(model, circuits.ATTRIBUTION_KINDS)
    passes = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: passes.append(1))
    frame = circuits.attribution_patching(model, pairs.clean, pairs.corrupt, reads=pairs.read)
    assert list(dict.fromkeys(frame.hook)) == hooks and f"blocks.1.attn.{own}" in hooks
    assert len(passes) == 2, "one forward of each run (and one backward of the corrupt run)"
    assert frame.estimate.notna().all() and (frame.estimate != 0).any()
    z = frame[frame.hook == "blocks.0.attn.hook_z"]
    assert sorted(set(z["head"])) == [0, 1] and len(z) == 2 * len(pairs)


def test_same_runs_estimate_nothing():
    model = tiny("tra")
    tokens = model.to_tokens(TEXTS)
    frame = circuits.attribution_patching(model, tokens, tokens, ["blocks.0.attn.hook_z"], reads=[14, 14, 14])
    np.testing.assert_allclose(frame.estimate, 0.0, atol=1e-6)   # the two passes' float rounding


def test_it_ranks_a_specimens_components_as_activation_patching_does():
    model = load_pretrained("rope-mech")
    pairs = circuits.bit_flip_pairs(np.array(load_split("iid", 4)[:, :64]))
    last = pairs.info.groupby("seq").pair.max().tolist()
    clean, corrupt, reads = pairs.clean[last], pairs.corrupt[last], pairs.read[last]
    hooks = circuits.patchable_hooks(model, ("resid_pre", "z"))
    table = circuits.compare_attribution(circuits.attribution_patching(model, clean, corrupt, hooks, reads=reads),
                                         circuits.activation_patching(model, clean, corrupt, hooks, reads=reads))
    agreement = circuits.attribution_agreement(table)
    assert agreement["components"] == len(table) == 3 + 2 * 4   # the streams whole, each head's z
    assert agreement["rank_correlation"] > 0.8
    # the linear estimate misses most where patching restores everything (the whole stream)
    assert agreement["missed"].endswith(("resid_pre", "resid_post")) and agreement["missed_patched"] > 0.9


def test_the_committed_agreement_is_what_the_benchmark_computes():
    committed = pd.read_csv(AGREEMENT).set_index("specimen")
    (row,) = bench_attribution(("tra-mech",))
    for column in ("components", "rank_correlation", "largest_miss", "missed_estimated", "missed_patched"):
        assert row[column] == pytest.approx(committed.loc["tra-mech", column], rel=1e-6, abs=1e-9), column
    assert row["missed"] == committed.loc["tra-mech", "missed"]


def test_bad_input_is_refused_in_words():
    model = tiny("tra")
    pairs = circuits.bit_flip_pairs(model.to_tokens(TEXTS))
    with pytest.raises(TypeError, match="metric must be a callable"):
        circuits.attribution_patching(model, pairs.clean, pairs.corrupt, reads=pairs.read, metric="margin")
    with pytest.raises(ValueError, match="metric must give one value per row"):
        circuits.attribution_patching(model, pairs.clean, pairs.corrupt, reads=pairs.read,
                                      metric=lambda logits, scored: logits.sum())
    with pytest.raises(TypeError, match="estimated must be a patching frame"):
        circuits.compare_attribution([], pd.DataFrame())
    with pytest.raises(ValueError, match="patched is not a patching frame"):
        circuits.compare_attribution(circuits.attribution_patching(model, pairs.clean, pairs.corrupt,
                                                                   ["blocks.0.attn.hook_z"], reads=pairs.read),
                                     pd.DataFrame({"hook": []}))
    with pytest.raises(ValueError, match="table is not a compare_attribution frame"):
        circuits.attribution_agreement(pd.DataFrame())

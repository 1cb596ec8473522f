"""Each metric against a small example computed by hand from its paper's formula, and the metric
API's refusals of arguments it cannot measure (one test per class)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from interp.evaluate import clopper_pearson_upper
from interp.figures.flipflop import dependency_histogram
from interp.metrics import (
    automaton_write_positions, bit_carrier_summary, cross_view_correlation, dispersion, effective_entropy,
    entropy_summary, heatmap_window, key_regions, last_row_dispersion, last_write_summary, max_abs_weight,
    off_target_peak, peak_cooccurrence, raw_logits, region_masses, retrieval_head, sharp_share, sink_eps, sink_ratio,
    sparsity, summarise, survivor_counts, survivor_growth, tail_probabilities, wilson_interval,
)
from interp.metrics.threshold import spurious_survivors
from interp.tasks import IGNORE, ONE, READ, WRITE, ZERO, parse_sequence


def value(frame: pd.DataFrame, metric: str, **where) -> float:
    rows = frame[frame.metric == metric]
    for column, wanted in where.items():
        rows = rows[rows[column] == wanted]
    return float(rows.value.item())


# A 3 x 3 signed map (TDA's differential weights), one head: the entry above the diagonal is junk.
SIGNED = torch.tensor([[[[0.5, 9.0, 9.0],
                         [0.0, 0.0, 9.0],
                         [0.3, -0.1, 0.0]]]])


def test_effective_entropy_and_sparsity_by_hand():
    # TDA Sec. 3: p = |a| / ||a||_1; row 2 is (0.3, 0.1, 0) / 0.4 = (3/4, 1/4, 0)
    H = effective_entropy(SIGNED)[0, 0]
    assert H.tolist() == pytest.approx([0.0, 0.0, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))])
    # App. E.1: exact zeros among the 6 causal entries: (1, 0), (1, 1), (2, 2)
    assert value(sparsity(SIGNED), "sparsity") == pytest.approx(3 / 6)
    assert value(survivor_counts(SIGNED), "survivors") == pytest.approx((1 + 0 + 2) / 3)


def test_dispersion_and_entropy_summary_by_hand():
    # TDA Sec. 3: E[H(a_i)] / log |S(i)|, |S(i)| = i + 1; SIGNED's row 1 is all zero (left out), row 2 has H = h
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    frame = dispersion(SIGNED)
    assert value(frame, "effective_entropy", query_pos=2) == pytest.approx(h)
    assert value(frame, "dispersion_ratio", query_pos=2) == pytest.approx(h / math.log(3))
    assert math.isnan(value(frame, "dispersion_ratio", query_pos=0))            # log 1 = 0
    assert math.isnan(value(frame, "effective_entropy", query_pos=1)) and value(frame, "zero_rows", query_pos=1) == 1
    summary = entropy_summary(SIGNED)                                           # rows 0 and 2: H = 0 and h
    assert value(summary, "effective_entropy") == pytest.approx(h / 2)
    assert value(summary, "dispersion_ratio") == pytest.approx(h / (math.log(1) + math.log(3)))
    assert value(summary, "zero_row_fraction") == pytest.approx(1 / 3)
    assert value(max_abs_weight(SIGNED), "max_abs_weight") == 0.5               # Fig. 1b: 9.0 is above the diagonal

def test_generalised_sink_ratio_by_hand():
    # TDA Sec. 3: A~_0 = mean over the non-zero rows i >= 0 of |A_i0| / sum_t |A_it| = (1 + 3/4) / 2
    # (row 1 is all zero and left out), A~_0^unif = (1/1 + 1/3) / 2
    frame = sink_ratio(SIGNED, key_pos=[0])
    assert value(frame, "key_mass") == pytest.approx(1.75 / 2)
    assert value(frame, "gsink_ratio") == pytest.approx((1.75 / 2) / ((1 + 1 / 3) / 2))
    # Gu et al.'s Sink^eps: the share of heads whose A~_0 exceeds eps
    assert sink_eps(frame, eps=0.8).value.item() == 1.0 and sink_eps(frame, eps=0.9).value.item() == 0.0


def test_last_row_dispersion_by_hand():
    # Thm 4.4: E[H(a_T)] / log T at T = 4. Sequence 0: last row (1, 1, 0, 0) -> log 2; sequence 1: all zero -> 0
    a = torch.zeros(2, 1, 4, 4)
    a[0, 0, 3, :2] = 1.0
    frame = last_row_dispersion(a)
    assert value(frame, "last_row_dispersion") == pytest.approx((math.log(2) + 0) / 2 / math.log(4))
    assert value(frame, "zero_row_fraction") == 0.5
    uniform = torch.ones(1, 2, 8, 8).tril()
    assert last_row_dispersion(uniform).value.tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])


def test_new_metrics_read_half_precision_maps_as_float32_ones():
    # half precision (a model run under autocast): the same numbers as the float32 map, not overflowed sums
    torch.manual_seed(0)
    a = torch.rand(2, 2, 16, 16).tril()
    q, k = torch.randn(2, 16, 2, 8), torch.randn(2, 16, 2, 8)
    for half in (torch.float16, torch.bfloat16):
        assert last_row_dispersion(a.to(half)).value.tolist() == pytest.approx(
            last_row_dispersion(a.to(half).float()).value.tolist())
        assert raw_logits(q.to(half), k.to(half)).dtype == torch.float32
        assert peak_cooccurrence(a.to(half), a.to(half)).value.tolist() == [1.0, 1.0]   # one layer, two heads


def test_peak_cooccurrence_by_hand():
    # Fig. 1b: the difference can fall below view 1's peak only where view 2 weighs that key
    view_1, view_2 = torch.zeros(1, 1, 3, 3), torch.zeros(1, 1, 3, 3)
    view_1[0, 0, 1, 0] = 0.2                  # row 1's peak at key 0: view 2 is zero there
    view_1[0, 0, 2, [0, 1]] = torch.tensor([0.1, 0.5])   # row 2's peak at key 1
    view_2[0, 0, 2, 1] = 0.3                  # ... which view 2 also weighs; row 0 has no excitatory weight
    frame = peak_cooccurrence(view_1, view_2)
    assert value(frame, "view_2_at_view_1_peak") == 0.5 and frame.n_rows.item() == 2


def test_cross_view_correlation_by_hand():
    # App. B.3: Pearson r over the causal entries x = (1, 0, 2), y = (2, 1, 0)
    v1 = torch.tensor([[[[1.0, 5.0], [0.0, 2.0]]]])
    v2 = torch.tensor([[[[2.0, -5.0], [1.0, 0.0]]]])
    x, y = np.array([1.0, 0.0, 2.0]), np.array([2.0, 1.0, 0.0])
    assert value(cross_view_correlation(v1, v2), "cross_view_correlation") == pytest.approx(np.corrcoef(x, y)[0, 1])


def test_raw_logits_and_tails_by_hand():
    # App. B.1: s_ij = q_i . k_j / sqrt(d), d = 4
    q = torch.tensor([1.0, 2.0, 0.0, 0.0]).expand(1, 2, 1, 4)
    k = torch.tensor([3.0, 1.0, 0.0, 2.0]).expand(1, 2, 1, 4)
    assert raw_logits(q, k)[0, 0].tolist() == [[2.5, 2.5], [2.5, 2.5]]
    # 1 outlier among 21 causal entries of a 6 x 6 map, 4.4 sigma from their mean: past k = 2, 3 and 4
    s = torch.zeros(1, 1, 6, 6)
    s[0, 0, 5, 0] = 10.0
    s[0, 0, 0, 5] = 1e6                       # above the diagonal: never counted
    entries = np.zeros(21)
    entries[0] = 10.0
    mean, sigma = entries.mean(), entries.std(ddof=1)
    frame = tail_probabilities(s).set_index("k")
    assert frame["mean"].iloc[0] == pytest.approx(mean) and frame.sigma.iloc[0] == pytest.approx(sigma)
    expected = [np.mean(np.abs(entries - mean) > k * sigma) for k in (2, 3, 4)]
    assert frame.value.tolist() == pytest.approx(expected) and expected == [1 / 21, 1 / 21, 1 / 21]
    assert frame.low.isna().all() and frame.high.isna().all(), "one sequence: no interval over sequences"
    # two sequences, the outlier in the first: rates 1/21 and 0, t interval with 1 degree of freedom
    two = torch.cat([s, torch.zeros(1, 1, 6, 6)])
    at4 = tail_probabilities(two).set_index("k").loc[4]
    half = 12.7062047 * np.std([1 / 21, 0.0], ddof=1) / np.sqrt(2)
    assert (at4.value, at4.low, at4.high) == pytest.approx((1 / 42, 1 / 42 - half, 1 / 42 + half))


def test_dependency_histogram_shares_wrong_reads_and_rates_by_hand():
    # flip-flop Fig. 12: 3 wrong reads, 2 at 0-15 ignores, 1 at 16-31
    reads = pd.DataFrame({"seq": 0, "ignores_since": [0, 3, 5, 20, 30], "correct": [False, False, True, False, True]})
    table = dependency_histogram(reads).set_index("ignores_since")
    assert table.share_of_errors.tolist() == pytest.approx([2 / 3, 1 / 3])
    assert table.error_rate.tolist() == pytest.approx([2 / 3, 1 / 2])
    assert table.share_of_reads.tolist() == pytest.approx([3 / 5, 2 / 5])


def test_spurious_survivors_count_carrier_keys_apart():
    # w0 i0 i1 r?: an earlier layer moved the bit into the i at 2, a carrier; the i at 4 is noise
    tokens = np.array([[WRITE, ZERO, IGNORE, ZERO, IGNORE, ONE, READ, ZERO]])
    view_1 = torch.zeros(1, 1, 8, 8)
    view_1[0, 0, 6, [2, 4]] = 0.5
    carriers = np.zeros((1, 8), dtype=bool)
    carriers[0, [1, 2]] = True
    row = spurious_survivors({0: view_1}, tokens, carriers={0: carriers}).iloc[0]
    assert (row.S, row.S_carrier, row.noise, row.carrier_keys) == (1, 1, 1, 1)
    by_tokens = spurious_survivors({0: view_1}, tokens).iloc[0]        # without the route: both are noise
    assert (by_tokens.S, by_tokens.S_carrier) == (2, 0)


def test_off_target_peak_by_hand():
    # TDA Sec. 4.2's "high-magnitude noise": per read, the largest share of a head's |weight| (its causal
    # keys) on one key off the last write's two tokens. Sequence 0, w0 i0 i1 r0: one read at 6, its write at 0.
    # Sequence 1, w1 r1 w0 r0: reads at 2 (write 0) and 6 (write 4), where the older write's bit at 1 is noise.
    # Read 1: head 0 0.3 / 1.2, head 1 0.5 / 1.2 (the future 5.0 is no key); read 2: head 0 0.1 / 1.0, head 1
    # has no weight (0); read 3: head 0 0.8 / 1.7, head 1 all of its weight on the read itself, 1.
    tokens = np.array([[WRITE, ZERO, IGNORE, ZERO, IGNORE, ONE, READ, ZERO],
                       [WRITE, ONE, READ, ONE, WRITE, ZERO, READ, ZERO]])
    a = torch.zeros(2, 2, 8, 8)
    a[0, 0, 6, [1, 4]] = torch.tensor([0.9, 0.3])          # the write's bit (the target), an ignore
    a[0, 1, 6, [0, 5, 7]] = torch.tensor([0.7, -0.5, 5.0])  # the write (target), a signed weight, a future key
    a[1, 0, 2, [0, 1, 2]] = torch.tensor([0.4, 0.5, 0.1])   # the write's two tokens, the read itself
    a[1, 0, 6, [1, 5]] = torch.tensor([0.8, 0.9])           # the older write's bit, the last write's bit
    a[1, 1, 6, 6] = 0.2
    assert off_target_peak(a, tokens).tolist() == pytest.approx([0.5 / 1.2, 0.1, 1.0])
    with pytest.raises(ValueError, match="no write before"):
        off_target_peak(a[:1], np.array([[READ, ZERO, WRITE, ZERO, IGNORE, ONE, READ, ZERO]]))


def test_survivor_growth_by_hand():
    # App. B.2 / Fig. 4: survivors at T relative to the shortest T, beside the linear T / T_0
    counts = pd.DataFrame({"layer": 0, "head": [0, 1, 0, 1], "metric": "survivors", "map": "pattern",
                           "seq_len": [4, 4, 16, 16], "value": [1.0, 3.0, 2.0, 6.0]})
    growth = survivor_growth(counts).set_index("seq_len")
    assert growth.value.tolist() == [2.0, 4.0] and growth.growth.tolist() == [1.0, 2.0]
    assert growth.linear_reference.tolist() == [1.0, 4.0]


def test_automaton_sharp_share_and_probe_summaries_by_hand():
    # flip-flop Def. 1: the state is the last write's symbol (sigma_0 = 0, sigma_1 = 1, bottom = 2)
    assert automaton_write_positions([[2, 0, 2, 1, 2]]).tolist() == [[-1, 1, 1, 3, 3]]
    # Sec. 5.2 (R8): the share of positions where some head puts >= 0.99 on the last write
    table = pd.DataFrame({"layer": 0, "seq": 0, "position": [1, 1, 2, 2, 3, 3], "head": [0, 1] * 3,
                          "weight": [0.995, 0.2, 0.5, 0.6, 1.0, np.nan], "is_argmax": [True, False] * 3})
    share = sharp_share(table).iloc[0]
    assert (share.n, share.sharp, share.share) == (3, 2, pytest.approx(2 / 3))
    summary = last_write_summary(table).set_index(["head", "metric"]).value
    assert summary[(0, "last_write_weight")] == pytest.approx((0.995 + 0.5 + 1.0) / 3)
    assert summary[(1, "last_write_argmax_rate")] == 0.0
    carriers = bit_carrier_summary(table.rename(columns={"weight": "carrier_weight"})).set_index(["head", "metric"])
    assert carriers.value[(1, "bit_carrier_weight")] == pytest.approx(0.4)          # NaN skipped


def test_retrieval_head_is_the_head_on_the_last_write_by_hand():
    tokens = parse_sequence("w1i0i1r1")[None]                    # the read at 6, its write at 0, the bit at 1
    carriers = np.zeros(tokens.shape, dtype=bool)
    carriers[0, 1] = True
    pattern = torch.zeros(1, 3, 8, 8)
    pattern[0, :, 6, 6] = 1.0                                     # every head: the read itself ...
    pattern[0, 1, 6, 1] = 3.0                                     # ... head 1: 3/4 of its weight on the bit
    pattern[0, 2, 6, 0] = 1.0                                     # ... head 2: 1/2 on the w
    reads = pd.DataFrame({"seq": [0], "position": [6]})
    masses = region_masses(pattern, key_regions(tokens, carriers, np.array([0]), np.array([6])), np.array([0]),
                           np.array([6]))
    assert masses["last write"][0].tolist() == pytest.approx([0.0, 0.75, 0.5])
    assert retrieval_head(pattern, tokens, carriers, reads) == 1

# --- refusals: a ValueError naming the argument ------------------------------------------

@pytest.mark.parametrize("call, argument", [
    (lambda: wilson_interval(count=5, n=3), "count"),
    (lambda: wilson_interval(-1, 10), "count"),
    (lambda: wilson_interval(1, -2), "n"),
    (lambda: wilson_interval(1, 10, confidence=1.5), "confidence"),
])
def test_wilson_interval_refuses_counts_it_cannot_have(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


@pytest.mark.parametrize("call, argument", [
    (lambda: clopper_pearson_upper(-1, 10), "errors"),
    (lambda: clopper_pearson_upper(3, -5), "trials"),
    (lambda: clopper_pearson_upper(12, 10), "errors"),
    (lambda: clopper_pearson_upper(2, 10, confidence=1.5), "confidence"),
])
def test_clopper_pearson_refuses_counts_and_confidences_it_cannot_have(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_sparsity_of_a_nan_map_is_refused_not_zero():
    a = torch.full((1, 2, 4, 4), math.nan)
    a[:, 1] = torch.eye(4)                      # head 1 is a finite map: 6 of its 10 causal entries are 0
    assert value(sparsity(a[:, 1:]), "sparsity", head=0) == 0.6
    with pytest.raises(ValueError, match=r"maps\[0\] holds NaN or infinite weights at causal entries"):
        sparsity(a)


def test_sink_ratio_refuses_a_key_past_the_map():
    with pytest.raises(ValueError, match="key_pos"):
        sink_ratio(torch.ones(1, 1, 8, 8).tril(), key_pos=[100])


def test_summarise_refuses_a_column_the_frame_lacks():
    with pytest.raises(ValueError, match="over: \\['nonexistent'\\]"):
        summarise(sparsity(SIGNED), over=["nonexistent"])


@pytest.mark.parametrize("args, argument", [((64, [], -4), "size"), ((0, [], 8), "T"), ((64, [70], 8), "wrong")])
def test_heatmap_window_refuses_a_window_it_cannot_cut(args, argument):
    with pytest.raises(ValueError, match=argument):
        heatmap_window(*args)

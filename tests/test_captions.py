"""Every caption in figures/ is written from the CSV beside it and claims nothing its numbers do
not show: each committed caption is written again from its committed CSV, and the functions that
turn numbers into claims (the peak comparison of 02b, the trend of 08, the intervals) give known
answers. Reads files only; no model runs."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from interp import figures
from interp.figures import anatomy, flipflop  # noqa: F401  (registers every caption)
from interp.figures.tda import caption_max_weight, peak_relations
from interp.metrics import (
    attention_destinations, growth_exponent, key_regions, logit_split, mean_interval, share_table, wilson_interval,
)
from interp.tasks import parse_sequence

FIGURES_DIR = Path(__file__).resolve().parents[1] / "figures"
COMMITTED = json.loads((FIGURES_DIR / "captions.json").read_text())


def test_every_figure_has_a_caption_function():
    assert set(figures.CAPTIONS) == set(figures.TITLES)
    assert set(COMMITTED) <= set(figures.CAPTIONS), "a committed figure that no code draws"


@pytest.mark.parametrize("stem", sorted(COMMITTED))
def test_committed_caption_is_written_from_its_csv(stem):
    data = pd.read_csv(FIGURES_DIR / f"{stem}.csv")
    assert figures.CAPTIONS[stem](data) == COMMITTED[stem], (
        f"{stem}: the caption in captions.json is not what its CSV says; redraw it with "
        f"`glitchlens figures --out figures/ --only ...`")


def peaks(differential: list[float], view_1: list[float], view_2: list[float]) -> pd.DataFrame:
    rows = [{"layer": 0, "head": head, "metric": "max_abs_weight", "value": value, "map": label, "model": "m",
             "n_sequences": 4, "seq_len": 512}
            for label, values in (("differential", differential), ("view 1 (excitatory)", view_1),
                                  ("view 2 (inhibitory)", view_2))
            for head, value in enumerate(values)]
    rows += [{"layer": 0, "head": head, "metric": "view_2_at_view_1_peak", "value": 0.01 * head, "map": "views",
              "model": "m", "n_sequences": 4, "seq_len": 512, "n_rows": 100} for head in range(len(differential))]
    return pd.DataFrame(rows)


def test_02b_says_what_the_peaks_show():
    equal = peaks([0.9, 0.5], [0.9, 0.5], [0.3, 0.8])
    assert peak_relations(equal).relation.tolist() == ["equal to view 1's"] * 2
    text = caption_max_weight(equal)
    assert "is equal to view 1's in 2, below both views' in 0" in text and "In no head is the differential" in text
    mixed = peaks([0.2, 0.6, 0.4, 0.95], [0.9, 0.9, 0.3, 0.9], [0.3, 0.3, 0.8, 0.3])
    assert peak_relations(mixed).relation.tolist() == ["below both views'", "between the views'",
                                                       "between the views'", "above both views'"]
    assert "Inhibition lowers the peak below both views' in 1 of 4 heads" in caption_max_weight(mixed)
    assert ("view 2 is non-zero in 0.0% to 3.0% of the rows" in caption_max_weight(mixed)
            and "at least 97.0% of the row peaks pass" in caption_max_weight(mixed))


def test_wilson_interval_known_answers():
    low, high = wilson_interval([0, 5, 10], [10, 10, 10])
    assert low[0] == 0 and high[0] == pytest.approx(0.2775, abs=1e-4)         # 0 of 10: up to 28%
    assert (low[1], high[1]) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert high[2] == 1 and low[2] == pytest.approx(0.7225, abs=1e-4)
    assert np.isnan(wilson_interval(0, 0)[0])


def test_mean_interval_and_share_table():
    frame = pd.DataFrame({"g": ["a"] * 4 + ["b"], "v": [1.0, 2.0, 3.0, 4.0, 7.0], "c": ["x", "x", "y", "x", "y"]})
    means = mean_interval(frame, ["g"], "v").set_index("g")
    assert means.loc["a", "mean"] == 2.5 and means.loc["a", "mean_high"] - 2.5 == pytest.approx(
        3.182446 * np.std([1, 2, 3, 4], ddof=1) / 2, rel=1e-5)                 # t(0.975, 3) s / sqrt(4)
    assert means.loc["b", "mean_low"] == means.loc["b", "mean_high"] == 7.0   # one sample: no spread to show
    shares = share_table(frame, ["g"], "c", ["x", "y", "z"]).set_index(["g", "c"])
    assert shares.loc[("a", "x"), "count"] == 3 and shares.loc[("a", "z"), "count"] == 0
    assert (shares.n.loc["a"] == 4).all() and shares.loc[("b", "y"), "share"] == 1.0


def test_growth_exponent_is_the_log_log_slope():
    frame = pd.DataFrame({"m": ["lin"] * 3 + ["flat"] * 3, "seq_len": [128, 512, 2048] * 2,
                          "value": [10.0, 40.0, 160.0, 5.0, 5.0, 5.0]})
    exponents = growth_exponent(frame, ["m"]).set_index("m").exponent
    assert exponents["lin"] == pytest.approx(1.0) and exponents["flat"] == pytest.approx(0.0)


def test_key_regions_and_destinations_known_answer():
    tokens = parse_sequence("w1r1i0w0i1i0i1i0r0")[None]   # the read at 16, its last write at 6
    carriers = np.zeros(tokens.shape, dtype=bool)
    carriers[0, [7, 9]] = True                            # the bit, and a position an earlier layer moved it to
    regions = key_regions(tokens, carriers, np.array([0]), np.array([16]))
    keys = {name: np.flatnonzero(mask[0].numpy()).tolist() for name, mask in regions.items()}
    assert keys == {"last write": [6, 7, 9], "older writes": [1, 3], "first token": [0],
                    "recent tokens": [10, 11, 12, 13, 14, 15, 16], "other": [2, 4, 5, 8]}
    pattern = torch.zeros(1, 2, 18, 18)
    pattern[0, 0, 16, 7] = 1.0                            # head 0 reads the bit
    pattern[0, 1, 16, [0, 1, 14, 15]] = 0.25              # head 1 spreads its weight
    reads = pd.DataFrame({"seq": [0], "position": [16]})
    found = attention_destinations(pattern, tokens, carriers, reads)
    assert found["last write"][0] == pytest.approx(0.5) and found["recent tokens"][0] == pytest.approx(0.25)
    assert found.destination[0] == "spread"                # no region holds more than half of the layer's weight
    assert attention_destinations(pattern[:, :1], tokens, carriers, reads).destination[0] == "last write"


def test_logit_split_names_the_losing_term():
    tokens = parse_sequence("w1i0w0i1i0i1i0r0")[None]
    carriers = np.zeros(tokens.shape, dtype=bool)
    carriers[0, 5] = True
    content, position = torch.full((1, 1, 16, 16), -10.0), torch.zeros(1, 1, 16, 16)
    content[0, 0, 14, 5], position[0, 0, 14, 5] = 2.0, -3.0       # the bit: better content, but far away
    content[0, 0, 14, 1], position[0, 0, 14, 1] = 1.0, -1.0       # an older write's bit: worse content, nearer
    allowed = torch.ones(1, 1, 16, 16, dtype=torch.bool)
    reads = pd.DataFrame({"seq": [0], "position": [14]})
    split = logit_split(content, position, allowed, tokens, carriers, reads, head=0).iloc[0]
    assert (split.target_key, split.winner_key) == (5, 1) and split.margin == pytest.approx(-1.0)
    assert (split.content_margin, split.position_margin) == (1.0, -2.0) and split.losing_term == "position"
    content[0, 0, 14, 5] = 4.0                                    # now the bit's key wins
    assert logit_split(content, position, allowed, tokens, carriers, reads, 0).losing_term[0] == "none"
    kept = allowed & ~torch.isin(torch.arange(16), torch.tensor([4, 5]))  # the threshold removed the w and its bit
    removed = logit_split(content, position, kept, tokens, carriers, reads, 0)
    assert removed.losing_term[0] == "threshold" and removed.target_key[0] == -1


def test_a_share_in_a_caption_carries_its_interval():
    from interp.figures.tda import share_with_interval

    # 2 of 23: the Wilson 95% interval, worked by hand from its formula
    assert share_with_interval(2, 23) == "8.7% (2.4-26.8%)"
    assert share_with_interval(0, 40) == "0.0% (0.0-8.8%)"

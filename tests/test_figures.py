"""``glitchlens figures`` on freshly initialised ``tiny`` models: every figure writes its PNG, HTML,
CSV and caption, the numbers behind it have the shape the paper's figure needs, and the metrics
added for the figures give known answers. Nothing here depends on trained weights."""

import functools
import html
import json

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import torch

import models
from interp import figures, plots
from interp.cli import main
from interp.figures import anatomy, flipflop, make_figures, write_figure
from interp.figures.common import read_rich_window
from interp.figures.cope import figure_cope_gates
from interp.figures.flipflop import (
    drift_sequences, figure_automaton, figure_drift, figure_glitch_lengths, glitch_lengths_figure,
)
from interp.figures.table1 import figure_table1
from interp.figures.tda import (
    figure_cross_view, figure_logit_tails, figure_non_dispersion, figure_survivors, figure_tda_diagnostics,
    figure_tda_inhibition,
)
from interp.figures.tra import figure_tra_vs_fot
from interp.metrics import (
    MissingHookError, automaton_write_attention, capture_maps, gaussian_tail, inhibition, mean_by_key_token,
    read_table,
)
from interp.studies.reproduce import summarise_runs
from interp.tasks import SPLITS, load_split, parse_sequence
from interp.tasks.text import format_sequence, validate
from models import ModelConfig

LENGTHS = (32, 64)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def tiny(name: str) -> torch.nn.Module:
    """A random ``tiny`` model of the family a pretrained name stands for (``tda-beta1``, ``tra-app-a`` -> ``tda``,
    ``tra``)."""
    torch.manual_seed(0)
    cfg = (ModelConfig.from_preset("rope", "tiny", n_layers=1) if name.startswith("automaton-1l")
           else ModelConfig.from_preset(name.split("-")[0], "tiny"))
    return models.build_model(cfg).eval()


def check_written(found: list, tmp_path, stems: list[str]) -> dict:
    """Write each figure; check its files, caption and CSV; return ``{stem: figure}``."""
    assert [f.stem for f in found] == stems
    for figure in found:
        png, page_file, csv = write_figure(figure, tmp_path)
        assert matplotlib.image.imread(png).ndim == 3
        page = page_file.read_text()
        assert f'id="{figure.stem}"' in page and 'src="plotly.min.js"' in page
        assert f"<title>{html.escape(figure.title)}</title>" in page and html.escape(figure.caption) in page
        assert (tmp_path / "plotly.min.js").exists()
        assert len(pd.read_csv(csv)) == len(figure.data) > 0
        assert figures.CAPTIONS[figure.stem](pd.read_csv(csv)) == figure.caption, "the CSV gives the caption back"
        assert "nan" not in figure.caption.lower()
    return {f.stem: f for f in found}


def test_tra_vs_fot(tmp_path):
    figure = check_written(figure_tra_vs_fot(tiny), tmp_path, ["01_tra_vs_fot_attention"])["01_tra_vs_fot_attention"]
    data = figure.data
    assert set(data.model) == {"tra-app-a", "fot-app-a"} and set(data.layer) == {1}
    by_model = [rows.position.tolist() for _, rows in data.groupby("model")]
    assert by_model[0] == by_model[1] and len(by_model[0]) >= 2, "the same reads of one window for both models"
    assert data.weight.between(0, 1 + 1e-6).all()
    assert "tokens 78-157" in figure.caption
    assert figure.draw("matplotlib").axes[-1].get_ylabel() == "attention weight (hook_pattern)", "a named colour bar"


def test_read_rich_window_prefers_reads_with_their_write():
    tokens = np.stack([parse_sequence("w1i0i0i0i0i0i0r1"), parse_sequence("w1r1w0r0i0i0i0r0")])
    assert read_rich_window(tokens, size=8) == (1, (0, 8))     # two reads with their writes in tokens 0-7
    assert read_rich_window(tokens, size=100) == (1, (0, 16))  # a window longer than the sequence is all of it


def test_tda_diagnostics(tmp_path):
    found = check_written(figure_tda_diagnostics(tiny, lengths=LENGTHS, n_samples=3), tmp_path,
                          ["02a_tda_sparsity", "02b_tda_max_weight", "02c_sink_ratio_vs_length"])
    zeros = found["02a_tda_sparsity"].data
    assert set(zeros["map"]) == {"view 1 (excitatory)", "view 2 (inhibitory)", "differential"}
    assert len(zeros) == 3 * 2 and zeros.value.between(0, 1).all()
    peaks = found["02b_tda_max_weight"].data
    shares = peaks[peaks.metric == "view_2_at_view_1_peak"]
    assert len(shares) == 2 * tiny("tda-beta1").cfg.n_heads and shares.value.dropna().between(0, 1).all()
    sinks = found["02c_sink_ratio_vs_length"].data
    assert set(sinks.model) == {"tda-beta1", "rope-mech"} and (sinks.n == 3).all()
    assert sorted(sinks.seq_len.unique()) == list(LENGTHS)
    assert (sinks.mean_low <= sinks["mean"]).all() and (sinks["mean"] <= sinks.mean_high).all()


def test_tda_inhibition_picks_one_head(tmp_path):
    data = check_written(figure_tda_inhibition(tiny), tmp_path, ["03_tda_inhibition"])["03_tda_inhibition"].data
    assert set(data.metric) == {"inhibitory_fraction", "inhibitory_mass"}
    assert data[data.shown].groupby("metric").size().tolist() == [1, 1]


def test_survivors(tmp_path):
    data = check_written(figure_survivors(tiny, lengths=LENGTHS), tmp_path, ["04_survivors_vs_length"])[
        "04_survivors_vs_length"].data
    assert len(data) == 3 * 2 * len(LENGTHS)             # (tda pattern, tra mask, tra pattern) x layers x lengths
    assert set(data["map"]) == {"tda-beta1 pattern", "tra-mech mask", "tra-mech pattern"}
    shortest = data[data.seq_len == LENGTHS[0]]
    assert np.allclose(shortest.growth.dropna(), 1.0) and np.allclose(shortest.linear_reference, 1.0)
    assert (data.value <= (data.seq_len + 1) / 2).all(), "no more survivors than causal keys per query"


def test_cross_view_is_deterministic(tmp_path):
    first = check_written(figure_cross_view(tiny, n_samples=3), tmp_path, ["05_cross_view_correlation"])[
        "05_cross_view_correlation"].data
    torch.manual_seed(123)           # the untrained model's seed does not follow the global RNG
    again = figure_cross_view(tiny, n_samples=3)[0].data
    pd.testing.assert_frame_equal(first, again)
    assert first.groupby("model").size().to_dict() == {"trained": 2, "untrained": 2}
    assert (first.n + first.constant_views == 3).all(), "each sequence a sample, or a constant view left out"


def test_logit_tails_table(tmp_path):
    data = check_written(figure_logit_tails(tiny), tmp_path, ["06_logit_tails"])["06_logit_tails"].data
    assert len(data) == 2 * 2 * 3                        # layers x views x k
    assert data.groupby(["layer", "map", "k"]).size().eq(1).all()
    assert np.allclose(data.gaussian, [gaussian_tail(k) for k in data.k])
    assert set(data["map"]) == {"view 1", "view 2"} and (data.sigma > 0).all()


def test_non_dispersion(tmp_path):
    data = check_written(figure_non_dispersion(tiny, lengths=LENGTHS, names=("rope-mech", "tda-mech"), n=2), tmp_path,
                         ["13_non_dispersion"])["13_non_dispersion"].data
    ratio = data[data.metric == "last_row_dispersion"]
    assert len(ratio) == 2 * 2 * tiny("rope-mech").cfg.n_heads * len(LENGTHS)      # models x layers x heads x lengths
    assert ratio.value.between(0, 1 + 1e-6).all() and (data.n_sequences == 2).all()


def test_automaton(tmp_path):
    figure = check_written(figure_automaton(tiny), tmp_path, ["07_automaton_attention"])["07_automaton_attention"]
    data = figure.data
    assert data.model.value_counts().to_dict() == {"automaton-1l": 40, "automaton-1l-sharp": 40}
    assert data.groupby("model").position.apply(lambda p: p.diff().dropna().eq(1).all()).all()
    assert (data.correct == (data.predicted == data.state)).all()
    assert set(data.input) <= {"0", "1", "_"}


def test_glitch_lengths(tmp_path):
    data = check_written(figure_glitch_lengths(tiny, n=16), tmp_path, ["08_glitch_dependency_lengths"])[
        "08_glitch_dependency_lengths"].data
    reads = read_table(load_split("sparse", 16), np.zeros((16, 512), dtype=int))
    assert data.n_reads.sum() == len(reads) and np.isclose(data.share_of_reads.sum(), 1.0)
    assert (data.ignores_since % flipflop.GLITCH_BIN == 0).all()
    if data.n_errors.sum():
        assert np.isclose(data.share_of_errors.sum(), 1.0)


def test_glitch_lengths_without_wrong_reads(tmp_path):
    tokens = load_split("sparse", 8)
    truth = np.roll(tokens, -1, axis=1)                  # every read predicts the bit that follows it
    figure = glitch_lengths_figure(read_table(tokens, truth), "perfect", "sparse")
    check_written([figure], tmp_path, ["08_glitch_dependency_lengths"])
    assert figure.data.n_errors.sum() == 0 and figure.data.share_of_errors.isna().all()
    assert "No read" in figure.caption
    assert "no wrong read" in figure.draw("plotly").layout.title.text


def test_glitch_lengths_trend_names_the_higher_rate():
    reads = pd.DataFrame({"seq": 0, "ignores_since": [0] * 100 + [80] * 100,
                          "correct": [True] * 99 + [False] + [True] * 50 + [False] * 50})
    figure = glitch_lengths_figure(reads, "m", "sparse")
    assert "1.0% (95% CI 0.2-5.4%) of 100 reads" in figure.caption
    assert "50.0% (95% CI 40.4-59.6%) of 100: long dependencies fail more often" in figure.caption
    assert "at most 98.0% in one (80-95 ignores; all reads put 50.0% there)" in figure.caption
    assert [ax.get_ylabel() for ax in figure.draw("matplotlib").axes] == ["share of the reads", "wrong / reads in bin"]
    even = glitch_lengths_figure(reads.assign(correct=[True] * 90 + [False] * 10 + [True] * 88 + [False] * 12),
                                 "m", "sparse")
    assert "not distinguishable" in even.caption


def test_glitch_anatomy(tmp_path):
    found = check_written(anatomy.figure_glitch_anatomy(tiny, n=4, max_wrong=3, models=("rope-mech", "tra-mech")),
                          tmp_path, ["12a_glitch_attention", "12b_glitch_logit_split"])
    destinations = found["12a_glitch_attention"].data
    assert set(destinations.model) == {"rope-mech", "tra-mech"} and set(destinations.split) == {"sparse", "dense"}
    per_group = destinations.groupby(["model", "split", "reads"])
    assert (per_group["count"].sum() == per_group.n.first()).all() and (destinations.n_sequences <= 4).all()
    assert (destinations.share_low <= destinations.share).all() and (destinations.share <= destinations.share_high).all()
    terms = found["12b_glitch_logit_split"].data
    assert {"rope-mech", "tra-mech", "fot-mech"} <= set(terms.model)
    assert set(terms.metric) == {"losing_term", "content_margin", "position_margin", "margin"}


@pytest.mark.parametrize("name", ["rope-mech", "fot-mech", "tra-mech"])
def test_logit_terms_add_up_to_the_logits(name):
    model = tiny(name)
    tokens = load_split("iid", 2, seq_len=32)
    _, maps = capture_maps(model, tokens, [*anatomy.SPLIT_HOOKS[model.cfg.model], "attn_logits"])
    content, position, allowed = anatomy.logit_terms(model, maps, 1)
    logits = maps["attn_logits"][1]
    keep = allowed & torch.ones(32, 32, dtype=torch.bool).tril()
    assert keep.any() and torch.allclose((content + position)[keep], logits[keep], atol=1e-5)


def test_drift_sequences():
    sequences = drift_sequences((8, 16, 32))
    for tokens in sequences:
        validate(format_sequence(tokens[0]))
        reads = read_table(tokens, tokens)
        assert len(reads) == 1 and reads.dependency_length[0] == tokens.shape[1] - 2
    longest = sequences[-1][0]
    assert all((s[0, :-2] == longest[:s.shape[1] - 2]).all() for s in sequences), "more ignores, same prefix"
    with pytest.raises(ValueError, match="even"):
        drift_sequences((7,))


def test_drift(tmp_path):
    found = check_written(figure_drift(tiny, lengths=(16, 64), stride=8, n=3), tmp_path,
                          ["09a_drift_last_write", "09b_drift_automaton"])
    summary = found["09a_drift_last_write"].data
    assert len(summary) == 2 * 2 and (summary.n == 3).all()            # (rope, tra) x lengths, 3 sequences each
    assert summary["mean"].between(0, 1).all() and (summary.right_low <= summary.right).all()
    drift = flipflop.last_write_drift(tiny, lengths=(16, 64), n=2)
    assert len(drift) == 2 * 2 * 2 * 2                   # (rope, tra) x lengths x sequences x layers
    assert sorted(drift.seq_len.unique()) == [16, 64] and (drift.dependency_length == drift.seq_len - 2).all()
    assert (drift[drift.layer == 0].n_carriers == 1).all()              # the write's bit; the read's comes after
    assert (drift.n_carriers >= 1).all() and drift.carrier_weight.between(0, 1).all()
    best = flipflop.drift_summary(drift)
    final = drift[drift.layer == 1].groupby(["model", "seq_len"]).carrier_weight.mean()
    assert np.allclose(best.set_index(["model", "seq_len"])["mean"].sort_index(), final.sort_index())  # one head
    automaton = found["09b_drift_automaton"].data
    assert automaton.model.value_counts().to_dict() == {"automaton-1l": 64, "automaton-1l-sharp": 64}
    assert (automaton.write_pos == np.where(automaton.position >= flipflop.AUTOMATON_SECOND_WRITE,
                                            flipflop.AUTOMATON_SECOND_WRITE, 0)).all()


def test_cope_gates(tmp_path):
    figure = check_written(figure_cope_gates(tiny), tmp_path, ["10_cope_gates_positions"])["10_cope_gates_positions"]
    data = figure.data
    labels = [ax.get_ylabel() for ax in figure.draw("matplotlib").axes]
    assert {"gate g", "contextual position p"} <= set(labels), "each colour bar says what it measures"
    assert len(data) == 2 * 5 and set(data.key_token) == {"w", "r", "i", "0", "1"}
    assert data.value.between(0, 1).all()


def fake_table1(path):
    results = [{"model": model, "seed": seed,
                "splits": {split: {"sequence_accuracy": 0.5 + 0.1 * seed, "error_rate": 0.01} for split in SPLITS}}
               for model in ("tra", "lstm") for seed in range(2)]
    summarise_runs(results).to_csv(path, index=False)
    return path


def test_table1(tmp_path):
    figure = check_written(figure_table1(fake_table1(tmp_path / "table1.csv")), tmp_path, ["11_table1_accuracy"])[
        "11_table1_accuracy"]
    bars = figure.draw("plotly").data
    assert len(bars) == 2 * 3                            # (ours, paper) x splits
    assert np.allclose(bars[0].y, [55.0, 55.0]) and np.isnan(bars[1].y[1]), "no paper bar for the LSTM"
    pd.DataFrame({"model": ["tra"]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="accuracy_mean"):
        figure_table1(tmp_path / "bad.csv")


def test_missing_hook_names_model_and_hook(tmp_path):
    with pytest.raises(MissingHookError, match=r"rope model has no blocks\.\*\.attn\.hook_view_1"):
        figure_tda_inhibition(lambda name: tiny("rope-mech"))


def test_make_figures_merges_captions_and_skips_table1(tmp_path, capsys):
    make_figures(tmp_path, ["automaton"], load=tiny)
    written = make_figures(tmp_path, ["tda_inhibition", "table1"], load=tiny)
    assert list(written) == ["03_tda_inhibition"]
    assert "table1: skipped, no --table1 CSV given" in capsys.readouterr().out
    captions = json.loads((tmp_path / "captions.json").read_text())
    assert list(captions) == ["03_tda_inhibition", "07_automaton_attention"]
    index = (tmp_path / "index.md").read_text()
    for stem, caption in captions.items():
        assert f"## {stem}: {figures.TITLES[stem]}" in index and f"![{stem}]({stem}.png)" in index and caption in index
    with pytest.raises(ValueError, match="unknown figures"):
        make_figures(tmp_path, ["fig99"], load=tiny)


@pytest.mark.integration
def test_cli_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models, "load_pretrained", tiny)
    csv = fake_table1(tmp_path / "table1.csv")
    out = str(tmp_path / "out")
    assert main(["figures", "--out", out, "--only", "cope_gates", "table1", "--table1", str(csv)]) == 0
    printed, err = capsys.readouterr()
    assert "wrote 2 figures" in printed
    assert "figures:" in err and "drawing table1" in err and "2/2 [" in err, "a bar over the figures on stderr"
    assert main(["figures", "--out", out, "--only", "table1", "--table1", str(csv), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == [
        "10_cope_gates_positions.png", "11_table1_accuracy.png"]
    assert main(["figures", "--out", out, "--only", "nope"]) == 2
    assert "unknown figures ['nope']" in capsys.readouterr().err


# --- the metrics added for the figures ---------------------------------------------------------

def test_inhibition_known_answer():
    a = torch.tensor([[1.0, 9.0], [-1.0, 3.0]])[None, None]       # 9 sits above the diagonal: ignored
    frame = inhibition(a).set_index("metric").value
    assert frame["inhibitory_fraction"] == pytest.approx(1 / 3) and frame["inhibitory_mass"] == pytest.approx(0.2)
    assert np.isnan(inhibition(torch.zeros(1, 1, 2, 2)).set_index("metric").value["inhibitory_mass"])


def test_automaton_write_attention_known_answer():
    inputs = np.array([[2, 1, 2, 0]])                    # bottom, sigma_1, bottom, sigma_0
    a = torch.zeros(1, 1, 4, 4)
    a[0, 0, 1, 1] = a[0, 0, 2, 1] = 1.0                  # positions 1, 2 attend to the write at 1
    a[0, 0, 3, :] = 0.25                                 # position 3: uniform, not an argmax
    frame = automaton_write_attention(a, inputs)
    assert frame.write_pos.tolist() == [-1, 1, 1, 3]
    assert np.isnan(frame.weight[0]) and frame.weight[1:].tolist() == [1.0, 1.0, 0.25]
    assert frame.is_argmax.tolist() == [False, True, True, False]


def test_automaton_heatmap_outlines_each_positions_last_write():
    inputs = np.array([1, 2, 0, 2])                      # sigma_1, bottom, sigma_0, bottom
    fig = plots.automaton_heatmap_grid({"a": torch.rand(4, 4).tril()}, inputs, wrong=[3])
    marks = fig.data[-1]
    assert list(zip(marks.y, marks.x)) == [("0:1", "0:1"), ("1:_", "0:1"), ("2:0", "2:0"), ("3:_", "2:0")]
    assert list(marks.marker.color) == [plots.IDEAL_COLOR] * 3 + [plots.WRONG_COLOR]
    assert plots.automaton_heatmap_grid({"a": torch.eye(4)}, inputs, backend="matplotlib").axes


def test_mean_by_key_token_known_answer():
    tokens = parse_sequence("w1r1")[None]                # keys: w, 1, r, 1
    a = torch.arange(16.0).reshape(1, 1, 4, 4)
    means = mean_by_key_token(a, tokens).set_index("key_token").value
    # key 1 (the bit '1' at position 1) is seen by queries 1-3: (5 + 9 + 13) / 3, plus position 3 itself (15)
    assert means["w"] == pytest.approx((0 + 4 + 8 + 12) / 4) and means["r"] == pytest.approx((10 + 14) / 2)
    assert means["1"] == pytest.approx((5 + 9 + 13 + 15) / 4) and np.isnan(means["i"])

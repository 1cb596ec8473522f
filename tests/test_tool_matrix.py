"""Every tool on every architecture: ``explain`` (with direct logit attribution by head and
neuron), activation and path patching, ``hunt``, the retrieval probes and the head viewer, each
run on a tiny untrained model of every built-in model name and of a mechanism of one's own
(``tests/plugin_mechanisms.py``); ``diagnose`` on the LSTM, TDA and that mechanism (every
built-in name: ``tests/test_diagnose.py``). A tool either gives its results or says, in words,
why an analysis does not apply (at the top of its report, and on stderr from the command line);
no hook it lists is one that never fires, and one that never fires is named as such. The
mechanisms that the shipped specimens train with a renormalised stream are built so here
(``norm_placement="stream"``), so that attribution is checked through the norms. The reports
are written without their PNGs (:func:`no_png`). The figures are not in the matrix: each runs the
papers' fixed sequences (hundreds to thousands of tokens), seconds to a minute per figure even on
a tiny model (``tests/test_figures.py``)."""

import functools
import html
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from plugin_mechanisms import SigmoidAttention

import models
import models.pretrained
from interp import circuits, plots
from interp.cli import main
from interp.diagnose import diagnose
from interp.explain import explain
from interp.hunt import hunt, write_hunt
from interp.metrics import (
    MissingHookError, bit_carrier_attention, capture_maps, last_write_attention, mean_by_key_token, read_table,
)
from interp.tasks import ONE, ZERO
from interp.viewer import head_viewer
from models import ModelConfig, build_model, mechanisms
from models.attention import REGISTRY
from models.config import MODEL_FAMILIES

PLUGIN = "sigmoid"
BUILT_IN = [name for name in MODEL_FAMILIES if mechanisms.plugin_class(name) is None]
ARCHITECTURES = [*BUILT_IN, PLUGIN]
# As the shipped specimens of these mechanisms: every block renormalises the stream.
STREAM = {"rope", "cope", "diff", "tda", "trela"}
# Whole flip-flop sequences (each read followed by its bit); the models read them without the last bit.
SEQUENCES = ["w1i0r1w0i1r0i1r0", "w0r0i1w1r1i0i0r1"]


@pytest.fixture(scope="module", autouse=True)
def plugin_and_one_thread():
    """The mechanism of one's own is registered for this module only; tiny models gain nothing
    from a second thread on a shared 2-core machine."""
    saved = [(table, dict(table)) for table in (REGISTRY, MODEL_FAMILIES, mechanisms._PLUGINS)]
    models.register_mechanism(PLUGIN, SigmoidAttention)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    for table, content in saved:
        table.clear()
        table.update(content)


@functools.cache
def tiny(name: str):
    torch.manual_seed(0)
    options = {} if name == "lstm" else {"n_heads": 2, "norm_placement": "stream" if name in STREAM else "pre"}
    return build_model(ModelConfig.from_preset(name, "tiny", **options)).eval()


@functools.cache
def full_tokens() -> torch.Tensor:
    return tiny("nope").to_tokens(SEQUENCES)


def has_blocks(name: str) -> bool:
    return hasattr(tiny(name), "blocks")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_hooks_listed_are_the_hooks_that_fire(name):
    model = tiny(name)
    _, cache = model.run_with_cache(full_tokens()[:, :-1])
    assert set(cache.keys()) == set(model.fired_hooks())
    if not has_blocks(name):
        assert circuits.mechanism_hooks(model) == []
        with pytest.raises(ValueError, match="the lstm model has no resid_pre hooks"):
            circuits.patchable_hooks(model)
        return
    kinds = ("resid_pre", "resid_post", "attn_out", "mlp_out", "z", "pattern", "mechanism")
    listed = circuits.patchable_hooks(model, kinds) + circuits.receiver_inputs(model, 1)
    assert all(hook in cache.cache_dict or f"blocks.1.attn.hook_{hook}" in cache.cache_dict for hook in listed)
    for silent in set(model.hook_dict) - set(cache.keys()):
        with pytest.raises(KeyError, match=rf"{silent} never fires on this {name} model|set_use_attn_result\(True\)"):
            cache[silent]
        with pytest.raises(ValueError, match="never fires|set_use_attn_result"):
            circuits.activation_patching(model, full_tokens()[:1, :-1], full_tokens()[1:, :-1], [silent], reads=[14])


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_direct_logit_attribution_adds_up_per_head_and_neuron(name):
    model, tokens = tiny(name), full_tokens()[:, :-1]
    if not has_blocks(name):
        with pytest.raises(ValueError, match="no residual stream"):
            circuits.direct_logit_attribution(model, tokens)
        return
    frame = circuits.direct_logit_attribution(model, tokens, neurons=True)
    logits = model(tokens).detach().double()
    reads = frame.drop_duplicates(["seq", "position"])
    at = logits[torch.tensor(reads.seq.tolist()), torch.tensor(reads.position.tolist())]
    right = torch.tensor(reads.answer.tolist())
    expected = at.gather(1, ZERO + right[:, None])[:, 0] - at.gather(1, ONE - right[:, None])[:, 0]
    totals = frame.groupby(["seq", "position"], sort=False).attribution.sum()
    np.testing.assert_allclose(totals.to_numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert circuits.dla_sum_error(frame) < 1e-5
    kinds = set(frame.kind)
    assert {"embed", "head", "neuron"} <= kinds and "mlp" not in kinds
    assert frame[frame.kind == "neuron"].component.nunique() == model.cfg.n_layers * model.cfg.d_mlp


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_activation_and_path_patching_run_on_every_hook_they_list(name):
    model = tiny(name)
    if not has_blocks(name):
        with pytest.raises(ValueError, match="no heads to patch"):
            circuits.path_patching(model, full_tokens()[:1, :-1], full_tokens()[1:, :-1])
        return
    pairs = circuits.bit_flip_pairs(full_tokens()[:1, :-1])
    hooks = circuits.patchable_hooks(model, ("z", "mlp_out", "mechanism"))
    frame = circuits.activation_patching(model, pairs.clean, pairs.corrupt, hooks, reads=pairs.read)
    assert set(frame.hook) == set(hooks)
    paths = circuits.path_patching(model, pairs.clean, pairs.corrupt, [(0, 0)], [(1, 0)],
                                   inputs=circuits.receiver_inputs(model, 1), reads=pairs.read)
    assert set(paths.input) == set(circuits.receiver_inputs(model, 1))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_hunt_runs(name, tmp_path):
    result = hunt(tiny(name), budget=8, seq_len=16, population=4)
    assert write_hunt(result, tmp_path)["json"].exists()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_probes_and_the_viewer_run(name):
    tokens = full_tokens().numpy()
    if not has_blocks(name):
        with pytest.raises(MissingHookError, match=r"the lstm model has no blocks\.\*\.attn\.hook_pattern"):
            capture_maps(tiny(name), tokens, ["pattern"])
        return
    logits, maps = capture_maps(tiny(name), tokens, ["pattern"])
    reads = read_table(tokens, logits.argmax(-1).numpy() - ZERO)
    assert len(reads) == 6
    pattern = maps["pattern"]
    for table in (last_write_attention(pattern, tokens), bit_carrier_attention(pattern, tokens),
                  mean_by_key_token(pattern, tokens)):
        assert len(table) and set(table.layer) == {0, 1}
    assert len(head_viewer(pattern, tokens).data) > 0


@pytest.fixture
def no_png(monkeypatch):
    """The reports without drawing their PNGs: matplotlib's rendering is most of a tiny model's
    report and the same for every architecture (test_circuits and test_diagnose draw them)."""
    def save(fig, path, **_):
        plt.close(fig)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(plots, "save", save)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_explain_gives_results_or_says_what_it_skipped(name, tmp_path, no_png):
    checkpoint = models.save(tmp_path / name, tiny(name))
    explained = explain(checkpoint, tmp_path / "explained", n=1, pairs=1)
    report, summary = (tmp_path / "explained" / "report.md").read_text(), explained.summary
    top = report.split("Split `dense`")[0]
    for reason in summary["skipped"].values():
        assert reason in top
    if has_blocks(name):
        assert "dla" not in summary["skipped"] and summary["dla_sum_error"] < 1e-5
        assert "## Direct logit attribution" in report and len(summary["neurons"]["glitch"]) == 5
    assert {"carry", "corrupt"} <= set(summary) | set(summary["skipped"]) or not summary["glitches"]


@pytest.mark.parametrize("specimen", ["diff-mech", "rope-mech"])
def test_explain_attributes_through_the_norms_of_the_specimens(specimen, tmp_path, no_png):
    """Both renormalise the stream in every block; the DLA table's components add up to the mean
    logit difference of each kind of read, and every read's to its own."""
    explained = explain(models.pretrained.path(specimen), tmp_path, n=1, pairs=1)
    assert explained.summary["dla_sum_error"] < 1e-4
    table = pd.read_csv(tmp_path / "dla.csv")
    for reads, rows in table.groupby("reads"):
        assert rows.attribution.sum() == pytest.approx(rows.logit_diff.iloc[0], abs=1e-4), reads
    report = (tmp_path / "report.md").read_text()
    assert "## Direct logit attribution" in report and "MLP neurons of largest" in report
    for reason in explained.summary["skipped"].values():
        assert reason in report.split("Split `dense`")[0]


# diagnose on every built-in model name: tests/test_diagnose.py (and the plugin: test_plugin_mechanism.py)
@pytest.mark.parametrize("name", ["lstm", "tda", PLUGIN])
def test_diagnose_opens_its_report_with_what_it_skipped(name, tmp_path, no_png):
    checkpoint = models.save(tmp_path / name, tiny(name))
    diagnosis = diagnose(checkpoint, tmp_path / "diagnosis", splits=("iid",), n=2, lengths=(16, 32),
                         heatmap_tokens=16)
    page = (tmp_path / "diagnosis" / "report.html").read_text()
    evaluation = page.index("Glitch rate (wrong reads")
    skipped = diagnosis.metrics["skipped"]
    assert bool(skipped) == (name != "tda") == ("do not apply to this model" in page)   # TDA has every part
    for reason in skipped.values():
        assert -1 < page.find(html.escape(reason)) < evaluation, reason


@pytest.mark.integration
def test_the_command_line_prints_what_explain_skipped(tmp_path, capsys):
    checkpoint = models.save(tmp_path / "lstm", tiny("lstm"))
    assert main(["explain", str(checkpoint), "-n", "1", "--pairs", "1", "--out", str(tmp_path / "out"),
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    for analysis in ("direct logit attribution", "which components carry the bit"):
        assert f"skipped {analysis}: the lstm model has no heads or residual stream" in err

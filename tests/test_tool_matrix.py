"""Every tool on every architecture: ``explain`` (with direct logit attribution by head and
neuron), activation and path patching, ``hunt``, the retrieval probes and the head viewer, each
run on a tiny untrained model of every built-in model name and of a mechanism of one's own
(``tests/plugin_mechanisms.py``); ``diagnose`` on the LSTM, TDA and that mechanism (every
built-in name: ``tests/test_diagnose.py``). A tool either gives its results or says, in words,
why an analysis does not apply (at the top of its report, and on stderr from the command line);
no hook it lists is one that never fires, and one that never fires is named as such. The
mechanisms that the shipped specimens train with a renormalised stream are built so here
(``norm_placement="stream"``), so that attribution is checked through the norms. explain's
reports and the figures are written without their PNGs (:func:`no_png`; diagnose draws none unless
asked). Every plot of :mod:`interp.plots` draws on each model's maps and metrics, or the library
refuses the map the model does not have; every paper figure draws through
:func:`~interp.figures.make_figures` on tiny models of its specimens' architectures, its sequence
counts and lengths cut down (``SMALL_FIGURES``; the figures' own checks: ``tests/test_figures.py``)."""

import functools
import html
import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from plugin_mechanisms import SigmoidAttention

import models
import models.pretrained
from interp import circuits, figures, plots
from interp.cli import main
from interp.diagnose import diagnose
from interp.explain import explain
from interp.hunt import hunt, write_hunt
from interp.studies.reproduce import summarise_runs
from interp.tasks import SPLITS, get_task
from interp.metrics import (
    MissingHookError, bit_carrier_attention, capture_maps, cross_view_correlation, dispersion, error_rate_by_dependency,
    last_write_attention, max_abs_weight, mean_by_key_token, raw_logits, read_table, sink_ratio, sparsity,
    survivor_scaling, tail_probabilities,
)
from interp.tasks import ONE, ZERO
from interp.viewer import head_viewer
from models import ModelConfig, build_model, mechanisms
from models.mechanisms import MODEL_FAMILIES
from support import registries_kept

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
    with registries_kept():
        models.register_mechanism(PLUGIN, SigmoidAttention)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)


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


# --- the circuit tools on every task: each shipped specimen (flip-flop and the automaton), models
# of the CoPE tasks trained here, and the parity task of tests/plugin_tasks.py ------------------

# Tasks with no shipped specimen: (task, model name, layers) of a model trained here for 2 steps.
TRAINED_HERE = {"counting": ("counting", "cope", 1), "selective-copy": ("selective-copy", "rope", 2),
                "parity": ("plugin_tasks:ParityTask", "rope", 2)}
TASK_MODELS = [*models.pretrained.built(), *TRAINED_HERE]


@pytest.fixture(scope="module")
def task_model(tmp_path_factory):
    """``task_model(name)``: a shipped specimen, or a model of ``TRAINED_HERE`` trained through the
    command line and loaded from its checkpoint, as a user would; the task of one's own is
    registered for this module only."""
    from interp.tasks import registry

    get_task("flipflop")   # the built-in tasks are registered before the snapshot
    saved = dict(registry._TASKS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(registry.ENVIRONMENT_VARIABLE, "")

        @functools.cache
        def load(name: str):
            if name not in TRAINED_HERE:
                return models.load_pretrained(name)
            task, model, layers = TRAINED_HERE[name]
            checkpoint = tmp_path_factory.mktemp(name) / "model"
            assert main(["train", "--task", task, "--model", model, "--steps", "2", "--batch-size", "2",
                         "--n-layers", str(layers), "--d-model", "16", "--n-heads", "2", "--eval-n", "1",
                         "--out", str(checkpoint), "--quiet"]) == 0
            return models.load(checkpoint)

        yield load
    registry._TASKS.clear()
    registry._TASKS.update(saved)


def scored_inputs(task, n: int = 3) -> np.ndarray:
    """The first ``n`` sequences of the task's first split as the model reads them, cut 48 tokens
    after the first position any of them is scored at."""
    inputs = task.model_io(task.load_split(next(iter(task.splits)), n))[0]
    first = int(np.flatnonzero(task.scored_answers(inputs)[0].any(0))[0])
    return np.array(inputs[:, :first + 48])


@pytest.mark.parametrize("name", TASK_MODELS)
def test_the_circuit_tools_run_on_every_task(name, task_model):
    """DLA per head and neuron adds up to the task's margin within 1e-4; activation patching and
    attribution patching cover every hook of the streams, heads, maps and mechanism on the task's
    own pairs (its counterfactual, or resampled partners); path patching runs between layers, and
    is refused, saying why, on a model of one layer."""
    model = task_model(name)
    task = circuits.resolve_task(model)
    assert task.name == {"counting": "counting", "selective-copy": "selective-copy", "parity": "parity"}.get(
        name, model.trained_task)
    tokens = scored_inputs(task)
    frame = circuits.direct_logit_attribution(model, tokens, neurons=True)
    rows = frame.drop_duplicates(["seq", "position"])
    logits = model(torch.from_numpy(tokens).long()).detach()
    scored = circuits.Scored(torch.from_numpy(tokens), torch.tensor(rows.position.tolist()),
                             torch.tensor(rows.target.tolist()), task)
    margin = circuits.margin(logits[torch.tensor(rows.seq.tolist())], scored)
    np.testing.assert_allclose(rows.logit_diff, margin.double(), atol=1e-4)
    assert circuits.dla_sum_error(frame) < 1e-4 and len(rows) == task.scored_answers(tokens)[0].sum()
    pairs = circuits.task_pairs(task, tokens)
    clean, corrupt, reads = pairs.clean[:2], pairs.corrupt[:2], pairs.read[:2]
    hooks = circuits.patchable_hooks(model, circuits.ATTRIBUTION_KINDS)
    patched = circuits.activation_patching(model, clean, corrupt, hooks, reads=reads)
    estimated = circuits.attribution_patching(model, clean, corrupt, hooks, reads=reads)
    table = circuits.compare_attribution(estimated, patched)
    assert set(table.hook) == set(hooks) and len(table) == len(estimated) // len(reads)
    if model.cfg.n_layers == 1:
        with pytest.raises(ValueError, match="no sender sits in a layer before a receiver"):
            circuits.path_patching(model, clean, corrupt, reads=reads)
        return
    paths = circuits.path_patching(model, clean, corrupt, [(0, 0)], [(1, model.cfg.n_heads - 1)],
                                   inputs=circuits.receiver_inputs(model, 1), reads=reads)
    assert set(paths.input) == set(circuits.receiver_inputs(model, 1)) and paths.patched.notna().all()


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
        if isinstance(fig, plt.Figure):
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
def test_diagnose_opens_its_report_with_what_it_skipped(name, tmp_path):
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


# --- every plotting function of interp.plots, on the maps and metrics of each tiny model -------

def both_backends(draw) -> None:
    """Draw with plotly and matplotlib, writing nothing (a drawn figure is all a test needs)."""
    for backend in ("plotly", "matplotlib"):
        figure = draw(backend)
        assert figure is not None
        if isinstance(figure, plt.Figure):
            plt.close(figure)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_plot_draws_or_the_library_says_why_not(name):
    """Every public plot of :mod:`interp.plots` (the model-free table1 chart aside: the figures'
    test below draws it) on this model's maps and metrics; the maps a model does not have are
    refused by :func:`capture_maps`, naming the model and the hook, so a plot never draws a
    quantity that is not there (TDA's two views on a one-view or softmax model, any map of the
    LSTM)."""
    model, whole = tiny(name), full_tokens().numpy()
    tokens = whole[:, :-1]
    if not has_blocks(name):
        with pytest.raises(MissingHookError, match=r"the lstm model has no blocks\.\*\.attn\.hook_pattern"):
            capture_maps(model, tokens, ["pattern"])
        return
    logits, maps = capture_maps(model, tokens, ["pattern", "q", "k"])
    pattern, labels = maps["pattern"], tokens[0]
    panels = plots.layer_head_panels(pattern)
    longer = capture_maps(model, np.concatenate([tokens, tokens], 1), ["pattern"])[1]["pattern"]
    reads = read_table(whole, logits.argmax(-1).numpy() - ZERO)
    attribution = circuits.direct_logit_attribution(model, full_tokens()[:, :-1])
    pairs = circuits.bit_flip_pairs(full_tokens()[:1, :-1])
    patched = circuits.activation_patching(model, pairs.clean, pairs.corrupt, circuits.patchable_hooks(model, ("z",)),
                                           reads=pairs.read)
    tails = tail_probabilities({layer: raw_logits(q, maps["k"][layer]) for layer, q in maps["q"].items()})
    draws = [
        lambda b: plots.heatmap(panels["L0 H0"], labels, title="L0 H0", backend=b),
        lambda b: plots.heatmap_grid(panels, labels, backend=b),
        lambda b: plots.attention_grid(pattern, labels, backend=b),
        lambda b: plots.compare(panels, panels, labels, names=(name, name), backend=b),
        lambda b: plots.task_heatmap_grid(panels, get_task("flipflop"), labels, backend=b),
        lambda b: plots.automaton_heatmap_grid(panels, np.arange(tokens.shape[1]) % 3, backend=b),
        lambda b: plots.patching_heatmap(circuits.patching_summary(patched), backend=b),
        lambda b: plots.sparsity_chart(sparsity(pattern), backend=b),
        lambda b: plots.max_abs_chart(max_abs_weight(pattern), backend=b),
        lambda b: plots.sink_ratio_chart(pd.concat([sink_ratio(pattern, [0]), sink_ratio(longer, [0])]), backend=b),
        lambda b: plots.survivor_chart(survivor_scaling([pattern, longer]), backend=b),
        lambda b: plots.dispersion_chart(dispersion(pattern), backend=b),
        lambda b: plots.tail_chart(tails, backend=b),
        lambda b: plots.error_rate_chart(error_rate_by_dependency(reads).assign(model=name), backend=b),
        lambda b: plots.dla_chart(circuits.dla_summary(attribution), backend=b),
    ]
    for draw in draws:
        both_backends(draw)
    views = [hook for hook in ("view_1", "view_2") if f"blocks.0.attn.hook_{hook}" in model.hook_dict]
    if len(views) < 2:
        missing = "view_2" if views else "view_1"
        with pytest.raises(MissingHookError, match=rf"the {name} model has no blocks\.\*\.attn\.hook_{missing}"):
            capture_maps(model, tokens, ["view_1", "view_2"])
        with pytest.raises(ValueError, match="the frame has no 'cross_view_correlation' rows"):
            plots.correlation_chart(sparsity(pattern))
        return
    _, views = capture_maps(model, tokens, ["view_1", "view_2"])
    both_backends(lambda b: plots.correlation_chart(cross_view_correlation(views["view_1"], views["view_2"]),
                                                    backend=b))


# --- every paper figure, on tiny models of its specimens' architectures -----------------------

# The figures' sequence counts and lengths, cut to what a tiny model shows in a second (the
# defaults draw the committed figures); the figures without such arguments run N_SEQUENCES = 4
# sequences of T = 512, already small.
SMALL_FIGURES = {
    "tda_diagnostics": dict(lengths=(16, 32), n_samples=2),
    "survivors": dict(lengths=(16, 32), n=2),
    "cross_view": dict(n_samples=2),
    "non_dispersion": dict(lengths=(16, 32), n=1),
    "automaton": dict(size=16),
    "glitch_lengths": dict(n=4),
    "drift": dict(lengths=(16, 64), stride=8, n=2),
    "glitch_anatomy": dict(n=4, max_wrong=4),
    "cope_gates": dict(n=2),
}


@functools.cache
def tiny_specimen(name: str) -> torch.nn.Module:
    """A freshly built model of the architecture ``models/pretrained/<name>/config.json`` names
    (mechanism, its options, norm placement, layers and heads), at d_model 32."""
    saved = json.loads((models.pretrained.path(name) / "config.json").read_text())["model"]
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict({**saved, "d_model": 32, "d_mlp": 64})).eval()


def test_every_paper_figure_draws_on_tiny_models_of_its_specimens(tmp_path, monkeypatch, no_png):
    for name, sizes in SMALL_FIGURES.items():
        monkeypatch.setitem(figures.FIGURES, name, functools.partial(figures.FIGURES[name], **sizes))
    table1 = tmp_path / "table1.csv"
    summarise_runs([{"model": "tra", "seed": 0, "splits": {split: {"sequence_accuracy": 0.5, "error_rate": 0.01}
                                                            for split in SPLITS}}]).to_csv(table1, index=False)
    written = figures.make_figures(tmp_path / "figures", load=tiny_specimen, table1_csv=table1, log=lambda _: None,
                                   progress=False)
    assert set(written) == set(figures.TITLES)
    captions = json.loads((tmp_path / "figures" / "captions.json").read_text())
    for stem, (_, _, csv) in written.items():
        assert figures.CAPTIONS[stem](pd.read_csv(csv)) == captions[stem]


# --- probes, diagnose, explain and the glitch browser on every task ------------------------------

@pytest.fixture(scope="module")
def task_checkpoint(task_model, tmp_path_factory):
    """``task_checkpoint(name)``: the checkpoint of ``task_model(name)``: a shipped specimen's own,
    or the model trained here saved again (with its task) for the tools that take a checkpoint."""
    @functools.cache
    def path(name: str) -> Path:
        if name not in TRAINED_HERE:
            return models.pretrained.path(name)
        model = task_model(name)
        return models.save(tmp_path_factory.mktemp(f"{name}-checkpoint") / "model", model,
                           training={"config": {"task": model.trained_task}, "step": 0})

    return path


@pytest.mark.integration
@pytest.mark.parametrize("name", TASK_MODELS)
def test_probes_diagnose_explain_and_the_browser_run_on_every_task(name, task_model, task_checkpoint, tmp_path,
                                                                    no_png):
    """Linear probes of the task's label at every layer (the store spilled to disk), the diagnosis
    with its glitch browser, and explain, each on the task the model records and its own data."""
    from interp.diagnose.browser import LISTED
    from interp.metrics.store import cache_activations, linear_probes, probe_labels

    model = task_model(name)
    task = circuits.resolve_task(model)
    split = next(s for s, info in task.splits.items() if info.in_distribution)
    inputs, labels, where, meaning = probe_labels(task, task.load_split(split, 10))
    with cache_activations(model, inputs, where, max_bytes=1 << 12, spill_dir=tmp_path) as store:
        assert store.spilled_to is not None
        probes = linear_probes(store, labels, meaning)
    assert probes.layer.tolist() == list(range(model.cfg.n_layers + 1)) and (probes.label == meaning).all()
    assert ((probes.low <= probes.accuracy) & (probes.accuracy <= probes.high)).all()

    diagnosis = diagnose(task_checkpoint(name), tmp_path / "diagnosis", n=2, lengths=(64,), n_cache_sequences=1)
    page = diagnosis.files["browser"].read_text()
    data = json.loads(re.search(r"id='data'>(.*?)</script>", page, re.S)[1])
    assert set(data["splits"]) == set(task.splits) and all(
        sum(g["split"] == s for g in data["glitches"]) == min(n, LISTED) for s, n in data["splits"].items())
    assert all(set(g["tokens"]) <= set(task.vocab) and g["maps"]["pattern"] for g in data["glitches"] if "maps" in g)
    if task.name != "flipflop":
        m = diagnosis.metrics
        assert m["task"] == task.name and len(m["probes"]) == model.cfg.n_layers + 1
        assert m["at_glitch"] is not None or "glitch" in m["skipped"]

    explained = explain(task_checkpoint(name), tmp_path / "explained", n=2, pairs=1)
    assert explained.summary.get("task", "flipflop") == task.name
    assert explained.summary["split"] in task.splits and explained.summary["dla_sum_error"] < 1e-4

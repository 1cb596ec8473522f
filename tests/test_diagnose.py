"""``glitchlens diagnose`` end to end on a freshly initialised ``tiny`` checkpoint of every model
kind (nothing is trained: the report's plumbing does not depend on the weights), the files
it writes, the CLI, and the report loaded in a real headless Chromium."""

import base64
import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import interp.diagnose.summary
import models
from interp.cli import main
from interp.diagnose import ATTENTION_FIELDS, FIELDS, diagnose
from interp.evaluate import evaluate_splits
from interp.outputs import MANIFEST
from interp.metrics import (
    bit_carrier_attention, bit_carrier_summary, cache_maps, max_abs_weight, sink_ratio, summarise, survivor_counts,
)
from interp.tasks import load_split
from support import chromium, needs_chromium

N = 3                     # sequences per split
LENGTHS = (32, 64)        # the probe length is 64, the one closest to 512
PNGS = ("attention_final_layer", "error_by_dependency", "sparsity", "sink_ratio", "survivors")
DRAWN_AS_PNG = "rope"     # the one model diagnosed with png=True: the others write no PNG
TWO_VIEWS = next((name for name in ("tda", "diff") if name in models.MODEL_NAMES), "rope")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and on a shared 2-core machine the
    threads' synchronisation costs more than the forward pass itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def save_tiny(root: Path, name: str) -> Path:
    torch.manual_seed(0)
    return models.save(root / name, models.build_model(models.ModelConfig.from_preset(name, "tiny")))


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    """``diagnosed(name)``: the checkpoint and its Diagnosis, computed once per module."""
    done = {}

    def get(name):
        if name not in done:
            root = tmp_path_factory.mktemp(name)
            path = save_tiny(root, name)
            lengths = (*LENGTHS, 1024) if name == "ape" else LENGTHS   # APE cannot go past n_ctx = 512
            done[name] = path, diagnose(path, root / "out", n=N, lengths=lengths, probe_sequences=N + 2,
                                        png=name == DRAWN_AS_PNG)
        return done[name]

    return get


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_diagnose_writes_every_documented_field_and_file(diagnosed, name):
    path, result = diagnosed(name)
    metrics = json.loads(result.files["metrics_json"].read_text())      # strict JSON: no NaN
    assert tuple(metrics) == FIELDS and metrics == result.metrics
    for field in FIELDS:
        assert f"``{field}``" in interp.diagnose.summary.__doc__, f"{field} is not documented"
    assert sorted(metrics["files"].values()) == sorted(p.name for p in result.out_dir.iterdir() if p.name != MANIFEST)

    # The evaluation is the evaluator's, and the glitch table lists exactly its wrong reads.
    expected = evaluate_splits(models.load(path), n=N)
    assert metrics["evaluation"] == {split: pytest.approx(r.to_dict()) for split, r in expected.items()}
    glitches = pd.read_csv(result.files["glitches_csv"])
    assert len(glitches) == metrics["glitches"]["total"] == sum(r.read_errors for r in expected.values())
    assert list(glitches.columns[:3]) == ["split", "seq", "position"] and (glitches.true_bit != glitches.pred_bit).all()
    assert (glitches.position % 2 == 0).all() and (glitches.dependency_length >= 2).all()
    frame = pd.read_csv(result.files["metrics_csv"])
    assert {"layer", "head", "metric", "value", "map", "seq_len"} <= set(frame.columns)
    reads = frame[frame.metric == "error_rate"].groupby("split").n_reads.sum()
    assert reads.to_dict() == {split: r.reads for split, r in expected.items()}

    html_text = result.files["report"].read_text()
    assert not re.search(r"<script[^>]*\bsrc=", html_text)        # self-contained: plotly.js in the payload, once
    assert report_payload(html_text).count("plotly.js v") == 1
    for field in FIELDS:
        if metrics[field] is None:
            assert metrics["skipped"][field], f"{field} is null without a reason"
    betas = [block.attn.beta.item() for block in models.load(path).blocks] if name in ("tda", "trela") else None
    assert metrics["threshold_beta"] == betas

    if name == "lstm":
        assert all(metrics[field] is None for field in ATTENTION_FIELDS)
        assert "no attention" in metrics["skipped"]["sparsity"]
        assert sorted(metrics["files"]) == ["browser", "glitches_csv", "metrics_csv", "metrics_json", "report"]
        return
    probes = pd.read_csv(result.files["probes_csv"])     # the current bit at every layer
    assert probes.layer.tolist() == list(range(models.load(path).cfg.n_layers + 1))
    pd.testing.assert_frame_equal(pd.DataFrame(metrics["linear_probes"]["per_layer"]), probes)
    assert "Linear probes of the current bit" in html_text
    assert {png for png in PNGS if png in result.files} == (set(PNGS) if name == DRAWN_AS_PNG else set())
    for png in PNGS:
        if name == DRAWN_AS_PNG:
            assert result.files[png].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "All layers and heads" in html_text
    cfg = models.load(path).cfg
    assert metrics["lengths"]["run"] == list(LENGTHS) and metrics["lengths"]["probe"] == 64
    views = [m for m in metrics["maps"] if m.startswith("view_")]
    assert metrics["maps"] == ["pattern", *views] and ("views" in metrics["skipped"]) == (not views)
    assert (metrics["cross_view_correlation"] is None) == (len(views) < 2)
    for T in ("32", "64"):
        for metric in ("sparsity", "survivors", "max_abs_weight", "effective_entropy", "dispersion_ratio"):
            assert len(metrics[metric]["pattern"][T]["per_layer"]) == cfg.n_layers
        assert set(metrics["gsink_ratio"][T]) == {"0", "1", "2", "3"}
    for view in views:
        assert set(metrics["sparsity"][view]) == {"64"}
    if len(views) >= 2:
        assert all(-1 <= r <= 1 for r in metrics["cross_view_correlation"]["64"]["per_layer"] if r is not None)
    tails = metrics["tail_probabilities"]["64"]
    assert [tails[k]["gaussian"] for k in ("2", "3", "4")] == pytest.approx([0.0455, 0.0027, 6.33e-5], rel=0.01)
    for probe in ("bit_carrier", "last_write"):
        assert [r["layer"] for r in metrics[probe]["per_layer"]] == list(range(cfg.n_layers))
        assert all(0 <= r["argmax_rate"] <= 1 for r in metrics[probe]["per_layer"])
    start, stop = metrics["heatmap"]["window"]
    assert 0 <= start < stop <= 64 and all(p % 2 == 0 for p in metrics["heatmap"]["wrong_reads"])
    if cfg.attention == "softmax":     # dense: every causal key survives, none is exactly 0
        for T in (32, 64):
            assert metrics["sparsity"]["pattern"][str(T)]["overall"] == 0.0
            assert metrics["survivors"]["pattern"][str(T)]["overall"] == pytest.approx((T + 1) / 2)
            assert 0 < metrics["dispersion_ratio"]["pattern"][str(T)]["overall"] <= 1
        assert metrics["survivor_scaling"]["64"]["growth"] == pytest.approx(65 / 33)
    if name == "ape":
        assert "512" in metrics["lengths"]["skipped"]["1024"]


ROUNDING = {"rel": 1e-4, "abs": 1e-7}   # float32 paths that differ in their rounding alone


def test_streamed_metrics_match_a_full_cache(diagnosed):
    """diagnose reduces each layer's maps as they come out of the forward pass; the numbers
    must be those of interp.metrics on a plain run_with_cache, up to float rounding (the capture
    hooks the maps alone, so the norms and MLPs run their native passes: tests/test_native.py)."""
    path, result = diagnosed(TWO_VIEWS)
    model = models.load(path)
    for T in LENGTHS:
        _, cache = model.run_with_cache(torch.as_tensor(load_split("iid", 2, seq_len=T).astype(np.int64)))
        pattern = cache_maps(cache)
        sinks = summarise(sink_ratio(pattern, [0]).query("metric == 'gsink_ratio'"), over=("layer", "head"))
        assert result.metrics["gsink_ratio"][str(T)]["0"] == pytest.approx(sinks.value.item(), **ROUNDING)
        survivors = summarise(survivor_counts(pattern)).value.tolist()
        assert result.metrics["survivors"]["pattern"][str(T)]["per_layer"] == pytest.approx(survivors, **ROUNDING)
    for view in result.metrics["maps"][1:]:
        top = summarise(max_abs_weight(cache_maps(cache, view), name=view), how="max").value.tolist()
        assert result.metrics["max_abs_weight"][view]["64"]["per_layer"] == pytest.approx(top, **ROUNDING)
    # The bit carriers, handed from layer to layer as the maps stream past, are those of all the maps at once.
    carriers = bit_carrier_summary(bit_carrier_attention(pattern, load_split("iid", 2, seq_len=64)))
    streamed = result.frame[result.frame.metric.str.startswith("bit_carrier")]
    assert streamed.value.tolist() == pytest.approx(carriers.value.tolist(), **ROUNDING)


def test_the_browser_leaves_out_what_patching_cannot_restore():
    """A component's restored fraction, (patched - corrupt) / (clean - corrupt), is NaN or
    infinite where the clean and corrupt runs agree (a fresh TDA's glitch): left out of the page's
    JSON, which would refuse it, rather than failing the diagnosis."""
    from interp.diagnose.circuits import _top

    frame = pd.DataFrame({"component": ["a", "b", "c", "d"], "restored": [0.5, np.inf, -np.inf, np.nan]})
    assert _top(frame, "restored") == [["a", 0.5]]


@pytest.mark.integration
def test_cli_prints_a_summary_and_json(tmp_path, capsys):
    checkpoint = save_tiny(tmp_path, "rope")
    assert main(["diagnose", str(checkpoint), "--out", str(tmp_path / "out"), "-n", "1", "--lengths", "32", "64",
                 "--png"]) == 0
    out, err = capsys.readouterr()
    # without whitespace: the table wraps its cells to the terminal width, paths included
    table = "".join(out.split())
    for text in ("errorrate,sparse", "sparsity,pattern(T=64)", "gSinkRatio", "last-write", "report.html"):
        assert text in table
    # progress on stderr: what runs, how far (3 splits, 2 lengths x 2 layers, load, metrics, report), what is left
    for text in ("diagnose:", "/10 [", "evaluating sparse", "attention at T=64", "drawing the report", "10/10"):
        assert text in err, text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", err), "no estimate of the time left"
    lstm = save_tiny(tmp_path, "lstm")
    assert main(["diagnose", str(lstm), "--out", str(tmp_path / "lstm_out"), "-n", "1", "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "", "--quiet leaves stderr empty"
    printed = json.loads(out)
    assert printed["model"] == "lstm" and printed["sparsity"] is None
    assert printed == json.loads((tmp_path / "lstm_out" / "metrics.json").read_text())
    assert {path.name for path in (tmp_path / "out").glob("*.png")} == {f"{png}.png" for png in PNGS}
    assert not list((tmp_path / "lstm_out").glob("*.png")), "no PNG without --png"
    assert main(["diagnose", "automaton-1l", "--png", "--out", str(tmp_path / "task_out")]) == 2
    assert "the automaton task's report has none to draw: leave --png out" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_rejects_a_path_that_is_not_a_checkpoint(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "no such checkpoint directory" in capsys.readouterr().err
    (tmp_path / "notes").mkdir()
    assert main(["diagnose", str(tmp_path / "notes"), "--out", str(tmp_path / "out")]) == 2
    assert "not a GlitchLens checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def report_payload(html_text: str) -> str:
    """What report.html carries packed: plotly.js and the figures (interp.diagnose.report)."""
    packed = re.search(r'<script type="application/octet-stream" id="report-payload">([^<]*)</script>', html_text)[1]
    return gzip.decompress(base64.b64decode(packed)).decode()


# --- the report in a real browser -------------------------------------------------------------

# Runs before anything else on the page: every error, rejected promise and console.error is
# written onto <html>, where --dump-dom can read it; after load, the decoded size of each image.
PROBE = """<script>
(() => {
  const errors = [], root = document.documentElement;
  const note = (kind, message) => { errors.push(kind + ": " + message);
                                    root.setAttribute("data-errors", JSON.stringify(errors)); };
  addEventListener("error", e => note("error", e.message));
  addEventListener("unhandledrejection", e => note("rejection", String(e.reason)));
  const consoleError = console.error;
  console.error = (...args) => { note("console.error", args.join(" ")); consoleError(...args); };
  addEventListener("load", () => root.setAttribute("data-images",
    JSON.stringify([...document.images].map(img => img.naturalWidth))));
})();
</script>"""


def load_in_chromium(page: Path, tmp_path: Path) -> tuple[str, list[str], list[int]]:
    """The DOM after the page ran (virtual time: the budget passes as soon as nothing is
    pending), the errors it raised and the pixel widths of its images."""
    probed = tmp_path / f"probed_{page.name}"
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    run = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", "--dump-dom",
                   probed.as_uri())
    root = re.search(r"<html([^>]*)>", run.stdout)[1]
    attribute = lambda name: json.loads(html.unescape(m[1])) if (m := re.search(rf'{name}="([^"]*)"', root)) else None
    uncaught = [line for line in run.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    return run.stdout, (attribute("data-errors") or []) + uncaught, attribute("data-images")


@pytest.mark.integration
@pytest.mark.browser
@needs_chromium
def test_the_browser_probe_catches_errors(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head></head><body><script>console.error("boom"); nope();</script>'
                    '<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk'
                    '+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="></body></html>')
    _, errors, images = load_in_chromium(page, tmp_path)
    assert any("boom" in e for e in errors) and any("nope" in e for e in errors)
    assert images == [1]


@pytest.mark.integration
@pytest.mark.browser
@needs_chromium
def test_report_renders_in_headless_chromium(diagnosed, tmp_path):
    _, result = diagnosed(TWO_VIEWS)
    page = result.files["report"]
    source = page.read_text()
    n_figures = source.count('class="plotly-graph-div"')
    assert n_figures >= 9
    dom, errors, images = load_in_chromium(page, tmp_path)
    assert errors == []
    # Plotly marks each div it has drawn and fills it with its SVG layers; a heatmap is an image.
    assert dom.count('class="plotly-graph-div js-plotly-plot"') == n_figures
    assert dom.count('class="main-svg"') >= 2 * n_figures
    n_panels = models.load(result.metrics["checkpoint"]).cfg.n_heads * len(result.metrics["maps"])
    assert len(re.findall(r'<g class="hm"><image [^>]*href="data:image/png;base64,', dom)) >= n_panels
    assert images == []                                             # every figure is drawn by plotly


# --- a task of one's own and the automaton: every section, their own tokens, staged files ------

@pytest.fixture(scope="module")
def parity_checkpoint(tmp_path_factory):
    """An untrained tiny model recorded as trained on the parity task of ``tests/plugin_tasks.py``
    (registered for this module): the plumbing does not depend on the weights."""
    from plugin_tasks import ParityTask

    from interp.tasks import registry

    saved = dict(registry._TASKS)
    registry.register_task(ParityTask())
    torch.manual_seed(0)
    model = models.build_model(models.ModelConfig.from_preset("rope", "tiny", n_heads=2, d_vocab=3, n_ctx=18))
    yield models.save(tmp_path_factory.mktemp("parity") / "ckpt", model, training={"config": {"task": "parity"},
                                                                                  "step": 0})
    registry._TASKS.clear()
    registry._TASKS.update(saved)


@pytest.fixture(scope="module")
def parity_diagnosis(parity_checkpoint, tmp_path_factory):
    return diagnose(parity_checkpoint, tmp_path_factory.mktemp("parity-report") / "out", n=8)


def test_a_task_of_ones_own_gets_every_section(parity_diagnosis):
    result = parity_diagnosis
    m = result.metrics
    assert m["task"] == "parity" and m["skipped"] == {} and m["glitches"]["total"] == len(result.glitches) > 0
    assert set(m["evaluation"]) == {"iid", "long"} and m["evaluation"]["iid"]["reads"] == 8   # one answer each
    assert sorted(m["files"].values()) == sorted(p.name for p in result.out_dir.iterdir() if p.name != MANIFEST)
    assert {"browser.html", "probes.csv", "report.html", "glitches.csv"} <= set(m["files"].values())
    assert set(json.loads((result.out_dir / MANIFEST).read_text())["files"]) == set(m["files"].values())
    glitch = m["at_glitch"]
    assert glitch["position"] == 8 and {glitch["target"], glitch["predicted"]} == {"0", "1"}   # the ? of iid
    assert [(h["layer"], h["head"]) for h in glitch["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    components = {c for c, _ in glitch["dla"]}
    assert {"embed", "L0H0", "L1H1", "L1 MLP"} <= components
    assert glitch["patching"] and {c for c, _ in glitch["patching"]} <= {"L0H0 z", "L0H1 z", "L1H0 z", "L1H1 z",
                                                                       "L0 mlp_out", "L1 mlp_out"}
    probes = pd.read_csv(result.files["probes_csv"])
    assert probes.layer.tolist() == [0, 1, 2] and (probes.low <= probes.accuracy).all()
    assert (probes.accuracy <= probes.high).all() and m["probe_label"] == "the parity of the bits so far"
    report = result.files["report"].read_text()
    for section in ("Error rates", "Glitches (first 50 of", "The heads at the glitch of iid sequence",
                    "Direct logit attribution and patching of that glitch", "Linear probes of the parity",
                    "Attention of the last layer"):
        assert section in report, section
    glitches = pd.read_csv(result.files["glitches_csv"], dtype={"target": str, "predicted": str})
    assert list(glitches.columns) == ["split", "seq", "position", "target", "predicted", "margin"]
    assert (glitches.margin < 0).all() and set(glitches.position) <= {8, 16}


@pytest.mark.integration
def test_the_automaton_is_diagnosed_in_its_own_tokens(tmp_path):
    result = diagnose(models.pretrained.path("automaton-1l"), tmp_path / "out", n=4)
    assert result.metrics["task"] == "automaton" and set(result.metrics["evaluation"]) == {"fresh"}
    assert set(result.glitches.target) | set(result.glitches.predicted) <= {"0", "1"}
    data = json.loads(re.search(r"id='data'>(.*?)</script>", result.files["browser"].read_text(), re.S)[1])
    shown = {t for g in data["glitches"] if "tokens" in g for t in g["tokens"]}
    assert shown and shown <= {"0", "1", "_"}
    assert result.metrics["probe_label"].startswith("the state") and result.metrics["probes"][-1]["accuracy"] > 0.99


def test_a_tool_never_reads_another_tasks_data(parity_checkpoint, tmp_path, capsys):
    from interp.diagnose.task import diagnose_task
    from interp.explain import explain

    with pytest.raises(ValueError, match="trained on the parity task, not counting"):
        diagnose_task(parity_checkpoint, tmp_path / "d", "counting")
    with pytest.raises(ValueError, match="trained on the parity task, not flipflop"):
        explain(parity_checkpoint, tmp_path / "e", task="flipflop")
    assert not (tmp_path / "d").exists() and not (tmp_path / "e").exists()
    assert main(["explain", str(parity_checkpoint), "--task", "flipflop", "--out", str(tmp_path / "e")]) == 2
    assert "trained on the parity task, not flipflop" in capsys.readouterr().err
    with pytest.raises(ValueError, match="task 'parity' has no split 'dense'; choose one of iid, long"):
        explain(parity_checkpoint, tmp_path / "e", split="dense")
    assert main(["explain", "tra-mech", "--split", "bogus", "--out", str(tmp_path / "e")]) == 2
    assert "split 'bogus': flip-flop's canonical splits are iid, sparse, dense" in capsys.readouterr().err
    # Left to itself, explain analyses the parity task's own split, never flip-flop's dense one.
    result = explain(parity_checkpoint, tmp_path / "e", n=8)
    assert (result.summary["task"], result.summary["split"], result.summary["reads"]) == ("parity", "long", 8)
    assert "parity task, long, first 8 sequences: 8 answers" in result.lines()[0]
    assert result.summary["dla_sum_error"] < 1e-4 and "corrupt" in result.summary
    assert "| seq | position | right answer | predicted | margin |" in result.files["report"].read_text()


def test_a_tasks_diagnosis_is_staged(parity_checkpoint, tmp_path):
    from interp.diagnose.task import diagnose_task

    out, outside = tmp_path / "out", tmp_path / "outside.html"
    out.mkdir()
    outside.write_text("mine")
    (out / "report.html").symlink_to(outside)
    with pytest.raises(ValueError, match="report.html exists and is a symbolic link; pass --overwrite"):
        diagnose_task(parity_checkpoint, out, n=2)
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]      # nothing written, no staging left
    first = diagnose_task(parity_checkpoint, out, n=2, overwrite=True)
    assert outside.read_text() == "mine" and not (out / "report.html").is_symlink()   # the link replaced, not followed
    again = diagnose_task(parity_checkpoint, out, n=2)      # its own outputs are replaced without --overwrite
    assert again.files == first.files and set(json.loads((out / MANIFEST).read_text())["files"]) == {
        p.name for p in first.files.values()}

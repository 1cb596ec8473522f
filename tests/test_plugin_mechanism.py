"""An attention mechanism of one's own, defined outside the package (``tests/plugin_mechanisms.py``):
registered in code, through ``GLITCHLENS_MECHANISMS`` or an entry point, checked by
``glitchlens check-mechanism``, trained, evaluated and diagnosed through the command line, and its
checkpoints refused with a clear message where it is not registered."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from plugin_mechanisms import PeekingAttention, SigmoidAttention

import models
from interp.cli import main
from interp.conformance import check_mechanism
from models import ModelConfig, build_model, mechanisms
from models.attention import REGISTRY, Attention
from models.mechanisms import MODEL_FAMILIES

PLUGIN = "plugin_mechanisms:SigmoidAttention"


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """Every registration a test makes, and its environment variable, are undone after it."""
    saved = [(table, dict(table)) for table in (REGISTRY, MODEL_FAMILIES, mechanisms._PLUGINS)]
    monkeypatch.setenv(mechanisms.ENVIRONMENT_VARIABLE, "")
    yield
    for table, content in saved:
        table.clear()
        table.update(content)


def test_a_registered_class_is_a_model_with_its_own_hooks(tokens):
    assert models.register_mechanism("sigmoid", SigmoidAttention) is SigmoidAttention
    models.register_mechanism("sigmoid", SigmoidAttention)  # again: nothing changes
    cfg = ModelConfig.from_preset("sigmoid", "tiny", n_ctx=32, attention_options={"bias": -2.0})
    assert (cfg.attention, cfg.pos_embed) == ("sigmoid", "none")
    model = build_model(cfg).eval()
    assert model.blocks[0].attn.b.tolist() == [-2.0]
    _, cache = model.run_with_cache(tokens(2, 12))
    assert cache["blocks.1.attn.hook_mass"].shape == (2, 1, 12)
    assert torch.allclose(cache["mass", 1], cache["pattern", 1].sum(-1))
    assert "sigmoid" in mechanisms.model_names()


def test_a_redefined_class_replaces_itself_but_a_name_is_never_taken_twice():
    models.register_mechanism("sigmoid", SigmoidAttention)
    redefined = type("SigmoidAttention", (SigmoidAttention,), {"__module__": "plugin_mechanisms"})
    models.register_mechanism("sigmoid", redefined)   # a notebook cell run again
    assert REGISTRY["sigmoid"] is redefined
    with pytest.raises(ValueError, match="'sigmoid' is already registered as plugin_mechanisms:SigmoidAttention"):
        models.register_mechanism("sigmoid", PeekingAttention)
    with pytest.raises(ValueError, match="already registered as 'sigmoid'; a class has one name"):
        models.register_mechanism("other", redefined)


@pytest.mark.parametrize("name, cls, message", [
    ("tra", SigmoidAttention, "'tra' is a built-in model or mechanism"),
    ("softmax", SigmoidAttention, "'softmax' is a built-in model or mechanism"),
    ("Sigmoid-2", SigmoidAttention, "use lower-case letters, digits and _"),
    ("plain", torch.nn.Linear, "is not a subclass of models.attention.Attention"),
    ("lazy", type("Lazy", (Attention,), {}), "does not implement attend"),
    ("opts", type("Opts", (SigmoidAttention,), {"Options": dict}), "Options must be a dataclass"),
])
def test_bad_registrations_are_refused(name, cls, message):
    with pytest.raises(ValueError, match=message):
        models.register_mechanism(name, cls)
    assert name not in mechanisms._PLUGINS


def test_specs_name_the_class_or_the_name():
    assert mechanisms.load_spec(PLUGIN) == "sigmoid"
    assert mechanisms.load_spec("peek=plugin_mechanisms:PeekingAttention") == "peek"
    assert mechanisms.load_spec(PLUGIN) == "sigmoid", "loading a registered class again keeps its name"
    for spec, message in [("plugin_mechanisms", "expected MODULE:CLASS"),
                          ("no_such_module:X", "cannot import no_such_module"),
                          ("plugin_mechanisms:NoSuchClass", "module plugin_mechanisms has no NoSuchClass")]:
        with pytest.raises(ValueError, match=message):
            mechanisms.load_spec(spec)


def test_the_environment_variable_is_read_when_a_name_is_unknown(monkeypatch):
    for table in (REGISTRY, MODEL_FAMILIES, mechanisms._PLUGINS):   # as in a fresh process, whatever ran before
        table.pop("sigmoid", None)
    with pytest.raises(ValueError, match="unknown model 'sigmoid'.*GLITCHLENS_MECHANISMS=MODULE:CLASS"):
        ModelConfig(model="sigmoid")
    monkeypatch.setenv(mechanisms.ENVIRONMENT_VARIABLE, f"{PLUGIN}, peek=plugin_mechanisms:PeekingAttention")
    assert ModelConfig(model="peek").attention == "peek"
    assert REGISTRY["sigmoid"] is SigmoidAttention


def entry_point_package(root, name: str, module: str) -> None:
    """An installed distribution under ``root`` whose ``glitchlens.mechanisms`` entry point ``name``
    is the class ``LazyAttention`` of ``module``, a sigmoid attention of its own."""
    (root / f"{module}.py").write_text("from plugin_mechanisms import SigmoidAttention\n\n\n"
                                       "class LazyAttention(SigmoidAttention):\n    pass\n")
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{mechanisms.ENTRY_POINT_GROUP}]\n{name} = {module}:LazyAttention\n")


def test_an_entry_point_is_imported_when_its_name_is_first_used(tmp_path, monkeypatch):
    entry_point_package(tmp_path, "lazy", "lazy_mechanism_package")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_mechanism_package", raising=False)
    assert "lazy" in mechanisms.entry_point_names() and "lazy" in mechanisms.model_names()
    assert "lazy_mechanism_package" not in sys.modules, "listing the names imports nothing"
    assert ModelConfig(model="lazy").attention == "lazy"
    assert REGISTRY["lazy"].__module__ == "lazy_mechanism_package"


def test_a_checkpoint_names_its_mechanism_and_is_refused_where_it_is_not_registered(tmp_path, monkeypatch):
    entry_point_package(tmp_path, "lazy", "lazy_mechanism_package")
    monkeypatch.syspath_prepend(str(tmp_path))
    models.register_mechanism("lazy", __import__("lazy_mechanism_package").LazyAttention)
    model = build_model(ModelConfig.from_preset("lazy", "tiny", n_ctx=16))
    models.save(tmp_path / "ckpt", model)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["model"]["model"] == "lazy"
    assert config["mechanism"] == {"name": "lazy", "class": "lazy_mechanism_package:LazyAttention"}
    assert torch.equal(models.load(tmp_path / "ckpt").blocks[0].attn.b, model.blocks[0].attn.b)

    for table in (REGISTRY, MODEL_FAMILIES, mechanisms._PLUGINS):   # a fresh process: nothing registered
        table.pop("lazy")
    monkeypatch.delitem(sys.modules, "lazy_mechanism_package")
    (tmp_path / "lazy_mechanism_package-0.1.dist-info" / "entry_points.txt").unlink()
    with pytest.raises(models.CheckpointError, match=r"attention mechanism 'lazy' \(class "
                       r"lazy_mechanism_package:LazyAttention\), which is not registered here.*--mechanism "
                       r"lazy=lazy_mechanism_package:LazyAttention.*never imports the class"):
        models.load(tmp_path / "ckpt")
    assert "lazy_mechanism_package" not in sys.modules, "loading imported the class the checkpoint names"


BUILT_IN = [name for name, (attention, pos_embed, _) in MODEL_FAMILIES.items() if attention and pos_embed == "none"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_mechanism_passes_the_checks(name):
    report = check_mechanism(name)
    assert report.passed, "\n".join(report.lines())


def test_check_mechanism_passes_a_plugin_and_fails_one_that_reads_the_future(capsys):
    assert main(["check-mechanism", PLUGIN, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mechanism"] == "sigmoid" and report["class"] == PLUGIN and report["passed"]
    assert len(report["checks"]) == 12
    hooks = next(c for c in report["checks"] if c["name"] == "hook names and shapes")
    assert "own: hook_mass [2, 2, 24]" in hooks["detail"]

    assert main(["check-mechanism", "plugin_mechanisms:PeekingAttention"]) == 1
    out = capsys.readouterr().out
    assert "7 of 12 checks passed; failed: causal outputs, causal gradients, no weight on future keys, T = 0 and 1, " \
           "longer than training" in " ".join(out.split())


def test_check_mechanism_reports_a_class_that_does_not_build(capsys):
    broken = type("BrokenAttention", (SigmoidAttention,), {
        "__init__": lambda self, cfg, layer: (_ for _ in ()).throw(RuntimeError("no weights for you"))})
    models.register_mechanism("broken", broken)
    report = check_mechanism("broken")
    assert [c.name for c in report.checks] == ["builds"] and not report.passed
    assert "RuntimeError: no weights for you" in report.checks[0].detail
    assert main(["check-mechanism", "lstm"]) == 2
    assert "lstm is not an attention mechanism alone" in capsys.readouterr().err
    assert main(["eval", "tra-mech", "--mechanism", "no_such_module:SigmoidAttention"]) == 2
    assert "glitchlens: error: mechanism spec 'no_such_module:SigmoidAttention': cannot import no_such_module" in \
        capsys.readouterr().err


@pytest.mark.integration
def test_a_plugin_trains_evaluates_and_is_diagnosed_explained_and_hunted_through_the_command_line(tmp_path, capsys):
    ckpt, report = tmp_path / "sigmoid", tmp_path / "report"
    assert main(["train", "--mechanism", PLUGIN, "--model", "sigmoid", "--steps", "3", "--seq-len", "64",
                 "--batch-size", "4", "--eval-n", "2", "--quiet", "--out", str(ckpt)]) == 0
    assert json.loads((ckpt / "config.json").read_text())["mechanism"] == {"name": "sigmoid", "class": PLUGIN}
    assert mechanisms.environment_specs() == [PLUGIN], "the processes the command starts find it too"
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--splits", "iid", "-n", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iid"]["sequences"] == 4
    assert main(["diagnose", str(ckpt), "--out", str(report), "-n", "2", "--lengths", "64", "--cache-sequences", "1",
                 "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["model"] == "sigmoid" and (report / "report.html").exists()
    assert main(["explain", str(ckpt), "-n", "8", "--pairs", "2", "--out", str(tmp_path / "explain")]) == 0
    assert json.loads((tmp_path / "explain" / "explain.json").read_text())["model"] == "sigmoid"
    capsys.readouterr()
    assert main(["hunt", str(ckpt), "--budget", "16", "--seq-len", "64", "--population", "4", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "sigmoid"


@pytest.mark.integration
def test_a_plugin_is_swept_in_fresh_processes_and_drawn(tmp_path, monkeypatch):
    """The runs of a sweep start in fresh processes, which find the mechanism through
    GLITCHLENS_MECHANISMS alone; the Table 1 figure draws its row."""
    from interp.studies.reproduce import Scale, reproduce_table1

    monkeypatch.setenv(mechanisms.ENVIRONMENT_VARIABLE, PLUGIN)
    scale = Scale(preset="tiny", steps=2, lr=1e-3, batch_size=4, recipe="llama", eval_n=2, eval_every=0, seq_len=32)
    table = reproduce_table1(tmp_path, scale, seeds=1, jobs=1, models=("sigmoid",))
    assert set(table.model) == {"sigmoid"}
    assert main(["figures", "--only", "table1", "--table1", str(tmp_path / "table1.csv"), "--out",
                 str(tmp_path / "figures")]) == 0
    assert (tmp_path / "figures" / "11_table1_accuracy.png").exists()


@pytest.mark.integration
def test_a_fresh_command_finds_an_entry_point_by_its_name(tmp_path):
    entry_point_package(tmp_path, "lazy", "lazy_mechanism_package")
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), tests]), mechanisms.ENVIRONMENT_VARIABLE: ""}
    result = subprocess.run([sys.executable, "-m", "interp.cli", "check-mechanism", "lazy", "--json"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["class"] == "lazy_mechanism_package:LazyAttention" and report["passed"]

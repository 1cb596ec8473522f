"""The task registry (``interp.tasks.registry``): flip-flop and the automaton re-expressed through
it with their splits unchanged, registration in code, by spec, through ``GLITCHLENS_TASKS`` or an
entry point, ``glitchlens check-task``, and a task of one's own (``tests/plugin_tasks.py``) trained
and evaluated through the command line."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from plugin_tasks import ParityTask, WrongParityTask

from interp.cli import main
from interp.tasks import (
    SPLITS, Task, automaton_states, get_task, load_split, read_mask, register_task, registry, sample_automaton,
    task_names, train_batch,
)
from interp.tasks.contract import CHECKS, check_task

PLUGIN = "plugin_tasks:ParityTask"


@pytest.fixture(autouse=True)
def tasks(monkeypatch):
    """Every registration a test makes, and its environment variable, are undone after it."""
    get_task("flipflop")   # the built-in tasks are registered before the snapshot
    saved = dict(registry._TASKS)
    monkeypatch.setenv(registry.ENVIRONMENT_VARIABLE, "")
    yield
    registry._TASKS.clear()
    registry._TASKS.update(saved)


def test_flipflop_through_the_registry_is_the_canonical_splits_and_reads():
    task = get_task("flipflop")
    assert [(s.name, s.size, s.seed, s.params["p_i"], s.published_reads) for s in task.splits.values()] == \
        [(s.name, s.size, s.seed, s.p_i, s.published_reads) for s in SPLITS.values()]
    assert [name for name, s in task.splits.items() if s.in_distribution] == ["iid"]
    tokens = task.load_split("iid")
    assert np.array_equal(tokens, load_split("iid"))
    inputs, targets, scored = task.model_io(tokens)
    assert np.array_equal(scored, read_mask(tokens[:, :-1])) and np.array_equal(targets, tokens[:, 1:])
    assert int(scored.sum()) == int(read_mask(tokens).sum())   # the scored positions are the reads
    assert np.array_equal(task.train_batch(4, 3, seed=1), train_batch(4, 3, seed=1))


def test_the_automaton_through_the_registry_scores_every_state():
    task = get_task("automaton")
    inputs = task.sample(3, 40, 9)
    assert np.array_equal(inputs, sample_automaton(3, 40, 0.5, 9)[0])
    x, targets, scored = task.model_io(inputs)
    assert np.array_equal(x, inputs) and np.array_equal(targets, automaton_states(inputs)) and scored.all()


def test_built_in_tasks_are_listed():
    assert task_names()[:6] == ["flipflop", "automaton", "counting", "counting-3", "counting-5", "selective-copy"]


@pytest.mark.parametrize("task, message", [
    (ParityTask, "register an instance"), ("parity", "not an interp.tasks.Task"),
    (SimpleNamespace(), "not an interp.tasks.Task"),
])
def test_bad_registrations_are_refused(task, message):
    with pytest.raises(ValueError, match=message):
        register_task(task)


def test_a_name_is_never_taken_twice_and_bad_names_are_refused():
    register_task(ParityTask())
    register_task(ParityTask())   # the same class again: replaces itself
    with pytest.raises(ValueError, match="already registered as plugin_tasks:ParityTask"):
        register_task(type("Other", (ParityTask,), {})())
    bad = ParityTask()
    bad.name = "Parity!"
    with pytest.raises(ValueError, match="task name 'Parity!'"):
        register_task(bad)


def test_unknown_names_and_specs_say_what_to_do():
    with pytest.raises(ValueError, match="unknown task 'nope'; choose one of flipflop, automaton.*--task MODULE:CLASS"):
        get_task("nope")
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        registry.resolve("no_such_module:Task")
    with pytest.raises(ValueError, match="has no Missing"):
        registry.resolve("plugin_tasks:Missing")
    with pytest.raises(ValueError, match="not a subclass of interp.tasks.Task"):
        registry.resolve("plugin_tasks:np")


def test_a_spec_registers_and_exports_and_the_environment_is_read(monkeypatch):
    import os

    assert registry.resolve(PLUGIN) == "parity"
    assert os.environ[registry.ENVIRONMENT_VARIABLE] == PLUGIN
    registry._TASKS.pop("parity")
    assert get_task("parity").name == "parity"   # found again through GLITCHLENS_TASKS


def test_an_entry_point_is_loaded_when_its_name_is_first_used(monkeypatch):
    point = SimpleNamespace(name="parity", value=PLUGIN, load=lambda: ParityTask)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point] if group == registry.ENTRY_POINT_GROUP else [])
    assert "parity" in task_names()
    assert isinstance(get_task("parity"), ParityTask)


def test_check_task_passes_a_task_and_names_the_check_a_broken_one_fails(capsys):
    assert all(check.passed for check in check_task(ParityTask()))
    failed = [check for check in check_task(WrongParityTask()) if not check.passed]
    assert [check.name for check in failed] == ["answers"]
    assert "answer() says" in failed[0].detail
    assert main(["check-task", PLUGIN]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(CHECKS) + 1 and all(line.startswith("PASS ") for line in lines[:-1])
    assert main(["check-task", "plugin_tasks:WrongParityTask"]) == 1
    assert "FAIL answers: split iid" in capsys.readouterr().out
    assert main(["check-task", "nope"]) == 2


def test_a_task_of_ones_own_trains_and_evaluates_through_the_command_line(tmp_path, capsys):
    ckpt = tmp_path / "parity"
    assert main(["train", "--task", PLUGIN, "--model", "rope", "--steps", "3", "--batch-size", "4", "--n-layers", "1",
                 "--d-model", "16", "--n-heads", "2", "--eval-n", "4", "--out", str(ckpt), "--quiet"]) == 0
    config = json.loads((ckpt / "config.json").read_text())
    assert config["training"]["config"]["task"] == "parity" and config["model"]["d_vocab"] == 3
    assert config["model"]["n_ctx"] == 18   # the longest split, so that every split can be evaluated
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--json", "--quiet"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {name: r["reads"] for name, r in results.items()} == {"iid": 64, "long": 64}
    assert main(["eval", str(ckpt), "--task", "counting", "--quiet"]) == 2
    assert "trained on the parity task, not counting" in capsys.readouterr().err


def test_a_task_is_a_subclass_with_a_contract():
    with pytest.raises(NotImplementedError):
        Task().sample(1, 4, 0)


def test_a_task_and_a_mechanism_of_installed_packages_need_no_flag_and_a_checkpoint_imports_nothing(
        tmp_path, monkeypatch, capsys):
    """Entry points as an installed package declares them (``importlib.metadata.EntryPoint``): the
    commands find the task and the mechanism by their names alone; once neither is declared, the
    checkpoint that records them is refused, naming what to register, and no code is imported."""
    from importlib.metadata import EntryPoint

    from models import mechanisms
    from support import registries_kept

    declared = {registry.ENTRY_POINT_GROUP: [EntryPoint("parity", PLUGIN, registry.ENTRY_POINT_GROUP)],
                mechanisms.ENTRY_POINT_GROUP: [EntryPoint("sigmoid", "plugin_mechanisms:SigmoidAttention",
                                                          mechanisms.ENTRY_POINT_GROUP)]}
    import importlib.metadata

    installed = importlib.metadata.entry_points

    def entry_points(**selection):
        group = selection.get("group")
        return declared.get(group, []) if group in (registry.ENTRY_POINT_GROUP, mechanisms.ENTRY_POINT_GROUP) \
            else installed(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry, "entry_points", entry_points)   # imported by name when the registry loads
    monkeypatch.delenv(mechanisms.ENVIRONMENT_VARIABLE, raising=False)
    ckpt = tmp_path / "parity-sigmoid"
    with registries_kept():
        assert main(["train", "--task", "parity", "--model", "sigmoid", "--steps", "2", "--batch-size", "2",
                     "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--eval-n", "2", "--out", str(ckpt),
                     "--quiet"]) == 0
    registry._TASKS.pop("parity")
    capsys.readouterr()
    with registries_kept():   # a fresh process: neither is registered until a command names it
        assert main(["eval", str(ckpt), "-n", "2", "--json", "--quiet"]) == 0
        assert set(json.loads(capsys.readouterr().out)) == {"iid", "long"}
        assert main(["check-task", "parity"]) == 0
    registry._TASKS.pop("parity")
    declared.clear()
    monkeypatch.setattr("importlib.import_module", lambda *a, **k: pytest.fail(f"imported {a}"))
    with registries_kept():
        assert main(["eval", str(ckpt), "-n", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'parity'" in err and "'glitchlens.tasks' entry point" in err

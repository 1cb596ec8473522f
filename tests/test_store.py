"""The activation store and the linear probes (``interp.metrics.store``): rows kept at the
positions asked for, spilled to disk past the memory bound and read back the same, the scratch
folder removed; probes that read a label written linearly into the stream perfectly and a label
that is not there at chance, with the interval around the held-out accuracy; every task's label."""

import numpy as np
import pytest
import torch
from plugin_tasks import ParityTask

from interp.metrics.store import HELD_OUT, cache_activations, linear_probes, probe_labels, stream_hooks
from interp.tasks import get_task
from models import ModelConfig, build_model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset("rope", "tiny", n_heads=2)).eval()


def test_rows_spill_to_disk_past_the_bound_and_read_back_the_same(model, tmp_path):
    inputs = get_task("flipflop").load_split("iid", 6)[:, :64]
    where = np.zeros(inputs.shape, dtype=bool)
    where[:, ::3] = True
    with cache_activations(model, inputs, where, batch_size=2) as held:
        assert held.spilled_to is None and list(tmp_path.iterdir()) == []
        with cache_activations(model, inputs, where, max_bytes=1000, spill_dir=tmp_path, batch_size=2) as spilled:
            assert spilled.spilled_to.parent == tmp_path and spilled.bytes_in_memory == 0
            assert len(list(spilled.spilled_to.iterdir())) == 3 * len(stream_hooks(model))
            for hook in stream_hooks(model):
                np.testing.assert_array_equal(spilled.rows(hook), held.rows(hook))
        assert list(tmp_path.iterdir()) == []          # closed: the chunks are gone
    _, cache = model.run_with_cache(torch.as_tensor(inputs.astype(np.int64)))
    np.testing.assert_allclose(held.rows("blocks.1.hook_resid_pre"),
                               cache["blocks.1.hook_resid_pre"][torch.as_tensor(where)].numpy(), atol=1e-6)
    np.testing.assert_array_equal(np.stack([held.seq, held.position]), np.stack(np.nonzero(where)))


def test_a_probe_reads_a_linear_label_and_not_a_random_one(model):
    """The token itself is linear in the embedding: a probe on the stream before block 0 reads it
    perfectly; a label drawn at random is read at about chance, its interval around it."""
    inputs = get_task("flipflop").load_split("iid", 40)[:, :32]
    where = np.ones(inputs.shape, dtype=bool)
    noise = np.random.default_rng(0).integers(0, 2, inputs.shape)
    with cache_activations(model, inputs, where, hooks=["blocks.0.hook_resid_pre"]) as store:
        token = linear_probes(store, inputs.astype(np.int64), "the token")
        random = linear_probes(store, noise, "a coin")
    assert token.accuracy.item() == 1.0 and token.classes.item() == 5
    assert token.test_rows.item() == (np.arange(40) % HELD_OUT == 0).sum() * 32
    assert 0.4 < random.accuracy.item() < 0.6 and random.low.item() < 0.5 < random.high.item()
    assert token.low.item() < 1.0 == token.high.item() and token.baseline.item() < 0.5
    with cache_activations(model, inputs[:, :6], where[:, :6], hooks=["blocks.0.hook_resid_pre"]) as store:
        by_position = linear_probes(store, inputs.astype(np.int64), "the token", by_position=True)
    # position 0 always holds a w: one label only, no probe; at the others the token is read
    assert by_position.position.tolist() == [1, 2, 3, 4, 5] and (by_position.accuracy > 0.8).all()


@pytest.mark.parametrize("name", ["flipflop", "automaton", "counting", "selective-copy", "parity"])
def test_every_task_has_a_probe_label(name):
    task = ParityTask() if name == "parity" else get_task(name)
    split = next(iter(task.splits))
    tokens = task.load_split(split, 2)
    inputs, labels, where, meaning = probe_labels(task, tokens)
    assert labels.shape == where.shape == inputs.shape and where.any() and (labels[where] >= 0).all()
    assert isinstance(meaning, str) and meaning


def test_what_cannot_be_stored_is_refused(model):
    inputs = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(ValueError, match="where marks no position"):
        cache_activations(model, inputs, np.zeros((2, 8), dtype=bool))
    with pytest.raises(ValueError, match="has no hook blocks.9.hook_resid_pre"):
        cache_activations(model, inputs, np.ones((2, 8), dtype=bool), hooks=["blocks.9.hook_resid_pre"])
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        cache_activations(model, inputs, np.ones((2, 8), dtype=bool), max_bytes=0)
    lstm = build_model(ModelConfig.from_preset("lstm", "tiny"))
    with pytest.raises(ValueError, match="has no residual stream"):
        stream_hooks(lstm)


def test_a_task_that_declares_no_label_is_probed_for_its_answers():
    class Undeclared(ParityTask):
        def probe_labels(self, inputs):
            return None

    task = Undeclared()
    inputs, labels, where, meaning = probe_labels(task, task.load_split("iid", 3))
    assert meaning == "the right answer" and (where == (inputs == 2)).all()
    np.testing.assert_array_equal(labels[where], inputs[:, :-1].sum(1) % 2)
    assert (labels[~where] == -1).all()

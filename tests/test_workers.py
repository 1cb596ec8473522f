"""A forward's batch shared out to worker threads of one torch thread each (``models.workers``):
only where nothing can tell the difference, with the unsplit forward's outputs, the caller's grad
mode and torch's thread count restored."""

import threading

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from models import ModelConfig, build_model
from models.backbone import Block
from models.workers import worker_map

THREADS = 2


@pytest.fixture
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(saved)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig.from_preset("rope", "tiny", n_ctx=32)).eval()


@pytest.fixture
def block_threads(monkeypatch):
    """The threads each block's forward ran on, and the batch each saw (a patched method, not a
    hook, which would stop the split)."""
    seen = []
    forward = Block.forward

    def recording(self, resid):
        seen.append((threading.current_thread(), len(resid), torch.get_num_threads()))
        return forward(self, resid)

    monkeypatch.setattr(Block, "forward", recording)
    return seen


def tokens(batch: int = 5, pos: int = 24) -> torch.Tensor:
    return torch.randint(0, 5, (batch, pos), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("return_type", ["logits", "normalized", None])
def test_the_split_forward_gives_the_unsplit_outputs(model, two_threads, block_threads, return_type):
    with torch.no_grad():
        split = model(tokens(), return_type)
        torch.set_num_threads(1)
        whole = model(tokens(), return_type)
    assert {thread for thread, _, _ in block_threads[:4]} != {threading.main_thread()}
    assert sorted(batch for _, batch, _ in block_threads[:4]) == [2, 2, 3, 3]   # 5 sequences in two parts
    assert all(threads == 1 for _, _, threads in block_threads)
    assert torch.get_num_threads() == 1 and (split is None) == (whole is None)
    if whole is not None:
        torch.testing.assert_close(split, whole, rtol=1e-6, atol=1e-6)


def test_stop_at_layer_and_one_sequence(model, two_threads, block_threads):
    with torch.no_grad():
        torch.testing.assert_close(model(tokens(), stop_at_layer=1),
                                   torch.cat([model(tokens()[i:i + 1], stop_at_layer=1) for i in range(5)]),
                                   rtol=1e-6, atol=1e-6)
    assert all(thread is threading.main_thread() for thread, batch, _ in block_threads if batch == 1)


def test_the_ids_are_checked_once_and_bad_arguments_fail_before_the_split(model, two_threads, block_threads,
                                                                           monkeypatch):
    import models.backbone
    import models.tokens

    checked = []

    def counting(ids, *args, **kwargs):
        checked.append(len(ids))
        return models.tokens.as_token_ids(ids, *args, **kwargs)

    monkeypatch.setattr(models.backbone, "as_token_ids", counting)
    with torch.no_grad():
        model(tokens())
        assert checked == [5] and len(block_threads) == 2 * len(model.blocks)
        block_threads.clear()
        with pytest.raises(ValueError, match="stop_at_layer must be an integer"):
            model(tokens(), stop_at_layer=3)
        with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
            model(tokens() + 5)
    assert block_threads == []


def test_the_callers_grad_mode_reaches_the_workers(model, two_threads):
    with torch.inference_mode():
        assert model(tokens()).is_inference()
    with torch.no_grad():
        out = model(tokens())
    assert not out.is_inference() and not out.requires_grad


def split_happened(model, block_threads, **forward) -> bool:
    block_threads.clear()
    model(tokens(), **forward)
    return any(thread is not threading.main_thread() for thread, _, _ in block_threads)


def test_anything_that_would_miss_the_workers_keeps_the_forward_whole(model, two_threads, block_threads):
    """Gradients, training mode, hooks (a hook point's, a module's, every module's), autocast,
    a dispatch mode and a loss (a mean over the whole batch) each run it in the caller's thread,
    and a hook then sees the whole batch."""
    assert not split_happened(model, block_threads)   # gradients wanted
    with torch.no_grad():
        assert split_happened(model, block_threads)
        assert not split_happened(model, block_threads, return_type="loss")
        model.train()
        assert not split_happened(model, block_threads)
        model.eval()
        batches = []
        model.blocks[0].hook_resid_pre.add_hook(lambda x, hook: batches.append(len(x)))
        assert not split_happened(model, block_threads) and batches == [5]
        model.reset_hooks()
        handle = model.blocks[1].register_forward_pre_hook(lambda module, args: None)
        assert not split_happened(model, block_threads)
        handle.remove()
        handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: None)
        assert not split_happened(model, block_threads)
        handle.remove()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not split_happened(model, block_threads)
        with FlopCounterMode(display=False) as flops:
            assert not split_happened(model, block_threads)
        assert flops.get_total_flops() > 0
        torch.set_num_threads(1)
        assert not split_happened(model, block_threads)


def test_worker_map_restores_the_thread_count_after_an_error(two_threads):
    def fail(item):
        assert torch.get_num_threads() == 1
        raise ValueError(f"item {item}")

    with pytest.raises(ValueError, match="item 0"):
        list(worker_map(fail, range(3), 2))
    assert torch.get_num_threads() == THREADS
    assert list(worker_map(lambda item: item * torch.get_num_threads(), range(4), 3)) == [0, 1, 2, 3]
    assert torch.get_num_threads() == THREADS

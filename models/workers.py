"""A model's work shared out to worker threads of one torch thread each, on the CPU.

A model this small spends much of a forward in operations too short to split: every operation
torch splits across its threads ends at a barrier, and on a shared machine each barrier waits
for whichever thread the scheduler has taken off its core. Whole sequences handed to one
thread each meet no barrier at all: a thread taken off its core delays only its own share.
``glitchlens bench threads`` measures a forward at one and two threads, with and without a busy
process beside it (docs/results/benchmarks.md, "Under load: threads and start-up").

:func:`worker_map` is the mechanism (``interp.evaluate.predict_reads`` shares its batches out
with it); :func:`splits_over_threads` says when a forward may use it: results then equal the
unsplit forward's up to float rounding, which depends on the thread count as any CPU
product's does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch import nn

Item = TypeVar("Item")
Result = TypeVar("Result")


def worker_map(run: Callable[[Item], Result], items: Iterable[Item], workers: int) -> Iterator[Result]:
    """``map(run, items)`` on ``workers`` threads while torch runs one thread each, in order;
    torch's thread count is restored when the iteration ends (or is abandoned)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            yield from pool.map(run, items)
    finally:
        torch.set_num_threads(threads)


def splits_over_threads(model: nn.Module, tokens: torch.Tensor) -> bool:
    """Whether a forward of ``tokens [batch, pos]`` may run as :func:`worker_map` over parts of
    the batch: on the CPU with more than one torch thread, in eval mode without gradients, and
    with nothing that lives in the calling thread or sees whole batches, which the workers would
    miss or see in parts: a hook on any module of the model or on every module, autocast, a
    torch function or dispatch mode (``FlopCounterMode``, for one), a ``torch.func`` transform."""
    return (tokens.device.type == "cpu" and len(tokens) > 1 and torch.get_num_threads() > 1
            and not model.training and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0
            and not torch._C._functorch.is_functorch_wrapped_tensor(tokens)
            and not has_forward_hooks(model))


def has_forward_hooks(model: nn.Module) -> bool:
    """Whether a forward hook or pre-hook is registered on any module of ``model`` (TransformerLens's
    hook points among them) or on every module."""
    every_module = nn.modules.module
    return bool(every_module._global_forward_hooks or every_module._global_forward_pre_hooks) or any(
        module._forward_hooks or module._forward_pre_hooks for module in model.modules())


def forward_in_parts(forward: Callable[[torch.Tensor], torch.Tensor | None], tokens: torch.Tensor,
                     ) -> torch.Tensor | None:
    """``forward(tokens)`` as one part of the batch per torch thread (:func:`worker_map`), each
    under the caller's grad mode (inference mode or ``no_grad``, which are per thread), the parts'
    outputs concatenated along the batch (None if ``forward`` returns None)."""
    inference = torch.is_inference_mode_enabled()

    def run(part: torch.Tensor) -> torch.Tensor | None:
        with torch.inference_mode() if inference else torch.no_grad():
            return forward(part)

    parts = tokens.tensor_split(min(torch.get_num_threads(), len(tokens)))
    outputs = list(worker_map(run, parts, len(parts)))
    return None if outputs[0] is None else torch.cat(outputs)

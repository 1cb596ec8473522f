"""Activations cached over a split within a memory bound, and linear probes fitted on them.

:func:`cache_activations` runs a model over token sequences in batches and keeps, for each hook
asked for (by default the residual stream before every block and after the last:
:func:`stream_hooks`), the activation at the positions a mask selects, one row per (sequence,
position). Rows stay in memory until they would pass ``max_bytes``; then every chunk held so far
goes to a scratch folder on disk (inside ``spill_dir``: a run's ``--out`` or a temporary
folder, removed by :meth:`ActivationStore.close`) and is read back one chunk at a time.

:func:`linear_probes` fits, per hook (a layer) and optionally per position, a multinomial
logistic regression from the stored rows to a label (what the task declares,
:func:`interp.tasks.probe_labels`), on the rows of four sequences in five, and scores it on the
fifth: held-out accuracy with its Wilson interval (:func:`interp.metrics.wilson_interval`; the
rows of one sequence are not independent draws, so the interval is optimistic when a
sequence has many of them), beside the accuracy of always answering the most frequent label.
The fit reads the chunks one at a time (L-BFGS over the sum of the chunks' losses), so it
stays within the bound too.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Integer
from torch import nn

from interp.metrics.anatomy import wilson_interval

MAX_BYTES = 256 << 20        # activations held in memory before they go to disk
BATCH = 16                   # sequences per forward pass
HELD_OUT = 5                 # every HELD_OUT-th sequence is held out to score the probes
L2 = 1e-3                    # the probes' weight decay, on standardised activations
STEPS = 100                  # L-BFGS iterations per probe, at most
TOLERANCE = 1e-6             # ... it stops once the loss changes less than this (a convex loss: the optimum)


def stream_hooks(model: nn.Module) -> list[str]:
    """The residual stream before every block and after the last one: what each layer adds
    to what a linear read-out can find. A model without blocks (the LSTM) is refused."""
    n_layers = len(getattr(model, "blocks", ()))
    if not n_layers:
        raise ValueError(f"the {model.cfg.model} model has no residual stream (no blocks) to probe")
    return [*(f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)),
            f"blocks.{n_layers - 1}.hook_resid_post"]


@dataclass
class ActivationStore:
    """Rows of activations: ``seq`` and ``position`` ``[rows]`` say where each row comes from;
    the activations of a hook come back chunk by chunk (:meth:`chunks`) or whole (:meth:`rows`)."""

    hooks: list[str]
    seq: np.ndarray
    position: np.ndarray
    held: dict[str, list[np.ndarray | Path]]
    spilled_to: Path | None = None
    bytes_in_memory: int = 0
    chunk_rows: list[int] = field(default_factory=list)

    def chunks(self, hook: str):
        """The activations of ``hook``, one ``float32 [rows of the chunk, d]`` chunk at a time."""
        if hook not in self.held:
            raise ValueError(f"hook {hook!r} is not stored; stored: {', '.join(self.hooks)}")
        for chunk in self.held[hook]:
            yield np.load(chunk) if isinstance(chunk, Path) else chunk

    def rows(self, hook: str) -> np.ndarray:
        """Every row of ``hook``, ``[rows, d]`` (loads the spilled chunks into memory)."""
        return np.concatenate(list(self.chunks(hook)))

    def close(self) -> None:
        """Remove the chunks spilled to disk."""
        if self.spilled_to is not None:
            shutil.rmtree(self.spilled_to, ignore_errors=True)
            self.spilled_to = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


def _spill(store: ActivationStore, spill_dir) -> None:
    """Move every chunk held in memory to ``store.spilled_to`` (made on first use)."""
    from interp.outputs import new_file

    if store.spilled_to is None:
        store.spilled_to = Path(tempfile.mkdtemp(prefix=".glitchlens-activations-", dir=spill_dir))
    for hook, chunks in store.held.items():
        for k, chunk in enumerate(chunks):
            if isinstance(chunk, np.ndarray):
                fd, path = new_file(store.spilled_to, f"{hook}.", ".npy")
                with open(fd, "wb") as f:
                    np.save(f, chunk)
                chunks[k] = Path(path)
    store.bytes_in_memory = 0


@torch.no_grad()
def cache_activations(model: nn.Module, inputs: Integer[np.ndarray, "batch pos"],
                      where: Bool[np.ndarray, "batch pos"], hooks: list[str] | None = None,
                      max_bytes: int = MAX_BYTES, spill_dir=None, batch_size: int = BATCH) -> ActivationStore:
    """Run ``model`` on ``inputs`` ``[n, T]``, ``batch_size`` sequences at a time, and keep each
    hook's activation ``[..., d]`` at the positions ``where`` marks; see the module docstring.
    ``hooks``: names of ``model.hook_dict`` whose activations are ``[batch, pos, d]`` (default
    :func:`stream_hooks`). ``spill_dir``: where chunks go past ``max_bytes`` (default: the
    system's temporary folder)."""
    inputs, where = np.asarray(inputs), np.asarray(where, dtype=bool)
    if inputs.ndim != 2 or where.shape != inputs.shape:
        raise ValueError(f"inputs {inputs.shape} and where {where.shape} must be one [n, T] shape")
    if not where.any():
        raise ValueError("where marks no position: nothing to store")
    if not (isinstance(max_bytes, int) and max_bytes > 0):
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    hooks = stream_hooks(model) if hooks is None else list(hooks)
    unknown = [h for h in hooks if h not in model.hook_dict]
    if unknown:
        raise ValueError(f"the {model.cfg.model} model has no hook {unknown[0]}")
    device = next(model.parameters()).device
    store = ActivationStore(hooks, *np.nonzero(where), held={h: [] for h in hooks})
    for start in range(0, len(inputs), batch_size):
        rows = np.nonzero(where[start:start + batch_size])
        if not len(rows[0]):
            continue
        got = {}

        def keep(act, hook):
            got[hook.name] = act[torch.as_tensor(rows[0], device=act.device), torch.as_tensor(rows[1], device=act.device)]

        tokens = torch.as_tensor(inputs[start:start + batch_size].astype(np.int64), device=device)
        model.run_with_hooks(tokens, fwd_hooks=[(h, keep) for h in hooks])
        for hook in hooks:
            chunk = got[hook].float().cpu().numpy()
            store.held[hook].append(chunk)
            store.bytes_in_memory += chunk.nbytes
        store.chunk_rows.append(len(rows[0]))
        if store.bytes_in_memory > max_bytes:
            _spill(store, spill_dir)
    return store


def _fit(chunks, labels: np.ndarray, classes: int) -> nn.Linear:
    """A multinomial logistic regression ``d -> classes`` on standardised rows, by L-BFGS over
    the sum of the chunks' cross-entropies (one chunk in memory at a time). ``chunks()`` yields
    ``(x [rows, d], y [rows])`` pairs; the standardisation is folded into the returned layer."""
    total = sum(len(y) for _, y in chunks())
    mean = sum(x.sum(0, dtype=np.float64) for x, _ in chunks()) / total
    var = sum(((x - mean) ** 2).sum(0) for x, _ in chunks()) / total
    scale = 1 / np.sqrt(var + 1e-6)
    d = len(mean)
    probe = nn.Linear(d, classes).double()
    nn.init.zeros_(probe.weight), nn.init.zeros_(probe.bias)
    optimiser = torch.optim.LBFGS(probe.parameters(), max_iter=STEPS, tolerance_change=TOLERANCE,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        loss_total = 0.0
        for x, y in chunks():
            z = torch.from_numpy((x - mean) * scale)
            loss = nn.functional.cross_entropy(probe(z), torch.from_numpy(y), reduction="sum") / total
            loss.backward()
            loss_total += loss.item()
        penalty = L2 / 2 * probe.weight.pow(2).sum()
        penalty.backward()
        return torch.tensor(loss_total + penalty.item())

    optimiser.step(closure)
    with torch.no_grad():   # fold the standardisation in: probe(x) = W ((x - mean) * scale) + b
        folded = nn.Linear(d, classes).double()
        folded.weight.copy_(probe.weight * torch.from_numpy(scale))
        folded.bias.copy_(probe.bias - folded.weight @ torch.from_numpy(mean))
    return folded


def linear_probes(store: ActivationStore, labels: Integer[np.ndarray, "batch pos"], label: str = "label",
                  by_position: bool = False, confidence: float = 0.95) -> pd.DataFrame:
    """A linear probe per stored hook (and per position, with ``by_position``) for ``labels``
    ``[n, T]`` (ints, read at the store's rows), fitted on the sequences whose index is not a
    multiple of :data:`HELD_OUT` and scored on those that are. Columns ``hook, layer`` (the
    block the hook enters; the last block + 1 after it; -1 for a hook outside the blocks), ``position`` (-1: every position),
    ``label``, ``train_rows``, ``test_rows``, ``classes``, ``accuracy``, ``low``, ``high`` (its
    Wilson interval at ``confidence``) and ``baseline`` (the most frequent training label's
    share of the held-out rows). A group with no held-out row, or one label only among its
    training rows, is left out."""
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.shape[0] <= store.seq.max(initial=0) or labels.shape[1] <= store.position.max():
        raise ValueError(f"labels {labels.shape} do not cover the store's positions (sequences up to "
                         f"{store.seq.max()}, positions up to {store.position.max()})")
    y_all = labels[store.seq, store.position].astype(np.int64)
    classes, y_all = np.unique(y_all, return_inverse=True)
    test = store.seq % HELD_OUT == 0
    groups = ({int(p): store.position == p for p in np.unique(store.position)} if by_position
              else {-1: np.ones(len(y_all), dtype=bool)})
    offsets = np.cumsum([0, *store.chunk_rows])
    rows = []
    for hook in store.hooks:
        for position, member in groups.items():
            train_rows, test_rows = member & ~test, member & test
            if not test_rows.any() or len(np.unique(y_all[train_rows])) < 2:
                continue

            def chunks(chosen=train_rows):
                for k, x in enumerate(store.chunks(hook)):
                    pick = chosen[offsets[k]:offsets[k + 1]]
                    if pick.any():
                        yield x[pick].astype(np.float64), y_all[offsets[k]:offsets[k + 1]][pick]

            probe = _fit(chunks, y_all, len(classes))
            right = sum(int((probe(torch.from_numpy(x)).argmax(-1).numpy() == y).sum())
                        for x, y in chunks(test_rows))
            n_test = int(test_rows.sum())
            low, high = wilson_interval(right, n_test, confidence)
            common = np.bincount(y_all[train_rows], minlength=len(classes)).argmax()
            block = re.match(r"blocks\.(\d+)\.", hook)
            layer = int(block[1]) + hook.endswith("resid_post") if block else -1
            rows.append({"hook": hook, "layer": layer, "position": position, "label": label,
                         "train_rows": int(train_rows.sum()), "test_rows": n_test, "classes": len(classes),
                         "accuracy": right / n_test, "low": float(low), "high": float(high),
                         "baseline": float((y_all[test_rows] == common).mean())})
    return pd.DataFrame(rows, columns=["hook", "layer", "position", "label", "train_rows", "test_rows", "classes",
                                       "accuracy", "low", "high", "baseline"])



def probe_labels(task, tokens: Integer[np.ndarray, "batch pos"]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(inputs, labels, where, meaning)`` of ``task`` on whole sequences ``tokens``: what the
    model reads (``task.model_io``), the label at each of its positions and where it is
    defined, ``[n, T']`` each, and the label in words. The label is the one the task declares
    (``Task.probe_labels``, ``Task.probe_label``), or, for a task that declares none, the right
    answer at each scored position."""
    inputs, targets, scored = task.model_io(np.asarray(tokens))
    declared = task.probe_labels(inputs)
    if declared is None:
        return inputs, np.where(scored, targets.astype(np.int64), -1), scored, "the right answer"
    declared = np.asarray(declared)
    return inputs, declared, declared >= 0, task.probe_label or "the task's probe label"

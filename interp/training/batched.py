"""The seeds of one configuration trained as one model: the batched runs of ``glitchlens campaign``
and ``glitchlens reproduce --batch-seeds`` (:mod:`interp.studies.seed_groups`).

Each seed is a run of :func:`interp.training.loop.train` in a directory of its own, and is set up
exactly as that run is (:func:`interp.training.setup.prepare_run`: the same initial weights, or its
checkpoint when resuming). Their parameters are then stacked on a new first axis, the seed. One
step of all of them is the forward of one seed's loss ``vmap`` over the seeds (``torch.func``, the
model's own code through ``functional_call``), then one backward of the sum of the seeds' losses
by ordinary autograd: a seed's loss reads its own slice of the stacks alone, so the gradient of the
sum is each seed's own gradient. Only the forward runs under the transform; the backward runs in
autograd's engine over the batched operations the forward recorded, without the transform's
per-operation overhead in Python (``vmap`` of ``grad`` would wrap every backward operation too):

- data: each seed reads its own batches (:class:`interp.training.setup.BatchSource`, a function
  of the seed and the step), checked before the transform;
- loss: the mean cross-entropy over the scored positions, as the loop's;
- clipping: each seed's gradient is scaled by its own global norm, as ``clip_grad_norm_`` does;
- AdamW: one optimiser over the stacked tensors, with the loop's parameter groups; every AdamW
  operation is elementwise, so each seed's slice of its state is that seed's own optimiser state.

Under ``vmap`` every mechanism runs its attention core's reference (:data:`BATCHED_IMPL`): plain
tensor operations (matmul, mask, softmax, matmul; Shaw's and CoPE's position tables read by
``gather``), each with a batching rule, so one kernel serves every seed, on every device. The fast
paths would not: which SDPA kernel runs depends on the device and the inputs (the CPU's has no
batching rule, and ``vmap`` then loops over the seeds one at a time), and the Triton and row
kernels are autograd Functions without a rule of their own, which ``vmap`` refuses.
:func:`vmap_fallbacks` names any operation that still loops; the campaign logs them and
``tests/test_campaign.py`` holds every batchable mechanism to none.

So each seed follows its single-seed run up to float rounding (``tests/test_campaign.py`` holds
them together over 100 steps). Each seed's checkpoint, ``log.jsonl`` and quick checks are the
loop's, in the loop's format: ``glitchlens train --resume`` continues any of them alone, and a
batch resumed from its checkpoints gives what the uninterrupted batch gives.

What cannot be batched this way (:func:`unbatchable`): a mechanism or option that draws from the
torch RNG during the step (dropout, Label's positions: one seed alone re-seeds it every step), the
sharpening regularisers (they read hooks), a beta ramp (it writes parameters in place) and the
LSTM. Such runs train one process per seed (:mod:`interp.studies.seed_groups`).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor
from torch.func import functional_call, vmap

import models
from interp.outputs import writable_dir
from interp.training.loop import _append_log, check_final_evaluation, lr_at, quick_eval, start_log
from interp.training.setup import (
    BatchSource, GracefulInterrupt, TrainConfig, deterministic_algorithms, output_lock, prepare_run,
    reuse_freed_memory,
)
from models import ModelConfig
from models.checkpoint import on_device
from models.tokens import as_token_ids

# The attention implementation of the batched model (see the module docstring)
BATCHED_IMPL = "reference"
# How torch names an operation without a batching rule when vmap loops over it (its fallback warning)
FALLBACK_WARNING = re.compile(r"not yet implemented the batching rule for ([\w:]+(?:\.\w+)*)")

# The losses and gradient norms of this many steps are read back from the device at once: reading
# them every step would wait for each step's kernels before launching the next.
READ_EVERY = 50


def unbatchable(model_cfg: ModelConfig, cfg: TrainConfig) -> str | None:
    """Why the seeds of this configuration cannot train as one batched model; None when they can."""
    if model_cfg.attention is None:
        return "the LSTM's recurrent kernel has no batching rule"
    dropout = [name for name in ("dropout", "embedding_dropout", "attention_dropout", "mlp_hidden_dropout")
               if getattr(model_cfg, name)]
    if dropout:
        return f"dropout ({', '.join(dropout)}) draws from the torch RNG, which a single-seed run re-seeds every step"
    if model_cfg.pos_embed == "label":
        return "Label's positions are drawn from the torch RNG, which a single-seed run re-seeds every step"
    if cfg.regulariser != "none":
        return "the sharpening regularisers read the attention through hooks"
    if cfg.beta_schedule != "learned":
        return "a beta ramp writes the threshold parameters in place"
    return None


@contextmanager
def vmap_fallbacks() -> Iterator[list[str]]:
    """The operations ``vmap`` runs seed by seed while the block runs (those without a batching
    rule), each named once in the order met, from torch's fallback warning, switched on for the
    block (torch ships it off); the block's other warnings are passed on."""
    found: list[str] = []
    torch._C._functorch._set_vmap_fallback_warning_enabled(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        torch._C._functorch._set_vmap_fallback_warning_enabled(False)
    for warning in caught:
        fallback = FALLBACK_WARNING.search(str(warning.message))
        if fallback is None:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        elif fallback[1] not in found:
            found.append(fallback[1])


@dataclass
class SeedRun:
    """One seed of a batch: its directory and its training config."""
    out: Path
    cfg: TrainConfig


class BatchStopped(Exception):
    """The batch stopped before its last step (``why``: the deadline, a stop signal, or a
    projected end past the deadline), each seed's checkpoint saved at ``step``; ``fallbacks``: the
    operations its first step ran seed by seed (:func:`vmap_fallbacks`)."""

    def __init__(self, step: int, steps_run: int = 0, step_seconds: float = 0.0, why: str = "stopped",
                 fallbacks: tuple[str, ...] = ()):
        self.step, self.steps_run, self.step_seconds, self.why = step, steps_run, step_seconds, why
        self.fallbacks = fallbacks
        super().__init__(f"{why} after step {step}, each seed's checkpoint saved")

    def __reduce__(self):
        return type(self), (self.step, self.steps_run, self.step_seconds, self.why, self.fallbacks)


@dataclass
class BatchOutcome:
    """What :func:`train_batched` did: the steps it ran from ``start``, the seconds of its loop and
    of its steps alone (without the quick checks and the checkpoints), the seeds that diverged (by
    directory, with the step), the trained models of the others, and the operations its first step
    ran seed by seed (:func:`vmap_fallbacks`)."""
    start: int
    steps_run: int
    seconds: float
    step_seconds: float
    diverged: dict[str, int]
    trained: dict[str, torch.nn.Module]
    fallbacks: tuple[str, ...]


def masked_mean_loss(logits: Float[Tensor, "batch pos d_vocab"], targets: Int[Tensor, "batch pos"],
                     scored: Bool[Tensor, "batch pos"]) -> Float[Tensor, ""]:
    """The loop's loss without indexing (no shapes that depend on the data, as vmap needs): the mean
    cross-entropy over the scored positions."""
    per_position = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    weights = scored.flatten().to(per_position.dtype)
    return (per_position * weights).sum() / weights.sum()


def optimizer_groups(named: list[tuple[str, Tensor]], cfg: TrainConfig) -> list[list[str]]:
    """The names of the parameters of :func:`interp.training.setup.make_optimizer`'s two groups
    (decayed, not decayed), in its order, so that the state indices agree."""
    decay = [name for name, p in named if cfg.decay_all_parameters or p.ndim >= 2]
    return [decay, [name for name, _ in named if name not in decay]]


class SeedStack:
    """The seeds' models as one: stacked parameters and buffers, one AdamW over the stacks, and the
    module whose forward runs under ``vmap`` (the same model with the attention of
    :data:`BATCHED_IMPL`, equal up to float rounding)."""

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig, seed_models: list[torch.nn.Module],
                 seed_optimizers: list[torch.optim.AdamW], device: torch.device):
        self.model_cfg, self.cfg, self.device = model_cfg, cfg, device
        self.base = on_device(models.build_model(replace(model_cfg, attention_impl=BATCHED_IMPL)), device).train()
        named = [(n, p) for n, p in seed_models[0].named_parameters() if p.requires_grad]
        self.groups = optimizer_groups(named, cfg)
        self.params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in seed_models]).requires_grad_()
                       for n in self.groups[0] + self.groups[1]}
        self.buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in seed_models])
                        for n, _ in seed_models[0].named_buffers()}
        self.saved_buffers = [n for n in self.buffers if n in seed_models[0].state_dict()]   # persistent ones
        self.optimizer = torch.optim.AdamW(
            [{"params": [self.params[n] for n in self.groups[0]], "weight_decay": cfg.weight_decay},
             {"params": [self.params[n] for n in self.groups[1]], "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.999))
        states = [opt.state_dict()["state"] for opt in seed_optimizers]
        if states[0]:   # resumed: each seed's AdamW state, stacked
            stacked = {i: {key: value if key == "step" else torch.stack([s[i][key] for s in states])
                           for key, value in states[0][i].items()} for i in states[0]}
            self.optimizer.load_state_dict({"state": stacked,
                                            "param_groups": self.optimizer.state_dict()["param_groups"]})
        self.seed_losses = vmap(self._loss)

    def _loss(self, params, buffers, x, y, scored):
        logits = functional_call(self.base, (params, buffers), (x,))
        return masked_mean_loss(logits, y, scored)

    def step(self, step: int, x: Int[Tensor, "seed batch pos"], y: Int[Tensor, "seed batch pos"],
             scored: Bool[Tensor, "seed batch pos"]) -> tuple[Float[Tensor, " seed"], Float[Tensor, " seed"]]:
        """One AdamW step of every seed on its own batch ``[seed, batch, pos]``; returns each seed's
        loss and gradient norm before clipping (on the device, unread)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(step, self.cfg)
        with torch.enable_grad():   # the loop runs without gradients; the seeds' forward records them
            losses = self.seed_losses(self.params, self.buffers, x, y, scored)
            grads = dict(zip(self.params, torch.autograd.grad(losses.sum(), list(self.params.values()),
                                                              materialize_grads=True)))   # unused: zeros, as grad gives
        norms = torch.stack([g.reshape(len(g), -1).norm(dim=1) for g in grads.values()], 1).norm(dim=1)
        max_norm = float("inf") if self.cfg.grad_clip is None else self.cfg.grad_clip
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)   # clip_grad_norm_'s, per seed
        for name, p in self.params.items():
            p.grad = grads[name] * scale.view(-1, *[1] * (grads[name].ndim - 1))
        self.optimizer.step()
        return losses.detach(), norms

    def seed_state(self, index: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Seed ``index``'s parameters and buffers, and its AdamW state as the loop saves it
        (:func:`interp.training.setup.optimizer_state_tensors`)."""
        weights = {n: p[index].detach() for n, p in self.params.items()}
        weights |= {n: self.buffers[n][index] for n in self.saved_buffers}
        state = {f"{i}.{key}": value if key == "step" else value[index]
                 for i, held in self.optimizer.state_dict()["state"].items() for key, value in held.items()}
        return weights, state


def train_batched(model_cfg: ModelConfig, seeds: list[SeedRun], device: str | torch.device = "cpu",
                  deadline: float | None = None, checkpoint_s: float = 120.0, until: int | None = None,
                  project_after_s: float | None = None) -> BatchOutcome:
    """Train ``seeds`` (the same configuration but for the seed) as one batched model on ``device``,
    each seed checkpointed, logged and quick-checked in its own directory as by
    :func:`interp.training.loop.train`. Every seed must be at the same step (fresh, or resumed from
    checkpoints of one step). ``deadline`` (``time.time()``) and a stop signal save every seed's
    checkpoint and raise :class:`BatchStopped`, as does, with ``project_after_s``, a batch whose steps
    so far (once they took that many seconds) project its end past the deadline; checkpoints are
    also saved every ``checkpoint_s`` seconds, and at ``until`` (a step of the schedule, as the
    loop's), where it returns."""
    cfg0 = seeds[0].cfg
    if any(dataclasses.replace(s.cfg, seed=0) != dataclasses.replace(cfg0, seed=0) for s in seeds):
        raise ValueError("the seeds of a batch must share every training option but the seed")
    why = unbatchable(model_cfg, cfg0)
    if why:
        raise ValueError(f"these runs cannot train as one batched model: {why}")
    stop = cfg0.steps if until is None else until
    reuse_freed_memory()
    device = torch.device(device)
    with ExitStack() as held:
        for seed in seeds:
            held.enter_context(output_lock(writable_dir(seed.out), " ".join(sys.argv)))   # as the loop's
        runs = [prepare_run(model_cfg, s.cfg, s.out, True, False, device, stop) for s in seeds]
        starts = {r.start for r in runs}
        if len(starts) > 1:
            raise ValueError(f"the seeds' checkpoints are at different steps ({sorted(starts)}): train them apart")
        start = starts.pop()
        check_final_evaluation(runs[0].model, cfg0)
        for seed, run in zip(seeds, runs):
            start_log(seed.out / "log.jsonl", run.resumed, start, False)
        stack = SeedStack(model_cfg, cfg0, [r.model for r in runs], [r.optimizer for r in runs], device)
        evaluator = runs[0].model   # a seed's own model, the config's implementation: loaded per seed to evaluate
        del runs
        return _run_batched(stack, seeds, evaluator, start, stop, deadline, checkpoint_s, project_after_s)


def _run_batched(stack: SeedStack, seeds: list[SeedRun], evaluator: torch.nn.Module, start: int, stop: int,
                 deadline: float | None, checkpoint_s: float, project_after_s: float | None) -> BatchOutcome:
    cfg = stack.cfg
    sources = [BatchSource(s.cfg) for s in seeds]
    diverged: dict[str, int] = {}
    pending: list[tuple[int, Tensor, Tensor]] = []   # (step, losses, norms) not yet read back
    pending_time: list[float] = []                    # their seconds since the start
    histories: list[list[dict]] = [[] for _ in seeds]
    interrupt = GracefulInterrupt()
    t0 = last_save = time.time()
    aside = 0.0   # seconds of quick checks and checkpoints
    fallbacks: list[str] = []   # what vmap ran seed by seed in the first step

    def seed_model(index: int) -> torch.nn.Module:
        weights, _ = stack.seed_state(index)
        evaluator.load_state_dict(weights)
        return evaluator

    def read_back() -> None:
        """The pending steps' records into each seed's log; a seed whose loss or norm is not finite
        has diverged: it is saved no more."""
        if not pending:
            return
        losses = torch.stack([p[1] for p in pending]).cpu()
        norms = torch.stack([p[2] for p in pending]).cpu()
        for row, (done, _, _) in enumerate(pending):
            for index, seed in enumerate(seeds):
                if str(seed.out) in diverged:
                    continue
                if not (torch.isfinite(losses[row, index]) and torch.isfinite(norms[row, index])):
                    diverged[str(seed.out)] = done
                    continue
                histories[index].append({"step": done, "loss": float(losses[row, index]), "lr": lr_at(done - 1, cfg),
                                         "time": pending_time[row]})
        pending.clear()
        pending_time.clear()

    def flush() -> None:
        read_back()
        for seed, history in zip(seeds, histories):
            _append_log(seed.out / "log.jsonl", history)

    def checkpoint(step: int, evaluations: dict[int, dict] | None = None) -> None:
        flush()
        for index, seed in enumerate(seeds):
            if str(seed.out) in diverged:
                continue
            weights, state = stack.seed_state(index)
            evaluator.load_state_dict(weights)
            meta = {"evaluation": evaluations[index]} if evaluations else {}
            with interrupt.shielded():
                models.save(seed.out, evaluator, training={"config": dataclasses.asdict(seed.cfg), "step": step},
                            training_state=state, metadata=meta)

    with interrupt, deterministic_algorithms(stack.device), torch.no_grad():
        for step in range(start, stop):
            batches = [source(step) for source in sources]
            for x, _, _ in batches:   # the check the model cannot make under vmap
                as_token_ids(x, stack.model_cfg.d_vocab)
            x, y, scored = (torch.stack(parts).to(stack.device) for parts in zip(*batches))
            if step == start:   # the first step names what vmap loops over, for the campaign's log
                with vmap_fallbacks() as fallbacks:
                    losses, norms = stack.step(step, x, y, scored)
            else:
                losses, norms = stack.step(step, x, y, scored)
            done = step + 1
            pending.append((done, losses, norms))
            pending_time.append(time.time() - t0)
            quick = cfg.task != "automaton" and cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps
            if quick or len(pending) >= READ_EVERY:
                read_back()
            if quick:
                began = time.time()
                for index, history in enumerate(histories):
                    if str(seeds[index].out) not in diverged and history:
                        history[-1]["eval"] = quick_eval(seed_model(index), cfg.eval_n, cfg.task)
                aside += time.time() - began
            if done == start + 1:   # the rate is projected from the steps after the first (its start-up)
                first_done, aside_then = time.time(), aside
            since_first = time.time() - first_done - (aside - aside_then)
            why = _why_stop(interrupt.requested, deadline, project_after_s, since_first, done - start - 1, stop - done)
            if why:
                interrupt.stopping()
                checkpoint(done)
                raise BatchStopped(done, done - start, time.time() - t0 - aside, why, tuple(fallbacks))
            if done < stop and time.time() - last_save >= checkpoint_s:
                began = time.time()
                checkpoint(done)
                last_save = time.time()
                aside += last_save - began
        read_back()
        step_seconds = time.time() - t0 - aside
        checkpoint(stop)
        trained = {}
        if stop == cfg.steps:
            finals = {}
            for index, seed in enumerate(seeds):
                if str(seed.out) in diverged:
                    continue
                finals[index] = quick_eval(seed_model(index), cfg.eval_n, cfg.task) if cfg.task != "automaton" else None
                if finals[index] is not None:
                    _append_log(seed.out / "log.jsonl", [{"step": cfg.steps, "eval": finals[index]}])
            checkpoint(cfg.steps, {i: e for i, e in finals.items() if e is not None})
            for index, seed in enumerate(seeds):
                if str(seed.out) not in diverged:
                    trained[str(seed.out)] = models.load(seed.out, device=stack.device).eval()
    return BatchOutcome(start, stop - start, time.time() - t0, step_seconds, diverged, trained, tuple(fallbacks))


def _why_stop(requested: bool, deadline: float | None, project_after_s: float | None, step_seconds: float,
              steps_run: int, steps_left: int) -> str | None:
    """Why a batch stops now, or None: a stop signal, the deadline passed, or (once ``steps_run``
    steps have taken ``step_seconds`` >= ``project_after_s``) its ``steps_left`` at that rate would
    end past the deadline, so that its process goes to runs that can finish."""
    if requested:
        return "stopped by a signal"
    if deadline is None:
        return None
    if time.time() >= deadline:
        return "stopped at the deadline"
    if project_after_s is not None and step_seconds >= project_after_s and steps_run and steps_left:
        projected = steps_left * step_seconds / steps_run
        if time.time() + projected > deadline:
            return f"cut: {steps_left} steps left would take about {projected:.0f} s, past the deadline"
    return None

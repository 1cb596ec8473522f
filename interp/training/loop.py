"""The training loop of ``glitchlens train``: AdamW, linear warm-up then cosine decay, gradient
clipping, optional attention-sharpening regularisers (flip-flop paper Sec. 5.2), periodic
evaluation, checkpoints, exact resume, and Ctrl-C (or SIGTERM, SIGHUP) that saves before exiting.

How a run flows, one way: :func:`train` checks what can be checked before step 1, builds the
batches (:class:`interp.training.setup.BatchSource`) and takes the output directory's lock
(:func:`interp.training.setup.output_lock`: one run per directory at a time); then
:func:`interp.training.setup.prepare_run` builds what the loop starts from (the model, its
optimiser, the threshold betas a ramp sets, the step to start at, from a checkpoint when
resuming); then the steps run here, each computed from the step alone (:func:`lr_at`,
:func:`beta_at`, :func:`sharpening_penalty`), checkpointed under the set-up's signal handler
(:class:`interp.training.setup.GracefulInterrupt`); then the final checkpoint and evaluation.

Determinism: the batch of step ``s`` is a pure function of ``(seed, s)`` and the torch
RNG (dropout, Label positions) is re-seeded from ``(seed, s)`` at every step, so a run
resumed from any checkpoint reproduces the uninterrupted run bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import models
from interp.evaluate import evaluate_splits, task_vocab
from interp.metrics.attention import effective_entropy, l1_normalised
from interp.outputs import check_free, new_file, open_append, read_bytes
from interp.outputs import record as record_written
from interp.outputs import writable_dir
from interp.tasks import CANONICAL_SEQ_LEN, get_task
from interp.training.setup import (
    BatchSource, GracefulInterrupt, Run, TrainConfig, TrainingDiverged, TrainingInterrupted, deterministic_algorithms,
    optimizer_state_tensors, output_lock, prepare_run, reuse_freed_memory,
)
from models import ModelConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def step_seed(seed: int, step: int) -> int:
    return int(np.random.SeedSequence([seed, step, 1]).generate_state(1)[0])


def beta_at(step: int, cfg: TrainConfig) -> float:
    """The threshold scale of a ``ramp`` schedule during ``step``: 0 (tau = 0, every positive score
    survives, so the task is learned first), then linear to ``beta_final``, then held."""
    rise = (step - cfg.beta_ramp_start) / (cfg.beta_ramp_end - cfg.beta_ramp_start)
    return cfg.beta_final * min(1.0, max(0.0, rise))


def sharpening_penalty(patterns: list[torch.Tensor], kind: str) -> torch.Tensor:
    """Mean over layers, heads and queries of a sparsity-promoting term of the attention
    weights (flip-flop paper Sec. 5.2): entropy H(a) (the diagnostics' effective entropy), or
    -||a||_2, or -||a||_inf. Signed (differential) weights enter through |a| / ||a||_1; empty
    rows contribute 0, and their gradient is finite (see :func:`effective_entropy`)."""
    terms = []
    for pattern in patterns:
        if kind == "entropy":
            terms.append(effective_entropy(pattern).mean())
        elif kind == "l2":
            terms.append(-l1_normalised(pattern).norm(dim=-1).mean())
        else:
            terms.append(-l1_normalised(pattern).amax(-1).mean())
    return torch.stack(terms).mean()


def train(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    out: str | Path,
    resume: bool = False,
    progress: bool = True,
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    device: str | torch.device = "cpu",
    until: int | None = None,
) -> torch.nn.Module:
    """Train a model on ``device`` and checkpoint it to ``out``; returns the trained model (eval
    mode). The model is initialised on the CPU and then moved, so a seed gives the same initial
    weights on every device (the run itself differs between devices by float rounding).

    With ``resume=True`` and a checkpoint in ``out``, training continues from its step;
    the model and training configs must equal the checkpoint's. A checkpoint already in
    ``out`` is otherwise an error unless ``overwrite=True``. Everything that can be checked
    (the output directory, the data file, the final evaluation) is checked before step 1.
    A non-finite loss, gradient or parameter stops the run with :class:`TrainingDiverged`
    before anything non-finite is saved.

    ``until`` stops after that step of the schedule (which stays ``cfg.steps`` long) and saves
    a checkpoint without the final evaluation; ``resume=True`` goes on from it exactly, as
    from a Ctrl-C (the batch of a step depends only on the seed and the step).
    """
    out = Path(out)
    stop = cfg.steps if until is None else until
    if not 1 <= stop <= cfg.steps:
        raise ValueError(f"until must be a step from 1 to the run's {cfg.steps} steps, got {until}")
    if cfg.regulariser != "none" and model_cfg.attention is None:
        raise ValueError("attention-sharpening regularisers need an attention model, not the LSTM")
    if task_vocab(cfg.task) > model_cfg.d_vocab:   # a checkpoint's task always fits its vocabulary
        raise ValueError(f"the {cfg.task} task has {task_vocab(cfg.task)} tokens; the model's vocabulary has only "
                         f"{model_cfg.d_vocab} (d_vocab)")
    reuse_freed_memory()
    batches = BatchSource(cfg)
    with output_lock(writable_dir(out), " ".join(sys.argv)):  # one writer per --out
        run = prepare_run(model_cfg, cfg, out, resume, overwrite, device, stop)
        check_final_evaluation(run.model, cfg)
        return _run_steps(run, model_cfg, cfg, out, progress, metadata, overwrite, device, stop, batches)


def check_final_evaluation(model: torch.nn.Module, cfg: TrainConfig) -> None:
    """One sequence per canonical split now, rather than a failure after all the training."""
    if cfg.task == "automaton":
        return
    try:
        quick_eval(model, 1, cfg.task)
    except ValueError as err:
        longest = CANONICAL_SEQ_LEN if cfg.task == "flipflop" else get_task(cfg.task).n_ctx
        raise ValueError(f"the evaluation on the canonical splits (T = {longest}) would fail after "
                         f"training: {err} (--n-ctx {longest} sizes the model for them)") from None


def _run_steps(run: Run, model_cfg: ModelConfig, cfg: TrainConfig, out: Path, progress: bool,
               metadata: dict[str, Any] | None, overwrite: bool, device: str | torch.device, stop: int,
               batches: BatchSource) -> torch.nn.Module:
    """:func:`train`'s steps from ``run.start`` to ``stop``, once it holds ``out``."""
    model, optimizer, betas, start = run.model, run.optimizer, run.betas, run.start
    log_file = out / "log.jsonl"
    history: list[dict[str, Any]] = []
    kept_step = start if run.resumed else None

    interrupt = GracefulInterrupt()

    def checkpoint(step: int, evaluation: dict | None = None) -> Path:
        nonlocal kept_step
        non_finite = models.checkpoint.non_finite_tensors(model.state_dict())
        if non_finite:
            raise TrainingDiverged(step, f"parameter {non_finite[0]}", out, kept_step)
        training = {"config": dataclasses.asdict(cfg), "step": step}
        meta = {**(metadata or {}), **({"evaluation": evaluation} if evaluation else {})}
        with interrupt.shielded():   # a signal during the save waits for its end
            path = models.save(out, model, training=training,
                               training_state=optimizer_state_tensors(optimizer), metadata=meta)
        kept_step = step
        return path

    patterns: list[torch.Tensor] = []
    reg_hooks = []
    if cfg.regulariser != "none":
        reg_hooks = [(f"blocks.{layer}.attn.hook_pattern", lambda a, hook: patterns.append(a))
                     for layer in range(model_cfg.n_layers)]
    max_grad_norm = math.inf if cfg.grad_clip is None else cfg.grad_clip
    start_log(log_file, run.resumed, start, overwrite)

    bar = tqdm(range(start, stop), initial=start, total=cfg.steps, disable=not progress,
               desc=f"train {model_cfg.model}", dynamic_ncols=True)
    t0 = time.time()
    with (interrupt, model.hooks(fwd_hooks=reg_hooks),
          deterministic_algorithms(next(model.parameters()).device)):
        for step in bar:
            torch.manual_seed(step_seed(cfg.seed, step))
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg)
            for beta in betas:
                beta.fill_(beta_at(step, cfg))
            x, y, scored = (t.to(device) for t in batches(step))
            patterns.clear()
            if cfg.loss == "clean" or cfg.task == "automaton":
                logits = model.unembed(model(x, return_type="normalized")[scored])
                loss = F.cross_entropy(logits.float(), y[scored])
            else:
                loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
            total = loss
            if patterns and step >= cfg.reg_start:
                total = loss + cfg.reg_coef * sharpening_penalty(patterns, cfg.regulariser)
            optimizer.zero_grad(set_to_none=True)
            total.backward()
            # the norm is measured even without clipping (max inf): a non-finite one stops the
            # run before the update can spread it into the parameters
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
            done = step + 1
            record = {"step": done, "loss": loss.item(), "lr": lr_at(step, cfg), "time": time.time() - t0}
            finite_loss = math.isfinite(total.item())
            if not (finite_loss and math.isfinite(grad_norm)):
                _append_log(log_file, history)
                raise TrainingDiverged(done, "the gradient norm" if finite_loss else "the loss", out, kept_step)
            optimizer.step()

            bar.set_postfix(loss=f"{record['loss']:.4f}")
            if cfg.task != "automaton" and cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
                record["eval"] = quick_eval(model, cfg.eval_n, cfg.task)
                bar.write(f"step {done}: " + format_quick_eval(record["eval"]))
            history.append(record)
            _append_log(log_file, history)   # every step, so that `tail -f log.jsonl` follows the run
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
                _append_log(log_file, history)
                checkpoint(done)
            if interrupt.requested:
                interrupt.stopping()
                _append_log(log_file, history)
                raise TrainingInterrupted(done, checkpoint(done), signum=interrupt.signum)
    bar.close()
    _append_log(log_file, history)
    if stop < cfg.steps:
        if kept_step != stop:
            checkpoint(stop)
        return model.eval()
    # Saved before the final evaluation, so that a Ctrl-C during it loses only the evaluation.
    path = checkpoint(cfg.steps)
    if cfg.task != "automaton":
        try:
            final_eval = quick_eval(model, cfg.eval_n, cfg.task, progress)
        except KeyboardInterrupt:
            raise TrainingInterrupted(cfg.steps, path, during="during the final evaluation, after step") from None
        _append_log(log_file, [{"step": cfg.steps, "eval": final_eval}])
        checkpoint(cfg.steps, final_eval)
    return model.eval()


def quick_eval(model, n: int, task: str = "flipflop", progress: bool = False) -> dict[str, dict]:
    """Read (answer) error rate and sequence accuracy on the first ``n`` sequences of each of the
    task's canonical splits (``progress``: a bar on stderr)."""
    model.eval()
    results = {name: r.to_dict() for name, r in evaluate_splits(model, n=n, task=task, progress=progress).items()}
    model.train()
    return results


def format_quick_eval(results: dict[str, dict]) -> str:
    return "  ".join(f"{name}: read acc {1 - r['error_rate']:.4f}, seq acc {r['sequence_accuracy']:.3f}"
                     for name, r in results.items())


def start_log(log_file: Path, resumed: bool, start: int, overwrite: bool) -> None:
    """A run's ``log.jsonl`` before its first step: once all checks passed, a fresh run starts a
    fresh log, never mixed with a replaced run's; a resumed run drops the steps logged after its
    checkpoint (the process was killed), which it runs and logs again."""
    out = log_file.parent
    if not resumed:
        check_free(out, [log_file.name], overwrite)   # a log.jsonl of the user's is never deleted unasked
        log_file.unlink(missing_ok=True)
        open_append(log_file).close()   # there from the start, for `tail -f`
        record_written(out, [log_file.name])
    else:
        _trim_log(log_file, start)


def _trim_log(path: Path, step: int) -> None:
    """Drop the records of ``path`` past ``step`` (rewritten atomically; a link is refused)."""
    if not os.path.lexists(path):
        return
    with open_append(path):   # refuses a symbolic link before anything is read
        pass
    lines = read_bytes(path, "training log").decode(errors="replace").splitlines(keepends=True)
    kept = [line for line in lines if _logged_step(line) <= step]
    if len(kept) < len(lines):
        fd, tmp = new_file(path.parent, f".{path.name}.")   # a fresh file, never a link
        with os.fdopen(fd, "w") as f:
            f.write("".join(kept))
        os.replace(tmp, path)


def _logged_step(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _append_log(path: Path, history: list[dict[str, Any]]) -> None:
    if not history:
        return
    with open_append(path) as f:
        for record in history:
            f.write(json.dumps(record) + "\n")
    history.clear()

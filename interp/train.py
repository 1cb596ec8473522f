"""Training on flip-flop tasks: AdamW, linear warm-up then cosine decay, gradient clipping,
optional attention-sharpening regularisers (flip-flop paper Sec. 5.2), periodic
evaluation, checkpoints, exact resume, and Ctrl-C (or SIGTERM, SIGHUP) that saves before
exiting; one run per output directory at a time (a lock file, :func:`interp.train_setup.output_lock`).

Determinism: the batch of step ``s`` is a pure function of ``(seed, s)`` and the torch
RNG (dropout, Label positions) is re-seeded from ``(seed, s)`` at every step, so a run
resumed from any checkpoint reproduces the uninterrupted run bit for bit.

What the loop is built from (the config, batches, optimiser, regulariser, output checks,
Ctrl-C) is in :mod:`interp.train_setup`, and imports from here too.
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
from interp.outputs import check_free, new_file, open_append
from interp.outputs import record as record_written
from interp.outputs import writable_dir
from interp.tasks import CANONICAL_SEQ_LEN, get_task
from interp.train_setup import (
    BatchSource, GracefulInterrupt, TrainConfig, TrainingDiverged, TrainingInterrupted, beta_at,
    checked_training_state, deterministic_algorithms, freeze_betas, load_optimizer_state, make_optimizer,
    optimizer_state_tensors, output_lock, prepare_output, reuse_freed_memory, saved_configs,
    sharpening_penalty,
)
from models import ModelConfig
from models.checkpoint import on_device


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def step_seed(seed: int, step: int) -> int:
    return int(np.random.SeedSequence([seed, step, 1]).generate_state(1)[0])


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
        return _train_locked(model_cfg, cfg, out, resume, progress, metadata, overwrite, device, stop, batches)


def _train_locked(model_cfg: ModelConfig, cfg: TrainConfig, out: Path, resume: bool, progress: bool,
                  metadata: dict[str, Any] | None, overwrite: bool, device: str | torch.device, stop: int,
                  batches: BatchSource) -> torch.nn.Module:
    """:func:`train`'s run, once it holds ``out``."""
    saved = prepare_output(out, resume, overwrite)
    if saved is not None and saved["training"]["step"] > cfg.steps:
        raise ValueError(f"{out}: its checkpoint is at step {saved['training']['step']}, past --steps {cfg.steps}: "
                         "there is nothing to train (a run never saves past its steps: the file was edited)")
    torch.manual_seed(cfg.seed)
    model = on_device(models.build_model(model_cfg), device)
    betas = freeze_betas(model, cfg)
    optimizer = make_optimizer(model, cfg)
    start = 0
    if saved is not None:
        saved_model, saved_train = saved_configs(saved)
        if saved_model != model_cfg:
            fields = [f"{k} {v!r} (checkpoint: {saved_model.to_dict().get(k)!r})"
                      for k, v in model_cfg.to_dict().items() if saved_model.to_dict().get(k) != v]
            raise ValueError(f"{out}: cannot resume, the model config differs from the checkpoint's: "
                             f"{'; '.join(fields)} (`glitchlens train --out DIR --resume` alone takes its own)")
        if saved_train != cfg.semantic_dict():
            diff = {k: (saved_train.get(k), v) for k, v in cfg.semantic_dict().items() if saved_train.get(k) != v}
            raise ValueError(f"{out}: cannot resume, training options differ from the checkpoint's: {diff}")
        model = models.load(out, device=device)
        betas = freeze_betas(model, cfg)
        optimizer = make_optimizer(model, cfg)
        start = saved["training"]["step"]
        load_optimizer_state(optimizer, checked_training_state(out, start))
        if start > stop:
            raise ValueError(f"{out}: its checkpoint is at step {start}, past until={stop}")
    if cfg.task != "automaton":
        try:  # one sequence per split now, rather than a failure after all the training
            quick_eval(model, 1, cfg.task)
        except ValueError as err:
            longest = CANONICAL_SEQ_LEN if cfg.task == "flipflop" else get_task(cfg.task).n_ctx
            raise ValueError(f"the evaluation on the canonical splits (T = {longest}) would fail after "
                             f"training: {err} (--n-ctx {longest} sizes the model for them)") from None
    model.train()

    log_file = out / "log.jsonl"
    history: list[dict[str, Any]] = []
    kept_step = start if saved is not None else None

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
    if saved is None:  # all checks passed: a fresh run starts a fresh log, never mixed with a replaced run's
        check_free(out, [log_file.name], overwrite)   # a log.jsonl of the user's is never deleted unasked
        log_file.unlink(missing_ok=True)
        open_append(log_file).close()   # there from the start, for `tail -f`
        record_written(out, [log_file.name])
    else:  # steps logged after the checkpoint (the process was killed) are run and logged again
        _trim_log(log_file, start)

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


def _trim_log(path: Path, step: int) -> None:
    """Drop the records of ``path`` past ``step`` (rewritten atomically; a link is refused)."""
    if not os.path.lexists(path):
        return
    with open_append(path):   # refuses a symbolic link before anything is read
        pass
    lines = path.read_text().splitlines(keepends=True)
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

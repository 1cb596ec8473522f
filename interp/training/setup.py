"""What a training run is built from, before its loop (:mod:`interp.training.loop`) runs: the
config, the batches, the model and optimiser it starts from (:func:`prepare_run`, from a
checkpoint when resuming) and their saved state, the output directory and its lock, Ctrl-C and
divergence, and the allocator setting that keeps large attention tensors cheap. Nothing here
imports the loop.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import models
from interp.outputs import read_json, writable_dir
from interp.tasks import SPLITS, check_draw_size, get_task, read_mask, sample_automaton, train_batch
from models import ModelConfig
from models.checkpoint import on_device
from models.config import check_int, check_known_fields, is_finite_number

REGULARISERS = ("none", "entropy", "l2", "linf")
BETA_SCHEDULES = ("learned", "ramp")


@dataclass
class TrainConfig:
    steps: int = 1000
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.1
    decay_all_parameters: bool = False  # decay every parameter, biases and gains too (the TRA authors' code)
    warmup: int = 50
    min_lr_ratio: float = 0.0
    grad_clip: float | None = 1.0  # max global gradient norm; None: no clipping (the TRA authors' code)
    seq_len: int = 512
    loss: str = "clean"            # "clean": only the bit after each r; "generative": every next token
    task: str = "flipflop"         # a registered task (interp.tasks.task_names()): flipflop, automaton, counting, ...
    mixture: bool = False          # long-tailed mixture: uniform over FFL(0.8), FFL(0.98), FFL(0.1)
    p_bottom: float = 0.5          # automaton task: probability of the no-op input
    regulariser: str = "none"      # attention sharpening: "entropy" | "l2" (neg. L2) | "linf" (neg. L-inf)
    reg_coef: float = 0.0
    reg_start: int = 0
    # trela/TDA threshold: "learned" (beta trained from beta_init) or "ramp" (beta fixed, not learned:
    # 0 until beta_ramp_start, rising linearly to beta_final at beta_ramp_end, then held there)
    beta_schedule: str = "learned"
    beta_final: float = 1.0
    beta_ramp_start: int = 0
    beta_ramp_end: int = 0
    seed: int = 0
    data_file: str | None = None   # train on a local JSONL/Parquet file instead of fresh samples
    eval_every: int = 0            # 0: evaluate once at the end
    eval_n: int = 200
    checkpoint_every: int = 0      # 0: checkpoint only at the end (and on Ctrl-C)

    def __post_init__(self):
        if self.loss not in ("clean", "generative"):
            raise ValueError(f"loss must be 'clean' or 'generative', got {self.loss!r}")
        task = get_task(self.task)   # a one-line error naming the registered tasks
        if self.beta_schedule not in BETA_SCHEDULES:
            raise ValueError(f"beta_schedule must be one of {BETA_SCHEDULES}, got {self.beta_schedule!r}")
        if self.beta_schedule == "ramp" and not 0 <= self.beta_ramp_start < self.beta_ramp_end <= self.steps:
            raise ValueError(f"a beta ramp needs 0 <= beta_ramp_start < beta_ramp_end <= steps, got "
                             f"{self.beta_ramp_start}, {self.beta_ramp_end} and steps {self.steps}")
        if not is_finite_number(self.beta_final):
            raise ValueError(f"beta_final must be a number, got {self.beta_final!r}")
        if self.regulariser not in REGULARISERS:
            raise ValueError(f"regulariser must be one of {REGULARISERS}, got {self.regulariser!r}")
        for name in ("steps", "batch_size", "seq_len", "eval_n"):
            check_int(name, getattr(self, name))
        for name in ("warmup", "reg_start", "seed", "eval_every", "checkpoint_every"):
            check_int(name, getattr(self, name), minimum=0)
        if not is_finite_number(self.lr) or self.lr <= 0:
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.decay_all_parameters, bool):
            raise ValueError(f"decay_all_parameters must be true or false, got {self.decay_all_parameters!r}")
        if self.grad_clip is not None and (not is_finite_number(self.grad_clip) or self.grad_clip <= 0):
            raise ValueError(f"grad_clip must be a positive number (None: no clipping), got {self.grad_clip!r}")
        for name in ("weight_decay", "reg_coef"):
            if not is_finite_number(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")
        for name in ("min_lr_ratio", "p_bottom"):
            if not is_finite_number(getattr(self, name)) or not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}")
        if self.task == "flipflop" and (self.seq_len < 4 or self.seq_len % 2):
            raise ValueError(f"seq_len {self.seq_len}: flip-flop sequences are an even number >= 4 of tokens")
        check_draw_size(self.batch_size, self.seq_len, "sequences per batch (batch_size)")
        if self.task not in ("flipflop", "automaton"):
            task.sample(1, self.seq_len, 0, **task.train_params)   # a length the task cannot make is refused now
        largest = max(split.size for split in SPLITS.values())
        if self.task == "flipflop" and self.eval_n > largest:   # more would evaluate the same sequences, slowly
            raise ValueError(f"eval_n {self.eval_n:,}: the canonical splits hold at most {largest:,} sequences")
        if self.task != "flipflop" and (self.data_file is not None or self.mixture):
            raise ValueError(f"the {self.task} task samples its own inputs: it takes neither a data file nor mixture "
                             "(both are flip-flop's)")
        if self.mixture and self.data_file is not None:
            raise ValueError("mixture samples fresh sequences and a data file replaces sampling: choose one")

    # Fields that change how the run is logged, not what it computes: a resume may differ in these.
    LOGGING_FIELDS = ("eval_every", "eval_n", "checkpoint_every")

    def semantic_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in self.LOGGING_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """The config a checkpoint recorded; fields added since it was written take their defaults."""
        check_known_fields(cls, data, "training config")
        return cls(**data)


def saved_configs(saved: dict[str, Any]) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and the non-logging training options of a training checkpoint's
    config, with fields added since it was written at their defaults."""
    return ModelConfig.from_dict(saved["model"]), TrainConfig.from_dict(saved["training"]["config"]).semantic_dict()


class BatchSource:
    """Inputs, targets and the scored-position mask of each step, as ``[batch, pos]`` tensors."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.file_tokens = None
        if cfg.data_file is not None:
            from interp.tasks import read_sequences

            self.file_tokens = read_sequences(cfg.data_file)
            length = self.file_tokens.shape[1]
            if length != cfg.seq_len:
                raise ValueError(f"{cfg.data_file}: its sequences have {length} tokens, but seq_len is "
                                 f"{cfg.seq_len} (the model's n_ctx follows it): pass --seq-len {length}")

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        if cfg.task == "automaton":
            inputs, states = sample_automaton(cfg.batch_size, cfg.seq_len, cfg.p_bottom, rng=[cfg.seed, step])
            x, y = torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(states.astype(np.int64))
            return x, y, torch.ones_like(x, dtype=torch.bool)
        if cfg.task != "flipflop":
            task = get_task(cfg.task)
            x, y, scored = (torch.from_numpy(np.ascontiguousarray(a)) for a in
                            task.model_io(task.train_batch(cfg.batch_size, step, cfg.seed, cfg.seq_len)))
            scored = torch.ones_like(scored) if cfg.loss == "generative" else scored
            return x.long(), y.long(), scored
        if self.file_tokens is not None:
            rows = (step * cfg.batch_size + np.arange(cfg.batch_size)) % len(self.file_tokens)
            tokens = self.file_tokens[rows]
        else:
            tokens = train_batch(cfg.batch_size, step, cfg.seed, cfg.seq_len, cfg.mixture)
        tokens = torch.from_numpy(tokens.astype(np.int64))
        x, y = tokens[:, :-1], tokens[:, 1:]
        if cfg.loss == "generative":
            return x, y, torch.ones_like(x, dtype=torch.bool)
        return x, y, torch.from_numpy(read_mask(tokens[:, :-1].numpy()))


def freeze_betas(model: torch.nn.Module, cfg: TrainConfig) -> list[torch.nn.Parameter]:
    """With a ``ramp`` schedule, take every threshold layer's beta out of training (the schedule
    sets it, as the TDA authors' code keeps beta a fixed hyperparameter) and return them; an
    error for a model without a threshold layer. With ``learned``: nothing to freeze."""
    from models.attention.tda import threshold_betas

    if cfg.beta_schedule == "learned":
        return []
    betas = threshold_betas(model)
    if not betas:
        raise ValueError(f"beta_schedule {cfg.beta_schedule!r} sets the threshold of trela and TDA layers; this "
                         "model has none (use the default, learned)")
    for beta in betas:
        beta.requires_grad_(False)
    return betas


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm gains, biases and scalars are not decayed),
    or on every parameter with ``decay_all_parameters`` (as ``AdamW(model.parameters())`` in the
    TRA authors' notebook; the second group is then empty)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if cfg.decay_all_parameters or p.ndim >= 2]
    no_decay = [p for p in params if not cfg.decay_all_parameters and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999))


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    return {f"{idx}.{key}": value for idx, state in optimizer.state_dict()["state"].items()
            for key, value in state.items()}


def load_optimizer_state(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})


def checked_training_state(out: Path, step: int) -> dict[str, torch.Tensor]:
    """The optimiser state saved in ``out``, after checking that it belongs to ``step``: AdamW
    counts its updates per parameter (``<index>.step``), and every parameter is updated at every
    step, so each count must equal the checkpoint's step. A hand-edited step would otherwise
    resume the later optimiser state at an earlier point of the schedule (the learning rate and
    the beta ramp are functions of the step and of the training config, which the resume has
    checked already)."""
    state = models.checkpoint.load_training_state(out)
    counts = {name: value for name, value in state.items() if name.endswith(".step")}
    wrong = sorted({float(v) for v in counts.values()} - {float(step)}) or (step > 0 and not counts)
    if wrong:
        found = ", ".join(f"{v:g}" for v in wrong) if isinstance(wrong, list) else "none"
        raise ValueError(f"{out}: cannot resume: the checkpoint is at step {step} but its optimiser state has "
                         f"counted {found} updates (the step or the state was edited, or they come from different "
                         "saves): restore the checkpoint, or start again with --overwrite")
    return state


def prepare_output(out: Path, resume: bool, overwrite: bool) -> dict[str, Any] | None:
    """Check, before any training, that ``out`` can take the run; returns the checkpoint
    config to resume from (None: a fresh run). A directory that already holds a checkpoint
    is only continued (``resume``) or replaced (``overwrite``), never silently both."""
    writable_dir(out)
    if not (out / models.checkpoint.CONFIG_FILE).exists():
        return None
    saved = models.read_config(out)
    if resume:
        if saved["training"] is None:
            raise ValueError(f"{out} holds a checkpoint without training state; it cannot be resumed")
        return saved
    if not overwrite:
        step = f", step {saved['training']['step']}" if saved["training"] else ""
        raise ValueError(f"{out} already holds a checkpoint ({saved['model']['model']}{step}): pass --resume "
                         "to continue it or --overwrite to replace it")
    return None


@dataclass
class Run:
    """What the loop starts from (:func:`prepare_run`): the model on its device in training mode,
    its optimiser, the threshold betas a ``ramp`` schedule sets, the step to start at, and whether
    a checkpoint was resumed."""
    model: torch.nn.Module
    optimizer: torch.optim.AdamW
    betas: list[torch.nn.Parameter]
    start: int
    resumed: bool


def prepare_run(model_cfg: ModelConfig, cfg: TrainConfig, out: Path, resume: bool, overwrite: bool,
                device: str | torch.device, stop: int) -> Run:
    """Check ``out`` (:func:`prepare_output`), build the model (seeded, on the CPU, then moved, so a
    seed gives the same initial weights on every device) and its optimiser, or, resuming, load
    the checkpoint's model and optimiser state after checking that the configs are the checkpoint's."""
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
    model.train()
    return Run(model, optimizer, betas, start, resumed=saved is not None)


# The signals that stop a run cleanly: Ctrl-C, ``kill`` and a closed terminal or ssh session
# (SIGHUP is treated as SIGTERM: a run nobody watches any more saves and stops).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class GracefulInterrupt:
    """Turns the first stop signal (:data:`STOP_SIGNALS`) into a flag checked between steps (so
    the checkpoint is never taken mid-update); a second one interrupts at once, except during
    :meth:`shielded` (a checkpoint being saved), where signals wait until the save is done, and
    after :meth:`stopping`, where they are ignored: a storm of Ctrl-C never cuts a save short."""

    def __init__(self):
        self.requested = False
        self.signum = signal.SIGINT   # the first stop signal received
        self.leaving = False
        self.previous: dict = {}      # the handlers replaced, while inside the block

    def __enter__(self):
        try:
            self.previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        except ValueError:  # not the main thread: leave signals alone
            self.previous = {}
        return self

    def _handle(self, signum, frame):
        if self.leaving:
            return
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum

    @contextmanager
    def shielded(self):
        """The stop signals held back (blocked, then delivered) for the block."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if self.previous else None
        try:
            yield
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def stopping(self) -> None:
        """The run saves and stops now: further stop signals change nothing."""
        self.leaving = True

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


class TrainingInterrupted(Exception):
    def __init__(self, step: int, path: Path, during: str = "after step", signum: int = signal.SIGINT):
        self.step, self.path, self.during, self.signum = step, path, during, int(signum)
        name = signal.Signals(self.signum).name
        super().__init__(f"interrupted ({name}) {during} {step}; checkpoint saved to {path} (resume with --resume)")

    def __reduce__(self):  # a sweep's worker sends it to the parent pickled
        return type(self), (self.step, self.path, self.during, self.signum)


LOCK_FILE = ".glitchlens.lock"


@contextmanager
def output_lock(out: Path, command: str = "glitchlens"):
    """Hold ``out`` for one writer for the block: a lock file (:data:`LOCK_FILE`) created
    atomically and exclusively, holding this process's pid, host, command and start time. A second writer is
    refused with a ValueError naming the first. A lock whose pid is dead on this host is stale
    (a writer killed with kill -9) and taken over; one from another host is never guessed
    stale: remove it by hand once that run is gone."""
    lock = Path(out) / LOCK_FILE
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    # written whole beside it, then linked to the lock's name: link(2) fails if the name exists, like
    # O_EXCL, and a reader never finds a lock without its record
    fd, tmp = tempfile.mkstemp(prefix=f"{LOCK_FILE}.", dir=out)
    with os.fdopen(fd, "w") as f:
        json.dump(mine, f)
    try:
        for _ in range(2):   # a stale lock is removed once, then taken
            try:
                os.link(tmp, lock)
                break
            except FileExistsError:
                holder = _lock_holder(lock)
                if holder is not None and not _stale(holder):
                    raise ValueError(f"{out} is being written by another run: pid {holder.get('pid')} on "
                                     f"{holder.get('host')}, started {holder.get('started')} "
                                     f"({holder.get('command')}); wait for it, or remove {lock} if it is "
                                     "gone") from None
                lock.unlink(missing_ok=True)
        else:
            raise ValueError(f"{out}: could not take its lock file {lock}; remove it if no run is writing there")
    finally:
        os.unlink(tmp)
    try:
        yield
    finally:
        if _lock_holder(lock) == mine:   # never another writer's lock
            lock.unlink(missing_ok=True)


def _lock_holder(lock: Path) -> dict | None:
    """The lock's record; None when it is gone or holds no record (then it is stale). A lock
    that is a symbolic link, a FIFO, a device or a huge file is no lock GlitchLens wrote: a
    ValueError saying to remove it, never a read that blocks or never ends."""
    if not os.path.lexists(lock):
        return None
    if lock.is_symlink():
        raise ValueError(f"{lock} is a symbolic link, not a lock glitchlens wrote; remove it")
    try:
        holder = read_json(lock, "lock file", LOCK_BYTES)
    except ValueError as err:
        if not lock.is_file() or lock.stat().st_size > LOCK_BYTES:
            raise ValueError(f"{err}; it is not a lock glitchlens wrote: remove it") from None
        return None   # a torn or garbled record: stale
    return holder if isinstance(holder, dict) else None


LOCK_BYTES = 4096   # a lock's record is one line of JSON
PID_MAX = 1 << 22   # Linux's largest pid_max; a larger pid names no process


def _stale(holder: dict) -> bool:
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    if pid > PID_MAX:   # os.kill would raise OverflowError past the C long range
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:   # alive, another user's
        return False
    return False


class TrainingDiverged(RuntimeError):
    """The loss, the gradients or the parameters stopped being finite. Nothing of the
    diverged run past ``kept_step`` is saved."""

    def __init__(self, step: int, what: str, out: Path, kept_step: int | None):
        self.step, self.what, self.out, self.kept_step = step, what, out, kept_step
        kept = (f"{out} keeps the last finite checkpoint, of step {kept_step}" if kept_step is not None else
                f"no checkpoint of this run was saved, and {out} is as it was (--checkpoint-every N keeps "
                "intermediate ones)")
        super().__init__(f"training diverged at step {step}: {what} is NaN or infinite; {kept}. "
                         "Lower --lr or raise --warmup")

    def __reduce__(self):  # a sweep's worker sends it to the parent pickled
        return type(self), (self.step, self.what, self.out, self.kept_step)


def reuse_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to 128 MiB for reuse; returns whether it took.

    By default glibc hands every freed block above 32 MiB straight back to the kernel, and
    the float32 ``[batch, head, query, key]`` tensors of a ``mini`` model at T = 512, batch 8
    are exactly 32 MiB plus a header: each new one is page-faulted in afresh, which cost the
    attention mechanisms that build them about a third of their CPU step. Off glibc this
    does nothing. The price is a resident size that stays at its peak.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 128 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


@contextmanager
def deterministic_algorithms(device: torch.device):
    """PyTorch's deterministic algorithms for the block, on a CPU device (then restored).

    Indexing's backward (the embedding ``W_E[tokens]``) accumulates rows in a thread-dependent
    order on more than one CPU thread: two threads gave another ``W_E`` gradient on most steps,
    so the same command gave another checkpoint. The deterministic path sums in token order,
    which is what one thread does, so one-thread runs are unchanged. On a GPU some kernels have
    no deterministic version; there the run keeps PyTorch's defaults.
    """
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)

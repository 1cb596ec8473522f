"""Evaluation: glitch rates and full-sequence accuracy on flip-flop splits.

A *read* is the bit after an ``r``. The model sees ``tokens[:, :-1]`` and predicts, at
each ``r``, the next token by argmax over the whole vocabulary; the unembedding is
applied only at those positions. A sequence is correct when every one of its reads is
(the TRA paper's Table 1 metric).

A model trained on the automaton task (vocabulary 3) is scored instead on fresh automaton
sequences: the state predicted at every position (:func:`evaluate_automaton`). Which task a
checkpoint was trained on is recorded in it (:func:`checkpoint_task`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from scipy.special import betaincinv
from tqdm.auto import tqdm

from interp.metrics import read_table
from interp.tasks import (
    D_VOCAB, D_VOCAB_AUTOMATON, SPLITS, FlipFlopFormatError, check_tokens, load_split,
    sample_automaton,
)
from interp.tasks import Task, get_task
from interp.tasks.builtin import AUTOMATON_EVAL_SEED
from models.config import check_int
from models.workers import worker_map

# Sequences' worth of tokens per evaluation batch. At d_model 64 on the CPU, 16 beats 64 by
# 10-15% at one thread (the per-position tensors of a batch stay in the last-level cache) and
# 8 is no faster (docs/results/benchmarks.md "Evaluation speed").
BATCH_SIZE = 16
# The longest sequence evaluated. The model reads each sequence whole, in time that grows as the
# square of its length: a 10^6-token one would run for hours in gigabytes without a sign of progress.
MAX_SEQ_LEN = 16384


@dataclass
class ReadPredictions:
    """Every read of an evaluation: where it is and what the model said."""

    sequence: np.ndarray    # [n_reads] index of the sequence
    position: np.ndarray    # [n_reads] token index of the ``r`` instruction
    target: np.ndarray      # [n_reads] true next token (3 = '0', 4 = '1')
    predicted: np.ndarray   # [n_reads] argmax token
    margin: np.ndarray      # [n_reads] logit of the true bit minus the other bit's: how far from a glitch

    @property
    def correct(self) -> np.ndarray:
        return self.predicted == self.target


@dataclass
class SplitResult:
    split: str
    sequences: int
    reads: int
    read_errors: int
    error_rate: float
    error_rate_upper95: float
    sequence_accuracy: float

    def to_dict(self) -> dict:
        return asdict(self)


def clopper_pearson_upper(errors: int, trials: int, confidence: float = 0.95) -> float:
    """Upper end of the two-sided Clopper-Pearson interval for a binomial rate: the beta
    distribution's quantile, from ``scipy.special`` (``scipy.stats`` gives the same number and
    costs every process a second to import). No read in ``trials``: 1.0. A negative count, more
    ``errors`` than ``trials`` or a ``confidence`` outside (0, 1) is a ``ValueError`` naming it."""
    if trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    if not 0 <= errors <= trials:
        raise ValueError(f"errors must lie in 0..trials ({trials}), got {errors}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if trials == 0:
        return 1.0
    if errors >= trials:
        return 1.0
    return float(betaincinv(errors + 1, trials - errors, 1 - (1 - confidence) / 2))


def scored_lengths(model: torch.nn.Module, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """How many tokens of each sequence the model must see: up to and including its last
    ``r`` (0 for a sequence without reads). The models are causal, so what follows the last
    read changes no prediction. Label positions are the exception: the labels are drawn
    for the input's length, so a sequence with reads is run at its full length."""
    n_pos = mask.shape[1]
    last = n_pos - np.argmax(mask[:, ::-1], axis=1)
    lengths = np.where(mask.any(axis=1), last, 0)
    if getattr(model.cfg, "pos_embed", "none") == "label":
        lengths[lengths > 0] = n_pos
    return lengths


def length_batches(lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """The sequences with ``lengths > 0``, longest first, in batches of at most
    ``max_tokens`` tokens (at least one sequence each) once each batch is cut to its
    longest member: sorting makes that cut leave almost no padding."""
    order = np.argsort(-lengths, kind="stable")
    order = order[lengths[order] > 0]
    batches, lo = [], 0
    while lo < len(order):
        size = max(1, max_tokens // int(lengths[order[lo]]))
        batches.append(order[lo:lo + size])
        lo += size
    return batches


def _fast_impl(model: torch.nn.Module, device: torch.device) -> str | None:
    """The attention implementation evaluation runs: the model's own, except that a model
    configured for the PyTorch reference runs ``auto`` on the CPU (``kernels.tooling.rows``, which
    computes the same up to float rounding without the full ``[query, key]`` matrices)."""
    impl = getattr(model.cfg, "attention_impl", None)
    return "auto" if impl == "reference" and device.type == "cpu" else impl


def predict_reads(model: torch.nn.Module, tokens: np.ndarray, batch_size: int = BATCH_SIZE,
                  attention_impl: str | None = None, workers: int | None = None,
                  on_progress: Callable[[int], None] | None = None, task: Task | str = "flipflop") -> ReadPredictions:
    """Run ``model`` over ``tokens`` (``[n, T]``) and collect its prediction at every read,
    and its margin there (logit of the true bit minus the other bit's).

    ``task`` (a registered name or a :class:`~interp.tasks.Task`) says what the model reads and
    where it is scored (``Task.model_io``): flip-flop's reads by default. For any task a "read"
    is a scored position, and the margin is the logit of the right answer minus the best other
    of ``Task.answers`` (for flip-flop's two bits, the one above).

    The model sees ``tokens[:, :-1]`` cut after each sequence's last read (see
    :func:`scored_lengths`), in batches of sequences of similar length holding at most
    ``batch_size * (T - 1)`` tokens, in inference mode; the last block runs only at the reads
    (the model's ``normalized_at``), which changes the margins only by float rounding.
    ``attention_impl`` overrides the
    model's (default: :func:`_fast_impl`). On the CPU the batches are shared out to
    ``workers`` threads (default: torch's thread count) that run one torch thread each: a
    model this small spends much of its time in operations too short to split across
    threads, and on a shared machine a thread waiting at every operation for a descheduled
    partner loses more than it gains.

    ``on_progress`` (for a progress bar) is called, from this thread, with the number of
    sequences each finished batch held; sequences without reads are done at once.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    task = get_task(task) if isinstance(task, str) else task
    inputs, targets, mask = task.model_io(tokens)
    seq_idx, pos_idx = np.nonzero(mask)
    first_read = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])  # index of each sequence's first read
    target = targets[seq_idx, pos_idx].astype(np.int64)
    answers = torch.tensor(task.answers, device=device)
    predicted = np.empty(len(seq_idx), dtype=np.int64)
    margin = np.empty(len(seq_idx), dtype=np.float32)
    lengths = scored_lengths(model, inputs, mask)
    batches = length_batches(lengths, batch_size * max(inputs.shape[1], 1))
    report = on_progress or (lambda sequences: None)
    report(int((lengths == 0).sum()))

    def run(rows: np.ndarray) -> int:
        n_pos = int(lengths[rows[0]])
        batch_mask = mask[rows, :n_pos]
        row, pos = np.nonzero(batch_mask)
        rank = np.cumsum(batch_mask, axis=1)[batch_mask] - 1  # the read's rank within its sequence
        # each sequence's reads, padded with its last one to the batch's largest count
        positions = np.repeat(lengths[rows, None] - 1, batch_mask.sum(axis=1).max(), axis=1)
        positions[row, rank] = pos
        with torch.inference_mode():
            batch = torch.from_numpy(inputs[rows, :n_pos].astype(np.int64)).to(device)
            normalized = model.normalized_at(batch, torch.from_numpy(positions).to(device))
            logits = model.unembed(normalized[torch.from_numpy(row).to(device), torch.from_numpy(rank).to(device)])
            out = logits.argmax(-1).cpu().numpy()
            at = first_read[rows[row]] + rank
            right = torch.from_numpy(target[at]).to(device)
            others = logits[:, answers].masked_fill(answers == right[:, None], -torch.inf).amax(-1)
            margin[at] = (logits.gather(1, right[:, None])[:, 0] - others).float().cpu().numpy()
        predicted[at] = out
        return len(rows)

    cfg = getattr(model, "cfg", None)
    saved_impl = getattr(cfg, "attention_impl", None)
    workers = (torch.get_num_threads() if device.type == "cpu" else 1) if workers is None else workers
    try:
        if saved_impl is not None:
            cfg.attention_impl = attention_impl or _fast_impl(model, device)
        for finished in worker_map(run, batches, workers) if workers > 1 and len(batches) > 1 else map(run, batches):
            report(finished)
    finally:
        if saved_impl is not None:
            cfg.attention_impl = saved_impl
        model.train(was_training)
    return ReadPredictions(seq_idx, pos_idx, target, predicted, margin)


def summarise(split: str, n_sequences: int, reads: ReadPredictions, task: Task | None = None) -> SplitResult:
    """Error rate and sequence accuracy of ``reads``, each counted right by ``task.is_correct``
    (default: the prediction equals the target)."""
    wrong = ~(reads.correct if task is None else task.is_correct(reads.predicted, reads.target))
    errors = int(wrong.sum())
    n_reads = len(wrong)
    bad_sequences = len(np.unique(reads.sequence[wrong]))
    return SplitResult(
        split=split,
        sequences=n_sequences,
        reads=n_reads,
        read_errors=errors,
        error_rate=errors / n_reads if n_reads else 0.0,
        error_rate_upper95=clopper_pearson_upper(errors, n_reads),
        sequence_accuracy=1.0 - bad_sequences / n_sequences,
    )


def evaluate_tokens(model, tokens: np.ndarray, split: str = "custom", batch_size: int = BATCH_SIZE,
                    progress: bool = False, task: Task | str = "flipflop") -> SplitResult:
    """Read error rate and full-sequence accuracy of a flip-flop ``model`` on ``tokens [n, T]``,
    which must be flip-flop sequences (:func:`interp.tasks.check_tokens`: every sequence ends in
    a read, so each has one to score, and every read repeats its last write; anything else is a
    ValueError naming the sequence and the position). ``progress``: a bar on stderr counting
    the sequences done, named after ``split``. Another registered ``task`` scores its own
    sequences at its scored positions (:func:`predict_reads`)."""
    check_int("batch_size", batch_size)
    task = get_task(task) if isinstance(task, str) else task
    check_model_task(model, task.name)
    if len(tokens) == 0:
        raise ValueError("no sequences to evaluate")
    if tokens.shape[1] > MAX_SEQ_LEN:
        raise ValueError(f"{split}: sequences of {tokens.shape[1]:,} tokens are longer than the {MAX_SEQ_LEN:,} "
                         "(interp.evaluate.MAX_SEQ_LEN) evaluated; cut them into shorter flip-flop sequences")
    if task.name == "flipflop":
        check_flipflop(tokens, "tokens")
    with tqdm(total=len(tokens), desc=split, unit="seq", leave=False, disable=not progress) as bar:
        reads = predict_reads(model, tokens, batch_size, on_progress=bar.update, task=task)
    return summarise(split, len(tokens), reads, task)


def check_flipflop(tokens: np.ndarray, argument: str) -> None:
    """:func:`interp.tasks.check_tokens` as a ValueError naming ``argument``, the sequence index
    and the position: a read that contradicts its last write would count the model's right
    answer as a glitch."""
    try:
        check_tokens(np.asarray(tokens))
    except FlipFlopFormatError as err:   # its message names the sequence and the position
        raise ValueError(f"{argument}: {err} (only flip-flop sequences are scored)") from None


def evaluate_splits(
    model, splits: Sequence[str] | None = None, n: int | None = None, batch_size: int = BATCH_SIZE,
    progress: bool = False, task: Task | str = "flipflop",
) -> dict[str, SplitResult]:
    """Evaluate on the canonical splits of ``task`` (default: all of them; flip-flop's iid, sparse,
    dense); ``n`` takes the first ``n`` sequences of each. ``progress``: a bar per split on stderr
    (see :func:`evaluate_tokens`)."""
    task = get_task(task) if isinstance(task, str) else task
    splits = list(task.splits) if splits is None else splits
    unknown = [name for name in splits if name not in task.splits]
    if unknown or not splits:
        raise ValueError(f"unknown splits {unknown or list(splits)}; choose from {', '.join(task.splits)}")
    if n is not None:
        check_int("n", n)
    results = {}
    for name in splits:
        size = None if n is None else min(n, task.splits[name].size)
        results[name] = evaluate_tokens(model, task.load_split(name, size), name, batch_size, progress, task)
    return results



def evaluate_reads(model, splits: Sequence[str], n: int | None, batch_size: int = BATCH_SIZE
                   ) -> tuple[dict[str, SplitResult], pd.DataFrame]:
    """Each split's :class:`SplitResult` and one :func:`~interp.metrics.read_table` of all
    their reads (with a ``split`` column), from a single pass over the first ``n`` sequences."""
    results, tables = {}, []
    for name in splits:
        tokens = load_split(name, None if n is None else min(n, SPLITS[name].size))
        reads = predict_reads(model, tokens, batch_size)
        results[name] = summarise(name, len(tokens), reads)
        predicted = np.full(tokens.shape, -1)    # read_table only looks at the reads
        predicted[reads.sequence, reads.position] = reads.predicted
        tables.append(read_table(tokens, predicted).assign(split=name))
    return results, pd.concat(tables, ignore_index=True)

def evaluate_automaton(model, n: int = 1000, seq_len: int = 512, batch_size: int = BATCH_SIZE,
                       seed: int = AUTOMATON_EVAL_SEED, progress: bool = False) -> dict[str, float | int]:
    """State accuracy at every position, and full-sequence accuracy, of an automaton model on
    ``n`` fresh sequences (p_bottom 0.5) from a fixed seed. ``progress``: a bar on stderr."""
    check_int("n", n)
    check_int("batch_size", batch_size)
    check_model_task(model, "automaton")
    inputs, states = sample_automaton(n, seq_len, 0.5, rng=seed)
    correct = np.empty_like(states, dtype=bool)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad(), tqdm(total=n, desc="automaton", unit="seq", leave=False, disable=not progress) as bar:
        for lo in range(0, n, batch_size):
            x = torch.from_numpy(inputs[lo:lo + batch_size].astype(np.int64)).to(device)
            correct[lo:lo + batch_size] = model(x).argmax(-1).cpu().numpy() == states[lo:lo + batch_size]
            bar.update(len(x))
    model.train(was_training)
    return {"sequences": n, "position_accuracy": float(correct.mean()),
            "sequence_accuracy": float(correct.all(axis=1).mean())}


TASK_VOCAB = {"flipflop": D_VOCAB, "automaton": D_VOCAB_AUTOMATON}


def task_vocab(task: str) -> int:
    """The vocabulary size of a model of ``task``: :data:`TASK_VOCAB`'s, else the registered task's."""
    return TASK_VOCAB[task] if task in TASK_VOCAB else get_task(task).d_vocab


def checkpoint_task(config: dict) -> str:
    """``"flipflop"`` or ``"automaton"``: the task a checkpoint's run trained on, or, for a
    checkpoint saved outside training, the task its vocabulary fits. A recorded task whose
    vocabulary does not fit in the model's (an edited ``task``) is refused: the model would be
    scored on sequences of another task. (A vocabulary may be larger than its task's:
    ``automaton-1l`` has the flip-flop's five tokens. Loading the tensors checks the task they
    record, when they record one: ``models.checkpoint``.)"""
    vocab = config["model"].get("d_vocab")
    if config.get("training"):
        task = config["training"]["config"].get("task", "flipflop")
        if not isinstance(vocab, int) or task_vocab(task) > vocab:
            raise ValueError(f"the checkpoint records the task {task!r}, whose vocabulary has "
                             f"{task_vocab(task)} tokens, but its model has {vocab}; config.json was edited: "
                             "restore its training config's task")
        return task
    if vocab == D_VOCAB_AUTOMATON:
        return "automaton"
    if vocab != D_VOCAB:
        raise ValueError(f"a vocabulary of {vocab} tokens is neither the flip-flop language's ({D_VOCAB}) "
                         f"nor the automaton's ({D_VOCAB_AUTOMATON})")
    return "flipflop"


def check_model_task(model, task: str) -> None:
    """Refuse to score ``model`` on ``task`` when it was trained on another (a loaded checkpoint's
    ``model.trained_task``), or, for a model that does not say, when its vocabulary is not the task's."""
    trained = getattr(model, "trained_task", None)
    if trained is not None:
        if trained != task:
            raise ValueError(f"model: it was trained on the {trained} task, not the {task} task: evaluate it on "
                             "its own task")
        return
    vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    if vocab != task_vocab(task):
        other = next((name for name, size in TASK_VOCAB.items() if size == vocab), None)
        raise ValueError(f"model: its vocabulary has {vocab} tokens, {'the ' + other + ' task' if other else 'no task'}"
                         f"'s, not the {task} task's {task_vocab(task)}: evaluate it on its own task")

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from scipy.special import betaincinv
from tqdm.auto import tqdm

from interp.metrics import read_table
from interp.tasks import D_VOCAB, D_VOCAB_AUTOMATON, ONE, SPLITS, ZERO, load_split, read_mask, sample_automaton
from models.config import check_int

AUTOMATON_EVAL_SEED = 52001
# Sequences' worth of tokens per evaluation batch. At d_model 64 on the CPU, 16 beats 64 by
# 10-15% at one thread (the per-position tensors of a batch stay in the last-level cache) and
# 8 is no faster (docs/cpu-path-and-kernels.md "Evaluation speed").
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
    costs every process a second to import)."""
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
    configured for the PyTorch reference runs ``auto`` on the CPU (``kernels.rows``, which
    computes the same up to float rounding without the full ``[query, key]`` matrices)."""
    impl = getattr(model.cfg, "attention_impl", None)
    return "auto" if impl == "reference" and device.type == "cpu" else impl


def predict_reads(model: torch.nn.Module, tokens: np.ndarray, batch_size: int = BATCH_SIZE,
                  attention_impl: str | None = None, workers: int | None = None,
                  on_progress: Callable[[int], None] | None = None) -> ReadPredictions:
    """Run ``model`` over ``tokens`` (``[n, T]``) and collect its prediction at every read,
    and its margin there (logit of the true bit minus the other bit's).

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
    inputs = tokens[:, :-1]
    mask = read_mask(inputs)
    seq_idx, pos_idx = np.nonzero(mask)
    first_read = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])  # index of each sequence's first read
    target = tokens[seq_idx, pos_idx + 1].astype(np.int64)
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
            one_over_zero = (logits[:, ONE] - logits[:, ZERO]).float().cpu().numpy()
        at = first_read[rows[row]] + rank
        predicted[at] = out
        margin[at] = np.where(target[at] == ONE, one_over_zero, -one_over_zero)
        return len(rows)

    cfg = getattr(model, "cfg", None)
    saved_impl = getattr(cfg, "attention_impl", None)
    threads = torch.get_num_threads()
    workers = (threads if device.type == "cpu" else 1) if workers is None else workers
    try:
        if saved_impl is not None:
            cfg.attention_impl = attention_impl or _fast_impl(model, device)
        if workers > 1 and len(batches) > 1:
            torch.set_num_threads(1)
            with ThreadPoolExecutor(workers) as pool:
                for finished in pool.map(run, batches):
                    report(finished)
        else:
            for finished in map(run, batches):
                report(finished)
    finally:
        torch.set_num_threads(threads)
        if saved_impl is not None:
            cfg.attention_impl = saved_impl
        model.train(was_training)
    return ReadPredictions(seq_idx, pos_idx, target, predicted, margin)


def summarise(split: str, n_sequences: int, reads: ReadPredictions) -> SplitResult:
    wrong = ~reads.correct
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
                    progress: bool = False) -> SplitResult:
    """``progress``: a bar on stderr counting the sequences done, named after ``split``."""
    check_int("batch_size", batch_size)
    if len(tokens) == 0:
        raise ValueError("no sequences to evaluate")
    if tokens.shape[1] > MAX_SEQ_LEN:
        raise ValueError(f"{split}: sequences of {tokens.shape[1]:,} tokens are longer than the {MAX_SEQ_LEN:,} "
                         "(interp.evaluate.MAX_SEQ_LEN) evaluated; cut them into shorter flip-flop sequences")
    with tqdm(total=len(tokens), desc=split, unit="seq", leave=False, disable=not progress) as bar:
        reads = predict_reads(model, tokens, batch_size, on_progress=bar.update)
    return summarise(split, len(tokens), reads)


def evaluate_splits(
    model, splits=("iid", "sparse", "dense"), n: int | None = None, batch_size: int = BATCH_SIZE, progress: bool = False
) -> dict[str, SplitResult]:
    """Evaluate on canonical splits; ``n`` takes the first ``n`` sequences of each.
    ``progress``: a bar per split on stderr (see :func:`evaluate_tokens`)."""
    unknown = [name for name in splits if name not in SPLITS]
    if unknown or not splits:
        raise ValueError(f"unknown splits {unknown or list(splits)}; choose from {', '.join(SPLITS)}")
    if n is not None:
        check_int("n", n)
    results = {}
    for name in splits:
        size = None if n is None else min(n, SPLITS[name].size)
        results[name] = evaluate_tokens(model, load_split(name, size), name, batch_size, progress)
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


def checkpoint_task(config: dict) -> str:
    """``"flipflop"`` or ``"automaton"``: the task a checkpoint's run trained on, or, for a
    checkpoint saved outside training, the task its vocabulary fits."""
    if config.get("training"):
        return config["training"]["config"].get("task", "flipflop")
    vocab = config["model"].get("d_vocab")
    if vocab == D_VOCAB_AUTOMATON:
        return "automaton"
    if vocab != D_VOCAB:
        raise ValueError(f"a vocabulary of {vocab} tokens is neither the flip-flop language's ({D_VOCAB}) "
                         f"nor the automaton's ({D_VOCAB_AUTOMATON})")
    return "flipflop"

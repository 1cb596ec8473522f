"""``glitchlens hunt``: search for flip-flop sequences a model gets wrong, and compare the search
with random sampling at an equal budget of sequences scored.

Every method spends the same ``budget`` (sequences the model scores) in two phases:

1. *Proposals*. The guided search (:func:`guided_search`) is an elitist evolutionary search:
   a population of ``population`` sequences sampled from FFL(``p_i``) at ``seq_len``; each
   generation draws ``population`` children, each a uniformly chosen survivor with 1 to 3
   edits (:class:`Edits`), scores them in one batch, and keeps the ``population`` sequences of
   lowest *fitness*, the lowest margin (logit of the right bit minus the other bit's) over the
   sequence's reads: the search climbs towards the read the model is least sure of, and past
   zero into deeper glitches. A child equal to a sequence already scored is drawn again (up
   to 100 times), so the scored sequences are as good as all distinct. The random baselines
   (:func:`random_sampling`) score fresh sequences of FFL at ``seq_len`` at the canonical
   sparse (p_i 0.98) and dense (0.1) settings.
2. *Shrinking* (``1 / SHRINK_SHARE`` of the budget, shared by the error types found): for each
   type, the sequence with the earliest wrong read of the type is cut after that read's
   answer, then blocks of pairs are deleted, largest first, while that last read stays wrong
   with the same type (:func:`shrink`). The shortest verified failing sequence with a wrong
   read of a type, shrunk or not, is the one reported for it.

Every failure is verified before it is reported (:func:`verify`): the sequences are scored
again by :func:`interp.evaluate.predict_reads` grouped by length, as ``glitchlens eval --data``
scores the files :func:`write_hunt` writes, and only the reads wrong in that evaluation count
(the search scores candidates of mixed lengths padded into one batch; that changes no
prediction mathematically, but a margin within float rounding of zero could flip).

Error types (:func:`classify_errors`): a *regime* and a *source* joined by ``/``, and
``/long`` after them when the read is at or past the model's training length (``cfg.n_ctx``),
where the failure may be one of extrapolation (shrinking keeps the read there):

- regime ``sparse``: the last write is at least ``LONG_GAP`` tokens before the read (the
  flip-flop paper's sparse glitches: the write drowns among ignores; a long gap crowded by
  reads counts here, the write it must reach being still far); ``dense``: a shorter gap, and
  at least ``CROWDED`` of the ``CROWD_WINDOW`` instructions before the read are writes or
  reads (the paper's dense glitches: recent operations compete with the last write); under
  FFL(0.8) each of the two happens at about 1 read in 140. ``plain``: neither, an error on a
  read whose surroundings are common in the training distribution.
- source ``stale``: an earlier write (before the last one) stored the wrong answer, so the
  model may have retrieved an outdated write; the row gives the distance back to the most
  recent such write (``stale_gap``); ``unsourced``: every earlier write stored the right bit,
  the wrong bit comes from nowhere in the sequence; ``not-a-bit``: the argmax is an instruction.

Choices where the issue left room: fitness is the lowest margin (a glitch's read has a
negative one) rather than a probability, so that the search still has a gradient among
sequences the model reads right with near-certainty; the guided search starts from the training
distribution FFL(0.8) by default, so whatever it finds it reached by edits; sequences grow to
``max_len`` (default twice ``seq_len``, or the model's limit where its positions cannot
extrapolate, :func:`longest_input`), in steps of ``seq_len / LENGTH_STEPS``, distractors
overwriting pairs rather than being inserted (:class:`Edits`), so that the failing sequences
fall into a few lengths, a file each; the error rates "on the distribution the search ends on"
are those of its last generation of children (what the final population proposes, before
selection), while a random baseline's distribution is its own; the distinct failing
sequences are counted among the proposals (the shrunk ones are near-copies of a few).

Determinism: the same ``seed`` gives the same hunt for a given torch thread count (the
margins, and so the selection, can differ in the last float bits between thread counts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from interp.evaluate import ReadPredictions, predict_reads
from interp.tasks import (
    D_VOCAB, IGNORE, ONE, READ, SPLITS, TRAIN_P_I, WRITE, ZERO, format_sequence, instruction_probs,
    last_write_positions, sample_ffl, write_sequences,
)

LONG_GAP = 96        # tokens from the last write to the read: sparse; under FFL(0.8), P = 0.9^47 = 0.0071
CROWD_WINDOW = 16    # instructions before a read in which operations are counted
CROWDED = 8          # writes or reads among them: dense; under FFL(0.8), P(Binomial(16, 0.2) >= 8) = 0.0070
MAX_BLOCK = 64       # pairs one edit overwrites or jumps at most (a sparse gap in one or two edits)
LENGTH_STEPS = 8     # lengthen adds seq_len / LENGTH_STEPS tokens: at most 9 lengths up to twice seq_len
SHRINK_SHARE = 4     # 1 / SHRINK_SHARE of each method's budget shrinks its failures
ERROR_COLUMNS = ("seq", "position", "write_pos", "gap", "operations_nearby", "stale_gap", "answer", "predicted",
                 "margin", "regime", "source", "long", "type")


# --- sequences and edits --------------------------------------------------------------------


def with_reads_recomputed(pairs: np.ndarray) -> np.ndarray:
    """``[P, 2]`` (instruction, bit) pairs whose first instruction is ``w`` -> tokens ``[2P]``
    in which every read's bit is the bit of the most recent write, as the language's rule says."""
    tokens = pairs.reshape(-1).copy()
    reads = np.flatnonzero((tokens == READ) & (np.arange(len(tokens)) % 2 == 0))
    tokens[reads + 1] = tokens[last_write_positions(tokens)[reads] + 1]
    return tokens


def _block_size(rng: np.random.Generator, most: int) -> int:
    """A number of pairs, log-uniform in [1, MAX_BLOCK] (single pairs as often as long runs),
    at most ``most``."""
    return min(most, int(2 ** rng.uniform(0, np.log2(MAX_BLOCK + 1))))


def sampled_pairs(rng: np.random.Generator, n: int, p_i: float) -> np.ndarray:
    """``[n, 2]`` pairs whose instructions follow FFL(p_i) (their read bits are fixed later):
    the middle of one ``sample_ffl`` draw, whose first and last pairs are forced."""
    return sample_ffl(1, 2 * n + 4, p_i, rng)[0, 2:-2].reshape(n, 2)


@dataclass(frozen=True)
class Edits:
    """The edits of the guided search, on ``[P, 2]`` (instruction, bit) pairs. None touches the
    first pair (the write every sequence starts with) or turns the last pair into anything but
    a read; :meth:`apply` recomputes the reads' bits after them, so every result is a valid
    flip-flop sequence.

    Only :meth:`lengthen` changes the length, by ``step`` pairs up to ``max_pairs``:
    distractors overwrite pairs rather than being inserted, so the failing sequences fall into
    a few lengths, each a file that ``glitchlens eval --data`` reads. ``p_i``: the distribution
    that :meth:`lengthen` continues a sequence with.
    """

    p_i: float
    step: int
    max_pairs: int

    def flip_write_bit(self, pairs, rng):
        """Flip the bit of one write (the reads that repeat it change with it)."""
        pairs = pairs.copy()
        write = rng.choice(np.flatnonzero(pairs[:, 0] == WRITE))
        pairs[write, 1] = ZERO + ONE - pairs[write, 1]
        return pairs

    def change_instruction(self, pairs, rng):
        """Turn one instruction between the first and the last into one of the other two."""
        pairs = pairs.copy()
        if len(pairs) > 2:
            at = rng.integers(1, len(pairs) - 1)
            pairs[at, 0] = (pairs[at, 0] + rng.integers(1, 3)) % 3
        return pairs

    def _overwrite(self, pairs, rng, p_i: float):
        """A run of pairs between the first and the last replaced by pairs of FFL(p_i)."""
        pairs = pairs.copy()
        if len(pairs) > 2:
            size = _block_size(rng, len(pairs) - 2)
            at = rng.integers(1, len(pairs) - size)
            pairs[at:at + size] = sampled_pairs(rng, size, p_i)
        return pairs

    def denser_ignores(self, pairs, rng):
        """Sparse-like distractors: a run of ignores, which also drops the writes it covers."""
        return self._overwrite(pairs, rng, 1.0)

    def denser_operations(self, pairs, rng):
        """Dense-like distractors: a run of writes and reads, even odds."""
        return self._overwrite(pairs, rng, 0.0)

    def move_write_back(self, pairs, rng):
        """Move the last write of one read earlier, further from the read but still after the
        write before it (so it stays the read's last write); the pairs it jumps shift one later."""
        read = rng.choice(np.flatnonzero(pairs[:, 0] == READ))
        writes = np.flatnonzero(pairs[:, 0] == WRITE)
        writes = writes[writes < read]
        if len(writes) < 2 or writes[-1] - writes[-2] < 2:
            return pairs
        write = writes[-1]
        to = write - _block_size(rng, write - writes[-2] - 1)
        return np.insert(np.delete(pairs, write, axis=0), to, pairs[write], axis=0)

    def lengthen(self, pairs, rng):
        """Continue the sequence by ``step`` pairs of FFL(p_i) (fewer at ``max_pairs``), its
        final read moved to the new end."""
        block = sampled_pairs(rng, min(self.step, self.max_pairs - len(pairs)), self.p_i)
        return np.insert(pairs, len(pairs) - 1, block, axis=0)

    def apply(self, tokens: np.ndarray, rng: np.random.Generator, n_edits: int) -> np.ndarray:
        """``tokens [T]`` after ``n_edits`` edits drawn uniformly from ``EDIT_NAMES`` (without
        :meth:`lengthen` once the sequence has ``max_pairs`` pairs)."""
        pairs = tokens.reshape(-1, 2)
        for _ in range(n_edits):
            fits = [edit for edit in EDIT_NAMES if edit != "lengthen" or len(pairs) < self.max_pairs]
            pairs = getattr(self, fits[rng.integers(len(fits))])(pairs, rng)
        return with_reads_recomputed(pairs)


EDIT_NAMES = ("flip_write_bit", "change_instruction", "denser_ignores", "denser_operations", "move_write_back",
              "lengthen")


# --- scoring --------------------------------------------------------------------------------


def padded(sequences: list[np.ndarray]) -> np.ndarray:
    """Sequences of any even lengths -> ``uint8 [n, longest]``, each followed by ``i 0`` pairs:
    pairs after a sequence's last read change none of its predictions (``scored_lengths`` cuts
    them off, Label positions excepted) and hold no read."""
    out = np.tile(np.array([IGNORE, ZERO], dtype=np.uint8), (len(sequences), max(map(len, sequences)) // 2))
    for row, sequence in enumerate(sequences):
        out[row, :len(sequence)] = sequence
    return out


def lowest_margins(reads: ReadPredictions, n: int) -> np.ndarray:
    """``[n]``: each sequence's lowest margin over its reads (every flip-flop sequence has one)."""
    lowest = np.full(n, np.inf, dtype=np.float32)
    np.minimum.at(lowest, reads.sequence, reads.margin)
    return lowest


def has_wrong_read(reads: ReadPredictions, n: int) -> np.ndarray:
    """``[n]`` bool: the sequence has at least one wrong read."""
    return np.bincount(reads.sequence[~reads.correct], minlength=n) > 0


def classify_errors(tokens: np.ndarray, reads: ReadPredictions, train_len: int | None = None) -> pd.DataFrame:
    """One row per wrong read of ``reads`` (``predict_reads`` on ``tokens [n, T]``) and its error
    type (module docstring); ``train_len``: the position from which a read is ``long`` (None:
    none is). Columns (``ERROR_COLUMNS``): ``seq``, ``position`` (of the ``r``), ``write_pos``
    (its last write), ``gap`` (position - write_pos, in tokens), ``operations_nearby`` (writes
    and reads among the ``CROWD_WINDOW`` instructions before it), ``stale_gap`` (position minus
    the most recent write that stored the wrong bit; -1 if none did), ``answer`` and
    ``predicted`` (letters), ``margin``, ``regime``, ``source``, ``long`` and ``type``."""
    wrong = ~reads.correct
    seq, position, predicted = reads.sequence[wrong], reads.position[wrong], reads.predicted[wrong]
    pos = np.arange(tokens.shape[1])
    instruction = pos % 2 == 0
    write_pos = last_write_positions(tokens)[seq, position]
    before = np.cumsum(instruction & (tokens != IGNORE), axis=1)   # operations at or before each position
    window_start = position - 2 * CROWD_WINDOW - 1
    nearby = before[seq, position - 1] - np.where(window_start >= 0, before[seq, np.maximum(window_start, 0)], 0)
    # the most recent write of each bit at or before each position; the last write stored the
    # right bit, so the most recent one of the wrong bit is older
    stored = np.concatenate([tokens[:, 1:], tokens[:, -1:]], axis=1)
    is_write = instruction & (tokens == WRITE)
    last_of_bit = np.stack([np.maximum.accumulate(np.where(is_write & (stored == ZERO + b), pos, -1), axis=1)
                            for b in (0, 1)])
    is_bit = (predicted == ZERO) | (predicted == ONE)
    stale = np.where(is_bit, last_of_bit[np.clip(predicted - ZERO, 0, 1), seq, position], -1)
    gap = position - write_pos
    long = position >= (np.inf if train_len is None else train_len)
    regime = np.select([gap >= LONG_GAP, nearby >= CROWDED], ["sparse", "dense"], "plain")
    source = np.where(~is_bit, "not-a-bit", np.where(stale >= 0, "stale", "unsourced"))
    letters = np.array(["w", "r", "i", "0", "1"])
    return pd.DataFrame({
        "seq": seq, "position": position, "write_pos": write_pos, "gap": gap, "operations_nearby": nearby,
        "stale_gap": np.where(stale >= 0, position - stale, -1), "answer": letters[reads.target[wrong]],
        "predicted": letters[predicted], "margin": reads.margin[wrong], "regime": regime, "source": source,
        "long": long, "type": [f"{r}/{s}{'/long' if past else ''}" for r, s, past in zip(regime, source, long)]})


def training_length(model) -> int | None:
    """The length ``model`` was trained at (``cfg.n_ctx``), None for a model without one."""
    return getattr(model.cfg, "n_ctx", None)


def verify(model, sequences: list[np.ndarray], batch_size: int = 64) -> tuple[list[np.ndarray], pd.DataFrame]:
    """The sequences that :func:`~interp.evaluate.predict_reads` gets wrong when they are scored
    as ``glitchlens eval --data`` scores a file of them: grouped by length, each group in its
    order, at ``batch_size``. Returns them (shortest first, the order of the files
    :func:`write_hunt` writes) and :func:`classify_errors` of their wrong reads, ``seq``
    indexing that list."""
    kept, frames = [], []
    for length in sorted({len(s) for s in sequences}):
        group = np.stack([s for s in sequences if len(s) == length])
        reads = predict_reads(model, group, batch_size)
        failing = np.flatnonzero(has_wrong_read(reads, len(group)))
        errors = classify_errors(group, reads, training_length(model))
        frames.append(errors.assign(seq=len(kept) + np.searchsorted(failing, errors.seq), length=length))
        kept += list(group[failing])
    return kept, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*ERROR_COLUMNS, "length"])


# --- the methods ----------------------------------------------------------------------------


@dataclass
class Proposals:
    """What a method's first phase scored: ``scored`` sequences, the distinct ones with a wrong
    read (``failing``), and the counts on the distribution it ends on (``final``: ``sequences``,
    ``failing_sequences``, ``reads``, ``read_errors``)."""

    scored: int
    failing: list[np.ndarray]
    final: dict[str, int]


def _final_counts(reads: ReadPredictions, n: int) -> dict[str, int]:
    return {"sequences": n, "failing_sequences": int(has_wrong_read(reads, n).sum()), "reads": len(reads.correct),
            "read_errors": int((~reads.correct).sum())}


def random_sampling(model, budget: int, seq_len: int, p_i: float, rng: np.random.Generator,
                    on_scored: Callable[[int], None]) -> Proposals:
    """``budget`` fresh sequences of FFL(p_i) at ``seq_len``, scored as an evaluation would."""
    tokens = sample_ffl(budget, seq_len, p_i, rng)
    reads = predict_reads(model, tokens, on_progress=on_scored)
    failing = np.unique(tokens[has_wrong_read(reads, budget)], axis=0)
    return Proposals(budget, list(failing), _final_counts(reads, budget))


def guided_search(model, budget: int, seq_len: int, max_len: int, p_i: float, population: int,
                  rng: np.random.Generator, on_scored: Callable[[int], None]) -> Proposals:
    """The evolutionary search of the module docstring, scoring ``budget`` sequences in
    batches of ``population``."""
    edits = Edits(p_i, step=max(1, seq_len // (2 * LENGTH_STEPS)), max_pairs=max_len // 2)
    pool = list(sample_ffl(min(population, budget), seq_len, p_i, rng))
    seen = {s.tobytes() for s in pool}
    failing: dict[bytes, np.ndarray] = {}

    def score(sequences: list[np.ndarray]) -> tuple[np.ndarray, ReadPredictions]:
        reads = predict_reads(model, padded(sequences))
        on_scored(len(sequences))
        for s in np.flatnonzero(has_wrong_read(reads, len(sequences))):
            failing.setdefault(sequences[s].tobytes(), sequences[s])
        return lowest_margins(reads, len(sequences)), reads

    fitness, reads = score(pool)
    scored, last = len(pool), (reads, len(pool))
    while scored < budget:
        children = []
        while len(children) < min(population, budget - scored):
            for _ in range(100):    # a novel child; an edit may undo another, or a flip repeat one
                child = edits.apply(pool[rng.integers(len(pool))], rng, n_edits=1 + int(rng.integers(3)))
                if child.tobytes() not in seen:
                    break
            seen.add(child.tobytes())
            children.append(child)
        child_fitness, reads = score(children)
        scored, last = scored + len(children), (reads, len(children))
        pool += children
        fitness = np.concatenate([fitness, child_fitness])
        keep = np.argsort(fitness, kind="stable")[:population]
        pool, fitness = [pool[k] for k in keep], fitness[keep]
    return Proposals(scored, list(failing.values()), _final_counts(*last))


def shrink(model, sequence: np.ndarray, position: int, error_type: str, budget: int) -> tuple[np.ndarray | None, int]:
    """The shortest sequence found, within ``budget`` sequences scored, whose last read is
    wrong with type ``error_type``, starting from ``sequence`` cut after its wrong read at
    ``position``, then deleting blocks of pairs (never the first or the last; the reads' bits
    recomputed): each round tries every block of the current size in one batch and keeps the
    shortest result that still fails, or halves the size when none does. Returns ``(shortest,
    scored)``; ``shortest`` is None if even the cut sequence does not fail so (a Label model,
    whose positions depend on the length)."""

    def still_failing(candidates: list[np.ndarray]) -> np.ndarray:
        tokens = padded(candidates)
        errors = classify_errors(tokens, predict_reads(model, tokens), training_length(model))
        ends = np.array([len(c) - 2 for c in candidates])
        return np.isin(np.arange(len(candidates)),
                       errors.seq[(errors.position == ends[errors.seq]) & (errors.type == error_type)])

    current = sequence[:position + 2]
    if budget < 1 or not still_failing([current])[0]:
        return None, min(budget, 1)
    scored, block = 1, len(current) // 4
    while block >= 1 and scored < budget:
        pairs = current.reshape(-1, 2)
        starts = np.arange(1, len(pairs) - 1, block)[:budget - scored]
        candidates = [with_reads_recomputed(np.delete(pairs, np.arange(s, min(s + block, len(pairs) - 1)), axis=0))
                      for s in starts]
        if not candidates:
            break
        ok = still_failing(candidates)
        scored += len(candidates)
        if ok.any():
            current = min((c for c, good in zip(candidates, ok) if good), key=len)
        else:
            block //= 2
    return current, scored


@dataclass
class MethodResult:
    """One method's hunt: ``summary`` (JSON-ready: ``scored``, ``failing_sequences``,
    ``unconfirmed``, ``final`` rates, ``types``), ``failing`` (its proposals that fail, verified),
    ``shrunk`` (the shrunk sequences, verified) and ``errors`` (:func:`classify_errors` of the
    wrong reads of both, ``seq`` indexing ``failing + shrunk``)."""

    summary: dict
    failing: list[np.ndarray]
    shrunk: list[np.ndarray]
    errors: pd.DataFrame


def _first_per_type(errors: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per type, the first wrong read of :func:`verify`'s frame when sorted ``by`` (``length``,
    ``position``), types in alphabetical order."""
    ranked = errors.sort_values(by, kind="stable")
    return ranked.groupby("type", sort=True).head(1).set_index("type", drop=False).sort_index()


def finish(model, proposals: Proposals, shrink_budget: int) -> MethodResult:
    """Verify a method's proposals, shrink the shortest failure of each type found, verify the
    shrunk sequences (apart: they make files of their own) and summarise (the summary without
    the method's start). ``types`` counts the wrong reads of each type among the proposals."""
    failing, errors = verify(model, proposals.failing)
    firsts = _first_per_type(errors, ["position", "length"])   # the shortest prefix that fails so
    found, scored = [], proposals.scored
    for row in firsts.itertuples():
        sequence, used = shrink(model, failing[row.seq], row.position, row.type, shrink_budget // len(firsts))
        scored += used
        if sequence is not None:
            found.append(sequence)
    shrunk, shrunk_errors = verify(model, found)
    every_error = pd.concat([errors, shrunk_errors.assign(seq=shrunk_errors.seq + len(failing))], ignore_index=True)
    final = proposals.final
    summary = {
        "scored": scored, "failing_sequences": len(failing), "unconfirmed": len(proposals.failing) - len(failing),
        "final": {**final, "read_error_rate": final["read_errors"] / final["reads"],
                  "sequence_error_rate": final["failing_sequences"] / final["sequences"]},
        "types": {}}
    counts = errors.type.value_counts()
    for row in _first_per_type(every_error, ["length", "position"]).itertuples():
        sequence = (failing + shrunk)[row.seq]
        summary["types"][row.type] = {
            "wrong_reads": int(counts[row.type]), "length": len(sequence), "read_position": int(row.position),
            "gap": int(row.gap), "operations_nearby": int(row.operations_nearby), "stale_gap": int(row.stale_gap),
            "answer": row.answer, "predicted": row.predicted, "text": format_sequence(sequence)}
    return MethodResult(summary, failing, shrunk, every_error)


# --- the hunt -------------------------------------------------------------------------------


def longest_input(model) -> int | None:
    """The longest sequence ``model`` can read, or None where its positions extrapolate:
    learned absolute positions (``n_ctx`` rows) and Label positions (``label_range``) cannot
    go past their tables (``GlitchLensTransformer.positions``)."""
    table = {"learned": "n_ctx", "label": "label_range"}.get(getattr(model.cfg, "pos_embed", "none"))
    return None if table is None else getattr(model.cfg, table)


@dataclass
class HuntResult:
    """``settings`` of the hunt and each method's :class:`MethodResult`, guided first."""

    settings: dict
    methods: dict[str, MethodResult] = field(default_factory=dict)

    def summary(self) -> dict:
        """hunt.json: the settings and every method's summary."""
        return {**self.settings, "methods": {name: result.summary for name, result in self.methods.items()}}


def hunt(model, budget: int = 1024, seq_len: int = 512, max_len: int | None = None, p_i: float = TRAIN_P_I,
         population: int = 32, seed: int = 0, progress: bool = False) -> HuntResult:
    """Hunt for the glitches of ``model`` (a flip-flop model) with the guided search from
    FFL(``p_i``) at ``seq_len`` growing up to ``max_len`` tokens (default: twice ``seq_len``
    within :func:`longest_input`), and with random FFL at the canonical sparse and dense
    settings at ``seq_len``; each method scores at most ``budget`` sequences (see the module
    docstring). ``progress``: a bar on stderr counting the sequences scored."""
    if getattr(model.cfg, "d_vocab", D_VOCAB) != D_VOCAB:
        raise ValueError(f"this model reads {model.cfg.d_vocab} token kinds, not the flip-flop language's {D_VOCAB} "
                         "(an automaton model?): nothing to hunt")
    instruction_probs(p_i)   # a ValueError outside [0, 1]
    for name, value in (("budget", budget), ("population", population)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if seq_len < 4 or seq_len % 2:
        raise ValueError(f"seq_len must be an even number >= 4, got {seq_len}")
    limit = longest_input(model)
    if limit is not None and seq_len > limit:
        raise ValueError(f"seq_len {seq_len} is longer than this {model.cfg.model} model can read ({limit} tokens: "
                         f"its {model.cfg.pos_embed} positions cannot extrapolate); give --seq-len <= {limit}")
    max_len = min(2 * seq_len, limit or 2 * seq_len) if max_len is None else max_len
    if max_len < seq_len or max_len % 2 or (limit is not None and max_len > limit):
        raise ValueError(f"max_len must be an even number from seq_len ({seq_len}) to "
                         f"{limit if limit is not None else 'any length'}, got {max_len}")
    shrink_budget = budget // SHRINK_SHARE
    proposal_budget = budget - shrink_budget
    settings = {"model": model.cfg.model, "budget": budget, "seq_len": seq_len, "max_len": max_len, "p_i": p_i,
                "population": population, "seed": seed, "shrink_budget": shrink_budget}
    random_p_i = {f"random {split}": SPLITS[split].p_i for split in ("sparse", "dense")}
    result = HuntResult(settings)
    with tqdm(total=(1 + len(random_p_i)) * budget, desc="hunt", unit="seq", leave=False, disable=not progress) as bar:
        for index, name in enumerate(["guided", *random_p_i]):
            rng = np.random.default_rng([seed, index])
            if name == "guided":
                proposals = guided_search(model, proposal_budget, seq_len, max_len, p_i, population, rng, bar.update)
                start = f"FFL({p_i}), T={seq_len} to {max_len}"
            else:
                proposals = random_sampling(model, proposal_budget, seq_len, random_p_i[name], rng, bar.update)
                start = f"FFL({random_p_i[name]}), T={seq_len}"
            finished = finish(model, proposals, shrink_budget)
            bar.update(finished.summary["scored"] - proposals.scored)
            finished.summary = {"start": start, **finished.summary}
            result.methods[name] = finished
    return result


def abbreviated(text: str, keep: int = 36) -> str:
    """A flip-flop string for a table cell: whole up to ``2 * keep`` characters, else its two ends."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}...{text[-keep:]}"


def overview_rows(result: HuntResult) -> list[tuple[str, ...]]:
    """One table row per method: where it started, sequences scored, verified failing sequences,
    the read and sequence error rates on the distribution it ends on, and how many error types."""
    return [(name, m.summary["start"], str(m.summary["scored"]), str(m.summary["failing_sequences"]),
             f"{m.summary['final']['read_error_rate']:.2e}", f"{100 * m.summary['final']['sequence_error_rate']:.1f}%",
             str(len(m.summary["types"]))) for name, m in result.methods.items()]


def shortest_rows(result: HuntResult) -> list[tuple[str, ...]]:
    """One table row per (error type, method that found it): the shortest failing sequence's
    length, wrong read, gap, stale write (``-`` without one) and text (:func:`abbreviated`)."""
    found = sorted((error_type, name, shortest) for name, m in result.methods.items()
                   for error_type, shortest in m.summary["types"].items())
    return [(error_type, name, str(s["length"]), str(s["read_position"]), str(s["gap"]),
             str(s["read_position"] - s["stale_gap"]) if s["stale_gap"] >= 0 else "-", abbreviated(s["text"]))
            for error_type, name, s in found]


def write_hunt(result: HuntResult, out_dir) -> dict[str, Path]:
    """Write ``hunt.json`` (:meth:`HuntResult.summary` with the files) and each method's verified
    failing sequences, one ``.jsonl`` per method and length (``guided-T512.jsonl``; the shrunk
    ones in ``guided-shrunk-T18.jsonl``): a file holds the sequences of one length that
    :func:`verify` scored together, as ``glitchlens eval --data FILE`` scores them. Returns the
    paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, method in result.methods.items():
        for kind, sequences in (("", method.failing), ("-shrunk", method.shrunk)):
            for length in sorted({len(s) for s in sequences}):
                stem = f"{name.replace(' ', '-')}{kind}-T{length}"
                files[stem] = write_sequences(np.stack([s for s in sequences if len(s) == length]),
                                              out_dir / f"{stem}.jsonl")
    files["json"] = out_dir / "hunt.json"
    summary = {**result.summary(), "files": {stem: path.name for stem, path in files.items() if stem != "json"}}
    files["json"].write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return files

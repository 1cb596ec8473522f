"""The hunt's methods, the guided search and the random baselines, and :func:`hunt`, which runs them.

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

Choices where the task is silent: fitness is the lowest margin (a glitch's read has a
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

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from interp.evaluate import ReadPredictions, predict_reads
from interp.hunt.edits import Edits, with_reads_recomputed
from interp.hunt.errors import classify_errors, has_wrong_read, training_length, verify
from interp.tasks import D_VOCAB, IGNORE, SPLITS, TRAIN_P_I, ZERO, format_sequence, instruction_probs, sample_ffl

LENGTH_STEPS = 8     # lengthen adds seq_len / LENGTH_STEPS tokens: at most 9 lengths up to twice seq_len
SHRINK_SHARE = 4     # 1 / SHRINK_SHARE of each method's budget shrinks its failures


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

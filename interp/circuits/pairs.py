"""(clean, corrupt) pairs of runs of the same scored position that differ in a few tokens: the
task's own counterfactual (:func:`corrupt_pairs`; flip-flop's bit flipped, :func:`bit_flip_pairs`),
another sequence of the split at the same position (:func:`resample_pairs`, for any task), or a
distractor edited away (what carries a glitch, :func:`glitch_pairs`); conventions:
:mod:`interp.circuits`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from interp.circuits.metrics import as_task, resolve_task, token_ids_of
from interp.circuits.reads import logit_difference, read_answers, reads_up_to
from interp.tasks import D_VOCAB, IGNORE, READ, ZERO, Task, last_write_positions, read_mask
from interp.tasks.flipflop import flip_last_write


@dataclass
class ReadPairs:
    """Two runs of the same scored positions that differ in a few tokens.

    ``clean``, ``corrupt``: ``[pair, pos]`` token ids the model reads; ``read``: ``[pair]``
    the scored position whose prediction is compared (flip-flop: an ``r``); ``info``: one row per
    pair (``pair``, ``seq`` and ``position`` it came from, ``answer`` of the clean run (flip-flop's
    bit; the right answer's token id for :func:`corrupt_pairs` and :func:`resample_pairs`),
    ``edit``: what differs, ``edit_pos``: the first position that differs, and what each kind of
    pair adds); ``unpaired``: the positions no partner was found for, with the reason.
    """

    clean: torch.Tensor
    corrupt: torch.Tensor
    read: torch.Tensor
    info: pd.DataFrame
    unpaired: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __len__(self) -> int:
        return len(self.read)


def _selected_reads(tokens: np.ndarray, reads: pd.DataFrame | None, scored: np.ndarray | None = None,
                    argument: str = "reads") -> tuple[np.ndarray, np.ndarray]:
    """``(seq, position)`` of the rows of ``reads`` (the argument ``argument``, which errors name),
    default every position ``scored`` marks (default: every flip-flop read)."""
    if reads is None:
        return np.nonzero(read_mask(tokens) if scored is None else scored)
    if not isinstance(reads, pd.DataFrame):
        raise TypeError(f"{argument} must be a DataFrame with the columns seq and position, got "
                        f"{type(reads).__name__}")
    missing = {"seq", "position"} - set(reads.columns)
    if missing:
        raise ValueError(f"{argument} needs the columns seq and position (a read_table frame); missing "
                         f"{sorted(missing)}")
    seq, position = np.array(reads.seq, dtype=np.int64), np.array(reads.position, dtype=np.int64)
    if ((seq < 0) | (seq >= len(tokens)) | (position < 0) | (position >= tokens.shape[1])).any():
        raise ValueError(f"{argument}: (seq, position) must lie within the tokens' shape {tuple(tokens.shape)}")
    return seq, position


def bit_flip_pairs(tokens, reads: pd.DataFrame | None = None) -> ReadPairs:
    """For each read: clean = its sequence, corrupt = the same sequence had its last write
    stored the other bit. So the corrupt run's right answer is the other bit, and patching
    from clean into corrupt asks *which activations carry the bit* to the read.

    The write's bit is flipped together with the bit of every ``r`` that reads that write (a
    read repeats it), so the corrupt sequence is a valid flip-flop sequence whose every read
    is right: flipping the write alone would leave the reads between it and this one
    contradicting it, and the model may copy from those (``interp.tasks.flipflop.flip_last_write``;
    the flip-flop task's ``corrupt``). Nothing else changes. A read with no write before it has no
    bit to flip and is skipped.

    ``tokens``: ``[n, pos]`` ids; ``reads``: rows with ``seq`` and ``position`` (e.g. the
    correct rows of ``read_table``); default every read. ``info`` adds ``write_pos``.
    """
    ids = token_ids_of("tokens", tokens, D_VOCAB).numpy()
    seq, position = _selected_reads(ids, reads)
    not_read = ~read_mask(ids)[seq, position]
    if not_read.any():
        b = int(np.argmax(not_read))
        raise ValueError(f"reads: position {position[b]} of sequence {seq[b]} is not an r instruction")
    write = last_write_positions(ids)[seq, position]
    pairs = np.flatnonzero(write >= 0)
    seq, position, write = seq[pairs], position[pairs], write[pairs]
    clean = ids[seq]
    corrupt = flip_last_write(clean, write)
    info = pd.DataFrame({"pair": np.arange(len(seq)), "seq": seq, "position": position, "write_pos": write,
                         "answer": clean[np.arange(len(seq)), write + 1] - ZERO, "edit": "flip the last write's bit",
                         "edit_pos": write + 1})
    return ReadPairs(torch.from_numpy(clean), torch.from_numpy(corrupt), torch.from_numpy(position), info)


def _pairs(clean, corrupt, read, info, unpaired, what: str) -> ReadPairs:
    if not info:
        reasons = "; ".join(f"seq {u['seq']} position {u['position']}: {u['reason']}" for u in unpaired[:3])
        raise ValueError(f"no {what} pair for any of the {len(unpaired)} positions of tokens (and reads): {reasons}")
    return ReadPairs(torch.from_numpy(np.stack(clean)), torch.from_numpy(np.stack(corrupt)),
                     torch.tensor(read, dtype=torch.long), pd.DataFrame(info).rename_axis("pair").reset_index(),
                     pd.DataFrame(unpaired))


def corrupt_pairs(task: Task | str, tokens, reads: pd.DataFrame | None = None) -> ReadPairs:
    """For each scored position: clean = its sequence, corrupt = the task's counterfactual of it
    (``Task.corrupt``: flip-flop's last written bit, counting's one counted token, selective
    copy's one copied token, the automaton's one input symbol), whose right answer there differs.
    A task that declares no counterfactual is refused, naming :func:`resample_pairs`.

    ``tokens``: ``[n, pos]`` ids the model reads; ``reads``: rows with ``seq`` and ``position``
    (default every scored position). ``info``: ``pair``, ``seq``, ``position``, ``answer`` (the
    clean run's right answer, a token id), ``corrupt_answer``, ``edit``, ``edit_pos``.
    """
    task = as_task(task)
    if not task.declares_corrupt:
        raise ValueError(f"task: the {task.name!r} task declares no counterfactual (Task.corrupt); pair its "
                         "sequences with resample_pairs, or give it a corrupt(inputs, position) method")
    ids = token_ids_of("tokens", tokens, task.d_vocab).numpy()
    scored, targets = task.scored_answers(ids)
    clean, corrupt, read, info, unpaired = [], [], [], [], []
    for s, p in zip(*_selected_reads(ids, reads, scored)):
        edited = task.corrupt(ids[s].copy(), int(p)) if scored[s, p] else None
        changed = None if edited is None else task.scored_answers(np.asarray(edited)[None])
        if changed is None or not changed[0][0, p] or changed[1][0, p] == targets[s, p]:
            reason = "not a scored position" if not scored[s, p] else "the task's corrupt() gives no other answer"
            unpaired.append({"seq": int(s), "position": int(p), "reason": reason})
            continue
        differs = np.flatnonzero(np.asarray(edited) != ids[s])
        clean.append(ids[s])
        corrupt.append(np.asarray(edited, dtype=ids.dtype))
        read.append(int(p))
        info.append({"seq": int(s), "position": int(p), "answer": int(targets[s, p]),
                     "corrupt_answer": int(changed[1][0, p]), "edit": f"{task.name} corrupt()",
                     "edit_pos": int(differs[0])})
    return _pairs(clean, corrupt, read, info, unpaired, "corrupt")


def resample_pairs(task: Task | str, tokens, reads: pd.DataFrame | None = None, seed: int = 0) -> ReadPairs:
    """For each scored position: clean = its sequence, corrupt = another sequence of ``tokens``
    (the same split) at the same position, one the task scores there with another right answer,
    drawn with ``seed`` among those. Needs nothing of the task beyond its contract; a position no
    other sequence answers differently goes to ``unpaired``.

    ``tokens``: ``[n, pos]`` ids the model reads; ``reads``: rows with ``seq`` and ``position``
    (default every scored position). ``info``: ``pair``, ``seq``, ``position``, ``answer``,
    ``partner`` (the corrupt run's sequence), ``corrupt_answer``, ``edit``, ``edit_pos``.
    """
    task = as_task(task)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    ids = token_ids_of("tokens", tokens, task.d_vocab).numpy()
    scored, targets = task.scored_answers(ids)
    rng = np.random.default_rng(seed)
    clean, corrupt, read, info, unpaired = [], [], [], [], []
    for s, p in zip(*_selected_reads(ids, reads, scored)):
        partners = np.flatnonzero(scored[:, p] & (targets[:, p] != targets[s, p]))
        if not scored[s, p] or not len(partners):
            reason = "not a scored position" if not scored[s, p] else "no other sequence answers otherwise there"
            unpaired.append({"seq": int(s), "position": int(p), "reason": reason})
            continue
        partner = int(rng.choice(partners))
        differs = np.flatnonzero(ids[partner] != ids[s])
        clean.append(ids[s])
        corrupt.append(ids[partner])
        read.append(int(p))
        info.append({"seq": int(s), "position": int(p), "answer": int(targets[s, p]), "partner": partner,
                     "corrupt_answer": int(targets[partner, p]), "edit": f"sequence {partner} of the split",
                     "edit_pos": int(differs[0])})
    return _pairs(clean, corrupt, read, info, unpaired, "resample")


def task_pairs(task: Task | str, tokens, reads: pd.DataFrame | None = None, seed: int = 0) -> ReadPairs:
    """:func:`corrupt_pairs` where the task declares a counterfactual, :func:`resample_pairs`
    (with ``seed``) where it does not."""
    task = as_task(task)
    return corrupt_pairs(task, tokens, reads) if task.declares_corrupt else resample_pairs(task, tokens, reads, seed)


def _single_edits(sequence: np.ndarray, write: int, read: int, bit: int) -> list[tuple[int, int, int, str]]:
    """Every change of one instruction pair strictly between the last write and the read that
    keeps the sequence valid and the answer ``bit``: ``(position, instruction, bit, text)``."""
    edits = []
    for pos in range(write + 2, read, 2):
        instruction, own_bit = int(sequence[pos]), int(sequence[pos + 1]) - ZERO
        if instruction == IGNORE:
            edits += [(pos, IGNORE, 1 - own_bit, f"i{own_bit} -> i{1 - own_bit} at {pos}"),
                      (pos, READ, bit, f"i{own_bit} -> r{bit} at {pos}")]
        elif instruction == READ:
            edits += [(pos, IGNORE, b, f"r{bit} -> i{b} at {pos}") for b in (0, 1)]
    return edits


@torch.no_grad()
def glitch_pairs(model, tokens, glitches: pd.DataFrame) -> ReadPairs:
    """For each glitch (a read the model gets wrong): corrupt = its sequence, clean = the
    closest sequence with the same answer that the model reads right.

    "Closest" is one edited instruction pair strictly between the read's last write and the
    read: an ``i`` whose bit is flipped, an ``i b`` turned into ``r`` (its bit then repeats the
    write), or an ``r`` turned into ``i 0`` / ``i 1``. Each keeps the sequence valid and the
    answer unchanged, so the two runs differ only in what distracts the model, and patching
    from clean into corrupt asks *which activations carry the glitch*. Of the edits after
    which the model's argmax at the read is the right bit, the one with the largest logit
    difference is kept (the clearest contrast). Edits before the last write (an older
    write's bit, say) are not searched; a glitch that no edit fixes goes to ``unpaired``.

    ``tokens``: ``[n, pos]`` ids; ``glitches``: rows with ``seq`` and ``position`` (e.g.
    ``glitch_table``).
    """
    task = resolve_task(model)
    if task.name != "flipflop":
        raise ValueError(f"glitch_pairs edits flip-flop instructions; this model is of the {task.name!r} task: pair "
                         "its glitches with task_pairs (its counterfactual) or resample_pairs")
    ids = token_ids_of("tokens", tokens, model.cfg.d_vocab).numpy()
    found, unpaired = [], []
    for s, p in zip(*_selected_reads(ids, glitches, argument="glitches")):
        write, bit = (int(x[0]) for x in read_answers(ids, [p], rows=[s]))
        edits = _single_edits(ids[s], write, p, bit)
        if not edits:
            unpaired.append({"seq": s, "position": p, "reason": "no instruction between the write and the read"})
            continue
        candidates = np.repeat(ids[s:s + 1], len(edits), axis=0)
        for row, (pos, instruction, new_bit, _) in enumerate(edits):
            candidates[row, pos:pos + 2] = instruction, ZERO + new_bit
        reads = torch.full((len(edits),), p)
        logits = model(reads_up_to(model, torch.from_numpy(candidates), reads).to(model.cfg.device))
        difference = logit_difference(logits, reads, torch.full((len(edits),), bit)).cpu()
        right = logits[:, p].argmax(-1).cpu() == ZERO + bit
        if not right.any():
            unpaired.append({"seq": s, "position": p, "reason": f"none of {len(edits)} single edits is read right"})
            continue
        best = int(torch.where(right, difference, -torch.inf).argmax())
        edit_pos, _, _, edit = edits[best]
        info = {"seq": s, "position": p, "write_pos": write, "answer": bit, "edit": edit, "edit_pos": edit_pos}
        found.append((candidates[best], ids[s], p, info))
    if not found:
        raise ValueError(f"no partner found for any of the {len(unpaired)} glitches: "
                         + "; ".join(f"seq {u['seq']} read {u['position']}: {u['reason']}" for u in unpaired))
    clean, corrupt, read, info = zip(*found)
    return ReadPairs(torch.from_numpy(np.stack(clean)), torch.from_numpy(np.stack(corrupt)), torch.tensor(read),
                     pd.DataFrame(info).rename_axis("pair").reset_index(), pd.DataFrame(unpaired))

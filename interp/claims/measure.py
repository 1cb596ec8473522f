"""Measurements on the shipped specimens (``models/pretrained``) that the claims table reads, each
cached as a CSV under ``runs/claims/`` so that the table and its test re-read numbers instead of
recomputing them (``glitchlens claims --measure [NAME ...]`` recomputes; ``tests/test_claims.py``
recomputes the fast ones in its slow test). Sequences are the canonical held-out ones
(:func:`interp.tasks.held_out`), the canonical ``iid`` split, or fixed-seed automaton sequences.

``r1-checkpoints`` is a training run, not a specimen measurement: rope-mech's run
(``reproduce table1 --scale cpu``'s RoPE, seed 0) trained again and read at every checkpoint.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import torch

from interp.claims.sources import CACHE, RUNS
from interp.claims.tda import SINGLE_VIEW
from interp.claims.verdicts import ratio_interval, wilson

FLIPFLOP_SPECIMENS = ("tra-mech", "fot-mech", "tra-app-a", "fot-app-a", "cope-mech", "rope-mech", "diff-mech",
                      "tda-beta1", "tda-mech", "trela-mech")
LENGTH_FACTORS = (2, 4, 8, 16, 32)
LENGTH_N = 20            # held-out sequences per length: App. B's row asks for a trend, not a rate
AUTOMATON_SPECIMENS = ("automaton-1l", "automaton-1l-sharp")
R1_CHECKPOINTS = ("r1-checkpoints", "rope-seed0")
R1_SPLITS = {"sparse": 1000, "dense": 300, "iid": 300}   # sequences read at each checkpoint


def load(name: str):
    from models.pretrained import load_pretrained

    return load_pretrained(name)


def length_generalisation(n: int = LENGTH_N) -> pd.DataFrame:
    """TRA paper App. B on flip-flop: full-sequence accuracy of every flip-flop specimen on ``n``
    held-out FFL(0.8) sequences at 2x to 32x its training length (16,384 tokens at most, the
    evaluator's limit), with the 95% Wilson interval. A specimen that reads none of the ``n``
    right at one length is not run at the longer ones (a sequence 16 times as long costs about
    100 times as much, and the row needs only where it fails): those lengths are absent."""
    from interp.evaluate import evaluate_tokens
    from interp.tasks import held_out

    rows = []
    for name in FLIPFLOP_SPECIMENS:
        model = load(name)
        trained = model_seq_len(name)
        for factor in LENGTH_FACTORS:
            result = evaluate_tokens(model, held_out(n, trained * factor), "held-out", batch_size=1)
            right = round(result.sequence_accuracy * n)
            low, high = wilson(right, n)
            rows.append({"specimen": name, "train_len": trained, "factor": factor, "seq_len": trained * factor,
                         "n": n, "right": right, "accuracy": right / n, "low": low, "high": high})
            if right == 0:
                break
    return pd.DataFrame(rows)


def model_seq_len(name: str) -> int:
    from models.pretrained import path
    from models.checkpoint import read_config

    return int(read_config(path(name))["training"]["config"]["seq_len"])


def tda_sparsity(n: int = 1000, batch: int = 20) -> pd.DataFrame:
    """TDA paper Fig. 1a: the share of the differential map's causal entries that are exactly 0,
    per sequence, layer (mean over heads), on the first ``n`` ``iid`` sequences; mean and 95% t
    interval over sequences, for `tda-beta1` (beta = 1) and `tda-mech` (learned beta)."""
    from interp.metrics import capture_maps
    from interp.tasks import load_split

    tokens = load_split("iid", n)
    rows = []
    for name in ("tda-beta1", "tda-mech"):
        model, shares = load(name), {}

        def consume(layer, maps):
            a = maps["pattern"]                                   # [batch, head, query_pos, key_pos]
            causal = torch.ones(a.shape[-2:], dtype=torch.bool, device=a.device).tril()
            zeros = ((a == 0) & causal).sum((-1, -2)).double() / causal.sum()
            shares.setdefault(layer, []).extend(zeros.mean(1).tolist())

        with torch.no_grad():
            for lo in range(0, n, batch):
                capture_maps(model, tokens[lo:lo + batch], ["pattern"], consume=consume)
        for layer, values in sorted(shares.items()):
            low, high = ratio_interval(values)
            rows.append({"specimen": name, "layer": layer, "n_sequences": len(values),
                         "zero_share": float(np.mean(values)), "low": low, "high": high})
    return pd.DataFrame(rows)


def tda_inhibition(n: int = 100, batch: int = 10) -> pd.DataFrame:
    """TDA paper Fig. 2: per key token, the share of the (query, key) causal entries of
    `tda-beta1`'s differential maps (every layer and head) with a negative weight, on the first
    ``n`` ``iid`` sequences: pooled (``share``, with ``queries`` and ``inhibited``), and per sequence,
    whose mean gets a 95% t interval over the sequences (``low``, ``high``): the entries of one
    sequence are not independent draws, the sequences are."""
    from interp.metrics import capture_maps
    from interp.tasks import VOCAB, load_split

    tokens = load_split("iid", n)
    model = load("tda-beta1")
    negative, total = np.zeros((n, len(VOCAB))), np.zeros((n, len(VOCAB)))
    with torch.no_grad():
        for lo in range(0, n, batch):
            chunk = torch.as_tensor(tokens[lo:lo + batch].astype(np.int64))

            def consume(layer, maps, chunk=chunk, lo=lo):
                a = maps["pattern"]
                strict = torch.ones(a.shape[-2:], dtype=torch.bool).tril(-1)      # keys before the query
                for token in range(len(VOCAB)):
                    keys = strict & (chunk == token)[:, None, None, :]
                    negative[lo:lo + len(chunk), token] += ((a < 0) & keys).sum((1, 2, 3)).double().numpy()
                    total[lo:lo + len(chunk), token] += keys.sum((1, 2, 3)).double().numpy() * a.shape[1]
            capture_maps(model, tokens[lo:lo + batch], ["pattern"], consume=consume)
    rows = []
    for token, symbol in enumerate(VOCAB):
        seen = total[:, token] > 0
        if seen.any():
            per_sequence = negative[seen, token] / total[seen, token]
            low, high = ratio_interval(per_sequence)
            rows.append({"key_token": symbol, "n_sequences": int(seen.sum()), "queries": int(total[:, token].sum()),
                         "inhibited": int(negative[:, token].sum()),
                         "share": negative[:, token].sum() / total[:, token].sum(),
                         "mean_per_sequence": float(per_sequence.mean()), "low": low, "high": high})
    return pd.DataFrame(rows)


def single_view_noise(specimen: str = SINGLE_VIEW, n: int = 100, batch: int = 20) -> pd.DataFrame:
    """TDA paper Sec. 4.2 (l. 162): "a single view thresholded map can still admit occasional
    high-magnitude noise", which the differential map Delta a = a^(1) - lambda a^(2) suppresses. On
    the first ``n`` ``iid`` sequences, per read, the largest share of a head's |weight| that one key
    off the last write's tokens takes, over a layer's heads (:func:`interp.metrics.off_target_peak`,
    on ``hook_pattern`` ``[batch, head, query_pos, key_pos]``), for ``specimen``'s single view
    (trela's (s - tau)_+^p) and `tda-beta1`'s differential map: shares, since both rows are applied
    to V before an output normalisation, which removes their scale.
    Per layer: ``noise_peak``, the mean over sequences of each sequence's mean over its reads, with
    its 95% t interval over the sequences (``low``, ``high``; the reads of one sequence are not
    independent draws), and ``largest``, the largest over all reads. ``n`` = 100 (about 2,700 reads)
    takes about 30 s of a loaded core for the two models; the intervals' half-widths are then a few
    percent of the means."""
    from interp.metrics import capture_maps, off_target_peak
    from interp.tasks import load_split, read_mask

    tokens = load_split("iid", n)
    seq = np.nonzero(read_mask(tokens))[0]                  # the sequence of each read, in the metric's order
    rows = []
    for name in (specimen, "tda-beta1"):
        model, peaks = load(name), {}
        with torch.no_grad():
            for lo in range(0, n, batch):
                chunk = tokens[lo:lo + batch]

                def consume(layer, maps, chunk=chunk):
                    peaks.setdefault(layer, []).append(off_target_peak(maps["pattern"], chunk).cpu())
                capture_maps(model, chunk, ["pattern"], consume=consume)
        for layer, parts in sorted(peaks.items()):
            per_read = torch.cat(parts).double().numpy()
            per_sequence = pd.Series(per_read).groupby(seq).mean()
            low, high = ratio_interval(per_sequence)
            rows.append({"specimen": name, "layer": layer, "n_sequences": len(per_sequence), "reads": len(per_read),
                         "noise_peak": float(per_sequence.mean()), "low": low, "high": high,
                         "largest": float(per_read.max())})
    return pd.DataFrame(rows)


def dependency_lengths_ood(n: int = 2000) -> pd.DataFrame:
    """Flip-flop paper Fig. 12 (right) as the paper counts it: the dependency lengths of the wrong
    reads of `rope-mech` "on the union of the o.o.d. test sets", the first ``n`` sequences of
    `sparse` and of `dense` together (:func:`interp.figures.flipflop.dependency_histogram`)."""
    from interp.evaluate import evaluate_reads
    from interp.figures.flipflop import GLITCH_BIN, dependency_histogram

    _, reads = evaluate_reads(load("rope-mech"), ["sparse", "dense"], n)
    return dependency_histogram(reads).assign(model="rope-mech", split="sparse+dense", n_sequences=2 * n,
                                              bin_width=GLITCH_BIN)


def weight_norms() -> pd.DataFrame:
    """Flip-flop paper Fig. 15: the Frobenius norm of every weight matrix (parameters of two or
    more dimensions) of `automaton-1l` and `automaton-1l-sharp`."""
    return pd.DataFrame([{"specimen": name, "parameter": p, "frobenius": float(w.detach().norm())}
                         for name in AUTOMATON_SPECIMENS for p, w in load(name).named_parameters() if w.ndim >= 2])


def automaton_inputs(n: int = 200, seq_len: int = 128):
    """The sharpening study's automaton sequences (``interp.studies.registry.sharpening_evaluation``)."""
    from interp.tasks import sample_automaton

    return sample_automaton(n, seq_len, 0.5, rng=1)[0]


def automaton_sharpness() -> pd.DataFrame:
    """The share of sharp positions (>= 0.99 on the last write) of the shipped automaton
    specimens, measured as the sharpening study measures its runs, with a 95% Wilson interval."""
    from interp.metrics.probes import automaton_write_attention, sharp_share
    from interp.studies.registry import _sharpness

    rows = []
    for name in AUTOMATON_SPECIMENS:
        for r in _sharpness(load(name), automaton_inputs(), automaton_write_attention, sharp_share):
            low, high = wilson(r["sharp"], r["n"])
            rows.append({"specimen": name, "layer": r["layer"], "n": r["n"], "sharp": r["sharp"],
                         "share": r["share"], "low": low, "high": high})
    return pd.DataFrame(rows)


def value_weighted_attention() -> pd.DataFrame:
    """Flip-flop paper Fig. 17 and its footnote 17: at each position that needs the attention (after
    the first write, not itself a write, whose state is its own input), whether the head's largest
    weight a_ij is on the last write, and whether the largest norm of the weighted value vectors,
    |a_ij| ||v_j|| (``hook_pattern`` times the norm of ``hook_v``), is. ``misses_at_writes``: the
    write positions whose largest weight is elsewhere (not counted above)."""
    from interp.metrics import capture_maps
    from interp.metrics.probes import automaton_write_positions

    inputs = automaton_inputs()
    write = torch.as_tensor(automaton_write_positions(inputs))
    rows = []
    for name in AUTOMATON_SPECIMENS:
        with torch.no_grad():
            _, maps = capture_maps(load(name), inputs, ["pattern", "v"])
        layer = max(maps["pattern"])
        a = maps["pattern"][layer][:, 0]                             # [batch, query_pos, key_pos]
        v_norm = maps["v"][layer][:, :, 0].norm(dim=-1)              # [batch, key_pos]
        raw = a.argmax(-1)
        weighted = (a.abs() * v_norm[:, None, :]).argmax(-1)
        at_write = write == torch.arange(write.shape[-1])
        valid = (write >= 0) & ~at_write
        raw_hit, norm_hit = (raw == write) & valid, (weighted == write) & valid
        misses = valid & ~raw_hit
        rows.append({"specimen": name, "positions": int(valid.sum()), "raw_hits": int(raw_hit.sum()),
                     "norm_hits": int(norm_hit.sum()), "raw_misses": int(misses.sum()),
                     "norm_finds_at_misses": int((misses & norm_hit).sum()),
                     "misses_at_writes": int((at_write & (raw != write)).sum())})
    return pd.DataFrame(rows)


def r1_checkpoints() -> dict:
    """Flip-flop paper R1's second half: rope-mech's run (``reproduce table1 --scale cpu``'s RoPE,
    seed 0) trained again, stopped at every checkpoint (each 100 steps; the batches depend only on
    the seed and the step, so the run is the uninterrupted one), each checkpoint read on the first
    ``R1_SPLITS`` sequences of each split. Resumes from ``checkpoints.json``; writes ``result.json``
    when the last checkpoint is read."""
    from interp.evaluate import evaluate_splits
    from interp.studies.reproduce import SCALES, configs
    from interp.training.loop import train
    from models.checkpoint import read_config

    torch.set_num_threads(1)
    sweep, name = R1_CHECKPOINTS
    run_dir = RUNS / sweep / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    model_cfg, train_cfg = configs("rope", 0, SCALES["cpu"])
    partial = run_dir / "checkpoints.json"
    from interp.outputs import read_json

    done = read_json(partial, "measured checkpoints") if partial.exists() else []
    for step in range(100, train_cfg.steps + 1, 100):
        if any(c["step"] == step for c in done):
            continue
        if (run_dir / "config.json").exists() and read_config(run_dir)["training"]["step"] > step:
            continue   # the checkpoint went on without this one being read (an interrupted read)
        model = train(model_cfg, train_cfg, run_dir, resume=True, progress=False, until=step)
        model.eval()
        with torch.no_grad():
            record = {split: evaluate_splits(model, (split,), n=k)[split].to_dict() for split, k in R1_SPLITS.items()}
        done.append({"step": step, **record})
        write_json(partial, done)
    result = {"name": name, "model": "rope", "seed": 0, "command": configs_command(), "checkpoints": done}
    write_json(run_dir / "result.json", result)
    return result


def configs_command() -> str:
    from interp.studies.specimens import table1

    return table1("rope", "cpu").command()


def write_json(path, value) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    os.replace(tmp, path)


# name -> (function, seconds it takes on one core of the development machine, about)
def retrieval_probes(n: int = 256, batch: int = 16, specimens: tuple[str, ...] = FLIPFLOP_SPECIMENS) -> pd.DataFrame:
    """The two retrieval probes on each flip-flop specimen's final layer, over the first ``n``
    ``iid`` sequences: for the bit-carrier probe (:func:`interp.metrics.bit_carrier_attention`,
    ``carrier_*``) and the exact-write probe (:func:`interp.metrics.last_write_attention`,
    ``write_*``) the head with the highest argmax rate (``*_head``), that rate and the head's mean
    weight on the probe's positions, over all reads; and the share of reads the specimen gets
    right (``reads_right``, from the same forward's logits). Layer 0's best bit-carrier head is
    beside them (``layer0_carrier_*``): where the bit is read from when the final layer reads it
    from a copy."""
    from interp.metrics import bit_carrier_attention, capture_maps, last_write_attention, read_table
    from interp.tasks import load_split

    tokens = load_split("iid", n)
    rows = []
    for name in specimens:
        model = load(name)
        carrier, write, reads = [], [], []
        with torch.no_grad():
            for lo in range(0, n, batch):
                part = tokens[lo:lo + batch]
                logits, maps = capture_maps(model, part, ["pattern"])
                carrier.append(bit_carrier_attention(maps["pattern"], part))
                write.append(last_write_attention(maps["pattern"], part))
                reads.append(read_table(part, logits.argmax(-1)[:, :-1].numpy()))
        carrier, write, reads = (pd.concat(t, ignore_index=True) for t in (carrier, write, reads))
        final = int(carrier.layer.max())
        row = {"specimen": name, "layers": final + 1, "n_sequences": n, "reads": len(reads),
               "reads_right": float(reads.correct.mean())}
        for prefix, table, weight, layer in (("carrier", carrier, "carrier_weight", final),
                                             ("write", write, "weight", final),
                                             ("layer0_carrier", carrier, "carrier_weight", 0)):
            heads = table[table.layer == layer].groupby("head").agg(rate=("is_argmax", "mean"), weight=(weight, "mean"))
            best = heads.rate.idxmax()
            row |= {f"{prefix}_head": int(best), f"{prefix}_argmax_rate": float(heads.rate[best]),
                    f"{prefix}_weight": float(heads.weight[best])}
        rows.append(row)
    return pd.DataFrame(rows)


MEASUREMENTS = {
    "length_generalisation": (length_generalisation, 1200),
    "tda_sparsity": (tda_sparsity, 240),
    "tda_inhibition": (tda_inhibition, 30),
    "single_view_noise": (single_view_noise, 30),
    "dependency_lengths_ood": (dependency_lengths_ood, 120),
    "weight_norms": (weight_norms, 1),
    "automaton_sharpness": (automaton_sharpness, 5),
    "value_weighted_attention": (value_weighted_attention, 3),
    "retrieval_probes": (retrieval_probes, 300),
}
FAST = tuple(name for name, (_, seconds) in MEASUREMENTS.items() if seconds <= 5)
STUDIES = {"r1-checkpoints": r1_checkpoints}


def measure(names: list[str] | None = None, progress: bool = True) -> list[str]:
    """Recompute ``names`` (default: every measurement) and write each to ``runs/claims/NAME.csv``;
    ``r1-checkpoints`` runs the checkpoint study. A bar on stderr names the one running
    (``progress``). Returns the files written."""
    from tqdm.auto import tqdm

    from interp.outputs import staged_file

    names = list(MEASUREMENTS) if not names else names
    unknown = [n for n in names if n not in MEASUREMENTS and n not in STUDIES]
    if unknown:
        raise ValueError(f"unknown measurement {', '.join(unknown)}; choose from "
                         f"{', '.join([*MEASUREMENTS, *STUDIES])}")
    written = []
    CACHE.mkdir(parents=True, exist_ok=True)
    bar = tqdm(names, desc="claims --measure", unit="measurement", disable=not progress, file=sys.stderr)
    for name in bar:
        bar.set_postfix_str(name)
        if name in STUDIES:
            STUDIES[name]()
            written.append(str(RUNS / R1_CHECKPOINTS[0]))
            continue
        frame = MEASUREMENTS[name][0]()
        path = CACHE / f"{name}.csv"
        with staged_file(path) as stage:   # listed in the folder's record, never over another's file
            frame.to_csv(stage, index=False)
        written.append(str(path))
    return written

"""What the runs a claim still lacks would cost: ``about 25 hours of a core, or 40 min of an H200``.

A row of the claims table that cannot be settled here names its missing runs as
:class:`~interp.studies.specimens.Specimen` s (the studies' own definitions, or a set-up of theirs
at other sizes, seeds or steps) and prices them with :func:`cost_text`, from committed
measurements only; the evaluations are not counted (forward passes, a small part of a run here),
nor a sharpening regulariser's penalty.

One core (:func:`step_seconds`): the mechanism's one-thread training step at ``glitchlens bench
train``'s shape (``mini``, T = 512, batch 8: ``runs/bench/train.csv``), scaled to the run's shape
by a cost model of two terms, seconds = a x FLOPs + b x attention scores, whose a and b are
fitted to RoPE's two committed one-thread training steps: bench train's and ``rope-mech``'s
(8 sequences of 512 tokens, without a competing process: ``runs/bench/threads.csv``). FLOPs
(:func:`interp.bench.forward_flops`, with the unembedding) count the matrix products; the
scores (batch x layers x heads x T^2) stand for the element-wise work on the attention map
(softmax, masks and their backward) that FLOPs leave out and that is most of a step at
d_model 64: FLOPs alone, scaled from bench train's shape, put ``rope-mech``'s step 3x below its
measured time. A mechanism's own extra work enters through its own bench step, the model's
FLOPs (TDA's second query and key, CoPE's position logits) and its ratio to RoPE at bench train's
shape, held at other shapes.

Its error, checked when this was written against the CPU time (``time.process_time``, so the other
processes' load counts little) of 20 training steps in ``interp.training.loop.train``, one thread,
at the rows' shapes, measured over estimated: ``rope-mech`` 0.6-0.9x (two checks), ``trela-beta1``
0.9x, ``tda-beta1`` and RoPE at d_model 128 x 4 layers 1.1x, the R2 LSTM 1.1-1.5x, `cope-tasks`
counting for CoPE and Shaw 1.4-1.6x, ``diff-mech`` 1.5-1.7x (Diff's ratio to RoPE is larger at
d_model 64 than at bench train's 256), and 2-3x under for ``automaton-1l`` (1 layer at T = 128,
where a step's fixed work, which neither term counts, is most of it). The local logs of the
`cope-tasks` runs (``log.jsonl``, not committed: wall time on this 2-core machine beside two background
runs; the median step) read 1.2x (APE), 1.3x (Shaw) and 1.7x (CoPE) the estimate. So a text says
"about", rounded (:func:`duration`).

H200 (:func:`h200_seconds`): the steps per second that the committed campaign logs
(``runs/gpu/campaign-*.jsonl``, :func:`interp.studies.campaign.logged_rates`) measured, the
median of the groups trained the same way (batched over the seeds, or run by run:
:func:`interp.training.batched.unbatchable`), as ``glitchlens campaign --estimate`` prices a group
it has not logged: a launch-bound step's rate hardly depends on the model's size. The groups run
as many at once as the logged campaign ran them (:func:`interp.studies.campaign.schedule`), as
their rates were measured (at 2-5 seeds a batched group: one of more seeds is taken to step as
fast). Named only from :data:`GPU_FROM_S` seconds of a core: below, a
device's start, minutes, is most of what it would save.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interp.studies.specimens import Specimen

BENCH_SHAPE = {"preset": "mini", "batch_size": 8, "seq_len": 512}   # glitchlens bench train's
TRAIN_CSV = "runs/bench/train.csv"
THREADS_CSV = "runs/bench/threads.csv"
ROPE_MECH_BATCH = 8   # glitchlens bench threads' sequences (interp.bench.load.thread_workloads)
GPU_FROM_S = 3600.0


def work(model_cfg, batch_size: int, seq_len: int) -> tuple[float, float]:
    """The two terms of the cost model for one training step: FLOPs of the forward with the
    unembedding at every position, and attention scores (batch x layers x heads x T^2; 0 for the
    LSTM). The backward's multiple of each is in the fitted coefficients."""
    from interp.bench import forward_flops

    flops = batch_size * (forward_flops(model_cfg, seq_len) + seq_len * 2 * model_cfg.d_model * model_cfg.d_vocab)
    scores = 0 if model_cfg.attention is None else batch_size * model_cfg.n_layers * model_cfg.n_heads * seq_len ** 2
    return float(flops), float(scores)


def _bench_config(model: str):
    from models import ModelConfig

    return ModelConfig.from_preset(model, BENCH_SHAPE["preset"], n_ctx=BENCH_SHAPE["seq_len"])


def coefficients() -> tuple[float, float]:
    """Seconds per FLOP and per attention score of a one-thread step, fitted exactly to RoPE's two
    committed steps (the module docstring)."""
    import numpy as np

    from interp.claims import sources
    from interp.studies.specimens import specimen

    bench = sources.csv(TRAIN_CSV).set_index("model").step_s
    threads = sources.csv(THREADS_CSV).set_index(["workload", "competing"])["1 threads s"]
    shapes = [work(_bench_config("rope"), BENCH_SHAPE["batch_size"], BENCH_SHAPE["seq_len"]),
              work(specimen("rope-mech").configs()[0], ROPE_MECH_BATCH, BENCH_SHAPE["seq_len"])]
    a, b = np.linalg.solve(np.array(shapes), np.array([bench["rope"], threads["training step", "none"]]))
    if a <= 0 or b <= 0:
        raise ValueError(f"the one-thread steps in {TRAIN_CSV} and {THREADS_CSV} give a cost model with a negative "
                         "term: measure both again on one machine (glitchlens bench train; glitchlens bench threads)")
    return float(a), float(b)


def step_seconds(model_cfg, batch_size: int, seq_len: int) -> float:
    """Seconds of one core for one training step of ``model_cfg`` at this batch and length."""
    from interp.claims import sources

    bench = sources.csv(TRAIN_CSV).set_index("model").step_s
    if model_cfg.model not in bench:
        raise ValueError(f"{TRAIN_CSV} has no training step of {model_cfg.model!r} to estimate its runs from: run "
                         "`glitchlens bench train --out runs/bench`")
    a, b = coefficients()
    flops, scores = work(model_cfg, batch_size, seq_len)
    at_bench = work(_bench_config(model_cfg.model), BENCH_SHAPE["batch_size"], BENCH_SHAPE["seq_len"])
    return float(bench[model_cfg.model]) * (a * flops + b * scores) / (a * at_bench[0] + b * at_bench[1])


def core_seconds(runs: Iterable[Specimen]) -> float:
    """Seconds of one core to train ``runs`` one after another."""
    total = 0.0
    for run in runs:
        model_cfg, train_cfg = run.configs()
        total += train_cfg.steps * step_seconds(model_cfg, train_cfg.batch_size, train_cfg.seq_len)
    return total


def campaign_rates() -> tuple[dict[str, dict], int]:
    """The logged rates (:func:`interp.studies.campaign.logged_rates`) and the fewest groups a
    committed campaign trained at once."""
    from interp.claims.sources import ROOT
    from interp.outputs import read_bytes
    from interp.studies.campaign import DEVICE_LOGS, logged_rates

    rates, _ = logged_rates(ROOT)
    jobs = [json.loads(line)["jobs"] for file in sorted(ROOT.glob(DEVICE_LOGS))
            for line in read_bytes(file, "campaign log").decode().splitlines() if '"wall_s"' in line]
    return rates, min(jobs)


def h200_seconds(runs: Iterable[Specimen]) -> float | None:
    """Seconds of an H200 to train ``runs`` as a campaign would (the module docstring); None when no
    campaign log is committed or none of its groups was trained as one of these would be."""
    from interp.studies.campaign import schedule
    from interp.training.batched import unbatchable

    try:
        rates, jobs = campaign_rates()
    except ValueError:   # no campaign log committed
        return None
    groups: dict[str, list] = {}
    for run in runs:   # the seeds of one configuration form a group
        groups.setdefault(repr(replace(run, training={**run.training, "seed": 0})), []).append(run.configs())
    seconds = []
    for configs in groups.values():
        model_cfg, train_cfg = configs[0]
        batched = unbatchable(model_cfg, train_cfg) is None
        alike = [r["steps_per_s"] for r in rates.values() if r["batched"] == batched]
        if not alike:
            return None
        seconds += [train_cfg.steps / statistics.median(alike)] * (1 if batched else len(configs))
    return max((end for _, end, _ in schedule(seconds, jobs, None)), default=0.0)


def duration(seconds: float) -> str:
    """``7 min``, ``35 min`` (to 5), ``3.5 hours`` (to a half), ``25 hours``, ``140 hours`` (2 digits)."""
    minutes = seconds / 60
    if minutes < 9.5:
        return f"{max(1, round(minutes))} min"
    if minutes < 57.5:
        return f"{5 * round(minutes / 5)} min"
    hours = seconds / 3600
    half = round(2 * hours) / 2
    if half < 10:
        return f"{half:g} hour{'' if half == 1 else 's'}"
    return f"{round(hours) if hours < 100 else float(f'{hours:.2g}'):g} hours"


def cost_text(runs: Iterable[Specimen]) -> str:
    """``about 25 hours of a core``, with ``, or 40 min of an H200`` from :data:`GPU_FROM_S`."""
    runs = list(runs)
    core = core_seconds(runs)
    gpu = h200_seconds(runs) if core >= GPU_FROM_S else None
    return f"about {duration(core)} of a core" + ("" if gpu is None else f", or {duration(gpu)} of an H200")


def varied(base: Specimen, seeds: Iterable[int] = (0,), training: dict | None = None,
           **model_fields) -> list[Specimen]:
    """``base`` at each of ``seeds``, with the ``training`` and ``model_fields`` given: the runs of a
    set-up that a row prices. Runs that differ only in what costs nothing a step (a data pool, a
    temperature) are priced as more seeds of one set-up, which a campaign would batch together."""
    training = {**base.training, **(training or {})}
    return [replace(base, training={**training, "seed": seed}, model_fields={**base.model_fields, **model_fields})
            for seed in seeds]


def entry_runs(name: str) -> list[Specimen]:
    """The run that builds pretrained entry ``name`` (:data:`interp.studies.specimens.ENTRIES`)."""
    from interp.studies.specimens import entry

    return [entry(name).specimen]


def unfinished(study: str) -> list[Specimen]:
    """The runs of ``glitchlens reproduce STUDY`` (:data:`interp.studies.registry.STUDIES`) without a
    committed ``result.json``."""
    from interp.claims import sources
    from interp.studies.registry import STUDIES

    return [run for name, run in STUDIES[study]().items() if not sources.has_result(study, name)]

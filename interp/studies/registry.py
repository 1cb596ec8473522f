"""``glitchlens reproduce app-a | tda-threshold | sharpening | mixture | table1-budget``: sweeps
that test one claim of the papers each, with the seeds fixed before the runs and every run kept,
learned or not.

A study is a set of named runs, each a :class:`interp.studies.specimens.Specimen` (a model, a size, a
recipe and the options beyond them), trained and evaluated as ``reproduce table1``'s runs are
(:func:`interp.studies.seed_groups.train_and_evaluate`): ``OUT/runs/NAME/result.json`` is written when a
run ends, a run with one is read back and not trained again, and an unfinished run resumes
from its last checkpoint (every 100 steps). Each result records the ``glitchlens train``
command that trains the same run. What each study measures, and which run it ships, is
written here before its runs, so that no seed is chosen after seeing it.

- ``app-a``: the TRA paper's App. A pair (2 layers x 1 head, ``tiny``, d_model 64), TRA and FoT
  with the ``authors-notebook`` recipe, seeds 0-4, trained at T = 512 (Table 1's length) and
  at T = 128; 1000 steps at lr 1e-3, batch 16. Every run is evaluated on all of ``iid``
  (1000 sequences) and ``dense`` (3000) and the first 10,000 ``sparse`` sequences. A run has
  *learned* when >= 99% of 1000 held-out FFL(0.8) sequences of its training length are read
  without an error, and *generalises* when it has learned and >= 99% of the sequences of each
  of the three splits are read without an error. The pair to ship is chosen by
  :data:`APP_A_RULE`.
- ``tda-threshold``: TDA whose threshold ends at the paper's beta = 1
  (:func:`interp.studies.specimens.tda_threshold_sweep_run`).
- ``sharpening``: the flip-flop paper's attention-sharpening regularisers (Sec. 5.2) on
  ``automaton-1l`` and ``rope-mech``, with the share of sharp reads (:func:`sharpening_evaluation`).
- ``mixture``: the flip-flop paper's R4, RoPE trained on a mixture of sparsities.
- ``table1-budget``: the Table 1 baselines that did not learn in 1000 steps, at 3000 and 10,000.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import pandas as pd

from interp.outputs import staged
from interp.studies.cope_tasks import cope_tasks_runs, cope_tasks_summary, cope_tasks_table, task_evaluation
from interp.studies.reproduce import LEARNED, QUICK_EVAL_N, SCALES, SPLIT_ORDER, flipflop_evaluation, read_result
from interp.studies.seed_groups import PlannedRun, run_groups, train_alone
from interp.studies.specimens import Specimen, app_a_sweep_run, tda_threshold_sweep_run
from interp.studies.sweeps import run_all

# Sequences per split each run is evaluated on: all of iid (1000) and dense (3000), the first
# 10,000 of the 100,000 sparse ones.
EVAL_N = 10_000

APP_A_MODELS = ("tra", "fot")
APP_A_SEEDS = tuple(range(5))
APP_A_LENGTHS = (512, 128)
APP_A_RULE = ("the lowest seed at which both TRA and FoT, trained at T = 512, have learned (>= 99% of the "
              "1000 held-out FFL(0.8) sequences right); each member is that seed's run of its model. If no "
              "seed has both learn, no pair is shipped from the sweep.")


def app_a_runs() -> dict[str, Specimen]:
    """Every run of the App. A study, T = 512 first, then seed by seed, so that an interrupted
    sweep has the runs the shipped pair is chosen from."""
    return {f"{model}-T{seq_len}-seed{seed}": app_a_sweep_run(model, seq_len, seed)
            for seq_len in APP_A_LENGTHS for seed in APP_A_SEEDS for model in APP_A_MODELS}


# "TRA is the only 2 x 1 model that generalises" (App. A): the same layout, recipe and seeds for the
# other mechanisms of Table 1, at T = 512; judged by the claims table under the paper's perfection
# rule (interp.claims).
APP_A_EXTENDED_MODELS = ("nope", "ape", "rel", "rope", "label", "diff", "cope")


def app_a_extended_runs() -> dict[str, Specimen]:
    return {f"{model}-T512-seed{seed}": app_a_sweep_run(model, 512, seed)
            for seed in APP_A_SEEDS for model in APP_A_EXTENDED_MODELS}


# TDA with the threshold of the paper's regime (interp.studies.specimens.tda_threshold_sweep_run)
TDA_THRESHOLD_SEEDS = (0, 1, 2)
TDA_THRESHOLD_RULE = ("the lowest seed whose run has learned (>= 99% of the 1000 held-out FFL(0.8) sequences "
                      "right) is shipped as tda-beta1, the 1500-step study first, then the 3000-step one, then the "
                      "4500-step one; if none has, none is shipped.")


def tda_threshold_runs(steps: int = 1500) -> dict[str, Specimen]:
    """Seeds 0-2 of TDA with beta ramped to 1, at ``steps``: 1500 (``tda-threshold``), 3000
    (``tda-threshold-long``: the 1500-step runs read 96.3-98.2% of the held-out sequences, short of
    the rule's 99%) or 4500 (``tda-threshold-4500``: the 3000-step runs read 98.2-98.9%)."""
    tag = "" if steps == 1500 else str(steps)
    return {f"tda-ramp{tag}-seed{seed}": tda_threshold_sweep_run(seed, steps) for seed in TDA_THRESHOLD_SEEDS}


# Attention sharpening (flip-flop paper Sec. 5.2): automaton-1l's and rope-mech's set-ups, each
# with the entropy and the L-infinity regulariser at two strengths of the paper's grid, and
# unregularised, seeds 0 and 1.
SHARPENING_BASES = ("automaton-1l", "rope-mech")
SHARPENING_REGULARISERS = (("none", 0.0), ("entropy", 0.01), ("entropy", 0.1), ("linf", 0.01), ("linf", 0.1))
SHARPENING_SEEDS = (0, 1)
# Reads (automaton: positions) whose attention is measured for sharpness, and the weight on the
# last write that counts as sharp.
SHARPNESS_N = 200
SHARP = 0.99


def sharpening_runs() -> dict[str, Specimen]:
    from interp.studies.specimens import specimen

    runs = {}
    for seed in SHARPENING_SEEDS:
        for base in SHARPENING_BASES:
            chosen = specimen(base)
            for regulariser, coef in SHARPENING_REGULARISERS:
                training = {**chosen.training, "seed": seed, "regulariser": regulariser, "reg_coef": coef}
                runs[f"{base}-{regulariser}{coef:g}-seed{seed}".replace("none0", "none")] = replace(
                    chosen, training=training)
    return runs


def sharpening_evaluation(model, train_cfg, eval_n: int | None) -> dict:
    """The flip-flop model: :func:`flipflop_evaluation` and, on the first ``SHARPNESS_N``
    sequences of ``sparse`` and ``dense``, the share of reads with >= ``SHARP`` of some head's
    weight on the last write, per layer. The automaton: state accuracy on 1000 sequences at the
    training length and at T = 512, and the same share over every position of ``SHARPNESS_N``
    sequences at the training length."""
    from interp.evaluate import evaluate_automaton
    from interp.metrics.probes import automaton_write_attention, last_write_attention, sharp_share
    from interp.tasks import load_split, sample_automaton

    if train_cfg.task == "automaton":
        inputs, _ = sample_automaton(SHARPNESS_N, train_cfg.seq_len, 0.5, rng=1)
        return {"automaton": {str(T): evaluate_automaton(model, 1000, T) for T in (train_cfg.seq_len, 512)},
                "sharpness": {"train": _sharpness(model, inputs, automaton_write_attention, sharp_share)}}
    return {**flipflop_evaluation(model, train_cfg, eval_n),
            "sharpness": {split: _sharpness(model, load_split(split, SHARPNESS_N)[:, :-1], last_write_attention,
                                            sharp_share) for split in ("sparse", "dense")}}


def _sharpness(model, tokens, probe, share, batch: int = 20) -> list[dict]:
    """``share(probe(maps, tokens))`` over ``tokens`` in batches (the maps of a whole split do not
    fit in memory), as records ``layer, n, sharp, share``."""
    from interp.metrics.capture import capture_maps

    tables = [probe(capture_maps(model, tokens[lo:lo + batch], ["pattern"])[1]["pattern"], tokens[lo:lo + batch])
              .assign(seq=lambda f, lo=lo: f.seq + lo) for lo in range(0, len(tokens), batch)]
    return share(pd.concat(tables, ignore_index=True), SHARP).to_dict("records")


def mixture_runs() -> dict[str, Specimen]:
    """The flip-flop paper's R4 (Fig. 9): rope-mech's set-up trained on the long-tailed mixture of
    FFL(0.8), FFL(0.98) and FFL(0.1) (``--mixture``) instead of FFL(0.8), seeds 0-2."""
    return {f"rope-mixture-seed{seed}": Specimen("rope", "tiny", {**SCALES["cpu"].training(seed), "mixture": True},
                                                 SCALES["cpu"].recipe) for seed in (0, 1, 2)}


TABLE1_BUDGET_MODELS = ("nope", "ape", "rel", "label", "diff")
TABLE1_BUDGETS = (3000, 10_000)


# REL's and Diff's Table 1 rows are decided over seeds: their seeds 1-2 at 10,000 steps too.
TABLE1_BUDGET_SEEDS = {("rel", 10_000): (0, 1, 2), ("diff", 10_000): (0, 1, 2)}


def table1_budget_runs() -> dict[str, Specimen]:
    """The Table 1 runs of ``reproduce table1 --scale cpu`` (seed 0) of the models that did not
    learn ``iid`` in 1000 steps, and Diff, whose ``dense`` collapsed, at longer budgets; REL and
    Diff at 10,000 steps also at seeds 1-2 (:data:`TABLE1_BUDGET_SEEDS`), after every seed-0 run."""
    def run(model: str, steps: int, seed: int) -> Specimen:
        return Specimen(model, "tiny", {**SCALES["cpu"].training(seed), "steps": steps}, SCALES["cpu"].recipe)

    seed0 = {f"{model}-steps{steps}-seed0": run(model, steps, 0)
             for steps in TABLE1_BUDGETS for model in TABLE1_BUDGET_MODELS}
    more = {f"{model}-steps{steps}-seed{seed}": run(model, steps, seed)
            for (model, steps), seeds in TABLE1_BUDGET_SEEDS.items() for seed in seeds if seed}
    return {**seed0, **more}


# The flip-flop paper's R2 (App. B.2): a 1-layer LSTM, hidden 128 (models.config's skyline), at the
# paper's recipe: AdamW (0.9, 0.999), lr 3e-4, weight decay 0.1, 50 warm-up steps, batch 16, 500
# steps at T = 512 (the llama recipe; the paper decays the lr linearly, ours is cosine). The paper:
# 0 o.o.d. errors on 100 of 100 runs.
LSTM_R2_SEEDS = tuple(range(20))


def lstm_r2_runs() -> dict[str, Specimen]:
    return {f"lstm-r2-seed{seed}": Specimen("lstm", "tiny", {"seq_len": 512, "batch_size": 16, "steps": 500,
                                                             "lr": 3e-4, "seed": seed}, "llama")
            for seed in LSTM_R2_SEEDS}


def r6_levers_runs() -> dict[str, Specimen]:
    """The flip-flop paper's R6 lever with the largest effect on ``sparse`` (its Fig. 10): embedding
    dropout 0.5 on rope-mech's set-up (``reproduce table1 --scale cpu``'s RoPE), seeds 0-4."""
    cpu = SCALES["cpu"]
    return {f"rope-embdrop0.5-seed{seed}": Specimen("rope", "tiny", cpu.training(seed), cpu.recipe,
                                                     model_fields={"embedding_dropout": 0.5}) for seed in range(5)}


STUDIES = {"app-a": app_a_runs, "app-a-extended": app_a_extended_runs, "tda-threshold": tda_threshold_runs,
           "tda-threshold-long": partial(tda_threshold_runs, 3000),
           "tda-threshold-4500": partial(tda_threshold_runs, 4500),
           "sharpening": sharpening_runs,
           "mixture": mixture_runs, "table1-budget": table1_budget_runs, "lstm-r2": lstm_r2_runs,
           "r6-levers": r6_levers_runs, "cope-tasks": cope_tasks_runs}
EVALUATIONS = {"sharpening": sharpening_evaluation, "cope-tasks": task_evaluation}


def study_run(name: str, run: Specimen) -> tuple:
    """The ``(ModelConfig, TrainConfig)`` a study's run ``name`` trains with, its quick checks and
    checkpoints included, and what its ``result.json`` records before the evaluation."""
    model_cfg, train_cfg = run.configs()
    train_cfg = replace(train_cfg, eval_every=200, eval_n=QUICK_EVAL_N, checkpoint_every=100)
    header = {"name": name, "model": run.model, "seed": run.training["seed"], "seq_len": train_cfg.seq_len,
              "regulariser": train_cfg.regulariser, "reg_coef": train_cfg.reg_coef, "command": run.command()}
    return (model_cfg, train_cfg), header


def planned_run(study: str, name: str, run: Specimen, out: str | Path, eval_n: int | None) -> PlannedRun:
    """Run ``name`` of ``study`` as its sweep in ``out`` trains it (:func:`study_run`) and evaluates
    it (the study's evaluation, on the first ``eval_n`` sequences)."""
    (model_cfg, train_cfg), header = study_run(name, run)
    return PlannedRun(str(out), name, model_cfg, train_cfg, header, eval_n,
                      EVALUATIONS.get(study, flipflop_evaluation))


def run_study_one(study: str, name: str, run: Specimen, out: str) -> dict:
    """Train and evaluate one run of a study; return its result (read from disk if done)."""
    return train_alone(planned_run(study, name, run, out, EVAL_N))


def run_study(study: str, out: str | Path, jobs: int = 2, ray_address: str | None = None,
              train: bool = True, batch_seeds: bool = False) -> pd.DataFrame:
    """Run (or resume) ``study`` under ``out/runs``, one process per run or, with ``batch_seeds``,
    the seeds of each configuration as one batched model (:mod:`interp.studies.seed_groups`), then
    write ``runs.csv`` and ``summary.md`` to ``out`` from every finished run; ``train=False`` only
    writes them."""
    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; choose one of {', '.join(STUDIES)}")
    out = Path(out)
    runs = STUDIES[study]()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    if train and batch_seeds:
        run_groups([planned_run(study, name, run, out, EVAL_N) for name, run in runs.items()], jobs, ray_address,
                   "cpu")
    elif train:
        run_all(run_study_one, {name: (study, name, run, str(out)) for name, run in runs.items()}, jobs, ray_address)
    results = [read_result(f) for f in (out / "runs" / name / "result.json" for name in runs)
               if f.exists()]
    if not results:
        raise ValueError(f"no finished run under {out / 'runs'}: run the study first (without --report-only)")
    frame = TABLES.get(study, run_table)(results)
    with staged(out) as stage:   # never over a file glitchlens did not write, nor through a link
        frame.to_csv(stage / "runs.csv", index=False)
        (stage / "summary.md").write_text(SUMMARIES[study](frame))
    return frame


def run_table(results: list[dict]) -> pd.DataFrame:
    """One row per run: its held-out and split accuracies, read errors with 95% upper bounds,
    and whether it learned and generalises (the module docstring's definitions)."""
    rows = []
    for r in results:
        row = {"name": r["name"], "model": r["model"], "seq_len": r["seq_len"], "seed": r["seed"],
               "held_out": r["held_out"]["sequence_accuracy"]}
        for split in SPLIT_ORDER:
            s = r["splits"][split]
            row |= {split: s["sequence_accuracy"], f"{split}_sequences": s["sequences"],
                    f"{split}_read_errors": s["read_errors"], f"{split}_reads": s["reads"],
                    f"{split}_error_upper95": s["error_rate_upper95"]}
        row["learned"] = row["held_out"] >= LEARNED
        row["generalises"] = row["learned"] and all(row[split] >= LEARNED for split in SPLIT_ORDER)
        rows.append(row)
    return pd.DataFrame(rows)


def app_a_summary(frame: pd.DataFrame) -> str:
    """Counts of seeds that learned and generalise per model and length, every run's numbers,
    and the pair :data:`APP_A_RULE` chooses from the runs finished so far."""
    lines = ["| model | T | seeds | learned | generalises |", "|---|---|---|---|---|"]
    for (model, seq_len), runs in frame.groupby(["model", "seq_len"], sort=False):
        lines.append(f"| {model} | {seq_len} | {len(runs)} | {int(runs.learned.sum())} | "
                     f"{int(runs.generalises.sum())} |")
    lines += ["", "| run | held-out | iid | dense | sparse (first 10,000) | read errors iid / dense / sparse "
                  "(95% upper bound of the rate) |", "|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        errors = " / ".join(f"{getattr(r, f'{s}_read_errors')} of {getattr(r, f'{s}_reads')} "
                            f"(<= {getattr(r, f'{s}_error_upper95'):.2g})" for s in SPLIT_ORDER)
        lines.append(f"| {r.name} | {100 * r.held_out:.1f}% | {100 * r.iid:.1f}% | {100 * r.dense:.1f}% | "
                     f"{100 * r.sparse:.1f}% | {errors} |")
    seed = app_a_chosen_seed(frame)
    chosen = ("no seed yet" if seed is None else f"seed {seed}: `tra-T512-seed{seed}` and `fot-T512-seed{seed}`")
    return ("Learned: >= 99% of 1000 held-out FFL(0.8) sequences of the training length right. Generalises: "
            "learned, and >= 99% of the sequences of iid, dense and the first 10,000 of sparse right.\n\n"
            + "\n".join(lines) + f"\n\nThe rule: {APP_A_RULE}\nChosen: {chosen}.\n")


def app_a_chosen_seed(frame: pd.DataFrame) -> int | None:
    """The seed :data:`APP_A_RULE` chooses, among the seeds whose T = 512 runs of both models have
    finished; None if none qualifies."""
    at_512 = frame[frame.seq_len == 512]
    for seed in APP_A_SEEDS:
        runs = at_512[at_512.seed == seed]
        if set(runs.model) != set(APP_A_MODELS):
            return None   # undecided until this seed's runs have finished
        if runs.learned.all():
            return seed
    return None


def accuracy_summary(title: str):
    """A summary that lists every run's sequence accuracies under ``title``."""
    def summary(frame: pd.DataFrame) -> str:
        lines = ["| run | held-out | iid | dense | sparse (first 10,000) | learned |", "|---|---|---|---|---|---|"]
        lines += [f"| {r.name} | {100 * r.held_out:.1f}% | {100 * r.iid:.1f}% | {100 * r.dense:.1f}% | "
                  f"{100 * r.sparse:.1f}% | {'yes' if r.learned else 'no'} |" for r in frame.itertuples()]
        return f"{title} Learned: >= 99% of 1000 held-out sequences right.\n\n" + "\n".join(lines) + "\n"
    return summary


def sharpening_table(results: list[dict]) -> pd.DataFrame:
    """One row per sharpening run: ``base`` (the set-up), ``regulariser``, ``reg_coef``, ``seed``;
    for ``rope-mech`` the read errors and rates on ``sparse`` and ``dense`` with their 95% upper
    bounds and the ``iid``/held-out accuracies, for ``automaton-1l`` the state accuracy at the
    training length and at T = 512; ``sharp_*``: the share of sharp reads of each layer
    (:func:`sharpening_evaluation`), ``sharp``: the largest over layers."""
    rows = []
    for r in results:
        row = {"name": r["name"], "base": r["name"].rsplit("-", 2)[0],
               "regulariser": r["regulariser"], "reg_coef": r["reg_coef"], "seed": r["seed"]}
        if "automaton" in r:
            for T, a in r["automaton"].items():
                row |= {f"state_accuracy_T{T}": a["position_accuracy"], f"sequence_accuracy_T{T}": a["sequence_accuracy"]}
        else:
            row |= {"held_out": r["held_out"]["sequence_accuracy"], "iid": r["splits"]["iid"]["sequence_accuracy"]}
            for split in ("sparse", "dense"):
                s = r["splits"][split]
                row |= {f"{split}_read_errors": s["read_errors"], f"{split}_reads": s["reads"],
                        f"{split}_error_rate": s["error_rate"], f"{split}_error_upper95": s["error_rate_upper95"]}
        shares = [layer for measured in r["sharpness"].values() for layer in measured]
        for layer in {m["layer"] for m in shares}:
            at = [m for m in shares if m["layer"] == layer]
            row[f"sharp_L{layer}"] = sum(m["sharp"] for m in at) / sum(m["n"] for m in at)
        row["sharp"] = max(v for k, v in row.items() if k.startswith("sharp_L"))
        rows.append(row)
    return pd.DataFrame(rows)


def sharpening_summary(frame: pd.DataFrame) -> str:
    """Per set-up and regulariser: each seed's error rates (rope-mech) or state accuracies
    (automaton-1l) and its share of sharp reads."""
    lines = ["| set-up | regulariser | seed | sparse read errors (rate, 95% upper) | dense read errors (rate, 95% "
             "upper) | iid | automaton state accuracy T = 128 / 512 | sharp reads (largest layer) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in frame.sort_values(["base", "regulariser", "reg_coef", "seed"]).to_dict("records"):
        regulariser = "none" if r["regulariser"] == "none" else f"{r['regulariser']} {r['reg_coef']:g}"
        if r["base"] == "rope-mech":
            errors = [f"{r[f'{s}_read_errors']:.0f} of {r[f'{s}_reads']:.0f} ({r[f'{s}_error_rate']:.2e}, "
                      f"<= {r[f'{s}_error_upper95']:.2e})" for s in ("sparse", "dense")]
            cells = [*errors, f"{100 * r['iid']:.1f}%", ""]
        else:
            cells = ["", "", "", f"{100 * r['state_accuracy_T128']:.3f}% / {100 * r['state_accuracy_T512']:.3f}%"]
        lines.append(f"| {r['base']} | {regulariser} | {r['seed']} | " + " | ".join(cells) + f" | {r['sharp']:.3f} |")
    return (f"Sharp read: some head puts >= {SHARP} of its weight on the last write (automaton: at every position "
            f"after the first write), on the first {SHARPNESS_N} sparse and dense sequences (automaton: "
            f"{SHARPNESS_N} sequences at T = 128).\n\n" + "\n".join(lines) + "\n")


TABLES = {"sharpening": sharpening_table, "cope-tasks": cope_tasks_table}
SUMMARIES = {"app-a": app_a_summary, "sharpening": sharpening_summary, "cope-tasks": cope_tasks_summary,
             "app-a-extended": accuracy_summary("The App. A layout (2 x 1 x 64, authors-notebook, 1000 steps at T = "
                                                "512) for the other mechanisms of Table 1."),
             "tda-threshold": accuracy_summary("TDA trained with beta ramped from 0 to 1 at step 500-1000, then held. "
                                               f"The rule: {TDA_THRESHOLD_RULE}"),
             "tda-threshold-long": accuracy_summary("TDA trained with beta ramped from 0 to 1 at step 1000-2000, then "
                                                    f"held to 3000. The rule: {TDA_THRESHOLD_RULE}"),
             "tda-threshold-4500": accuracy_summary("TDA trained with beta ramped from 0 to 1 at step 1500-3000, then "
                                                    f"held to 4500. The rule: {TDA_THRESHOLD_RULE}"),
             "mixture": accuracy_summary("RoPE (rope-mech's set-up) trained on the FFL(0.8/0.98/0.1) mixture."),
             "table1-budget": accuracy_summary("Table 1 models (cpu scale) at 3000 and 10,000 steps: seed 0, "
                                               "and REL and Diff at 10,000 steps also seeds 1-2."),
             "r6-levers": accuracy_summary("RoPE (rope-mech's set-up) with embedding dropout 0.5."),
             "lstm-r2": accuracy_summary("The flip-flop paper's R2: a 1-layer LSTM (hidden 128), 500 steps at lr "
                                         "3e-4, batch 16, T = 512.")}

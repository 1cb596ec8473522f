"""The CoPE paper's claims: on flip-flop, its App. C Fig. 5 (CoPE learns fastest) and Fig. 6 (gates
open on the tokens a head counts); on its own tasks, Tables 2-4 with Tables 9-10's spreads (CoPE
errs least on counting and selective copy, in and out of distribution), from the `cope-tasks`
sweep (:mod:`interp.studies.cope_tasks`)."""

from __future__ import annotations

import numpy as np

from interp.claims import sources
from interp.claims.cost import cost_text, varied
from interp.claims.stats import ALPHA, percent_seeds, rank_test, seed_interval, share_interval, smallest_p
from interp.claims.stats import decide as stats_decide
from interp.claims.verdicts import Claim, Evidence, not_run, overlaps, paper_range, percent_interval, wilson

SOFTMAX_POSITIONS = ("nope", "ape", "rel", "rope", "label")   # the position encodings CoPE is set against
# Table 7's 8 sizes (d_model, layers, heads)
TABLE7_SIZES = tuple((width, layers, heads) for width in (128, 256) for layers in (2, 4) for heads in (2, 4))


def learning_step(curve: list[list[float]]) -> float:
    """The first quick check (100 `iid` sequences) with every sequence right; inf if none."""
    return next((step for step, accuracy in curve if accuracy >= 1.0), np.inf)


def fastest_evidence() -> Evidence:
    """App. C Fig. 5: CoPE converges fastest, and an absolute position table fails to learn. From the
    learning curves of `table1-cpu` (seeds 0-2; a run that never learns counts as the latest): holds
    when the exact one-sided rank test over seeds puts CoPE's learning steps below each softmax
    position encoding's (NoPE, APE, REL, RoPE, Label) at p <= 0.05 and APE learns on no seed; at
    strength when also no model of the table is below CoPE at p <= 0.05; the opposite when some
    softmax position encoding is below CoPE at p <= 0.05."""
    steps = {model: [learning_step(sources.result("table1-cpu", f"{model}-seed{s}")["learning_curve"])
                     for s in range(3)] for model in ("cope", *SOFTMAX_POSITIONS, "fot", "tra", "diff", "lstm")}
    tests = {m: rank_test(steps["cope"], v) for m, v in steps.items() if m != "cope"}
    slower = [m for m in SOFTMAX_POSITIONS if stats_decide(tests[m])[0]]
    faster = [m for m, t in tests.items() if stats_decide(t)[1]]
    text = ", ".join(f"{m} {'/'.join('-' if s == np.inf else str(int(s)) for s in v)}" for m, v in steps.items())
    holds = len(slower) == len(SOFTMAX_POSITIONS) and all(s == np.inf for s in steps["ape"])
    return Evidence(f"first step with 100 of 100 `iid` sequences right, seeds 0 / 1 / 2 (- never in 1000): {text}",
                    "3 seeds per model, a check every 200 steps", "CoPE earlier (exact rank test over seeds, p <= "
                    f"0.05) than {', '.join(slower) or 'none'}; later than {', '.join(faster) or 'none'}",
                    holds=holds, at_strength=holds and not faster,
                    opposite=any(m in faster for m in SOFTMAX_POSITIONS),
                    reason=f"budget: 3 seeds each; CoPE not earlier than "
                    f"{', '.join(m for m in SOFTMAX_POSITIONS if m not in slower)} at p <= 0.05",
                    source="runs/table1-cpu/runs/*/result.json (learning_curve)")


def gates_evidence() -> Evidence:
    """Fig. 6: a head's gates open on the tokens it counts (paragraph or section markers) and stay
    closed on the others. Figure ``10``'s mean gate per key token and head: holds when in most heads
    one token's mean gate is above every other token's by more than their 95% intervals (a
    preference); at strength when that gate is >= 0.9 and every other <= 0.1 (a switch, as the
    paper's); the opposite when no head prefers a token."""
    data = sources.figure("10_cope_gates_positions")
    prefer, switch, best = 0, 0, []
    has_interval = {"value_low", "value_high"} <= set(data.columns)
    for (layer, head), g in data.groupby(["layer", "head"]):
        g = g.sort_values("value", ascending=False)
        top, rest = g.iloc[0], g.iloc[1:]
        low = top.value_low if has_interval else top.value
        highs = rest.value_high if has_interval else rest.value
        prefer += bool(low > highs.max())
        switch += bool(top.value >= 0.9 and (rest.value <= 0.1).all())
        best.append(f"L{layer}H{head} `{top.key_token}` {top.value:.2f}")
    heads = data.groupby(["layer", "head"]).ngroups
    n = int(data.n_sequences.iloc[0]) if "n_sequences" in data.columns else 1
    return Evidence(f"highest mean gate per head: {', '.join(best)}; a preference in {prefer} of {heads} heads, a "
                    f"switch in {switch}", f"{n} iid sequences", f"preference in "
                    f"{100 * wilson(prefer, heads)[0]:.0f}-{100 * wilson(prefer, heads)[1]:.0f}% of heads",
                    holds=2 * prefer > heads, at_strength=2 * switch > heads, opposite=prefer == 0,
                    reason="metric: a preference in some heads, not most", source="figures/10_cope_gates_positions.csv")


def seed_errors(task: str, model: str, split: str) -> dict[int, float]:
    """The answer error rate (a share) of each finished seed's run of ``model`` on ``task``'s ``split``."""
    from interp.studies.cope_tasks import model_seeds

    return {seed: sources.result("cope-tasks", f"{task}-{model}-seed{seed}")["splits"][split]["error_rate"]
            for seed in model_seeds(model) if sources.has_result("cope-tasks", f"{task}-{model}-seed{seed}")}


def missing_runs(task: str, models: tuple[str, ...]) -> dict[str, list[int]]:
    """The seeds of each model whose run of ``task`` has no ``result.json`` yet."""
    from interp.studies.cope_tasks import model_seeds

    missing = {model: [seed for seed in model_seeds(model)
                       if not sources.has_result("cope-tasks", f"{task}-{model}-seed{seed}")] for model in models}
    return {model: seeds for model, seeds in missing.items() if seeds}


def missing_text(task: str, missing: dict[str, list[int]]) -> str:
    """The missing runs of ``task`` and what they cost (:func:`interp.claims.cost.cost_text`)."""
    from interp.studies.cope_tasks import cope_task_run

    if not missing:
        return ""
    count = sum(len(seeds) for seeds in missing.values())
    which = ", ".join(f"{model} {'/'.join(str(s) for s in seeds)}" for model, seeds in missing.items())
    cost = cost_text(cope_task_run(task, model, seed) for model, seeds in missing.items() for seed in seeds)
    return (f"; {count} runs not in (`{task}` seeds {which}; {cost}: "
            "`glitchlens reproduce cope-tasks --out runs/cope-tasks` resumes them)")


def pool_runs() -> list:
    """Fig. 2's runs as priced: CoPE and Shaw on `cope-tasks`' counting, 3 pool sizes x 5 seeds each
    (a smaller pool costs nothing a step: priced as 15 seeds)."""
    from interp.studies.cope_tasks import cope_task_run

    return [cope_task_run("counting", model, seed) for model in ("cope", "shaw") for seed in range(3 * 5)]


def size_runs() -> list:
    """Table 7's runs as priced: CoPE, RoPE and APE at `rope-mech`'s flip-flop set-up (``reproduce
    table1 --scale cpu``) at each size of :data:`TABLE7_SIZES`, 10,000 steps, seeds 0-2."""
    from interp.studies.specimens import table1

    return [run for model in ("cope", "rope", "ape") for width, layers, heads in TABLE7_SIZES
            for run in varied(table1(model, "cpu"), range(3), {"steps": 10_000}, d_model=width, n_layers=layers,
                              n_heads=heads)]


def model_text(task: str, model: str, split: str, errors: dict[int, float]) -> str:
    """``model mean% (sd, t interval over seeds), k of n learn (exact interval)``."""
    from interp.studies.cope_tasks import learns

    if not errors:
        return f"{model} not run"
    iid = seed_errors(task, model, "iid")
    learned = sum(learns(task, iid[seed]) for seed in errors)
    return (f"{model} {percent_seeds(list(errors.values()))}, {learned} of {len(errors)} learn "
            f"({percent_interval(share_interval(learned, len(errors)), 0)})")


def task_comparison_evidence(task: str, splits: tuple[str, ...], rivals: tuple[str, ...],
                             beside: tuple[str, ...] = ()) -> Evidence:
    """CoPE errs less than each of the paper's ``rivals`` on every split of ``task``. From the
    `cope-tasks` sweep (:mod:`interp.studies.cope_tasks`), one answer error rate per seed, each on all
    1000 sequences of each split; the seed is the unit (the paper's Tables 9-10 give sds over runs).
    Holds when on every split the exact one-sided rank test over seeds (:func:`interp.claims.stats.rank_test`)
    puts CoPE below each rival at p <= 0.05; at strength when also CoPE's 95% t interval over seeds
    overlaps the paper's mean +- sd on every split; contradicted when some rival is below CoPE at p <=
    0.05. Decided on the seeds that have finished, and not reproduced (budget) while some rival has
    too few seeds for p to reach 0.05, naming the runs missing and their cost. The models ``beside``
    (not the paper's rivals here) are reported, not judged; the share of seeds that learn
    (:func:`interp.studies.cope_tasks.learns`) is given for each model."""
    from interp.studies.cope_tasks import PAPER_ERROR

    models = ("cope", *rivals, *beside)
    errors = {(model, split): seed_errors(task, model, split) for model in models for split in splits}
    waiting = missing_text(task, missing_runs(task, models))
    source = f"runs/cope-tasks/runs/{task}-*/result.json (splits)"
    ours = "; ".join(f"`{split}` error " + ", ".join(model_text(task, m, split, errors[m, split]) for m in models)
                     for split in splits)
    tests = {(split, rival): rank_test(list(errors["cope", split].values()), list(errors[rival, split].values()))
             for split in splits for rival in rivals}
    judged = [stats_decide(t) for t in tests.values()]
    n = (", ".join(f"{m} {len(errors[m, splits[0]])}" for m in models) + " seeds, 1000 sequences per split"
         + waiting)
    interval = "; ".join(f"`{split}` CoPE below {rival}: p = {t.p:.3g}" for (split, rival), t in tests.items())
    attainable = max(smallest_p(len(errors["cope", splits[0]]), len(errors[r, splits[0]])) for r in rivals)
    if not any(o for _, o in judged) and not all(h for h, _ in judged) and attainable > ALPHA:
        return Evidence(ours, n, interval, False, False, False,
                        f"budget: these seeds can give at best p = {attainable:.3g} (runs not in: see n)", source)
    cope_intervals = {split: seed_interval(list(errors["cope", split].values())) for split in splits}
    matches = [overlaps(cope_intervals[split], paper_range(*PAPER_ERROR[task, "cope"][split])) for split in splits]
    holds = all(h for h, _ in judged)
    return Evidence(ours, n, interval, holds=holds, at_strength=holds and all(matches),
                    opposite=any(o for _, o in judged),
                    reason=f"budget: {STEPS_TEXT}; CoPE not below every rival at p <= 0.05", source=source)


STEPS_TEXT = "2000 steps of batch 16 on a CPU, the paper's 10k (flip-flop) to 100k (selective copy)"


def paper_errors(task: str, models: tuple[str, ...], splits: tuple[str, ...]) -> str:
    """The paper's mean (sd) error per model and split, from :data:`interp.studies.cope_tasks.PAPER_ERROR`;
    ``shaw`` is the paper's Relative PE."""
    from interp.studies.cope_tasks import PAPER_ERROR

    name = {"shaw": "Relative PE (shaw)", "ape": "APE", "rope": "RoPE", "cope": "CoPE"}
    return "test error %, mean (sd): " + "; ".join(
        f"`{split}` " + ", ".join(f"{name[m]} {PAPER_ERROR[task, m][split][0]} ({PAPER_ERROR[task, m][split][1]})"
                                  for m in models if split in PAPER_ERROR.get((task, m), {}))
        for split in splits)


def task_claim(key: str, section: str, claim: str, task: str, splits: tuple[str, ...],
               rivals: tuple[str, ...], quote: tuple[int, str], beside: tuple[str, ...] = ()) -> Claim:
    from interp.studies.cope_tasks import REL_SEEDS, SEEDS, STEPS

    return Claim(key, "CoPE", section, claim, paper_errors(task, ("cope", *rivals), splits),
                 f"`cope-tasks` {task}: 2 x 2 x 64, {STEPS} steps of batch 16, seeds {SEEDS[0]}-{SEEDS[-1]} "
                 f"(`rel`, a T5-style bias beside them: seeds {REL_SEEDS[0]}-{REL_SEEDS[-1]})",
                 lambda: task_comparison_evidence(task, splits, rivals, beside), quote=quote)


# CoPE paper Table 7 (App. C), 256 x 4 layers x 4 heads, its Table 2 (left) set-up: test error % in-dist. / OOD,
# mean (sd) over its runs.
PAPER_FLIPFLOP = {"cope": ((0.03, 0.06), (4.9, 4.4)), "rope": ((1.8, 3.1), (20.3, 2.9)),
                  "ape": ((6.8, 6.9), (21.7, 7.9))}
# Where each model's Table 1 runs are: CoPE learns in 1000 steps; APE and RoPE are read at 10,000, their best budget.
FLIPFLOP_RUNS = {"cope": "table1-cpu", "rope": "table1-10000", "ape": "table1-10000"}


def flipflop_error(result: dict) -> tuple[float, float]:
    """A run's read error rate in distribution (`iid`) and out of it (the `sparse` and `dense` reads together)."""
    s = result["splits"]
    ood = (s["sparse"]["read_errors"] + s["dense"]["read_errors"]) / (s["sparse"]["reads"] + s["dense"]["reads"])
    return s["iid"]["read_errors"] / s["iid"]["reads"], ood


def flipflop_table2_evidence() -> Evidence:
    """Table 2 (left) / App. C Table 7: on flip-flop CoPE errs less than APE and RoPE in and out of
    distribution. From Table 1's runs, seeds 0-2 (CoPE at 1000 steps; APE and RoPE at 10,000, so the
    rivals have ten times CoPE's steps), the read error rate per seed: holds when the exact one-sided
    rank test over seeds puts CoPE below each rival out of distribution at p <= 0.05 (3 against 3: p =
    0.05 only if every CoPE seed is below every rival's) and not above either in distribution; at
    strength when also CoPE's t interval over seeds overlaps the paper's mean +- sd on both;
    contradicted when a rival is below CoPE out of distribution at p <= 0.05."""
    errors = {m: [flipflop_error(sources.result(sweep, f"{m}-seed{s}")) for s in range(3)]
              for m, sweep in FLIPFLOP_RUNS.items()}
    ood = {m: [e[1] for e in v] for m, v in errors.items()}
    iid = {m: [e[0] for e in v] for m, v in errors.items()}
    tests = {r: rank_test(ood["cope"], ood[r]) for r in ("rope", "ape")}
    iid_above = [rank_test(iid["cope"], iid[r]).p_opposite <= ALPHA for r in ("rope", "ape")]
    holds = all(stats_decide(t)[0] for t in tests.values()) and not any(iid_above)
    strength = all(overlaps(seed_interval(v), paper_range(*PAPER_FLIPFLOP["cope"][k])) for k, v in
                   enumerate((iid["cope"], ood["cope"])))
    ours = "; ".join(f"{m} in-dist. {percent_seeds(iid[m], 3)}, OOD {percent_seeds(ood[m], 2)}" for m in errors)
    return Evidence(f"read error rate per seed: {ours}", "3 seeds per model, 1000 iid, 3000 dense and 10,000 "
                    "sparse sequences each", "; ".join(f"OOD CoPE below {r}: p = {t.p:.3g}" for r, t in tests.items()),
                    holds=holds, at_strength=holds and strength,
                    opposite=any(stats_decide(t)[1] for t in tests.values()),
                    reason="budget: CoPE not below both rivals at p <= 0.05 with 3 seeds each",
                    source="runs/table1-cpu/runs/cope-seed*, runs/table1-10000/runs/{rope,ape}-seed*")


COPE_CLAIMS = [
    Claim("cope-fig5", "CoPE", "App. C, Fig. 5", "CoPE converges fastest on flip-flop; an absolute position table "
          "fails", "(figure)", "Table 1's models, `tiny` 2 x 4 x 64, 1000 steps at T = 512, seeds 0-2",
          fastest_evidence, quote=(396, "We observe higher convergence rate for models with CoPE")),
    Claim("cope-fig6", "CoPE", "Fig. 6", "gates open on the tokens a head counts", "(figure)",
          "`cope-mech`: `tiny` 2 x 4 x 64, 1000 steps at T = 512", gates_evidence,
          quote=(416, "The gate activations suggest that CoPE is counting paragraphs (top) or sections (bottom).")),
    Claim("cope-table2-flipflop", "CoPE", "Table 2 (left), App. C Table 7", "on flip-flop CoPE errs less than APE "
          "and RoPE, in and out of distribution", "test error % in-dist. / OOD, mean (sd): CoPE 0.03 (0.06) / 4.9 "
          "(4.4), RoPE 1.8 (3.1) / 20.3 (2.9), APE 6.8 (6.9) / 21.7 (7.9)",
          "Table 1's runs, `tiny` 2 x 4 x 64 at T = 512, seeds 0-2: CoPE 1000 steps, APE and RoPE 10,000",
          flipflop_table2_evidence, quote=(147, "They show that CoPE outperforms existing methods, allowing the "
                                                "model to not only learn the in-distribution task, but also to "
                                                "generalize to OOD sequences")),
    task_claim("cope-table3-1var", "Tables 3, 9", "CoPE counts one variable with no error; APE and relative PE err",
               "counting", ("iid",), ("ape", "shaw"),
               (189, "The best performance comes from CoPE, with a perfect score for the 1 variable case"),
               beside=("rope", "rel")),
    task_claim("cope-table3-3var", "Tables 3, 9", "with three variables CoPE's lead grows", "counting-3", ("iid",),
               ("ape", "shaw"), (189, "The baseline model with relative PE struggles to learn this task, especially "
                                      "when there is more than one variable to track"), beside=("rope", "rel")),
    task_claim("cope-table3-5var", "Tables 3, 9", "with five variables CoPE still errs least", "counting-5", ("iid",),
               ("ape", "shaw"), (174, "CoPE 0.0 1.2 7.4"), beside=("rope", "rel")),
    task_claim("cope-table4", "Tables 4, 9", "CoPE's lead holds out of distribution, with longer and shorter "
               "contexts (pass weight 100, 10)", "counting", ("long", "short"), ("shaw",),
               (189, "For OOD generalization, relative PE shows poor generalization, while CoPE generalizes very "
                     "well"), beside=("ape", "rope", "rel")),
    task_claim("cope-table2-copy", "Tables 2, 10", "CoPE solves selective copy, in distribution and with denser and "
               "sparser blanks, where APE and RoPE fail", "selective-copy", ("iid", "dense", "sparse"), ("ape", "rope"),
               (165, "on the in-distribution test set our method CoPE can solve the task while others fail to do so"),
               beside=("shaw", "rel")),
    Claim("cope-fig2", "CoPE", "Fig. 2", "CoPE's lead over relative PE grows with less training data", "(figure)",
          "-", not_run("counting with fewer training sequences", "CoPE and Shaw on counting at 3 pool sizes below "
                       "10,000, 5 seeds each (30 runs)", pool_runs),
          quote=(176, "CoPE outperforms relative PE on the counting task, especially with less training data of the "
                      "task.")),
    Claim("cope-appc", "CoPE", "App. C, Table 7", "CoPE is robust to model size in distribution, less so out of it",
          "CoPE in-dist. error <= 0.2% at all 8 sizes", "-",
          not_run("flip-flop at the 8 sizes of Table 7", "CoPE, RoPE and APE at d_model 128 and 256, 2 and 4 layers "
                  "and heads, 10k steps (24 runs x >= 3 seeds; priced at `rope-mech`'s set-up)", size_runs),
          quote=(149, "We find that CoPE is generally robust to these changes with respect to in-distribution "
                      "generalization")),
]

"""The tables of results the results pages show (docs/results/claims.md, learning.md and
tools.md) beside the claims table: the sweeps' and the training runs', computed from their
committed ``result.json`` files (:mod:`interp.claims.sources`), for a sweep by the functions that
write its own report; the retrieval probes on the specimens, from their cached measurement; the
glitch anatomy, from its figures' CSVs; the glitch hunts, from their ``hunt.json``. So the docs
never hold a copied number: ``glitchlens claims --write-docs`` writes each table between its
markers and ``tests/test_claims.py`` fails when one is stale.

Percentages are of sequences right (full-sequence accuracy); "learned" is
:data:`interp.studies.reproduce.LEARNED` of the held-out FFL(0.8) sequences (``iid`` for Table 1's
seed counts, as ``reproduce table1`` counts them).
"""

from __future__ import annotations

from interp.claims import sources


def finished_results(sweep: str) -> list[dict]:
    """The finished runs of ``runs/<sweep>`` in the order the sweep plans them."""
    return [sources.result(sweep, name) for name in sources.planned_runs()[sweep] if sources.has_result(sweep, name)]


def table1_markdown(sweep: str) -> str:
    """``runs/<sweep>/table1.md`` as ``reproduce table1 --report-only`` writes it, then which models
    learned ``iid`` on how many seeds."""
    from interp.studies.reproduce import markdown_table, summarise_runs

    table = summarise_runs(finished_results(sweep))
    iid = table[table.split == "iid"]
    groups = {}
    for row in iid.itertuples():
        groups.setdefault((row.learned, row.seeds), []).append(row.model)
    counts = "; ".join(f"on {learned} of {seeds} seeds: {', '.join(models)}"
                       for (learned, seeds), models in sorted(groups.items(), reverse=True))
    return (f"{markdown_table(table)}\n{len(finished_results(sweep))} runs finished. The models that learned `iid` "
            f"(>= 99% of its sequences right) {counts}.\n")


def percent(accuracy: float) -> str:
    """An accuracy as a percentage, with a second decimal where one would read 0.0 or 100.0."""
    value = 100 * accuracy
    return f"{value:.2f}%" if 0 < value < 0.1 or 99.95 <= value < 100 else f"{value:.1f}%"


def error_percent(rate: float) -> str:
    """An error rate as a percentage: 3 significant digits down to 1%, 2 below."""
    value = 100 * rate
    return f"{value:.1f}%" if value >= 10 else f"{value:.2f}%" if value >= 1 else f"{value:.2g}%"


def budgets_markdown() -> str:
    """Seed 0 of each model of ``table1-budget`` at every budget, 1000 steps being its
    ``table1-cpu`` run: held-out, ``iid`` (with its wrong reads), ``dense`` and ``sparse``;
    in bold where the run learned."""
    from interp.studies.reproduce import LEARNED
    from interp.studies.registry import TABLE1_BUDGET_MODELS, TABLE1_BUDGETS

    lines = ["| model | steps | held-out | `iid` (wrong reads) | `dense` | `sparse` (first 10,000) |",
             "|---|---|---|---|---|---|"]
    for model in TABLE1_BUDGET_MODELS:
        runs = [sources.result("table1-cpu", f"{model}-seed0")]
        runs += [sources.result("table1-budget", f"{model}-steps{steps}-seed0") for steps in TABLE1_BUDGETS
                 if sources.has_result("table1-budget", f"{model}-steps{steps}-seed0")]
        learned = [r["held_out"]["sequence_accuracy"] >= LEARNED for r in runs]

        def cells(text: list[str]) -> str:
            return " / ".join(f"**{t}**" if bold else t for t, bold in zip(text, learned))

        steps = " / ".join(f"{n:,}" for n in (1000, *TABLE1_BUDGETS)[:len(runs)])
        held = cells([percent(r["held_out"]["sequence_accuracy"]) for r in runs])
        iid = cells([f"{percent(r['splits']['iid']['sequence_accuracy'])} ({r['splits']['iid']['read_errors']:,})"
                     for r in runs])
        dense, sparse = (" / ".join(percent(r["splits"][s]["sequence_accuracy"]) for r in runs)
                         for s in ("dense", "sparse"))
        lines.append(f"| {model} | {steps} | {held} | {iid} | {dense} | {sparse} |")
    return "\n".join(lines) + "\n"


def seeds_markdown(sweep: str) -> str:
    """Per model of a Table 1 sweep with a finished run: the seeds that learned ``iid`` and each
    seed's accuracies (``-`` where a seed has not finished), beside the paper's row."""
    from interp.studies.reproduce import LEARNED, PAPER_TABLE1, SPLIT_ORDER

    by_model: dict[str, dict[int, dict]] = {}
    for r in finished_results(sweep):
        by_model.setdefault(r["model"], {})[r["seed"]] = r
    seeds = sorted({seed for runs in by_model.values() for seed in runs})
    lines = [f"| model | seeds at >= 99% `iid` | held-out | `iid` | `dense` | `sparse` (first 10,000) | "
             f"paper `iid` / `dense` / `sparse` |", "|---|---|---|---|---|---|---|"]
    for model, runs in by_model.items():
        def each(accuracy) -> str:
            return " / ".join(f"{100 * accuracy(runs[s]):.1f}" if s in runs else "-" for s in seeds)

        learned = sum(r["splits"]["iid"]["sequence_accuracy"] >= LEARNED for r in runs.values())
        paper = (" / ".join(f"{m:g} ± {s:g}" for m, s in PAPER_TABLE1[model].values()) if model in PAPER_TABLE1
                 else "(no row)")
        splits = " | ".join(each(lambda r, s=split: r["splits"][s]["sequence_accuracy"]) for split in SPLIT_ORDER)
        lines.append(f"| {model} | {learned} of {len(runs)} | {each(lambda r: r['held_out']['sequence_accuracy'])} | "
                     f"{splits} | {paper} |")
    return (f"Sequences right (%), seeds {' / '.join(map(str, seeds))}; {len(finished_results(sweep))} of "
            f"{len(sources.planned_runs()[sweep])} runs finished.\n\n" + "\n".join(lines) + "\n")


def study_markdown(study: str) -> str:
    """``runs/<study>/summary.md`` as ``reproduce <study> --report-only`` writes it."""
    from interp.studies.registry import SUMMARIES, TABLES, run_table

    return SUMMARIES[study](TABLES.get(study, run_table)(finished_results(study)))


# Reruns of `table1-cpu` runs with one thing changed: (file, the run it repeats, what changed)
TABLE1_RERUNS = (("runs/table1-cpu-2000/runs/tda-seed2/result.json", "tda-seed2", "2000 steps"),
                 ("runs/threads/tda-seed0-2threads/result.json", "tda-seed0", "2 torch threads"),
                 ("runs/threads/trela-seed0-2threads/result.json", "trela-seed0", "2 torch threads"))


def reruns_markdown() -> str:
    """Each of :data:`TABLE1_RERUNS` beside the ``table1-cpu`` run it repeats. The thread-count
    reruns evaluated only their held-out sequences in full (``held_out_T512``), so their splits read ``-``."""
    from interp.outputs import read_json
    from interp.studies.reproduce import SPLIT_ORDER

    lines = ["| run | changed | held-out | " + " | ".join(f"`{s}`" for s in SPLIT_ORDER)
             + " | as trained in `table1-cpu`: held-out |", "|---|---|---|---|---|---|---|"]
    for file, name, changed in TABLE1_RERUNS:
        rerun = read_json(sources.ROOT / file, "sweep result")
        held = rerun["held_out"] if "held_out" in rerun else rerun["held_out_T512"]
        splits = " | ".join(percent(rerun["splits"][s]["sequence_accuracy"]) if "splits" in rerun else "-"
                            for s in SPLIT_ORDER)
        before = sources.result("table1-cpu", name)["held_out"]["sequence_accuracy"]
        lines.append(f"| `{file}` | {changed} | {percent(held['sequence_accuracy'])} | {splits} | {percent(before)} |")
    return "\n".join(lines) + "\n"


def rate(value: float) -> str:
    """A rate to 2 decimals, with 4 more in parentheses where 2 would round it to 0 or 1."""
    shown = f"{value:.2f}"
    return f"{shown} ({value:.4f})" if shown in ("0.00", "1.00") and 0 < value < 1 else shown


def probes_markdown() -> str:
    """The retrieval probes on every flip-flop specimen (``runs/claims/retrieval_probes.csv``,
    :func:`interp.claims.measure.retrieval_probes`): per probe its best final-layer head, argmax
    rate / mean weight."""
    frame = sources.csv("runs/claims/retrieval_probes.csv")
    first = frame.iloc[0]
    lines = [f"First {first.n_sequences} `iid` sequences (T = 512, {first.reads:,} reads); final layer, its best head "
             "by argmax rate for each probe; argmax rate / mean weight.", "",
             "| model | reads right | bit-carrier probe | exact-write probe | layer 0's bit-carrier probe |",
             "|---|---|---|---|---|"]
    for r in frame.itertuples():
        cells = [f"L{layer}H{getattr(r, f'{p}_head')}: {rate(getattr(r, f'{p}_argmax_rate'))} / "
                 f"{getattr(r, f'{p}_weight') + 0.0:.2f}".replace("-0.00", "0.00")
                 for p, layer in (("carrier", r.layers - 1), ("write", r.layers - 1), ("layer0_carrier", 0))]
        lines.append(f"| `{r.specimen}` | {100 * r.reads_right:.2f}% | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _sharpening_runs(base: str) -> list[dict]:
    """The finished ``sharpening`` runs of one set-up, unregularised first, then by term, strength and seed."""
    terms = ("none", "entropy", "linf")
    runs = [r for r in finished_results("sharpening") if r["name"].startswith(f"{base}-")]
    return sorted(runs, key=lambda r: (terms.index(r["regulariser"]), r["reg_coef"], r["seed"]))


def _run_label(result: dict) -> str:
    term = {"none": "unregularised", "entropy": "entropy", "linf": "L-inf"}[result["regulariser"]]
    strength = "" if result["regulariser"] == "none" else f" {result['reg_coef']:g}"
    return f"{term}{strength}, seed {result['seed']}"


def _sharp(result: dict) -> float:
    """The largest layer's share of sharp reads (positions) of a sharpening run."""
    layers = [layer for measured in result["sharpness"].values() for layer in measured]
    def share(layer: int) -> float:
        at = [m for m in layers if m["layer"] == layer]
        return sum(m["sharp"] for m in at) / sum(m["n"] for m in at)

    return max(share(layer) for layer in {m["layer"] for m in layers})


def sharpening_markdown(base: str) -> str:
    """The ``sharpening`` runs of ``automaton-1l`` (the automaton read at every position, at the
    training length and at T = 512, with 95% Wilson intervals) or of ``rope-mech`` (wrong reads of
    ``sparse`` and ``dense``, and ``iid``), each with its share of sharp reads."""
    from interp.claims.verdicts import wilson
    from interp.studies.reproduce import LEARNED

    runs = _sharpening_runs(base)
    if base == "automaton-1l":
        lines = ["| run | sharp positions | T = 128: sequences right | T = 512: sequences right (95% interval of the "
                 "failure rate) | T = 512: wrong positions (95% interval of the rate) |", "|---|---|---|---|---|"]
        for r in runs:
            short, long = r["automaton"]["128"], r["automaton"]["512"]
            failed = round((1 - long["sequence_accuracy"]) * long["sequences"])
            positions = long["sequences"] * 512
            wrong = round((1 - long["position_accuracy"]) * positions)
            (f_low, f_high), (w_low, w_high) = wilson(failed, long["sequences"]), wilson(wrong, positions)
            lines.append(f"| {_run_label(r)} | {100 * _sharp(r):.1f}% | {percent(short['sequence_accuracy'])} | "
                         f"{percent(long['sequence_accuracy'])} ({100 * f_low:.2f}-{100 * f_high:.2f}% fail) | "
                         f"{wrong:,} of {positions:,} ({w_low:.1e}-{w_high:.1e}) |")
        return "\n".join(lines) + "\n"
    lines = ["| run | sharp reads | `iid` sequences right | `sparse` wrong reads (rate) | `dense` wrong reads (rate) |",
             "|---|---|---|---|---|"]
    for r in runs:
        learned = "" if r["held_out"]["sequence_accuracy"] >= LEARNED else " (not learned)"
        wrong = [f"{r['splits'][s]['read_errors']:,} of {r['splits'][s]['reads']:,} "
                 f"({error_percent(r['splits'][s]['error_rate'])})" for s in ("sparse", "dense")]
        lines.append(f"| {_run_label(r)} | {100 * _sharp(r):.1f}% | {percent(r['splits']['iid']['sequence_accuracy'])}"
                     f"{learned} | {wrong[0]} | {wrong[1]} |")
    return "\n".join(lines) + "\n"


def _destinations(rows, with_interval: bool, listed: float = 0.10) -> str:
    """The destinations of one (specimen, split, reads) group, largest share first: each holding at
    least ``listed`` of the reads (the largest always), the first with its 95% interval."""
    rows = rows.sort_values("share", ascending=False, kind="stable")
    n = int(rows.n.iloc[0])
    if n < rows.min_shown.iloc[0]:
        return f"{rows.destination.iloc[0]} ({n} read{'s' if n > 1 else ''})"
    shown = [rows.iloc[0]] + [r for _, r in rows.iloc[1:].iterrows() if r.share >= listed]
    parts = [f"{r.destination} {100 * r.share:.1f}%" for r in shown]
    if with_interval:
        parts[0] += f" ({100 * shown[0].share_low:.1f}-{100 * shown[0].share_high:.1f})"
    return ", ".join(parts).replace("100.0%", "100%").replace("-100.0)", "-100)")


def anatomy_markdown() -> str:
    """Where the final layer's attention goes at the wrong reads and at the right ones of the same
    sequences, per glitching specimen and split (``figures/12a_glitch_attention.csv``, what
    ``glitchlens figures --only glitch_anatomy`` wrote): wrong reads and the sequences scanned, then the
    destinations holding at least 10% of the reads."""
    from interp.figures.anatomy import GLITCHING

    frame = sources.figure("12a_glitch_attention")
    lines = ["| specimen, split | wrong reads (sequences) | destination at the wrong reads | at the right reads |",
             "|---|---|---|---|"]
    for model in GLITCHING:
        for split in dict.fromkeys(frame[frame.model == model].split):
            at = frame[(frame.model == model) & (frame.split == split)]
            wrong, right = at[at.reads == "wrong"], at[at.reads == "right"]
            if wrong.empty or wrong.n.iloc[0] == 0:
                continue
            lines.append(f"| `{model}`, {split} | {int(wrong.n.iloc[0])} ({int(wrong.n_sequences.iloc[0])}) | "
                         f"{_destinations(wrong, True)} | {_destinations(right, False)} |")
    return "\n".join(lines) + "\n"


def runs_markdown(sweeps: tuple[str, ...]) -> str:
    """Every finished run of ``sweeps``, in their order: its steps, held-out, ``iid`` (with its wrong
    reads), ``dense`` and ``sparse`` sequences right, and whether it learned."""
    from interp.claims.tra import _steps
    from interp.studies.reproduce import LEARNED

    lines = ["| sweep | run | steps | held-out | `iid` (wrong reads) | `dense` | `sparse` (first 10,000) | learned |",
             "|---|---|---|---|---|---|---|---|"]
    for sweep in sweeps:
        for r in finished_results(sweep):
            iid = r["splits"]["iid"]
            learned = "yes" if r["held_out"]["sequence_accuracy"] >= LEARNED else "no"
            lines.append(f"| `{sweep}` | {r['name']} | {_steps(r)} | {percent(r['held_out']['sequence_accuracy'])} | "
                         f"{percent(iid['sequence_accuracy'])} ({iid['read_errors']:,}) | "
                         f"{percent(r['splits']['dense']['sequence_accuracy'])} | "
                         f"{percent(r['splits']['sparse']['sequence_accuracy'])} | {learned} |")
    return "\n".join(lines) + "\n"


# docs/results/learning.md's recipe runs, `glitchlens train` runs committed as runs/<directory>/<name>/result.json:
# (model label, recipe, the run's name with {seed})
MECH_RECIPE_RUNS = tuple((label, recipe, f"{model}{suffix}-seed{{seed}}")
                         for label, model, suffixes in (("TRA", "tra", ("", "-llama")), ("FoT", "fot", ("", "-llama")),
                                                        ("CoPE", "cope", ("", "-llama")),
                                                        ("Diff", "diff", ("-authors-notebook", "-llama")),
                                                        ("RoPE", "rope", ("-authors-notebook", "-llama")))
                         for suffix, recipe in zip(suffixes, ("authors-notebook", "llama")))
TINY_RECIPE_RUNS = tuple((label, recipe, f"{model}-{recipe}-seed{{seed}}")
                         for label, model in (("FoT", "fot"), ("TRA", "tra"), ("CoPE", "cope"), ("Diff", "diff"),
                                              ("RoPE", "rope"))
                         for recipe in ("authors-notebook", "llama"))
RECIPE_SEEDS = (0, 1, 2)


def _train_runs(directory: str, name: str) -> dict[int, dict]:
    """The committed results of one (model, recipe) under ``runs/<directory>``, by seed."""
    from interp.outputs import read_json

    files = {seed: sources.RUNS / directory / name.format(seed=seed) / "result.json" for seed in RECIPE_SEEDS}
    return {seed: read_json(file, "training result") for seed, file in files.items() if file.exists()}


def _learned_count(runs: dict[int, dict]) -> int:
    from interp.studies.reproduce import LEARNED

    return sum(r["held_out_T512"]["sequence_accuracy"] >= LEARNED for r in runs.values())


def _learned(runs: dict[int, dict]) -> str:
    return f"{_learned_count(runs)} of {len(runs)}"


def _recipe_totals(directory: str, table: tuple[tuple[str, str, str], ...]) -> str:
    """The runs of each recipe of ``table`` that reached 99%, over all its models."""
    totals: dict[str, list[int]] = {}
    for _, recipe, name in table:
        runs = _train_runs(directory, name)
        total = totals.setdefault(recipe, [0, 0])
        total[0] += _learned_count(runs)
        total[1] += len(runs)
    return "Runs at >= 99% of the held-out sequences: " + ", ".join(
        f"`{recipe}` {learned} of {n}" for recipe, (learned, n) in totals.items()) + ".\n"


def recipes_glance_markdown() -> str:
    """Per size and recipe, the runs of each model at >= 99% of the held-out sequences, from
    :data:`MECH_RECIPE_RUNS` and :data:`TINY_RECIPE_RUNS` (``-``: none committed)."""
    sizes = (("`mech` preset (2 x 1 head, d_model 128), 500", "notebook-mech", MECH_RECIPE_RUNS),
             ("`tiny` preset (2 x 1 head, d_model 64), 300", "recipe-tiny", TINY_RECIPE_RUNS))
    models = list(dict.fromkeys(label for label, _, _ in MECH_RECIPE_RUNS))
    lines = ["| size, steps | recipe | " + " | ".join(models) + " | all |", "|---|---|" + "---|" * (len(models) + 1)]
    for size, directory, table in sizes:
        for i, recipe in enumerate(dict.fromkeys(recipe for _, recipe, _ in table)):
            runs = {label: _train_runs(directory, name) for label, r, name in table if r == recipe}
            cells = [_learned(runs[m]) if runs.get(m) else "-" for m in models]
            learned, n = sum(_learned_count(r) for r in runs.values()), sum(len(r) for r in runs.values())
            lines.append(f"| {size if i == 0 else ''} | `{recipe}` | " + " | ".join(cells) + f" | {learned} of {n} |")
    return "\n".join(lines) + "\n"


def mech_recipes_markdown() -> str:
    """The ``mech`` preset's recipe runs (``runs/notebook-mech``): per seed the held-out sequences
    right (%) with the wrong reads in brackets, ``-`` where the seed was not run."""
    lines = ["| model | recipe | " + " | ".join(f"seed {s}" for s in RECIPE_SEEDS) + " | >= 99% |",
             "|---|---|" + "---|" * len(RECIPE_SEEDS) + "---|"]
    for label, recipe, name in MECH_RECIPE_RUNS:
        runs = _train_runs("notebook-mech", name)
        cells = [f"{100 * runs[s]['held_out_T512']['sequence_accuracy']:.1f} "
                 f"({runs[s]['held_out_T512']['read_errors']:,})" if s in runs else "-" for s in RECIPE_SEEDS]
        lines.append(f"| {label} | `{recipe}` | " + " | ".join(cells) + f" | {_learned(runs) if runs else '-'} |")
    return "\n".join(lines) + "\n\n" + _recipe_totals("notebook-mech", MECH_RECIPE_RUNS)


def tiny_recipes_markdown() -> str:
    """The ``tiny`` preset's recipe runs at 300 steps (``runs/recipe-tiny``): held-out and the first
    1000 ``sparse`` sequences right (%) per seed, and the training time on one thread."""
    lines = ["| model | recipe | held-out, seeds 0 / 1 / 2 | >= 99% | `sparse`, seeds 0 / 1 / 2 | "
             "training s (one thread) |", "|---|---|---|---|---|---|"]
    for label, recipe, name in TINY_RECIPE_RUNS:
        runs = _train_runs("recipe-tiny", name)
        held, sparse = (" / ".join(f"{100 * runs[s][key]['sequence_accuracy']:.1f}" if s in runs else "-"
                                   for s in RECIPE_SEEDS) for key in ("held_out_T512", "sparse_first_1000"))
        seconds = [r["train_seconds_one_thread"] for r in runs.values()]
        lines.append(f"| {label} | `{recipe}` | {held} | {_learned(runs)} | {sparse} | "
                     f"{min(seconds)}-{max(seconds)} |")
    return "\n".join(lines) + "\n\n" + _recipe_totals("recipe-tiny", TINY_RECIPE_RUNS)


def learning_markdown(recipe: str = "cpu-learning") -> str:
    """``reproduce recipes --scale learning``'s runs of one recipe (``runs/learning/<recipe>``, its
    models in the order of ``runs/learning/recipes.csv``): per model the seeds that learned, and each
    seed's held-out / ``iid`` / ``sparse`` / ``dense`` sequences right (%)."""
    from interp.outputs import read_json
    from interp.studies.reproduce import LEARNED

    frame = sources.csv("runs/learning/recipes.csv")
    lines = ["| model | learned (>= 99% held-out) | " + " | ".join(f"seed {s}" for s in RECIPE_SEEDS) + " |",
             "|---|---|" + "---|" * len(RECIPE_SEEDS)]
    counts = []
    for model in dict.fromkeys(frame[frame.recipe == recipe].model):
        root = sources.RUNS / "learning" / recipe / "runs"
        files = {s: root / f"{model}-seed{s}" / "result.json" for s in RECIPE_SEEDS}
        runs = {s: read_json(f, "sweep result") for s, f in files.items() if f.exists()}
        cells = [" / ".join(f"{100 * a:.1f}" for a in (r["held_out"]["sequence_accuracy"],
                                                        *(r["splits"][split]["sequence_accuracy"]
                                                          for split in ("iid", "sparse", "dense"))))
                 if (r := runs.get(s)) else "-" for s in RECIPE_SEEDS]
        learned = sum(r["held_out"]["sequence_accuracy"] >= LEARNED for r in runs.values())
        lines.append(f"| {model} | {learned}/{len(runs)} | " + " | ".join(cells) + " |")
        counts.append((model, learned, len(runs)))
    every = [model for model, learned, n in counts if learned == n]
    return ("\n".join(lines) + f"\n\n{sum(c[1] for c in counts)} of {sum(c[2] for c in counts)} runs learned the "
            f"task; on every seed: {', '.join(every) or 'none'}.\n")


# `glitchlens hunt` on two specimens, with the defaults and held to the training length:
# runs/hunt/<specimen>[-max512]/hunt.json (docs/results/tools.md)
HUNTED = ("rope-mech", "tda-mech")


def hunts_markdown() -> str:
    """Each hunt of :data:`HUNTED`: per method the distinct failing sequences, the read and sequence
    error rates on the distribution it ends on, its error types and the shortest ``dense`` and
    ``sparse`` failure; then where each guided search's wrong reads lie, by type. The random
    baselines, drawn alike by both hunts of a specimen, are read from its default hunt."""
    from interp.outputs import read_json

    lines = ["| model | method | failing seqs (total) | read error rate (last gen.) | seq error rate (last gen.) | "
             "error types (total) | shortest failure, dense / sparse types (stale or unsourced) |",
             "|---|---|---|---|---|---|---|"]
    where, unconfirmed = [], 0
    for specimen in HUNTED:
        hunts = {suffix: read_json(sources.RUNS / "hunt" / f"{specimen}{suffix}" / "hunt.json", "hunt")
                 for suffix in ("", "-max512")}
        methods = [(f"guided, T {hunts[''].get('seq_len')}→{hunts['']['max_len']}", hunts[""]["methods"]["guided"]),
                   (f"guided, `--max-len {hunts['-max512']['max_len']}`", hunts["-max512"]["methods"]["guided"]),
                   *((name, hunts[""]["methods"][name]) for name in ("random sparse", "random dense"))]
        for i, (label, method) in enumerate(methods):
            shortest = [min((t["length"] for name, t in method["types"].items() if name.startswith(kind)), default=None)
                        for kind in ("dense/", "sparse/")]
            final = method["final"]
            unconfirmed += method["unconfirmed"]
            lines.append(f"| {specimen if i == 0 else ''} | {label} | {method['failing_sequences']} | "
                         f"{final['read_error_rate']:.2e} | {100 * final['sequence_error_rate']:.1f}% | "
                         f"{len(method['types'])} | "
                         + " / ".join("–" if n is None else str(n) for n in shortest) + " |")
            if label.startswith("guided"):
                wrong = {name: t["wrong_reads"] for name, t in method["types"].items()}
                parts = ", ".join(f"`{name}` {n:,}" for name, n in sorted(wrong.items(), key=lambda kv: -kv[1]))
                where.append(f"- {specimen}, {label}: {parts} of {sum(wrong.values()):,} wrong reads")
    budget = hunts[""]["budget"]
    return (f"At most {budget:,} sequences per method, seed {hunts['']['seed']}.\n\n" + "\n".join(lines)
            + "\n\nThe guided searches' wrong reads by error type:\n\n" + "\n".join(where)
            + f"\n\nFailures reported that did not fail again when run alone: {unconfirmed}.\n")


def logit_split_markdown() -> str:
    """Which term of the retrieval head's attention logit loses the bit's key, per specimen, split
    and kind of read (``figures/12b_glitch_logit_split.csv``, what ``glitchlens figures --only
    glitch_anatomy`` wrote): the shares of the losing terms (``none``: the bit's key wins), the
    first with its 95% Wilson interval, and the mean margins (95% t intervals) from each term."""
    frame = sources.figure("12b_glitch_logit_split")
    lines = ["| specimen, split, reads | reads (head) | losing term | margin from content | from position | margin |",
             "|---|---|---|---|---|---|"]
    for (model, split, reads), at in frame.groupby(["model", "split", "reads"], sort=False):
        terms = at[at.metric == "losing_term"].sort_values("share", ascending=False, kind="stable")
        shown = [terms.iloc[0]] + [r for _, r in terms.iloc[1:].iterrows() if r.share >= 0.10]
        losing = ", ".join(f"{r.losing_term} {100 * r.share:.1f}%" for r in shown)
        losing = losing.replace(f"{shown[0].losing_term} {100 * shown[0].share:.1f}%",
                                f"{shown[0].losing_term} {100 * shown[0].share:.1f}% "
                                f"({100 * shown[0].share_low:.1f}-{100 * shown[0].share_high:.1f})", 1)
        margins = at.set_index("metric")
        cells = [f"{margins.loc[m, 'mean']:+.2f} ({margins.loc[m, 'mean_low']:+.2f} to "
                 f"{margins.loc[m, 'mean_high']:+.2f})" for m in ("content_margin", "position_margin", "margin")]
        lines.append(f"| `{model}`, {split}, {reads} | {int(terms.n.iloc[0]):,} (head {int(terms['head'].iloc[0])}) | "
                     f"{losing} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

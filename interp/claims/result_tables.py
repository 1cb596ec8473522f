"""The tables of results that docs/results/claims.md shows beside the claims table: the sweeps',
computed from the runs' committed ``result.json`` files (:mod:`interp.claims.sources`) by the
functions that write each sweep's own report; the retrieval probes on the specimens, from their
cached measurement; the glitch anatomy's destinations, from its figure's CSV. So the docs never
hold a copied number: ``glitchlens claims --write-docs`` writes them between their markers and
``tests/test_claims.py`` fails when one is stale.

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

    lines = ["| run | changed | held-out | " + " | ".join(f"`{s}`" for s in SPLIT_ORDER) + " | as trained in `table1-cpu`: "
             "held-out |", "|---|---|---|---|---|---|---|"]
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
    return max(sum(m["sharp"] for m in layers if m["layer"] == layer) / sum(m["n"] for m in layers if m["layer"] == layer)
               for layer in {m["layer"] for m in layers})


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

"""The sweeps' tables that docs/results/claims.md shows, computed from the runs' committed
``result.json`` files (:mod:`interp.claims.sources`) by the functions that write each sweep's own
report, so the docs never hold a copied number: ``glitchlens claims --write-docs`` writes them
between their markers and ``tests/test_claims.py`` fails when one is stale.

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

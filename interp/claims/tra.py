"""The TRA paper's claims: Table 1 (flip-flop accuracy per mechanism), App. A (the 2 x 1 pair)
and App. B (accuracy far past the training length)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from interp.claims import sources
from interp.claims.cost import cost_text, unfinished, varied
from interp.claims.stats import decide, every_seed, one_sample_t_test, seed_interval, share_interval
from interp.claims.verdicts import MOSTLY_WRONG, Claim, Evidence, overlaps, paper_range, percent_interval
from interp.studies.reproduce import LEARNED, PAPER_TABLE1, SPLIT_ORDER
from interp.studies.registry import TABLE1_BUDGET_SEEDS

PAPER_SEEDS = 4           # TRA paper, Table 1: mean and standard deviation over 4 seeds
PAPER_STEPS = 25_000
MIN_SEEDS = 3             # a row is judged over at least this many seeds (the paper's spread is over 4)


def table1_evidence(model: str, sweep: str, names: list[str]) -> Evidence:
    """Table 1's row of ``model`` against ours: the runs ``names`` of ``runs/<sweep>``, one per seed.

    The paper's spread is over its 4 seeds, so ours is over seeds too: per split, the share of
    sequences right of each seed, their mean and 95% t interval over seeds (:mod:`interp.claims.stats`).
    Fewer than :data:`MIN_SEEDS` finished seeds give no interval to judge: not reproduced (budget).
    The paper's four seeds all learned ``iid`` (100 +- 0), so ours are compared only when every run
    has learned (>= 99% of its 1000 held-out sequences right), else budget. A split the paper has at
    100 holds when every seed reads >= 99% of it right (the all-seeds rule), and is contradicted when
    the one-sided t test over seeds puts the mean below half (mostly wrong) at p <= 0.05; a split the
    paper has below 100 (a glitch) holds when every seed glitches (a sequence wrong), and is
    contradicted when no seed glitches and the t test puts the mean above the paper's mean + sd at
    p <= 0.05. At strength: on every split the t interval over seeds overlaps the paper's mean +- sd
    (:func:`paper_range`)."""
    from interp.tasks.flipflop import SPLITS

    runs = [sources.result(sweep, name) for name in names if sources.has_result(sweep, name)]
    source = f"runs/{sweep}/runs/{{{','.join(names)}}}/result.json"
    absent = [name for name in names if not sources.has_result(sweep, name)]
    waiting = f"; not in: {', '.join(absent)}" if absent else ""
    if not runs:
        return Evidence("not run", "0 runs", "none (not run)", False, False, False,
                        f"budget: no run of {sweep} has finished{waiting}", source)
    learned = [r for r in runs if r["held_out"]["sequence_accuracy"] >= LEARNED]
    parts, holds, at_strength, opposite, intervals = [], [], [], [], []
    for split in SPLIT_ORDER:
        right = [r["splits"][split]["sequence_accuracy"] for r in runs]
        interval = seed_interval(right)
        mean, spread = PAPER_TABLE1[model][split]
        paper = paper_range(mean, spread, PAPER_SEEDS * SPLITS[split].size)
        parts.append(f"{split} {100 * np.mean(right):.2f}")
        intervals.append(f"{split} {percent_interval((max(interval[0], 0), min(interval[1], 1)), 2)}")
        if mean == 100:
            holds.append(every_seed([a >= LEARNED for a in right]))
            opposite.append(decide(one_sample_t_test(right, MOSTLY_WRONG))[0])
        else:
            glitches = [r["splits"][split]["sequence_accuracy"] < 1 for r in runs]
            holds.append(every_seed(glitches))
            opposite.append(not any(glitches) and decide(one_sample_t_test(right, paper[1]))[1])
        at_strength.append(overlaps(interval, paper))
    ours = f"{' / '.join(parts)}% of sequences right, mean over {len(runs)} seeds"
    sizes = ", ".join(f"{r:,} {s}" for r, s in _split_sizes(runs))
    n = f"{len(runs)} seed{'s' if len(runs) > 1 else ''} x ({sizes}){waiting}"
    interval_text = ("t interval over seeds: " + "; ".join(intervals) if len(runs) > 1 else
                     "1 seed: no interval over seeds")
    if len(learned) < len(runs):
        return Evidence(ours, n, interval_text, False, False, False,
                        f"budget: {len(learned)} of {len(runs)} seeds learned iid (>= 99% of held-out sequences) "
                        f"at {_steps(runs[0])} steps, the paper's {PAPER_STEPS:,}", source)
    if len(runs) < MIN_SEEDS:
        return Evidence(ours, n, interval_text, False, False, False,
                        f"budget: {len(runs)} seed{'s' if len(runs) > 1 else ''}, no spread over seeds to judge "
                        f"(the paper's is over {PAPER_SEEDS})", source)
    return Evidence(ours, n, interval_text, all(holds), all(at_strength), any(opposite),
                    "" if all(holds) or any(opposite) else
                    f"budget: {_steps(runs[0])} steps, the paper's {PAPER_STEPS:,}", source)


def _split_sizes(runs: list[dict]) -> list[tuple[int, str]]:
    return [(runs[0]["splits"][split]["sequences"], split) for split in SPLIT_ORDER]


def _steps(result: dict) -> str:
    """A run's training steps, from its scale (``reproduce table1``) or its command (a study)."""
    if "scale" in result:
        return f"{result['scale']['steps']:,}"
    words = result["command"].split()
    return f"{int(words[words.index('--steps') + 1]):,}"


def table1_claim(model: str, label: str, sweep: str, seeds: tuple[int, ...], size: str, point: str,
                 quote: tuple[int, str], name: str = "{model}-seed{seed}") -> Claim:
    names = [name.format(model=model, seed=seed) for seed in seeds]
    return Claim(f"tra-table1-{model}", "TRA", "Table 1", f"{label}: {point}", paper_numbers(model), size,
                 lambda: table1_evidence(model, sweep, names), quote=quote)


def paper_numbers(model: str) -> str:
    numbers = " / ".join(f"{m:g} +- {s:g}" if s else f"{m:g}" for m, s in PAPER_TABLE1[model].values())
    return f"{numbers} (iid / dense / sparse)"


def diff_evidence() -> Evidence:
    """Diff's row at its longest budget (10,000 steps, the seeds ``table1-budget`` trains there:
    :data:`interp.studies.registry.TABLE1_BUDGET_SEEDS`), with seed 0's shorter budgets beside it:
    the verdict is :func:`table1_evidence`'s on the 10,000-step runs, and the seeds not finished
    yet are priced."""
    seeds = TABLE1_BUDGET_SEEDS[("diff", 10_000)]
    names = [f"diff-steps10000-seed{seed}" for seed in seeds]
    found = table1_evidence("diff", "table1-budget", names)
    dense = {steps: sources.result(*run)["splits"]["dense"]["sequence_accuracy"] for steps, run in
             (("1000", ("table1-cpu", "diff-seed0")), ("3000", ("table1-budget", "diff-steps3000-seed0")))}
    before = ", ".join(f"{100 * a:.2f}% at {steps} steps" for steps, a in dense.items())
    missing = [seed for seed, name in zip(seeds, names) if not sources.has_result("table1-budget", name)]
    if missing:
        from interp.studies.specimens import table1

        runs = varied(table1("diff", "cpu"), missing, {"steps": 10_000})
        before += f"; seeds {', '.join(map(str, missing))} at 10,000 steps not finished ({cost_text(runs)})"
    return replace(found, ours=f"{found.ours}; `dense` of seed 0: {before}")


CPU = "`tiny` 2 x 4 x 64, cpu-learning-authors"
FLEXIBLE = (117, "both models fail to learn consistent generalising solutions to the task")
STRUGGLE = (113, "Absolute and relative positional embeddings consistently struggle in out of distribution settings.")
TABLE1_CLAIMS = [
    table1_claim("tra", "TRA", "table1-10000", (0, 1, 2), f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "perfect on every split", (119, "It achieves 100% accuracy across seeds")),
    table1_claim("fot", "FoT", "table1-cpu", (0, 1, 2), f"{CPU}, 1000 steps at T = 512, seeds 0-2",
                 "perfect on iid and dense, glitches on sparse", FLEXIBLE),
    table1_claim("cope", "CoPE", "table1-cpu", (0, 1, 2), f"{CPU}, 1000 steps at T = 512, seeds 0-2",
                 "perfect on iid and dense, glitches on sparse", FLEXIBLE),
    table1_claim("rope", "RoPE", "table1-10000", (0, 1, 2), f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "perfect on iid and dense, glitches on sparse",
                 (113, "RoPE also appears to learn a strategy which is fit to the training distribution")),
    Claim("tra-table1-diff", "TRA", "Table 1", "Diff: perfect on iid and dense, glitches on sparse",
          paper_numbers("diff"), f"{CPU}, 10,000 steps at T = 512, seeds 0-2", diff_evidence,
          quote=(113, "This issue extends even to the differential transformer")),
    table1_claim("nope", "NoPE", "table1-10000", (0, 1, 2), f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "learns iid and sparse, collapses on dense",
                 (115, "generalises quite well on the sparse setting, but totally collapses on the dense")),
    table1_claim("ape", "APE", "table1-10000", (0, 1, 2), f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "learns iid, glitches on dense and sparse", STRUGGLE),
    table1_claim("rel", "REL", "table1-budget", TABLE1_BUDGET_SEEDS[("rel", 10_000)],
                 f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "learns iid, glitches on dense and sparse", STRUGGLE, name="{model}-steps10000-seed{seed}"),
    table1_claim("label", "Label", "table1-10000", (0, 1, 2), f"{CPU}, 10,000 steps at T = 512, seeds 0-2",
                 "learns iid, glitches on dense and sparse", STRUGGLE),
]


def perfect_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """``learned`` (>= 99% of the held-out sequences right) and ``perfect``: learned and no wrong
    read on any split, the TRA paper's rule for generalising (its App. A has TRA at 100%)."""
    errors = sum(frame[f"{split}_read_errors"] for split in SPLIT_ORDER)
    return frame.assign(learned=frame.held_out >= LEARNED, perfect=(frame.held_out >= LEARNED) & (errors == 0))


def app_a_evidence() -> Evidence:
    """TRA App. A on ``runs/app-a``: every TRA run that learned is perfect, and FoT fails (learned,
    not perfect) in most of its runs; the opposite: TRA fails as often as FoT."""
    frame = perfect_runs(sources.csv("runs/app-a/runs.csv"))
    counts = {}
    for model in ("tra", "fot"):
        runs = frame[frame.model == model]
        counts[model] = (int(runs.learned.sum()), int((runs.learned & ~runs.perfect).sum()), len(runs))
    (tra_learned, tra_fail, tra_n), (fot_learned, fot_fail, fot_n) = counts["tra"], counts["fot"]
    by_length = "; ".join(
        f"T = {T}: FoT fails {int((g.learned & ~g.perfect)[g.model == 'fot'].sum())} of "
        f"{int((g.model == 'fot').sum())}, TRA {int((g.learned & ~g.perfect)[g.model == 'tra'].sum())} of "
        f"{int((g.learned & g.model.eq('tra')).sum())} that learned"
        for T, g in frame.groupby("seq_len", sort=False))
    ours = (f"perfection rule (no wrong read of 407,273): TRA perfect in {tra_learned - tra_fail} of its "
            f"{tra_learned} runs that learned ({tra_n - tra_learned} of {tra_n} did not learn); FoT learned "
            f"{fot_learned} of {fot_n} and fails in {fot_fail} ({by_length})")
    fot_share = share_interval(fot_fail, fot_learned)
    return Evidence(ours, f"{tra_n} + {fot_n} runs", f"FoT fails in {percent_interval(fot_share, 0)} of runs",
                    holds=tra_fail == 0 and fot_fail > 0, at_strength=2 * fot_fail > fot_learned,
                    opposite=tra_fail >= fot_fail > 0 or (tra_fail > 0 and fot_fail == 0),
                    source="runs/app-a/runs.csv")


def app_a_extended_evidence() -> Evidence:
    """"TRA is the only 2 x 1 model that generalises": the other mechanisms at the App. A layout
    (``runs/app-a-extended``) under the perfection rule; holds when none of their runs is perfect
    while TRA's that learned are (``runs/app-a``)."""
    from interp.studies.registry import APP_A_EXTENDED_MODELS, app_a_extended_runs

    planned = list(app_a_extended_runs())
    done = [sources.result("app-a-extended", name) for name in planned if sources.has_result("app-a-extended", name)]
    if not done:
        return Evidence("not run", f"0 of {len(planned)} runs", "none (not run)", False, False, False,
                        f"budget: `glitchlens reproduce app-a-extended` ({len(planned)} runs of "
                        f"{', '.join(APP_A_EXTENDED_MODELS)}, 5 seeds, {cost_text(unfinished('app-a-extended'))}) "
                        "not run yet",
                        "runs/app-a-extended")
    perfect = [r["name"] for r in done if r["held_out"]["sequence_accuracy"] >= LEARNED
               and not sum(r["splits"][s]["read_errors"] for s in SPLIT_ORDER)]
    learned = sum(r["held_out"]["sequence_accuracy"] >= LEARNED for r in done)
    ours = (f"{len(done)} of {len(planned)} runs finished: {learned} learned, {len(perfect)} perfect"
            + (f" ({', '.join(perfect)})" if perfect else ""))
    complete = len(done) == len(planned)
    share = share_interval(len(perfect), len(done))
    return Evidence(ours, f"{len(done)} runs", f"perfect in {percent_interval(share, 0)}",
                    holds=complete and not perfect, at_strength=True, opposite=bool(perfect),
                    reason="" if complete or perfect else f"budget: {len(planned) - len(done)} runs not finished "
                    f"({cost_text(unfinished('app-a-extended'))})",
                    source="runs/app-a-extended/runs/*/result.json")


# App. B: sequence accuracy at 2x to 32x the training length (interp.claims.measure.length_generalisation)
def length_rows(specimens: tuple[str, ...]) -> pd.DataFrame:
    frame = sources.csv("runs/claims/length_generalisation.csv")
    return frame[frame.specimen.isin(specimens)]


def _length_text(rows: pd.DataFrame) -> str:
    return "; ".join(f"`{name}` " + ", ".join(f"{r.factor}x {100 * r.accuracy:.0f}%" for r in g.itertuples())
                     for name, g in rows.groupby("specimen", sort=False))


def keeps_evidence(specimens: tuple[str, ...]) -> Evidence:
    """The specimens keep their accuracy to 32x: holds when at every factor to 32x the 95% interval
    of the sequences right reaches 99%; the opposite when it is mostly wrong at the longest length
    measured (a specimen with none right is not run longer: :func:`interp.claims.measure.length_generalisation`)."""
    from interp.claims.measure import LENGTH_FACTORS

    rows = length_rows(specimens)
    last = rows.groupby("specimen").tail(1)
    keeps = bool((rows.high >= LEARNED).all()) and bool((last.factor == max(LENGTH_FACTORS)).all())
    return Evidence(_length_text(rows), f"{int(rows.n.min())} held-out FFL(0.8) sequences per length",
                    "; ".join(f"`{r.specimen}` at {r.factor}x {percent_interval((r.low, r.high), 0)}"
                              for r in last.itertuples()),
                    holds=keeps, at_strength=keeps, opposite=bool((last.high < MOSTLY_WRONG).any()),
                    reason="regime: fails before 32x, not mostly wrong at 32x",
                    source="runs/claims/length_generalisation.csv")


def degrades_evidence(specimens: tuple[str, ...], keeps_to: int, beside: tuple[str, ...] = ()) -> Evidence:
    """The specimens keep their accuracy to ``keeps_to`` x the training length, then degrade (for
    ``keeps_to`` = 1: degrade at once). Holds when the 95% interval falls below 99% at some factor
    up to 32x; at strength when it does so only after ``keeps_to`` (CoPE: the paper's ~10x) or, for
    ``keeps_to`` = 1, already at 2x; the opposite when the specimens keep it to 32x. The specimens
    ``beside`` (not in the paper's figure) are reported, not judged."""
    rows = length_rows(specimens)
    shown = _length_text(rows) + (f" (not in the paper: {_length_text(length_rows(beside))})" if beside else "")
    below = rows[rows.high < LEARNED]
    first = below.groupby("specimen").factor.min()
    degrades = set(first.index) == set(specimens)
    at_strength = degrades and (bool((first > keeps_to).all()) if keeps_to > 1 else bool((first == 2).all()))
    return Evidence(shown, f"{int(rows.n.min())} held-out FFL(0.8) sequences per length",
                    "; ".join(f"`{s}` below 99% from {f}x" for s, f in first.items()) or "none below 99%",
                    holds=degrades, at_strength=at_strength, opposite=below.empty,
                    reason="regime: some specimens keep it, others not", source="runs/claims/length_generalisation.csv")


LENGTH = (251, "both FoT and TRA are capable of strong length generalisation (up to 32x greater than training length)")
APP_A_SIZE = "`tiny` 2 x 1 x 64, authors-notebook, 1000 steps at T = 512 and 128, seeds 0-4"
TRA_CLAIMS = [
    *TABLE1_CLAIMS,
    Claim("tra-app-a", "TRA", "App. A", "the 2 x 1 TRA generalises, FoT fails", "(figure: one pair)", APP_A_SIZE,
          app_a_evidence, quote=(225, "TRA fully generalises in this limited setting")),
    Claim("tra-app-a-only", "TRA", "App. A", "TRA is the only 2 x 1 model of Table 1 that generalises",
          "(text)", "the App. A layout for NoPE, APE, REL, RoPE, Label, Diff, CoPE at T = 512, seeds 0-4",
          app_a_extended_evidence, quote=(225, "the only model to be able to do so out of all the baselines")),
    Claim("tra-app-b-tra", "TRA", "App. B, Fig. 4", "TRA keeps its accuracy far past the training length",
          "(figure: WikiText-103 to 32x)", "`tra-mech` (T = 128), `tra-app-a` (T = 512); 2x to 32x",
          lambda: keeps_evidence(("tra-mech", "tra-app-a")), quote=LENGTH),
    Claim("tra-app-b-fot", "TRA", "App. B, Fig. 4", "FoT keeps its accuracy far past the training length",
          "(figure)", "`fot-mech` (T = 128), `fot-app-a` (T = 512); 2x to 32x",
          lambda: keeps_evidence(("fot-mech", "fot-app-a")), quote=LENGTH),
    Claim("tra-app-b-cope", "TRA", "App. B, Fig. 4", "CoPE keeps its accuracy to about 10x, then degrades",
          "roughly 10x", "`cope-mech` (T = 512); 2x to 32x", lambda: degrades_evidence(("cope-mech",), 8),
          quote=(251, "CoPE is able to maintain/slightly improve perplexity for up to roughly a 10x increase in "
                      "context length, before performance begins to deteriorate")),
    Claim("tra-app-b-rope-diff", "TRA", "App. B, Fig. 4", "the other position encodings (RoPE, Diff) degrade at once",
          "(figure)", "`rope-mech`, `diff-mech` (T = 512); 2x to 32x",
          lambda: degrades_evidence(("rope-mech", "diff-mech"), 1, ("tda-beta1", "tda-mech", "trela-mech")),
          quote=(251, "Most PE methods very rapidly begin to decline in quality")),
]

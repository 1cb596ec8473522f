"""The papers' claims as code: ``glitchlens claims``.

Every claim of the four papers that a flip-flop model can test is a :class:`Claim` (paper,
section, the claim, the paper's number with its spread, our model and budget) whose ``measure``
computes our :class:`Evidence` from committed files (:mod:`interp.claims.sources`: run results,
sweep tables, figure CSVs, and measurements on the specimens cached under ``runs/claims/`` by
:mod:`interp.claims.measure`). The verdict is :func:`interp.claims.verdicts.verdict`, one rule
for every row (its docstring states it). :func:`table` is the claims table; the table in
docs/results/claims.md, the counts in README.md, the sweeps' run counts and their tables
(:mod:`interp.claims.result_tables`) are written from committed files by
:func:`write_docs` (``glitchlens claims --write-docs``), and ``tests/test_claims.py`` fails when a
committed file or a doc disagrees with what this computes.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from interp.claims.cope import COPE_CLAIMS
from interp.claims.flipflop import FLIPFLOP_CLAIMS
from interp.claims.sources import H200_KERNEL_RUNS, ROOT, inputs_of, sweep_counts
from interp.claims.tda import TDA_CLAIMS
from interp.claims.tra import TRA_CLAIMS
from interp.claims.verdicts import REASONS, VERDICTS, Claim, Evidence, verdict

CLAIMS: list[Claim] = [*TRA_CLAIMS, *TDA_CLAIMS, *FLIPFLOP_CLAIMS, *COPE_CLAIMS]
COLUMNS = ("key", "paper", "section", "claim", "quote", "line", "paper_number", "ours", "n", "interval", "verdict",
           "reason", "model", "source")


def table(claims: list[Claim] | None = None) -> pd.DataFrame:
    """One row per claim (:data:`COLUMNS`), each measured from the committed files now."""
    rows = []
    for claim in claims or CLAIMS:
        evidence = claim.measure()
        rows.append({"key": claim.key, "paper": claim.paper, "section": claim.section, "claim": claim.claim,
                     "quote": claim.quote[1], "line": claim.quote[0], "paper_number": claim.paper_number,
                     "ours": evidence.ours, "n": evidence.n,
                     "interval": evidence.interval, "verdict": verdict(evidence),
                     "reason": evidence.reason if verdict(evidence) == "not reproduced" else "",
                     "model": claim.model, "source": evidence.source})
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(frame: pd.DataFrame) -> str:
    lines = ["| paper, claim | paper's number | ours (n; 95% interval) | verdict | our model, budget |",
             "|---|---|---|---|---|"]
    for r in frame.itertuples():
        verdict_cell = f"**{r.verdict}**" + (f" ({r.reason})" if r.reason else "")
        words = f" (\"{_cell(r.quote)}\", l. {r.line})" if r.quote else ""
        lines.append(f"| {r.paper} {r.section}: {_cell(r.claim)}{words} | {_cell(r.paper_number)} | {_cell(r.ours)} "
                     f"(n: {_cell(r.n)}; {_cell(r.interval)}) | {verdict_cell} | {_cell(r.model)} |")
    return "\n".join(lines) + "\n"


def render(frame: pd.DataFrame, fmt: str) -> str:
    """The table as ``md``, ``csv`` or ``json``."""
    if fmt == "md":
        return to_markdown(frame)
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        return json.dumps(frame.to_dict("records"), indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose md, csv or json")


def counts(frame: pd.DataFrame) -> dict[str, int]:
    found = Counter(frame.verdict)
    return {v: found.get(v, 0) for v in VERDICTS}


def counts_sentence(frame: pd.DataFrame) -> str:
    c = counts(frame)
    reasons = Counter(r.split(":")[0] for r in frame.reason if r)
    why = ", ".join(f"{reasons[r]} {r}" for r in REASONS if reasons[r])
    return (f"Of the papers' {len(frame)} claims a flip-flop model can test, {c['reproduced']} are reproduced, "
            f"{c['qualitatively']} qualitatively, {c['not reproduced']} not reproduced ({why}) and "
            f"{c['contradicted']} contradicted")


def sweeps_markdown() -> str:
    """The runs of each sweep (:func:`interp.claims.sources.sweep_counts`), and what its finished
    flip-flop runs read of their held-out sequences."""
    lines = ["| sweep | runs | finished (`result.json` committed) | unfinished | held-out sequences right | "
             "learned (>= 99% held-out) |", "|---|---|---|---|---|---|"]
    for r in sweep_counts().itertuples():
        if r.with_held_out:
            right = f"{100 * r.held_out_min:.1f}-{100 * r.held_out_max:.1f}% over {r.with_held_out} runs"
            learned = f"{r.learned} of {r.with_held_out}"
        else:
            right = learned = "(no held-out split)"
        lines.append(f"| `runs/{r.sweep}` | {r.runs} | {r.finished} | {r.unfinished} | {right} | {learned} |")
    return "\n".join(lines) + "\n"


def gpu_kernels_markdown(root: Path = ROOT) -> str:
    """fwd+bwd time of each Triton kernel over SDPA's in the same run, at T >= 4096, for each H200
    benchmark of :data:`H200_KERNEL_RUNS`, then the goals (``kernels.tooling.bench.kernel_goals``) on the last."""
    from kernels.tooling.bench import kernel_goals  # imports triton, only when the docs are written or checked

    frames = [pd.read_csv(root / file) for file, _ in H200_KERNEL_RUNS]
    lengths = sorted({T for frame in frames for T in frame["T"] if T >= 4096})
    lines = ["| kernel | file | " + " | ".join(f"T = {T}" for T in lengths) + " |",
             "|---|---|" + "---|" * len(lengths)]
    for kernel in dict.fromkeys(frames[-1].kernel):
        for (file, what), frame in zip(H200_KERNEL_RUNS, frames):
            mine = frame[(frame.kernel == kernel) & (frame.impl == "triton")].set_index("T").fwd_bwd_vs_sdpa
            cells = [f"{mine[T]:.2f}" if T in mine.index else "" for T in lengths]
            lines.append(f"| {kernel} | `{Path(file).name}` ({what}) | " + " | ".join(cells) + " |")
    # each kind of inputs judged on the latest file that measured it
    latest = {kind: (file, frame) for (file, _), frame in zip(H200_KERNEL_RUNS, frames) for kind in inputs_of(frame)}
    rows = [row for kind, (_, frame) in latest.items()
            for row in frame.assign(inputs=frame.get("inputs", kind)).fillna({"note": ""}).to_dict("records")
            if row["inputs"] == kind]
    lines += ["", "The goals, each kind of inputs on the latest file that measured it ("
              + ", ".join(f"{kind}: `{Path(file).name}`" for kind, (file, _) in latest.items()) + "):", "",
              "| kernel | inputs | goal | worst | limit | met |", "|---|---|---|---|---|---|"]
    lines += [f"| {g['kernel']} | {g['inputs']} | {g['goal']} | {g['worst']:.2f} | {g['limit']:g} | "
              f"{'yes' if g['met'] else 'no'} |" for g in kernel_goals(rows)]
    return "\n".join(lines) + "\n"


# What `glitchlens bench attribution --out runs/bench` wrote: attribution patching against activation patching.
ATTRIBUTION_RUN = "runs/bench/attribution.csv"


def attribution_markdown(root: Path = ROOT) -> str:
    """How well attribution patching agrees with activation patching on each shipped flip-flop
    specimen (``interp.bench.bench_attribution``), from :data:`ATTRIBUTION_RUN`: a sentence over
    the specimens, then one row each."""
    frame = pd.read_csv(root / ATTRIBUTION_RUN)
    saturated = int((frame.missed_patched.abs() > 0.9).sum())
    lines = [f"Over the {len(frame)} shipped flip-flop specimens, attribution patching ranks the components "
             f"(every hook of the streams, the heads' outputs and maps and the mechanism's own, per head) as "
             f"activation patching does with a rank correlation of {frame.rank_correlation.min():.2f} to "
             f"{frame.rank_correlation.max():.2f} (median {frame.rank_correlation.median():.2f}). Its largest miss "
             f"is {frame.largest_miss.min():.2f} to {frame.largest_miss.max():.2f} of the clean-corrupt gap, on "
             f"{saturated} of the {len(frame)} specimens at a component whose patch restores more than 0.9 of it "
             "(a whole stream, or the head every bit passes), where a first-order estimate has the most to miss. It "
             "took "
             f"{frame.speedup.min():.1f}x to {frame.speedup.max():.1f}x less time than activation patching "
             "(one run each, on the 2-core CPU).", "",
             "| specimen | mechanism | pairs | components | rank correlation | largest miss | at | estimated | "
             "patched | speedup |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{r.specimen}` | {r.model} | {r.pairs} | {r.components} | {r.rank_correlation:.2f} | "
              f"{r.largest_miss:.2f} | {r.missed} | {r.missed_estimated:.2f} | {r.missed_patched:.2f} | "
              f"{r.speedup:.1f} |" for r in frame.itertuples()]
    return "\n".join(lines) + "\n"


# The generated blocks of the docs: (file, marker) -> what goes between the markers.
def generated_blocks(frame: pd.DataFrame) -> dict[tuple[str, str], str]:
    """A block on lines of its own starts and ends with a newline; the README's is inline."""
    from interp.bench.load import (batched_seeds_markdown, demo_sentence, eval_markdown, load_markdown,
                                   train_markdown)
    from interp.claims.result_tables import (anatomy_markdown, budgets_markdown, hunts_markdown, learning_markdown,
                                            logit_split_markdown, mech_recipes_markdown, probes_markdown,
                                            recipes_glance_markdown, reruns_markdown, runs_markdown, seeds_markdown,
                                            sharpening_markdown, study_markdown, table1_markdown,
                                            tiny_recipes_markdown)
    from interp.studies.campaign import throughput_markdown
    from interp.studies.pretrained import specimens_markdown

    return {("docs/results/claims.md", "claims-table"): "\n" + to_markdown(frame),
            ("docs/results/claims.md", "claims-counts"): "\n" + counts_sentence(frame) + ".\n",
            ("docs/results/claims.md", "sweep-counts"): "\n" + sweeps_markdown(),
            ("docs/results/claims.md", "table1-cpu"): "\n" + table1_markdown("table1-cpu"),
            ("docs/results/claims.md", "table1-reruns"): "\n" + reruns_markdown(),
            ("docs/results/claims.md", "table1-budgets"): "\n" + budgets_markdown(),
            ("docs/results/claims.md", "table1-10000"): "\n" + seeds_markdown("table1-10000"),
            ("docs/results/claims.md", "app-a-runs"): "\n" + study_markdown("app-a"),
            ("docs/results/claims.md", "app-a-extended-runs"): "\n" + study_markdown("app-a-extended"),
            ("docs/results/claims.md", "sharpening-automaton"): "\n" + sharpening_markdown("automaton-1l"),
            ("docs/results/claims.md", "sharpening-rope"): "\n" + sharpening_markdown("rope-mech"),
            ("docs/results/claims.md", "retrieval-probes"): "\n" + probes_markdown(),
            ("docs/results/claims.md", "glitch-destinations"): "\n" + anatomy_markdown(),
            ("docs/results/claims.md", "logit-split"): "\n" + logit_split_markdown(),
            ("docs/results/tools.md", "hunts"): "\n" + hunts_markdown(),
            ("docs/results/learning.md", "recipes-glance"): "\n" + recipes_glance_markdown(),
            ("docs/results/learning.md", "recipes-mech"): "\n" + mech_recipes_markdown(),
            ("docs/results/learning.md", "recipes-tiny"): "\n" + tiny_recipes_markdown(),
            ("docs/results/learning.md", "learning-cpu"): "\n" + learning_markdown(),
            ("docs/results/claims.md", "tda-threshold-runs"): "\n" + runs_markdown(
                ("tda-threshold", "tda-threshold-long", "tda-threshold-4500")),
            ("docs/results/benchmarks.md", "gpu-kernels"): "\n" + gpu_kernels_markdown(),
            ("docs/results/benchmarks.md", "attribution-agreement"): "\n" + attribution_markdown(),
            ("docs/results/benchmarks.md", "under-load"): "\n" + load_markdown(),
            ("docs/results/benchmarks.md", "train-step"): "\n" + train_markdown(),
            ("docs/results/benchmarks.md", "seeds-batched"): "\n" + batched_seeds_markdown(),
            ("docs/results/benchmarks.md", "eval-speed"): "\n" + eval_markdown(),
            ("docs/results/benchmarks.md", "campaign-throughput"): "\n" + throughput_markdown(ROOT),
            ("docs/explanation/specimens.md", "specimens"): "\n" + specimens_markdown(),
            ("README.md", "demo-result"): demo_sentence(),
            ("README.md", "claims-counts"): counts_sentence(frame) + f". {VERDICT_RULE} ([the claims table and how a "
            "verdict is reached](docs/results/claims.md#the-papers-claims-tested))."}


# How a verdict is reached, in one sentence for the README (docs/results/claims.md has the paragraph).
VERDICT_RULE = ("Each row quotes the paper's words with their line, computes the paper's statistic, and is judged "
                "over seeds where the paper's spread is over seeds (a t interval, or an exact one for a share): a "
                "claim holds when every seed shows it or a stated test gives p <= 0.05, never on the best run; it "
                "is contradicted only when the opposite reaches p <= 0.05 at the seed level; a row whose model "
                "misses the claim's premise, or lacks runs, says which and what they cost")


def marked(text: str, marker: str) -> re.Match | None:
    return re.search(rf"(<!-- {marker}:start -->)(.*?)(<!-- {marker}:end -->)", text, flags=re.S)


def write_docs(frame: pd.DataFrame | None = None, root: Path = ROOT, check: bool = False) -> list[str]:
    """Write each generated block between its ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
    markers; with ``check``, write nothing and return the blocks that differ. A file without its
    markers is an error naming them."""
    frame = table() if frame is None else frame
    stale = []
    for (file, marker), body in generated_blocks(frame).items():
        path = root / file
        text = path.read_text()
        found = marked(text, marker)
        if found is None:
            raise ValueError(f"{file} has no <!-- {marker}:start --> ... <!-- {marker}:end --> block to write")
        if found.group(2) != body:
            stale.append(f"{file} ({marker})")
            if not check:
                text = text[:found.start(2)] + body + text[found.end(2):]
                path.write_text(text)
    return stale


__all__ = ["CLAIMS", "Claim", "Evidence", "counts", "render", "table", "verdict", "write_docs"]

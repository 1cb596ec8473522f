"""The CoPE paper's claims on flip-flop: its App. C Fig. 5 (CoPE learns fastest) and Fig. 6 (gates
open on the tokens a head counts)."""

from __future__ import annotations

import numpy as np

from interp.claims import sources
from interp.claims.verdicts import Claim, Evidence, wilson

SOFTMAX_POSITIONS = ("nope", "ape", "rel", "rope", "label")   # the position encodings CoPE is set against


def learning_step(curve: list[list[float]]) -> float:
    """The first quick check (100 `iid` sequences) with every sequence right; inf if none."""
    return next((step for step, accuracy in curve if accuracy >= 1.0), np.inf)


def fastest_evidence() -> Evidence:
    """App. C Fig. 5: CoPE converges fastest, and an absolute position table fails to learn. From the
    learning curves of `table1-cpu` (seeds 0-2): holds when CoPE's mean learning step is below
    every softmax position encoding's (NoPE, APE, REL, RoPE, Label) and APE does not learn; at
    strength when also no later than any other model of the table; the opposite when some softmax
    position encoding learns faster."""
    steps = {model: [learning_step(sources.result("table1-cpu", f"{model}-seed{s}")["learning_curve"])
                     for s in range(3)] for model in ("cope", *SOFTMAX_POSITIONS, "fot", "tra", "diff", "lstm")}
    mean = {m: float(np.mean(v)) for m, v in steps.items()}
    softmax = {m: mean[m] for m in SOFTMAX_POSITIONS}
    faster = [m for m, v in mean.items() if v < mean["cope"]]
    text = ", ".join(f"{m} {'/'.join('-' if s == np.inf else str(int(s)) for s in v)}" for m, v in steps.items())
    learned = sum(s < np.inf for s in steps["cope"])
    return Evidence(f"first step with 100 of 100 `iid` sequences right, seeds 0 / 1 / 2 (- never in 1000): {text}",
                    "3 seeds per model, a check every 200 steps", f"CoPE learned on {learned} of 3 "
                    f"({100 * wilson(learned, 3)[0]:.0f}-{100 * wilson(learned, 3)[1]:.0f}%)",
                    holds=all(mean["cope"] < v for v in softmax.values()) and mean["ape"] == np.inf,
                    at_strength=not faster, opposite=any(v < mean["cope"] for v in softmax.values()),
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


COPE_CLAIMS = [
    Claim("cope-fig5", "CoPE", "App. C, Fig. 5", "CoPE converges fastest on flip-flop; an absolute position table "
          "fails", "(figure)", "Table 1's models, `tiny` 2 x 4 x 64, 1000 steps at T = 512, seeds 0-2",
          fastest_evidence),
    Claim("cope-fig6", "CoPE", "Fig. 6", "gates open on the tokens a head counts", "(figure)",
          "`cope-mech`: `tiny` 2 x 4 x 64, 1000 steps at T = 512", gates_evidence),
]

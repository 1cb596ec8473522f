"""The verdict rules of the claims table, written once.

A claim's measurement returns :class:`Evidence`: our numbers in words, what they are counted over
(``n``) and their 95% interval, and three judgements the rules read:

- ``holds``: the claim's outcome is seen in ours (the model glitches where the paper's point is
  that it glitches, is perfect where it is perfect, the figure's pattern is there);
- ``at_strength``: it is seen at the paper's strength: our interval overlaps the paper's number
  with its spread (:func:`paper_range`), or, where the paper reports a figure, the same outcome
  as the figure's with nothing weaker (each claim says what that is);
- ``opposite``: the opposite is seen, outside both spreads (a split the paper has perfect that
  ours gets mostly wrong; a model the paper has glitching that ours reads without an error; a
  figure's trend reversed).

:func:`verdict` turns them into one of :data:`VERDICTS`: **reproduced** (holds, at strength),
**qualitatively** (holds, not at strength), **contradicted** (the opposite), **not reproduced**
otherwise, which must name its reason, one of :data:`REASONS` (budget: our runs are shorter or
fewer than the paper's, or not run; size: our models are smaller; regime: the set-up differs,
e.g. a length the paper does not test; metric: what we can count is not the paper's quantity,
or the test cannot fail). A claim whose point is a failure is reproduced only by a failure of the
paper's size: a model that glitches less than the paper's is not agreement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

REPRODUCED, QUALITATIVELY, NOT_REPRODUCED, CONTRADICTED = "reproduced", "qualitatively", "not reproduced", \
    "contradicted"
VERDICTS = (REPRODUCED, QUALITATIVELY, NOT_REPRODUCED, CONTRADICTED)
REASONS = ("budget", "size", "regime", "metric")

# Below this share of sequences right, a split the paper has perfect is "mostly wrong": the opposite.
MOSTLY_WRONG = 0.5


@dataclass(frozen=True)
class Evidence:
    """What a claim's measurement found (the module docstring says how each field is read)."""

    ours: str
    n: str
    interval: str
    holds: bool
    at_strength: bool
    opposite: bool
    reason: str = ""      # "<one of REASONS>: <why>", required when neither holds nor opposite
    source: str = ""      # the committed files the numbers come from


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: where it is, the paper's number with its spread, our model and
    budget, and ``measure``, which computes our :class:`Evidence` from committed files."""

    key: str
    paper: str            # TRA, TDA, flip-flop, CoPE
    section: str
    claim: str
    paper_number: str
    model: str            # our model and budget
    measure: Callable[[], Evidence]
    # The paper's own words for the claim: (line of its file in PAPER_FILES, words on that line)
    quote: tuple[int, str] = (0, "")


# The papers' text files (the project's copies, /work/shared/papers or shared/papers), by Claim.paper.
PAPER_FILES = {"TRA": "000_1e40be65c4985cd5.txt", "flip-flop": "002_cbc1a16af32b4280.txt",
               "TDA": "003_ffe354fecd74e1d6.txt", "CoPE": "004_48497b25c7e609ea.txt"}


def verdict(evidence: Evidence) -> str:
    """The rule of the module docstring: reproduced, qualitatively, contradicted or not reproduced."""
    if evidence.holds and evidence.opposite:
        raise ValueError(f"evidence both holds and is the opposite: {evidence.ours!r}")
    if evidence.holds:
        return REPRODUCED if evidence.at_strength else QUALITATIVELY
    if evidence.opposite:
        return CONTRADICTED
    if evidence.reason.split(":")[0] not in REASONS:
        raise ValueError(f"a claim not reproduced needs a reason starting with one of {', '.join(REASONS)}: "
                         f"got {evidence.reason!r} for {evidence.ours!r}")
    return NOT_REPRODUCED


def not_run(what: str, runs: str, priced: Callable[[], list]) -> Callable[[], Evidence]:
    """The measurement of a claim whose runs this project has not defined or trained: its row names
    the runs it needs and their cost (:func:`interp.claims.cost.cost_text` of ``priced()``, the runs
    as :class:`~interp.studies.specimens.Specimen` s), and is not reproduced (budget)."""
    def measure() -> Evidence:
        from interp.claims.cost import cost_text

        return Evidence(f"not run: {what}", "0 runs", "none (not run)", False, False, False,
                        f"budget: {runs}; {cost_text(priced())}")
    return measure


def once_built(specimen: str, measure: Callable[[], Evidence], otherwise: Callable[[], Evidence]
               ) -> Callable[[], Evidence]:
    """The measurement of a claim about a specimen not yet built: ``measure`` once ``specimen`` is
    in ``models/pretrained`` (:func:`models.pretrained.built`), ``otherwise`` (its ``not_run``) until then."""
    def measured() -> Evidence:
        from models.pretrained import built

        return measure() if specimen in built() else otherwise()
    return measured


def wilson(count: float, n: float) -> tuple[float, float]:
    """The 95% Wilson interval of ``count / n`` (:func:`interp.metrics.anatomy.wilson_interval`)."""
    from interp.metrics.anatomy import wilson_interval

    low, high = wilson_interval(count, n)
    return float(low), float(high)


def paper_range(mean: float, spread: float, n: int | None = None) -> tuple[float, float]:
    """The paper's number as an interval of shares: ``mean +- spread`` (percent in, share out),
    widened by the Wilson interval of ``mean`` over the ``n`` sequences it was counted on where
    known, so that a paper's ``100 +- 0`` over 12,000 sequences is ``[0.9997, 1]``, not one point."""
    low, high = (mean - spread) / 100, (mean + spread) / 100
    if n:
        w_low, w_high = wilson(round(mean / 100 * n), n)
        low, high = min(low, w_low), max(high, w_high)
    return max(low, 0.0), min(high, 1.0)


def overlaps(ours: tuple[float, float], paper: tuple[float, float]) -> bool:
    return ours[0] <= paper[1] and paper[0] <= ours[1]


def percent_interval(interval: tuple[float, float], digits: int = 1) -> str:
    return f"{100 * interval[0]:.{digits}f}-{100 * interval[1]:.{digits}f}%"


def ratio_interval(values) -> tuple[float, float]:
    """A 95% t interval of the mean of ``values`` (a spread over seeds or sequences)."""
    from scipy.special import stdtrit

    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    half = stdtrit(len(values) - 1, 0.975) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)

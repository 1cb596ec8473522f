"""The statistics of the claims table's verdicts, one module, each rule fixed before the data.

The unit of replication is the one the paper's spread is over: where a paper reports a mean and
standard deviation over seeds (TRA Table 1, CoPE Tables 9-10) or runs (the flip-flop paper's
R1-R8), ours is one number per seed, and its interval is over seeds (:func:`seed_interval`: the 95%
t interval of the mean; a share of seeds, such as the seeds that learn, gets the exact
Clopper-Pearson interval, :func:`share_interval`). Sequences, reads or tokens are pooled (a Wilson
interval, :func:`interp.claims.verdicts.wilson`) only for a claim about one model, a specimen.

The rules, each with its p-value or its count in the row, never the best of several runs:

- :func:`every_seed`: the claim holds in every seed (n >= 1) - the rule for a claim the paper
  states of every run ("100 of 100 runs", "perfect on iid");
- :func:`rank_test`: two sets of seeds, the exact one-sided Mann-Whitney test that one is lower
  than the other (3 against 3 gives at best p = 0.05, 5 against 5 p = 0.004);
- :func:`paired_t_test`: one set of seeds before and after a change (a lever, more steps), the
  one-sided t test of the per-seed differences;
- :func:`one_sample_t_test`: seeds against a fixed number, the one-sided t test of their mean;
- :func:`sign_test`: runs paired with a baseline each, the exact sign test of how many moved one way.

:func:`decide` turns a test into the two judgements of :class:`interp.claims.verdicts.Evidence`:
``holds`` when the claimed direction has p <= :data:`ALPHA`, ``opposite`` (contradicted) only when
the other direction has p <= :data:`ALPHA` at the seed level. Neither: the row is not reproduced,
and :func:`smallest_p` says whether the seeds could have reached ALPHA at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float
from scipy import stats

ALPHA = 0.05


@dataclass(frozen=True)
class Test:
    """A seed-level test of a claimed direction: its name, the p-value of the claimed direction and
    of the opposite one, and how many seeds it saw."""

    name: str
    p: float
    p_opposite: float
    n: str

    def text(self) -> str:
        return f"{self.name}: p = {self.p:.3g} (the opposite direction p = {self.p_opposite:.3g}; {self.n})"


def seed_interval(values: Sequence[float] | Float[np.ndarray, "seed"]) -> tuple[float, float]:
    """The 95% t interval of the mean of ``values``, one per seed; one seed gives no spread, so
    its interval is the whole range [-inf, inf] (nothing can be decided on it)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return -np.inf, np.inf
    if values.std(ddof=1) == 0:
        return float(values.mean()), float(values.mean())
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def share_interval(count: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of ``count`` of ``n`` seeds: the unit is small."""
    if n == 0:
        return 0.0, 1.0
    found = stats.binomtest(count, n).proportion_ci(0.95, method="exact")
    return float(found.low), float(found.high)


def every_seed(flags: Sequence[bool]) -> bool:
    """The all-seeds rule: at least one seed, and every one shows the claim."""
    return len(flags) > 0 and all(flags)


def rank_test(lower: Sequence[float], higher: Sequence[float]) -> Test:
    """The exact one-sided rank (Mann-Whitney) test that the seeds ``lower`` lie below the seeds
    ``higher``: U counts the pairs (x in lower, y in higher) with x < y, ties a half; p is the share of
    all ways to split the pooled seeds into groups of these sizes whose U is at least the observed
    (exact with ties). ``p_opposite`` is the same test of the other direction."""
    lower, higher = np.asarray(lower, dtype=float), np.asarray(higher, dtype=float)
    n = f"{len(lower)} against {len(higher)} seeds"
    if not len(lower) or not len(higher):
        return Test("exact rank test", 1.0, 1.0, n)
    pooled = np.concatenate([lower, higher])
    splits = np.array(list(combinations(range(len(pooled)), len(lower))))
    first = np.zeros((len(splits), len(pooled)), dtype=bool)
    first[np.arange(len(splits))[:, None], splits] = True
    below = (pooled[:, None] < pooled[None, :]) + 0.5 * (pooled[:, None] == pooled[None, :])   # [x, y]
    u_less = np.einsum("sx,xy,sy->s", first.astype(float), below, (~first).astype(float))
    u_more = len(lower) * len(higher) - u_less
    return Test("one-sided exact rank test over seeds", float((u_less >= u_less[0] - 1e-9).mean()),
                float((u_more >= u_more[0] - 1e-9).mean()), n)


def paired_t_test(before: Sequence[float], after: Sequence[float]) -> Test:
    """The one-sided t test that ``after`` is below ``before``, paired by seed; ``p_opposite``: above.
    Differences all equal (no spread) give p = 0 for their direction and 1 for the other."""
    diffs = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    n = f"{len(diffs)} seeds, paired"
    if len(diffs) < 2:
        return Test("paired t test", 1.0, 1.0, n)
    if diffs.std(ddof=1) == 0:
        mean = diffs.mean()
        return Test("paired t test", float(mean >= 0), float(mean <= 0), n)
    p = stats.ttest_1samp(diffs, 0.0, alternative="less").pvalue
    return Test("one-sided paired t test over seeds", float(p), float(1 - p), n)


def one_sample_t_test(values: Sequence[float], below: float) -> Test:
    """The one-sided t test that the seeds' mean lies below ``below``; ``p_opposite``: above it."""
    values = np.asarray(values, dtype=float)
    n = f"{len(values)} seeds"
    if len(values) < 2:
        return Test("one-sample t test", 1.0, 1.0, n)
    if values.std(ddof=1) == 0:
        return Test("one-sample t test", float(values.mean() >= below), float(values.mean() <= below), n)
    p = stats.ttest_1samp(values, below, alternative="less").pvalue
    return Test("one-sided one-sample t test over seeds", float(p), float(1 - p), n)


def sign_test(worse: int, n: int) -> Test:
    """The exact one-sided sign test that runs go one way more often than not: ``worse`` of ``n``
    runs (paired with their baseline) moved that way; p = P(X >= worse) for X ~ Bin(n, 1/2);
    ``p_opposite`` = P(X <= worse)."""
    if n == 0:
        return Test("sign test", 1.0, 1.0, "0 runs")
    return Test("one-sided exact sign test over runs", float(stats.binom.sf(worse - 1, n, 0.5)),
                float(stats.binom.cdf(worse, n, 0.5)), f"{worse} of {n} runs")


def decide(test: Test, alpha: float = ALPHA) -> tuple[bool, bool]:
    """``(holds, opposite)``: the claimed direction significant, the opposite one significant."""
    return test.p <= alpha, test.p_opposite <= alpha


def smallest_p(n_lower: int, n_higher: int) -> float:
    """The smallest p the exact rank test can give with these numbers of seeds: 1 / C(n1 + n2, n1)
    (1 when either has none)."""
    from math import comb

    return 1 / comb(n_lower + n_higher, n_lower) if n_lower and n_higher else 1.0


def percent_seeds(values: Sequence[float], digits: int = 1) -> str:
    """``mean (sd), 95% t interval low-high`` of the shares ``values`` as percentages, one per seed."""
    values = np.asarray(values, dtype=float)
    low, high = seed_interval(values)
    if len(values) < 2:
        return f"{100 * values.mean():.{digits}f}% (1 seed, no interval)"
    return (f"{100 * values.mean():.{digits}f}% (sd {100 * values.std(ddof=1):.{digits}f}), t interval "
            f"{100 * max(low, 0):.{digits}f}-{100 * min(high, 1):.{digits}f}% over {len(values)} seeds")

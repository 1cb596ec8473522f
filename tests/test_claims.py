"""The claims table (interp/claims): the verdict rule, the table computed from the committed files,
and the docs generated from it (docs/results/claims.md, README.md) agreeing with what the code computes."""

from __future__ import annotations

import copy
import re

import pandas as pd
import pytest

from interp import claims
from interp.claims import measure, sources
from interp.claims.cope import task_comparison_evidence
from interp.claims.tra import table1_evidence
from interp.claims.verdicts import Evidence, paper_range, verdict


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    sources.clear()
    return claims.table()


def evidence(**judged) -> Evidence:
    return Evidence("ours", "n", "interval", **{"holds": False, "at_strength": False, "opposite": False, **judged})


def test_the_verdict_rule():
    assert verdict(evidence(holds=True, at_strength=True)) == "reproduced"
    assert verdict(evidence(holds=True)) == "qualitatively"
    assert verdict(evidence(opposite=True)) == "contradicted"
    assert verdict(evidence(reason="budget: not run")) == "not reproduced"
    with pytest.raises(ValueError, match="needs a reason"):
        verdict(evidence())
    with pytest.raises(ValueError, match="needs a reason"):
        verdict(evidence(reason="it is hard"))
    # the paper's 100 +- 0 over 12,000 sequences is an interval, not one point
    low, high = paper_range(100, 0, 12_000)
    assert 0.999 < low < 1 and high == 1


def table1_result(sparse: float, held_out: float = 1.0) -> dict:
    splits = {name: {"sequences": n, "sequence_accuracy": 1.0, "read_errors": 0, "reads": 10 * n}
              for name, n in (("iid", 1000), ("dense", 3000), ("sparse", 10_000))}
    splits["sparse"]["sequence_accuracy"] = sparse
    return {"scale": {"steps": 1000}, "held_out": {"sequence_accuracy": held_out}, "splits": splits}


@pytest.mark.parametrize(("sparse", "held_out", "expected"), [
    (0.93, 1.0, "reproduced"),          # FoT glitching as the paper's (93.4 +- 4.2)
    (0.99, 1.0, "qualitatively"),       # glitching less than the paper's is not agreement
    (1.0, 1.0, "contradicted"),         # not glitching at all is the opposite
    (0.93, 0.5, "not reproduced"),      # a run that did not learn says nothing
])
def test_a_failure_claim_is_reproduced_only_by_a_failure_of_its_size(monkeypatch, sparse, held_out, expected):
    monkeypatch.setattr(sources, "has_result", lambda sweep, name: True)
    monkeypatch.setattr(sources, "result", lambda sweep, name: table1_result(sparse, held_out))
    assert verdict(table1_evidence("fot", "sweep", ["fot-seed0"])) == expected


def cope_task_result(errors: dict[str, float]) -> dict:
    return {"splits": {split: {"reads": 1000, "read_errors": round(1000 * rate), "error_rate": round(1000 * rate) / 1000}
                       for split, rate in errors.items()}}


@pytest.mark.parametrize(("cope", "rival", "finished", "expected"), [
    ((0.0, 0.0, 0.0), (0.3, 0.4, 0.5), True, "reproduced"),          # every CoPE seed below, at the paper's 0
    ((0.05, 0.02, 0.03), (0.3, 0.4, 0.5), True, "qualitatively"),    # below, but not the paper's 0
    ((0.0, 0.35, 0.0), (0.3, 0.4, 0.5), True, "not reproduced"),     # one CoPE seed inside the rival's
    ((0.6, 0.7, 0.8), (0.3, 0.4, 0.5), True, "contradicted"),        # the rival below on every seed
    ((0.0, 0.0, 0.0), (0.3, 0.4, 0.5), False, "not reproduced"),     # a run missing: no verdict drawn
])
def test_cope_task_claims_rank_every_seed(monkeypatch, cope, rival, finished, expected):
    rates = {"cope": cope, "rel": rival}
    monkeypatch.setattr(sources, "has_result", lambda sweep, name: finished or name != "counting-rel-seed2")
    monkeypatch.setattr(sources, "result", lambda sweep, name: cope_task_result(
        {"iid": rates[name.split("-")[1]][int(name[-1])]}))
    evidence = task_comparison_evidence("counting", ("iid",), ("rel",))
    assert verdict(evidence) == expected, evidence
    if not finished:
        assert evidence.reason.startswith("budget: 5 of the 6 runs")


def test_every_claim_has_a_verdict_an_n_and_an_interval(table):
    assert len(table) >= 38
    assert table.key.is_unique
    assert set(table.verdict) <= set(claims.verdicts.VERDICTS)
    assert (table.n.str.len() > 0).all() and (table.interval.str.len() > 0).all(), \
        table[(table.n == "") | (table.interval == "")].key.tolist()
    assert (table.reason.str.len() > 0).eq(table.verdict == "not reproduced").all()


def test_the_docs_are_the_table(table):
    assert claims.write_docs(table, check=True) == [], "run `glitchlens claims --write-docs`"


def test_an_edited_committed_number_shows(table, monkeypatch):
    """Editing a committed result (here rope-mech's `dense` read errors, as read) changes the table,
    so the docs no longer match it."""
    edited = copy.deepcopy(sources.result("table1-cpu", "rope-seed0"))
    edited["splits"]["dense"]["read_errors"] += 1000
    read = sources.result
    monkeypatch.setattr(sources, "result", lambda sweep, name: edited if (sweep, name) == ("table1-cpu", "rope-seed0")
                        else read(sweep, name))
    changed = claims.table([c for c in claims.CLAIMS if c.key == "ff-r1-glitch"])
    assert changed.ours.iloc[0] != table.set_index("key").loc["ff-r1-glitch", "ours"]
    assert claims.write_docs(pd.concat([table[table.key != "ff-r1-glitch"], changed]), check=True)


# Prose that quotes a sweep's run counts: (file, pattern, sweep, the groups' fields in sweep_counts)
QUOTED_COUNTS = [
    ("docs/results/claims.md", r"at 10,000 steps \((\d+) of the (\d+) runs finished\)", "table1-10000",
     ("finished", "runs")),
    ("docs/results/claims.md", r"The (\d+) finished runs\n", "table1-10000", ("finished",)),
    ("docs/results/claims.md", r"Not finished: Diff, FoT, CoPE, trela, TDA and REL\*\*, (\d+) runs", "table1-10000",
     ("unfinished",)),
]


def test_the_sweep_counts_the_docs_quote():
    counts = sources.sweep_counts().set_index("sweep")
    assert counts.loc["table1-10000", "finished"] == len(sources.finished("table1-10000"))
    for file, pattern, sweep, fields in QUOTED_COUNTS:
        found = re.search(pattern, (sources.ROOT / file).read_text())
        assert found, f"{file}: no {pattern!r}"
        assert tuple(int(g) for g in found.groups()) == tuple(counts.loc[sweep, f] for f in fields), (file, pattern)
    results = (sources.ROOT / "docs/results/claims.md").read_text()
    rows = re.findall(r"^\| `glitchlens reproduce [^`]*--out runs/([\w-]+)` \|[^|]*\| (\d+) \| (\d+)", results, re.M)
    assert rows
    for sweep, runs, finished in rows:
        assert (int(runs), int(finished)) == (counts.loc[sweep, "runs"], counts.loc[sweep, "finished"]), sweep


@pytest.mark.slow
@pytest.mark.parametrize("name", measure.FAST)
def test_the_cached_measurements_recompute(name):
    committed = pd.read_csv(sources.CACHE / f"{name}.csv")
    fresh = measure.MEASUREMENTS[name][0]()
    pd.testing.assert_frame_equal(fresh.reset_index(drop=True), committed, check_dtype=False, rtol=1e-5)

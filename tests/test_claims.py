"""The claims table (interp/claims): the verdict rule, the table computed from the committed files,
and the docs generated from it (docs/results/claims.md, README.md) agreeing with what the code computes."""

from __future__ import annotations

import copy
import re
import statistics

import pandas as pd
import pytest

from interp import claims
from interp.claims import measure, result_tables, sources, stats
from interp.claims import cost
from interp.claims.cope import task_comparison_evidence
from interp.claims.tda import SINGLE_VIEW_NOISE
from interp.claims.tra import table1_evidence
from interp.claims.verdicts import PAPER_FILES, Evidence, paper_range, verdict


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


# Each statistical rule of interp.claims.stats on synthetic seeds: where it must hold, where the
# opposite must be significant, and where neither may be claimed.
def test_the_rank_test_over_seeds_decides_both_ways_and_neither():
    below = stats.rank_test([0.0, 0.01, 0.02, 0.0, 0.01], [0.3, 0.4, 0.5, 0.35, 0.45])
    assert below.p == pytest.approx(1 / 252) and stats.decide(below) == (True, False)
    above = stats.rank_test([0.6, 0.7, 0.8], [0.3, 0.4, 0.5])
    assert above.p_opposite == pytest.approx(0.05) and stats.decide(above) == (False, True)
    mixed = stats.rank_test([0.0, 0.35, 0.0], [0.3, 0.4, 0.5])      # one seed inside the rival's
    assert stats.decide(mixed) == (False, False)
    # ties count half: three seeds at 0 against three at 0 can show nothing
    assert stats.decide(stats.rank_test([0, 0, 0], [0, 0, 0])) == (False, False)
    # 3 against 1 seeds can never reach 0.05, so no verdict can be drawn from them
    assert stats.smallest_p(3, 1) == 0.25 and stats.smallest_p(3, 0) == 1


def test_the_paired_and_one_sample_t_tests_decide_both_ways():
    down = stats.paired_t_test([0.10, 0.20, 0.30], [0.01, 0.03, 0.02])
    assert stats.decide(down) == (True, False)
    up = stats.paired_t_test([0.01, 0.03, 0.02], [0.10, 0.20, 0.30])
    assert stats.decide(up) == (False, True)
    noisy = stats.paired_t_test([0.1, 0.2, 0.3], [0.2, 0.1, 0.31])
    assert stats.decide(noisy) == (False, False)
    assert stats.decide(stats.one_sample_t_test([0.1, 0.2, 0.15], 0.5)) == (True, False)
    assert stats.decide(stats.one_sample_t_test([1.0, 1.0, 1.0], 0.976)) == (False, True)   # no spread, above
    assert stats.decide(stats.one_sample_t_test([0.4, 0.6, 0.5], 0.5)) == (False, False)


def test_the_all_seeds_rule_the_sign_test_and_the_exact_share():
    assert stats.every_seed([True, True, True]) and not stats.every_seed([True, False, True])
    assert not stats.every_seed([])                               # no seed shows nothing
    assert stats.decide(stats.sign_test(5, 5)) == (True, False)   # p = 1/32
    assert stats.decide(stats.sign_test(3, 3)) == (False, False)  # p = 1/8: three runs cannot contradict
    assert stats.decide(stats.sign_test(0, 6)) == (False, True)
    low, high = stats.share_interval(0, 3)
    assert low == 0 and high == pytest.approx(0.7076, abs=1e-4)   # Clopper-Pearson, 0 of 3
    low, high = stats.seed_interval([1.0, 2.0, 3.0])
    assert (low, high) == pytest.approx((2 - 2.4841, 2 + 2.4841), abs=1e-3)
    assert stats.seed_interval([0.5]) == (-float("inf"), float("inf"))   # one seed: no interval


def table1_result(sparse: float, held_out: float = 1.0) -> dict:
    splits = {name: {"sequences": n, "sequence_accuracy": 1.0, "read_errors": 0, "reads": 10 * n}
              for name, n in (("iid", 1000), ("dense", 3000), ("sparse", 10_000))}
    splits["sparse"]["sequence_accuracy"] = sparse
    return {"scale": {"steps": 1000}, "held_out": {"sequence_accuracy": held_out}, "splits": splits}


@pytest.mark.parametrize(("sparse", "held_out", "seeds", "expected"), [
    ((0.93, 0.92, 0.95), 1.0, 3, "reproduced"),        # FoT glitching as the paper's (93.4 +- 4.2) on every seed
    ((0.99, 0.995, 0.99), 1.0, 3, "qualitatively"),    # glitching less than the paper's is not agreement
    ((0.93, 1.0, 0.95), 1.0, 3, "not reproduced"),     # one seed without a glitch: the all-seeds rule fails
    ((1.0, 1.0, 1.0), 1.0, 3, "contradicted"),         # no seed glitches, above the paper's range: the opposite
    ((0.93, 0.93, 0.93), 0.5, 3, "not reproduced"),    # runs that did not learn say nothing
    ((0.93,), 1.0, 1, "not reproduced"),               # one seed has no spread over seeds
])
def test_a_table1_row_is_judged_over_seeds(monkeypatch, sparse, held_out, seeds, expected):
    monkeypatch.setattr(sources, "has_result", lambda sweep, name: True)
    monkeypatch.setattr(sources, "result", lambda sweep, name: table1_result(sparse[int(name[-1])], held_out))
    found = table1_evidence("fot", "sweep", [f"fot-seed{seed}" for seed in range(seeds)])
    assert verdict(found) == expected, found
    assert f"{seeds} seed" in found.n


def cope_task_result(errors: dict[str, float]) -> dict:
    return {"splits": {split: {"reads": 1000, "read_errors": round(1000 * rate), "error_rate": round(1000 * rate) / 1000}
                       for split, rate in errors.items()}}


@pytest.mark.parametrize(("cope", "rival", "finished", "expected"), [
    ((0.0,) * 5, (0.3, 0.4, 0.5, 0.35, 0.45), 5, "reproduced"),              # below at p = 1/252, at the paper's 0
    ((0.05, 0.02, 0.03, 0.04, 0.01), (0.3, 0.4, 0.5, 0.35, 0.45), 5, "qualitatively"),   # below, not the paper's 0
    ((0.0, 0.35, 0.0, 0.5, 0.0), (0.3, 0.4, 0.5, 0.35, 0.45), 5, "not reproduced"),    # two seeds inside the rival's
    ((0.6, 0.7, 0.8, 0.65, 0.75), (0.3, 0.4, 0.5, 0.35, 0.45), 5, "contradicted"),     # the rival below, p = 1/252
    ((0.0,) * 5, (0.3, 0.4, 0.5, 0.35, 0.45), 4, "reproduced"),              # 5 against 4 seeds still decide
    ((0.0,) * 5, (0.3, 0.4, 0.5, 0.35, 0.45), 0, "not reproduced"),          # no rival run: no verdict drawn
])
def test_cope_task_claims_rank_the_seeds(monkeypatch, cope, rival, finished, expected):
    rates = {"cope": cope, "shaw": rival}
    present = lambda sweep, name: name.split("-")[1] == "cope" or int(name[-1]) < finished   # noqa: E731
    monkeypatch.setattr(sources, "has_result", present)
    monkeypatch.setattr(sources, "result", lambda sweep, name: cope_task_result(
        {"iid": rates[name.split("-")[1]][int(name[-1])]}))
    evidence = task_comparison_evidence("counting", ("iid",), ("shaw",))
    assert verdict(evidence) == expected, evidence
    assert ("not in" in evidence.n) == (finished < 5)


def noise_rows(specimen: str, means: tuple[float, float], half: float = 0.01) -> list[dict]:
    return [{"specimen": specimen, "layer": layer, "n_sequences": 100, "reads": 2658, "noise_peak": mean,
             "low": mean - half, "high": mean + half, "largest": 2 * mean} for layer, mean in enumerate(means)]


@pytest.mark.parametrize(("differential", "expected"), [
    ((0.02, 0.03), "reproduced"),           # below in both layers, at most half: suppressed
    ((0.40, 0.20), "qualitatively"),        # below in both layers (disjoint intervals), more than half
    ((0.02, 0.27), "not reproduced"),       # below in one layer, the other's intervals overlap
    ((0.60, 0.40), "contradicted"),         # above in both layers
])
def test_the_single_view_row_compares_the_noise_per_layer(monkeypatch, differential, expected):
    import models.pretrained

    frame = pd.DataFrame(noise_rows("trela-beta1", (0.5, 0.27)) + noise_rows("tda-beta1", differential))
    committed = sources.csv   # the other files (the not-run row's cost reads runs/bench) stay the committed ones
    monkeypatch.setattr(sources, "csv", lambda path: frame if path == SINGLE_VIEW_NOISE else committed(path))
    monkeypatch.setattr(models.pretrained, "built", lambda: ["tda-beta1", "trela-beta1"])
    row = next(c for c in claims.CLAIMS if c.key == "tda-single-view")
    found = row.measure()
    assert verdict(found) == expected, found
    assert "one seed" in found.n and "over sequences" in found.interval
    monkeypatch.setattr(models.pretrained, "built", lambda: ["tda-beta1"])     # until the specimen is built
    assert row.measure().reason.startswith("budget: the `trela-beta1` specimen")
    monkeypatch.setattr(models.pretrained, "built", lambda: ["tda-beta1", "trela-beta1"])
    other = frame.assign(specimen=frame.specimen.replace("trela-beta1", "trela-mech"))
    monkeypatch.setattr(sources, "csv", lambda path: other if path == SINGLE_VIEW_NOISE else committed(path))
    with pytest.raises(ValueError, match="no rows of `trela-beta1`"):
        row.measure()


def test_a_cost_is_the_committed_step_scaled_to_the_runs():
    """interp.claims.cost: the fitted model passes through the committed one-thread steps it is fitted to
    and each mechanism's bench step; a row's text is the computation, and scales with steps and runs."""
    from models import ModelConfig

    bench = sources.csv(cost.TRAIN_CSV).set_index("model").step_s
    threads = sources.csv(cost.THREADS_CSV).set_index(["workload", "competing"])["1 threads s"]
    for model in ("rope", "tda", "lstm"):
        assert cost.step_seconds(ModelConfig.from_preset(model, "mini", n_ctx=512), 8, 512) == pytest.approx(
            bench[model])
    run = cost.entry_runs("rope-mech")[0]
    model_cfg, train_cfg = run.configs()
    assert cost.step_seconds(model_cfg, 8, 512) == pytest.approx(threads["training step", "none"])
    seconds = train_cfg.steps * cost.step_seconds(model_cfg, train_cfg.batch_size, train_cfg.seq_len)
    assert cost.core_seconds([run]) == pytest.approx(seconds)
    assert seconds < cost.GPU_FROM_S and cost.cost_text([run]) == f"about {cost.duration(seconds)} of a core"
    assert cost.core_seconds(cost.varied(run, training={"steps": 2 * train_cfg.steps})) == pytest.approx(2 * seconds)
    # 20 seeds of 10x the steps: one batched group on the H200, at the logged batched groups' median rate
    many = cost.varied(run, range(20), {"steps": 10 * train_cfg.steps})
    rates, _ = cost.campaign_rates()
    gpu = 10 * train_cfg.steps / statistics.median(r["steps_per_s"] for r in rates.values() if r["batched"])
    assert cost.core_seconds(many) == pytest.approx(200 * seconds) and cost.h200_seconds(many) == pytest.approx(gpu)
    assert cost.cost_text(many) == (f"about {cost.duration(200 * seconds)} of a core, or {cost.duration(gpu)} of "
                                    "an H200")


@pytest.mark.parametrize(("seconds", "text"), [(20, "1 min"), (7.4 * 60, "7 min"), (37 * 60, "35 min"),
                                                (58 * 60, "1 hour"), (3.3 * 3600, "3.5 hours"),
                                                (24.6 * 3600, "25 hours"), (143 * 3600, "140 hours")])
def test_a_cost_reads_rounded(seconds, text):
    assert cost.duration(seconds) == text


def test_every_claim_quotes_its_paper_at_the_line_it_names():
    papers = next((d for d in (sources.ROOT / "shared" / "papers", sources.ROOT.parent / "shared" / "papers")
                   if d.is_dir()), None)
    if papers is None:
        pytest.skip("the papers' text files (shared/papers) are not in this checkout")
    for claim in claims.CLAIMS:
        line, words = claim.quote
        assert words, f"{claim.key} quotes no words of its paper"
        text = (papers / PAPER_FILES[claim.paper]).read_text().splitlines()
        assert words in text[line - 1], f"{claim.key}: {words!r} is not on line {line} of {PAPER_FILES[claim.paper]}"


def test_every_claim_has_a_verdict_an_n_and_an_interval(table):
    assert len(table) >= 60
    assert table.key.is_unique
    assert set(table.verdict) <= set(claims.verdicts.VERDICTS)
    assert (table.n.str.len() > 0).all() and (table.interval.str.len() > 0).all(), \
        table[(table.n == "") | (table.interval == "")].key.tolist()
    assert (table.reason.str.len() > 0).eq(table.verdict == "not reproduced").all()
    # a row over several seeds says how many and gives an interval or a test over them
    over_seeds = table[table.n.str.contains(r"\d+ seeds")]
    assert len(over_seeds) >= 15
    over = over_seeds.interval.str.contains("over seeds|p = |exact|no interval|not run|per-run|per seed")
    assert over.all(), over_seeds[~over].key.tolist()


def test_the_docs_are_the_table(table):
    assert claims.write_docs(table, check=True) == [], "run `glitchlens claims --write-docs`"


def test_every_result_the_table_reads_is_committed():
    """The docs are generated from the working tree and checked on a clean checkout: a run's
    `result.json` that landed but is not committed makes the two disagree (CI failed so once)."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (sources.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "runs"],
                            cwd=sources.ROOT, capture_output=True, text=True, check=True).stdout
    untracked = [line[3:] for line in status.splitlines() if line.startswith("??") and line.endswith("result.json")]
    assert untracked == [], f"commit them before `glitchlens claims --write-docs`: {untracked}"


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


def test_every_counted_sweep_has_a_resume_command():
    counts = sources.sweep_counts().set_index("sweep")
    assert counts.loc["table1-10000", "finished"] == len(sources.finished("table1-10000"))
    results = (sources.ROOT / "docs/results/claims.md").read_text()
    resumable = re.findall(r"^\| `glitchlens reproduce [^`]*--out runs/([\w-]+)` \| [^|\d]", results, re.M)
    assert sorted(resumable) == sorted(counts.index), "Sweeps still to finish: one command per counted sweep"


def test_the_sweep_counts_read_the_held_out_accuracies():
    counts = sources.sweep_counts().set_index("sweep")
    accuracies = [sources.result("tda-threshold-long", name)["held_out"]["sequence_accuracy"]
                  for name in sources.finished("tda-threshold-long")]
    row = counts.loc["tda-threshold-long"]
    assert (row.with_held_out, row.held_out_min, row.held_out_max) == (3, min(accuracies), max(accuracies))
    assert row.learned == sum(a >= 0.99 for a in accuracies)
    assert counts.loc["cope-tasks", "with_held_out"] == 0 and counts.loc["cope-tasks", "learned"] == 0


def test_the_result_tables_are_the_sweeps_own_reports():
    """The docs' tables of Table 1 and App. A are what `reproduce --report-only` wrote from the same runs."""
    report = (sources.RUNS / "table1-cpu" / "table1.md").read_text()
    assert result_tables.table1_markdown("table1-cpu").startswith(report)
    assert result_tables.study_markdown("app-a") == (sources.RUNS / "app-a" / "summary.md").read_text()


def test_the_budget_table_reads_each_run():
    label = sources.result("table1-budget", "label-steps10000-seed0")
    row = next(line for line in result_tables.budgets_markdown().splitlines() if line.startswith("| label |"))
    iid = label["splits"]["iid"]
    assert f"{100 * iid['sequence_accuracy']:.1f}% ({iid['read_errors']:,})" in row
    learned = label["held_out"]["sequence_accuracy"] >= 0.99
    assert (f"**{100 * label['held_out']['sequence_accuracy']:.1f}%**" in row) == learned


def test_a_seed_not_finished_reads_as_a_dash(monkeypatch):
    has_result = sources.has_result
    monkeypatch.setattr(sources, "has_result", lambda sweep, name: name != "tra-seed1" and has_result(sweep, name))
    row = next(line for line in result_tables.seeds_markdown("table1-10000").splitlines() if line.startswith("| tra |"))
    assert row.startswith("| tra | 2 of 2 | 100.0 / - / 100.0 |")


def test_the_retrieval_probes_pick_each_probes_best_head():
    from interp.metrics import bit_carrier_attention, bit_carrier_summary, capture_maps, last_write_attention
    from interp.metrics import last_write_summary
    from interp.tasks import load_split

    row = measure.retrieval_probes(n=8, batch=4, specimens=("rope-mech",)).iloc[0]
    tokens = load_split("iid", 8)
    _, maps = capture_maps(measure.load("rope-mech"), tokens, ["pattern"])
    probes = ((bit_carrier_summary, bit_carrier_attention, "bit_carrier_argmax_rate"),
              (last_write_summary, last_write_attention, "last_write_argmax_rate"))
    carrier, write = (summary(probe(maps["pattern"], tokens)).query(f"layer == 1 and metric == '{metric}'")
                      .set_index("head").value for summary, probe, metric in probes)
    assert (row.carrier_head, row.write_head) == (carrier.idxmax(), write.idxmax())
    assert (row.carrier_argmax_rate, row.write_argmax_rate) == pytest.approx((carrier.max(), write.max()))


def test_the_probes_table_reads_the_cached_measurement():
    frame = sources.csv("runs/claims/retrieval_probes.csv")
    lines = result_tables.probes_markdown().splitlines()
    for r in frame.itertuples():
        row = next(line for line in lines if line.startswith(f"| `{r.specimen}` |"))
        assert f"L{r.layers - 1}H{r.carrier_head}: {r.carrier_argmax_rate:.2f}" in row
    assert result_tables.rate(0.9998) == "1.00 (0.9998)" and result_tables.rate(0.0002) == "0.00 (0.0002)"
    assert result_tables.rate(1.0) == "1.00" and result_tables.rate(0.5) == "0.50"


def test_the_glitch_destinations_read_the_figures_csv():
    frame = sources.figure("12a_glitch_attention")
    wrong = frame[(frame.model == "rope-mech") & (frame.split == "dense") & (frame.reads == "wrong")]
    top = wrong.sort_values("share").iloc[-1]
    lines = result_tables.anatomy_markdown().splitlines()
    row = next(line for line in lines if line.startswith("| `rope-mech`, dense |"))
    assert row.startswith(f"| `rope-mech`, dense | {top.n} ({top.n_sequences}) | {top.destination} "
                          f"{100 * top.share:.1f}% ({100 * top.share_low:.1f}-{100 * top.share_high:.1f})")
    few = wrong.assign(n=1, share=[0, 0, 0, 0, 1.0])
    assert result_tables._destinations(few, True) == "spread (1 read)"


def test_the_logit_split_reads_the_figures_csv():
    frame = sources.figure("12b_glitch_logit_split")
    at = frame[(frame.model == "tra-mech") & (frame.reads == "wrong")].set_index("metric")
    row = next(line for line in result_tables.logit_split_markdown().splitlines()
               if line.startswith("| `tra-mech`, dense, wrong |"))
    assert f"| {at.loc['position_margin', 'mean']:+.2f} (" in row
    top = frame[(frame.model == "tra-mech") & (frame.reads == "wrong") & (frame.metric == "losing_term")]
    assert f"| {top.sort_values('share').losing_term.iloc[-1]} " in row


def test_the_sharpening_tables_read_each_run():
    run = sources.result("sharpening", "rope-mech-linf0.01-seed0")
    row = next(line for line in result_tables.sharpening_markdown("rope-mech").splitlines()
               if line.startswith("| L-inf 0.01, seed 0 |"))
    assert f"{run['splits']['dense']['read_errors']:,} of 345,709" in row
    automaton = sources.result("sharpening", "automaton-1l-none-seed1")["automaton"]["512"]
    row = next(line for line in result_tables.sharpening_markdown("automaton-1l").splitlines()
               if line.startswith("| unregularised, seed 1 |"))
    assert f"| {round((1 - automaton['position_accuracy']) * 512_000)} of 512,000 (" in row


def test_the_runs_table_lists_every_finished_run_with_its_steps():
    lines = result_tables.runs_markdown(("tda-threshold-long", "tda-threshold-4500")).splitlines()[2:]
    names = sources.finished("tda-threshold-long") + sources.finished("tda-threshold-4500")
    assert [line.split(" | ")[1] for line in lines] == names
    for line, name in zip(lines, names):
        sweep = "tda-threshold-4500" if "4500" in name else "tda-threshold-long"
        held = sources.result(sweep, name)["held_out"]["sequence_accuracy"]
        assert line.split(" | ")[2] == ("4,500" if "4500" in name else "3,000")
        assert line.endswith("| yes |") == (held >= 0.99)


def test_the_recipe_tables_read_the_committed_training_runs():
    from interp.outputs import read_json

    held = read_json(sources.RUNS / "notebook-mech" / "cope-seed0" / "result.json", "result")["held_out_T512"]
    row = next(line for line in result_tables.mech_recipes_markdown().splitlines()
               if line.startswith("| CoPE | `authors-notebook` |"))
    assert row.split(" | ")[2] == f"{100 * held['sequence_accuracy']:.1f} ({held['read_errors']:,})"
    glance = result_tables.recipes_glance_markdown().splitlines()
    assert glance[3].startswith("|  | `llama` | - |"), "TRA's `llama` runs at `mech` are not committed"
    files = sorted((sources.RUNS / "learning" / "cpu-learning" / "runs").glob("*/result.json"))
    learned = sum(read_json(f, "result")["held_out"]["sequence_accuracy"] >= 0.99 for f in files)
    assert f"\n{learned} of {len(files)} runs learned the task;" in result_tables.learning_markdown()


def test_the_hunts_table_reads_each_hunt():
    from interp.outputs import read_json

    hunt = read_json(sources.RUNS / "hunt" / "tda-mech-max512" / "hunt.json", "hunt")["methods"]["guided"]
    text = result_tables.hunts_markdown()
    row = next(line for line in text.splitlines() if line.startswith("|  | guided, `--max-len 512` |")
               and f"| {hunt['failing_sequences']} |" in line)
    assert f"| {100 * hunt['final']['sequence_error_rate']:.1f}% | {len(hunt['types'])} |" in row
    assert f"{sum(t['wrong_reads'] for t in hunt['types'].values()):,} wrong reads" in text


# Tables of the results pages written by hand, each for a reason: commands, an index, or runs that are not committed
HAND_TABLES = {"docs/results/claims.md": ["| sweep | tests |", "| file | reproduces |"],
               "docs/results/learning.md": ["| recipe | seed 0 | seed 1 | seed 2 |"],   # TRA's recipe history
               "docs/results/tools.md": []}


def test_the_results_pages_copy_no_table_of_results():
    """Every table of these pages is generated (between markers), or one of :data:`HAND_TABLES`."""
    for file, allowed in HAND_TABLES.items():
        text = re.sub(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", "", (sources.ROOT / file).read_text(), flags=re.S)
        headers = [line for line, before in zip(text.splitlines(), [""] + text.splitlines())
                   if line.startswith("|") and not before.startswith("|")]
        assert [h for h in headers if not any(h.startswith(a) for a in allowed)] == [], file


def test_percentages_keep_a_second_decimal_near_0_and_100():
    assert [result_tables.percent(a) for a in (0, 0.0003, 0.5, 0.9996, 1)] == ["0.0%", "0.03%", "50.0%", "99.96%",
                                                                             "100.0%"]


@pytest.mark.slow
@pytest.mark.parametrize("name", measure.FAST)
def test_the_cached_measurements_recompute(name):
    committed = pd.read_csv(sources.CACHE / f"{name}.csv")
    fresh = measure.MEASUREMENTS[name][0]()
    pd.testing.assert_frame_equal(fresh.reset_index(drop=True), committed, check_dtype=False, rtol=1e-5)

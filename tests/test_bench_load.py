"""``glitchlens bench threads``, ``bench demo`` and ``bench seeds`` (``interp.bench.load``,
``interp.bench.bench_seeds``) and ``bench eval``'s roofline (``interp.bench.parallel_matmul_rate``):
the rows and ratios they print, the busy process they start and stop, and the block of
docs/results/benchmarks.md read from their CSVs.
No time is asserted: the figures are ratios for a person to read."""

import os

import pytest
import torch

from interp.bench import load as bench_load
from interp.bench import parallel_matmul_rate


def test_threads_rows_time_every_workload_at_each_count_without_and_with_a_busy_process(monkeypatch):
    seen = []
    monkeypatch.setattr(bench_load, "thread_workloads",
                        lambda: {"a": lambda: seen.append(torch.get_num_threads()), "b": lambda: None})
    started = []
    busy = bench_load.busy_process

    def counted():
        started.append(1)
        return busy()

    monkeypatch.setattr(bench_load, "busy_process", counted)
    threads = torch.get_num_threads()
    rows = bench_load.bench_threads(repeats=2, counts=(1, 2))
    assert torch.get_num_threads() == threads, "the thread count is restored"
    assert [(r["workload"], r["competing"]) for r in rows] == [
        ("a", "none"), ("a", "1 busy process"), ("b", "none"), ("b", "1 busy process")]
    assert all(r["2/1"] == pytest.approx(r["2 threads s"] / r["1 threads s"]) for r in rows)
    assert seen[1:] == [1, 2] * 4, "one warm-up, then each count in each of 2 rounds x 2 loads"
    assert len(started) == 2, "one busy process a round"


def child_pids() -> set[int]:
    return {int(p) for p in open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()}


def test_the_busy_process_is_gone_after_the_block():
    """Only the child the block started is checked: children this process started before it live
    on (in a full run, multiprocessing's resource tracker, started by a spawned pool of a sweep)."""
    before = child_pids()
    with bench_load.busy_process():
        started = child_pids() - before
        assert started
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)   # signal 0: whether the process exists


def test_startup_rows_are_ratios_to_a_bare_python():
    rows = bench_load.bench_startup(repeats=1)
    assert [r["command"] for r in rows] == ["python -c pass", "glitchlens --help"]
    assert rows[0]["cpu_ratio"] == 1.0 and rows[1]["cpu_ratio"] == rows[1]["cpu_s"] / rows[0]["cpu_s"]


def test_the_docs_block_reads_the_csvs(tmp_path):
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.THREADS_CSV, [
        {"workload": "forward", "competing": "1 busy process", "1 threads s": 2.0, "2 threads s": 1.0, "2/1": 0.5}])
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.STARTUP_CSV, [
        {"command": "python -c pass", "cpu_s": 0.02, "wall_s": 0.03, "cpu_ratio": 1.0, "wall_ratio": 1.0},
        {"command": "glitchlens --help", "cpu_s": 0.05, "wall_s": 0.09, "cpu_ratio": 2.5, "wall_ratio": 3.0}])
    text = bench_load.load_markdown(tmp_path)
    assert "| forward | 1 busy process | 2.000 | 1.000 | 0.50 |" in text
    assert "costs 2.5x the CPU time" in text and "has not been measured" in text
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.DEMO_CSV, [
        {"competing": "none", "wall_s": 100.0, "ratio": 1.0}, {"competing": "1 busy process", "wall_s": 150.0,
                                                              "ratio": 1.5}])
    assert "took 100 s without and 150 s with a competing busy process: 1.50x" in bench_load.load_markdown(tmp_path)
    assert "has not recorded the demo's evaluation" in bench_load.demo_sentence(tmp_path)


def test_the_readme_reports_the_demo_run_without_the_busy_process(tmp_path):
    def run(competing, sparse_errors):
        return {"competing": competing, "wall_s": 100.0, "ratio": 1.0, **{
            f"{split}_{key}": value for split, errors, reads, accuracy in
            (("iid", 0, 7000, 1.0), ("sparse", sparse_errors, 1804, 0.852), ("dense", 5, 40000, 0.99))
            for key, value in (("sequences", 500), ("reads", reads), ("read_errors", errors), ("sequence_accuracy", accuracy))}}

    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.DEMO_CSV,
                          [run("none", 123), run("1 busy process", 999)])
    sentence = bench_load.demo_sentence(tmp_path)
    # 0 of 7,000: the upper end is 3.84 / (7000 + 3.84) = 0.055%; shares below 0.1% keep one significant figure
    assert sentence.startswith("the first 500 sequences of each split: `iid` 0 of 7,000 reads wrong (0.0%, 95% Wilson 0.0-0.05%)")
    # 5 of 40,000 = 0.0125%, whose interval is 0.0053-0.029%
    assert "`dense` 5 of 40,000 reads wrong (0.01%, 95% Wilson 0.005-0.03%), 99.0% of the sequences right" in sentence
    # 123 / 1804 = 6.8%; its 95% Wilson interval is 5.7-8.1%
    assert sentence.endswith("`sparse` 123 of 1,804 reads wrong (6.8%, 95% Wilson 5.7-8.1%), 85.2% of the sequences right")
    assert "999" not in sentence   # the run with the busy process is not the one reported


def test_the_training_block_reads_its_csv_and_names_the_largest_ratio(tmp_path):
    assert "has not been run" in bench_load.train_markdown(tmp_path)
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.TRAIN_CSV, [
        {"model": "rope", "step_s": 0.2, "ratio_to_rope": 1.0, "threads": 1},
        {"model": "tda", "step_s": 0.25, "ratio_to_rope": 1.25, "threads": 1},
        {"model": "lstm", "step_s": 0.4, "ratio_to_rope": 2.0, "threads": 1}])
    text = bench_load.train_markdown(tmp_path)
    assert "| rope | tda | lstm |" in text and "| 1.00 | 1.25 | 2.00 |" in text
    assert "1 thread: the largest ratio of an attention mechanism is 1.25 (tda)" in text   # the LSTM has none


def test_the_evaluation_block_reads_its_csv_and_names_the_lowest_share(tmp_path):
    assert "has not been run" in bench_load.eval_markdown(tmp_path)
    rows = [{"model": model, "n": 512, "threads": 2, "eval_s": seconds, "GFLOP/s": rate, "square_GFLOP/s": 150.0,
             "of_roofline": rate / 150.0, "computed_share": 0.5, "native_gain": 1.5}
            for model, seconds, rate in (("diff-mech", 0.6, 110.0), ("rope-mech", 0.5, 130.0))]
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.EVAL_CSV, rows)
    text = bench_load.eval_markdown(tmp_path)
    assert "| diff-mech | 1.17 | 110.0 | 150.0 | **0.73** | 0.50 | 1.50x |" in text
    assert "First 512 `sparse` sequences, 2 threads: the lowest share of the roofline is 0.73 (diff-mech)" in text
    assert "MLP shape" not in text
    rows = [{**row, "mlp_matmul_of_square": share} for row, share in zip(rows, (0.6, 0.7))]
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.EVAL_CSV, rows)
    assert "alone ran at 0.60-0.70 of the same squares" in bench_load.eval_markdown(tmp_path)
    rows = [{**row, "passes_gain": gain} for row, gain in zip(rows, (1.1, 1.25))]
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.EVAL_CSV, rows)
    text = bench_load.eval_markdown(tmp_path)
    assert "| native gain | norm and MLP passes' gain |" in text and "| 1.50x | 1.25x |" in text


def test_the_eval_roofline_runs_at_the_evaluations_threads():
    threads = torch.get_num_threads()
    assert parallel_matmul_rate(2, n=64, repeats=1) > 0
    assert parallel_matmul_rate(2, repeats=1, shape=(96, 16, 32)) > 0   # a model's own [tokens, d] x [d, d'] shape
    assert torch.get_num_threads() == threads


def test_a_step_time_leaves_the_first_steps_set_up_out(tmp_path):
    from interp.bench import step_seconds

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 1.0, "time": 5.0}\n{"step": 2, "loss": 0.9, "time": 6.0}\n'
                   '{"step": 3, "eval": {}}\n{"step": 4, "loss": 0.8, "time": 8.0}\n')
    assert step_seconds(log) == pytest.approx(1.0)


def test_the_batched_seeds_bench_times_both_and_divides():
    from interp.bench import bench_seeds

    torch.set_num_threads(1)
    (row,) = bench_seeds(models=("rope",), n_seeds=2, steps=3, repeats=1, seq_len=16, batch_size=2)
    assert (row["model"], row["seeds"], row["threads"]) == ("rope", 2, 1)
    assert row["batched_over_one"] == pytest.approx(row["batched_step_s"] / row["alone_step_s"])
    assert row["per_seed"] == pytest.approx(row["batched_over_one"] / 2)


@pytest.mark.parametrize("ratios, verdict", [((1.2, 1.4), "is met"), ((1.2, 2.9), "is not met")])
def test_the_batched_seeds_block_judges_every_model(tmp_path, ratios, verdict):
    (tmp_path / bench_load.BENCH_DIR).mkdir(parents=True)
    rows = [{"model": m, "seeds": 3, "device": "cpu", "threads": 1, "alone_step_s": 1.0, "batched_step_s": r,
             "batched_over_one": r, "per_seed": r / 3} for m, r in zip(("rope", "tra"), ratios)]
    bench_load.write_rows(str(tmp_path / bench_load.BENCH_DIR), bench_load.SEEDS_CSV, rows)
    block = bench_load.batched_seeds_markdown(tmp_path)
    assert f"{verdict} here (largest {max(ratios):.2f})" in block and "| **1.20** |" in block

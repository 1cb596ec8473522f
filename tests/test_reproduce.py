"""The Table 1 sweep: every run trained and evaluated once, resumable, tables written."""

import pandas as pd
import pytest

from interp.studies.reproduce import PAPER_TABLE1, Scale, reproduce_table1

pytestmark = pytest.mark.integration  # the sweep trains in spawned worker processes

TINY = Scale(preset="tiny", steps=2, lr=1e-3, batch_size=2, recipe="llama", eval_n=3)


def test_sweep_writes_tables_and_resumes(tmp_path):
    table = reproduce_table1(tmp_path, TINY, seeds=2, jobs=2, models=("fot", "lstm"))
    assert len(table) == 6 and set(table.split) == {"iid", "dense", "sparse"}
    assert (table.seeds == 2).all()
    fot_sparse = table[(table.model == "fot") & (table.split == "sparse")].iloc[0]
    assert fot_sparse.paper_accuracy_mean == PAPER_TABLE1["fot"]["sparse"][0]
    assert pd.isna(table[table.model == "lstm"].paper_accuracy_mean).all()
    assert pd.read_csv(tmp_path / "table1.csv").shape == table.shape
    markdown = (tmp_path / "table1.md").read_text()
    assert "| split | fot | lstm |" in markdown and "(93.4 ± 4.21)" in markdown

    results = sorted((tmp_path / "runs").glob("*/result.json"))
    assert len(results) == 4
    stamps = [f.stat().st_mtime_ns for f in results]
    reproduce_table1(tmp_path, TINY, seeds=2, jobs=1, models=("fot", "lstm"))
    assert [f.stat().st_mtime_ns for f in results] == stamps, "finished runs are not trained again"

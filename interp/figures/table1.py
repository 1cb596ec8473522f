"""The TRA paper's Table 1 as a figure, from a ``glitchlens reproduce table1`` CSV."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from interp import plots
from interp.figures.common import PaperFigure, caption, one, paper_figure, register

TABLE1_COLUMNS = ("model", "split", "seeds", "accuracy_mean", "accuracy_std", "paper_accuracy_mean",
                  "paper_accuracy_std")


@caption("11_table1_accuracy")
def caption_table1(table: pd.DataFrame) -> str:
    fewest, most = table.seeds.min(), table.seeds.max()
    seeds = f"{fewest}" if fewest == most else f"{fewest}-{most}"
    return (f"TRA paper Table 1: full-sequence accuracy (%, every read of a sequence right) per model on the iid, "
            f"dense and sparse splits, ours (blue, mean +- std over {seeds} seed{'s' if most > 1 else ''}, from "
            f"{one(table, 'source')}) beside the paper's (grey, mean +- std over 4 seeds; none for the models it does "
            "not report).")


@register("table1", {"11_table1_accuracy": "Full-sequence accuracy per model beside the paper's (TRA paper Table 1)"})
def figure_table1(csv: str | Path) -> list[PaperFigure]:
    """TRA paper Table 1 as grouped bars, from the ``table1.csv`` of ``glitchlens reproduce table1``."""
    table = pd.read_csv(csv)
    missing = [c for c in TABLE1_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{csv} lacks the columns {missing} of a `glitchlens reproduce table1` table")
    table = table.assign(source=Path(csv).name)
    return [paper_figure("11_table1_accuracy", table, lambda b: plots.table1_chart(table, backend=b))]

"""results/README.md documents every column the analysis's tables return: the verdict table
(fixed design and ``--seeds auto``), the compute spent and the comparison of two experiments,
each called on a small synthetic trials table. No Ray."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.results.io.schema import (
    ACROSS_COLUMNS,
    COMPARE_COLUMNS,
    SEQUENTIAL_COLUMNS,
    SPENT_COLUMNS,
    VERDICT_COLUMNS,
    column_names,
)
from ablations.results.stats.analysis import verdict_table
from ablations.results.stats.compare import compare_experiments
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import compute_spent, sequential_verdict_table

README = Path(__file__).resolve().parents[1] / "results" / "README.md"
METRIC = "test_mae"


def _trials(metric: str = METRIC) -> pd.DataFrame:
    """A reference and three variants over 6 seeds (3 in round 1, 3 in round 2): one far
    worse, one the same, one with a diverged seed."""
    rng = np.random.default_rng(0)
    rows = []
    for ablation, effect in [("baseline", 0.0), ("no_x", 0.3), ("no_y", 0.0), ("no_z", 0.01)]:
        for seed in range(6):
            diverged = ablation == "no_z" and seed == 4
            rows.append({"ablation": ablation, "seed": seed,
                         "status": "diverged" if diverged else "ok",
                         metric: 1.0 + effect + 0.02 * rng.standard_normal(),
                         "cpu_hours": 0.1, "gpu_hours": 0.0, "round": 1 if seed < 3 else 2})
    return pd.DataFrame(rows)


def _documented() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", README.read_text(), flags=re.MULTILINE))


def _undocumented(table: pd.DataFrame, metric: str = METRIC) -> list[str]:
    names = [re.sub(rf"^{metric}_", "<metric>_", str(c)) for c in table.columns]
    return [name for name in names if name not in _documented()]


def _sequential() -> pd.DataFrame:
    """The verdict table of a --seeds auto experiment: looks at 3, 5 and 6 seeds."""
    return sequential_verdict_table(_trials(), SeedDesign.plan(3, 6), list(range(6)))


def test_every_listed_column_is_in_the_readme():
    for columns in (VERDICT_COLUMNS, SEQUENTIAL_COLUMNS, SPENT_COLUMNS, COMPARE_COLUMNS,
                    ACROSS_COLUMNS):
        assert set(column_names(columns)) <= _documented()


@pytest.mark.parametrize("metric", ["test_mae", "val_rmse"])
def test_verdict_table_columns_are_documented(metric):
    table = verdict_table(_trials(metric), metric=metric)
    assert _undocumented(table, metric) == []
    # and listed in its order, the metric's columns as <metric>_...
    names = [re.sub(rf"^{metric}_", "<metric>_", c) for c in table.columns]
    assert names == column_names(VERDICT_COLUMNS)


def test_sequential_verdict_table_columns_are_documented():
    table = _sequential()
    assert table.attrs.get("sequential") is True
    assert _undocumented(table) == []
    names = [re.sub(rf"^{METRIC}_", "<metric>_", c) for c in table.columns]
    extra = [c for c in names if c not in column_names(VERDICT_COLUMNS)]
    assert extra == column_names(SEQUENTIAL_COLUMNS)


def test_compute_spent_columns_are_documented():
    table = compute_spent(_trials(), max_seeds=6)
    assert list(table.columns) == column_names(SPENT_COLUMNS)
    assert _undocumented(table) == []


def test_compare_columns_are_documented():
    a = _trials()
    b = a.assign(test_mae=a["test_mae"] * 1.01)
    table = compare_experiments(a, b)
    assert _undocumented(table) == []
    assert set(column_names(COMPARE_COLUMNS)) <= set(table.columns)


def test_across_datasets_columns_are_documented():
    from ablations.results.stats.decisions import across_datasets_of

    trials = pd.concat([_trials().assign(dataset=name, test_mae=lambda t, k=k: t["test_mae"] * k)
                        for k, name in enumerate(["a", "b", "c"], start=1)], ignore_index=True)
    table = across_datasets_of(trials, {})
    assert list(table.columns) == column_names(ACROSS_COLUMNS)
    assert _undocumented(table) == []

"""The per-seed table the analyses read is pivot_table's, cell for cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablations.results.stats.failures import outcome_tables
from ablations.results.stats.seed_tables import seed_table


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("aggfunc", ["mean", "max", "min"])
def test_the_seed_table_is_pivot_tables_with_repeated_and_missing_cells(aggfunc, dtype):
    rng = np.random.default_rng(7)
    # 120 rows over 30 cells: most cells repeated; 9 and 12: a grid, each cell at most once
    for rows in (0, 1, 5, 40, 120, 8, 30, 9, 12):
        values = rng.standard_normal(rows).astype(dtype)
        if rows in (8, 30, 12):  # NaN values: a seed or a variant with none is left out
            values[rng.random(rows) < 0.5] = np.nan
        if rows in (9, 12):
            cells = rng.permutation(30)[:rows]
            seeds, names = cells // 3, np.array(["b", "a", "c"], dtype=object)[cells % 3]
        else:
            seeds, names = rng.integers(0, 10, rows), rng.choice(["b", "a", "c"], rows)
        frame = pd.DataFrame({"seed": seeds, "ablation": names.astype(object), "m": values})
        expected = frame.pivot_table(index="seed", columns="ablation", values="m",
                                     aggfunc=aggfunc)
        pd.testing.assert_frame_equal(seed_table(frame, "m", aggfunc), expected,
                                      check_exact=True)


def test_a_column_of_no_values_and_keys_of_other_dtypes_give_pivot_tables_table():
    frames = [
        pd.DataFrame({"seed": [0, 1], "ablation": ["a", "b"], "m": [np.nan, np.nan]}),
        pd.DataFrame({"seed": [0, 1, 1], "ablation": ["a", "b", "a"], "m": [1.0, 2.0, 3.0]}),
        pd.DataFrame({"seed": np.array([3, 1], "uint8"), "ablation": ["a", "a"], "m": [1.0, 2]}),
        pd.DataFrame({"seed": [0, 1], "ablation": pd.Series(["a", "b"], dtype="string"),
                      "m": [1.0, 2.0]}),
        pd.DataFrame({"seed": [0, 1], "ablation": ["a", "b"],
                      "m": pd.Series([1.0, None], dtype="Float64")}),
        # object keys that are not all strings: the group-by infers their type
        pd.DataFrame({"seed": pd.Series([2, 1], dtype=object), "ablation": ["a", "b"],
                      "m": [1.0, 2.0]}),
        pd.DataFrame({"seed": pd.Series([True, 1, 0, False], dtype=object),
                      "ablation": ["a", "a", "b", "b"], "m": [1.0, 2.0, 3.0, 4.0]}),
    ]
    for frame in frames:
        expected = frame.pivot_table(index="seed", columns="ablation", values="m",
                                     aggfunc="mean")
        pd.testing.assert_frame_equal(seed_table(frame, "m"), expected, check_exact=True)


def pivot_outcomes(trials: pd.DataFrame, metric: str, seeds=None):
    """outcome_tables by pivot_table: the finished values' mean and any diverged trial per
    seed and variant, over the seeds where either is; a diverged cell has no value."""
    rows = trials if seeds is None else trials[trials["seed"].isin(seeds)]
    ok = rows[(rows["status"] == "ok") & np.isfinite(rows[metric].to_numpy(dtype=float))]
    diverged = rows[rows["status"] == "diverged"].assign(failed=1.0)
    finished = ok.pivot_table(index="seed", columns="ablation", values=metric, aggfunc="mean")
    failed = diverged.pivot_table(index="seed", columns="ablation", values="failed",
                                  aggfunc="max")
    index, columns = finished.index.union(failed.index), finished.columns.union(failed.columns)
    failed = failed.reindex(index=index, columns=columns).fillna(0.0) > 0
    return finished.reindex(index=index, columns=columns).where(~failed), failed


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_outcome_tables_are_pivot_tables_of_the_finished_and_the_diverged(dtype):
    rng = np.random.default_rng(11)
    statuses = ["ok", "ok", "ok", "diverged", "failed", "timeout"]
    placed = 0
    for case in range(120):
        seeds, arms = rng.integers(1, 7), rng.integers(1, 4)
        grid = [(s, a) for s in range(seeds) for a in "bac"[:arms]]
        rows = [grid[i] for i in rng.permutation(len(grid))[:rng.integers(0, len(grid) + 1)]]
        if case % 3 == 0 and rows:  # a resumed run: a cell twice, finished or diverged
            rows += [rows[i] for i in rng.integers(0, len(rows), rng.integers(1, 3))]
        values = rng.standard_normal(len(rows))
        values[rng.random(len(rows)) < 0.1] = np.nan
        values[rng.random(len(rows)) < 0.05] = np.inf
        trials = pd.DataFrame({
            "seed": np.array([s for s, _ in rows], dtype=int),
            "ablation": np.array([a for _, a in rows], dtype=object),
            "status": rng.choice(statuses, len(rows)).astype(object),
            "m": values.astype(dtype)})
        among = None if case % 4 else set(range(0, 7, 2))
        finished, failed = outcome_tables(trials, "m", among)
        expected_finished, expected_failed = pivot_outcomes(trials, "m", among)
        # every column in the metric's type, one with no finished value too (pivot_table's
        # reindex makes that one float64)
        pd.testing.assert_frame_equal(finished, expected_finished, check_exact=True,
                                      check_dtype=False)
        assert (finished.dtypes == dtype).all(), finished.dtypes
        pd.testing.assert_frame_equal(failed, expected_failed, check_exact=True)
        placed += finished.size > 0
    assert placed > 60  # most cases had outcomes to place


def test_a_cell_run_twice_is_averaged_and_a_variant_with_no_value_keeps_the_metrics_type():
    trials = pd.DataFrame({"seed": [0, 0, 1, 0], "ablation": ["a", "a", "a", "b"],
                           "status": ["ok", "ok", "ok", "diverged"],
                           "m": np.array([1.0, 2.0, 3.0, 5.0], dtype="float32")})
    finished, failed = outcome_tables(trials, "m")
    assert finished.loc[0, "a"] == 1.5 and finished.loc[1, "a"] == 3.0
    assert np.isnan(finished["b"]).all() and failed.loc[0, "b"] and not failed["a"].any()
    assert (finished.dtypes == "float32").all(), finished.dtypes


def test_a_grid_of_trials_is_placed_without_a_group_by(monkeypatch):
    """Each seed of each variant once: NumPy places the values (the simulations' case)."""
    trials = pd.DataFrame({"seed": [0, 0, 1, 1, 2, 2], "ablation": list("ababab"),
                           "status": ["ok", "ok", "diverged", "ok", "ok", "failed"],
                           "m": [1.0, 2.0, 3.0, 4.0, np.nan, 6.0]})
    table = trials.pivot_table(index="seed", columns="ablation", values="m", aggfunc="mean")
    outcomes = pivot_outcomes(trials, "m")

    def refuse(*args, **kwargs):
        raise AssertionError("a group-by")

    monkeypatch.setattr(pd.DataFrame, "groupby", refuse)
    pd.testing.assert_frame_equal(seed_table(trials, "m"), table, check_exact=True)
    for got, expected in zip(outcome_tables(trials, "m"), outcomes):
        pd.testing.assert_frame_equal(got, expected, check_exact=True)

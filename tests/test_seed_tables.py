"""The per-seed table the analyses read is pivot_table's, cell for cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
    ]
    for frame in frames:
        expected = frame.pivot_table(index="seed", columns="ablation", values="m",
                                     aggfunc="mean")
        pd.testing.assert_frame_equal(seed_table(frame, "m"), expected, check_exact=True)

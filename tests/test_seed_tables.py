"""The per-seed table the analyses read is pivot_table's, cell for cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablations.results.stats.seed_tables import seed_table


@pytest.mark.parametrize("aggfunc", ["mean", "max"])
def test_the_seed_table_is_pivot_tables_with_repeated_and_missing_cells(aggfunc):
    rng = np.random.default_rng(7)
    for rows in (0, 1, 5, 40, 120, 8, 30):  # 120 rows over 30 cells: most cells repeated
        values = rng.standard_normal(rows)
        if rows in (8, 30):  # NaN values: a seed or a variant with none is left out
            values[rng.random(rows) < 0.5] = np.nan
        frame = pd.DataFrame({"seed": rng.integers(0, 10, rows),
                              "ablation": rng.choice(["b", "a", "c"], rows).astype(object),
                              "m": values})
        expected = frame.pivot_table(index="seed", columns="ablation", values="m",
                                     aggfunc=aggfunc)
        pd.testing.assert_frame_equal(seed_table(frame, "m", aggfunc), expected,
                                      check_exact=True)

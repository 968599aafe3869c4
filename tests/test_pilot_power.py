"""The pilot look's power at the main job's own spreads (tools/pilot_power.py, the table of
docs/verdicts.md "The pilot's power"), simulated on the runner's decision functions: the pilot
decides the large effects less often than the fixed design at full α, --seeds auto decides
them all, and a larger share of α at the pilot buys pilot power with the moderate effect's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tools.pilot_power import MAIN_JOB, measured, power_table


def _rows(table: str) -> dict[str, list[float]]:
    rows = {}
    for line in table.splitlines()[2:]:
        label, *cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[label] = [float(cell) for cell in cells]
    return rows


def test_the_measured_arms_are_the_main_jobs():
    _, _, arms = measured(pd.read_parquet(MAIN_JOB))
    large = sorted(arm for arm, (ratio, _) in arms.items() if ratio > 1.2)
    assert large == ["no_images", "no_scalars", "single_frame"]


@pytest.mark.slow  # a simulation of many experiments
def test_the_pilot_trades_power_at_3_seeds_for_a_design_that_continues():
    rows = _rows(power_table(800))
    fixed = rows["fixed, 3 seeds, full α"]
    pilot = rows["pilot share 50% (default): the pilot look"]
    auto = rows["pilot share 50% (default): --seeds auto to 10"]
    # columns: the three large effects, the moderate one, all large ones, trials
    assert all(p <= f + 0.03 for p, f in zip(pilot[:3], fixed[:3]))
    assert pilot[4] < fixed[4] - 0.1  # all three at the pilot: clearly less often
    assert all(a == 1.0 for a in auto[:3]) and auto[4] == 1.0
    more = rows["pilot share 90%: the pilot look"]
    later = rows["pilot share 90%: --seeds auto to 10"]
    assert more[4] > pilot[4] + 0.1  # more α at the pilot: the pilot decides more
    assert later[3] < auto[3] - 0.1  # and the moderate effect is found less often
    assert np.isclose(pilot[5], 27) and 27 < auto[5] <= 90

"""An `inconclusive` row says what would decide it (results/stats/undecided.py): the p-value
against the level its test had to beat, and the margin the data support against the margin
fixed before them; the console's summary prints it under the table, with each arm's diverged
runs and failure-rate bound beside its verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from ablations.experiment.summary import summary_table
from ablations.results.stats.decisions import verdicts_of
from ablations.results.stats.undecided import undecided_lines
from ablations.results.stats.verdicts import verdict_table

MAIN_JOB = Path(__file__).with_name("fixtures") / "main_job"


@pytest.fixture(scope="module")
def main_job():
    trials = pd.read_parquet(MAIN_JOB / "trials.parquet")
    meta = json.loads((MAIN_JOB / "experiment.json").read_text())
    return trials, meta


def _parsed(line: str) -> tuple[str, float, float, float]:
    found = re.fullmatch(r"(\w+): inconclusive: a difference needs p below ([\d.e-]+) \S+ \S+ "
                         r"\S+ \(it has ([\d.e-]+)\); equivalence needs a margin of "
                         r"±([\d.]+)% \(the margin is ±5\.0%\)", line)
    assert found, line
    arm, level, p, bound = found.groups()
    return arm, float(level), float(p), float(bound) / 100


def test_each_inconclusive_pilot_row_names_its_p_its_looks_level_and_the_margin_it_needs(
        main_job):
    trials, meta = main_job
    verdicts = verdicts_of(trials, meta, reference="baseline", metric="test_mae",
                           margin="5%", alpha=0.05)
    lines = undecided_lines(verdicts)
    rows = verdicts.set_index("ablation")
    assert sorted(_parsed(line)[0] for line in lines) == sorted(
        rows.index[rows["verdict"] == "inconclusive"])
    for line in lines:
        arm, level, p, bound = _parsed(line)
        assert level == pytest.approx(rows.loc[arm, "level_diff"], rel=2e-3)
        assert p == pytest.approx(rows.loc[arm, "p_value"], rel=2e-3)
        assert p >= level  # why it is undecided
        assert bound == pytest.approx(rows.loc[arm, "equivalence_bound_holm"], abs=1e-3)
        assert bound > 0.05


def test_a_fixed_tables_rows_name_holms_p_against_alpha(main_job):
    trials, _ = main_job
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin="5%")
    rows = table.set_index("ablation")
    for line in undecided_lines(table):
        arm = line.split(":")[0]
        assert rows.loc[arm, "verdict"] == "inconclusive"
        assert f"needs p below 0.05 after Holm (it has {rows.loc[arm, 'p_holm']:.3g})" in line
    decided = rows.index[rows["verdict"] != "inconclusive"]
    assert not any(line.split(":")[0] in decided for line in undecided_lines(table))


def test_the_console_summary_prints_them_with_each_arms_failure_bound(main_job):
    trials, meta = main_job
    text = summary_table(trials, meta)
    verdicts = verdicts_of(trials, meta, reference="baseline", metric="test_mae",
                           margin="5%", alpha=0.05)
    for line in undecided_lines(verdicts):
        assert f"\n{line}\n" in text
    header, *body = text.split("\n\n")[0].splitlines()
    assert "diverged" in header.split()
    assert all("0/3 (≤63%)" in row for row in body)  # no run diverged: 0 of 3, rate ≤ 63%

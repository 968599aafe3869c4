"""An `inconclusive` row says what would decide it (results/stats/undecided.py): the p-value
against the level its test had to beat, and the margin the data support against the margin
fixed before them; the report's appendix prints it (the console's summary points there), and
the console's table each arm's diverged runs and failure-rate bound beside its verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.results.report.summary import summary_table
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


def test_at_two_seeds_an_unbounded_equivalence_interval_is_said_so(main_job):
    """Two ok seeds on each side have a test, but at the level a pilot look may spend their
    equivalence interval is unbounded: the line says that, not that seeds are missing."""
    trials, meta = main_job
    verdicts = verdicts_of(trials[trials["seed"].isin([0, 1])], meta, reference="baseline",
                           metric="test_mae", margin="5%", alpha=0.05)
    lines = undecided_lines(verdicts)
    assert lines and all(line.endswith("no equivalence claim at these seeds (at the level this "
                                       "test may spend, its interval is unbounded: more seeds "
                                       "bound it)") for line in lines), lines


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


def test_the_console_summary_leaves_them_to_the_report_and_shows_each_arms_failure_bound(
        main_job):
    """Under the console's table: one line on the verdicts and where the rest is (the report's
    appendix has the lines), and the design's line; no line per undecided arm."""
    trials, meta = main_job
    text = summary_table(trials, meta)
    verdicts = verdicts_of(trials, meta, reference="baseline", metric="test_mae",
                           margin="5%", alpha=0.05)
    table, under = text.split("\n\n", 1)
    assert undecided_lines(verdicts) and not any(line in text for line in undecided_lines(verdicts))
    assert under.startswith("Verdicts on test_mae") and "the report's appendix" in under
    assert len(under.splitlines()) == 2, under  # the verdicts' line, the pilot's
    header, *body = table.splitlines()
    assert "diverged" in header.split()
    assert all("0/3 (≤63%)" in row for row in body)  # no run diverged: 0 of 3, rate ≤ 63%


def _undecided(table: pd.DataFrame) -> dict[str, str]:
    return {line.split(":")[0]: line for line in undecided_lines(table)}


@pytest.fixture(scope="module")
def unstable_trials():
    """Ten seeds: `flaky` 10% better on its finished seeds and diverged on 3 of them;
    `flaky_same` equal to the reference on its finished seeds, diverged on the same 3; `odd`
    equal but for one seed 50% off (an outlier)."""
    from test_failures import EQUAL_ARMS, trials_table
    trials = trials_table(10, {**EQUAL_ARMS, "flaky": (0.9, {2, 5, 8}),
                               "flaky_same": (1.0, {2, 5, 8}), "odd": (1.0, set())})
    odd = (trials["ablation"] == "odd") & (trials["seed"] == 3)
    trials.loc[odd, "test_mae"] *= 1.5
    return trials


def _tables(trials: pd.DataFrame) -> dict[str, pd.DataFrame]:
    from ablations.results.stats.sequential import SeedDesign
    from ablations.results.stats.sequential_table import sequential_verdict_table
    design = SeedDesign.plan(3, 10)
    return {"fixed": verdict_table(trials),
            **{f"auto at {n}": sequential_verdict_table(trials[trials["seed"] < n], design,
                                                        list(range(10))) for n in (5, 10)}}


def test_an_arm_better_on_its_finished_seeds_but_less_stable_is_said_never_better(
        unstable_trials):
    """Its p says nothing about `better` (the diverged seeds are its worst outcomes): the line
    must not set its p against a level it could beat."""
    for name, table in _tables(unstable_trials).items():
        assert table.set_index("ablation").loc["flaky", "verdict"] == "inconclusive", name
        line = _undecided(table)["flaky"]
        assert "never called better" in line, (name, line)
        assert "needs p below" not in line and "below its share" not in line, (name, line)
        assert line.endswith("no equivalence claim (more diverged seeds than the reference)")


def test_a_discordant_seed_names_both_parts_of_the_test_not_one_p_against_the_whole_level(
        unstable_trials):
    table = _tables(unstable_trials)["auto at 10"].set_index("ablation")
    assert table.loc["flaky_same", "test"] == "t + worst-rank"
    line = _undecided(table.reset_index())["flaky_same"]
    p_t, p_rank = table.loc["flaky_same", ["p_value", "p_worst_rank"]]
    assert (f"below its share of the level {table.loc['flaky_same', 'level_diff']:.3g} at its "
            f"look (t test p {p_t:.3g}, worst-rank p {p_rank:.3g})") in line, line
    assert "needs p below" not in line


def test_an_outlying_seed_bars_the_margin_in_the_line_and_the_column_in_every_design(
        unstable_trials):
    for name, table in _tables(unstable_trials).items():
        row = table.set_index("ablation").loc["odd"]
        assert bool(row["outlier"]) and row["verdict"] == "inconclusive", name
        assert not np.isfinite(row["equivalence_bound_holm"]), name  # no margin supported
        line = _undecided(table)["odd"]
        assert line.endswith("no equivalence claim (an outlying seed)"), (name, line)
        assert "margin of" not in line


def test_the_paper_caption_keeps_barred_rows_out_of_the_margins_it_quotes(unstable_trials):
    from ablations.results.report.paper import undecided_caption
    table = verdict_table(unstable_trials)
    rows = table.set_index("ablation")
    caption = undecided_caption(rows, table.attrs)
    undecided = rows[rows["verdict"] == "inconclusive"]
    assert set(undecided.index) == {"flaky", "flaky_same", "odd"}
    assert "margin of" not in caption  # none of the three supports any margin
    assert caption == (" The ? rows would be equivalent at no margin for 3 (an outlying "
                       "seed, or more diverged seeds than the reference).")


def test_the_paper_caption_names_the_test_each_row_got_in_a_few_lines(main_job):
    from ablations.results.report.paper import paper_table
    trials, _ = main_job
    table = verdict_table(trials, metric="test_mae", margin="5%")  # the default test

    def caption(latex: str) -> str:
        return re.search(r"\\caption\{(.*)\}\n\\label", latex, flags=re.S).group(1)

    shown = caption(paper_table(table, trials, "latex"))
    assert "shared-variance t test and TOST" in shown and "paired t-test" not in shown
    assert "by another" not in shown
    assert len(shown) < 600, shown  # ten lines of a paper's column
    # a failed seed: that arm keeps its own paired test, and the caption counts it
    failed = trials.copy()
    failed.loc[(failed["ablation"] == "no_attention") & (failed["seed"] == 0), "status"] = "failed"
    one = caption(paper_table(verdict_table(failed, metric="test_mae", margin="5%"), failed,
                              "latex"))
    assert "shared-variance t test (1 row by another: the report's Test column)" in one


def test_the_methods_sentence_names_each_diverged_arm_and_its_dataset(unstable_trials):
    from ablations.results.report.methods import failure_sentence
    table = verdict_table(unstable_trials)
    one = failure_sentence(table, 0.05, lambda *keys: "")
    assert one.startswith("Runs diverged: flaky 3 of 10 (rate at most 61%), flaky_same 3 of "
                          "10 (rate at most 61%); each rate is a one-sided 95% upper")
    # over two datasets, the same arm's rows are told apart by their dataset
    mild = unstable_trials.copy()
    mild.loc[(mild["ablation"] == "flaky") & (mild["seed"] == 2), ["status", "test_mae"]] = \
        ["ok", 0.5]
    both = pd.concat([verdict_table(unstable_trials).assign(dataset="digits"),
                      verdict_table(mild).assign(dataset="wine")], ignore_index=True)
    both.attrs = table.attrs
    text = failure_sentence(both, 0.05, lambda *keys: "")
    assert "flaky on digits 3 of 10" in text and "flaky on wine 2 of 10" in text, text

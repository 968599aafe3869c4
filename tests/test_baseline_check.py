"""The baseline check (results/stats/baseline_check.py) and the explosion rule, on small tables:
the reference's skill against the training mean, its last epoch's fall, the one line printed
above the verdicts and the record in the experiment folder."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from ablations.experiment.execution.tables import trial_status
from ablations.trial.metrics import mean_predictor_metrics
from ablations.results.stats import baseline_check as bc
from ablations.trial.divergence import EXPLOSION_FACTOR, explosion_error
from ablations.results.stats.baseline_check import (
    SKILL_FLOOR,
    STILL_FALLING_SHARE,
    baseline_check,
    record_baseline_check,
)


def _trials(test_mae: dict[str, list[float]], trivial: float = 1.0,
            status: dict[str, list[str]] | None = None) -> pd.DataFrame:
    rows = []
    for ablation, values in test_mae.items():
        for seed, value in enumerate(values):
            rows.append({"ablation": ablation, "seed": seed,
                         "trial_name": f"{ablation}-seed{seed}",
                         "status": (status or {}).get(ablation, ["ok"] * len(values))[seed],
                         "test_mae": value, "test_mae_mean_predictor": trivial})
    return pd.DataFrame(rows)


def _epochs(curves: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"trial_name": name, "epoch": epoch, "val_mae": value}
                         for name, values in curves.items()
                         for epoch, value in enumerate(values, start=1)])


def test_skill_is_one_minus_the_mae_over_the_mean_predictors_over_ok_seeds():
    trials = _trials({"baseline": [0.4, 0.6, 9.0], "no_x": [1.0, 1.0, 1.0]}, trivial=2.0,
                     status={"baseline": ["ok", "ok", "diverged"]})
    check = baseline_check(trials, reference="baseline")
    assert check.seeds == 2 and check.test_mae == pytest.approx(0.5)
    assert check.skill == pytest.approx(1 - 0.5 / 2.0)
    assert check.learned and check.passed
    assert "skill 0.75" in check.line() and check.line().endswith("passed.")


def test_a_reference_no_better_than_the_training_mean_fails_with_one_line():
    trials = _trials({"baseline": [1.43, 1.45], "no_x": [1.0, 1.1]}, trivial=1.40)
    check = baseline_check(trials, reference="baseline")
    assert check.skill == pytest.approx(1 - 1.44 / 1.40)
    assert not check.learned and not check.passed
    line = check.line()
    assert "\n" not in line and line.startswith("Baseline check failed for baseline")
    assert "not clearly better than predicting the training mean" in line
    assert "learned little" in line


def test_the_skill_floor_is_the_boundary():
    just_above = _trials({"baseline": [1 - SKILL_FLOOR - 1e-9], "v": [1.0]}, trivial=1.0)
    just_below = _trials({"baseline": [1 - SKILL_FLOOR + 1e-6], "v": [1.0]}, trivial=1.0)
    assert baseline_check(just_above).learned
    assert not baseline_check(just_below).learned


def test_a_validation_mae_still_falling_at_the_last_epoch_fails_the_convergence_check():
    trials = _trials({"baseline": [0.5, 0.5, 0.5], "v": [0.6, 0.6, 0.6]}, trivial=1.0)
    # falls in the last epoch: 10%, 8%, 1% -> median 8%
    falling = _epochs({"baseline-seed0": [2.0, 1.0, 0.9], "baseline-seed1": [2.0, 1.0, 0.92],
                       "baseline-seed2": [2.0, 1.0, 0.99],
                       "v-seed0": [2.0, 1.0, 0.1]})  # the variant's curve is not the check's
    check = baseline_check(trials, falling, reference="baseline")
    assert check.epochs == 3 and check.last_epoch_fall == pytest.approx(0.08)
    assert check.learned and not check.converged and not check.passed
    assert "fell 8.0% in epoch 3" in check.line() and "had not converged" in check.line()
    flat = _epochs({f"baseline-seed{s}": [2.0, 1.0, 1.0 - STILL_FALLING_SHARE / 2]
                    for s in range(3)})
    assert baseline_check(trials, flat, reference="baseline").converged


def test_one_epoch_or_no_mean_predictor_column_skips_that_part_of_the_check():
    trials = _trials({"baseline": [0.5], "v": [0.6]}).drop(columns="test_mae_mean_predictor")
    check = baseline_check(trials, _epochs({"baseline-seed0": [0.7]}), reference="baseline")
    assert math.isnan(check.skill) and math.isnan(check.last_epoch_fall)
    assert check.passed and "no skill" in check.line() and "one epoch" in check.line()


def test_no_ok_reference_means_no_check():
    trials = _trials({"baseline": [0.5], "v": [0.6]}, status={"baseline": ["failed"]})
    assert baseline_check(trials, reference="baseline") is None
    assert baseline_check(trials, reference="absent") is None


def test_the_record_is_written_to_the_experiment_folder(tmp_path):
    trials = _trials({"baseline": [1.5, 1.5], "v": [1.0, 1.0]}, trivial=1.4)
    check = record_baseline_check(tmp_path, trials, None, reference="baseline")
    record = json.loads((tmp_path / bc.BASELINE_CHECK_FILE).read_text())
    assert record["passed"] is False and record["learned"] is False
    assert record["skill"] == pytest.approx(check.skill)
    assert record["last_epoch_fall"] is None  # NaN as null
    assert record["line"] == check.line() and record["skill_floor"] == SKILL_FLOOR
    # one variant: no verdicts, so no check and no file
    single = tmp_path / "single"
    assert record_baseline_check(single, _trials({"baseline": [1.0]}), None,
                                 reference="baseline") is None
    assert not single.exists()


def test_mean_predictor_metrics_against_hand_computed_values():
    target = np.array([1.0, 3.0, 2.0, 10.0, 0.0, 4.0])
    train, val, test = np.array([0, 1]), np.array([2, 3]), np.array([4, 5])
    m = mean_predictor_metrics(target, train, val, test)  # the training mean is 2
    assert m["val_mae_mean_predictor"] == pytest.approx((0 + 8) / 2)
    assert m["val_rmse_mean_predictor"] == pytest.approx(math.sqrt((0 + 64) / 2))
    assert m["test_mae_mean_predictor"] == pytest.approx((2 + 2) / 2)
    assert m["test_rmse_mean_predictor"] == pytest.approx(2.0)


def test_the_explosion_rule_is_a_fixed_factor_of_the_mean_predictors_val_mae():
    assert explosion_error(EXPLOSION_FACTOR * 1.4 * 0.999, 1.4) is None
    assert explosion_error(EXPLOSION_FACTOR * 1.4 * 1.001, 1.4) is not None
    line = explosion_error(538.0, 1.4)
    assert line == f"exploded: val MAE 538 km > {EXPLOSION_FACTOR:g} x the mean predictor's 1.4 km"
    assert explosion_error(math.nan, 1.4) is None  # a non-finite loss is its own rule


def test_an_exploded_trial_is_diverged_with_its_own_failure_reason():
    metrics = {"status": "diverged", "failure_reason": "exploded", "test_mae": 538.0,
               "error": "exploded: val MAE 538 km > 3 x the mean predictor's 1.4 km"}
    assert trial_status(metrics, None, None) == ("diverged", metrics["error"], "exploded")
    non_finite = {"status": "diverged", "error": "non-finite loss at epoch 2"}
    assert trial_status(non_finite, None, None)[2] == "non-finite-loss"


def test_the_report_states_the_check_above_the_verdicts(tmp_path):
    from ablations.results.io.files import write_parquet_atomic
    from ablations.results.report.build import write_report
    from tests.test_analysis import _experiment

    root = _experiment(tmp_path / "exp")
    trials = pd.read_parquet(root / "trials.parquet")
    baseline = trials.loc[trials["ablation"] == "baseline", "test_mae"].mean()
    trials["test_mae_mean_predictor"] = baseline * 1.02  # the reference barely beats it
    write_parquet_atomic(trials, root / "trials.parquet")
    markdown = write_report(root, figures="png").markdown.read_text()
    line = baseline_check(trials, reference="baseline").line()
    assert line.startswith("Baseline check failed") and line in markdown
    assert markdown.index(line) < markdown.index("## Verdicts")


def test_a_search_records_no_check_and_a_table_s_analysis_does(tmp_path):
    """The check follows the experiment's analysis: a search has no reference to check, a
    table's analysis checks its reference (the run records whichever its analysis gives)."""
    from ablations.results.stats.analysis_search import SearchAnalysis
    from ablations.results.stats.analysis_table import Analysis

    trials = _trials({"baseline": [1.5, 1.5], "v": [1.0, 1.0]}, trivial=1.4)
    searched = tmp_path / "search"
    assert record_baseline_check(searched, trials, None, reference="baseline",
                                 analysis=SearchAnalysis({})) is None
    assert not searched.exists()
    # a design of one's own without verdicts has none either, by its analysis' has_verdicts
    unchecked = type("Unchecked", (Analysis,), {"name": "u", "record_key": "u",
                                                "has_verdicts": False})
    own = tmp_path / "own"
    assert record_baseline_check(own, trials, None, reference="baseline",
                                 analysis=unchecked({})) is None
    assert not own.exists()
    tabled = tmp_path / "table"
    tabled.mkdir()
    assert record_baseline_check(tabled, trials, None, reference="baseline",
                                 analysis=Analysis({})) is not None
    assert (tabled / bc.BASELINE_CHECK_FILE).is_file()

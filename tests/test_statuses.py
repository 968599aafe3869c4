"""A trial's status is one enum whose members are their strings: trials.parquet holds plain
strings, the code compares with members, and the two agree everywhere (==, sets, pandas'
isin, f-strings, JSON, Parquet). No Ray, no training."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.experiment.execution.tables import trial_status
from ablations.results.io.schema import TRIAL_COLUMNS


def test_a_status_is_its_string_in_comparisons_sets_text_and_json():
    assert TrialStatus.OK == "ok" and "not_started" == TrialStatus.NOT_STARTED
    assert "interrupted" in UNFINISHED and TrialStatus.OK in {"ok"}
    assert {TrialStatus.FAILED: 1}.get("failed") == 1  # value_counts() keys read by name
    assert f"{TrialStatus.DIVERGED}" == str(TrialStatus.DIVERGED) == "diverged"
    assert " ".join(["[1/2]", TrialStatus.SKIPPED]) == "[1/2] skipped"
    assert json.dumps({"status": TrialStatus.STOPPED}) == '{"status": "stopped"}'
    assert TrialStatus("ok") is TrialStatus.OK


@pytest.mark.parametrize("dtype", [object, "string"])
def test_a_parquet_round_trip_gives_plain_strings_that_compare_with_the_members(tmp_path, dtype):
    written = pd.DataFrame({"status": [TrialStatus.OK, TrialStatus.DIVERGED, "not_started"]})
    written["status"] = written["status"].astype(dtype)
    written.to_parquet(tmp_path / "trials.parquet")
    status = pd.read_parquet(tmp_path / "trials.parquet")["status"]
    assert status.tolist() == ["ok", "diverged", "not_started"]
    assert all(type(value) is str for value in status)
    assert (status == TrialStatus.OK).tolist() == [True, False, False]
    assert status.isin(UNFINISHED).tolist() == [False, False, True]
    assert status.value_counts()[TrialStatus.DIVERGED] == 1


def test_the_schema_names_every_status_and_no_other():
    described = dict((name, text) for name, _, text in TRIAL_COLUMNS)["status"]
    named = {word.split()[0] for word in described.split(" / ")}
    assert named == {status.value for status in TrialStatus}


@pytest.mark.parametrize("metrics, error, expected", [
    ({"status": "ok", "test_mae": 0.5, "done": True}, None, TrialStatus.OK),
    ({"status": "diverged", "done": True}, None, TrialStatus.DIVERGED),
    ({}, RuntimeError("boom"), TrialStatus.FAILED),
    ({"status": "ok", "training_iteration": 2}, None, TrialStatus.INTERRUPTED),
    ({}, None, TrialStatus.NOT_STARTED),
    ({"status": "ok", "done": True}, None, TrialStatus.FAILED),  # no test metrics
])
def test_every_ending_of_a_trial_gets_its_member(metrics, error, expected):
    status, message, reason = trial_status(metrics, error, None)
    assert status is expected
    assert (message is None) == (status is TrialStatus.OK or status in UNFINISHED)


def test_a_search_trial_stopped_by_the_scheduler_is_stopped():
    status, _, reason = trial_status({"status": "ok", "done": True, "val_mae": math.nan}, None,
                                     None, may_stop_early=True)
    assert status is TrialStatus.STOPPED and reason == "early-stopped"

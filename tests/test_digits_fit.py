"""The digits training function (examples/digits/fit.py) through run_trial, without Ray:
its reports, metrics and predictions, its seeds, and a restart that continues bit for bit."""

from __future__ import annotations

import io

import pytest
import torch

from ablations.config import TrialConfig
from ablations.trial.run import run_trial

DIGITS = "examples.digits.fit:DIGITS"
TEST_IMAGES = 360  # 20% of the 1,797 digits


def weights_only_copy(state):
    """What the runner's store keeps: ``state`` written and read back with weights_only."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def run(tmp_path, saved=None, **keys):
    """One trial of the digits function: (final result, epoch reports, saved states,
    predictions)."""
    reports, stored, handed = [], [], []

    def send(metrics, final, predictions):
        if final:
            handed.append(predictions)
        else:
            reports.append(metrics)

    config = TrialConfig.of(model=DIGITS, **keys)
    result = run_trial(config, name="baseline-seed0", send=send,
                          store=lambda state: stored.append(weights_only_copy(state)),
                          saved=saved, folder=tmp_path, device=torch.device("cpu"),
                          resources={"CPU": 1})
    return result, reports, stored, handed[0]


def test_fit_reports_every_epoch_and_hands_back_test_metrics_and_predictions(tmp_path):
    result, reports, stored, predictions = run(tmp_path, epochs=6, augment=False)
    assert [r["epoch"] for r in reports] == [1, 2, 3, 4, 5, 6]
    assert all({"train_loss", "val_acc", "val_loss"} <= set(r) for r in reports)
    assert sorted({state["epoch"] for state in stored}) == [1, 2, 3, 4, 5, 6]
    assert stored[-1]["epoch"] == 6
    assert result["status"] == "ok" and result["test_acc"] > 0.9 and result["test_loss"] > 0
    assert len(predictions) == TEST_IMAGES
    assert {"target", "predicted", "correct", "stratum_digit"} <= set(predictions.columns)
    assert (predictions["stratum_digit"] == predictions["target"]).all()
    assert predictions["correct"].mean() == pytest.approx(result["test_acc"])


def test_same_seeds_give_identical_metrics_and_another_init_seed_others(tmp_path):
    first = run(tmp_path / "a", epochs=2, seed_sources="init")[0]
    again = run(tmp_path / "b", epochs=2, seed_sources="init")[0]
    other_init = run(tmp_path / "c", epochs=2, seed_sources="init", seed=1)[0]
    assert (first["test_acc"], first["test_loss"]) == (again["test_acc"], again["test_loss"])
    assert first["test_loss"] != other_init["test_loss"]


def test_a_restart_after_epoch_2_continues_at_epoch_3_bit_for_bit(tmp_path):
    whole, whole_reports, stored, _ = run(tmp_path / "whole", epochs=4)
    after_two = next(state for state in stored if state["epoch"] == 2)
    restarted, reports, _, _ = run(tmp_path / "restart", saved=after_two, epochs=4)
    assert [r["epoch"] for r in reports] == [3, 4]
    assert restarted["resumed_from_epoch"] == 2
    assert [r["val_loss"] for r in reports] == [r["val_loss"] for r in whole_reports[2:]]
    assert (restarted["test_acc"], restarted["test_loss"]) == \
        (whole["test_acc"], whole["test_loss"])

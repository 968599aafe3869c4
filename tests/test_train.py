"""The plain training loop, without Ray: it learns, is deterministic, resumes, detects
divergence and runs on a file dataset."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from ablations.trial.loop import train
from ablations.trial.metrics import regression_metrics
from tests.conftest import tiny_config, write_data_dir
from tests.faulty import InjectedFailure, hooks


def test_loss_falls_and_beats_the_mean_predictor():
    config = tiny_config(epochs=6, synthetic_train=256, synthetic_val=64, synthetic_test=64,
                         lr=3e-3)
    outcome = train(config)
    losses = [h["train_loss"] for h in outcome.history]
    assert outcome.status == "ok" and len(losses) == 6
    assert losses[-1] < losses[0] - 0.2
    # better than always predicting the mean (R² > 0 on held-out data)
    assert outcome.metrics["val_r2"] > 0.1 and outcome.metrics["test_r2"] > 0.1
    predictions = outcome.predictions
    assert len(predictions) == 64
    assert {"sample_index", "target", "pred_mean", "pred_std", "stratum_regime"} <= set(
        predictions.columns)
    assert (predictions["pred_std"] > 0).all()


def test_deterministic_for_a_seed():
    a = train(tiny_config(seed=7))
    b = train(tiny_config(seed=7))
    c = train(tiny_config(seed=8))
    assert a.metrics["val_loss"] == b.metrics["val_loss"]
    np.testing.assert_array_equal(a.predictions["pred_mean"], b.predictions["pred_mean"])
    assert a.metrics["val_loss"] != c.metrics["val_loss"]


def test_resume_from_a_state_matches_an_uninterrupted_run():
    config = tiny_config(epochs=3)
    states = []
    full = train(config, report=lambda metrics, state, predictions: states.append(
        copy.deepcopy(state)))
    resumed = train(config, resume_state=states[0])  # continue after epoch 1
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert resumed.metrics["val_loss"] == pytest.approx(full.metrics["val_loss"], rel=1e-6)
    np.testing.assert_allclose(resumed.predictions["pred_mean"], full.predictions["pred_mean"],
                               rtol=1e-5)


def test_report_called_every_epoch_with_predictions_last():
    calls = []
    train(tiny_config(epochs=3),
          report=lambda metrics, state, predictions: calls.append((metrics, predictions)))
    assert [m["epoch"] for m, _ in calls] == [1, 2, 3]
    assert [p is None for _, p in calls] == [True, True, False]
    assert "test_mae" in calls[-1][0] and "test_mae" not in calls[0][0]


def test_point_head_has_no_uncertainty():
    outcome = train(tiny_config(head="point"))
    assert outcome.predictions["pred_std"].isna().all()
    assert np.isnan(outcome.metrics["test_nll"]) and np.isnan(outcome.metrics["test_coverage_90"])


def test_divergence_is_a_status_not_a_crash():
    outcome = train(tiny_config(lr=1e30, grad_clip=0.0, epochs=3))
    assert outcome.status == "diverged"
    assert "non-finite loss" in outcome.metrics["error"]
    assert outcome.predictions is None


def test_an_exploded_trial_is_diverged_after_its_last_epoch_and_keeps_its_test_results(
        monkeypatch):
    """The explosion rule (val MAE above a factor times the mean predictor's) is applied to
    the final epoch: every epoch trains, the test metrics and predictions are kept. A factor
    of 0 makes any finite model an explosion, so the path runs without a real blow-up."""
    import ablations.trial.divergence

    config = tiny_config(epochs=2)
    healthy = train(config)
    assert healthy.status == "ok"
    trivial = healthy.metrics["val_mae_mean_predictor"]
    assert trivial > 0 and healthy.metrics["test_mae_mean_predictor"] > 0
    monkeypatch.setattr(ablations.trial.divergence, "EXPLOSION_FACTOR", 0.0)
    outcome = train(config)
    assert outcome.status == "diverged" and outcome.metrics["failure_reason"] == "exploded"
    assert outcome.metrics["error"].startswith(
        f"exploded: val MAE {outcome.metrics['val_mae']:.3g} km > 0 x the mean predictor's")
    assert len(outcome.history) == 2 and outcome.metrics["epoch"] == 2
    assert outcome.metrics["test_mae"] == healthy.metrics["test_mae"]  # same training
    assert outcome.predictions is not None and len(outcome.predictions) == 48


def test_injected_failure_raises():
    with pytest.raises(InjectedFailure, match="epoch 2"):
        train(tiny_config(epochs=3), hooks=hooks(fail_at_epoch=2))


def test_trains_on_a_file_dataset(tmp_path):
    root = write_data_dir(tmp_path / "d", n=60, frames=3, size=8)
    config = tiny_config(data_dir=str(root), temporal_frames=2, batch_size=8,
                         max_train_examples=30)
    outcome = train(config)
    assert outcome.status == "ok"
    assert len(outcome.predictions) == 8
    assert {"stratum_site", "stratum_season"} <= set(outcome.predictions.columns)


def test_regression_metrics_against_hand_computed_values():
    target = np.array([1.0, 2.0, 3.0, 4.0])
    mean = np.array([1.5, 2.0, 2.0, 5.0])
    std = np.array([1.0, 1.0, 0.5, 0.5])
    m = regression_metrics(target, mean, std, "x")
    assert m["x_mae"] == pytest.approx((0.5 + 0 + 1 + 1) / 4)
    assert m["x_rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1 + 1) / 4))
    assert m["x_r2"] == pytest.approx(1 - 2.25 / 5.0)
    from scipy.stats import norm
    assert m["x_nll"] == pytest.approx(-norm.logpdf(target, mean, std).mean())
    assert m["x_coverage_90"] == pytest.approx(0.5)  # |err| <= 1.645 std for the first two


def test_image_normalisation_in_chunks_equals_the_whole_sample():
    from ablations.trial.batches import NORMALISATION_SAMPLES, Normaliser
    from ablations.model.data import SyntheticSpec, make_synthetic

    data = make_synthetic(SyntheticSpec(n_train=150, n_val=4, n_test=4))
    train_idx = data.indices("train")
    norm = Normaliser.fit(data, train_idx)  # 150 samples: three chunks, the last partial
    images = data.images[train_idx[:NORMALISATION_SAMPLES]].astype(np.float64)
    np.testing.assert_allclose(norm.image_mean, images.mean(axis=(0, 1, 3, 4)), rtol=1e-6)
    np.testing.assert_allclose(norm.image_std, images.std(axis=(0, 1, 3, 4)), rtol=1e-6)


def test_image_normalisation_samples_the_whole_training_split_not_its_head():
    # A time-ordered file: the first samples are dark, the later ones bright. Statistics from
    # the first NORMALISATION_SAMPLES would see only dark frames.
    from ablations.trial.batches import NORMALISATION_SAMPLES, Normaliser
    from ablations.model.data import SyntheticSpec, make_synthetic

    n = 4 * NORMALISATION_SAMPLES
    data = make_synthetic(SyntheticSpec(n_train=n, n_val=4, n_test=4, height=8, width=8))
    images = np.array(data.images)
    images[n // 2 : n] += 10.0  # the second half of the training split, brighter
    data.images = images
    train_idx = data.indices("train")
    norm = Normaliser.fit(data, train_idx, seed=0)
    whole = images[train_idx].astype(np.float64).mean(axis=(0, 1, 3, 4))
    np.testing.assert_allclose(norm.image_mean, whole, atol=1.0)  # not the dark head (~-5)
    assert Normaliser.fit(data, train_idx, seed=0).image_mean.tolist() == norm.image_mean.tolist()

"""Lightning through the training-function contract (ablations/contract/lightning.py) with the
digits LightningModule (examples/digits/lightning_module.py), without Ray: reports every
epoch, test metrics, a quiet console, and a restart from the trial's last.ckpt."""

from __future__ import annotations

import importlib.util
import io
import logging
import warnings

import pytest
import torch

from ablations.config import TrialConfig
from ablations.trial.run import run_trial
from ablations.trial.own_code import Diverged, Trial

# found, not imported: each xdist worker collects this module, one runs its tests
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="needs lightning: pip install -e '.[test]'")

DIGITS_LIGHTNING = "examples.digits.lightning_module:DIGITS_LIGHTNING"


class Killed(Exception):
    """The trial's process dies right after a save."""


def run(folder, saved=None, kill_after_epoch=None, **keys):
    """One trial of the digits module: (final result or None when killed, epoch reports,
    saved states)."""
    reports, stored = [], []

    def store(state):
        buffer = io.BytesIO()  # what the runner's store keeps: written, read with weights_only
        torch.save(state, buffer)
        buffer.seek(0)
        stored.append(torch.load(buffer, weights_only=True))
        if state["epoch"] == kill_after_epoch:
            raise Killed

    config = TrialConfig.of(model=DIGITS_LIGHTNING, **keys)
    try:
        result = run_trial(config, name="baseline-seed0", store=store, saved=saved,
                              send=lambda metrics, final, p: None if final
                              else reports.append(metrics),
                              folder=folder, device=torch.device("cpu"), resources={"CPU": 1})
    except Killed:
        result = None
    return result, reports, stored


def test_fit_lightning_reports_each_epoch_returns_test_metrics_and_stays_quiet(
        tmp_path, capfd, caplog, monkeypatch):
    from lightning.pytorch.trainer.connectors import data_connector

    # as on a machine with more cores: "does not have many workers", a PossibleUserWarning
    monkeypatch.setattr(data_connector, "suggested_max_num_workers", lambda devices: 4)
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, reports, stored = run(tmp_path, epochs=3, augment=False)
    assert [r["epoch"] for r in reports] == [1, 2, 3]
    assert all({"train_loss", "val_acc", "val_loss"} <= set(r) for r in reports)
    assert result["status"] == "ok" and result["test_acc"] > 0.8 and result["test_loss"] > 0
    assert stored[-1]["user"] == {"checkpoint": "last.ckpt"}
    assert (tmp_path / "last.ckpt").is_file()
    out, err = capfd.readouterr()
    for noise in ("Epoch", "|", "GPU available", "Seed set", "Trainer", "LOCAL_RANK"):
        assert noise not in out + err, f"{noise!r} printed: {(out + err)[:300]}"
    assert not [w.message for w in caught if "lightning" in w.filename]
    assert not [r.message for r in caplog.records if r.name.startswith("lightning")]


def test_a_restart_fits_from_last_ckpt_after_the_saved_epoch(tmp_path):
    whole, whole_reports, _ = run(tmp_path / "whole", epochs=4)
    killed, _, stored = run(tmp_path / "trial", kill_after_epoch=2, epochs=4)
    assert killed is None and stored[-1]["epoch"] == 2
    restarted, reports, _ = run(tmp_path / "trial", saved=stored[-1], epochs=4)
    assert [r["epoch"] for r in reports] == [3, 4]
    assert restarted["resumed_from_epoch"] == 2
    assert [r["val_loss"] for r in reports] == [r["val_loss"] for r in whole_reports[2:]]
    assert (restarted["test_acc"], restarted["test_loss"]) == \
        (whole["test_acc"], whole["test_loss"])


def test_a_non_finite_logged_metric_ends_the_fit_as_diverged(tmp_path):
    from ablations.contract.lightning import fit_lightning
    from examples.digits.lightning_module import DigitsData, DigitsModule

    class NaNValidation(DigitsModule):
        def validation_step(self, batch, batch_idx):
            self.log("val_loss", float("nan"))

    config = TrialConfig.of(model=DIGITS_LIGHTNING, epochs=3)
    reports = []
    trial = Trial(config, name="baseline-seed0", send=lambda m, final, p: reports.append(m),
                  store=lambda state: None, saved=None, folder=tmp_path,
                  device=torch.device("cpu"), resources={"CPU": 1})
    with pytest.raises(Diverged, match="val_loss=nan at epoch 1"):
        fit_lightning(NaNValidation(config.model), DigitsData(config.model, trial), trial,
                      max_epochs=3)
    assert [r["status"] for r in reports] == ["diverged"]

"""The Ray Tune function trainable: a thin wrapper around :func:`ablations.train.train`.

Each epoch becomes one ``tune.report`` with a checkpoint (``state.pt``; the last one also holds
``predictions.parquet``). A restarted trial resumes from its latest checkpoint.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Optional

import pandas as pd
import torch
from ray import tune

from ablations.config import TrialConfig
from ablations.train import train

STATE_FILE = "state.pt"
PREDICTIONS_FILE = "predictions.parquet"


def trial_name(trial: Any) -> str:
    """``trial_name_creator`` / ``trial_dirname_creator``: the spec's name, e.g. baseline-seed0."""
    return str(trial.config["trial"])


def tune_trainable(config: dict[str, Any], plan: dict[str, dict[str, Any]]) -> None:
    """Train trial ``config["trial"]`` (a name) with its resolved config ``plan[name]``
    (a ``TrialConfig.to_dict()``). The runner passes ``plan`` with ``tune.with_parameters``."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # no line per checkpoint
    trial = TrialConfig.from_dict(plan[config["trial"]])
    resume_state = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            resume_state = torch.load(os.path.join(directory, STATE_FILE), weights_only=True)

    def report(metrics: dict[str, Any], state: dict[str, Any],
               predictions: Optional[pd.DataFrame]) -> None:
        with tempfile.TemporaryDirectory() as directory:
            torch.save(state, os.path.join(directory, STATE_FILE))
            if predictions is not None:
                predictions.to_parquet(os.path.join(directory, PREDICTIONS_FILE), index=False)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))

    train(trial, report=report, resume_state=resume_state)

"""Ablations of a model on Ray Tune, in four layers, each importing only the ones before it:

- ``ablations.config``: a trial's configuration, keys, values, plugins, the safety rules (no Ray);
- ``ablations.trial``: one trial, PyTorch only (the loop, the step, batches, metrics);
- ``ablations.experiment``: the experiment on Ray Tune (planning, the runner, the designs,
  result tables, trackers) and the library's entry point, :class:`Experiment`;
- ``ablations.cli``: the command line.

``import ablations`` loads the configuration only (no torch, no Ray); ``train`` and
``TrialOutcome`` (``ablations.trial.loop``) and ``Experiment`` (``ablations.experiment.api``)
load their layer when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from ablations.config import ConfigError, TrialConfig, parse_bool

# The public names that live in a layer above the configuration -> their module.
LAZY = {"train": "ablations.trial.loop", "TrialOutcome": "ablations.trial.loop",
        "Experiment": "ablations.experiment.api"}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'ablations' has no attribute {name!r}")


__all__ = ["ConfigError", "Experiment", "TrialConfig", "TrialOutcome", "parse_bool", "train"]

"""Ablations of a model on Ray Tune, in four layers, each importing only the ones before it:

- ``ablations.config``: a trial's configuration, keys, values, plugins, the safety rules (no Ray);
- ``ablations.trial``: one trial, PyTorch only (the loop, the step, batches, metrics);
- ``ablations.experiment``: the experiment on Ray Tune (planning, the runner, the strategies,
  result tables, trackers) and the library's entry point, :class:`Experiment`;
- ``ablations.cli``: the command line.

``import ablations`` loads the configuration only; ``train``, ``TrialOutcome`` and
``Experiment`` load their layer when first used. The import paths documented before the layers
existed (``ablations.train``, ``ablations.plugins``, ``ablations.api``) keep working: they are
resolved here, in :data:`MOVED`, and nowhere else.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

from ablations.config import ConfigError, TrialConfig, parse_bool

# Old module path -> where it lives now. Only documented paths (README, docs/) are kept.
MOVED = {
    "ablations.train": "ablations.trial.loop",
    "ablations.plugins": "ablations.config.plugins",
    "ablations.api": "ablations.experiment.api",
}

_LAZY = {"train": "ablations.trial.loop", "TrialOutcome": "ablations.trial.loop",
         "Experiment": "ablations.experiment.api"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import ablations.train`` gives the module ``ablations.trial.loop`` itself (the same
    object, so a patched attribute is seen by both names)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(MOVED[spec.name])
        self._spec = module.__spec__  # the import system overwrites it on the alias
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self._spec


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ablations' has no attribute {name!r}")


__all__ = ["ConfigError", "Experiment", "MOVED", "TrialConfig", "TrialOutcome", "parse_bool",
           "train"]

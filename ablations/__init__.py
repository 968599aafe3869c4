"""Ablations of a model on Ray Tune, in four layers, each importing only the ones before it:

- ``ablations.config``: a trial's configuration, keys, values, plugins, the safety rules (no Ray);
- ``ablations.trial``: one trial, PyTorch only (the loop, the step, batches, metrics);
- ``ablations.experiment``: the experiment on Ray Tune (planning, the runner, the strategies,
  result tables, trackers) and the library's entry point, :class:`Experiment`;
- ``ablations.cli``: the command line.

``import ablations`` loads the configuration only; ``train``, ``TrialOutcome`` and
``Experiment`` load their layer when first used. The import paths from before the layers
existed (the documented ``ablations.train``, ``ablations.plugins``, ``ablations.api``, and the
module paths an older experiment's saved Tune state names) keep working: they are resolved
here, in :data:`MOVED`, and nowhere else.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

from ablations.config import ConfigError, TrialConfig, parse_bool

# Old module path -> where it lives now: the paths the documentation gave (ablations.train,
# ablations.plugins, ablations.api) and every module an experiment started before the layers
# existed may name in its saved Tune state (tuner.pkl pickles the trainable's helpers, the
# searcher and the callbacks by module path), so that such an experiment still resumes.
MOVED = {
    f"ablations.{old}": f"ablations.{new}" for old, new in {
        "api": "experiment.api", "batches": "trial.batches", "cli": "cli.main",
        "cluster": "experiment.cluster", "collect": "experiment.tables",
        "console": "cli.output", "continuing": "experiment.continuing", "cost": "trial.cost",
        "flags": "cli.flags", "hpo_run": "experiment.strategies.hpo",
        "interrupt": "experiment.interrupt", "keys": "config.keys", "memory": "trial.memory",
        "metrics": "trial.metrics", "models": "trial.model_builder",
        "optuna_search": "experiment.strategies.optuna_search",
        "planning": "experiment.planning", "plugins": "config.plugins",
        "preflight": "experiment.preflight", "progress": "experiment.progress",
        "provenance": "experiment.provenance", "resuming": "cli.resume",
        "rounds": "experiment.strategies.seeds_auto", "runner": "experiment.runner",
        "stepping": "trial.step", "systems": "config.safety",
        "tracker_runs": "experiment.trackers.runs", "trackers": "experiment.trackers.specs",
        "train": "trial.loop", "trainable": "experiment.trainable", "values": "config.values",
    }.items()
}
# ablations.cli is a package now; its old module's names are in ablations.cli.main. A package
# takes precedence over MOVED, so "ablations.cli" itself is not resolved through it.
del MOVED["ablations.cli"]

LAZY = {"train": "ablations.trial.loop", "TrialOutcome": "ablations.trial.loop",
         "Experiment": "ablations.experiment.api"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import ablations.train`` gives the module ``ablations.trial.loop`` itself (the same
    object, so a patched attribute is seen by both names)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in MOVED:
            return None
        module = importlib.import_module(MOVED[name])
        spec = importlib.machinery.ModuleSpec(name, self, origin=MOVED[name])
        # the import system sets __spec__ on the module it gets; give it back its own after
        spec.loader_state = module.__spec__
        return spec

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: Any) -> None:
        module.__spec__ = module.__spec__.loader_state


class _Package(types.ModuleType):
    """``ablations`` itself: importing an old path (``import ablations.train``) makes the
    import system set the package's attribute of that name to the module, which would hide
    the lazy function of the same name (``ablations.train``, :data:`LAZY`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'ablations' has no attribute {name!r}")


__all__ = ["ConfigError", "Experiment", "MOVED", "TrialConfig", "TrialOutcome", "parse_bool",
           "train"]

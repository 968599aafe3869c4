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
import importlib.abc
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

# The runner's other packages: folders beside this one in a checkout, installed inside it
# (pyproject.toml's package-dir), so that the runner imports under one root only.
SIBLINGS = ("model", "results", "search_spaces")


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``ablations.model``, ``ablations.results`` and ``ablations.search_spaces`` in the
    folders beside ``ablations/`` when this package is loaded from a checkout: uninstalled, or a
    Ray job's working_dir copy of one, where an installed runner elsewhere must not answer for
    them. An installed (wheel) runner has them inside this package, and is never asked."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package != __name__ or name not in SIBLINGS:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.root])


def _find_siblings_in_checkout() -> None:
    here = Path(__file__).resolve().parent
    if all((here / name).is_dir() for name in SIBLINGS):
        return  # installed from a wheel: the packages are inside this one
    if not all((here.parent / name / "__init__.py").is_file() for name in SIBLINGS):
        return
    if not any(isinstance(finder, _CheckoutFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder(here.parent))


_find_siblings_in_checkout()

from ablations.config import ConfigError, TrialConfig, parse_bool  # noqa: E402

# The public names that live in a layer above the configuration -> their module.
LAZY = {"train": "ablations.trial.loop", "TrialOutcome": "ablations.trial.loop",
        "Experiment": "ablations.experiment.api"}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'ablations' has no attribute {name!r}")


__all__ = ["ConfigError", "Experiment", "TrialConfig", "TrialOutcome", "parse_bool", "train"]

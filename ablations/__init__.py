"""Ablations of any training code on Ray Tune: the public API.

    from ablations import Decision, Experiment, Seeds
    results = Experiment("components", seeds=Seeds("auto")).run()

- the experiment: :class:`Experiment` (with :class:`Decision`, :class:`Seeds`,
  :class:`Resources`, and a built-in design's options: :class:`Factorial`, :class:`Tuned`,
  :class:`Search`, :class:`Rounds`), what it returns (:class:`Results`), what it says while it runs
  (:class:`Event`; its progress: :class:`TrialEnded`, :class:`EpochEnded`, :class:`Status`,
  :class:`FitEnded`), a stop before its results (:class:`Interrupted`);
- own code (docs/own-code.md): :class:`TrainingFunction`, :class:`Command`, :class:`Metric`,
  :class:`Trial`, :class:`Diverged`; the built-in model's loop, :func:`train`;
- the analysis of an experiment folder (docs/report.md): :func:`load_experiments`,
  :func:`experiment_verdicts`, :func:`verdict_table`, :func:`ablation_table`,
  :func:`stratified_errors`, :func:`uncertainty_table`, :func:`calibration_curve`;
- the errors, each one line naming the problem and the fix: :class:`UsageError`,
  :class:`ConfigError`, :class:`DataError`; :func:`parse_bool` (the runner's booleans).

Everything else is the runner's own and may change. The packages form layers, each importing
only the ones before it (docs/architecture.md): ``ablations.config``, ``ablations.trial``,
``ablations.contract``, ``ablations.results``, ``ablations.experiment``, ``ablations.cli``.
``import ablations`` loads the configuration only (no torch, no Ray); every other public
name loads its layer when first used.
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

from ablations.config import ConfigError, TrialConfig, parse_bool  # noqa: E402, F401

# The public names that live in a layer above the configuration -> their module.
LAZY = {
    **dict.fromkeys(("Experiment", "Decision", "Seeds", "Resources", "Results", "Console",
                     "Interrupted"), "ablations.experiment.api"),
    **dict.fromkeys(("Factorial", "Tuned", "Search", "Rounds"),
                    "ablations.experiment.core.design_options"),
    **dict.fromkeys(("Event", "TrialEnded", "EpochEnded", "Status", "FitEnded"),
                    "ablations.experiment.core.events"),
    "UsageError": "ablations.experiment.core.request",
    "DataError": "ablations.model.data",
    **dict.fromkeys(("TrainingFunction", "Command", "Metric", "Trial", "Diverged"),
                    "ablations.contract"),
    **dict.fromkeys(("train", "TrialOutcome"), "ablations.trial.loop"),
    **dict.fromkeys(("load_experiments", "verdict_table", "ablation_table",
                     "stratified_errors", "uncertainty_table", "calibration_curve"),
                    "ablations.results.stats.analysis"),
    "experiment_verdicts": "ablations.results.stats.decisions",
    # a design of one's own (docs/architecture.md, "Adding a design")
    "Design": "ablations.experiment.designs.base",
    **dict.fromkeys(("DesignOptions", "Flag"), "ablations.experiment.core.design_options"),
    "Table": "ablations.experiment.designs.table",
    "register_design": "ablations.experiment.designs.registry",
    **dict.fromkeys(("Analysis", "register_analysis"), "ablations.results.stats.analyses"),
    **dict.fromkeys(("DesignReport", "register_report"), "ablations.results.report.designs"),
    # a tracker of one's own (docs/trackers.md)
    **dict.fromkeys(("TrackerKind", "register_tracker"), "ablations.experiment.trackers.registry"),
    "TrialTracker": "ablations.experiment.trackers.trials",
}


# Names a public class had in an earlier release -> its name: a plug-in written against one
# keeps working, with a DeprecationWarning that names the class to use
RENAMED = {"Grid": "Table"}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    if name in RENAMED:
        import warnings

        warnings.warn(f"ablations.{name} is ablations.{RENAMED[name]}; use that name",
                      DeprecationWarning, stacklevel=2)
        return __getattr__(RENAMED[name])
    raise AttributeError(f"module 'ablations' has no attribute {name!r}")


__all__ = sorted(["ConfigError", "TrialConfig", "parse_bool", *LAZY])

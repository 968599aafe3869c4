"""The runner as a library: what the command line does, as an object a notebook can hold.

    from ablations.experiment.api import Experiment
    exp = Experiment("components", seeds=3, overrides={"epochs": 2}, only=["baseline", "no_images"])
    trials = exp.plan()          # validated trials; nothing started
    result = exp.run()           # starts (and stops) a local Ray unless one is running
    result.verdicts              # the verdict table; result.trials / .epochs / .predictions

The same planning as ``run_ablations.py`` (``ablations.experiment.planning.prepare``): a bad value
raises
the same one-line ``ConfigError``/``UsageError`` before anything runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pandas as pd

from ablations.experiment.request import Request, new_experiment_root, storage_root
from results.stats.baseline_check import BaselineCheck, record_baseline_check


@dataclass
class Results:
    """What :meth:`Experiment.run` returns: the experiment folder and its tables."""

    directory: str
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    verdicts: Optional[pd.DataFrame]  # None when no verdict is possible (e.g. no ok reference)
    wall_s: float
    effects: Optional[pd.DataFrame] = None  # design="factorial": results.stats.factorial's effects
    # the reference against the training mean and its last epoch (results.stats.baseline_check);
    # None without verdicts
    baseline_check: Optional[BaselineCheck] = None


class Experiment:
    """An ablation experiment: a space (a built-in name or a YAML file), seeds (a count, a
    list, or ``"auto"``), the base configuration and where to run it. Arguments mirror the
    command line's flags (``run_ablations.py --help``); ``design="factorial"`` with
    ``factors`` (a list or a comma-separated string) runs a factorial design
    (docs/factorial.md) and :attr:`Results.effects` holds its effects."""

    def __init__(self, space: str = "components", *, seeds: int | Sequence[int] | str = 3,
                 overrides: Optional[Mapping[str, Any]] = None, config: Optional[str] = None,
                 model: Optional[str] = None, only: Optional[Sequence[str]] = None,
                 data: Optional[str] = None, name: Optional[str] = None,
                 storage: str | Path = "ablation_results", pilot: Optional[int] = None,
                 max_seeds: Optional[int] = None, null_control: bool = False,
                 cross_seeds: bool = False, design: str = "table",
                 factors: Optional[str | Sequence[str]] = None,
                 margin: str | float = "5%", alpha: float = 0.05, metric: str = "test_mae",
                 cpus_per_trial: float = 1.0, gpus_per_trial: float = 0.0,
                 resolve_conflicts: bool = False, num_cpus: Optional[int] = None,
                 progress: bool = False) -> None:
        self.request = Request(
            space=str(space), seeds=Request.seeds_from(seeds), config=config, model=model,
            data=data, only=",".join(only) if only else None, name=name, storage=str(storage),
            pilot=pilot, max_seeds=max_seeds, null_control=null_control,
            cross_seeds=cross_seeds,  # seed_sources goes in overrides, as with --set
            design=design, factors=factors if factors is None or isinstance(factors, str)
            else ",".join(factors),
            margin=str(margin), alpha=alpha, metric=metric, cpus_per_trial=cpus_per_trial,
            gpus_per_trial=gpus_per_trial, resolve_conflicts=resolve_conflicts,
        ).overrides_from(overrides)
        self.num_cpus, self.progress = num_cpus, progress

    def plan(self) -> list:
        """The validated trials (``search_spaces.TrialSpec``: name, variant, seed, resolved
        config) that :meth:`run` starts with (with ``seeds="auto"``: the pilot's); nothing
        starts. Raises the command line's one-line errors."""
        from ablations.experiment.planning import prepare

        return list(prepare(self.request).trials)

    def run(self) -> Results:
        """Run the experiment into ``storage/name`` (a new folder) and return its tables.
        Uses the Ray already initialised in this process, else starts a local one
        (``num_cpus``) and shuts it down at the end."""
        import datetime as dt

        import ray

        from ablations.experiment.planning import prepare
        from ablations.experiment.options import RunOptions
        from ablations.experiment.runner import estimating_costs
        from results.stats.sequential_table import experiment_verdicts

        request = self.request
        prepared = prepare(request)
        storage = storage_root(request.storage)
        name = request.name or f"{prepared.space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
        root = new_experiment_root(storage, name)
        options = RunOptions(storage=storage, name=name, space=prepared.space.name,
                             reference=prepared.space.reference,
                             cpus_per_trial=request.cpus_per_trial,
                             gpus_per_trial=request.gpus_per_trial,
                             reuse_workers=not prepared.space.isolate_trials,
                             dashboard=False, progress=self.progress,
                             command=["ablations.experiment.api.Experiment"])
        started = not ray.is_initialized()
        if started:
            with estimating_costs(prepared.trials):  # in a thread, while Ray starts
                ray.init(num_cpus=self.num_cpus, include_dashboard=False,
                         logging_level=logging.WARNING)
        try:
            result = prepared.strategy.execute(
                prepared.trials, options, prepared.skipped,
                say=print if self.progress else (lambda _: None))
        finally:
            if started:
                ray.shutdown()
        verdicts, check = None, None
        if prepared.strategy.has_verdicts:
            check = record_baseline_check(result.directory, result.trials, result.epochs,
                                          reference=prepared.space.reference)
            try:
                verdicts = experiment_verdicts(root, result.trials,
                                               reference=prepared.space.reference,
                                               metric=request.metric,
                                               margin=request.margin, alpha=request.alpha)
            except ValueError:
                verdicts = None
        effects = None
        if prepared.factorial is not None:
            from results.stats.factorial import factorial_effects

            try:
                effects = factorial_effects(result.trials, prepared.factorial,
                                            metric=request.metric, margin=request.margin,
                                            alpha=request.alpha)
            except ValueError:
                effects = None
        return Results(str(result.directory), result.trials, result.epochs, result.predictions,
                       verdicts, result.wall_s, effects, check)

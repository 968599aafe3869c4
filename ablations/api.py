"""The runner as a library: what the command line does, as an object a notebook can hold.

    from ablations.api import Experiment
    exp = Experiment("components", seeds=3, overrides={"epochs": 2}, only=["baseline", "no_images"])
    trials = exp.plan()          # validated trials; nothing started
    result = exp.run()           # starts (and stops) a local Ray unless one is running
    result.verdicts              # the verdict table; result.trials / .epochs / .predictions

The same planning as ``run_ablations.py`` (``ablations.planning.prepare``): a bad value raises
the same one-line ``ConfigError``/``UsageError`` before anything runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pandas as pd


@dataclass
class Results:
    """What :meth:`Experiment.run` returns: the experiment folder and its tables."""

    directory: str
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    verdicts: Optional[pd.DataFrame]  # None when no verdict is possible (e.g. no ok reference)
    wall_s: float


class Experiment:
    """An ablation experiment: a space (a built-in name or a YAML file), seeds (a count, a
    list, or ``"auto"``), the base configuration and where to run it. Arguments mirror the
    command line's flags (``run_ablations.py --help``)."""

    def __init__(self, space: str = "components", *, seeds: int | Sequence[int] | str = 3,
                 overrides: Optional[Mapping[str, Any]] = None, config: Optional[str] = None,
                 model: Optional[str] = None, only: Optional[Sequence[str]] = None,
                 data: Optional[str] = None, name: Optional[str] = None,
                 storage: str | Path = "ablation_results", pilot: Optional[int] = None,
                 max_seeds: Optional[int] = None, null_control: bool = False,
                 cross_seeds: bool = False,
                 margin: str | float = "5%", alpha: float = 0.05, metric: str = "test_mae",
                 cpus_per_trial: float = 1.0, gpus_per_trial: float = 0.0,
                 resolve_conflicts: bool = False, num_cpus: Optional[int] = None,
                 progress: bool = False) -> None:
        from ablations.cli import build_parser

        args = build_parser().parse_args([])  # the command line's defaults
        args.space = str(space)
        if isinstance(seeds, int):
            args.seeds = list(range(seeds))
        elif isinstance(seeds, str):
            args.seeds = seeds
        else:
            args.seeds = [int(s) for s in seeds]
        args.overrides = [(str(k), v) for k, v in (overrides or {}).items()]
        args.config, args.model, args.data = config, model, data
        args.only = ",".join(only) if only else None
        args.name, args.storage = name, str(storage)
        args.pilot, args.max_seeds, args.null_control = pilot, max_seeds, null_control
        args.cross_seeds = cross_seeds  # seed_sources goes in overrides, as with --set
        args.margin, args.alpha, args.metric = str(margin), alpha, metric
        args.cpus_per_trial, args.gpus_per_trial = cpus_per_trial, gpus_per_trial
        args.resolve_conflicts = resolve_conflicts
        args.quiet = not progress
        self.args, self.num_cpus = args, num_cpus

    def plan(self) -> list:
        """The validated trials (``search_spaces.TrialSpec``: name, variant, seed, resolved
        config) that :meth:`run` starts with (with ``seeds="auto"``: the pilot's); nothing
        starts. Raises the command line's one-line errors."""
        from ablations.planning import prepare

        return list(prepare(self.args).trials)

    def run(self) -> Results:
        """Run the experiment into ``storage/name`` (a new folder) and return its tables.
        Uses the Ray already initialised in this process, else starts a local one
        (``num_cpus``) and shuts it down at the end."""
        import datetime as dt

        import ray

        from ablations.cli import NAME_PATTERN, UsageError, storage_root
        from ablations.planning import prepare
        from ablations.rounds import run_rounds
        from ablations.runner import RunOptions, run_experiment
        from results.io import join, list_dir
        from results.sequential import experiment_verdicts

        prepared = prepare(self.args)
        storage = storage_root(self.args.storage)
        name = self.args.name or f"{prepared.space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
        if not NAME_PATTERN.match(name):
            raise UsageError(f"name {name!r}: use letters, digits, '.', '_' and '-' only")
        root = join(storage, name)
        if list_dir(root):
            raise UsageError(f"{root} already exists; choose another name (run_ablations.py "
                             "--resume continues an experiment)")
        options = RunOptions(storage=storage, name=name, space=prepared.space.name,
                             reference=prepared.space.reference,
                             cpus_per_trial=self.args.cpus_per_trial,
                             gpus_per_trial=self.args.gpus_per_trial,
                             reuse_workers=not prepared.space.isolate_trials,
                             dashboard=False, progress=not self.args.quiet,
                             command=["ablations.api.Experiment"])
        started = not ray.is_initialized()
        if started:
            ray.init(num_cpus=self.num_cpus, include_dashboard=False,
                     logging_level=logging.WARNING)
        try:
            if prepared.sequential is not None:
                result, _ = run_rounds(prepared.sequential, options, prepared.skipped,
                                       root=root, say=print if not self.args.quiet
                                       else (lambda _: None))
            else:
                result = run_experiment(prepared.trials, options, prepared.skipped,
                                        hpo=prepared.hpo)
        finally:
            if started:
                ray.shutdown()
        verdicts = None
        if prepared.hpo is None:
            try:
                verdicts = experiment_verdicts(root, result.trials,
                                               reference=prepared.space.reference,
                                               metric=self.args.metric,
                                               margin=self.args.margin, alpha=self.args.alpha)
            except ValueError:
                verdicts = None
        return Results(str(result.directory), result.trials, result.epochs, result.predictions,
                       verdicts, result.wall_s)

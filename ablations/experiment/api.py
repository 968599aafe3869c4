"""The runner as a library: what the command line does, as an object a notebook can hold.

    from ablations.experiment.api import Experiment
    exp = Experiment("components", seeds=3, overrides={"epochs": 2}, only=["baseline", "no_images"])
    trials = exp.plan()          # validated trials; nothing started
    result = exp.run()           # starts (and stops) a local Ray unless one is running
    result.verdicts              # the verdict table; result.trials / .epochs / .predictions

The same planning as ``run_ablations.py`` (``ablations.experiment.planning.prepare``): a bad
value raises the same one-line ``ConfigError``/``UsageError`` before anything runs, naming the
argument (``max_seeds``) where the command line names its flag (``--max-seeds``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Sequence

import pandas as pd

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_METRIC
from ablations.config.values import named
from ablations.experiment.events import Event, listening
from ablations.experiment.request import (
    DEFAULT_STORAGE,
    Request,
    new_experiment_root,
    storage_root,
)
from ablations.results.io.files import read_metadata
from ablations.results.stats.baseline_check import (
    BaselineCheck,
    DatasetChecks,
    record_baseline_check,
)


@dataclass
class Results:
    """What :meth:`Experiment.run` returns: the experiment folder and its tables."""

    directory: str
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    # None when no verdict is possible (e.g. no ok reference); over several datasets each
    # dataset's verdicts, one below the other, with a ``dataset`` column
    verdicts: Optional[pd.DataFrame]
    wall_s: float
    # design="factorial": ablations.results.stats.factorial's effects
    effects: Optional[pd.DataFrame] = None
    # the reference against the training mean and its last epoch
    # (ablations.results.stats.baseline_check); None without verdicts
    baseline_check: Optional[BaselineCheck | DatasetChecks] = None
    # tune_each: each arm's verdict at the configuration given and at its own best, side by
    # side (ablations.results.stats.decisions.tuned_comparison_of)
    tuned: Optional[pd.DataFrame] = None
    # several datasets: each variant's verdict across them (ablations.results.stats.datasets;
    # across_datasets.parquet)
    across: Optional[pd.DataFrame] = None


def records_given(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with the names of the arguments its caller passed in ``self._given``: what a
    continuation or a resume counts as given, whatever the value."""
    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        self._given = frozenset(kwargs) | ({"space"} if args else set())
        init(self, *args, **kwargs)

    return wrapper


def names(given: Optional[Sequence[str]]) -> Optional[list[str]]:
    """A list of names as given (a string stays a string: the request's check refuses it
    rather than splitting it into letters)."""
    return given if given is None or isinstance(given, str) else list(given)


class Experiment:
    """An ablation experiment: a space (a built-in name or a YAML file), seeds (a count, a
    list, or ``"auto"``), the base configuration, how to decide and where to run it. The
    arguments are :class:`~ablations.experiment.request.Request`'s fields (the command line's
    ``run`` flags: ``max_seeds`` is ``--max-seeds``, ``overrides`` the ``--set`` pairs), typed:
    lists of names, numbers, ``design="factorial"`` with ``factors`` (docs/factorial.md;
    :attr:`Results.effects` holds its effects), ``tune_each`` keys (docs/tuned.md), a search
    space's ``num_samples`` and ``scheduler``, a cluster's ``address``; own code
    (docs/own-code.md) as ``model`` (a training function's ``package.module:NAME``) or
    ``command`` with its ``metrics`` (``{"test_acc": "higher"}``); ``datasets``: the same
    table on several datasets (docs/datasets.md), as ``["NAME=DIR", "DIR", "synthetic"]`` or
    ``{name: a directory, "synthetic" or the keys that select it}``. ``num_cpus``: the local
    Ray's CPUs when this call starts one; ``max_concurrent`` and ``max_failures`` as on the
    command line."""

    @records_given
    def __init__(self, space: str = "components", *, seeds: int | Sequence[int] | str = 3,
                 overrides: Optional[Mapping[str, Any]] = None, config: Optional[str] = None,
                 model: Optional[str] = None, command: Optional[str] = None,
                 metrics: Optional[str | Mapping[str, Any]] = None,
                 only: Optional[Sequence[str]] = None,
                 epochs: Optional[int] = None, data: Optional[str] = None,
                 datasets: Optional[Sequence[str] | Mapping[str, Any]] = None,
                 max_train_examples: Optional[int] = None,
                 max_eval_examples: Optional[int] = None, seed_sources: Optional[str] = None,
                 pilot: Optional[int] = None, max_seeds: Optional[int] = None,
                 null_control: bool = False, cross_seeds: bool = False,
                 design: Literal["table", "factorial"] = "table",
                 factors: Optional[Sequence[str]] = None,
                 tune_each: Optional[Sequence[str]] = None, tune_budget: int = 8,
                 num_samples: int = 16, scheduler: Optional[Literal["asha", "fifo"]] = None,
                 auto_batch: bool = False, resolve_conflicts: bool = False,
                 metric: str = DEFAULT_METRIC, margin: str | float | None = None,
                 alpha: float = DEFAULT_ALPHA, cpus_per_trial: float = 1.0,
                 gpus_per_trial: float = 0.0,
                 address: Optional[str] = None, name: Optional[str] = None,
                 storage: str | Path = DEFAULT_STORAGE, num_cpus: Optional[int] = None,
                 max_concurrent: int = 0, max_failures: int = 0,
                 progress: bool = False) -> None:
        values = dict(
            space=str(space), seeds=Request.seeds_from(seeds), config=config, model=model,
            command=command, metrics=metrics,
            only=names(only), epochs=epochs, data=data,
            datasets=None if datasets is None else datasets if isinstance(datasets, Mapping)
            else names(datasets),
            max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
            seed_sources=seed_sources, pilot=pilot, max_seeds=max_seeds,
            null_control=null_control, cross_seeds=cross_seeds, design=design,
            factors=names(factors),
            tune_each=names(tune_each),
            tune_budget=tune_budget, num_samples=num_samples, scheduler=scheduler,
            auto_batch=auto_batch, resolve_conflicts=resolve_conflicts, metric=metric,
            margin=None if margin is None else str(margin), alpha=alpha,
            cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial, address=address,
            name=name, storage=str(storage),
            overrides=[(str(k), v) for k, v in (overrides or {}).items()])
        # the arguments this call named (records_given), whatever their values
        self.request = Request(**values, given=self._given & set(values))
        self.num_cpus, self.progress = num_cpus, progress
        self.max_concurrent, self.max_failures = max_concurrent, max_failures

    def plan(self) -> list:
        """The validated trials (``search_spaces.TrialSpec``: name, variant, seed, resolved
        config) that :meth:`run` starts with (with ``seeds="auto"``: the pilot's); nothing
        starts. Raises the command line's one-line errors."""
        return list(self._prepare().trials)

    def _prepare(self) -> Any:
        """Planning's ``Prepared``; its notes (e.g. the reference added to ``only``) as
        warnings."""
        from ablations.experiment.planning import prepare

        prepared = prepare(self.request)
        for note in prepared.notes:
            warnings.warn(named(note), stacklevel=3)
        return prepared

    def run(self) -> Results:
        """Run the experiment into ``storage/name`` (a new folder) and return its tables.
        Uses the Ray already initialised in this process, else connects to ``address`` or
        starts a local one (``num_cpus``), and shuts down what it started at the end."""
        import datetime as dt

        from ablations.experiment.options import RunOptions
        from ablations.experiment.preflight import auto_batch, check_data_on_workers

        request = self.request
        prepared = self._prepare()
        storage = storage_root(request.storage)
        name = request.name or f"{prepared.space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
        new_experiment_root(storage, name)
        options = RunOptions(storage=storage, name=name, space=prepared.space.name,
                             reference=prepared.space.reference, address=request.address,
                             cpus_per_trial=request.cpus_per_trial,
                             gpus_per_trial=request.gpus_per_trial,
                             max_concurrent=self.max_concurrent,
                             max_failures=self.max_failures,
                             reuse_workers=not prepared.space.isolate_trials,
                             dashboard=False, progress=self.progress,
                             command=["ablations.experiment.api.Experiment"])
        trials = prepared.trials
        with ray_for(trials, options, self.num_cpus):
            if request.address:
                check_data_on_workers(prepared.design.configs(trials), request)
            if request.auto_batch and trials:
                trials, options.auto_batch = auto_batch(request, trials)
            from ablations.experiment.runner import reading_own_code  # loads Ray

            with reading_own_code(trials), listening(print if self.progress else ignore):
                result = prepared.design.execute(trials, options, prepared.skipped)
        return results_of(result, prepared.design, reference=prepared.space.reference)

    @staticmethod
    def resume(name: Optional[str] = None, *, storage: str | Path = DEFAULT_STORAGE,
               seeds: Optional[Literal["auto"]] = None, max_seeds: Optional[int] = None,
               metric: Optional[str] = None, margin: str | float | None = None,
               alpha: Optional[float] = None, retry_failed: bool = False,
               allow_changed: bool = False, address: Optional[str] = None,
               num_cpus: Optional[int] = None, max_concurrent: int = 0,
               max_failures: int = 0, progress: bool = False) -> Results:
        """Continue the experiment ``name`` in ``storage`` (None: the one started or resumed
        last) as the command line's ``--resume`` does, whatever its design: finished trials
        are kept, unfinished ones continue from their saved state, failed ones are retried
        with ``retry_failed``; code or data changed since it started are refused unless
        ``allow_changed``. ``seeds="auto"`` continues a fixed-seed experiment into rounds
        (its seeds the pilot, up to ``max_seeds``; ``metric``, ``margin`` and ``alpha`` only
        where its planned design has none). Returns the whole experiment's tables."""
        from ablations.experiment.options import RunOptions
        from ablations.experiment.resuming import resume_plan

        values = {"seeds": seeds, "max_seeds": max_seeds, "metric": metric,
                  "margin": None if margin is None else str(margin), "alpha": alpha,
                  "address": address}
        given = {key: value for key, value in values.items() if value is not None}
        request = Request(**given, storage=str(storage), given=frozenset(given)).check()
        root = storage_root(request.storage)
        plan = resume_plan(root, name, request, retry_failed=retry_failed,
                           allow_changed=allow_changed)
        for line in plan.warnings:
            logging.getLogger(__name__).warning("resuming although it changed: %s", line)
        options = RunOptions(storage=root, name=plan.name, space=plan.space_name,
                             reference=plan.reference, address=address,
                             cpus_per_trial=plan.cpus_per_trial,
                             gpus_per_trial=plan.gpus_per_trial,
                             max_concurrent=max_concurrent, max_failures=max_failures,
                             retry_failed=retry_failed, reuse_workers=plan.reuse_workers,
                             dashboard=False, progress=progress,
                             command=["ablations.experiment.api.Experiment.resume"])
        from ablations.experiment.runner import reading_own_code  # loads Ray

        with ray_for(plan.trials, options, num_cpus), reading_own_code(plan.trials), \
                listening(print if progress else ignore):
            result = plan.design.execute(plan.trials, options, plan.skipped, resume=True)
        return results_of(result, plan.design, reference=plan.reference)


def ignore(event: Event) -> None:
    """A listener that drops every event."""


@contextlib.contextmanager
def ray_for(trials: Sequence[Any], options: Any, num_cpus: Optional[int]) -> Iterator[None]:
    """The Ray a run uses: the one initialised in this process, else ``options.address``'s
    cluster or a local one of ``num_cpus``; what it starts it shuts down."""
    import ray

    from ablations.experiment.runner import estimating_costs, init_ray

    started = False
    if not ray.is_initialized():
        with estimating_costs(trials):  # in a thread, while Ray starts
            if options.address:
                started, _ = init_ray(options, trials)
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False,
                         logging_level=logging.WARNING)
                started = True
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def results_of(result: Any, design: Any, *, reference: str) -> Results:
    """An ended run's :class:`Results`: its tables, the baseline check and the verdicts at the
    settings recorded before its data (:func:`ablations.results.stats.decisions.verdicts_of`), a
    factorial design's effects and a tuned ablation's side-by-side table, at the same
    settings."""
    from ablations.results.report.datasets_report import write_across
    from ablations.results.stats.decisions import (
        across_datasets_of,
        factorial_effects_of,
        tuned_comparison_of,
        verdicts_of,
    )

    verdicts, check = None, None
    meta = read_metadata(str(result.directory)) or {}
    if design.has_verdicts:
        check = record_baseline_check(result.directory, result.trials, result.epochs,
                                      reference=reference)
        try:
            verdicts = verdicts_of(result.trials, meta, reference=reference)
        except ValueError:  # no verdicts possible, e.g. no ok trial of the reference
            verdicts = None
    try:
        effects = factorial_effects_of(result.trials, meta, reference=reference)
    except ValueError:  # no effects possible
        effects = None
    try:
        tuned = tuned_comparison_of(result.trials, meta, reference=reference)
    except ValueError:  # no comparison possible
        tuned = None
    across = None
    if design.has_verdicts and verdicts is not None:
        try:
            across = across_datasets_of(result.trials, meta, reference=reference)
        except ValueError:  # no verdicts across the datasets possible
            across = None
        if across is not None:
            write_across(str(result.directory), across)
    return Results(str(result.directory), result.trials, result.epochs, result.predictions,
                   verdicts, result.wall_s, effects, check, tuned, across)

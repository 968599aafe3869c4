"""The runner as a library: an experiment as an object a notebook can hold, and the one run
path the command line uses too.

    from ablations import Decision, Experiment, Resources
    exp = Experiment("components", seeds=3, only=["baseline", "no_images"],
                     overrides={"epochs": 2}, decision=Decision(margin="2%"))
    trials = exp.plan()          # validated trials; nothing started
    results = exp.run()          # starts (and stops) a local Ray unless one is running
    results.verdicts             # the verdict table; results.trials / .epochs / .predictions
    print(results.summary)       # the table the command line prints

Arguments left out (None) are "not given": the defaults, or for a resumed experiment what it
recorded. The same planning as the command line (``ablations.experiment.planning.prepare``):
a bad value raises the same one-line ``ConfigError``/``UsageError`` before anything runs,
naming the argument (``max_seeds``) where the command line names its flag (``--max-seeds``).
While it runs, an experiment emits events (ablations/experiment/events.py) and prints
nothing; :meth:`Experiment.run`'s ``on_event`` receives them.
"""

from __future__ import annotations

import datetime as dt
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Literal, Mapping, Optional, Sequence

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.config.values import arg, named
from ablations.experiment import events
from ablations.experiment.events import Listener, listening
from ablations.experiment.request import (
    DEFAULT_STORAGE,
    Request,
    UsageError,
    check_name,
    rate_of,
    storage_root,
    time_limit_problem,
)
from ablations.results.io.files import first_line, join, list_dir, read_metadata
from ablations.results.stats.baseline_check import (
    BaselineCheck,
    DatasetChecks,
    record_baseline_check,
)


@dataclass(frozen=True)
class Seeds:
    """Which seeds every variant runs. None: not given."""

    seeds: int | Sequence[int] | Literal["auto"] | None = None  # 3: seeds 0, 1, 2; "auto": rounds
    pilot: Optional[int] = None  # seeds="auto": the first round's seeds
    max_seeds: Optional[int] = None  # the last look of the sequential design
    cross: Optional[bool] = None  # every init seed with every order seed (docs/seed-sources.md)
    null_control: Optional[bool] = None  # the reference again at other seeds, a null arm
    sources: Optional[str] = None  # which sources vary with the seed: "init,order,data"


@dataclass(frozen=True)
class Resources:
    """Where and how wide the trials run. None: not given."""

    cpus_per_trial: Optional[float] = None
    gpus_per_trial: Optional[float] = None
    max_concurrent: Optional[int] = None  # 0: as many as the resources allow
    max_failures: Optional[int] = None  # retries of a failed trial from its last checkpoint
    address: Optional[str] = None  # a Ray cluster; None: this process's Ray, or a local one
    num_cpus: Optional[int] = None  # the CPUs of the local Ray a run starts
    auto_batch: Optional[bool] = None  # probe the largest batch that fits the trial's GPU
    # each run of a trial ends past it as ``timeout``: seconds, or "90s", "15m", "2h"
    time_limit: Optional[float | str] = None
    # False: train every trial, even where another experiment under the same storage finished
    # one with its identity (None: reuse those, trial_store.py)
    reuse: Optional[bool] = None


@dataclass(frozen=True)
class Console:
    """What a front end puts around a run (the command line sets these; a notebook need not):
    the Ray dashboard, Tune's own output, a line per epoch, the command recorded in
    experiment.json, a context around ``Tuner.fit`` (given the run's options: the command
    line's SIGTERM handling) and what to do once Ray has started (the command line re-enters a
    Ray job's working folder and installs its signal handler)."""

    dashboard: bool = False
    verbose: bool = False
    progress_epochs: bool = False
    command: Sequence[str] = ("ablations.Experiment",)
    fit_guard: Optional[Callable[[Any], ContextManager[Any]]] = None
    after_ray_start: Optional[Callable[[], None]] = None
    # where the lines Tune prints beyond its start-up ones go (a trial's error block the
    # progress does not replace; None: with the start-up ones, in tune_console.log)
    tune_console: Any = None


@dataclass
class Results:
    """What :meth:`Experiment.run` and :meth:`Experiment.resume` return: the experiment's
    folder and tables, its verdicts as its design decides them, and the text the command line
    prints of them."""

    directory: str
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    # None when no verdict is possible (e.g. no ok reference); over several datasets each
    # dataset's verdicts, one below the other, with a ``dataset`` column
    verdicts: Optional[pd.DataFrame]
    wall_s: float
    # the reference against the training mean and its last epoch
    # (ablations.results.stats.baseline_check); None without verdicts
    baseline_check: Optional[BaselineCheck | DatasetChecks] = None
    # the design's own tables by name (a factorial design's ``effects``, a tuned ablation's
    # ``tuned``: Design.tables) and over several datasets ``across``, each variant's verdict
    # across them (ablations.results.stats.datasets; across_datasets.parquet)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    name: str = ""
    storage: str = ""
    # the reference, metric, margin, alpha and tolerance the verdicts were decided with
    decision: Decision = NOT_GIVEN
    # the summary's table and notes (ablations/results/report/summary.py), the design's lines
    # after it and at the end, and the command that decides the inconclusive variants (None:
    # nothing to decide); text with the library's markers, str(...)-ready via ``named``
    summary: str = ""
    design_lines: list[str] = field(default_factory=list)
    closing_lines: list[str] = field(default_factory=list)
    continuation: Optional[str] = None
    # why the run stopped launching trials (its first trials failed alike,
    # ablations/experiment/fail_fast.py); None when it did not
    stopped_early: Optional[str] = None

    @property
    def across(self) -> Optional[pd.DataFrame]:
        """``tables["across"]``: over several datasets, the verdicts across them."""
        return self.tables.get("across")

    @property
    def unfinished(self) -> int:
        """Trials a stop left unfinished (interrupted or not started): resume to end them."""
        return int(self.trials["status"].isin(list(UNFINISHED)).sum())

    def counts(self) -> dict[str, int]:
        """How many trials ended in each status."""
        return {str(status): int((self.trials["status"] == status).sum())
                for status in TrialStatus}

    def __str__(self) -> str:
        return named(self.summary)


class Interrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, or SIGTERM where the command line makes it one) before the results were
    written; the trials' saved state is kept: resume the experiment ``name`` in
    ``storage`` to continue."""

    def __init__(self, storage: str, name: str, address: Optional[str] = None) -> None:
        super().__init__(f"{name} interrupted before its results were written")
        self.storage, self.name, self.address = storage, name, address


def seeds_of(seeds: int | Sequence[int] | str | Seeds | None) -> Seeds:
    return seeds if isinstance(seeds, Seeds) else Seeds(seeds=seeds)


def names(given: Optional[Sequence[str]]) -> Optional[list[str]]:
    """A list of names as given (a string stays a string: the request's check refuses it
    rather than splitting it into letters)."""
    return given if given is None or isinstance(given, str) else list(given)


def time_limit_of(given: Optional[float | str]) -> Optional[float]:
    """A time limit in seconds (None: not given); one UsageError for one that is not."""
    if given is None:
        return None
    from ablations.trial.time_limit import parse_duration

    problem = time_limit_problem(given)
    if problem:
        raise UsageError(f"{arg('time_limit')}: {problem}")
    return parse_duration(given)


def request_of(space: Optional[str], seeds: Seeds, decision: Decision, resources: Resources,
               **values: Any) -> Request:
    """The :class:`Request` of an experiment's arguments: the fields given (not None) and
    the request's defaults for the rest; ``Request.given`` says which were given."""
    data = values.pop("data", None)
    if isinstance(data, (Mapping, list, tuple)):  # several datasets (docs/datasets.md)
        values["datasets"] = data if isinstance(data, Mapping) else names(data)
    elif data is not None:
        values["data"] = str(data)
    overrides = values.pop("overrides", None)
    if overrides is not None:
        values["overrides"] = [(str(k), v) for k, v in dict(overrides).items()]
    for key in ("only", "factors", "tune_each"):
        values[key] = names(values.get(key))
    if space is not None:
        values["space"] = str(space)
    if decision.reference is not None:
        raise UsageError(f"decision reference {decision.reference!r}: an experiment compares "
                         "every variant with its space's reference; name it in the space "
                         "file (reference: NAME); a finished one is read against another "
                         "by the report's reference")
    rate = rate_of(decision.max_failure_rate)  # NaN (no rate) is not equal to itself
    values.update(
        seeds=None if seeds.seeds is None else Request.seeds_from(seeds.seeds),
        pilot=seeds.pilot, max_seeds=seeds.max_seeds, cross_seeds=seeds.cross,
        null_control=seeds.null_control, seed_sources=seeds.sources,
        metric=decision.metric, alpha=decision.alpha,
        # "10%" as the flag takes it; what is no rate reaches the check as given
        max_failure_rate=rate if rate is None or rate == rate else decision.max_failure_rate,
        margin=None if decision.margin is None else str(decision.margin),
        cpus_per_trial=resources.cpus_per_trial, gpus_per_trial=resources.gpus_per_trial,
        address=resources.address, auto_batch=resources.auto_batch,
        time_limit=time_limit_of(resources.time_limit))
    if values.get("storage") is not None:
        values["storage"] = str(values["storage"])
    given = {key: value for key, value in values.items() if value is not None}
    return Request(**given, given=frozenset(given))


class Experiment:
    """An ablation experiment: a space (a built-in name or a YAML file), its seeds, the base
    configuration, how to decide and where to run it (docs/command-line.md, "From Python").

    Args:
        space: a built-in space's name or a space file.
        seeds: a count (3: seeds 0, 1, 2), a list, ``"auto"`` (rounds), or :class:`Seeds`.
        decision: the verdicts' metric, margin and alpha (:class:`Decision`).
        resources: CPUs and GPUs per trial, concurrency, a cluster (:class:`Resources`).
        model: own code, a training function or a plugin: ``package.module:NAME``.
        command: a program to ablate, its command line with ``{key}`` fields, and
            ``metrics`` its metrics (``{"test_acc": "higher"}``; docs/own-code.md).
        config: a YAML file of config keys or a preset's name; ``overrides``: key -> value.
        only: the variants to run (the reference is added).
        epochs, max_train_examples, max_eval_examples: the built-in model's budget.
        data: a data directory or ``"synthetic"``; several datasets as a list
            (``["NAME=DIR", "DIR", "synthetic"]``) or a mapping name -> a directory,
            ``"synthetic"`` or the keys that select it (docs/datasets.md).
        design: ``"factorial"`` with ``factors`` (docs/factorial.md), or a design of one's
            own (a registered name or ``"package.module:Class"``, docs/architecture.md);
            ``tune_each`` keys and
            ``tune_budget`` (docs/tuned.md); a search space's ``num_samples`` and
            ``scheduler``; ``resolve_conflicts`` maps unsafe switch combinations.
        name, storage: the experiment's folder is ``storage/name``; a folder of the same
            plan is resumed, with ``allow_changed`` even where the code or data changed.
        log_to: trackers, e.g. ``["mlflow", "wandb:project"]`` (docs/trackers.md).
        progress: the run's progress as events to ``run``'s ``on_event``: each trial's end,
            a status about once a second (ablations/experiment/events.py).
    """

    def __init__(self, space: str | Path = "components", *,
                 seeds: int | Sequence[int] | Literal["auto"] | Seeds | None = None,
                 decision: Optional[Decision] = None, resources: Optional[Resources] = None,
                 model: Optional[str] = None, command: Optional[str] = None,
                 metrics: Optional[Mapping[str, Any]] = None, config: Optional[str] = None,
                 overrides: Optional[Mapping[str, Any]] = None,
                 only: Optional[Sequence[str]] = None, epochs: Optional[int] = None,
                 data: str | Path | Sequence[str] | Mapping[str, Any] | None = None,
                 max_train_examples: Optional[int] = None,
                 max_eval_examples: Optional[int] = None,
                 design: Optional[str] = None,
                 factors: Optional[Sequence[str]] = None,
                 tune_each: Optional[Sequence[str]] = None, tune_budget: Optional[int] = None,
                 num_samples: Optional[int] = None,
                 scheduler: Optional[Literal["asha", "fifo"]] = None,
                 resolve_conflicts: Optional[bool] = None, name: Optional[str] = None,
                 storage: str | Path | None = None, log_to: Sequence[str] = (),
                 allow_changed: bool = False, progress: bool = False) -> None:
        resources = resources or Resources()
        request = request_of(
            str(space), seeds_of(seeds), decision or Decision(), resources, model=model,
            command=command, metrics=None if metrics is None else dict(metrics),
            config=config, overrides=overrides, only=only, epochs=epochs, data=data,
            max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
            design=design, factors=factors, tune_each=tune_each, tune_budget=tune_budget,
            num_samples=num_samples, scheduler=scheduler,
            resolve_conflicts=resolve_conflicts, name=name, storage=storage)
        self._setup(request, resources, tracker_specs(log_to), progress, allow_changed)

    @classmethod
    def from_request(cls, request: Request, *, resources: Optional[Resources] = None,
                     log_to: Sequence[Any] = (), allow_changed: bool = False,
                     progress: bool = False) -> Experiment:
        """The experiment a :class:`Request` asks for (the command line's flags parse into
        one); ``resources``' run options (concurrency, retries, a local Ray's CPUs)."""
        experiment = cls.__new__(cls)
        experiment._setup(request, resources or Resources(), tracker_specs(log_to), progress,
                          allow_changed)
        return experiment

    def _setup(self, request: Request, resources: Resources, log_to: list[Any],
               progress: bool, allow_changed: bool) -> None:
        self.request, self.resources, self.log_to = request, resources, log_to
        self.progress, self.allow_changed = progress, allow_changed

    def plan(self) -> list:
        """The validated trials (``search_spaces.TrialSpec``: name, variant, seed, resolved
        config) that :meth:`run` starts with (with ``seeds="auto"``: the pilot's); nothing
        starts. Raises the command line's one-line errors."""
        return list(self.prepared().trials)

    def prepared(self) -> Any:
        """Planning's ``Prepared`` (ablations/experiment/planning.py): the space, the base
        configuration, the trials, the skipped cells, the seeds and the design; its notes
        (e.g. the reference added to ``only``) as warning events."""
        prepared = self._prepare()
        for note in prepared.notes:
            events.warning(note)
        return prepared

    def _prepare(self) -> Any:
        from ablations.experiment.planning import prepare

        return prepare(self.request)

    def run(self, on_event: Optional[Listener] = None,
            console: Optional[Console] = None) -> Results:
        """Run the experiment into ``storage/name`` and return its tables and verdicts. A folder
        that holds the same plan already is resumed (finished trials kept); one that holds
        another experiment is refused. Uses the Ray already initialised in this process, else
        connects to ``resources.address`` or starts a local one, and shuts down what it
        started. ``on_event`` receives the run's events (None: they go to Python's logging,
        ``ablations.events``; nothing is printed). The command line's view of them, a bar
        on a terminal: ``on_event=ablations.cli.progress.ConsoleView()``."""
        with listening(on_event):
            prepared = self._prepare()
            storage, name, trials, design, grown, resume = self._under_name(prepared)
            for note in prepared.notes:  # after the name's checks: a refusal is one line
                events.warning(note)
            run = _Run(name=name, storage=storage, space=prepared.space.name,
                       reference=prepared.space.reference, trials=list(trials),
                       skipped=list(prepared.skipped), design=design, seeds=prepared.seeds,
                       reuse_workers=not prepared.space.isolate_trials,
                       cpus_per_trial=self.request.cpus_per_trial,
                       gpus_per_trial=self.request.gpus_per_trial,
                       crossed=bool(self.request.cross_seeds), resume=resume, grown=grown,
                       time_limit_s=(self.request.time_limit if self.request.time_limit
                                     is not None else prepared.space.time_limit_s))
            return _execute(run, self.request, self.resources, self.log_to, self.progress,
                            console or Console())

    @staticmethod
    def resume(name: Optional[str] = None, *, storage: str | Path = DEFAULT_STORAGE,
               seeds: Optional[Literal["auto"]] = None, max_seeds: Optional[int] = None,
               decision: Optional[Decision] = None, retry_failed: bool = False,
               allow_changed: bool = False, resources: Optional[Resources] = None,
               log_to: Sequence[str] = (), progress: bool = False,
               on_event: Optional[Listener] = None,
               console: Optional[Console] = None) -> Results:
        """Continue the experiment ``name`` in ``storage`` (None: the one started or resumed
        last) as the command line's ``--resume`` does, whatever its design: finished trials
        are kept, unfinished ones continue from their saved state, failed ones are retried
        with ``retry_failed``; code or data changed since it started are refused unless
        ``allow_changed``. ``seeds="auto"`` continues a fixed-seed experiment into rounds
        (its seeds the pilot, up to ``max_seeds``; ``decision`` only where its planned
        design has none). Returns the whole experiment's tables."""
        resources = resources or Resources()
        request = request_of(None, Seeds(seeds=seeds, max_seeds=max_seeds),
                             decision or Decision(), resources, storage=storage).check()
        return resume_request(name, request, resources=resources, retry_failed=retry_failed,
                              allow_changed=allow_changed, log_to=tracker_specs(log_to),
                              progress=progress, on_event=on_event, console=console)

    def preview(self, on_event: Optional[Listener] = None) -> Preview:
        """What :meth:`run` would do, nothing started and nothing written to the storage: the
        plan, and where its ``name`` holds an experiment already (the storage is read), whether
        the plan resumes or grows it (the same events and one-line refusals as :meth:`run`)
        and which of its trials that experiment finished ok or diverged. Without a name
        (a new, timestamped one) the storage is not read."""
        from ablations.experiment.trial_store import finished_trials

        with listening(on_event):
            prepared = self._prepare()
            storage, name, trials, design, grown, existing = self._under_name(
                prepared, look=self.request.name is not None)
            for note in prepared.notes:
                events.warning(note)
        kept = finished_trials(join(storage, name)) if existing else set()
        return Preview(prepared=prepared, name=name, target=join(storage, name),
                       trials=list(trials), design=design, existing=existing, grown=grown,
                       kept=[spec.name for spec in trials if spec.name in kept])

    def _under_name(self, prepared: Any, look: bool = True
                    ) -> tuple[str, str, list, Any, Optional[dict], bool]:
        """The storage, the name, the trials, the design and the growth's record (None:
        none) that ``prepared`` runs as under its name, and whether the name holds an
        experiment: the same plan resumes it, the recorded table plus new variants grows it,
        another is refused (ablations/experiment/resuming.py). ``look=False``: the storage
        is neither checked nor read (a dry run's new name)."""
        storage = storage_root(self.request.storage) if look else str(self.request.storage)
        name = check_name(self.request.name
                          or f"{prepared.space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}")
        trials, design, grown = prepared.trials, prepared.design, None
        if not look:
            return storage, name, list(trials), design, grown, False
        try:
            existing = bool(list_dir(join(storage, name)))
        except OSError as exc:  # the store answered check_bucket, then stopped answering
            raise UsageError(f"{arg('storage')} {storage}: cannot read "
                             f"{join(storage, name)}: {first_line(exc)}") from None
        if existing:
            from ablations.experiment.resuming import same_name_again

            trials, design, grown = same_name_again(
                self.request, join(storage, name), name, prepared,
                allow_changed=self.allow_changed)
        return storage, name, list(trials), design, grown, existing

def resume_preview(name: Optional[str], request: Request, *, retry_failed: bool = False,
                   allow_changed: bool = False, on_event: Optional[Listener] = None) -> Any:
    """What the resume of experiment ``name`` (None: the one started or resumed last) would
    do, nothing started or written: its plan (resuming.py's ``ResumePlan``), after the same
    checks, warnings and line on what it keeps, continues and starts as the resume."""
    from ablations.experiment.resuming import resume_plan

    with listening(on_event):
        storage = storage_root(request.storage)
        plan = resume_plan(storage, name, request, retry_failed=retry_failed,
                           allow_changed=allow_changed)
        for line in plan.warnings:
            events.warning(f"resuming although it changed ({arg('allow_changed')}): {line}")
        if plan.notes:
            events.warning(f"since the experiment started: {'; '.join(plan.notes)}")
        if plan.continued:
            events.info(plan.design.continued_line(plan.name, plan.space_name, plan.seeds))
        else:
            events.info(plan.design.resume_line(plan.name, plan.space_name,
                                                join(storage, plan.name), plan.trials,
                                                retry_failed))
    return plan


def resume_request(name: Optional[str], request: Request, *, resources: Resources,
                   retry_failed: bool = False, allow_changed: bool = False,
                   log_to: Sequence[Any] = (), progress: bool = False,
                   on_event: Optional[Listener] = None,
                   console: Optional[Console] = None) -> Results:
    """:meth:`Experiment.resume` of a :class:`Request` (the command line's ``--resume``)."""
    plan = resume_preview(name, request, retry_failed=retry_failed,
                          allow_changed=allow_changed, on_event=on_event)
    storage = plan.storage
    with listening(on_event):
        run = _Run(name=plan.name, storage=storage, space=plan.space_name,
                   reference=plan.reference, trials=list(plan.trials),
                   skipped=list(plan.skipped), design=plan.design, seeds=plan.seeds,
                   reuse_workers=plan.reuse_workers, cpus_per_trial=plan.cpus_per_trial,
                   gpus_per_trial=plan.gpus_per_trial, crossed=False, resume=True,
                   retry_failed=retry_failed,
                   time_limit_s=(request.time_limit if request.time_limit is not None
                                 else plan.time_limit_s))
        return _execute(run, request, resources, log_to, progress, console or Console())


def tracker_specs(log_to: Sequence[Any]) -> list[Any]:
    """Trackers as given (``"mlflow"``, ``"wandb:project"``, or parsed specs), parsed."""
    if not log_to:
        return []
    from ablations.experiment.trackers.specs import parse_log_to

    out = []
    for item in ([log_to] if isinstance(log_to, str) else log_to):
        try:
            out.append(item if not isinstance(item, str) else parse_log_to(item))
        except ValueError as exc:
            raise UsageError(f"log_to {item!r}: {exc}") from None
    return out


@dataclass
class Preview:
    """:meth:`Experiment.preview`: what a run would do."""

    prepared: Any  # planning's Prepared: the space, the base configuration, seeds, design
    name: str
    target: str  # the experiment's folder under the storage
    trials: list  # the trials the run would hold (a growth: the whole table)
    design: Any
    existing: bool  # the name holds an experiment already (resumed or grown)
    grown: Optional[dict[str, Any]]  # the growth's record (resuming.growth); None: none
    # of ``trials``, those the experiment finished ok or diverged (a growth keeps them all;
    # a resume of the same plan also keeps what Tune's state holds: its resume line says)
    kept: list[str]


@dataclass
class _Run:
    """What one run of an experiment needs, new or resumed."""

    name: str
    storage: str
    space: str
    reference: str
    trials: list
    skipped: list
    design: Any
    seeds: Sequence[int]
    reuse_workers: bool
    cpus_per_trial: float
    gpus_per_trial: float
    crossed: bool
    resume: bool
    retry_failed: bool = False
    time_limit_s: Optional[float] = None  # each run of a trial (trial/time_limit.py)
    grown: Optional[dict[str, Any]] = None  # variants added to a finished table (resuming.py)


def _execute(run: _Run, request: Request, resources: Resources, log_to: Sequence[Any],
             progress: bool, console: Console) -> Results:
    """The one run path: Ray, the checks that need it, the trials, then the verdicts, the
    summary, the trackers' verdicts and what continues the experiment."""
    import ray

    from ablations.experiment.continuing import trial_slots
    from ablations.experiment.options import RunOptions
    from ablations.experiment.preflight import auto_batch, check_data_on_workers
    from ablations.experiment.runner import estimating_costs, init_ray

    root = join(run.storage, run.name)
    options = RunOptions(
        storage=run.storage, name=run.name, space=run.space, reference=run.reference,
        address=resources.address, cpus_per_trial=run.cpus_per_trial,
        gpus_per_trial=run.gpus_per_trial, max_concurrent=resources.max_concurrent or 0,
        max_failures=resources.max_failures or 0, retry_failed=run.retry_failed,
        time_limit_s=run.time_limit_s,
        reuse_workers=run.reuse_workers, reuse=resources.reuse is not False, grown=run.grown,
        dashboard=console.dashboard,
        verbose=1 if console.verbose else 0, progress=progress,
        progress_epochs=console.progress_epochs, command=list(console.command),
        tune_console=console.tune_console)
    if console.fit_guard is not None:
        options.fit_guard = lambda: console.fit_guard(options)
    if log_to or run.resume:  # MLflow / W&B: Ray Tune's callbacks (trackers/specs.py)
        from ablations.experiment.trackers.specs import tracker_callbacks

        tracked = tracker_callbacks(log_to, root, experiment=run.name, space=run.space,
                                    resume=run.resume, grown=run.grown)
        options.trackers = [callback for _, callback in tracked]
        options.tracker_specs = [spec for spec, _ in tracked]
    from ablations.experiment.cluster import ClusterUnreachable, job_runtime_env

    if not resources.address and job_runtime_env() is not None:
        raise UsageError(f"running as a Ray job without {arg('address')}: this would start "
                         f"a private Ray on one node; pass {arg('address')} auto to use "
                         "the job's cluster")
    trials = run.trials
    try:
        with estimating_costs(trials):  # in a thread, while Ray starts
            started, dashboard_url = init_ray(options, trials, resources.num_cpus)
    except ClusterUnreachable as exc:
        raise UsageError(str(exc)) from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot connect to Ray at {resources.address or 'local'}: "
                         f"{first_line(exc)}") from None
    try:
        if console.after_ray_start is not None:
            console.after_ray_start()
        cluster = ray.cluster_resources()
        slots = trial_slots(cluster, run.cpus_per_trial, run.gpus_per_trial,
                            options.max_concurrent)
        events.info(f"Experiment {run.name}: space {run.space}, "
                    f"{run.design.count_text(trials, run.seeds, crossed=run.crossed)}, "
                    f"{run.cpus_per_trial:g} CPU + {run.gpus_per_trial:g} GPU per trial, "
                    f"Ray with {cluster.get('CPU', 0):g} CPUs / {cluster.get('GPU', 0):g} "
                    "GPUs")
        if run.cpus_per_trial > cluster.get("CPU", 0) or \
                run.gpus_per_trial > cluster.get("GPU", 0):
            raise UsageError(
                f"a trial asks for {run.cpus_per_trial:g} CPU / {run.gpus_per_trial:g} GPU but "
                f"the cluster has {cluster.get('CPU', 0):g} / {cluster.get('GPU', 0):g}; "
                f"lower {arg('cpus_per_trial')} / {arg('gpus_per_trial')}")
        if resources.address:
            check_data_on_workers(run.design.configs(trials), request)
        if dashboard_url:
            events.info(f"Ray dashboard: http://{dashboard_url.removeprefix('http://')} "
                        "(token authentication: `ray get-auth-token` prints the token)")
        events.info(f"Results: {root}")
        logdir = join(run.storage, run.name, run.design.tensorboard_dir).rstrip("/")
        events.info(f"TensorBoard: tensorboard --logdir {shlex.quote(logdir)}")
        for tracker in options.trackers:
            events.info(tracker.describe())
        if request.auto_batch and trials and not run.resume:  # a resume keeps its size
            trials, options.auto_batch = auto_batch(request, trials)
        result = run.design.execute(trials, options, run.skipped, resume=run.resume)
    except KeyboardInterrupt:  # outside Tuner.fit (a stop inside it ends the run normally)
        raise Interrupted(run.storage, run.name, resources.address) from None
    finally:
        if started:
            ray.shutdown()
    return results_of(result, run, request, options, slots)


def results_of(result: Any, run: _Run, request: Request, options: Any,
               slots: Optional[int]) -> Results:
    """An ended run's :class:`Results`: its tables, the baseline check, the verdicts at the
    settings recorded before its data unless the request gives others
    (:func:`ablations.results.stats.decisions.verdicts_of`), the summary, the design's own
    tables at the same settings (:meth:`Design.tables`), the verdicts across datasets
    (written beside trials.parquet), the trackers' copy of the verdicts, and the command
    that decides the inconclusive variants."""
    from ablations.results.report.designs import report_of
    from ablations.results.stats.analyses import analysis_of
    from ablations.results.stats.decisions import decision_of

    design, df = run.design, result.trials
    meta = read_metadata(str(result.directory)) or {}
    given = {key: getattr(request, key) for key in ("metric", "margin", "alpha")
             if key in request.given}
    decision = decision_of(meta, Decision(reference=run.reference, **given))
    # the design's analysis: over several datasets each one's verdicts, then across them
    analysis = analysis_of(meta, df)
    summary, verdicts, across = report_of(analysis).summary(
        df, decision, with_verdicts=design.has_verdicts)
    if across is not None:  # beside trials.parquet, as the report writes it too
        from ablations.results.report.datasets_report import write_across

        write_across(str(result.directory), across)
    check = None
    if design.has_verdicts:  # one line above the verdicts; baseline_check.json in the folder
        check = record_baseline_check(result.directory, df, result.epochs,
                                      reference=decision.reference, analysis=analysis)
    tables = {**design.tables(df, meta, decision),
              **({"across": across} if across is not None else {})}
    results = Results(
        str(result.directory), df, result.epochs, result.predictions, verdicts, result.wall_s,
        check, tables, name=run.name, storage=run.storage,
        decision=decision, summary=summary,
        design_lines=design.summary_lines(df, meta, decision),
        closing_lines=design.closing_lines(result.directory),
        stopped_early=meta.get("stopped_early"))
    if options.trackers:  # the verdicts as each tracker's <name>-verdicts run
        from ablations.experiment.trackers.specs import publish_summary

        publish_summary(options.trackers, named(summary), verdicts, across)
    if not results.unfinished and design.continues_into_rounds:
        results.continuation = _continuation(results, meta, options, slots)
    return results


def _continuation(results: Results, meta: dict[str, Any], options: Any,
                  slots: Optional[int]) -> Optional[str]:
    """A fixed run's inconclusive variants and the one command that decides them; None for a
    run planned at one look (its seeds reached its last: final verdicts) or crossed."""
    from ablations.experiment.continuing import continuation_hint
    from ablations.results.stats.decisions import with_declared_metric
    from ablations.results.stats.planned import pilot_design

    planned = meta.get("planned")
    design = pilot_design(planned)
    if results.verdicts is None or (planned is not None and design is None):
        return None
    try:
        return continuation_hint(results.trials, results.verdicts, storage=results.storage,
                                 name=results.name, address=options.address,
                                 max_concurrent=options.max_concurrent, slots=slots,
                                 fixed_wall_s=results.wall_s,
                                 max_seeds=design.max_seeds if design else None,
                                 decision=with_declared_metric(meta, results.decision))
    except (ValueError, KeyError):  # the pilot look's table cannot be made: nothing to decide
        return None


__all__ = ["Console", "Decision", "Experiment", "Interrupted", "Resources", "Results", "Seeds"]

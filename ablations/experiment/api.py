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
recorded. The same planning as the command line (``ablations.experiment.prepare.prepare``):
a bad value raises the same one-line ``ConfigError``/``UsageError`` before anything runs,
naming the argument (``max_seeds``) where the command line names its flag (``--max-seeds``).
While it runs, an experiment emits events (ablations/experiment/core/events.py) and prints
nothing; :meth:`Experiment.run`'s ``on_event`` receives them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence


from ablations.config.comparison import Decision
from ablations.config.values import arg
from ablations.experiment.core import events
from ablations.experiment.core.design_options import DesignOptions, Rounds
from ablations.experiment.core.events import Listener, listening
from ablations.experiment.execute import Run, execute
from ablations.experiment.core.groups import (
    Console,
    Interrupted,
    Preview,
    Resources,
    Results,
    Seeds,
)
from ablations.experiment.core.request import (
    DEFAULT_STORAGE,
    Request,
    UsageError,
    check_name,
    given_names,
    rate_of,
    storage_root,
    time_limit_problem,
)
from ablations.results.io.files import first_line, join, list_dir


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
    values["only"] = names(values.get("only"))
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
        cross_seeds=seeds.cross,
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
    if values.get("design") == "table":  # the default, named
        values["design"] = None
    given = {key: value for key, value in values.items() if value is not None}
    return Request(**given, given=given_names(given, given.get("design")))


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
        design: a built-in design with its options (``Factorial(factors=[...])``,
            docs/factorial.md; ``Tuned(each=[...], budget=8)``, docs/tuned.md; a search
            space's ``Search(num_samples=16, scheduler="asha")``; ``Rounds(pilot=3,
            max_seeds=10)``, docs/verdicts.md: the rounds of ``seeds="auto"``, or with fixed
            seeds the rounds a table plans to be continued into), or a design of one's own
            (a registered name or ``"package.module:Class"``, docs/architecture.md); None: a
            table, rounds with ``seeds="auto"``, a search space's search.
        resolve_conflicts: map unsafe switch combinations.
        name, storage: the experiment's folder is ``storage/name``; a folder of the same
            plan is resumed, with ``allow_changed`` even where the code or data changed.
        log_to: trackers, e.g. ``["mlflow", "wandb:project"]`` (docs/trackers.md).
        progress: the run's progress as events to ``run``'s ``on_event``: each trial's end,
            a status about once a second (ablations/experiment/core/events.py).
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
                 design: DesignOptions | str | None = None,
                 resolve_conflicts: Optional[bool] = None, name: Optional[str] = None,
                 storage: str | Path | None = None, log_to: Sequence[str] = (),
                 allow_changed: bool = False, progress: bool = False) -> None:
        resources = resources or Resources()
        request = request_of(
            str(space), seeds_of(seeds), decision or Decision(), resources, model=model,
            command=command, metrics=None if metrics is None else dict(metrics),
            config=config, overrides=overrides, only=only, epochs=epochs, data=data,
            max_train_examples=max_train_examples, max_eval_examples=max_eval_examples,
            design=design, resolve_conflicts=resolve_conflicts, name=name, storage=storage)
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
        """Planning's ``Prepared`` (ablations/experiment/prepare.py): the space, the base
        configuration, the trials, the skipped cells, the seeds and the design; its notes
        (e.g. the reference added to ``only``) as warning events."""
        prepared = self._prepare()
        for note in prepared.notes:
            events.warning(note)
        return prepared

    def _prepare(self) -> Any:
        from ablations.experiment.prepare import prepare

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
            run = Run(name=name, storage=storage, space=prepared.space.name,
                       reference=prepared.space.reference, trials=list(trials),
                       skipped=list(prepared.skipped), design=design, seeds=prepared.seeds,
                       reuse_workers=not prepared.space.isolate_trials,
                       cpus_per_trial=self.request.cpus_per_trial,
                       gpus_per_trial=self.request.gpus_per_trial,
                       crossed=bool(self.request.cross_seeds), resume=resume, grown=grown,
                       time_limit_s=(self.request.time_limit if self.request.time_limit
                                     is not None else prepared.space.time_limit_s))
            return execute(run, self.request, self.resources, self.log_to, self.progress,
                            console or Console())

    @staticmethod
    def resume(name: Optional[str] = None, *, storage: str | Path = DEFAULT_STORAGE,
               seeds: Optional[Literal["auto"]] = None, design: Optional[Rounds] = None,
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
        (its seeds the pilot, up to ``design``'s ``Rounds(max_seeds=...)``; ``decision``
        only where its planned design has none). Returns the whole experiment's tables."""
        resources = resources or Resources()
        request = request_of(None, Seeds(seeds=seeds), decision or Decision(), resources,
                             storage=storage, design=design).check()
        return resume_request(name, request, resources=resources, retry_failed=retry_failed,
                              allow_changed=allow_changed, log_to=tracker_specs(log_to),
                              progress=progress, on_event=on_event, console=console)

    def preview(self, on_event: Optional[Listener] = None) -> Preview:
        """What :meth:`run` would do, nothing started and nothing written to the storage: the
        plan, and where its ``name`` holds an experiment already (the storage is read), whether
        the plan resumes or grows it (the same events and one-line refusals as :meth:`run`)
        and which of its trials that experiment finished ok or diverged. Without a name
        (a new, timestamped one) the storage is not read."""
        from ablations.experiment.provenance.trial_store import finished_trials

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
        run = Run(name=plan.name, storage=storage, space=plan.space_name,
                   reference=plan.reference, trials=list(plan.trials),
                   skipped=list(plan.skipped), design=plan.design, seeds=plan.seeds,
                   reuse_workers=plan.reuse_workers, cpus_per_trial=plan.cpus_per_trial,
                   gpus_per_trial=plan.gpus_per_trial, crossed=False, resume=True,
                   retry_failed=retry_failed,
                   time_limit_s=(request.time_limit if request.time_limit is not None
                                 else plan.time_limit_s))
        return execute(run, request, resources, log_to, progress, console or Console())


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


__all__ = ["Console", "Decision", "Experiment", "Interrupted", "Resources", "Results", "Seeds"]

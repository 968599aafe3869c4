"""The one run path of an experiment, new or resumed (:func:`execute`): its options, Ray, the
checks that need it, the design's trials, then its :class:`~ablations.experiment.core.groups.
Results` (:func:`results_of`): the verdicts, the summary, the design's own tables, the
trackers' verdicts and the command that continues it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ablations.config.comparison import Decision
from ablations.config.values import arg, named
from ablations.experiment.core import events
from ablations.experiment.core.groups import Console, Interrupted, Resources, Results
from ablations.experiment.core.request import Request, UsageError
from ablations.results.io.files import first_line, join, read_metadata
from ablations.results.stats.baseline_check import record_baseline_check


@dataclass
class Run:
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


def execute(run: Run, request: Request, resources: Resources, log_to: Sequence[Any],
             progress: bool, console: Console) -> Results:
    """The one run path: Ray, the checks that need it, the trials, then the verdicts, the
    summary, the trackers' verdicts and what continues the experiment."""
    import ray

    from ablations.experiment.continuing import trial_slots
    from ablations.experiment.planning.preflight import auto_batch, check_data_on_workers
    from ablations.experiment.execution.runner import estimating_costs, init_ray

    root = join(run.storage, run.name)
    options = run_options(run, resources, log_to, progress, console)
    from ablations.experiment.execution.cluster import ClusterUnreachable, job_runtime_env

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


def run_options(run: Run, resources: Resources, log_to: Sequence[Any], progress: bool,
                console: Console) -> Any:
    """The runner's :class:`~ablations.experiment.core.options.RunOptions` of a run: where, how
    wide, what the front end puts around it, and the trackers' callbacks (``log_to``; a
    resume's too: those it recorded)."""
    from ablations.experiment.core.options import RunOptions

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
    return options


def results_of(result: Any, run: Run, request: Request, options: Any,
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
    summary, verdicts, across = report_of(analysis).summary(df, decision)
    if across is not None:  # beside trials.parquet, as the report writes it too
        from ablations.results.report.datasets_report import write_across

        write_across(str(result.directory), across)
    # one line above the verdicts, baseline_check.json in the folder (None for a search)
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
    if not results.unfinished and design.may_continue(meta):
        results.continuation = continuation_of(results, meta, options, slots)
    return results


def continuation_of(results: Results, meta: dict[str, Any], options: Any,
                  slots: Optional[int]) -> Optional[str]:
    """A fixed run's inconclusive variants and the one command that decides them, up to the
    most seeds its planned record holds (:meth:`Design.may_continue` says whether there is
    one); None where no verdict is possible."""
    from ablations.experiment.continuing import continuation_hint
    from ablations.results.stats.decisions import with_declared_metric
    from ablations.results.stats.planned import pilot_design

    design = pilot_design(meta.get("planned"))
    if results.verdicts is None:
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

"""The ``run`` command: start, resume or plan (``--dry-run``) an experiment, a thin shell over
the library: its flags become a :class:`~ablations.experiment.request.Request`, planning turns
it into validated trials and a design, and the design runs them. Loaded by main.py once the
command line is parsed (``--help`` and a bad flag load none of it).

Every bad input (flag, YAML key or value, data directory, experiment name) is caught before any
trial starts and reported as one line on stderr with exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import re
import signal
import sys
from typing import Any, Optional, Sequence

from ablations.config.comparison import DEFAULT_REFERENCE
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.cli.console import say_notes, spoken
from ablations.cli.flags import EXIT_INTERRUPTED
from ablations.cli.output import (
    summary_table,
    tune_lines,
)
from ablations.cli.datasets_text import datasets_summary
from ablations.cli.requests import request_from
from ablations.cli.resume import resume_plan, same_name_again
from ablations.cli.signals import sigterm_as_sigint, sigterm_is_ctrl_c
from ablations.config.values import command as tool_command
from ablations.experiment.continuing import continuation_hint, trial_slots
from ablations.experiment.interrupt import resume_command
from ablations.experiment.planning import prepare
from ablations.experiment.preflight import auto_batch, check_data_on_workers
from ablations.experiment.request import (
    UsageError,
    check_name,
    check_project_folder,
    storage_root,
)
from ablations.results.stats.baseline_check import record_baseline_check
from ablations.results.stats.dataset_rows import is_across_datasets
from ablations.results.io.files import first_line, join, list_dir, read_metadata
from ablations.results.stats.decisions import decision_settings, verdicts_of
from ablations.results.stats.planned import pilot_design


# Ray's warning, at every start of a local Ray, that token authentication is on
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def run_main(args: argparse.Namespace, command: list[str]) -> int:
    """``run``: start, resume or plan (``--dry-run``) an experiment."""
    check_project_folder(os.getcwd())
    args.request = request_from(args)  # the library's Request
    if args.address is not None and args.address != "auto" \
            and not re.match(r"^(ray://)?[\w.-]+:\d+$", args.address):
        raise UsageError(f"--address {args.address!r}: use 'auto', host:port or ray://host:port")
    storage = storage_root(args.storage)
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed only applies with --resume")
    if args.resume:
        return _resume(args, storage, command)

    prepared = prepare(args.request)
    space, base, trials, skipped = (prepared.space, prepared.base, prepared.trials,
                                    prepared.skipped)
    design = prepared.design
    name = check_name(args.name or f"{space.name}-{dt.datetime.now():%Y%m%d-%H%M%S}")
    target = join(storage, name)
    if args.dry_run:
        say_notes(prepared.notes)
        seeds = prepared.seeds
        crossed = f" crossed ({len(seeds)}x{len(seeds)} cells per variant)" \
            if args.cross_seeds else ""
        print(f"Experiment {name} (dry run): space {space.name}, seeds {seeds}{crossed}")
        for line in design.dry_run_lines(args.alpha):
            print(spoken(line))
        if prepared.data_summary:
            print(f"Data: {prepared.data_summary}")
        for line in design.describe(trials, base.replace(ablation=space.reference), skipped):
            print(spoken(line))
        return 0
    resume = bool(list_dir(target))
    if resume:  # the same --name again: the same plan resumes it, anything else is refused
        trials, design = same_name_again(args, target, name, prepared)
    # after every check of the name: a refused command prints its one line alone
    say_notes(prepared.notes)
    return _run(args, space.name, trials, skipped, storage, name, command, design,
                seeds=prepared.seeds, resume=resume, reuse_workers=not space.isolate_trials,
                reference=space.reference)


def _resume(args: argparse.Namespace, storage: str, command: list[str]) -> int:
    """Continue an experiment from its experiment.json and Ray Tune's state."""
    if args.name is not None:
        check_name(args.name)
    plan = resume_plan(args, storage)
    return _run(args, plan.space_name, plan.trials, plan.skipped, storage, plan.name, command,
                plan.design, seeds=plan.seeds, resume=True,
                reuse_workers=plan.reuse_workers, reference=plan.reference)


def _working_dir() -> Optional[str]:
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None


def enter_again(path: Optional[str]) -> bool:
    """If this process's working directory was deleted and a directory is at its path again,
    make that the working directory (and forget the import system's view of the old one).
    Returns whether it did.

    A Ray job's driver runs in the job's working_dir, which Ray unpacked under the head's temp
    dir; a node that shares that temp dir (a worker node started on the head's machine without
    ``--temp-dir``) deletes the folder and unpacks it again when it sets up the job's runtime
    environment. ``init_ray`` waits until every node has done so
    (``ablations/experiment/cluster.py``, ``settle_job_working_dir``); the folder at the same
    path then holds the same files, so relative paths keep their meaning. Without this, the
    driver's ``os.getcwd()`` raises FileNotFoundError, and Ray Tune needs it (restoring an
    experiment and listing its results). A working directory is the whole process's: the
    command line changes it, not the library."""
    if path is None:
        return False
    try:
        os.getcwd()
        return False
    except FileNotFoundError:
        pass
    if not os.path.isdir(path):
        return False
    import importlib

    os.chdir(path)
    importlib.invalidate_caches()
    return True


def _continuation_hint(df: Any, meta: dict[str, Any], settings: dict[str, Any],
                       verdicts: Any, args: argparse.Namespace, storage: str, name: str,
                       slots: Optional[int], wall_s: float) -> Optional[str]:
    """A fixed run's inconclusive variants (``verdicts``: the summary's, decided with
    ``settings`` on ``meta``, its experiment.json) and the one command that decides them."""
    if verdicts is None:  # no verdicts (the summary said why): nothing to decide
        return None
    design = pilot_design(meta.get("planned"))
    try:
        return continuation_hint(df, verdicts, storage=storage, name=name,
                                 address=args.address, max_concurrent=args.max_concurrent,
                                 slots=slots, fixed_wall_s=wall_s,
                                 max_seeds=design.max_seeds if design else None, **settings)
    except (ValueError, KeyError):  # the pilot look's table cannot be made: nothing to decide
        return None


def fit_guard(options: Any, *, quiet_tune: bool) -> contextlib.ExitStack:
    """What the command line puts around ``Tuner.fit``: SIGTERM as Ctrl-C, and (unless
    --verbose) Tune's own start-up lines in the experiment's tune_console.log."""
    stack = contextlib.ExitStack()
    stack.enter_context(sigterm_as_sigint(options))
    if quiet_tune:
        stack.enter_context(tune_lines(join(str(options.storage), options.name)))
    return stack


def _run(args: argparse.Namespace, space_name: str, trials: list[Any], skipped: list[Any],
         storage: str, name: str, command: list[str], design: Any, *, seeds: Sequence[int],
         resume: bool = False, reuse_workers: bool = True,
         reference: str = DEFAULT_REFERENCE) -> int:
    import ray

    from ablations.experiment.cluster import ClusterUnreachable, job_runtime_env
    from ablations.experiment.options import RunOptions
    from ablations.experiment.runner import estimating_costs, init_ray, reading_own_code

    options = RunOptions(
        storage=storage, name=name, space=space_name, reference=reference,
        address=args.address,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        max_concurrent=args.max_concurrent, max_failures=args.max_failures,
        retry_failed=args.retry_failed, reuse_workers=reuse_workers, dashboard=args.dashboard,
        verbose=1 if args.verbose else 0, progress=not args.quiet,
        progress_epochs=args.progress == "epochs", command=command,
    )
    options.fit_guard = lambda: fit_guard(options, quiet_tune=not args.verbose)
    # MLflow / W&B: Ray Tune's callbacks (ablations/experiment/trackers/specs.py)
    if args.log_to or resume:
        from ablations.experiment.trackers.specs import tracker_callbacks

        options.trackers = tracker_callbacks(args.log_to, join(storage, name), experiment=name,
                                             space=space_name, resume=resume)
        if any(str(getattr(t, "tracking_uri", "")).startswith("file:") for t in options.trackers):
            # MLflow 3 keeps its file store in maintenance mode and refuses it unless asked; a
            # file: URI or a directory given to --log-to asks for it (a process-wide setting:
            # the command line's to make, not the library's)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    if not args.address and job_runtime_env() is not None:
        raise UsageError("running as a Ray job without --address: this would start a private "
                         "Ray on one node; pass --address auto to use the job's cluster")
    if not args.verbose:  # the dashboard line below says how to get the token
        logging.getLogger(TOKEN_AUTH_LOGGER).setLevel(logging.ERROR)
    working_dir = _working_dir()
    try:
        with estimating_costs(trials):  # in a thread, while Ray starts
            started_ray, dashboard_url = init_ray(options, trials)
    except ClusterUnreachable as exc:
        raise UsageError(str(exc)) from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = first_line(exc)
        raise UsageError(f"cannot connect to Ray at {args.address or 'local'}: {first}") from None
    enter_again(working_dir)  # a Ray job's working_dir, unpacked again while Ray started
    # Ray's driver exits on SIGTERM (code 15, no word); before and after Tuner.fit (where
    # run_experiment hands it to Tune's stop) it is Ctrl-C: stop, say how to continue.
    sigterm = sigterm_is_ctrl_c()
    try:
        resources = ray.cluster_resources()
        slots = trial_slots(resources, args.cpus_per_trial, args.gpus_per_trial,
                            args.max_concurrent)
        count = design.count_text(trials, seeds, crossed=args.cross_seeds)
        print(f"Experiment {name}: space {space_name}, {count}, "
              f"{args.cpus_per_trial:g} CPU + {args.gpus_per_trial:g} GPU per trial, "
              f"Ray with {resources.get('CPU', 0):g} CPUs / {resources.get('GPU', 0):g} GPUs")
        if args.cpus_per_trial > resources.get("CPU", 0) or \
                args.gpus_per_trial > resources.get("GPU", 0):
            raise UsageError(
                f"a trial asks for {args.cpus_per_trial:g} CPU / {args.gpus_per_trial:g} GPU but "
                f"the cluster has {resources.get('CPU', 0):g} / {resources.get('GPU', 0):g}; "
                "lower --cpus-per-trial / --gpus-per-trial"
            )
        if args.address:
            check_data_on_workers(design.configs(trials), args.request)
        if dashboard_url:
            print(f"Ray dashboard: http://{dashboard_url.removeprefix('http://')} "
                  "(token authentication: `ray get-auth-token` prints the token)")
        print(f"Results: {join(storage, name)}")
        print(f"TensorBoard: tensorboard --logdir {join(storage, name, design.tensorboard_dir)}"
              .rstrip("/"))
        for tracker in options.trackers:
            print(tracker.describe())
        if args.auto_batch and trials and not resume:  # a resume keeps the size it recorded
            trials, options.auto_batch = auto_batch(args.request, trials)
        with reading_own_code(trials):
            result = design.execute(trials, options, skipped, resume=resume)
    except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM, or one outside Tuner.fit
        print(f"\nInterrupted before the results were written; continue with: "
              f"{spoken(resume_command(storage, name, args.address))}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        if started_ray:
            ray.shutdown()
    df = result.trials
    print()
    # the verdicts as the design decides them (results/stats/decisions.py), at the settings
    # recorded before the data unless the command gives others (then labelled exploratory)
    meta = read_metadata(str(result.directory)) or {}
    given = {key: getattr(args.request, key) for key in ("metric", "margin", "alpha")
             if key in args.request.given}
    settings = decision_settings(meta, reference=reference, **given)
    reference, metric, margin, alpha = (settings[key] for key in
                                        ("reference", "metric", "margin", "alpha"))
    across = None
    if is_across_datasets(df):  # each dataset's verdicts, then across them (docs/datasets.md)
        summary, verdicts, across = datasets_summary(df, meta, settings)
        if across is not None:  # beside trials.parquet, as the report writes it too
            from ablations.results.report.datasets_report import write_across

            write_across(str(result.directory), across)
    else:
        try:  # once, for the summary, the trackers and the continuation hint
            verdicts = verdicts_of(df, meta, **settings)
        except (ValueError, KeyError):  # no verdicts: the summary says why
            verdicts = None
        summary = summary_table(df, meta, verdicts=verdicts, **settings)
    check = record_baseline_check(result.directory, df, result.epochs, reference=reference)
    if check is not None:  # one line above the verdicts; baseline_check.json in the folder
        print(check.line())
    print(summary)
    for line in design.summary_lines(df, meta, settings):
        print(spoken(line))
    if options.trackers:  # the verdicts as each tracker's <name>-verdicts run
        from ablations.experiment.trackers.specs import publish_summary

        publish_summary(options.trackers, summary, verdicts, across)
    counts = {status: int((df["status"] == status).sum()) for status in TrialStatus}
    unfinished = sum(counts[status] for status in UNFINISHED)
    stopped = (f"{counts[TrialStatus.INTERRUPTED]} interrupted, "
               f"{counts[TrialStatus.NOT_STARTED]} not started, ") if unfinished else ""
    print(f"\n{counts[TrialStatus.OK]} ok, {counts[TrialStatus.FAILED]} failed, "
          f"{counts[TrialStatus.DIVERGED]} diverged, {counts[TrialStatus.STOPPED]} stopped "
          f"early, {stopped}{counts[TrialStatus.SKIPPED]} skipped of {len(df)} trials; "
          f"{result.wall_s:.0f} s wall, {df['cpu_hours'].sum():.3f} CPU-hours, "
          f"{df['gpu_hours'].sum():.3f} GPU-hours.")
    for _, row in df[df["status"].isin([TrialStatus.FAILED, TrialStatus.DIVERGED])].iterrows():
        print(f"  {row['trial_name']}: {row['status']}: {row['error']}")
    for line in design.closing_lines(result.directory):
        print(spoken(line))
    print(f"Results in {result.directory}: trials.parquet, epochs.parquet, predictions.parquet")
    if not unfinished:  # an interrupted run: continue it first (said below)
        print(f"Report: {spoken(tool_command('report', str(result.directory)))}")
    planned = design.planned
    # a run planned at one look (--seeds >= --max-seeds) or crossed: final, no continuation
    continues = design.continues_into_rounds and (
        planned is None or pilot_design(planned) is not None)
    if not unfinished and continues:
        hint = _continuation_hint(df, meta, settings, verdicts, args, storage, name, slots,
                                  result.wall_s)
        if hint:
            print(f"\n{spoken(hint)}")
    if unfinished:
        print(f"Interrupted: {unfinished} trials did not finish; continue with: "
              f"{spoken(resume_command(storage, name, args.address))}")
        return EXIT_INTERRUPTED
    return 0 if counts[TrialStatus.OK] else 1



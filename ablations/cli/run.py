"""The ``run`` command: start, resume or plan (``--dry-run``) an experiment, a thin shell over
the library: its flags become a :class:`~ablations.experiment.core.request.Request`, the request an
:class:`~ablations.experiment.api.Experiment` (or :meth:`~ablations.experiment.api.
Experiment.resume`), which runs with the command line's event printer and returns its
:class:`~ablations.experiment.api.Results`, which this prints. Loaded by main.py once the
command line is parsed (``--help`` and a bad flag load none of it).

Every bad input (flag, YAML key or value, data directory, experiment name) is caught before any
trial starts and reported as one line on stderr with exit code 2, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import re
import signal
import sys
from typing import Any, Iterator, Optional

from ablations.cli.console import print_event, spoken
from ablations.cli.flags import EXIT_INTERRUPTED
from ablations.cli.progress import ConsoleView
from ablations.cli.requests import request_from
from ablations.cli.signals import sigterm_as_sigint, sigterm_is_ctrl_c
from ablations.config.statuses import TrialStatus
from ablations.config.values import command as tool_command
from ablations.experiment.api import (
    Console,
    Experiment,
    Interrupted,
    Resources,
    Results,
    resume_preview,
    resume_request,
)
from ablations.experiment.execution.interrupt import resume_command
from ablations.experiment.core.request import (
    UsageError,
    check_name,
    check_project_folder,
    storage_root,
)
from ablations.experiment.resuming import latest_experiment
from ablations.results.io.files import join, read_metadata

# Ray's warning, at every start of a local Ray, that token authentication is on
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def run_main(args: argparse.Namespace, command: list[str]) -> int:
    """``run``: start, resume or plan (``--dry-run``) an experiment."""
    check_project_folder(os.getcwd())
    request = request_from(args)  # the library's Request
    if args.address is not None and args.address != "auto" \
            and not re.match(r"^(ray://)?[\w.-]+:\d+$", args.address):
        raise UsageError(f"--address {args.address!r}: use 'auto', host:port or ray://host:port")
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed only applies with --resume")
    if args.name is not None:
        check_name(args.name)
    # --resume with a space and fixed seeds (given or not; --seeds auto continues the
    # recorded plan into rounds, which refuses a space): the recorded table resumes, it plus
    # new variants grows, another is refused
    if args.resume and "space" in request.given and isinstance(request.seeds, list):
        request = space_into_experiment(request, args)
        args.resume = False
    resources = Resources(max_concurrent=args.max_concurrent, max_failures=args.max_failures,
                          address=args.address, time_limit=args.time_limit,
                          reuse=args.reuse)
    if args.dry_run and args.resume:
        return dry_run_resume(request, args)
    if args.dry_run:
        return dry_run(Experiment.from_request(request, resources=resources,
                                               allow_changed=args.allow_changed), args)
    if any(str(getattr(spec, "target", "")).startswith("file:") for spec in args.log_to):
        # MLflow 3 keeps its file store in maintenance mode and refuses it unless asked; a
        # file: URI or a directory given to --log-to asks for it (a process-wide setting: the
        # command line's to make, not the library's)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    if not args.verbose:  # the dashboard line says how to get the token
        logging.getLogger(TOKEN_AUTH_LOGGER).setLevel(logging.ERROR)
    with handling_sigterm() as after_ray_start:
        console = Console(dashboard=args.dashboard, verbose=args.verbose,
                          progress_epochs=args.progress == "epochs", command=command,
                          fit_guard=sigterm_as_sigint, after_ray_start=after_ray_start,
                          tune_console=sys.stdout)
        try:
            if args.resume:
                results = resume_request(args.name, request, resources=resources,
                                         retry_failed=args.retry_failed,
                                         allow_changed=args.allow_changed, log_to=args.log_to,
                                         progress=not args.quiet, on_event=ConsoleView(),
                                         console=console)
            else:
                results = Experiment.from_request(
                    request, resources=resources, log_to=args.log_to,
                    allow_changed=args.allow_changed, progress=not args.quiet
                ).run(on_event=ConsoleView(), console=console)
        except Interrupted as stop:  # a second Ctrl-C / SIGTERM, or one outside Tuner.fit
            print(f"\nInterrupted before the results were written; continue with: "
                  f"{spoken(resume_command(stop.storage, stop.name, stop.address))}",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
    return print_results(results, args)


def space_into_experiment(request: Any, args: argparse.Namespace) -> Any:
    """``--resume`` with ``--space``: the request that runs the space under the experiment
    resumed (``--name``, else the one started or resumed last), as a start under its name
    does: the recorded table resumes it, the recorded table plus new variants grows it, and
    another table is refused (ablations/experiment/resuming.py)."""
    if args.retry_failed:
        raise UsageError("--resume with --space runs that space under the experiment; "
                         "--retry-failed continues the recorded plan: drop --space")
    storage = storage_root(request.storage)
    name = args.name or latest_experiment(storage)
    if read_metadata(join(storage, name)) is None:
        raise UsageError(f"--resume: {join(storage, name)} is not an experiment folder (no "
                         "experiment.json)")
    return dataclasses.replace(request, name=name)


def dry_run(experiment: Experiment, args: argparse.Namespace) -> int:
    """``--dry-run``: the plan, the design and every trial's configuration, and where the name
    holds an experiment, what it keeps (the run's checks and refusals); nothing runs."""
    preview = experiment.preview(on_event=print_event)
    prepared, name = preview.prepared, preview.name
    space, seeds = prepared.space, prepared.seeds
    crossed = f" crossed ({len(seeds)}x{len(seeds)} cells per variant)" \
        if args.cross_seeds else ""
    print(f"Experiment {name} (dry run): space {space.name}, seeds {seeds}{crossed}")
    for line in prepared.design.dry_run_lines(args.alpha):
        print(spoken(line))
    if prepared.data_summary:
        print(f"Data: {prepared.data_summary}")
    base = prepared.base.replace(ablation=space.reference)
    for line in preview.design.describe(preview.trials, base, prepared.skipped):
        print(spoken(line))
    if preview.existing and preview.grown is not None:
        print(kept_line(name, [spec.name for spec in preview.trials], preview.kept))
    elif preview.existing:  # the same plan: what its resume keeps, continues and starts
        print(spoken(preview.design.resume_line(name, space.name, preview.target,
                                                preview.trials, False)))
    return 0


def dry_run_resume(request: Any, args: argparse.Namespace) -> int:
    """``--resume --dry-run``: the resume's checks and its line on what it keeps, continues
    and starts, then its trials; nothing runs."""
    plan = resume_preview(args.name, request, retry_failed=args.retry_failed,
                          allow_changed=args.allow_changed, on_event=print_event)
    print(f"Experiment {plan.name} (dry run of its resume): space {plan.space_name}, seeds "
          f"{plan.seeds}")
    base = next((spec.config for spec in plan.trials if spec.variant == plan.reference),
                plan.trials[0].config if plan.trials else None)
    if base is not None:
        for line in plan.design.describe(plan.trials, base, plan.skipped):
            print(spoken(line))
    return 0


def kept_line(name: str, trials: list[str], kept: list[str]) -> str:
    """What a run under an existing experiment's name keeps of it and trains."""
    left = [trial for trial in trials if trial not in set(kept)]
    shown = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
    return (f"{name} holds {len(kept)} of these {len(trials)} trials finished (kept); "
            f"{len(left)} to train" + (f": {shown}" if left else ""))


def print_results(results: Results, args: argparse.Namespace) -> int:
    """The end of a run: the baseline check, the summary and the design's lines, the trials'
    counts and failures, where the results are, and what continues the experiment."""
    print()
    if results.baseline_check is not None:
        print(results.baseline_check.line())
    print(spoken(results.summary))
    for line in results.design_lines:
        print(spoken(line))
    counts, df = results.counts(), results.trials
    # trials taken from other experiments (trial_store.py): their CPU-hours were spent there
    reused = df["reused_from"].fillna("").ne("") if "reused_from" in df else df["status"].isna()
    trained = df[~reused]
    unfinished = results.unfinished
    stopped = (f"{counts[TrialStatus.INTERRUPTED]} interrupted, "
               f"{counts[TrialStatus.NOT_STARTED]} not started, ") if unfinished else ""
    print(f"\n{counts[TrialStatus.OK]} ok, {counts[TrialStatus.FAILED]} failed, "
          f"{counts[TrialStatus.DIVERGED]} diverged, "
          + (f"{counts[TrialStatus.TIMEOUT]} timed out, " if counts[TrialStatus.TIMEOUT] else "")
          + f"{counts[TrialStatus.STOPPED]} stopped "
          f"early, {stopped}{counts[TrialStatus.SKIPPED]} skipped of {len(df)} trials"
          + (f" ({reused.sum()} reused)" if reused.any() else "") + "; "
          f"{results.wall_s:.0f} s wall, {trained['cpu_hours'].sum():.3f} CPU-hours, "
          f"{trained['gpu_hours'].sum():.3f} GPU-hours"
          + (" trained here" if reused.any() else "") + ".")
    shown = [TrialStatus.FAILED, TrialStatus.DIVERGED, TrialStatus.TIMEOUT]
    failed = df[df["status"].isin(shown)]
    for _, row in failed.iterrows():
        print(f"  {row['trial_name']}: {row['status']}: {row['error']}")
    if (failed["status"] == TrialStatus.FAILED).any():  # where the tracebacks are, once
        print(f"  (each failed trial's traceback: {results.directory}/tune/<trial>/error.txt)")
    for line in results.closing_lines:
        print(spoken(line))
    print(f"Results in {results.directory}: trials.parquet, epochs.parquet, "
          "predictions.parquet")
    if not unfinished:  # an interrupted run: continue it first (said below)
        print(f"Report: {spoken(tool_command('report', str(results.directory)))}")
    if results.continuation:
        print(f"\n{spoken(results.continuation)}")
    if unfinished and results.stopped_early:  # said above, with the error: a failed run
        print(f"Stopped early: {unfinished} trials not run; once the cause is fixed, continue "
              f"with: {spoken(resume_command(results.storage, results.name, args.address))} "
              "--retry-failed")
        return 1
    if unfinished:
        print(f"Interrupted: {unfinished} trials did not finish; continue with: "
              f"{spoken(resume_command(results.storage, results.name, args.address))}")
        return EXIT_INTERRUPTED
    return 0 if counts[TrialStatus.OK] else 1


@contextlib.contextmanager
def handling_sigterm() -> Iterator[Any]:
    """Ray's driver exits on SIGTERM (code 15, no word); once Ray has started, and before and
    after Tuner.fit (where the runner hands it to Tune's stop), SIGTERM is Ctrl-C: stop, say
    how to continue. Yields what the run calls once Ray has started; restores the handler."""
    working_dir = _working_dir()
    previous: list[Any] = []

    def after_ray_start() -> None:
        enter_again(working_dir)  # a Ray job's working_dir, unpacked again while Ray started
        previous.append(sigterm_is_ctrl_c())

    try:
        yield after_ray_start
    finally:
        if previous and previous[0] is not None:
            signal.signal(signal.SIGTERM, previous[0])


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
    (``ablations/experiment/execution/cluster.py``, ``settle_job_working_dir``); the folder at the
    same path then holds the same files, so relative paths keep their meaning. Without this, the
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

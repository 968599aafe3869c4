"""Build the Tuner for a list of trials, run it on a local or existing Ray, write the results.

This module runs one Tune experiment: the options, Ray, the Tuner, resume and experiment.json.
What differs between designs comes in as a
:class:`~ablations.experiment.execution.tune_setup.TuneSetup` (the trainable's plan, Tune's search
and scheduler, callbacks) and the design's record (ablations/experiment/designs/). Turning
Tune's results into the three tables is ablations/experiment/execution/tables.py; SIGTERM during
``Tuner.fit``, the resume command and Tune's log filter are
ablations/experiment/execution/interrupt.py.

Layout of an experiment folder ``<storage>/<name>/``::

    experiment.json        what was run: space, trials, options, versions
    trials.parquet         one row per trial
    epochs.parquet         one row per trial per epoch
    predictions.parquet    one row per test sample per ok trial
    tune/                  Ray Tune's own state, checkpoints and logs (TensorBoard, CSV, JSON)
    tune_console.log       what Tune printed itself (its configuration box, its folder), a
                           command-line run without --verbose
    trial_state/<trial>/   state.pt (resumable state) and history.json, until nothing is left to
                           resume
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, Iterator, Optional, Sequence

from ablations.config import TrialConfig
from ablations.experiment.core import events
from ablations.experiment.execution.cluster import (
    check_cluster_address,
    runtime_env_for_cluster,
    settle_job_working_dir,
)
from ablations.experiment.execution.tune_setup import TableTune, TuneSetup
from ablations.experiment.execution.interrupt import quiet_tune_logs
from ablations.experiment.execution.moved_modules import moved_modules
from ablations.experiment.execution.tune_console import tune_lines
from ablations.experiment.execution.tune_usage import (
    no_unsent_callback_tag,
    tensorboardx_without_torch,
)
from ablations.experiment.core.options import (
    ExperimentResult,
    Recorded,
    RunOptions,
    experiment_dir,
)
from ablations.trial.supervise import end_programs_under
from ablations.experiment.execution.tables import (
    RESUMABLE_STATUSES,
    collect_results,
    tune_state_file,
)
from ablations.experiment.provenance.experiment_record import start_record
from ablations.experiment.provenance.trial_store import (
    Reused,
    find_reusable,
    record_reused,
    recorded_reused,
    reusable_keys,
    run_labels,
)
from ablations.experiment.execution.tune_state import results_despite
from ablations.results.io.files import (
    METADATA_FILE,
    delete_dir,
    first_line,
    is_uri,
    join,
    write_json_atomic,
)
from ablations.search_spaces.spaces import TrialSpec



@contextlib.contextmanager
def estimating_costs(trials: Sequence[TrialSpec]) -> Iterator[None]:
    """Estimate the trials' costs (ablations/trial/cost.py, cached per model) in a thread
    while the caller starts Ray: the first estimate imports torch's meta kernels (~1.5 s), and
    ``ray.init`` mostly waits for the processes it starts. Joined on exit; an estimate that
    fails is NaN (``estimated_cost``), so nothing is raised here."""
    from ablations.trial.cost import estimated_cost

    thread = threading.Thread(target=lambda: [estimated_cost(spec.config) for spec in trials],
                              name="estimate-costs", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def init_ray(options: RunOptions, trials: Sequence[TrialSpec] = (),
             num_cpus: Optional[int] = None) -> tuple[bool, Optional[str]]:
    """Connect to or start Ray. Returns (whether this call started it and should stop it,
    the dashboard URL of a Ray it started, if any).

    Without an address, a private local Ray is started every time (``address="local"``, with
    ``num_cpus`` CPUs, None: the machine's): not the cluster ``ray start`` last left on this
    machine, nor one RAY_ADDRESS names.
    With one, the address is checked first (``check_cluster_address``: one line and no
    minute of retries when it is wrong); in a Ray job, every node then sets up the job's
    runtime environment before this returns (``settle_job_working_dir``). Own code among
    ``trials`` travels to the cluster's workers with the project (``runtime_env_for_cluster``).
    """
    import ray

    if ray.is_initialized():
        return False, None
    if options.address:
        check_cluster_address(options.address)
        own = next((spec.config for spec in trials if spec.config.own_code is not None), None)
        ray.init(address=options.address,
                 runtime_env=runtime_env_for_cluster(own.own_code if own else None,
                                                     own.plugin if own else ""),
                 logging_level=logging.WARNING, log_to_driver=options.verbose > 0)
        settle_job_working_dir()  # in a Ray job: no node unpacks its working_dir again later
        return True, None
    # What the trials print (compiler autotune tables, deprecation warnings) stays in each
    # trial's stdout/stderr files (RunConfig.log_to_file), not on the console, unless --verbose.
    context = ray.init(address="local", num_cpus=num_cpus, include_dashboard=options.dashboard,
                       dashboard_host="127.0.0.1", logging_level=logging.WARNING,
                       log_to_driver=options.verbose > 0)
    url = getattr(context, "dashboard_url", None) if options.dashboard else None
    return True, url or None


def run_experiment(trials: Sequence[TrialSpec], options: RunOptions,
                   skipped: Sequence[tuple[TrialSpec, str]] = (), *,
                   design: Optional[Recorded] = None, setup: Optional[TuneSetup] = None,
                   resume: bool = False) -> ExperimentResult:
    """Run ``trials`` in one Tune experiment as ``setup`` says (default: :class:`TableTune`,
    each trial once) and write the experiment folder; ``design`` adds its record to
    experiment.json (default: none, nothing planned).

    The setup gives the trainable's plan, Tune's search and scheduler, its callbacks, the
    Tune folder and the rows' round and phase (``setup.part``); this function does the same
    for every design, in named steps: the record of the start (:func:`start_record`), the
    trainable (:func:`trainable_of`), what other experiments trained already
    (:func:`reused_trials`), the progress (:func:`progress_of`), the Tuner (:func:`tuner_of`),
    the fit (:func:`fit`) and the tables (:func:`finish`).

    Uses the Ray already initialised in this process if there is one (tests do
    ``ray.init(num_cpus=2)``); else starts a local one, or connects to ``options.address``.
    With ``resume``, an interrupted experiment continues (``Tuner.restore``): finished trials
    are kept, unfinished ones continue from their last checkpoint, failed ones are retried
    from theirs if ``options.retry_failed``.
    """
    from ray import tune

    from ablations.experiment.execution.trainable import STATE_SUBDIR

    setup = setup or TableTune()
    part = setup.part
    plan = setup.trainable_plan(trials)
    root, metadata = start_record(trials, options, skipped, list(plan.values()),
                                  design=design, part=part, resume=resume)
    state_root = join(root, STATE_SUBDIR)
    trainable = trainable_of(plan, metadata, options, state_root)
    tune_dir = join(root, part.tune_subdir)
    started = time.monotonic()
    # a grown table's new variants are a new Tune run beside the first (which holds the rest)
    restoring = resume and options.grown is None and tune.Tuner.can_restore(tune_dir)
    reused = reused_trials(trials, options, setup, metadata, root, resume=resume,
                           restoring=restoring)
    to_train = [spec for spec in trials if reused is None or spec.name not in reused.names]
    progress, planned = progress_of(setup, to_train, options, metadata)
    fail_alike = None
    # every planned trial reused: nothing for Tune to run (a search plans none: it samples)
    if reused is not None and not to_train and not restoring:
        tuner = None
    elif restoring:
        setup.before_restore(root, options)
        with quiet_tune_logs(), moved_modules():
            tuner = tune.Tuner.restore(tune_dir, trainable=trainable, resume_unfinished=True,
                                       resume_errored=options.retry_failed,
                                       restart_errored=False)
    else:
        fail_alike = fail_alike_of(trials, to_train, options, part)
        tuner = tuner_of(trainable, setup, to_train, options, root, planned,
                         [*([progress] if options.progress else []), *options.trackers,
                          *setup.callbacks(root, options), fail_alike])
    with moved_modules() if restoring else contextlib.nullcontext():  # the searcher's state
        grid = fit(tuner, options, root, tune_dir, metadata)
    if fail_alike is not None and fail_alike.reason:
        events.warning(fail_alike.reason)
        metadata["stopped_early"] = fail_alike.reason
    metadata["driver_wall_s"] = time.monotonic() - started
    metadata["fit_s"] = time.time() - metadata["fit_started_at"]  # Tuner.fit alone
    return finish(grid, setup.specs(grid, trials), options, metadata, skipped, root=root,
                  state_root=state_root, part=part, reused=reused)


def trainable_of(plan: dict[str, TrialConfig], metadata: dict[str, Any], options: RunOptions,
                 state_root: str) -> Any:
    """The trainable Tune runs: each trial's configuration by name, where its state is saved,
    its time limit and labels, and the resources each trial takes."""
    from ray import tune

    from ablations.experiment.execution.trainable import tune_trainable

    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    return tune.with_resources(tune.with_parameters(
        tune_trainable, plan={key: config.to_dict() for key, config in plan.items()},
        state_root=state_root, time_limit_s=options.time_limit_s,
        labels=run_labels(plan, metadata["provenance"]),
        # on this machine's Ray, the trials run in this process's folder (trainable.trial_cwd)
        folder=None if options.address else os.getcwd(),
        pack=options.verbose == 0), resources)  # --verbose: Tune's tables show every figure


def reused_trials(trials: Sequence[TrialSpec], options: RunOptions, setup: TuneSetup,
                  metadata: dict[str, Any], root: str, *, resume: bool,
                  restoring: bool) -> Optional[Reused]:
    """The trials this run takes instead of training them (trial_store.py), or None. A resumed
    run keeps what it reused before (never in Tune's trials), with or without reuse, and a
    grown table the trials it kept; a new run takes what other experiments finished."""
    part = setup.part
    # what this Tune run took from other experiments before (also where it trained nothing,
    # so that Tune saved no run to restore)
    recorded = recorded_reused(root, part.tune_subdir) \
        if resume and options.grown is None else {}
    grown = metadata.get("grown", [])
    if not (setup.reusable and (restoring or recorded or options.reuse or grown)):
        return None
    reused = find_reusable(str(options.storage), options.name,
                           reusable_keys(trials, metadata, options),
                           specs={spec.name: spec for spec in trials},
                           round_number=part.round_number, phase=part.phase,
                           space=options.space, own_only=restoring or not options.reuse,
                           own_trained={name for entry in grown for name in entry["kept"]},
                           recorded=recorded or None)
    if reused is not None and not restoring:
        record_reused(root, part.tune_subdir, reused)  # before Tune saves any state
        events.info(reused.summary(len(trials), options.name))
    return reused


def progress_of(setup: TuneSetup, to_train: Sequence[TrialSpec], options: RunOptions,
                metadata: dict[str, Any]) -> tuple[Any, Any]:
    """The run's progress callback (events: ablations/experiment/execution/progress.py), and the
    setup's plan of the trials' epochs it was made from."""
    from ablations.experiment.execution.progress import TrialProgress

    total, planned, default = setup.progress_plan(to_train)
    progress = TrialProgress(total, plan=planned, epochs=options.progress_epochs,
                             default=default,
                             units={name: declared["unit"] for name, declared
                                    in (metadata.get("metrics") or {}).items()
                                    if declared.get("unit")})
    return progress, planned


def fail_alike_of(trials: Sequence[TrialSpec], to_train: Sequence[TrialSpec],
                  options: RunOptions, part: Any) -> Any:
    """The callback that stops a run whose trials fail alike; the reference's rule only where
    this run trains every trial of it (a pilot's or a resumed run's reference has rows from
    before)."""
    from ablations.experiment.execution.fail_fast import FailAlike

    reference_trials = {spec.name for spec in trials
                        if spec.name.rsplit("-seed", 1)[0] == options.reference}
    fresh_reference = (part.round_number == 1 and part.earlier_rows is None
                       and reference_trials <= {spec.name for spec in to_train})
    return FailAlike(len(to_train), reference=options.reference,
                     reference_trials=len(reference_trials) if fresh_reference else 0)


def tuner_of(trainable: Any, setup: TuneSetup, to_train: Sequence[TrialSpec],
             options: RunOptions, root: str, planned: Any, callbacks: list[Any]) -> Any:
    """A new Tuner of ``to_train`` under ``root``: the setup's search space and Tune config,
    every trial's logs kept, and ``callbacks``."""
    from ray import tune

    param_space, tune_config = setup.tune_config(to_train, options, root, planned)
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune_config,
        run_config=tune.RunConfig(
            name=setup.part.tune_subdir,
            storage_path=root,
            # Trials report one Ray checkpoint, at their end (trainable.py), so all are
            # kept: with num_to_keep, Tune forces an experiment-state snapshot (every
            # trial's state, as JSON) at each trial's end, O(trials) each time: at 108
            # tiny trials, 110 snapshots took 3 s of the driver's CPU. Without it, snapshots
            # come every TUNE_GLOBAL_CHECKPOINT_S (Tune's adaptive default) and at the end.
            checkpoint_config=tune.CheckpointConfig(),
            failure_config=tune.FailureConfig(max_failures=options.max_failures,
                                              fail_fast=False),
            verbose=options.verbose,
            callbacks=callbacks,
            # the trial's stdout and stderr: files in its working directory, synced to
            # its folder beside the Tune results (tune/<trial>/stdout, stderr)
            log_to_file=True, sync_config=tune.SyncConfig(sync_artifacts=True),
        ),
    )


def fit(tuner: Any, options: RunOptions, root: str, tune_dir: str,
        metadata: dict[str, Any]) -> Any:
    """``tuner.fit()`` (None: nothing to run, no result) inside the run's guards: Tune's own
    lines to tune_console.log, its logs quiet, the front end's context (SIGTERM as a stop);
    the trials' programs ended however it ends, and the results of the trials that ended
    even where Tune raised after them (:func:`results_despite`, its error recorded)."""
    state_before = tune_state_file(tune_dir)  # a resume's: not this run's results
    tensorboardx_without_torch()  # before Tune's TensorBoard logger imports it with torch
    metadata["fit_started_at"] = time.time()
    metadata["cluster_cpus"] = _cluster_cpus()
    # Tune's own lines in tune_console.log (--verbose: on stdout as Tune prints them)
    tune_output = contextlib.nullcontext() if options.verbose else \
        tune_lines(root, options.tune_console)
    with (options.fit_guard or contextlib.nullcontext)(), tune_output, quiet_tune_logs(), \
            no_unsent_callback_tag():
        try:
            # SIGINT/SIGTERM: Tune stops the trials, saves state, returns
            return tuner.fit() if tuner is not None else []
        except Exception as error:  # noqa: BLE001 - re-raised unless trials ended
            grid = results_despite(error, tune_dir, state_before)
            if grid is None:
                raise
            metadata["tune_error"] = f"{type(error).__name__}: {first_line(error)}"
            return grid
        finally:  # however fit ended (a second Ctrl-C raises from it)
            end_local_programs(options)
            if options.progress:  # a listener's bar of this fit is complete
                events.emit(events.FitEnded("status", "fit ended"))


def finish(grid: Any, trials: Sequence[TrialSpec], options: RunOptions,
           metadata: dict[str, Any], skipped: Sequence[tuple[TrialSpec, str]], *, root: str,
           state_root: str, part: Any, reused: Optional[Reused]) -> ExperimentResult:
    """The three tables of the fit's results, experiment.json with the driver's times, and
    the trials' saved state dropped once nothing is left to resume (final checkpoints stay in
    tune/)."""
    collecting = time.monotonic()
    result = collect_results(grid, trials, options, metadata, skipped, state_root=state_root,
                             round_number=part.round_number,
                             earlier_rows=part.earlier_rows, phase=part.phase,
                             reused=reused)
    metadata["collect_s"] = time.monotonic() - collecting  # the three tables read and written
    write_json_atomic(metadata, join(root, METADATA_FILE))  # with the driver's wall time
    if not result.trials["status"].isin(RESUMABLE_STATUSES).any():
        delete_dir(state_root)
    return result


def end_local_programs(options: RunOptions) -> int:
    """On a local Ray with local storage (the trials' folders under the experiment's): end
    every program a trial of the experiment still runs (the supervisors its trials' pid files
    name; each ends its program's whole tree), whether or not the trial's Ray worker stopped
    it. None is left after trials that ended; after a stop (Ctrl-C, SIGTERM) or a fault, none
    outlives it. A cluster's trials are ended by their nodes. Returns how many were running."""
    if options.address is not None or is_uri(str(options.storage)):
        return 0  # with a bucket, a trial's folder is in its worker's temporary directory
    try:
        return end_programs_under(experiment_dir(options))
    except OSError:  # the clean-up never hides what ended the fit
        return 0


def _cluster_cpus() -> Optional[float]:
    """The CPUs of the Ray cluster this run uses (its trials' slots at one CPU each)."""
    import ray

    return float(ray.cluster_resources().get("CPU", 0)) if ray.is_initialized() else None

"""Build the Tuner for a list of trials, run it on a local or existing Ray, write the results.

This module runs one Tune experiment: the options, Ray, the Tuner, resume and experiment.json.
What differs between designs comes in as a
:class:`~ablations.experiment.designs.tune_setup.TuneSetup` (the trainable's plan, Tune's search
and scheduler, callbacks) and the design's record (ablations/experiment/designs/). Turning
Tune's results into the three tables is ablations/experiment/tables.py; SIGTERM during
``Tuner.fit``, the resume command and Tune's log filter are ablations/experiment/interrupt.py.

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
import datetime as dt
import logging
import os
import platform
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from ablations.config.safety import installed_torch
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.config import TrialConfig
from ablations.experiment import events
from ablations.experiment.cluster import (
    check_cluster_address,
    runtime_env_for_cluster,
    settle_job_working_dir,
)
from ablations.experiment.designs.tune_setup import GridTune, TuneSetup
from ablations.experiment.interrupt import quiet_tune_logs
from ablations.experiment.tune_console import tune_lines
from ablations.experiment.tune_usage import no_unsent_callback_tag, tensorboardx_without_torch
from ablations.experiment.options import (
    TUNE_SUBDIR,
    ExperimentResult,
    RunOptions,
    experiment_dir,
)
from ablations.experiment.plans import skipped_plan, trial_plan
from ablations.experiment.provenance import changes, collect, git_commit_label
from ablations.experiment.reported import unpacked
from ablations.trial.supervise import end_programs_under
from ablations.experiment.tables import (
    RESUMABLE_STATUSES,
    collect_results,
    result_name,
    saved_results,
    trial_status,
    tune_state_file,
)
from ablations.experiment.trial_store import (
    REUSABLE,
    find_reusable,
    read_table,
    record_reused,
    recorded_reused,
    reusable_keys,
    run_labels,
)
from ablations.results.io.files import (
    METADATA_FILE,
    SCHEMA_VERSION,
    TRIALS_FILE,
    delete_dir,
    first_line,
    is_file,
    is_uri,
    join,
    read_metadata,
    remove_stale_temp_files,
    write_json_atomic,
)
from ablations.search_spaces.spaces import TrialSpec

if TYPE_CHECKING:
    from ablations.experiment.designs.base import Design


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
                   design: Optional[Design] = None, setup: Optional[TuneSetup] = None,
                   resume: bool = False) -> ExperimentResult:
    """Run ``trials`` in one Tune experiment as ``setup`` says (default: :class:`GridTune`,
    each trial once) and write the experiment folder; ``design`` adds its record to
    experiment.json (default: none, nothing planned).

    The setup gives the trainable's plan, Tune's search and scheduler, its callbacks, the
    Tune folder and the rows' round and phase (``setup.part``); this function does the same
    for every design.

    Uses the Ray already initialised in this process if there is one (tests do
    ``ray.init(num_cpus=2)``); else starts a local one, or connects to ``options.address``.
    With ``resume``, an interrupted experiment continues (``Tuner.restore``): finished trials
    are kept, unfinished ones continue from their last checkpoint, failed ones are retried
    from theirs if ``options.retry_failed``.
    """
    from ray import tune

    from ablations.experiment.progress import TrialProgress
    from ablations.experiment.trainable import STATE_SUBDIR, tune_trainable

    setup = setup or GridTune()
    part = setup.part
    root = experiment_dir(options)
    if not is_uri(root):
        Path(root).mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(root)
    started_at = dt.datetime.now(dt.timezone.utc)
    plan = setup.trainable_plan(trials)
    metadata = experiment_metadata(trials, options, started_at, skipped, list(plan.values()))
    if design is not None:
        design.record(metadata)
        if design.spec:  # a plug-in design: a resume and `report` import it again
            from ablations.experiment.designs.registry import PLUGIN_KEY

            metadata[PLUGIN_KEY] = design.spec
    previous = read_metadata(root)
    metadata["auto_batch"] = options.auto_batch or (previous or {}).get("auto_batch")
    # the settings fixed before the first trial (results/stats/planned.py): a resume or a later
    # round keeps the first record, and an experiment recorded without one gets none
    if previous is None:
        planned = design.planned if design is not None else None
    else:
        planned = previous.get("planned")
    if planned:
        metadata["planned"] = planned
    # variants added to the finished table, each time (resuming.growth)
    grown = [*(previous or {}).get("grown", []), *([options.grown] if options.grown else [])]
    if grown:
        metadata["grown"] = grown
    if (resume or part.earlier_rows is not None or part.round_number > 1) \
            and previous is not None:  # a later round or stage of the same experiment
        metadata["started_at"] = previous.get("started_at", metadata["started_at"])
        metadata["resumed_at"] = [*previous.get("resumed_at", []),
                                  *([started_at.isoformat()] if resume else [])]
    write_json_atomic(metadata, join(root, METADATA_FILE))

    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    state_root = join(root, STATE_SUBDIR)
    trainable = tune.with_resources(tune.with_parameters(
        tune_trainable, plan={key: config.to_dict() for key, config in plan.items()},
        state_root=state_root, time_limit_s=options.time_limit_s,
        labels=run_labels(plan, metadata["provenance"]),
        # on this machine's Ray, the trials run in this process's folder (trainable.trial_cwd)
        folder=None if options.address else os.getcwd(),
        pack=options.verbose == 0), resources)  # --verbose: Tune's tables show every figure
    tune_dir = join(root, part.tune_subdir)
    started = time.monotonic()
    # a grown table's new variants are a new Tune run beside the first (which holds the rest)
    restoring = resume and options.grown is None and tune.Tuner.can_restore(tune_dir)
    # what this Tune run took from other experiments before (also where it trained nothing,
    # so that Tune saved no run to restore)
    recorded = recorded_reused(root, part.tune_subdir) \
        if resume and options.grown is None else {}
    reused = None
    # A resumed run keeps what it reused before (never in Tune's trials), with or without
    # reuse, and a grown table the trials it kept; a new run takes what other experiments
    # finished (trial_store.py).
    if setup.reusable and (restoring or recorded or options.reuse or grown):
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
    to_train = [spec for spec in trials if reused is None or spec.name not in reused.names]
    total, planned, default = setup.progress_plan(to_train)
    progress = TrialProgress(total, plan=planned, epochs=options.progress_epochs,
                             default=default,
                             units={name: declared["unit"] for name, declared
                                    in (metadata.get("metrics") or {}).items()
                                    if declared.get("unit")})
    fail_alike = None
    # every planned trial reused: nothing for Tune to run (a search plans none: it samples)
    if reused is not None and not to_train and not restoring:
        tuner = None
    elif restoring:
        setup.before_restore(root, options)
        with quiet_tune_logs():
            tuner = tune.Tuner.restore(tune_dir, trainable=trainable, resume_unfinished=True,
                                       resume_errored=options.retry_failed,
                                       restart_errored=False)
    else:
        param_space, tune_config = setup.tune_config(to_train, options, root, planned)
        from ablations.experiment.fail_fast import FailAlike

        # trials failing alike stop the run; the reference's rule only where this run trains
        # every trial of it (a pilot's or a resumed run's reference has rows from before)
        reference_trials = {spec.name for spec in trials
                            if spec.name.rsplit("-seed", 1)[0] == options.reference}
        fresh_reference = (part.round_number == 1 and part.earlier_rows is None
                           and reference_trials <= {spec.name for spec in to_train})
        fail_alike = FailAlike(len(to_train), reference=options.reference,
                               reference_trials=len(reference_trials) if fresh_reference else 0)
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune_config,
            run_config=tune.RunConfig(
                name=part.tune_subdir,
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
                callbacks=[*([progress] if options.progress else []), *options.trackers,
                           *setup.callbacks(root, options), fail_alike],
                # the trial's stdout and stderr: files in its working directory, synced to
                # its folder beside the Tune results (tune/<trial>/stdout, stderr)
                log_to_file=True, sync_config=tune.SyncConfig(sync_artifacts=True),
            ),
        )
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
            grid = tuner.fit() if tuner is not None else []
        except Exception as error:  # noqa: BLE001 - re-raised unless trials ended
            grid = results_despite(error, tune_dir, state_before)
            if grid is None:
                raise
            metadata["tune_error"] = f"{type(error).__name__}: {first_line(error)}"
        finally:  # however fit ended (a second Ctrl-C raises from it)
            end_local_programs(options)
            if options.progress:  # a listener's bar of this fit is complete
                events.emit(events.FitEnded("status", "fit ended"))
    if fail_alike is not None and fail_alike.reason:
        events.warning(fail_alike.reason)
        metadata["stopped_early"] = fail_alike.reason
    metadata["driver_wall_s"] = time.monotonic() - started
    metadata["fit_s"] = time.time() - metadata["fit_started_at"]  # Tuner.fit alone
    collecting = time.monotonic()
    trials = setup.specs(grid, trials)
    result = collect_results(grid, trials, options, metadata, skipped, state_root=state_root,
                             round_number=part.round_number,
                             earlier_rows=part.earlier_rows, phase=part.phase,
                             reused=reused)
    metadata["collect_s"] = time.monotonic() - collecting  # the three tables read and written
    write_json_atomic(metadata, join(root, METADATA_FILE))  # with the driver's wall time
    if not result.trials["status"].isin(RESUMABLE_STATUSES).any():
        # Nothing left to resume: drop the per-trial state (final checkpoints stay in tune/).
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


def results_despite(error: Exception, tune_dir: str, state_before: Optional[tuple[str, Any]]
                    ) -> Optional[Any]:
    """When ``Tuner.fit`` raised after trials ended: their results, read from the state Tune
    saved during this run (``saved_results``), so that the tables of the trials that ended are
    written whatever Tune's last step did. None (the caller re-raises) if Tune saved no state
    during this run, no trial in it ended, or it cannot be read.

    The case seen: a Ray job's driver whose working directory was deleted under it (the job's
    working_dir, unpacked again by a second node's runtime-env agent that shares the head's
    temp dir); ``Tuner.fit`` ends with ``ExperimentAnalysis``, which needs ``os.getcwd()``
    (``saved_results``) and raised FileNotFoundError after every trial had ended ok."""
    try:
        state = tune_state_file(tune_dir)
        if state is None or state == state_before:
            return None
        with quiet_tune_logs():
            grid = saved_results(tune_dir, state)
        ended = any(trial_status(unpacked(result.metrics), result.error, None)[0]
                    not in UNFINISHED for result in grid)
    except Exception as unreadable:  # noqa: BLE001 - the caller re-raises ``error``
        logging.getLogger(__name__).warning(
            "Ray Tune raised %s: %s; the state it saved in %s could not be read either: %s",
            type(error).__name__, first_line(error), tune_dir, first_line(unreadable))
        return None
    if not ended:
        return None
    logging.getLogger(__name__).warning(
        "Ray Tune raised %s: %s after the trials ran; their results were read from the state "
        "it saved (%s)", type(error).__name__, first_line(error), state[0])
    return grid


def resume_counts(root: str, trials: Sequence[TrialSpec], *, retry_failed: bool = False,
                  num_samples: Optional[int] = None, tune_subdir: str = TUNE_SUBDIR
                  ) -> dict[str, int]:
    """What ``--resume`` will do with each trial of the experiment at ``root``, from Tune's
    saved state and the trials' own: ``finished`` (kept: ok, diverged, stopped), ``failed``
    (kept; with ``retry_failed`` counted in ``continue``), ``continue`` (resumes from its
    saved state) and ``start`` (from scratch). ``trials`` is the plan (empty for a search of
    ``num_samples`` trials)."""
    from ray.tune import Tuner

    from ablations.experiment.trainable import STATE_FILE, STATE_SUBDIR

    def saved(name: str) -> bool:  # the trainable resumes from this even if Tune never saw it
        return is_file(join(root, STATE_SUBDIR, name, STATE_FILE))

    tune_dir = join(root, tune_subdir)
    results = []
    if Tuner.can_restore(tune_dir):
        with quiet_tune_logs():  # by the state file's path: no working directory needed
            results = list(saved_results(tune_dir) or [])
    counts = {"finished": 0, "failed": 0, "continue": 0, "start": 0}
    for result in results:
        status, _, _ = trial_status(unpacked(result.metrics), result.error, None,
                                    may_stop_early=num_samples is not None)
        if status in (TrialStatus.FAILED, TrialStatus.TIMEOUT):
            counts["continue" if retry_failed else "failed"] += 1
        elif status == TrialStatus.INTERRUPTED or (status == TrialStatus.NOT_STARTED
                                                   and saved(result_name(result))):
            counts["continue"] += 1
        elif status == TrialStatus.NOT_STARTED:
            counts["start"] += 1
        else:
            counts["finished"] += 1
    known = {result_name(result) for result in results}
    # its rows outside Tune's run: taken from other experiments, or kept when the table grew
    table = read_table(join(root, TRIALS_FILE))
    ended = set(recorded_reused(root, tune_subdir)) | (set() if table is None else set(
        table.loc[table["status"].isin(REUSABLE), "trial_name"]))
    for spec in trials:  # not created in Tune before the stop
        if spec.name not in known:
            counts["finished" if spec.name in ended
                   else "continue" if saved(spec.name) else "start"] += 1
    if num_samples is not None:
        counts["start"] += max(0, num_samples - len(results))
    return counts


# ------------------------------------------------------------------------------------ helpers


def experiment_metadata(trials: Sequence[TrialSpec], options: RunOptions,
                        started_at: dt.datetime, skipped: Sequence[tuple[TrialSpec, str]],
                        planned: Sequence[TrialConfig] = ()) -> dict[str, Any]:
    """experiment.json's fields every design has; ``planned``: the configurations the
    trainable gets (a search's base), whose data the provenance covers too."""
    import ray

    configs = [spec.config for spec in trials] + [spec.config for spec, _ in skipped]
    provenance = collect(configs + list(planned))
    # A resume (the folder already holds an experiment) that found the code, data, packages or
    # device changed (the CLI refuses code/data changes without --allow-changed) keeps what
    # changed and the provenance it replaces.
    previous = read_metadata(experiment_dir(options)) or {}
    history = list(previous.get("resume_history", []))
    recorded_trackers = previous.get("log_to", [])
    blocking, notes = changes(previous.get("provenance"), provenance)
    if blocking or notes:
        replaced = {k: v for k, v in previous["provenance"].items() if k != "environment"}
        history.append({"at": started_at.isoformat(), "changed": blocking, "notes": notes,
                        "previous": replaced})
    return {
        "schema_version": SCHEMA_VERSION,  # results/io/files.py; read_metadata refuses others
        "experiment": options.name,
        "space": options.space,
        "reference": options.reference,
        "started_at": started_at.isoformat(),
        "command": options.command,
        "trials": trial_plan(trials),
        # the plan's order (JSON keeps "trials" sorted by name): the tables' order on a resume
        "trial_order": [spec.name for spec in trials],
        "skipped": skipped_plan(skipped),
        "hpo": None,  # a search's: designs/hpo.py
        "max_concurrent": options.max_concurrent,
        "max_failures": options.max_failures,
        "seeds": sorted({spec.seed for spec in trials}),
        "cpus_per_trial": options.cpus_per_trial,
        "gpus_per_trial": options.gpus_per_trial,
        "time_limit_s": options.time_limit_s,
        "address": options.address or "local",
        "torch_version": installed_torch(),
        "ray_version": ray.__version__,
        "python_version": platform.python_version(),
        "git_commit": git_commit_label(provenance["git"]),
        "hostname": platform.node(),
        "provenance": provenance,  # code, git, packages, device, data: provenance.py
        "resume_history": history,
        # every tracker that holds the experiment's logs: those recorded before (a resume's
        # trials go on logging to them) and this run's (trackers/specs.py)
        "log_to": [*recorded_trackers,
                   *[spec for spec in (spec.to_dict() for spec in options.tracker_specs)
                     if spec not in recorded_trackers]],
        # own code's metrics, name -> {direction, unit}: the verdicts' directions and the
        # report's units (results/io/directions.py); null for the built-in model and plugins
        "metrics": declared_metrics_of(configs),
    }


def declared_metrics_of(configs: Sequence[TrialConfig]) -> Optional[dict[str, Any]]:
    """What own code declares about its metrics, as experiment.json's ``metrics`` (None for
    the built-in model and plugins): what the analysis is given to read own code's metrics
    (ablations.results.io.directions.metric_of)."""
    codes = [config.own_code for config in configs if config.own_code is not None]
    if not codes:
        return None
    return {name: metric.record() for name, metric in codes[0].metrics.items()}

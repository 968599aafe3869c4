"""Build the Tuner for a list of trials, run it on a local or existing Ray, write the results.

This module runs an experiment: the options, Ray, the Tuner, resume and experiment.json.
Turning Tune's results into the three tables is ablations/collect.py; the HPO search (Optuna,
ASHA, best_config.yaml) is ablations/hpo_run.py; SIGTERM during ``Tuner.fit``, the resume
command and Tune's log filter are ablations/interrupt.py.

Layout of an experiment folder ``<storage>/<name>/``::

    experiment.json        what was run: space, trials, options, versions
    trials.parquet         one row per trial
    epochs.parquet         one row per trial per epoch
    predictions.parquet    one row per test sample per ok trial
    tune/                  Ray Tune's own state, checkpoints and logs (TensorBoard, CSV, JSON)
    trial_state/<trial>/   state.pt (resumable state) and history.json, until nothing is left to
                           resume
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from ablations.cluster import PROJECT_ROOT, check_cluster_address, runtime_env_for_cluster
from ablations.collect import RESUMABLE_STATUSES, collect_results, result_name, trial_status
from ablations.config import TrialConfig
from ablations.hpo_run import (
    BEST_CONFIG_FILE,  # noqa: F401  (re-exported: it was defined here)
    HPO_TRIAL,
    OPTUNA_FILE,  # noqa: F401  (re-exported: it was defined here)
    HpoSearch,
    _hpo_setup,
    _hpo_spec,
    _publish_optuna,
    fetch_optuna,
    optuna_upload,
    write_best_config,
)
from ablations.interrupt import _quiet_tune_logs, _sigterm_as_sigint
from results.io import (
    METADATA_FILE,
    delete_dir,
    is_file,
    is_uri,
    join,
    read_metadata,
    remove_stale_temp_files,
    write_json_atomic,
)
from search_spaces.spaces import TrialSpec

TUNE_SUBDIR = "tune"


@dataclass
class RunOptions:
    """How to run an experiment (not what: that is the list of trials)."""

    storage: Path | str  # results root (a path or a URI); the experiment goes in storage/name
    name: str
    space: str
    reference: str = "baseline"  # the variant the others are compared with
    address: Optional[str] = None  # None: start a local Ray; else an existing cluster
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int = 0  # 0: as many as resources allow
    max_failures: int = 0  # retries of a failed trial, each from its last checkpoint
    retry_failed: bool = False  # on resume: retry failed trials from their last checkpoint
    reuse_workers: bool = True  # False: a fresh process per trial (clean peak memory)
    dashboard: bool = True
    verbose: int = 0  # Ray Tune's own console output: 0 none, 1 status table, 2 every result
    progress: bool = True  # a line per finished trial, a status line with an ETA every 30 s
    progress_epochs: bool = False  # also a line per trial per epoch (--progress epochs)
    command: list[str] = field(default_factory=list)
    trackers: list[Any] = field(default_factory=list)  # Tune callbacks of --log-to (trackers.py)
    auto_batch: Optional[dict[str, Any]] = None  # what --auto-batch probed and chose


@dataclass
class RoundInfo:
    """One round of a ``--seeds auto`` experiment, as run_experiment needs it."""

    number: int  # 1 = the pilot
    tune_subdir: str  # Tune's folder of this round: tune (the pilot), tune-round2, ...
    earlier: list  # TrialSpecs of the earlier rounds (kept in experiment.json's trials)
    earlier_rows: Optional[tuple]  # (trials, epochs, predictions) rows of the earlier rounds
    record: dict  # experiment.json's "sequential": the design, the seeds, the rounds


@dataclass
class ExperimentResult:
    directory: Path | str  # a Path for a local experiment, the URI otherwise
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    wall_s: float = math.nan  # the driver's time in Tuner.fit


def experiment_dir(options: RunOptions) -> Path:
    storage = str(options.storage)
    if is_uri(storage):
        return join(storage, options.name)
    return str((Path(storage) / options.name).resolve())


def init_ray(options: RunOptions) -> tuple[bool, Optional[str]]:
    """Connect to or start Ray. Returns (whether this call started it and should stop it,
    the dashboard URL of a Ray it started, if any).

    Without an address, a private local Ray is started every time (``address="local"``): not
    the cluster ``ray start`` last left on this machine, nor one RAY_ADDRESS names.
    With one, the address is checked first (``check_cluster_address``: one line and no
    minute of retries when it is wrong).
    """
    import ray

    if ray.is_initialized():
        return False, None
    if options.address:
        check_cluster_address(options.address)
        ray.init(address=options.address, runtime_env=runtime_env_for_cluster(),
                 logging_level=logging.WARNING, log_to_driver=options.verbose > 0)
        return True, None
    # What the trials print (compiler autotune tables, deprecation warnings) stays in each
    # trial's stdout/stderr files (RunConfig.log_to_file), not on the console, unless --verbose.
    context = ray.init(address="local", include_dashboard=options.dashboard,
                       dashboard_host="127.0.0.1", logging_level=logging.WARNING,
                       log_to_driver=options.verbose > 0)
    url = getattr(context, "dashboard_url", None) if options.dashboard else None
    return True, url or None


def run_experiment(trials: Sequence[TrialSpec], options: RunOptions,
                   skipped: Sequence[tuple[TrialSpec, str]] = (), *,
                   hpo: Optional[HpoSearch] = None, resume: bool = False,
                   round_: Optional["RoundInfo"] = None) -> ExperimentResult:
    """Run ``trials`` (or an ``hpo`` search) with Ray Tune and write the experiment folder.

    ``round_``: one round of a ``--seeds auto`` experiment (ablations/rounds.py): its Tune
    folder, its number (the ``round`` column), the earlier rounds' trials and rows (kept in
    experiment.json and the Parquet files) and the design recorded in experiment.json.

    Uses the Ray already initialised in this process if there is one (tests do
    ``ray.init(num_cpus=2)``); else starts a local one, or connects to ``options.address``.
    With ``resume``, an interrupted experiment continues (``Tuner.restore``): finished trials
    are kept, unfinished ones continue from their last checkpoint, failed ones are retried
    from theirs if ``options.retry_failed``.
    """
    from ray import tune

    from ablations.cost import estimated_cost, longest_first
    from ablations.progress import Planned, TrialProgress
    from ablations.trainable import STATE_SUBDIR, trial_name, tune_trainable

    root = experiment_dir(options)
    if not is_uri(root):
        Path(root).mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(root)
    # Tune warns when it snapshots its experiment state after checkpoints in quick succession
    # (short trials ending together); the snapshot is a small file here.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    started_at = dt.datetime.now(dt.timezone.utc)
    metadata = _metadata(trials, options, started_at, skipped, hpo)
    if round_ is not None:
        metadata["trials"] = {**trial_plan(round_.earlier), **metadata["trials"]}
        metadata["seeds"] = sorted({spec.seed for spec in [*round_.earlier, *trials]})
        metadata["sequential"] = round_.record
    previous = read_metadata(root)
    metadata["auto_batch"] = options.auto_batch or (previous or {}).get("auto_batch")
    if (resume or (round_ is not None and round_.number > 1)) and previous is not None:
        metadata["started_at"] = previous.get("started_at", metadata["started_at"])
        metadata["resumed_at"] = [*previous.get("resumed_at", []),
                                  *([started_at.isoformat()] if resume else [])]
    write_json_atomic(metadata, join(root, METADATA_FILE))

    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    plan = {spec.name: spec.config.to_dict() for spec in trials}
    if hpo is not None:
        plan = {HPO_TRIAL: hpo.base.to_dict()}
    state_root = join(root, STATE_SUBDIR)
    trainable = tune.with_resources(
        tune.with_parameters(tune_trainable, plan=plan, state_root=state_root), resources)
    tune_dir = join(root, round_.tune_subdir if round_ else TUNE_SUBDIR)
    started = time.monotonic()
    planned = {spec.name: Planned(spec.config.optim.epochs, estimated_cost(spec.config))
               for spec in trials} if hpo is None else {}
    progress = TrialProgress(
        hpo.num_samples if hpo else len(trials), plan=planned, epochs=options.progress_epochs,
        default=Planned(hpo.base.optim.epochs, estimated_cost(hpo.base)) if hpo else None)
    if resume and tune.Tuner.can_restore(tune_dir):
        if hpo is not None:
            fetch_optuna(root, options.name, resume=True)  # from the bucket if not here
        with _quiet_tune_logs():
            tuner = tune.Tuner.restore(tune_dir, trainable=trainable, resume_unfinished=True,
                                       resume_errored=options.retry_failed,
                                       restart_errored=False)
    else:
        if hpo is not None:
            param_space, tune_config = _hpo_setup(hpo, options, root)
        else:
            # The grid holds names (readable in the progress table); configs go in `plan`.
            # Longest trials first: the short ones fill the slots at the end (ablations/cost.py).
            order = longest_first([spec.config for spec in trials],
                                  [planned[spec.name].cost for spec in trials])
            param_space = {"trial": tune.grid_search([trials[i].name for i in order])}
            tune_config = tune.TuneConfig(
                max_concurrent_trials=options.max_concurrent or None,
                # one worker process runs many trials (torch imported once), unless isolated
                reuse_actors=options.reuse_workers,
                trial_name_creator=trial_name,
                trial_dirname_creator=trial_name,
            )
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune_config,
            run_config=tune.RunConfig(
                name=round_.tune_subdir if round_ else TUNE_SUBDIR,
                storage_path=root,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),  # the final one only
                failure_config=tune.FailureConfig(max_failures=options.max_failures,
                                                  fail_fast=False),
                verbose=options.verbose,
                callbacks=[*([progress] if options.progress else []), *options.trackers,
                           *(optuna_upload(root, options.name) if hpo else [])],
                # the trial's stdout and stderr: files in its working directory, synced to
                # its folder beside the Tune results (tune/<trial>/stdout, stderr)
                log_to_file=True, sync_config=tune.SyncConfig(sync_artifacts=True),
            ),
        )
    metadata["fit_started_at"] = time.time()
    with _sigterm_as_sigint(options), _quiet_tune_logs():
        grid = tuner.fit()  # SIGINT/SIGTERM: Tune stops the trials, saves state, returns
    metadata["driver_wall_s"] = time.monotonic() - started
    if hpo is not None:
        trials = [_hpo_spec(result, hpo) for result in grid]
    result = collect_results(grid, trials, options, metadata, skipped, state_root=state_root,
                             round_=round_)
    write_json_atomic(metadata, join(root, METADATA_FILE))  # with the driver's wall time
    if hpo is not None:
        write_best_config(result.trials, hpo, root)
        _publish_optuna(root, options.name)
    if not result.trials["status"].isin(RESUMABLE_STATUSES).any():
        # Nothing left to resume: drop the per-trial state (final checkpoints stay in tune/).
        delete_dir(state_root)
    return result


def resume_counts(root: str, trials: Sequence[TrialSpec], *, retry_failed: bool = False,
                  num_samples: Optional[int] = None, tune_subdir: str = TUNE_SUBDIR
                  ) -> dict[str, int]:
    """What ``--resume`` will do with each trial of the experiment at ``root``, from Tune's
    saved state and the trials' own: ``finished`` (kept: ok, diverged, stopped), ``failed``
    (kept; with ``retry_failed`` counted in ``continue``), ``continue`` (resumes from its
    saved state) and ``start`` (from scratch). ``trials`` is the plan (empty for a search of
    ``num_samples`` trials)."""
    from ray.tune import ExperimentAnalysis, ResultGrid, Tuner

    from ablations.trainable import STATE_FILE, STATE_SUBDIR

    def saved(name: str) -> bool:  # the trainable resumes from this even if Tune never saw it
        return is_file(join(root, STATE_SUBDIR, name, STATE_FILE))

    tune_dir = join(root, tune_subdir)
    results = []
    if Tuner.can_restore(tune_dir):
        with _quiet_tune_logs():
            results = list(ResultGrid(ExperimentAnalysis(tune_dir)))
    counts = {"finished": 0, "failed": 0, "continue": 0, "start": 0}
    for result in results:
        status, _, _ = trial_status(dict(result.metrics or {}), result.error, None,
                                    hpo=num_samples is not None)
        if status == "failed":
            counts["continue" if retry_failed else "failed"] += 1
        elif status == "interrupted" or (status == "not_started" and saved(result_name(result))):
            counts["continue"] += 1
        elif status == "not_started":
            counts["start"] += 1
        else:
            counts["finished"] += 1
    known = {result_name(result) for result in results}
    for spec in trials:  # not created in Tune before the stop
        if spec.name not in known:
            counts["continue" if saved(spec.name) else "start"] += 1
    if num_samples is not None:
        counts["start"] += max(0, num_samples - len(results))
    return counts


# ------------------------------------------------------------------------------------ helpers


def _metadata(trials: Sequence[TrialSpec], options: RunOptions, started_at: dt.datetime,
              skipped: Sequence[tuple[TrialSpec, str]] = (),
              hpo: Optional[HpoSearch] = None) -> dict[str, Any]:
    import ray
    import torch

    from ablations.provenance import changes, collect, git_commit_label

    configs = [spec.config for spec in trials] + [spec.config for spec, _ in skipped]
    provenance = collect(configs + ([hpo.base] if hpo is not None else []), root=PROJECT_ROOT)
    # A resume (the folder already holds an experiment) that found the code, data, packages or
    # device changed (the CLI refuses code/data changes without --allow-changed) keeps what
    # changed and the provenance it replaces.
    previous = read_metadata(experiment_dir(options)) or {}
    history = list(previous.get("resume_history", []))
    blocking, notes = changes(previous.get("provenance"), provenance)
    if blocking or notes:
        replaced = {k: v for k, v in previous["provenance"].items() if k != "environment"}
        history.append({"at": started_at.isoformat(), "changed": blocking, "notes": notes,
                        "previous": replaced})
    return {
        "experiment": options.name,
        "space": options.space,
        "reference": options.reference,
        "started_at": started_at.isoformat(),
        "command": options.command,
        "trials": trial_plan(trials),
        "skipped": skipped_plan(skipped),
        "hpo": None if hpo is None else {
            "base": hpo.base.to_dict(), "space": {k: [kind, list(args) if isinstance(
                args, tuple) else args] for k, (kind, args) in hpo.space.items()},
            "num_samples": hpo.num_samples, "metric": hpo.metric, "mode": hpo.mode,
            "scheduler": hpo.scheduler,
        },
        "max_concurrent": options.max_concurrent,
        "max_failures": options.max_failures,
        "seeds": sorted({spec.seed for spec in trials}),
        "cpus_per_trial": options.cpus_per_trial,
        "gpus_per_trial": options.gpus_per_trial,
        "address": options.address or "local",
        "torch_version": torch.__version__,
        "ray_version": ray.__version__,
        "python_version": platform.python_version(),
        "git_commit": git_commit_label(provenance["git"]),
        "hostname": platform.node(),
        "provenance": provenance,  # code, git, packages, device, data: ablations/provenance.py
        "resume_history": history,
        "log_to": [tracker.spec.to_dict() for tracker in options.trackers],  # trackers.py
    }


def trial_plan(trials: Sequence[TrialSpec]) -> dict[str, dict[str, Any]]:
    """The trials as experiment.json keeps them: name -> resolved config."""
    return {spec.name: spec.config.to_dict() for spec in trials}


def skipped_plan(skipped: Sequence[tuple[TrialSpec, str]]) -> dict[str, dict[str, Any]]:
    return {spec.name: {"reason": reason, "config": spec.config.to_dict()}
            for spec, reason in skipped}


def plan_from_metadata(meta: dict[str, Any]
                       ) -> tuple[list[TrialSpec], list[tuple[TrialSpec, str]]]:
    """Rebuild the trials and skipped cells that experiment.json recorded."""
    def spec(name: str, values: dict[str, Any]) -> TrialSpec:
        config = TrialConfig.from_dict(values)
        return TrialSpec(name, config.ablation, config.seed, config)

    trials = [spec(name, values) for name, values in meta.get("trials", {}).items()]
    skipped = [(spec(name, item["config"]), item["reason"])
               for name, item in meta.get("skipped", {}).items()]
    return trials, skipped

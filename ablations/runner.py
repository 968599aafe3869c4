"""Build the Tuner for a list of trials, run it on a local or existing Ray, write the Parquet.

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

import contextlib
import datetime as dt
import logging
import math
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import pandas as pd

from ablations.cluster import PROJECT_ROOT, check_cluster_address, runtime_env_for_cluster
from ablations.config import TrialConfig
from ablations.provenance import trial_columns
from results.io import (
    EPOCHS_FILE,
    atomic_write,
    delete_dir,
    is_file,
    is_uri,
    join,
    read_bytes,
    read_metadata,
    remove_stale_temp_files,
    METADATA_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    write_json_atomic,
    write_parquet_atomic,
)
from results.schema import CONFIG_COLUMNS, EPOCH_COLUMNS, TRIAL_COLUMNS, column_names
from search_spaces.hpo import HPO_METRIC, HPO_MODE
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
    progress: bool = True  # one line per finished trial
    command: list[str] = field(default_factory=list)
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
                 logging_level=logging.WARNING)
        return True, None
    context = ray.init(address="local", include_dashboard=options.dashboard,
                       dashboard_host="127.0.0.1", logging_level=logging.WARNING)
    url = getattr(context, "dashboard_url", None) if options.dashboard else None
    return True, url or None


@dataclass
class HpoSearch:
    """An Optuna (TPE) search through Ray Tune's OptunaSearch, with an ASHA scheduler."""

    base: TrialConfig  # the configuration every sampled trial starts from
    space: dict[str, tuple[str, Any]]  # field -> (kind, args): see search_spaces/hpo.py
    num_samples: int
    metric: str = HPO_METRIC  # search_spaces/hpo.py
    mode: str = HPO_MODE
    scheduler: str = "asha"  # asha / fifo (no early stopping)


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

    from ablations.cost import longest_first
    from ablations.progress import TrialProgress
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
    if resume and tune.Tuner.can_restore(tune_dir):
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
            order = longest_first([spec.config for spec in trials])
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
                callbacks=[TrialProgress(hpo.num_samples if hpo else len(trials))]
                if options.progress else None,
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


# After SIGTERM, how long Tune may take to stop the trials and save its state (3-5 s measured
# on 2 busy cores) before the driver gives up on a Ray that the same signal stopped.
STOP_GRACE_S = 15.0
STOP_GRACE_ENV = "ABLATIONS_STOP_GRACE_S"  # overrides it (seconds)


def resume_command(storage: str, name: str, address: Optional[str] = None) -> str:
    """The command that continues experiment ``name`` (finished trials are kept)."""
    import shlex

    parts = ["python", "run_ablations.py", "--resume", "--name", name, "--storage", storage]
    if address:
        parts += ["--address", address]
    return shlex.join(parts)


@contextlib.contextmanager
def _sigterm_as_sigint(options: RunOptions) -> Iterator[None]:
    """While it is open, SIGTERM (what ``timeout``, batch schedulers and ``docker stop`` send)
    does what Ctrl-C does: inside ``Tuner.fit`` Tune's SIGINT handler stops the trials, saves
    the experiment state and returns; a second signal raises KeyboardInterrupt. Without it,
    the handler of Ray's core worker prints a native stack dump and aborts the driver.

    ``timeout`` and schedulers signal the whole process group, and the processes of a local
    Ray (which block SIGINT, not SIGTERM) stop too: Tune then waits a minute on the dead Ray
    before Ray aborts the driver. If the stop has not finished after ``STOP_GRACE_S``, the
    driver exits (130) with the resume command; the trials' saved state is kept (``--resume``
    continues from it and Tune's last periodic snapshot)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    finished = threading.Event()
    grace_s = float(os.environ.get(STOP_GRACE_ENV, STOP_GRACE_S))

    def give_up() -> None:
        if not finished.wait(grace_s):
            print(f"\nStopped; Ray did not answer within {grace_s:g} s (the signal "
                  "stopped it too), so no results were written. The trials' saved state is "
                  "kept; continue with: "
                  f"{resume_command(str(options.storage), options.name, options.address)}",
                  file=sys.stderr, flush=True)
            os._exit(130)

    def forward(signum: int, frame: Any) -> None:
        if options.address is None:  # only a local Ray can have died of the same signal; a
            # cluster's stop (trials saving, state syncing to storage) takes the time it takes
            threading.Thread(target=give_up, name="sigterm-grace", daemon=True).start()
        handler = signal.getsignal(signal.SIGINT)  # Tune's during fit, Python's outside it
        if not callable(handler):
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        finished.set()
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class _DropTuneLines(logging.Filter):
    """Drops Tune's log lines that mislead a CLI user: its resume hint (``Tuner.restore(...)``;
    the CLI prints its own ``--resume`` command) and, for trials that had not started, "Could
    not fetch metrics" (there is nothing to fetch)."""

    DROPPED = ("has been interrupted, but the most recent state was saved",
               "Failed to fetch metrics for")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.DROPPED)


_TUNE_LOGGERS = ("ray.tune.tune", "ray.tune.analysis.experiment_analysis")


@contextlib.contextmanager
def _quiet_tune_logs() -> Iterator[None]:
    drop = _DropTuneLines()
    for name in _TUNE_LOGGERS:
        logging.getLogger(name).addFilter(drop)
    try:
        yield
    finally:
        for name in _TUNE_LOGGERS:
            logging.getLogger(name).removeFilter(drop)


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


HPO_TRIAL = "hpo"
BEST_CONFIG_FILE = "best_config.yaml"
OPTUNA_FILE = "optuna.db"


def _optuna_file(root: str, name: str) -> Path:
    """The study's SQLite file: in the experiment folder, or for a URI root a local copy
    (SQLite needs a local file) that is uploaded beside the results at the end."""
    if not is_uri(root):
        return Path(root) / OPTUNA_FILE
    local = Path(tempfile.gettempdir()) / "ablation-runner" / name / OPTUNA_FILE
    local.parent.mkdir(parents=True, exist_ok=True)
    remote = join(root, OPTUNA_FILE)
    if is_file(remote) and not local.exists():  # resuming elsewhere: start from the upload
        local.write_bytes(read_bytes(remote))
    return local


def _publish_optuna(root: str, name: str) -> None:
    if is_uri(root):
        data = _optuna_file(root, name).read_bytes()
        atomic_write(join(root, OPTUNA_FILE), lambda handle: handle.write(data))


def _hpo_setup(hpo: HpoSearch, options: RunOptions, root: str) -> tuple[dict, Any]:
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    from ablations.trainable import trial_name

    params = {}
    for name, (kind, args) in hpo.space.items():
        if kind == "loguniform":
            params[name] = tune.loguniform(*args)
        elif kind == "uniform":
            params[name] = tune.uniform(*args)
        elif kind == "choice":
            params[name] = tune.choice(list(args))
        else:
            raise ValueError(f"unknown search kind {kind!r} for {name}")
    storage = optuna.storages.RDBStorage(f"sqlite:///{_optuna_file(root, options.name)}")
    searcher = OptunaSearch(study_name=options.name, storage=storage, seed=hpo.base.seed)
    scheduler = (
        ASHAScheduler(time_attr="training_iteration", max_t=hpo.base.epochs, grace_period=1,
                      reduction_factor=2)
        if hpo.scheduler == "asha" else FIFOScheduler()
    )
    tune_config = tune.TuneConfig(
        metric=hpo.metric, mode=hpo.mode, search_alg=searcher, scheduler=scheduler,
        num_samples=hpo.num_samples, max_concurrent_trials=options.max_concurrent or None,
        reuse_actors=True, trial_name_creator=trial_name, trial_dirname_creator=trial_name,
    )
    return {"trial": HPO_TRIAL, "params": params}, tune_config


def result_name(result: Any) -> str:
    """The trial's name: its directory, named by ``trial_dirname_creator``."""
    return Path(str(result.path)).name


def _hpo_spec(result: Any, hpo: HpoSearch) -> TrialSpec:
    from ablations.config import apply_overrides

    name = result_name(result)
    config = apply_overrides(hpo.base, {**result.config.get("params", {}), "ablation": HPO_TRIAL},
                             source="hpo sample")
    return TrialSpec(name, HPO_TRIAL, config.seed, config)


def write_best_config(trials_df: pd.DataFrame, hpo: HpoSearch, root: str) -> Optional[str]:
    """The best trial's configuration as a YAML file that ``--config`` accepts."""
    import yaml

    done = trials_df[trials_df["status"] == "ok"]
    if done.empty:
        return None
    best = done.sort_values(hpo.metric, ascending=hpo.mode == "min").iloc[0]
    keys = [k for k in TrialConfig.__dataclass_fields__
            if k not in ("ablation", "seed", "data_dir", "num_threads", "device",
                         "compile_requested", "precision_requested", "inject_failure_at_epoch",
                         "inject_oom_above_batch")]
    default = TrialConfig()
    values = {k: _plain(best[k]) for k in keys
              if k in hpo.space or _plain(best[k]) != getattr(default, k)}
    header = (f"# Best of {len(trials_df)} trials of {hpo.num_samples} ({hpo.metric} "
              f"{_plain(best[hpo.metric]):.4f}, trial {best['trial_name']}).\n"
              f"# python run_ablations.py --space components --config {BEST_CONFIG_FILE}\n")
    text = header + yaml.safe_dump(values, sort_keys=True)
    return atomic_write(join(root, BEST_CONFIG_FILE), lambda handle: handle.write(text.encode()))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def collect_results(grid: Any, trials: Sequence[TrialSpec], options: RunOptions,
                    metadata: dict[str, Any],
                    skipped: Sequence[tuple[TrialSpec, str]] = (), *,
                    state_root: Optional[str] = None,
                    round_: Optional["RoundInfo"] = None) -> ExperimentResult:
    """Turn Tune's ResultGrid into the three tables and write them atomically; a later round
    of a ``--seeds auto`` experiment appends its rows to the earlier rounds'."""
    root = experiment_dir(options)
    by_name = {spec.name: spec for spec in trials}
    position = {spec.name: i for i, spec in enumerate(trials)}
    trial_rows, epoch_frames, prediction_frames = [], [], []
    # In the plan's order (the space's table), not the order the trials ran in (longest first).
    for result in sorted(grid, key=lambda r: position.get(result_name(r), len(position))):
        spec = by_name[result_name(result)]
        metrics = dict(result.metrics or {})
        history = _history(result, state_root)
        row = _trial_row(spec, metrics, result.error, history, options, metadata)
        trial_rows.append(row)
        if history is not None and len(history) and "epoch" in history:
            epoch_frames.append(_epoch_rows(spec, history, options))
        if row["status"] == "ok" and result.checkpoint is not None:
            predictions = _read_predictions(result.checkpoint)
            if predictions is not None:
                prediction_frames.append(_with_keys(predictions, spec, options))

    ran = {result_name(result) for result in grid}
    for spec in trials:  # stopped (Ctrl-C, SIGTERM) before Tune created the trial
        if spec.name not in ran:
            trial_rows.append(_trial_row(spec, {}, None, None, options, metadata))
    for spec, reason in skipped:  # cells that could not run here: a row with the reason
        row = _trial_row(spec, {}, None, None, options, metadata)
        row.update(status="skipped", failure_reason="conflict", error=reason,
                   round=1)  # skipped when the pilot was planned
        trial_rows.append(row)
    names = [spec.name for spec in trials] + [spec.name for spec, _ in skipped]
    rows = pd.DataFrame(trial_rows)
    rows["round"] = rows["round"].fillna(round_.number if round_ else 1) if "round" in rows \
        else (round_.number if round_ else 1)
    trials_df = _order(rows, names)
    epochs_df = (
        pd.concat(epoch_frames, ignore_index=True) if epoch_frames
        else pd.DataFrame(columns=column_names(EPOCH_COLUMNS))
    )
    predictions_df = (
        pd.concat(prediction_frames, ignore_index=True) if prediction_frames
        else pd.DataFrame(columns=["experiment", "trial_name", "ablation", "seed", "sample_index",
                                   "target", "pred_mean", "pred_std"])
    )
    if round_ is not None and round_.earlier_rows is not None:
        trials_df, epochs_df, predictions_df = (
            _after(earlier, frame, names) for earlier, frame in
            zip(round_.earlier_rows, (trials_df, epochs_df, predictions_df)))
    write_parquet_atomic(epochs_df, join(root, EPOCHS_FILE))
    write_parquet_atomic(predictions_df, join(root, PREDICTIONS_FILE))
    write_parquet_atomic(trials_df, join(root, TRIALS_FILE))  # last: its presence = complete
    return ExperimentResult(root if is_uri(root) else Path(root), trials_df, epochs_df,
                            predictions_df, wall_s=metadata.get("driver_wall_s", math.nan))


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


def _error_line(error: BaseException) -> str:
    """The last line of an error's text: ``Type: message`` without Ray's traceback."""
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    return line[:500]


def _nan_if_missing(metrics: dict[str, Any], key: str) -> float:
    value = metrics.get(key)
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


# Trials a resume continues (interrupted; failed with --retry-failed) or starts (not_started);
# while any is left, trial_state/ is kept.
RESUMABLE_STATUSES = ("failed", "interrupted", "not_started")


def trial_status(metrics: dict[str, Any], error: Optional[BaseException],
                 history: Optional[pd.DataFrame], *, hpo: bool = False
                 ) -> tuple[str, Optional[str], Optional[str]]:
    """(status, error, failure_reason) of a trial from its last result and error.

    A trial Tune did not finish (no ``done`` in its last result: the run was stopped by
    Ctrl-C or SIGTERM) is ``interrupted`` if it recorded an epoch, else ``not_started``."""
    if error is not None:
        message = _error_line(error)
        reason = "oom" if "TrialOutOfMemory" in message or "oom:" in message else "error"
        return "failed", message, reason
    if metrics.get("status") == "diverged":
        return "diverged", str(metrics.get("error", "non-finite loss")), "non-finite-loss"
    if metrics.get("status") == "ok" and "test_mae" in metrics:
        return "ok", None, None
    if not metrics.get("done"):
        started = (history is not None and len(history) > 0) or "training_iteration" in metrics
        return ("interrupted" if started else "not_started"), None, None
    if metrics.get("status") == "ok" and hpo:
        return "stopped", "stopped early by the scheduler", "early-stopped"
    return "failed", "trial ended without a final result", "error"


def _trial_row(spec: TrialSpec, metrics: dict[str, Any], error: Optional[BaseException],
               history: Optional[pd.DataFrame], options: RunOptions,
               metadata: dict[str, Any]) -> dict[str, Any]:
    status, message, reason = trial_status(metrics, error, history,
                                           hpo=spec.config.ablation == HPO_TRIAL)
    epochs_run = int(history["epoch"].max()) if history is not None and "epoch" in history \
        and history["epoch"].notna().any() else 0
    row: dict[str, Any] = {
        "experiment": options.name,
        "space": options.space,
        "trial_name": spec.name,
        "trial_id": str(metrics.get("trial_id", "")),
        "status": status,
        "failure_reason": reason,
        "error": message,
        "epochs_run": epochs_run,
    }
    for name, dtype, _ in TRIAL_COLUMNS:
        if dtype == "float64" and name not in row:
            row[name] = _nan_if_missing(metrics, name)
    # The trainer's steady-state figure (epochs after the first), not the last epoch's.
    row["train_samples_per_s"] = _nan_if_missing(metrics, "steady_train_samples_per_s")
    if math.isnan(row["wall_s"]):  # failed before the end: Tune's own clock
        row["wall_s"] = _nan_if_missing(metrics, "time_total_s")
    # Cost ledger: the resources the trial held for its wall time.
    held_s = row["wall_s"] if not math.isnan(row["wall_s"]) else 0.0
    row["cpu_hours"] = held_s * options.cpus_per_trial / 3600
    row["gpu_hours"] = held_s * options.gpus_per_trial / 3600
    row["device_used"] = metrics.get("device")
    for key in ("compile_used", "optimizer_used", "precision_used"):
        row[key] = metrics.get(key)
    for key in ("oom_retries", "final_micro_batch", "final_accum_steps", "resumed_from_epoch",
                "eval_batch_used", "compiled_graphs",
                "torch_threads"):
        value = metrics.get(key)
        row[key] = int(value) if value is not None and value == value else None
    row.update(trial_columns(metadata.get("provenance"), spec.config))  # data_source, ...
    row["device_name"] = metrics.get("device_name")
    for key in ("torch_version", "ray_version", "python_version", "git_commit"):
        row[key] = metadata[key]
    row.update(spec.config.to_dict())
    return row


def _history(result: Any, state_root: Optional[str]) -> Optional[pd.DataFrame]:
    """The trial's per-epoch metrics. From the trainable's history file, which keeps every
    epoch across restarts and is read without loading weights (a GPU trial's state needs no
    CUDA on the driver); else Tune's result log, which a restarted trial begins anew."""
    from ablations.trainable import read_history

    state_dir = join(state_root, result_name(result)) if state_root else None
    history = read_history(state_dir, result.checkpoint)
    if history:
        return pd.DataFrame(history)
    return result.metrics_dataframe


def _epoch_rows(spec: TrialSpec, history: pd.DataFrame, options: RunOptions) -> pd.DataFrame:
    history = history[history["epoch"].notna()]
    keys = ("experiment", "trial_name", "ablation", "seed")
    frame = pd.DataFrame(index=history.index)
    for name, dtype, _ in EPOCH_COLUMNS:
        if name not in keys:
            frame[name] = history[name] if name in history else math.nan
    frame = _with_keys(frame.reset_index(drop=True), spec, options)
    for name, dtype, _ in EPOCH_COLUMNS:
        if dtype == "int64" and name not in keys:
            frame[name] = frame[name].astype("Int64")
    return frame[column_names(EPOCH_COLUMNS)].drop_duplicates(["trial_name", "epoch"], keep="last")


def _with_keys(frame: pd.DataFrame, spec: TrialSpec, options: RunOptions) -> pd.DataFrame:
    frame = frame.copy()
    frame.insert(0, "seed", spec.seed)
    frame.insert(0, "ablation", spec.variant)
    frame.insert(0, "trial_name", spec.name)
    frame.insert(0, "experiment", options.name)
    return frame


def _read_predictions(checkpoint: Any) -> Optional[pd.DataFrame]:
    from ablations.trainable import PREDICTIONS_FILE as CKPT_PREDICTIONS

    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, CKPT_PREDICTIONS)
        if not os.path.exists(path):
            return None
        return pd.read_parquet(path)


def _after(earlier: pd.DataFrame, frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The earlier rounds' rows (those of this round's trials dropped: a resumed round
    rewrites them), then this round's."""
    earlier = earlier[~earlier["trial_name"].isin(names)]
    if earlier.empty:
        return frame
    if frame.empty:
        return earlier.reset_index(drop=True)
    return pd.concat([earlier, frame], ignore_index=True)


def _order(frame: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Rows in the order of the plan; documented columns first, then the config columns."""
    frame = frame.set_index("trial_name").loc[names].reset_index()
    first = column_names(TRIAL_COLUMNS)
    head = ["experiment", "space", "trial_name", "trial_id", "ablation", "seed"]
    rest = [c for c in first if c not in head]
    config = [c for c in CONFIG_COLUMNS if c not in head]
    frame = frame[head + rest + config]
    for name, dtype, _ in TRIAL_COLUMNS:
        if dtype == "int64":
            frame[name] = frame[name].astype("Int64")  # nullable: skipped/failed rows
    return frame

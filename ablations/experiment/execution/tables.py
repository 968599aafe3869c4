"""Turn Ray Tune's results into the experiment's three tables and write them.

``collect_results`` reads each trial's last result, error, per-epoch history and final
checkpoint and writes ``trials.parquet``, ``epochs.parquet`` and ``predictions.parquet``
(schema: results/io/schema.py); ``trial_status`` names how a trial ended. ``saved_results`` reads
Tune's results from the state file it saved, opened by its full path: it does not need the
process's working directory, which Tune's own analysis does (see its docstring).
"""

from __future__ import annotations

import fnmatch
import math
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from ablations.config.comparison import DEFAULT_METRIC
from ablations.config.statuses import TrialStatus
from ablations.experiment.provenance.provenance import trial_columns
from ablations.experiment.execution.reported import unpacked, unpacked_frame
from ablations.experiment.provenance.trial_store import MIXED, Reused, row_key, trained_packages
from ablations.results.io.files import (
    EPOCHS_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    filesystem,
    is_uri,
    join,
    write_parquet_atomic,
)
from ablations.results.io.schema import EPOCH_COLUMNS, TRIAL_COLUMNS, column_names
from ablations.results.stats.seed_ties import seed_tied_column
from ablations.search_spaces.spaces import TrialSpec

from ablations.experiment.core.options import ExperimentResult, RunOptions, experiment_dir

HPO_TRIAL = "hpo"  # the ablation (and trainable plan key) of a search's sampled trials
# In a trial's rows of Tune's result log beside what own code reported: Tune's own keys
# (ray.tune.result.AUTO_RESULT_KEYS and ``done``) and the final result's record
# (ablations/trial/own_code.py).
NOT_REPORTED = frozenset({"training_iteration", "time_total_s", "time_this_iter_s", "pid",
                          "timestamp", "time_since_restore", "iterations_since_restore",
                          "timesteps_total", "timesteps_since_restore", "episodes_total",
                          "done", "final", "epochs_run", "resumed_from_epoch", "wall_s"})


def collect_results(grid: Any, trials: Sequence[TrialSpec], options: RunOptions,
                    metadata: dict[str, Any],
                    skipped: Sequence[tuple[TrialSpec, str]] = (), *,
                    state_root: Optional[str] = None,
                    round_number: int = 1, earlier_rows: Optional[tuple] = None,
                    phase: str = "evaluation", reused: Optional[Reused] = None
                    ) -> ExperimentResult:
    """Turn Tune's ResultGrid into the three tables and write them atomically.
    ``round_number``: trials.parquet's ``round``; ``phase``: its ``phase``; ``earlier_rows``:
    the (trials, epochs, predictions) rows of earlier runs kept before these (a later round of
    ``--seeds auto``, a later stage of a tuned ablation); ``reused``: the rows of planned
    trials taken from other experiments (trial_store.py) where Tune did not run them."""
    root = experiment_dir(options)
    by_name = {spec.name: spec for spec in trials}
    position = {spec.name: i for i, spec in enumerate(trials)}
    trial_rows, epoch_frames, prediction_frames = [], [], []
    # In the plan's order (the space's table), not the order the trials ran in (longest first).
    for result in sorted(grid, key=lambda r: position.get(result_name(r), len(position))):
        spec = by_name[result_name(result)]
        metrics = unpacked(result.metrics)
        history = _history(result, state_root)
        row = trial_row(spec, metrics, result.error, history, options, metadata)
        trial_rows.append(row)
        if history is not None and len(history) and "epoch" in history:
            epoch_frames.append(_epoch_rows(spec, history, options))
        if row["status"] == TrialStatus.OK and result.checkpoint is not None:
            predictions = _read_predictions(result.checkpoint)
            if predictions is not None:
                prediction_frames.append(_with_keys(predictions, spec, options))

    ran = {result_name(result) for result in grid}
    taken = set() if reused is None or reused.trials.empty else reused.names - ran
    if taken:
        trial_rows += reused.trials[reused.trials["trial_name"].isin(taken)].to_dict("records")
        epoch_frames += [frame[frame["trial_name"].isin(taken)] for frame in (reused.epochs,)
                         if "trial_name" in frame]
        prediction_frames += [frame[frame["trial_name"].isin(taken)]
                              for frame in (reused.predictions,) if "trial_name" in frame]
    for spec in trials:  # stopped (Ctrl-C, SIGTERM) before Tune created the trial
        if spec.name not in ran and spec.name not in taken:
            trial_rows.append(trial_row(spec, {}, None, None, options, metadata))
    for spec, reason in skipped:  # cells that could not run here: a row with the reason
        row = trial_row(spec, {}, None, None, options, metadata)
        row.update(status=TrialStatus.SKIPPED, failure_reason="conflict", error=reason,
                   round=1)  # skipped when the pilot was planned
        trial_rows.append(row)
    names = [spec.name for spec in trials] + [spec.name for spec, _ in skipped]
    rows = pd.DataFrame(trial_rows)
    rows["round"] = rows["round"].fillna(round_number) if "round" in rows else round_number
    rows["phase"] = phase
    rows["seed_tied"] = False  # over the whole table below, earlier rounds' rows with it
    rows["outputs_dir"] = [outputs_dir(root, name) for name in rows["trial_name"]]
    trials_df = _order(rows, names)
    epochs_df = (
        pd.concat(epoch_frames, ignore_index=True) if epoch_frames
        else pd.DataFrame(columns=column_names(EPOCH_COLUMNS))
    )
    predictions_df = (
        pd.concat(prediction_frames, ignore_index=True) if prediction_frames
        else pd.DataFrame(columns=["experiment", "trial_name", "ablation", "dataset", "seed",
                                   "sample_index", "target", "pred_mean", "pred_std"])
    )
    if earlier_rows is not None:
        trials_df, epochs_df, predictions_df = (
            _after(earlier, frame, names) for earlier, frame in
            zip(earlier_rows, (trials_df, epochs_df, predictions_df)))
    trials_df["seed_tied"] = seed_tied_column(
        trials_df, (metadata.get("planned") or {}).get("metric") or DEFAULT_METRIC).astype(
        "boolean")
    write_parquet_atomic(epochs_df, join(root, EPOCHS_FILE))
    write_parquet_atomic(predictions_df, join(root, PREDICTIONS_FILE))
    write_parquet_atomic(trials_df, join(root, TRIALS_FILE))  # last: its presence = complete
    return ExperimentResult(root if is_uri(root) else Path(root), trials_df, epochs_df,
                            predictions_df, wall_s=metadata.get("driver_wall_s", math.nan))


# Ray Tune's saved state in its experiment folder: TuneController.CKPT_FILE_TMPL, one file per
# run of the folder (a restore writes a new one); Tune restores from the greatest name.
TUNE_STATE_FILES = "experiment_state-*.json"


def tune_state_file(tune_dir: str) -> Optional[tuple[str, Any]]:
    """The state file Ray Tune last saved in ``tune_dir`` (the one it restores from) as (its
    full path or URI, its modification time); None if there is none."""
    import pyarrow.fs as pafs

    fs, target = filesystem(tune_dir)
    found = [info for info in fs.get_file_info(pafs.FileSelector(target, allow_not_found=True))
             if fnmatch.fnmatch(info.base_name, TUNE_STATE_FILES)]
    if not found:
        return None
    newest = max(found, key=lambda info: info.base_name)
    return join(tune_dir, newest.base_name), newest.mtime


def saved_results(tune_dir: str, state: Optional[tuple[str, Any]] = None) -> Optional[Any]:
    """Tune's results (a ``ResultGrid``) as Tune saved them in ``tune_dir``, or from ``state``
    (``tune_state_file``'s answer); None if Tune saved none.

    The state file is opened by its full path. ``ExperimentAnalysis(tune_dir)``, which
    ``Tuner.fit`` builds at its end, first lists the folder with
    ``ray.train._internal.storage._list_at_fs_path``, which calls ``os.path.relpath`` on paths
    stripped of their leading "/" and so ``os.getcwd()``: it raises FileNotFoundError when the
    process's working directory no longer exists. A Ray job's driver runs in the job's unpacked
    working_dir, which another node's runtime-env agent can delete and unpack again while the
    driver runs (docs/cluster.md)."""
    from ray.tune import ExperimentAnalysis, ResultGrid

    state = state or tune_state_file(tune_dir)
    if state is None:
        return None
    return ResultGrid(ExperimentAnalysis(state[0]))


# ------------------------------------------------------------------------------------ helpers


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


# Trials a resume continues (interrupted; failed or timed out with --retry-failed) or starts
# (not_started); while any is left, trial_state/ is kept.
RESUMABLE_STATUSES = (TrialStatus.FAILED, TrialStatus.TIMEOUT, TrialStatus.INTERRUPTED,
                      TrialStatus.NOT_STARTED)


def trial_status(metrics: dict[str, Any], error: Optional[BaseException],
                 history: Optional[pd.DataFrame], *, may_stop_early: bool = False
                 ) -> tuple[TrialStatus, Optional[str], Optional[str]]:
    """(status, error, failure_reason) of a trial from its last result and error.
    ``may_stop_early``: the trial ran under a scheduler that stops trials early (a search's
    sample), so a done trial without a final result was stopped, not failed.

    A trial Tune did not finish (no ``done`` in its last result: the run was stopped by
    Ctrl-C or SIGTERM) is ``interrupted`` if it recorded an epoch, else ``not_started``."""
    if error is not None:
        message = _error_line(error)
        if "TrialTimeout: " in message:  # ablations/trial/time_limit.py: its words alone
            return TrialStatus.TIMEOUT, message.split("TrialTimeout: ", 1)[1], "time-limit"
        reason = "oom" if "TrialOutOfMemory" in message or "oom:" in message else "error"
        return TrialStatus.FAILED, message, reason
    if metrics.get("status") == TrialStatus.DIVERGED:
        return (TrialStatus.DIVERGED, str(metrics.get("error", "non-finite loss")),
                str(metrics.get("failure_reason", "non-finite-loss")))  # or exploded
    if metrics.get("status") == TrialStatus.OK and ("test_mae" in metrics
                                                    or metrics.get("final")):
        return TrialStatus.OK, None, None
    if not metrics.get("done"):
        started = (history is not None and len(history) > 0) or "training_iteration" in metrics
        return (TrialStatus.INTERRUPTED if started else TrialStatus.NOT_STARTED), None, None
    if metrics.get("status") == TrialStatus.OK and may_stop_early:
        return TrialStatus.STOPPED, "stopped early by the scheduler", "early-stopped"
    return TrialStatus.FAILED, "trial ended without a final result", "error"


def trial_row(spec: TrialSpec, metrics: dict[str, Any], error: Optional[BaseException],
               history: Optional[pd.DataFrame], options: RunOptions,
               metadata: dict[str, Any]) -> dict[str, Any]:

    status, message, reason = trial_status(metrics, error, history,
                                           may_stop_early=spec.config.ablation == HPO_TRIAL)
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
    # the code and data its final result was trained with (trial_store.run_labels)
    for key in ("code_fingerprint", "data_fingerprint"):
        if metrics.get(key):
            row[key] = metrics[key]
    row["device_name"] = metrics.get("device_name")
    for key in ("torch_version", "ray_version", "python_version", "git_commit"):
        row[key] = metadata[key]
    code = spec.config.own_code
    if code is not None:  # own code's metrics: the declared ones, then what it returned
        for name in [*code.metrics, *filter(None, str(metrics.get("own_metrics", "")).split(","))]:
            row[name] = _nan_if_missing(metrics, name)
    row.update(spec.config.flat())
    # the seeds the trial drew from; data_seed: the draw's, not the configured base
    row.update(spec.config.seeds.columns())
    # none for a trial whose epochs ran on different code or data (trainable.py)
    row["trial_key"] = None if metrics.get(MIXED) else row_key(
        spec.config, row, metadata, options, packages=trained_packages(metrics))
    row["reused_from"] = ""
    return row


def outputs_dir(root: str, trial_name: str) -> Optional[str]:
    """The working folder a command's trial ran in and what its program wrote there
    (ablations/trial/work_folder.py), where the experiment's storage is local and it exists;
    else None."""
    from ablations.experiment.execution.trainable import OUTPUTS_SUBDIR

    if is_uri(root):
        return None
    folder = os.path.join(root, OUTPUTS_SUBDIR, str(trial_name))
    return os.path.abspath(folder) if os.path.isdir(folder) else None


def _history(result: Any, state_root: Optional[str]) -> Optional[pd.DataFrame]:
    """The trial's per-epoch metrics. From the trainable's history file, which keeps every
    epoch across restarts and is read without loading weights (a GPU trial's state needs no
    CUDA on the driver); else Tune's result log, which a restarted trial begins anew."""
    from ablations.experiment.execution.trainable import read_history

    state_dir = join(state_root, result_name(result)) if state_root else None
    history = read_history(state_dir, result.checkpoint)
    if history:
        return pd.DataFrame(history)
    return unpacked_frame(result.metrics_dataframe)  # Tune's result.json, every report


def _epoch_rows(spec: TrialSpec, history: pd.DataFrame, options: RunOptions) -> pd.DataFrame:
    history = history[history["epoch"].notna()]
    keys = ("experiment", "trial_name", "ablation", "dataset", "seed")
    frame = pd.DataFrame(index=history.index)
    for name, dtype, _ in EPOCH_COLUMNS:
        if name not in keys:
            frame[name] = history[name] if name in history else math.nan
    own = [] if spec.config.own_code is None else [
        name for name in history.columns if name not in frame and name not in keys
        and name not in NOT_REPORTED and pd.api.types.is_numeric_dtype(history[name])]
    for name in own:  # own code's curves: every number it reported
        frame[name] = history[name]
    frame = _with_keys(frame.reset_index(drop=True), spec, options)
    for name, dtype, _ in EPOCH_COLUMNS:
        if dtype == "int64" and name not in keys:
            frame[name] = frame[name].astype("Int64")
    return frame[column_names(EPOCH_COLUMNS) + own].drop_duplicates(["trial_name", "epoch"],
                                                                    keep="last")


def _with_keys(frame: pd.DataFrame, spec: TrialSpec, options: RunOptions) -> pd.DataFrame:
    frame = frame.copy()
    frame.insert(0, "seed", spec.seed)
    frame.insert(0, "dataset", spec.config.dataset)
    frame.insert(0, "ablation", spec.variant)
    frame.insert(0, "trial_name", spec.name)
    frame.insert(0, "experiment", options.name)
    return frame


def _read_predictions(checkpoint: Any) -> Optional[pd.DataFrame]:
    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, PREDICTIONS_FILE)  # the checkpoint's copy
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
    """Rows in the order of the plan; documented columns first, then the config columns (the
    keys of ``TrialConfig.flat()``: a plugin's own switches are columns too)."""
    frame = frame.set_index("trial_name").loc[names].reset_index()
    first = column_names(TRIAL_COLUMNS)
    head = ["experiment", "space", "trial_name", "trial_id", "ablation", "dataset", "seed"]
    rest = [c for c in first if c not in head]
    config = [c for c in frame.columns if c not in {*head, *first}]
    frame = frame[head + rest + config]
    for name, dtype, _ in TRIAL_COLUMNS:
        if dtype == "int64":
            frame[name] = frame[name].astype("Int64")  # nullable: skipped/failed rows
    return frame


def result_name(result: Any) -> str:
    """The trial's name: its directory, named by ``trial_dirname_creator``."""
    return Path(str(result.path)).name


def plain_value(value: Any) -> Any:
    """A NumPy scalar as the Python value (YAML, JSON)."""
    return value.item() if hasattr(value, "item") else value

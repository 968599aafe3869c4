"""The columns of the three Parquet files, documented in one place.

``results/README.md`` renders these tables (:func:`render_markdown`; its other parts are
:mod:`ablations.results.io.readme_text`'s); a test checks that the files written by a real run
have every column listed here, and that the README lists every column.
"""

from __future__ import annotations

import functools

from ablations.config import TrialConfig
from ablations.trial.divergence import EXPLOSION_FACTOR
from ablations.results.io.readme_text import (
    FOLDER_TEXT,
    PROVENANCE_TEXT,
    markdown_table,
    returned_tables_text,
)
from ablations.results.io.table_columns import (  # noqa: F401 (imported from here too)
    ACROSS_COLUMNS,
    COMPARE_COLUMNS,
    SEQUENTIAL_COLUMNS,
    SPENT_COLUMNS,
    VERDICT_COLUMNS,
)
from ablations.results.io.directions import metric_direction

# (name, dtype, description). Config columns of trials.parquet come from TrialConfig's fields.
TRIAL_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name (the folder name)"),
    ("space", "string", "search space the trial belongs to, e.g. components"),
    ("trial_name", "string",
     "unique within the experiment: <ablation>-seed<seed>; over several datasets "
     "<dataset>.<ablation>-seed<seed>"),
    ("trial_id", "string", "Ray Tune's trial id"),
    ("status", "string",
     "ok / failed / diverged / timeout (past --time-limit) / stopped (early, hpo) / skipped / "
     "interrupted / not_started"),
    ("failure_reason", "string",
     "oom / error / non-finite-loss / exploded / time-limit / early-stopped / conflict; null "
     "when ok"),
    ("error", "string", "one-line error for failed, diverged and timed-out trials, else null"),
    ("init_seed", "int64",
     "seed of torch's generator: weight initialisation and dropout (`seed` + `seed_offset`, "
     "or the held value when `seed_sources` holds init; docs/seed-sources.md)"),
    ("order_seed", "int64",
     "seed of each epoch's order of the training samples (`seed` + `seed_offset`, or held)"),
    ("data_seed", "int64",
     "seed of the data draw (synthetic set, split, caps, normalisation sample): the config's "
     "`data_seed`, plus `seed` when `seed_sources` has data"),
    ("round", "int64",
     "round of a `--seeds auto` experiment the trial ran in: 1 = the pilot (every trial of a "
     "fixed-seed experiment), k = the seeds look k added (experiment.json `rounds`)"),
    ("seed_tied", "boolean",
     "every ok seed of this trial's arm (two or more) gave the same value of the verdicts' "
     "metric: no seed variance was measured, so the arm gets no verdict (a program that sets "
     "its own seed, or a coarse metric; results/stats/seed_ties.py)"),
    ("outputs_dir", "string",
     "the working folder a command's trial ran in, with what its program wrote there (a model "
     "saved under a fixed name), kept after the experiment; null for other code and for "
     "remote storage (ablations/trial/work_folder.py)"),
    ("phase", "string",
     "evaluation (a trial of the ablation table, at the configuration given) / search (a "
     "sampled trial of a search space) / tuning (a search trial of a `--tune-each` arm) / "
     "tuned (a `--tune-each` arm evaluated at its own best configuration; docs/tuned.md)"),
    ("epochs_run", "int64", "epochs completed"),
    ("resumed_from_epoch", "int64",
     "0: trained in one go; k: the last run of the trial resumed after epoch k (resume, retry)"),
    ("train_loss", "float64", "last epoch's mean training loss (NLL or MSE, standardised units)"),
    ("val_loss", "float64", "last epoch's validation loss, same units as train_loss"),
    ("val_mae", "float64", "last epoch's validation MAE, km"),
    ("val_rmse", "float64", "validation RMSE, km"),
    ("val_r2", "float64", "validation coefficient of determination"),
    ("val_nll", "float64", "validation Gaussian NLL per sample in km units (null: point head)"),
    ("val_coverage_90", "float64", "share of val targets inside the central 90% interval"),
    ("test_mae", "float64", "test MAE after the last epoch, km"),
    ("test_rmse", "float64", "test RMSE, km"),
    ("test_r2", "float64", "test coefficient of determination"),
    ("test_nll", "float64", "test Gaussian NLL per sample, km units (null: point head)"),
    ("test_coverage_90", "float64", "share of test targets inside the central 90% interval"),
    ("val_mae_mean_predictor", "float64",
     "validation MAE, km, of the trivial predictor: the training targets' mean for every "
     "sample (the explosion rule's reference; from the targets alone, no pass over the data)"),
    ("val_rmse_mean_predictor", "float64", "validation RMSE, km, of the same predictor"),
    ("test_mae_mean_predictor", "float64",
     "test MAE, km, of the same predictor: the baseline check's skill is 1 − test_mae / this"),
    ("test_rmse_mean_predictor", "float64", "test RMSE, km, of the same predictor"),
    ("wall_s", "float64",
     "trial wall time inside the worker: data, model, training, evaluation; a resumed trial "
     "adds the time of its runs before the resume"),
    ("cpu_hours", "float64", "cost ledger: wall_s x CPUs the trial held, in hours"),
    ("gpu_hours", "float64",
     "cost ledger: wall_s x GPUs the trial held (fractions count), in hours"),
    ("train_samples_per_s", "float64",
     "steady-state training samples/s: median over epochs, the first (compiling) step excluded"),
    ("mean_epoch_s", "float64", "mean seconds per epoch, training and validation"),
    ("torch_threads", "int64", "torch intra-op threads the trial ran with (= its CPUs)"),
    ("started_at", "float64", "Unix time the trial's training function started in its worker"),
    ("compile_s", "float64", "first training step's time above a steady step's (compile, warm-up)"),
    ("peak_mem_mb", "float64",
     "peak memory of the trial: CUDA max_memory_allocated on GPU; on CPU the worker process's "
     "peak RSS during the trial, which includes what a reused worker already held (the systems "
     "space runs each trial in a fresh process)"),
    ("peak_mem_train_mb", "float64",
     "peak memory while training (same measure as peak_mem_mb): what checkpointing saves"),
    ("peak_mem_eval_mb", "float64",
     "peak memory while evaluating (eval_batch_size samples at once)"),
    ("peak_mem_reserved_mb", "float64",
     "CUDA max_memory_reserved of the trial (the previous trial's cache is released first; "
     "null on CPU)"),
    ("eval_batch_used", "int64",
     "evaluation batch that ran: eval_batch_size, halved for each out-of-memory error in "
     "evaluation"),
    ("device_used", "string", "cpu / cuda"),
    ("device_name", "string",
     "the device the trial ran on, as its worker saw it: CUDA device name, or the CPU model"),
    ("compile_used", "string",
     "compile mode that ran (OOM recovery with accumulation leaves a CUDA-graph mode for the "
     "mode without graphs; a resumed trial keeps it)"),
    ("compiled_graphs", "int64",
     "graphs torch.compile built during the trial (0 with compile on: it ran eager)"),
    ("precision_used", "string",
     "precision that ran: `precision`, or what --resolve-conflicts mapped it to on the trial's "
     "GPU (bf16/tf32 need compute capability 8.0)"),
    ("optimizer_used", "string", "AdamW kernel that ran: fused / foreach / single"),
    ("oom_retries", "int64", "times the trial ran out of memory and halved its micro-batch"),
    ("final_micro_batch", "int64",
     "micro-batch at the end (batch_size / grad_accum_steps at first)"),
    ("final_accum_steps", "int64", "gradient accumulation steps at the end"),
    ("data_source", "string",
     "the data directory, or synthetic:<cache key> (the synthetic set's spec and generator)"),
    ("data_fingerprint", "string",
     "short hash of the data's fingerprint (experiment.json provenance.data; file sizes, hashes "
     "of table.parquet and of sampled image bytes); a resume refuses changed data"),
    ("code_fingerprint", "string",
     "16 hex of the sha256 of the code the trial was trained with: the runner's source "
     "(experiment.json provenance.code) and, for own code, the researcher's files "
     "(provenance.own_code) together; trials of a resume with --allow-changed keep the "
     "code they ran on"),
    ("trial_key", "string",
     "32 hex: the identity of what the trial computed (its resolved configuration, seeds, "
     "data and code fingerprints, Python, torch and numpy versions, CPUs/GPUs per trial and "
     "isolation); a later experiment under the same storage reuses an ok or diverged trial "
     "with the same key; empty for a model plugin or a notebook's function, whose code is not "
     "fingerprinted"),
    ("reused_from", "string",
     "experiment/trial whose numbers this row took instead of training (the trial store); "
     "empty where the trial was trained in this experiment"),
    ("torch_version", "string", "the driver's installed torch (its distribution's version, = torch.__version__)"),
    ("ray_version", "string", "ray.__version__ in the driver"),
    ("python_version", "string", "Python version in the driver"),
    ("git_commit", "string",
     "commit of this code, with -dirty if tracked files differed from it (experiment.json "
     "provenance.git has the diff's hash), null outside git"),
]

EPOCH_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name"),
    ("trial_name", "string", "as in trials.parquet"),
    ("ablation", "string", "variant name"),
    ("dataset", "string", "the dataset the trial trained on (its name; docs/datasets.md)"),
    ("seed", "int64", "trial seed"),
    ("epoch", "int64", "1-based epoch"),
    ("train_loss", "float64", "mean training loss of the epoch"),
    ("val_loss", "float64", "validation loss"),
    ("val_mae", "float64", "validation MAE, km"),
    ("val_rmse", "float64", "validation RMSE, km"),
    ("val_r2", "float64", "validation R²"),
    ("val_nll", "float64", "validation Gaussian NLL, km units (null: point head)"),
    ("val_coverage_90", "float64", "validation 90% interval coverage (null: point head)"),
    ("lr", "float64", "learning rate at the end of the epoch"),
    ("epoch_s", "float64",
     "seconds for the epoch, training and validation (on GPU with the OOM snapshot's host copy)"),
    ("train_s", "float64", "seconds of training in the epoch"),
    ("train_samples_per_s", "float64",
     "training throughput of the epoch (epoch 1: first step excluded)"),
    ("micro_batch", "int64", "micro-batch size in this epoch"),
    ("accum_steps", "int64", "gradient accumulation steps in this epoch"),
    ("reported_at", "float64", "Unix time the epoch's result was reported"),
]

PREDICTION_COLUMNS: list[tuple[str, str, str]] = [
    ("experiment", "string", "experiment name"),
    ("trial_name", "string", "as in trials.parquet"),
    ("ablation", "string", "variant name"),
    ("dataset", "string", "the dataset the trial trained on (its name; docs/datasets.md)"),
    ("seed", "int64", "trial seed"),
    ("sample_index", "int64", "row of the sample in the dataset (table.parquet order)"),
    ("target", "float64", "true target, km"),
    ("pred_mean", "float64", "predicted mean, km"),
    ("pred_std", "float64", "predicted standard deviation, km (null: point head)"),
]
# Plus one column per stratum of the data, named ``stratum_<column>``: for the synthetic set
# stratum_regime, stratum_speed_px_per_frame, stratum_blob_sigma_px; for a file dataset every
# column of table.parquet other than target, split and scalar_*.

@functools.cache
def config_columns() -> tuple[str, ...]:
    """The config columns of the built-in model's trials: TrialConfig.flat(). A plugin's
    trials have its own switches in place of the built-in model's (cnn_widths ... dropout)."""
    return tuple(TrialConfig().flat())


def column_names(columns: list[tuple[str, str, str]]) -> list[str]:
    return [name for name, _, _ in columns]


def numeric_trial_columns() -> list[str]:
    """The numeric columns of trials.parquet: the measured ones and the built-in model's
    numeric config columns (booleans are switches, not numbers)."""
    config = [name for name, value in TrialConfig().flat().items()
              if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return [name for name, dtype, _ in TRIAL_COLUMNS if dtype in ("int64", "float64")] + config


def _directions() -> str:
    """Which way is better for each measured numeric column, from results/io/directions.py."""
    measured = [name for name in numeric_trial_columns() if name not in config_columns()]
    words = {-1: "lower is better", +1: "higher is better", 0: "no direction"}
    groups = {d: [f"`{n}`" for n in measured if metric_direction(n) == d] for d in words}
    return "\n".join(f"- {words[d]}: {', '.join(names)}" for d, names in groups.items() if names)


def render_markdown() -> str:
    """The text of results/README.md (``python -m ablations.results.io.schema`` rewrites the file)."""
    return "\n".join([FOLDER_TEXT, _trials_section(), _epochs_section(), _predictions_section(),
                      PROVENANCE_TEXT, returned_tables_text()])


def _trials_section() -> str:
    """trials.parquet's columns, its config columns, seeds and compile modes, then its
    statuses and its metrics' units and directions."""
    config = ", ".join(f"`{c}`" for c in config_columns())
    return "\n".join([f"""## trials.parquet

{markdown_table(TRIAL_COLUMNS)}
| `ablation`, `seed`, ... | | every config key (`TrialConfig.flat()`, `ablations/config/trial.py`) is a column too, with the value the trial ran with; `model` is the model plugin ("" = the built-in model) |

Config columns: {config}. With a model plugin, its own switches stand in place of the built-in
model's (`cnn_widths` ... `dropout`). Fault-injection keys (tests) are not columns.

`seed` is the pairing key (the same seeds for every variant); `seed_sources` says which sources
of randomness vary with it (default `init,order,data`; a source left out is held at seed 0, `init=K`
holds it at seed K) and `init_seed`, `order_seed`, `data_seed` hold the seeds each source drew
from (docs/seed-sources.md).

`compile` and `precision` hold what the trial started with; `compile_requested` and
`precision_requested` what was asked for (the same values unless `--resolve-conflicts` mapped
them); `compile_used` the mode that ran at the end (an out-of-memory recovery that needs
gradient accumulation moves a CUDA-graph mode to its mode without graphs).
""", _statuses_text(), _metrics_text()])


def _statuses_text() -> str:
    """What each value of trials.parquet's ``status`` means."""
    return f"""Status: `ok` (trained all epochs, test metrics present); `failed` (raised; `error` holds the
last line of the exception, `failure_reason` is `oom` when it ran out of memory even at the
smallest micro-batch, else `error`; `epochs_run` the epochs it finished); `diverged` (a
failure that training causes, not retried: a non-finite training or validation loss, where the
trial stops, `failure_reason` `non-finite-loss`; or an explosion, `failure_reason` `exploded`:
the final epoch's `val_mae` above {EXPLOSION_FACTOR:g} × `val_mae_mean_predictor`, a model that
much worse than predicting the training mean has blown up; the rule is applied after the last
epoch, never stops training, and the trial keeps its test metrics (its test predictions stay in
its checkpoint, not in predictions.parquet); docs/verdicts.md, "What counts as diverged", has
the runs that chose the factor); `timeout` (this run of the trial passed its time limit,
`--time-limit`, a space file's `time_limit:` or `Resources(time_limit=...)`; a program is ended
with its whole tree and `error` holds its last output, code that reports epochs ends after the
epoch that passed it; `failure_reason` `time-limit`; no outcome, like `failed`, and
`--resume --retry-failed` runs it again from its last saved epoch); `skipped` (a
cell of a sweep that cannot run on this device or data, e.g. a CUDA-graph compile mode on CPU;
`error` holds the reason; nothing ran); `stopped` (an `hpo` trial the ASHA scheduler stopped
early; no test metrics). Failed and diverged trials keep their row; the other trials go on.
When a run is stopped (Ctrl-C, SIGTERM), the trials it had not finished are `interrupted` (it
ran at least one epoch; `epochs_run` says how many; `--resume` continues it from its last saved
epoch) or `not_started` (no epoch ran; `--resume` starts it); neither is a failure (no
`failure_reason`, no `error`), and the analysis excludes both, as it excludes every status but
`ok`.
"""


def _metrics_text() -> str:
    """The metrics' units, and which way is better for each numeric column."""
    return f"""Metrics are in target units (km) except the losses, which are in standardised units (the model
trains on a standardised target). NLL is the Gaussian negative log-likelihood per sample,
`0.5·log(2π·σ²) + (y−μ)²/(2σ²)`, with μ and σ in km; it and the coverage are null for the
`point` head (no variance is made up).

Verdicts on a column (`report --metric`) say `worse`/`better` where it has a direction
(`results/io/directions.py`), `higher`/`lower` where it has none:

{_directions()}

The numeric config columns (`seed`, `epochs`, ...) are settings, not results: no direction.
Own code's metrics have the direction and unit its code declared (experiment.json's
`metrics`). The analysis functions take the metric as a `Metric(name, direction, unit)`
(`ablations.contract.Metric`), or as a column's name, read as the built-in model's column
above; `metric_of(name, declared)` (`results/io/directions.py`) gives a column's `Metric`
from an experiment's declared metrics.
"""


def _epochs_section() -> str:
    """epochs.parquet's columns."""
    return f"""## epochs.parquet

{markdown_table(EPOCH_COLUMNS)}
"""


def _predictions_section() -> str:
    """predictions.parquet's columns, the strata's among them."""
    return f"""## predictions.parquet

{markdown_table(PREDICTION_COLUMNS)}
| `stratum_<column>` | as in the data | one column per stratum of the data: for the synthetic set `stratum_regime`, `stratum_speed_px_per_frame`, `stratum_blob_sigma_px`; for a file dataset every column of `table.parquet` other than `target`, `split` and `scalar_*` |

`sample_index` is the row of the sample in the dataset, so a sample can be matched across trials
(every trial of an experiment sees the same data and the same test split).
"""


if __name__ == "__main__":
    from pathlib import Path

    target = Path(__file__).parents[1] / "README.md"
    target.write_text(render_markdown())
    print(f"wrote {target}")

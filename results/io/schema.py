"""The columns of the three Parquet files, documented in one place.

``results/README.md`` renders these tables; a test checks that the files written by a real run
have every column listed here, and that the README lists every column.
"""

from __future__ import annotations

import functools

from ablations.config import TrialConfig
from ablations.trial.divergence import EXPLOSION_FACTOR
from ablations.results.io.table_columns import (  # noqa: F401 (VERDICT_COLUMNS: imported from here too)
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
     "fixed-seed experiment), k = the seeds look k added (experiment.json `sequential`)"),
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


def _table(columns: list[tuple[str, str, str]]) -> str:
    rows = ["| column | type | meaning |", "|---|---|---|"]
    rows += [f"| `{name}` | {dtype} | {text} |" for name, dtype, text in columns]
    return "\n".join(rows)


def render_markdown() -> str:
    """The text of results/README.md (``python -m ablations.results.io.schema`` rewrites the file)."""
    config = ", ".join(f"`{c}`" for c in config_columns())
    return f"""# Results: the experiment folder and its Parquet schema

Every run writes `<storage>/<experiment>/` (default storage: `./ablation_results`):

| file | one row per |
|---|---|
| `trials.parquet` | trial (variant × seed), whatever its status |
| `epochs.parquet` | trial × epoch: the learning curves |
| `predictions.parquet` | test sample × ok trial |
| `experiment.json` | (JSON) `schema_version` (1: the layout described here; another, or none, is refused when read), what was run: space, every trial's resolved config (and `trial_order`, the plan's order, which the tables keep after a resume), skipped cells, command, and `provenance` (below); `planned`: the reference, metric, margin and α the verdicts are decided on, recorded before the first trial, and for a fixed-seed ablation table the sequential design it is the pilot look of (`design`, and `seeds`: the seed order up to `--max-seeds`; results/stats/planned.py); for `--seeds auto`, `sequential`: the design (looks, α shares), the seed order, the metric, margin and α the rounds decided on, every cell up to `--max-seeds` (`plan`) and each round's trials and Tune folder (`rounds`); for `--tune-each`, `tuned`: the keys, their ranges, the budget per arm, the tuning seed, each arm's best values and best tuning trial, and the stages that ended with their trials (docs/tuned.md); timings of the last run: `driver_wall_s` (planning to the end of Tune), `fit_s` (Tune's `fit` alone), `collect_s` (the three tables read and written), and `cluster_cpus` |
| `tune/` | Ray Tune's own state, each trial's final checkpoint, TensorBoard/CSV/JSON logs (`--seeds auto`: the pilot's; round k's in `tune-round<k>/`; `--tune-each`: the table at the configuration given; each arm's search in `tune-tuning-<arm>/`, the arms at their own best in `tune-tuned/`) |
| `optuna.db` | the Optuna studies (SQLite) of a search space, or one per arm (`<experiment>-<arm>`) of `--tune-each` |
| `baseline_check.json` | (JSON) the reference checked before the verdicts (`results/stats/baseline_check.py`, docs/verdicts.md "The baseline check"), written at the end of a run with verdicts: `reference`, `seeds`, its mean `test_mae`, `test_mae_mean_predictor`, `skill` (1 − their ratio), `epochs`, `last_epoch_fall` (median share by which the validation MAE fell in the last epoch), `learned` (skill ≥ `skill_floor`), `converged` (fall ≤ `still_falling_share`), `passed`, and the `line` printed above the verdicts |
| `trial_state/` | each trial's resumable state after its last saved epoch (`state.pt`) and its per-epoch metrics (`history.json`), while the experiment can still be resumed (removed when every trial ended ok, diverged, stopped or skipped) |

Files are written atomically (a temporary file in the same folder, fsync, rename): a crash
leaves either the previous file or the new one, never half of one. `trials.parquet` is written
last, so its presence means the other two are complete.

Read them with pandas:

```python
import pandas as pd
trials = pd.read_parquet("ablation_results/<experiment>/trials.parquet")
ok = trials[trials.status == "ok"]
ok.groupby("ablation")["test_mae"].agg(["mean", "std", "count"])
```

or `results.read_experiment(path)`, which returns the three tables and names a missing file.

This file is `results/io/schema.py` rendered (`python -m ablations.results.io.schema`); a test checks that a
real run writes every column and that this file is up to date.

## trials.parquet

{_table(TRIAL_COLUMNS)}
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

Status: `ok` (trained all epochs, test metrics present); `failed` (raised; `error` holds the
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

Metrics are in target units (km) except the losses, which are in standardised units (the model
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

## epochs.parquet

{_table(EPOCH_COLUMNS)}

## predictions.parquet

{_table(PREDICTION_COLUMNS)}
| `stratum_<column>` | as in the data | one column per stratum of the data: for the synthetic set `stratum_regime`, `stratum_speed_px_per_frame`, `stratum_blob_sigma_px`; for a file dataset every column of `table.parquet` other than `target`, `split` and `scalar_*` |

`sample_index` is the row of the sample in the dataset, so a sample can be matched across trials
(every trial of an experiment sees the same data and the same test split).

## experiment.json: provenance

`provenance` holds what is needed to trust and repeat the experiment (`ablations/experiment/provenance.py`);
it is written when the experiment starts and replaced at every resume:

| key | what |
|---|---|
| `code` | `sha256` of the source that runs: every `.py` file of `model/`, `ablations/`, `search_spaces/`, `results/` and `run_ablations.py`, by path and content (a git checkout or not) |
| `own_code` | the researcher's code a command or training function runs (null for the built-in model): `root` (the folder), `files` (path -> 16 hex of its sha256: the `.py` files of the folder the experiment starts in, and the files the command line names; a function outside it: its package), `sha256`, `truncated`, `packages` (the installed packages those `.py` files import -> version: part of a trial's identity); a resume names the files that changed |
| `git` | `commit`; `dirty` (tracked files differ from the commit); `diff_sha256` (sha256 of the bytes of `git diff HEAD --binary`, null when clean); `untracked` (names of untracked files git does not ignore, the first 100; their contents are not read: an untracked source file is covered by `code`); null outside a git checkout |
| `packages` | versions of Python, torch, ray, numpy, pandas, pyarrow, optuna, scipy |
| `environment` | every installed distribution and its version (a freeze) |
| `device` | the driver's: CPU model, hostname, CUDA device names and compute capabilities (the device each trial ran on is `device_name` in trials.parquet) |
| `data` | per data source (`data_source`): for a file dataset the files' sizes and mtimes, `images.npy`'s shape and dtype, the sha256 of `table.parquet` and of the bytes of 64 samples of `images.npy` picked with a fixed seed (at most 256 KiB of each; the file is never read whole); for the synthetic set its spec and cache key; for own code (`own code`) `files`, the files its trials name that are not code (a command line's words and a configuration's string values that are existing files) -> 16 hex of their sha256 (a file over 64 MiB: its start, middle and end), and `words`, each such word -> the file it names (a trial's `data_fingerprint` covers the files its own words name). `fingerprint`: a short hash of all but the mtimes |

A resume (`--resume`, or the same `--name` with the same plan) compares the recorded `code` and
`data` fingerprints with the current ones and refuses to continue when one changed, unless
`--allow-changed`; mtimes and the commit as such are not compared (a copy of the same bytes is
the same data; a commit that changes only docs or tests changes no code that runs).
`resume_history` has one entry per resume that found a difference: when (`at`), `changed` (code
or data: the resume had `--allow-changed`), `notes` (git commit or diff, package versions,
device) and the `previous` provenance (without `environment`).
`grown` has one entry per time a finished table took new variants under its name
(docs/resume.md): when (`at`), the Tune folder of its new trials (`tune`), `variants_before`,
`added`, the trials `kept` and `trials_added`, and the space's name before and after
(`space_before`, `space`).

## Verdict tables (returned, not written)

The verdicts are computed from the files, not stored. `experiment_verdicts(directory)`
(`results/stats/decisions.py`) gives an experiment's verdict table as its design decided it:
the sequential table for a `--seeds auto` run and for a fixed run that is the pilot look of its
planned design, else the fixed-design table, on the settings experiment.json recorded.
`verdict_table(trials)` (`results/stats/verdicts.py`, also in `ablations.results.stats.analysis`) gives
the fixed-design verdicts of a trials table: on a `--seeds auto` experiment's trials these are
not the verdicts its rounds decided. `<metric>` is the metric's name (`test_mae_mean` for the
default metric); Δ is variant − reference, paired by seed. The table's `.attrs` hold the metric, reference, margin
(as given and as tested), `relative`, α, direction and the metric's unit.

{_table(VERDICT_COLUMNS)}

The sequential table (`sequential_verdict_table`, `results/stats/sequential_table.py`) reports
each arm's columns from the look that decided it, else the last look it reached, and adds these
columns (and `design`, `seeds`, `sequential` and `diff_ci` = `"repeated"` to `.attrs`):

{_table(SEQUENTIAL_COLUMNS)}

`compute_spent(trials, max_seeds)`, what the rounds of `--seeds auto` held against a fixed design:

{_table(SPENT_COLUMNS)}

`compare_experiments(a, b)` (`results/stats/compare.py`, the `compare` subcommand) has, per
variant in both, these columns and `test` ... `margin`, `verdict`, `reason` as in the verdict
table, with Δ = B − A and a percentage margin taken of the variant's own mean in A:

{_table(COMPARE_COLUMNS)}

An experiment over several datasets (docs/datasets.md): its verdict table is each dataset's,
one below the other, with a `dataset` column first; `across_datasets.parquet` (written by the
run and by `report`; `ablations.results.stats.decisions.across_datasets_of(trials, meta)` computes it)
has one row per variant, its verdict across the datasets:

{_table(ACROSS_COLUMNS)}
"""


if __name__ == "__main__":
    from pathlib import Path

    target = Path(__file__).parents[1] / "README.md"
    target.write_text(render_markdown())
    print(f"wrote {target}")
